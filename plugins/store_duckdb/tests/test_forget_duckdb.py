"""``lore forget`` on the DuckDB store behind a real gateway (real sockets, a store file, the
vector index on): after it, no text of the session is left in any table, index file or
export, search and recall find none of it, and a client resending the history does not bring
it back while the session's new turn is stored.

The unique words are checked in the files themselves: before the forget they are there (in
the database, its write-ahead log or the full-text index), so finding none afterwards means
something. A second test shows why the store rewrites its file: DuckDB keeps a deleted row's
bytes after a checkpoint."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest
from lore_store_duckdb.store import DuckDBStore

from lore_core import cli, hookimpl
from lore_core.config import StoreConfig
from lore_core.plugins import Factory
from lore_core.recall.sources import vector_index_name
from lore_core.storage.amnesia import STATE_KEY, Amnesia
from lore_core.storage.journal import Journal
from lore_core.storage.writer import StoreWriter
from lore_core.testing.builders import TopicEmbedder, answer, batch_of, exchange, text, tool_call, tool_result
from lore_core.testing.fake_upstream import FakeUpstream, Reply, ToolCall
from lore_core.testing.net import api_headers
from lore_core.testing.poll import poll
from lore_core.testing.server import ThreadedServer

SESSION = "s-forget-me"
KEPT = "s-keep-me"
#: Words only the forgotten session has: its first prompt (the title), a later prompt, a
#: tool call, a tool's output and two answers.
UNIQUE = (
    "zephyrtitleword",
    "ocelotmarmalade",
    "xylofjordpath",
    "quintbrambleoutput",
    "pelicanvortexanswer",
    "gondolamirthanswer",
)
NEW_TURN = "newturnlanternfish"
HEADERS = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01", "x-session-id": SESSION}


class TopicsPlugin:
    @hookimpl
    def lore_register_embedders(self, register: Callable[[Any], None]) -> None:
        register(Factory("topics", lambda config: TopicEmbedder()))


def files_holding(root: Path, words: tuple[str, ...]) -> dict[str, list[str]]:
    """Every file under ``root`` that holds one of ``words``, with the words it holds."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        hits = [w for w in words if w.encode() in data]
        if hits:
            found[str(path.relative_to(root))] = hits
    return found


def deletion_files(root: Path) -> list[Path]:
    """LanceDB's marks of deleted rows still in a data file."""
    return [p for p in root.rglob("*") if p.is_file() and p.parent.name == "_deletions"]


def converse(client: httpx.Client, history: list[dict[str, Any]], fake: FakeUpstream, reply: Reply) -> None:
    fake.enqueue(reply)
    body = {"model": "claude-test", "max_tokens": 64, "messages": history}
    r = client.post("/v1/messages", json=body, headers=HEADERS)
    assert r.status_code == 200, r.text
    history.append({"role": "assistant", "content": r.json()["content"]})


def test_forget_leaves_no_trace_and_a_resend_stores_only_the_new_turn(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = tmp_path / "db"
    config = {
        "embedding": {"provider": "topics"},
        "store": {"backend": "duckdb", "path": str(data / "lore.duckdb"), "flushIntervalMs": 20},
        "distill": {"observer": "extractive", "firstSegmentMinMessages": 1},
    }
    server = start_gateway(config=config, extra_plugins=(TopicsPlugin(),))
    monkeypatch.setenv("LORE_PORT", str(server.port))
    api = httpx.Client(base_url=server.url + "/lore/api", headers=api_headers(), timeout=60)
    model = vector_index_name(TopicEmbedder())

    history: list[dict[str, Any]] = [
        {"role": "user", "content": "zephyrtitleword: plan the database migration deploy"}
    ]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        converse(
            client,
            history,
            fake_upstream,
            Reply(text="Reading it.", tool_calls=[ToolCall("Bash", {"command": "cat xylofjordpath.txt"})]),
        )
        call_id = history[-1]["content"][-1]["id"]
        history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call_id, "content": "quintbrambleoutput: failure"}
                ],
            }
        )
        converse(client, history, fake_upstream, Reply(text="pelicanvortexanswer: the migration is broken"))
        history.append({"role": "user", "content": "and ocelotmarmalade? deploy it"})
        converse(client, history, fake_upstream, Reply(text="gondolamirthanswer: release done"))
        # Another session in the same project, which must stay whole.
        fake_upstream.enqueue(Reply(text="kept answer: the database release"))
        kept_body = {
            "model": "claude-test",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "the kept session's database question"}],
        }
        kept_headers = {**HEADERS, "x-session-id": KEPT}
        assert client.post("/v1/messages", json=kept_body, headers=kept_headers).is_success

    # Distilled (extractive: the observation log quotes the messages) and embedded.
    distilled = api.post("/distill", params={"session": SESSION}).json()
    assert distilled["reports"][0]["observed"], distilled
    observations = api.get("/distillations", params={"session": SESSION}).json()
    assert any("ocelotmarmalade" in d["text"] for d in observations)

    def embedded() -> bool:
        vectors = api.get("/status").json()["store"]["vectors"].get(model, {})
        return vectors.get("vectors", 0) > 0 and vectors.get("pending") == 0

    poll(embedded, "every item embedded")
    assert api.get("/search", params={"q": "ocelotmarmalade"}).json()
    before = files_holding(data, UNIQUE)
    assert set().union(*before.values()) >= {"ocelotmarmalade", "pelicanvortexanswer"}, before
    vectors_before = api.get("/status").json()["store"]["vectors"][model]["vectors"]

    # Through the CLI, against the running gateway.
    assert cli.main(["forget", SESSION, "--yes", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "via the running gateway" in err
    report = json.loads(out)
    assert report["found"] and report["session_id"] == SESSION
    assert report["messages"] == 6 and report["distillations"] >= 1
    assert report["passages"] >= 7 and report["vectors"] >= 7
    assert {"rows", "fulltext", "vectors", "rewrite"} <= set(report["steps"])
    assert report["bytes_before"] > 0 and report["bytes_after"] > 0

    # Nothing of it is found any more; the other session is whole.
    for word in UNIQUE:
        assert api.get("/search", params={"q": word}).json() == [], word
        found = api.get("/recall", params={"q": word, "scope": "all"}).json()
        assert not any(word in r["text"] for r in found["results"]), (word, found)
    assert api.get(f"/sessions/{SESSION}").status_code == 404
    assert api.get("/distillations", params={"session": SESSION}).json() == []
    assert [s["id"] for s in api.get("/sessions").json()] == [KEPT]
    assert api.get("/search", params={"q": "kept"}).json()
    vectors = api.get("/status").json()["store"]["vectors"][model]
    assert vectors["vectors"] == vectors_before - report["vectors"] and vectors["pending"] == 0
    assert cli.main(["forget", SESSION, "--yes"]) == 1  # nothing left to forget
    assert "no session" in capsys.readouterr().err

    # The client goes on: it resends the whole history, plus a new turn.
    history.append({"role": "user", "content": f"{NEW_TURN}: a new question"})
    with httpx.Client(base_url=server.url, timeout=30) as client:
        converse(client, history, fake_upstream, Reply(text="a new answer"))
    stored = api.get(f"/sessions/{SESSION}").json()
    assert [m["text"] for m in stored["messages"]] == [f"{NEW_TURN}: a new question", "a new answer"]
    assert stored["session"]["title"] == ""
    assert stored["state"][STATE_KEY]["forgotten"]["before"] == 6
    poll(embedded, "every item embedded")
    assert [h["session"] for h in api.get("/search", params={"q": NEW_TURN}).json()] == [SESSION]
    for word in UNIQUE:
        assert api.get("/search", params={"q": word}).json() == [], word

    # An export made after it holds nothing of it either.
    export = tmp_path / "export.json"
    assert cli.main(["export", "--project", str(tmp_path), "--format", "json", "-o", str(export)]) == 0
    capsys.readouterr()
    api.close()
    server.stop()

    # No file of the store holds any of its words: the database, its WAL, the full-text and
    # vector indexes, the journal; and no LanceDB fragment keeps deleted rows.
    assert files_holding(data, UNIQUE) == {}
    assert deletion_files(data) == []
    assert not any(w in export.read_text() for w in UNIQUE)
    leftovers = [p.name for p in data.iterdir() if p.name.endswith((".forgetting", ".forgetting.wal"))]
    assert leftovers == []

    # Read back without the gateway: only the new turn, and the mark that keeps the rest out.
    async def read(store: DuckDBStore) -> None:
        messages = await store.session_messages(SESSION)
        assert [m.text for m in messages] == [f"{NEW_TURN}: a new question", "a new answer"]
        assert {d.session_id for d in await store.list_distillations()} <= {KEPT, SESSION}
        assert all(w not in d.text for d in await store.list_distillations() for w in UNIQUE)
        assert await store.search("ocelotmarmalade") == []

    _with_store(data / "lore.duckdb", read)


def _with_store(path: Path, body: Callable[[DuckDBStore], Any]) -> Any:
    async def main() -> Any:
        store = DuckDBStore(path)
        await store.open()
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(main())


def test_deleted_rows_stay_in_the_file_until_it_is_rewritten(tmp_path: Path) -> None:
    """Why ``forget_session`` rewrites the database: a DELETE and a CHECKPOINT (even
    ``FORCE CHECKPOINT`` and ``VACUUM``) leave the rows' bytes in DuckDB's file."""
    path = tmp_path / "plain.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (session VARCHAR, body VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [("keep", f"ordinary text {i}") for i in range(200)])
    con.execute("INSERT INTO t VALUES ('gone', 'zephyrtitleword ocelotmarmalade')")
    con.execute("CHECKPOINT")
    con.execute("DELETE FROM t WHERE session = 'gone'")
    for statement in ("CHECKPOINT", "FORCE CHECKPOINT", "VACUUM"):
        con.execute(statement)
    con.close()
    assert b"ocelotmarmalade" in path.read_bytes()

    # The store's forget, on the same kind of data: gone from the file.
    async def body(store: DuckDBStore) -> None:
        keep = [exchange([text("user", f"ordinary question {i}")], session=f"s-{i}") for i in range(20)]
        gone = exchange(
            [
                text("user", "zephyrtitleword ocelotmarmalade"),
                tool_call("Bash", "c1", {"command": "cat xylofjordpath"}),
                tool_result("c1", "quintbrambleoutput"),
            ],
            answer("pelicanvortexanswer"),
            session=SESSION,
        )
        await store.write(batch_of(*keep, gone))
        await store.sync_index()
        with store._statement() as cur:
            cur.execute("CHECKPOINT")
        assert files_holding(tmp_path / "store", UNIQUE)
        report = await store.forget_session(SESSION)
        assert report.found and report.steps["rewrite"] >= 0
        assert files_holding(tmp_path / "store", UNIQUE) == {}
        assert len(await store.list_sessions()) == 20  # the rest is all there
        assert await store.search("ordinary", limit=50)

    _with_store(tmp_path / "store" / "lore.duckdb", body)
    assert files_holding(tmp_path / "store", UNIQUE) == {}
    assert not os.path.exists(tmp_path / "store" / "lore.duckdb.forgetting")


def test_forget_without_a_gateway_also_clears_what_a_dead_gateways_journal_held(
    lore_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No gateway runs: ``lore forget`` opens the store itself. What a gateway killed before
    its last write left in the journal is taken out too (it would be replayed at the next
    start), and the mark covers it: a gateway started afterwards stores none of it."""
    db = tmp_path / "db" / "lore.duckdb"
    monkeypatch.setenv("LORE_DB_PATH", str(db))
    written = exchange(
        [text("user", "zephyrtitleword: the plan")], answer("pelicanvortexanswer"), session=SESSION
    )
    journaled = exchange(
        [text("user", "zephyrtitleword: the plan"), text("assistant", "pelicanvortexanswer"),
         text("user", "ocelotmarmalade, then")],
        answer("gondolamirthanswer"),
        session=SESSION,
        at=1_700_000_100.0,
    )  # fmt: skip
    kept = exchange([text("user", "a kept question")], session=KEPT, at=1_700_000_100.0)

    async def crash() -> None:
        store = DuckDBStore(db)
        await store.write(batch_of(written))
        assert store.journal_dir is not None
        writer = StoreWriter(store, StoreConfig(flush_interval_ms=3_600_000), Journal(store.journal_dir))
        await writer.start()
        writer.submit(journaled)
        writer.submit(kept)
        assert writer._task is not None and writer.journal is not None
        writer._task.cancel()  # killed before its write
        writer.journal.close(committed=False)
        await store.close()

    asyncio.run(crash())
    assert files_holding(db.parent, ("gondolamirthanswer",))  # in the journal

    assert cli.main(["forget", SESSION, "--yes", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "reading the duckdb store directly" in err
    assert json.loads(out)["messages"] == 2
    assert files_holding(db.parent, UNIQUE) == {}

    # A gateway starting on it replays the journal: the kept session only.
    async def restart() -> None:
        store = DuckDBStore(db)
        assert store.journal_dir is not None
        writer = StoreWriter(store, StoreConfig(flush_interval_ms=10), Journal(store.journal_dir))
        writer.forget_marks = Amnesia(store)
        await writer.start()
        await writer.wait_idle(timeout=30)
        assert await store.session_messages(SESSION) == []
        assert [m.text for m in await store.session_messages(KEPT)] == ["a kept question"]
        # The client resends: nothing of the forgotten history is stored (the gateway reads
        # a session's mark when its request is parsed, before the exchange reaches the writer).
        await writer.forget_marks.load(SESSION)
        writer.submit(journaled)
        await writer.wait_idle(timeout=30)
        assert await store.session_messages(SESSION) == []
        await writer.stop()

    asyncio.run(restart())
    assert files_holding(db.parent, UNIQUE) == {}
