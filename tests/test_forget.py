"""``lore forget``: what the writer keeps out of a forgotten session when its client resends
the history, the mark that says so (kept with the amnesia ranges, across restarts and in the
journal's replay), and the gateway's forget through the local API: 404 for an unknown
session, nothing found afterwards, a resend storing only the new turn, the caches dropped.

The DuckDB store's side (no text left in any file) is ``plugins/store_duckdb/tests/
test_forget_duckdb.py``; the store contract, the conformance suite."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core import cli
from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import StoreConfig
from lore_core.storage.amnesia import STATE_KEY, Amnesia
from lore_core.storage.convert import records_from_exchange
from lore_core.storage.forget import HOLD, ForgetMark, drop_forgotten, forget_stored_session, mark_for
from lore_core.storage.journal import Journal
from lore_core.storage.writer import StoreWriter
from lore_core.testing.builders import answer, batch_of, exchange, text
from lore_core.testing.fake_upstream import FakeUpstream, Reply
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer

HISTORY = [text("user", "the zanzibarquux plan"), text("assistant", "yodelfrost"), text("user", "go on")]


def _ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


# -- what the writer drops ------------------------------------------------------------------


def test_a_resent_history_is_dropped_and_a_new_turn_kept() -> None:
    old = records_from_exchange(exchange(HISTORY, answer("the old answer"), at=100.0))
    mark = mark_for(old.messages, at=200.0)
    assert mark.before == 4
    resent = exchange([*HISTORY, text("assistant", "the old answer"), text("user", "a new question")],
                      answer("a new answer"), at=300.0)  # fmt: skip
    batch, dropped = drop_forgotten(records_from_exchange(resent), {"s-1": mark}.get, resent.started_at)
    assert dropped == 4
    assert [m.text for m in batch.messages] == ["a new question", "a new answer"]
    # The session's title (its first prompt) is not stored again.
    assert [s.title for s in batch.sessions] == [""]


def test_the_clients_own_form_of_a_forgotten_answer_is_dropped_too() -> None:
    """The client resends an answer without what the gateway stored of it (or regenerates
    it): another id, but it continues a forgotten message below the mark."""
    old = records_from_exchange(exchange(HISTORY, answer("the old answer, with its reasoning"), at=100.0))
    mark = mark_for(old.messages, at=200.0)
    resent = exchange([*HISTORY, text("assistant", "the old answer"), text("user", "next")], at=300.0)
    batch, dropped = drop_forgotten(records_from_exchange(resent), {"s-1": mark}.get, resent.started_at)
    assert [m.text for m in batch.messages] == ["next"] and dropped == 4
    # A new root (a history that shares nothing with the forgotten one: a compacted context,
    # a side request) is new content, stored.
    fresh = exchange([text("user", "a summary the client wrote")], at=300.0)
    batch, dropped = drop_forgotten(records_from_exchange(fresh), {"s-1": mark}.get, fresh.started_at)
    assert [m.text for m in batch.messages] == ["a summary the client wrote"] and dropped == 0


def test_an_exchange_begun_before_the_forget_is_dropped_whole() -> None:
    old = records_from_exchange(exchange(HISTORY, at=100.0))
    mark = mark_for(old.messages, at=200.0)
    late = exchange([*HISTORY, text("assistant", "x"), text("user", "in flight")], answer("y"), at=150.0)
    batch, dropped = drop_forgotten(records_from_exchange(late), {"s-1": mark}.get, late.started_at)
    assert batch.messages == [] and dropped == 6
    # While a forget runs (HOLD), every exchange of the session is.
    batch, _ = drop_forgotten(records_from_exchange(exchange(HISTORY, at=10**10)), {"s-1": HOLD}.get, 10**10)
    assert batch.messages == []
    # Another session is untouched.
    other = records_from_exchange(exchange(HISTORY, session="s-2", at=150.0))
    assert drop_forgotten(other, {"s-1": mark}.get, 150.0) == (other, 0)


def test_marks_round_trip_and_merge() -> None:
    a = ForgetMark(frozenset({"x", "y"}), 4, 10.0)
    assert ForgetMark.from_json(json.loads(json.dumps(a.as_json()))) == a
    assert a.merged(ForgetMark(frozenset({"z"}), 2, 20.0)) == ForgetMark(frozenset({"x", "y", "z"}), 4, 20.0)
    assert ForgetMark.from_json({"ids": "nope"}) is None and ForgetMark.from_json(None) is None


def test_the_mark_is_kept_with_the_amnesia_ranges() -> None:
    async def run() -> None:
        store = MemoryStore()
        amnesia = Amnesia(store)
        await amnesia.turn_on("s-1", 2)
        await amnesia.turn_off("s-1", 4)
        await amnesia.forget("s-1", ForgetMark(frozenset({"a"}), 3, 1.0))
        await amnesia.forget("s-1", ForgetMark(frozenset({"b"}), 5, 2.0))
        await amnesia.turn_on("s-1", 9)  # amnesia again: the mark stays
        fresh = Amnesia(store)  # a restart
        assert await fresh.load("s-1") == [(2, 4), (9, None)]
        assert fresh.forgotten("s-1") == ForgetMark(frozenset({"a", "b"}), 5, 2.0)
        assert fresh.forgotten("s-2") is None
        fresh.hold("s-2")
        assert fresh.forgotten("s-2") is HOLD
        fresh.release("s-2")
        assert fresh.forgotten("s-2") is None
        assert (await store.get_state("s-1", STATE_KEY))["forgotten"]["ids"] == ["a", "b"]

    asyncio.run(run())


def test_the_writer_drops_what_was_forgotten_and_so_does_a_journal_replay(tmp_path: Path) -> None:
    directory = tmp_path / "journal"

    async def crash() -> None:
        writer = StoreWriter(MemoryStore(), StoreConfig(flush_interval_ms=3_600_000), Journal(directory))
        await writer.start()
        writer.submit(exchange(HISTORY, answer("kept in the journal"), at=100.0))
        writer.submit(exchange([text("user", "another session")], session="s-2", at=100.0))
        assert writer._task is not None and writer.journal is not None
        writer._task.cancel()
        writer.journal.close(committed=False)

    asyncio.run(crash())

    async def restart() -> None:
        store = MemoryStore()
        amnesia = Amnesia(store)
        # Forgotten by a gateway that crashed before its journal was emptied.
        journaled = records_from_exchange(exchange(HISTORY, answer("kept in the journal")))
        await amnesia.forget("s-1", mark_for(journaled.messages, 150.0))
        writer = StoreWriter(store, StoreConfig(flush_interval_ms=10), Journal(directory))
        writer.forget_marks = Amnesia(store)
        await writer.start()
        await writer.wait_idle(timeout=30)
        assert _ids(await store.session_messages("s-1")) == []
        assert [m.text for m in await store.session_messages("s-2")] == ["another session"]
        assert writer.stats["forgotten_messages"] == 4
        # A resend with a new turn, through submit: only the turn is written.
        writer.submit(exchange([*HISTORY, text("assistant", "kept in the journal"), text("user", "new")],
                               answer("newer"), at=200.0))  # fmt: skip
        await writer.wait_idle(timeout=30)
        assert [m.text for m in await store.session_messages("s-1")] == ["new", "newer"]
        await writer.stop()

    asyncio.run(restart())


def test_forgetting_with_the_store_alone_reports_curated_knowledge() -> None:
    async def run() -> None:
        from lore_core.knowledge.book import KnowledgeBook, Provenance

        store = MemoryStore()
        await store.write(batch_of(exchange(HISTORY, answer("done"))))
        book = KnowledgeBook(store)
        curated = await book.create(
            project="/work/alpha",
            category="decision",
            title="Plans are zanzibarquux",
            content="decided in that session",
            provenance=Provenance(author="curator", source_session="s-1"),
        )
        assert curated.version is not None
        report = await forget_stored_session(store, Amnesia(store), "s-1", 1.0)
        assert report is not None and report.messages == 4
        assert report.knowledge == (curated.version.ref,)  # kept, and said so
        assert await forget_stored_session(store, Amnesia(store), "s-1", 2.0) is None

    asyncio.run(run())


# -- through a gateway ----------------------------------------------------------------------


def _post(url: str, messages: list[dict[str, Any]], session: str) -> dict[str, Any]:
    body = {"model": "claude-test", "max_tokens": 50, "messages": messages}
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "x-session-id": session}
    r = httpx.post(url + "/v1/messages", json=body, headers=headers, timeout=30)
    r.raise_for_status()
    return r.json()


def test_forget_through_the_api_and_the_cli(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = start_gateway(config={"store": {"backend": "memory"}})
    monkeypatch.setenv("LORE_PORT", str(server.port))
    api = httpx.Client(base_url=server.url + "/lore/api", headers=api_headers(), timeout=30)
    history: list[dict[str, Any]] = [{"role": "user", "content": "zanzibarquux: the secret plan"}]
    fake_upstream.enqueue(Reply(text="yodelfrost is the answer"))
    history.append({"role": "assistant", "content": _post(server.url, history, "s-api")["content"]})
    fake_upstream.enqueue(Reply(text="another session's answer"))
    _post(server.url, [{"role": "user", "content": "another session"}], "s-other")
    assert api.get("/search", params={"q": "zanzibarquux"}).json()

    # Unknown: a 404, never a 500; without the token: refused.
    missing = api.delete("/sessions/no-such-session")
    assert missing.status_code == 404 and "no such" not in missing.text and "no session" in missing.text
    assert httpx.delete(server.url + "/lore/api/sessions/s-api").status_code == 401
    # The CLI asks first; without a terminal it wants --yes.
    monkeypatch.setattr("sys.stdin", _NoTerminal())
    assert cli.main(["forget", "s-api"]) == 2
    assert "--yes" in capsys.readouterr().err

    gateway = server.gateway
    assert any(m in gateway.writer._known for m in _stored_ids(api, "s-api"))
    answer_ = api.delete("/sessions/s-api")
    assert answer_.status_code == 200, answer_.text
    report = answer_.json()
    assert (report["found"], report["messages"], report["passages"]) == (True, 2, 2)
    assert report["state_keys"] == [] and "owner" not in report["state_keys"]
    for word in ("zanzibarquux", "yodelfrost"):
        assert api.get("/search", params={"q": word}).json() == []
        assert not api.get("/recall", params={"q": word, "scope": "all"}).json()["results"]
    assert api.get("/sessions/s-api").status_code == 404
    assert [s["id"] for s in api.get("/sessions").json()] == ["s-other"]
    # The gateway's caches hold none of it.
    assert "s-api" not in gateway.writer._chains._sessions and "s-api" not in gateway.context.sessions

    # The client resends its history with a new turn: only the turn is stored.
    history.append({"role": "user", "content": "a new question"})
    fake_upstream.enqueue(Reply(text="a new answer"))
    _post(server.url, history, "s-api")
    stored = api.get("/sessions/s-api").json()
    assert [m["text"] for m in stored["messages"]] == ["a new question", "a new answer"]
    assert api.get("/search", params={"q": "zanzibarquux"}).json() == []

    # Again through the CLI (JSON), then nothing is left.
    assert cli.main(["forget", "s-api", "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["messages"] == 2
    assert cli.main(["forget", "s-api", "--yes"]) == 1
    assert "no session 's-api'" in capsys.readouterr().err
    api.close()


def _stored_ids(api: httpx.Client, session: str) -> list[str]:
    return [m["id"] for m in api.get(f"/sessions/{session}").json()["messages"]]


class _NoTerminal:
    def isatty(self) -> bool:
        return False

    def readline(self) -> str:
        return ""
