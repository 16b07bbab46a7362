"""pytest fixtures for Lore and its plugins (installed as the ``lore`` pytest plugin).

* ``fake_upstream``: a :class:`~lore_core.testing.fake_upstream.FakeUpstream` on loopback.
* ``lore_env``: an isolated environment (config, data and cache dirs under ``tmp_path``)
  with both upstreams pointed at the fake.
* ``start_gateway(config=None, env=None, extra_plugins=())``: a real gateway on a real
  socket, stopped at the end of the test.
* ``gateway``: ``start_gateway()`` with the defaults.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from lore_core.gateway import Gateway
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.server import ThreadedServer


def pytest_configure(config: pytest.Config) -> None:
    # Registered here, where every test run of the kernel and of each plugin alone loads it.
    config.addinivalue_line(
        "markers",
        "slow: takes seconds (fuzzing, kill -9, long sessions, installs); the everyday run "
        "leaves it out with -m 'not slow and not e2e', CI runs everything",
    )


@pytest.fixture
def fake_upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


@pytest.fixture
def lore_env(tmp_path: Path, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment for a gateway under test; also applied to ``os.environ`` for the test."""
    home = tmp_path / "home"
    env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        # Not named .lore.json: that marks a project's root (lore_core.projects), and the
        # tests' projects are folders under tmp_path.
        "LORE_CONFIG": str(tmp_path / "lore.json"),
        "LORE_UPSTREAM_ANTHROPIC": fake_upstream.url,
        "LORE_UPSTREAM_OPENAI": fake_upstream.url,
    }
    (tmp_path / "lore.json").write_text("{}")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def start_gateway(tmp_path: Path, lore_env: dict[str, str]) -> Iterator[Callable[..., ThreadedServer]]:
    servers: list[ThreadedServer] = []

    def start(
        config: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        extra_plugins: tuple[object, ...] = (),
    ) -> ThreadedServer:
        config_path = Path(lore_env["LORE_CONFIG"])
        config_path.write_text(json.dumps(dict(config or {})))
        gateway = Gateway.load(env={**lore_env, **(env or {})}, cwd=tmp_path, extra_plugins=extra_plugins)
        server = ThreadedServer(gateway).start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        server.stop()


@pytest.fixture
def gateway(start_gateway: Callable[..., ThreadedServer]) -> ThreadedServer:
    return start_gateway()
