"""``lore_startup`` and ``lore_shutdown``: when the gateway calls them, that it awaits what they
return, and what a raising implementation does (docs/hooks.md, "Lifecycle")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lore_core import hookimpl
from lore_core.gateway import Gateway
from lore_core.interfaces import LoreApp


class Lifecycle:
    def __init__(self, fail_at: str = "") -> None:
        self.events: list[tuple[str, bool]] = []
        self.fail_at = fail_at

    async def _note(self, event: str, app: LoreApp) -> None:
        await asyncio.sleep(0)  # really awaited, not just called
        self.events.append((event, app.store_open))
        if event == self.fail_at:
            raise RuntimeError(f"{event} failed")

    @hookimpl
    def lore_startup(self, app):
        return self._note("startup", app)

    @hookimpl
    def lore_shutdown(self, app):
        return self._note("shutdown", app)


class Quiet:
    """Implementations may take fewer arguments and return ``None``."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl
    def lore_startup(self):
        self.calls.append("startup")

    @hookimpl
    def lore_shutdown(self):
        self.calls.append("shutdown")


def load(lore_env, tmp_path, *plugins: object) -> Gateway:
    # No entry points: the in-memory store, and no embedding model loading in the background.
    return Gateway.load(env=lore_env, cwd=tmp_path, load_entrypoints=False, extra_plugins=plugins)


def test_startup_and_shutdown_are_awaited_while_the_store_is_open(lore_env, tmp_path):
    plugin, quiet = Lifecycle(), Quiet()
    gateway = load(lore_env, tmp_path, plugin, quiet)

    async def run() -> None:
        await gateway.start()
        assert plugin.events == [("startup", True)]
        await gateway.stop()

    asyncio.run(run())
    assert plugin.events == [("startup", True), ("shutdown", True)]
    assert quiet.calls == ["startup", "shutdown"]
    assert not gateway.writer.opened


def test_a_failing_startup_stops_the_gateway_from_starting(lore_env, tmp_path):
    gateway = load(lore_env, tmp_path, Lifecycle(fail_at="startup"))

    async def run() -> None:
        try:
            with pytest.raises(RuntimeError, match="startup failed"):
                await gateway.start()
        finally:
            await gateway.stop()

    asyncio.run(run())


def test_a_failing_shutdown_still_closes_the_store_then_propagates(lore_env, tmp_path):
    gateway = load(lore_env, tmp_path, Lifecycle(fail_at="shutdown"))

    async def run() -> None:
        await gateway.start()
        with pytest.raises(RuntimeError, match="shutdown failed"):
            await gateway.stop()

    asyncio.run(run())
    assert not gateway.writer.opened


def test_the_server_gives_the_gateways_stop_its_whole_budget(lore_env, tmp_path):
    """hypercorn's lifespan shutdown (60 s by default) ran out while the store was still
    closing after long saturated runs: the server waits as long as the gateway may take."""
    from lore_core.http.serve import hypercorn_config

    Path(lore_env["LORE_CONFIG"]).write_text('{"server": {"shutdownGraceSeconds": 45}}')
    gateway = load(lore_env, tmp_path)
    config = hypercorn_config(gateway, "127.0.0.1:0")
    assert config.graceful_timeout == 45
    assert config.shutdown_timeout == gateway.stop_budget_seconds() > 2 * 45
