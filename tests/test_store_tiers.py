"""The store's optional tiers are declared (``Store.tiers``) and the kernel goes by the
declaration: a store that declares a tier it does not implement stops at start-up with a
clear message, one that misses a member of its interface cannot be built, and a gateway on
a store with the messages alone proxies and stores while the routes of the other tiers say
the tier is unavailable (a 501 or 503 with the reason, never a 500). The store used below
refuses every call of a tier it does not declare: the kernel never makes one."""

from __future__ import annotations

import json
import logging
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from lore_core import hookimpl
from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import ConfigError, LoreConfig
from lore_core.interfaces import TIER_INTERFACES, Store, StoreTierError, Tier, VectorStore, check_tiers
from lore_core.plugins import Factory
from lore_core.storage.writer import choose_store
from lore_core.testing.conformance.store import MessagesConformance
from lore_core.testing.fake_upstream import FakeUpstream, Reply
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer

API_KEY = "sk-ant-api03-LoreTiersTestKey-" + "q4W8" * 8
MODEL = "claude-sonnet-test"


class MessagesOnlyStore(MemoryStore):
    """The reference store declaring none of the optional tiers; every member of those tiers
    fails the test loudly if the kernel calls it anyway."""

    name = "messages-only"
    tiers = frozenset()


def _refused(member: str) -> Callable[..., Any]:
    real = getattr(MemoryStore, member)

    def refuse(self: Store, *args: Any, **kwargs: Any) -> Any:
        if sys._getframe(1).f_globals.get("__name__") == MemoryStore.__module__:
            return real(self, *args, **kwargs)  # the memory store's own use of its parts (stats)
        raise AssertionError(f"the kernel called {member}, of a tier the {self.name} store does not declare")

    return refuse


for _interface in TIER_INTERFACES.values():
    for _member in [*_interface.__abstractmethods__, "vector_search", "optimize_vectors"]:
        if hasattr(_interface, _member):
            setattr(MessagesOnlyStore, _member, _refused(_member))


class TestMessagesOnlyStore(MessagesConformance):
    """The core suite alone passes for it: the tier suites are not the core's."""

    @pytest.fixture
    def make_store(self) -> Callable[[], Store]:
        return MessagesOnlyStore


class MessagesOnlyPlugin:
    @hookimpl
    def lore_register_stores(self, register: Callable[[Any], None]) -> None:
        register(MessagesOnlyStore)


def call(server: ThreadedServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """``method path`` of the gateway's own API, with its token: the status and the JSON."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {**api_headers(), "content-type": "application/json"}
    request = urllib.request.Request(server.url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_gateway_on_a_messages_only_store(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    server = start_gateway(
        config={"store": {"backend": "messages-only", "flushIntervalMs": 20}},
        extra_plugins=(MessagesOnlyPlugin(),),
    )
    client = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0)
    history: list[dict[str, Any]] = []
    for turn, reply in enumerate(["the kiwi parser is in src/kiwi.py", "it splits on commas"]):
        fake_upstream.enqueue(Reply(text=reply))
        history.append({"role": "user", "content": f"where is the kiwi parser? ({turn})"})
        answer = client.messages.create(model=MODEL, max_tokens=50, messages=history)
        assert answer.content[0].text == reply  # proxied
        history.append({"role": "assistant", "content": reply})

    # Stored, and read back: sessions, full-text search and recall (full-text only).
    status, sessions = call(server, "GET", "/lore/api/sessions")
    assert status == 200 and [s["message_count"] for s in sessions] == [4]
    status, hits = call(server, "GET", "/lore/api/search?q=kiwi")
    assert status == 200 and hits
    status, recalled = call(server, "GET", "/lore/api/recall?q=kiwi+parser")
    assert status == 200 and recalled["results"] and not recalled.get("error")
    status, projects = call(server, "GET", "/lore/api/projects")
    assert status == 200 and all(p["knowledge"] == 0 for p in projects)

    # The other tiers' routes say so, with the store's name and the tier.
    unavailable = {
        ("GET", "/lore/api/knowledge"): (503, "knowledge"),
        ("GET", "/lore/api/knowledge/k:0000000000000001"): (503, "knowledge"),
        ("GET", "/lore/api/entities"): (503, "entities"),
        ("GET", "/lore/api/distillations"): (503, "distillations"),
        ("GET", "/lore/api/runs"): (501, "event log"),
        ("GET", "/lore/api/runs/events?run=build"): (501, "event log"),
    }
    for (method, path), (code, tier) in unavailable.items():
        status, body = call(server, method, path)
        assert (status, body) == (code, {"error": f"the messages-only store has no {tier}"}), path
    event = {"run": "build", "events": [{"kind": "note", "content": "x"}]}
    status, body = call(server, "POST", "/v1/events", event)
    assert (status, body) == (503, {"error": "the messages-only store has no event log"})

    status, health = call(server, "GET", "/health")
    assert status == 200 and health["status"] == "ok"
    refused = [
        r for r in caplog.records if "does not declare" in r.getMessage() or r.levelno >= logging.ERROR
    ]
    assert not refused, [r.getMessage() for r in refused]


def test_a_store_declaring_a_tier_it_does_not_implement_stops_at_start_up() -> None:
    # Derived from Store alone, with every core member (the memory store's), and a
    # declaration of vectors: only the declaration is wrong.
    core = {member: getattr(MemoryStore, member) for member in Store.__abstractmethods__}
    braggart = type("Braggart", (Store,), {**core, "name": "braggart", "tiers": frozenset({Tier.VECTORS})})
    config = LoreConfig()
    config.store.backend = "braggart"
    with pytest.raises(ConfigError) as raised:
        choose_store(config, {"braggart": Factory("braggart", lambda _config: braggart())})
    assert str(raised.value) == (
        "store.backend: the braggart store (Braggart) declares tiers it does not implement: "
        "VECTORS (derive from VectorStore)"
    )
    assert issubclass(StoreTierError, TypeError)
    # The memory store declares every tier, and implements them.
    check_tiers(MemoryStore())
    assert set(MemoryStore.tiers) == set(Tier)


def test_a_store_missing_a_member_cannot_be_built() -> None:
    class Partial(Store, VectorStore):
        name = "partial"
        tiers = frozenset({Tier.VECTORS})

        async def write(self, batch: Any) -> int:
            return 0

    with pytest.raises(TypeError) as raised:
        Partial()  # type: ignore[abstract]
    missing = str(raised.value)
    assert "vector_stats" in missing and "search" in missing and "write," not in missing


def test_lore_commands_without_a_gateway_read_a_messages_only_store_through_the_routes(
    lore_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No gateway runs: a command calls the local API's routes in its own process, so a tier
    the store lacks is the route's answer (exit 3 with the reason), as through a gateway."""
    from lore_core import cli
    from lore_core.testing.net import free_port

    monkeypatch.setenv("LORE_STORE", "messages-only")
    monkeypatch.setenv("LORE_PORT", str(free_port()))  # no gateway answers there
    plugins = [MessagesOnlyPlugin()]

    assert cli.main(["sessions", "--json"], extra_plugins=plugins) == 0
    captured = capsys.readouterr()
    assert "reading the messages-only store directly" in captured.err
    assert json.loads(captured.out) == []
    for argv, tier in (
        (["distillations"], "distillations"),
        (["knowledge", "list", "--all"], "knowledge"),
        (["entity", "list", "--all"], "entities"),
    ):
        assert cli.main(argv, extra_plugins=plugins) == 3, argv
        assert f"lore: the messages-only store has no {tier}\n" in capsys.readouterr().err
