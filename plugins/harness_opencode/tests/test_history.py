"""Reading OpenCode's session storage (``lore import --from opencode``): its SQLite database
(1.2 and later) and the JSON files before it, built here with a small synthetic session."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from lore_harness_opencode.history import COMPACTION_PROMPT, INTERRUPTED
from lore_harness_opencode.plugin import OpenCodeHarness

from lore_core.interfaces import ImportedSession
from lore_core.model import TEXT, THINKING, TOOL_CALL, TOOL_RESULT
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

SID = "ses_3f00aa11bbffeQ1"
CWD = "/home/dev/notes"
T0 = 1_775_000_000_000  # ms


def session_messages() -> list[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(message id, info, parts) of one session: a question answered in two steps (a tool call,
    then text), a tool that never finished, then OpenCode's compaction and a last turn."""
    return [
        ("msg_01", {"role": "user", "time": {"created": T0}}, [
            {"type": "text", "text": "where is the sync config read?"},
            {"type": "text", "text": "ignored draft", "ignored": True},
            {"type": "file", "mime": "image/png", "url": "data:image/png;base64,AAAA"}]),
        ("msg_02", {"role": "assistant", "time": {"created": T0 + 1000}, "modelID": "claude-sonnet-4-5",
                    "providerID": "anthropic"}, [
            {"type": "step-start"},
            {"type": "reasoning", "text": "Search for it.", "metadata": {"anthropic": {"signature": "s1"}}},
            {"type": "tool", "callID": "toolu_a", "tool": "grep",
             "state": {"status": "completed", "input": {"pattern": "sync.toml"}, "output": "cfg.go:3"}},
            {"type": "step-finish", "reason": "tool-calls"},
            {"type": "step-start"},
            {"type": "text", "text": "It is read in cfg.go."},
            {"type": "tool", "callID": "toolu_b", "tool": "bash",
             "state": {"status": "running", "input": {"command": "sleep 100"}}},
            {"type": "step-finish", "reason": "stop"}]),
        ("msg_03", {"role": "user", "time": {"created": T0 + 2000}}, [{"type": "compaction", "auto": True}]),
        ("msg_04", {"role": "assistant", "time": {"created": T0 + 3000}, "summary": True,
                    "modelID": "claude-sonnet-4-5"}, [{"type": "text", "text": "We found cfg.go."}]),
        ("msg_05", {"role": "user", "time": {"created": T0 + 4000}}, [{"type": "text", "text": "thanks"}]),
    ]  # fmt: skip


def make_database(path: Path, sessions: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(
        """CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT, directory TEXT, title TEXT,
               time_created INTEGER, time_updated INTEGER);
           CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER,
               time_updated INTEGER, data TEXT);
           CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT, time_created INTEGER,
               time_updated INTEGER, data TEXT);"""
    )
    for sid in sessions:
        con.execute("INSERT INTO session VALUES (?, 'p1', ?, 'Sync', ?, ?)", (sid, CWD, T0, T0 + 4000))
        for mid, info, parts in session_messages():
            created = info["time"]["created"]
            con.execute(
                "INSERT INTO message VALUES (?, ?, ?, ?, ?)",
                (sid + mid, sid, created, created, json.dumps(info)),
            )
            for n, part in enumerate(parts):
                con.execute(
                    "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
                    (f"{sid}{mid}prt_{n:02d}", sid + mid, sid, created, created, json.dumps(part)),
                )
    con.commit()
    con.close()
    return path


def make_storage(root: Path, sid: str) -> None:
    """The JSON files of OpenCode before 1.2, with their ids inside."""
    storage = root / "storage"
    (storage / "session" / "p1").mkdir(parents=True, exist_ok=True)
    session = {"id": sid, "projectID": "p1", "directory": CWD, "title": "Sync", "time": {"created": T0}}
    (storage / "session" / "p1" / f"{sid}.json").write_text(json.dumps(session))
    for mid, info, parts in session_messages():
        (storage / "message" / sid).mkdir(parents=True, exist_ok=True)
        (storage / "message" / sid / f"{mid}.json").write_text(
            json.dumps({"id": mid, "sessionID": sid} | info)
        )
        (storage / "part" / mid).mkdir(parents=True, exist_ok=True)
        for n, part in enumerate(parts):
            (storage / "part" / mid / f"prt_{n:02d}.json").write_text(
                json.dumps({"id": f"prt_{n:02d}"} | part)
            )


def read(root: Path) -> list[ImportedSession]:
    harness = OpenCodeHarness()
    return [s for source in harness.history_sources(root) for s in harness.read_history(source)]


def check(session: ImportedSession, sid: str) -> None:
    assert (session.id, session.project, session.api) == (sid, CWD, AnthropicMessagesCodec.api)
    first, second = session.windows
    messages = first.request["messages"]
    assert [(m["role"], [b["type"] for b in m["content"]]) for m in messages] == [
        ("user", ["text"]),  # the ignored text and the image left out
        ("assistant", ["thinking", "tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["text", "tool_use"]),
        ("user", ["tool_result"]),
    ]
    assert messages[1]["content"][0]["signature"] == "s1"
    assert messages[4]["content"][0] == {
        "type": "tool_result", "tool_use_id": "toolu_b", "content": INTERRUPTED, "is_error": True,
    }  # fmt: skip
    assert first.times == [
        T0 / 1000,
        (T0 + 1000) / 1000,
        (T0 + 1000) / 1000,
        (T0 + 1000) / 1000,
        (T0 + 1000) / 1000,
    ]
    assert first.request["model"] == "claude-sonnet-4-5"
    # The compaction started a new window, as OpenCode sends it.
    assert [(m["role"], m["content"][0]["text"]) for m in second.request["messages"]] == [
        ("user", COMPACTION_PROMPT),
        ("assistant", "We found cfg.go."),
        ("user", "thanks"),
    ]
    view = AnthropicMessagesCodec().parse(first.request, b"")
    assert [[b.type for b in m.blocks] for m in view.messages] == [
        [TEXT], [THINKING, TOOL_CALL], [TOOL_RESULT], [TEXT, TOOL_CALL], [TOOL_RESULT],
    ]  # fmt: skip


def test_the_history_is_opencodes_data_folder(monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert OpenCodeHarness().history_root() == tmp_path / "data" / "opencode"


def test_sessions_of_the_database(tmp_path: Path) -> None:
    database = make_database(tmp_path / "opencode" / "opencode.db", [SID, "ses_other"])
    sources = OpenCodeHarness().history_sources(tmp_path / "opencode")
    assert {s.key for s in sources} == {f"{database}#{SID}", f"{database}#ses_other"}
    assert all(s.size > 0 and s.modified == (T0 + 4000) / 1000 for s in sources)
    sessions = {s.id: s for s in read(tmp_path / "opencode")}
    check(sessions[SID], SID)
    # The database file itself may be named.
    assert len(read(database)) == 2


def test_sessions_of_the_older_json_storage(tmp_path: Path) -> None:
    make_storage(tmp_path / "opencode", SID)
    (session,) = read(tmp_path / "opencode")
    check(session, SID)
    assert len(read(tmp_path / "opencode" / "storage")) == 1


def test_a_session_the_database_holds_is_not_read_again_from_the_json_files(tmp_path: Path) -> None:
    make_database(tmp_path / "opencode" / "opencode.db", [SID])
    make_storage(tmp_path / "opencode", SID)  # left behind by OpenCode 1.2's migration
    make_storage(tmp_path / "opencode", "ses_only_in_files")
    assert sorted(s.id for s in read(tmp_path / "opencode")) == sorted([SID, "ses_only_in_files"])
