"""``lore import --from``: a client's own transcripts become sessions of the store as if they had
gone through the gateway (lore_core/storage/history_import.py).

The transcripts are small synthetic ones written here in each client's format (Claude Code's
``projects/<dir>/<session>.jsonl``, Codex's ``sessions/YYYY/MM/DD/rollout-*.jsonl``); the
readers are the harness plugins', so these tests need them installed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core import cli
from lore_core.builtin.memory_store import MemoryStore
from lore_core.interfaces import Codec, Harness
from lore_core.storage import history_import as history
from lore_core.storage.amnesia import Amnesia
from lore_core.storage.forget import forget_stored_session
from lore_core.storage.history_import import ImportReport, import_history
from lore_core.testing.server import ThreadedServer
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec

claude_plugin = pytest.importorskip("lore_harness_claude.plugin")
codex_plugin = pytest.importorskip("lore_harness_codex.plugin")

CODECS: dict[str, Codec] = {c.api: c for c in (AnthropicMessagesCodec(), OpenAIResponsesCodec())}
APP = "/home/dev/app"
TOOLS = "/home/dev/tools"
SECRET = "sk-ant-api03-" + "Q" * 40


# ---------------------------------------------------------------------------------------------
# Synthetic transcripts in the clients' formats
# ---------------------------------------------------------------------------------------------


def _at(minute: int, day: int = 10) -> str:
    return f"2026-01-{day:02d}T09:{minute:02d}:00.000Z"


def claude_session(home: Path, sid: str, cwd: str, topic: str, day: int = 10) -> Path:
    """A Claude Code session: a prompt, a thinking + tool call answer written as two lines,
    the tool result (holding a key), a text answer, then a compaction and one more turn."""
    lines: list[dict[str, Any]] = []

    def line(kind: str, minute: int, message: dict[str, Any], **extra: Any) -> None:
        base = {
            "type": kind,
            "sessionId": sid,
            "cwd": cwd,
            "timestamp": _at(minute, day),
            "uuid": f"u{len(lines)}",
        }
        lines.append(base | {"message": message} | extra)

    line("user", 0, {"role": "user", "content": f"Please look into the {topic} build failure"})
    line(
        "assistant",
        1,
        {
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [
                {"type": "thinking", "thinking": f"The {topic} build needs a look.", "signature": "sig"}
            ],
        },
    )
    line(
        "assistant",
        1,
        {
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [
                {
                    "type": "tool_use",
                    "id": f"toolu_{sid[:4]}1",
                    "name": "Bash",
                    "input": {"command": "make build"},
                }
            ],
        },
    )
    line(
        "user",
        2,
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": f"toolu_{sid[:4]}1",
                    "content": f"error: {topic}_linker.go:12: undefined symbol; ANTHROPIC_API_KEY={SECRET}",
                }
            ],
        },
    )
    line(
        "assistant",
        3,
        {
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": f"The {topic} linker misses a symbol."}],
        },
    )
    # A subagent's line in the main file (older versions) and an error never sent: left out.
    line(
        "assistant",
        3,
        {"role": "assistant", "content": [{"type": "text", "text": "subagent"}]},
        isSidechain=True,
    )
    line(
        "assistant",
        3,
        {
            "role": "assistant",
            "model": "<synthetic>",
            "content": [{"type": "text", "text": "API Error: overloaded"}],
        },
        isApiErrorMessage=True,
    )
    lines.append(
        {"type": "system", "subtype": "compact_boundary", "sessionId": sid, "timestamp": _at(4, day)}
    )
    line(
        "user",
        5,
        {"role": "user", "content": f"Summary: we fixed the {topic} linker."},
        isCompactSummary=True,
    )
    line("user", 6, {"role": "user", "content": f"Now commit the {topic} fix"})
    line("assistant", 7, {"role": "assistant", "model": "claude-sonnet-4-5", "content": [
        {"type": "text", "text": f"Committed as fix({topic}): add the missing symbol."}]})  # fmt: skip
    folder = home / ".claude" / "projects" / cwd.replace("/", "-")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{sid}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def codex_session(home: Path, sid: str, cwd: str, topic: str, day: int = 11) -> Path:
    """A Codex rollout: meta, a turn with a function call and its output, a compaction."""

    def rec(kind: str, minute: int, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": _at(minute, day), "type": kind, "payload": payload}

    user = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": f"fix the {topic} test"}],
    }
    lines = [
        rec("session_meta", 0, {"id": sid, "cwd": cwd, "timestamp": _at(0, day)}),
        rec("turn_context", 0, {"cwd": cwd, "model": "gpt-5"}),
        rec("response_item", 0, user),
        rec("event_msg", 0, {"type": "user_message", "message": "copy"}),
        rec("response_item", 1, {"type": "function_call", "name": "exec_command", "call_id": f"call_{topic}",
                                 "arguments": json.dumps({"cmd": "go test ./..."})}),
        rec("response_item", 2, {"type": "function_call_output", "call_id": f"call_{topic}",
                                 "output": f"--- FAIL: Test{topic.title()}Sync (0.01s)"}),
        rec("response_item", 3, {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": f"The {topic} test fails on sync."}]}),
        rec("compacted", 4, {"message": "", "replacement_history": [user, {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": f"Summary of the {topic} work."}]}]}),
        rec("response_item", 5, {"type": "message", "role": "assistant",
                                 "content": [{"type": "output_text", "text": f"{topic} fixed."}]}),
    ]  # fmt: skip
    folder = home / ".codex" / "sessions" / "2026" / "01" / f"{day:02d}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rollout-2026-01-{day:02d}T09-00-00-{sid}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    claude_session(home, "11111111-aaaa-4aaa-8aaa-000000000001", APP, "alpha", day=10)
    claude_session(home, "22222222-bbbb-4bbb-8bbb-000000000002", TOOLS, "beta", day=20)
    claude_session(home, "33333333-cccc-4ccc-8ccc-000000000003", APP + "/sub", "gamma", day=25)
    codex_session(home, "019d0000-0000-7000-8000-00000000000a", APP, "delta", day=11)
    return home


def claude() -> Harness:
    return claude_plugin.ClaudeCodeHarness()  # type: ignore[no-any-return]


def codex() -> Harness:
    return codex_plugin.CodexHarness()  # type: ignore[no-any-return]


def run_import(harness: Harness, store: MemoryStore | None, root: Path, **kwargs: Any) -> ImportReport:
    async def go() -> ImportReport:
        return await import_history(harness, CODECS, store, root=root, **kwargs)

    return asyncio.run(go())


def stored(store: MemoryStore, sid: str) -> Any:
    return asyncio.run(store.get_session(sid)), asyncio.run(store.session_messages(sid))


# ---------------------------------------------------------------------------------------------
# The import
# ---------------------------------------------------------------------------------------------


def test_sessions_are_filed_under_their_project_and_session_id(home: Path) -> None:
    store = MemoryStore()
    report = run_import(claude(), store, home / ".claude" / "projects")
    assert (report.sources, report.read, report.sessions, report.new_sessions) == (3, 3, 3, 3)
    assert report.added == report.messages == 3 * 6 and not report.failed

    session, messages = stored(store, "11111111-aaaa-4aaa-8aaa-000000000001")
    assert (session.project, session.harness, session.model) == (APP, "claude", "claude-sonnet-4-5")
    assert session.title == "Please look into the alpha build failure"
    # Two context windows: the compaction started a new history from the summary.
    assert [(m.position, m.role) for m in messages] == [
        (0, "user"), (0, "user"), (1, "assistant"), (1, "assistant"), (2, "user"), (3, "assistant"),
    ]  # fmt: skip
    # The thinking and the tool call, two lines, are one message, as Claude Code sends them.
    answer = next(m for m in messages if m.role == "assistant" and m.tool_names)
    assert [b["type"] for b in answer.blocks] == ["thinking", "tool_call"]
    # Masked as the writer masks; left out: the sidechain line and the API error.
    assert all(
        SECRET not in m.text and "subagent" not in m.text and "overloaded" not in m.text for m in messages
    )
    assert any("[REDACTED:anthropic-key]" in m.text for m in messages)
    # Each message at the transcript's time; the session from its first to its last.
    assert min(m.created_at for m in messages) == session.created_at == history_time(_at(0))
    assert session.updated_at == history_time(_at(7))


def history_time(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_codex_rollouts_are_filed_under_their_session_meta(home: Path) -> None:
    store = MemoryStore()
    report = run_import(codex(), store, home / ".codex" / "sessions")
    # 7 read, 6 new: the compaction's replacement history opens with the first prompt, which
    # is the same message as the stored one (same place, same content: same id).
    assert (report.sessions, report.messages, report.added) == (1, 7, 6)
    session, messages = stored(store, "019d0000-0000-7000-8000-00000000000a")
    assert (session.project, session.harness, session.model) == (APP, "codex", "gpt-5")
    assert session.title == "fix the delta test"
    texts = "\n".join(m.text for m in messages)
    assert "--- FAIL: TestDeltaSync" in texts and "Summary of the delta work." in texts
    assert "copy" not in texts  # event_msg lines are the terminal's copies


def test_a_second_import_adds_nothing(home: Path) -> None:
    store = MemoryStore()
    root = home / ".claude" / "projects"
    first = run_import(claude(), store, root)
    again = run_import(claude(), store, root)
    assert (again.done_before, again.read, again.added, again.new_sessions) == (3, 0, 0, 0)
    # Read again regardless of the markers: the store holds every id already.
    reread = run_import(claude(), store, root, skip_done=False)
    assert (reread.read, reread.messages, reread.added, reread.new_sessions) == (3, first.messages, 0, 0)
    # A session that went on is read again and adds only its new messages.
    path = next(root.rglob("11111111-*.jsonl"))
    extra = {"type": "user", "sessionId": "11111111-aaaa-4aaa-8aaa-000000000001", "cwd": APP,
             "timestamp": _at(9), "message": {"role": "user", "content": "and push it"}}  # fmt: skip
    path.write_text(path.read_text() + json.dumps(extra) + "\n")
    grown = run_import(claude(), store, root)
    assert (grown.done_before, grown.read, grown.added) == (2, 1, 1)


def test_an_interrupted_import_resumes(home: Path) -> None:
    clean = MemoryStore()
    expected = run_import(claude(), clean, home / ".claude" / "projects").added

    store = MemoryStore()
    seen: list[int] = []

    def stop_after_the_first(report: ImportReport) -> None:
        seen.append(report.read)
        if report.read == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_import(
            claude(), store, home / ".claude" / "projects", progress=stop_after_the_first, batch_messages=1
        )
    first = asyncio.run(store.stats())["messages"]
    assert 0 < first < expected
    resumed = run_import(claude(), store, home / ".claude" / "projects")
    assert (resumed.done_before, resumed.read) == (1, 2)
    assert asyncio.run(store.stats())["messages"] == expected


def test_a_stopped_import_lets_the_write_under_way_finish(home: Path) -> None:
    """Ctrl-C cancels the import; the store is closed next, so the transaction under way must
    end first (the command closes the store in a ``finally``)."""

    class SlowStore(MemoryStore):
        writing = False

        async def write(self, batch: Any) -> int:
            self.writing = True
            await asyncio.sleep(0.2)
            added = await super().write(batch)
            self.writing = False
            return added

    store = SlowStore()

    async def go() -> None:
        task = asyncio.create_task(
            import_history(claude(), CODECS, store, root=home / ".claude" / "projects", batch_messages=1)
        )
        while not store.writing:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not store.writing

    asyncio.run(go())
    assert asyncio.run(store.stats())["messages"] == 6  # the first transcript, whole


def test_what_amnesia_kept_out_of_a_session_stays_out(home: Path) -> None:
    """The session went through the gateway with /lore:amnesia on from its third message: an
    import is one more resend of that history, and the ranges hold for it."""
    store = MemoryStore()
    sid = "11111111-aaaa-4aaa-8aaa-000000000001"
    asyncio.run(store.set_state(sid, "amnesia", {"ranges": [[2, None]]}))
    run_import(claude(), store, home / ".claude" / "projects")
    _, messages = stored(store, sid)
    assert sorted(m.position for m in messages) == [0, 0, 1, 1]  # two windows, from 2 on forgotten
    assert all("undefined symbol" not in m.text for m in messages)  # the tool result, position 2


def test_a_forgotten_session_is_not_brought_back_by_an_import(home: Path) -> None:
    """``lore forget`` then an import of the client's transcripts: the forgotten messages stay
    out (the import is one more resend of the history), the other sessions are untouched."""
    store = MemoryStore()
    root = home / ".claude" / "projects"
    sid = "11111111-aaaa-4aaa-8aaa-000000000001"
    run_import(claude(), store, root)
    assert stored(store, sid)[1]
    assert asyncio.run(forget_stored_session(store, Amnesia(store), sid, at=time.time())) is not None
    assert stored(store, sid)[1] == []
    again = run_import(claude(), store, root, skip_done=False)
    assert stored(store, sid)[1] == [] and again.added == 0
    assert stored(store, "22222222-bbbb-4bbb-8bbb-000000000002")[1]


def test_since_and_project_filter(home: Path) -> None:
    root = home / ".claude" / "projects"
    store = MemoryStore()
    # Sessions active since the 15th: beta (20th) and gamma (25th); alpha is left out.
    report = run_import(claude(), store, root, since=history_time("2026-01-15T00:00:00Z"))
    assert (report.sessions, report.filtered) == (2, 1)
    assert {s.id[:8] for s in asyncio.run(store.list_sessions())} == {"22222222", "33333333"}
    # The project and the directories under it; a trailing slash is the same directory.
    store = MemoryStore()
    report = run_import(claude(), store, root, project=APP + "/")
    assert {s.project for s in asyncio.run(store.list_sessions())} == {APP, APP + "/sub"}
    # What a filter left out is imported by a run without it (those sources are not marked).
    later = run_import(claude(), store, root)
    assert (later.done_before, later.new_sessions) == (2, 1)
    with pytest.raises(history.HistoryImportError, match="absolute"):
        run_import(claude(), store, root, project="app")


def test_a_dry_run_reads_and_counts_only(home: Path) -> None:
    report = run_import(claude(), None, home / ".claude" / "projects")
    assert report.dry_run and (report.sessions, report.messages, report.added) == (3, 18, 0)
    assert "dry run, 3 sessions and 18 messages" in history.summary(report)


def test_an_unreadable_transcript_is_reported_and_the_rest_imported(home: Path) -> None:
    broken = home / ".claude" / "projects" / "-broken" / "44444444-dddd-4ddd-8ddd-000000000004.jsonl.gz"
    broken.parent.mkdir()
    broken.write_bytes(b"not gzip")
    store = MemoryStore()
    report = run_import(claude(), store, home / ".claude" / "projects")
    assert report.sessions == 3 and len(report.failed) == 1 and "44444444" in report.failed[0]
    # Not marked: the next run tries it again.
    assert run_import(claude(), store, home / ".claude" / "projects").read == 1


# ---------------------------------------------------------------------------------------------
# As if it had gone through the gateway
# ---------------------------------------------------------------------------------------------


def test_a_later_proxied_request_resending_the_history_stores_no_duplicate(
    start_gateway: Callable[..., ThreadedServer], home: Path
) -> None:
    server = start_gateway()
    store = server.gateway.store
    sid = "11111111-aaaa-4aaa-8aaa-000000000001"
    csid = "019d0000-0000-7000-8000-00000000000a"

    async def go(harness: Harness, root: Path) -> ImportReport:
        return await import_history(harness, server.gateway.registry.codecs, store, root=root)

    server.call(go(claude(), home / ".claude" / "projects"))
    server.call(go(codex(), home / ".codex" / "sessions"))
    before = {s: len(server.call(store.session_messages(s))) for s in (sid, csid)}

    # The client goes on with the session: it resends the history it holds (the window
    # after its compaction), and a new prompt.
    source = next((home / ".claude" / "projects").rglob(f"{sid}.jsonl"))
    imported = next(iter(claude().read_history(claude().history_sources(source)[0])))
    history_now = imported.windows[-1].request["messages"]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100,
            "messages": [*history_now, {"role": "user", "content": "and push it"}]}  # fmt: skip
    headers = {"x-claude-code-session-id": sid, "x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
    assert httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30).status_code == 200

    rollout = next((home / ".codex" / "sessions").rglob("rollout-*.jsonl"))
    items = next(iter(codex().read_history(codex().history_sources(rollout)[0]))).windows[-1].request["input"]
    new = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and push it"}]}
    body = {"model": "gpt-5", "input": [*items, new], "store": False}
    headers = {"session-id": csid, "originator": "codex_cli_rs", "authorization": "Bearer sk-test"}
    assert httpx.post(server.url + "/v1/responses", json=body, headers=headers, timeout=30).status_code == 200

    server.call(server.gateway.writer.wait_idle(timeout=10))
    for s in (sid, csid):
        messages = server.call(store.session_messages(s))
        # Only the new prompt and the answer were stored; no text twice in the session.
        assert len(messages) == before[s] + 2, s
        texts = [m.text for m in messages]
        assert len(texts) == len(set(texts)), s


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


def lore(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def duckdb_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytest.importorskip("lore_store_duckdb")
    config = tmp_path / ".lore.json"
    config.write_text(json.dumps({"store": {"backend": "duckdb", "path": str(tmp_path / "store")},
                                  "server": {"port": 9}}))  # fmt: skip
    monkeypatch.setenv("LORE_CONFIG", str(config))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return config


def test_lore_import_from(duckdb_config: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = lore(capsys, "import", "--from", "claude-code", "--dry-run")
    assert code == 0 and "claude: dry run, 3 sessions and 18 messages" in out
    assert "100%" in err  # the progress bar, on stderr
    code, out, _ = lore(capsys, "import", "--from", "claude-code", "--json")
    assert code == 0 and json.loads(out)["added"] == 18
    code, out, _ = lore(capsys, "import", "--from", "claude-code")
    assert code == 0 and "0 new sessions, 0 new messages" in out and "3 sources imported before" in out
    code, out, _ = lore(
        capsys, "import", "--from", "codex", "--path", str(home / ".codex"), "--since", "2026-01-01"
    )
    assert code == 0 and "1 new sessions, 6 new messages" in out
    code, out, _ = lore(capsys, "sessions", "--project", APP, "--json")
    assert {s["harness"] for s in json.loads(out)} == {"claude", "codex"}


def test_lore_import_from_refuses_what_it_cannot_do(
    duckdb_config: Path, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = lore(capsys, "import", "--from", "vim")
    assert code == 2 and "no client named 'vim'" in err and "claude" in err
    code, _, err = lore(capsys, "import", "--from", "codex", "--since", "last week")
    assert code == 2 and "30d" in err
    code, _, err = lore(capsys, "import", "--since", "30d")
    assert code == 2 and "go with --from" in err
    code, _, err = lore(capsys, "import", "--from", "codex", "--path", str(home / "nowhere"))
    assert code == 1 and "does not exist" in err


def test_lore_import_from_while_a_gateway_runs(
    start_gateway: Callable[..., ThreadedServer],
    home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gateway holds the store: it runs the import (POST /lore/api/import/history), the
    command follows it with its progress bar and prints the same report."""
    server = start_gateway()
    monkeypatch.setenv("LORE_PORT", str(server.port))
    projects = str(home / ".claude" / "projects")
    code, out, err = lore(capsys, "import", "--from", "claude-code", "--path", projects, "--json")
    assert code == 0, err
    assert "the gateway imports" in err and "100%" in err
    assert json.loads(out)["added"] == 18 and json.loads(out)["new_sessions"] == 3
    code, out, _ = lore(capsys, "import", "--from", "claude-code", "--path", projects)
    assert code == 0 and "0 new sessions, 0 new messages" in out and "3 sources imported before" in out
    code, out, _ = lore(capsys, "sessions", "--json")
    assert {s["id"][:8] for s in json.loads(out)} == {"11111111", "22222222", "33333333"}

    code, _, err = lore(capsys, "import", "--from", "codex", "--path", str(home / "nowhere"))
    assert code == 2 and "does not exist" in err
    headers = {"Authorization": f"Bearer {server.gateway.tokens.current()}"}
    for body, words in (({}, "give the client"), ({"from": "vim"}, "no client named 'vim'"),
                        ({"from": "codex", "path": "relative"}, "absolute path"),
                        ({"from": "codex", "since": "last week"}, "30d")):  # fmt: skip
        answer = httpx.post(server.url + "/lore/api/import/history", json=body, headers=headers, timeout=10)
        assert answer.status_code == 400 and words in answer.json()["error"], (body, answer.text)
    assert httpx.get(server.url + "/lore/api/import/history/nope", headers=headers).status_code == 404
    assert httpx.post(server.url + "/lore/api/import/history", json={"from": "codex"}).status_code == 401


# ---------------------------------------------------------------------------------------------
# Pieces
# ---------------------------------------------------------------------------------------------


def test_since_reads_dates_times_and_ages() -> None:
    assert history.parse_since("30d", now=100 * 86400.0) == 70 * 86400.0
    assert history.parse_since("12h", now=86400.0) == 43200.0
    assert history.parse_since("2026-01-31T00:00:00Z") == history_time("2026-01-31T00:00:00Z")
    with pytest.raises(ValueError, match="an age"):
        history.parse_since("yesterday")


def test_the_progress_line_says_how_far_how_fast_and_how_long() -> None:
    report = ImportReport(
        harness="claude", root="/x", sources=10, bytes_total=1000, bytes_read=250, messages=500
    )
    report.read = 3
    report.started -= 10  # ten seconds in
    line = history.progress_line(report)
    assert line.startswith("claude [######------------------]  25%  3/10 sources  500 messages")
    assert "50/s" in line and "ETA 0:30" in line
