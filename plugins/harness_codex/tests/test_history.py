"""Reading Codex's session files (``lore import --from codex``), on small synthetic rollouts
written here in its format (the current ``{timestamp, type, payload}`` lines and the older
unwrapped ones)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lore_harness_codex.history import epoch
from lore_harness_codex.plugin import CodexHarness

from lore_core.interfaces import ImportedSession
from lore_core.model import TEXT, THINKING, TOOL_CALL, TOOL_RESULT
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec

SID = "019e0000-aaaa-7bbb-8ccc-000000000001"
CWD = "/home/dev/sync"


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def rollout(compacted: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    def rec(kind: str, second: int, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": f"2026-04-01T08:00:{second:02d}.000Z", "type": kind, "payload": payload}

    return [
        rec("session_meta", 0, {"id": SID, "cwd": CWD, "base_instructions": {"text": "You are Codex."}}),
        rec("turn_context", 0, {"cwd": CWD, "model": "gpt-5-codex"}),
        rec("response_item", 1, _user("why is the mirror stale?")),
        rec("event_msg", 1, {"type": "user_message", "message": "why is the mirror stale?"}),
        rec("response_item", 2, {"type": "reasoning", "encrypted_content": "gAAAA",
                                 "summary": [{"type": "summary_text", "text": "Check fetch."}]}),
        rec("response_item", 2, {"type": "function_call", "name": "exec_command", "call_id": "call_1",
                                 "arguments": json.dumps({"cmd": "git fetch --dry-run"})}),
        rec("response_item", 3, {"type": "function_call_output", "call_id": "call_1",
                                 "output": "fatal: no remote"}),
        rec("response_item", 4, {"type": "message", "role": "assistant",
                                 "content": [{"type": "output_text", "text": "The remote is missing."}]}),
        rec("compacted", 5, compacted or {"message": "", "replacement_history": [
            _user("why is the mirror stale?"), _user("Summary: the remote was missing.")]}),
        rec("response_item", 6, {"type": "message", "role": "assistant",
                                 "content": [{"type": "output_text", "text": "Added the remote."}]}),
    ]  # fmt: skip


def write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def read(path: Path) -> list[ImportedSession]:
    harness = CodexHarness()
    return [s for source in harness.history_sources(path) for s in harness.read_history(source)]


def test_the_history_is_codexs_sessions_folder(monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    assert CodexHarness().history_root() == tmp_path / ".codex" / "sessions"
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "cx"))
    assert CodexHarness().history_root() == tmp_path / "cx" / "sessions"


def test_a_rollout_is_one_session_in_context_windows(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    write(root / "2026" / "04" / "01" / f"rollout-2026-04-01T08-00-00-{SID}.jsonl", rollout())
    assert len(CodexHarness().history_sources(root)) == 1
    (session,) = read(root)
    assert (session.id, session.project, session.api) == (SID, CWD, OpenAIResponsesCodec.api)
    first, second = session.windows
    assert [i["type"] for i in first.request["input"]] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "message",
    ]  # fmt: skip  (event_msg lines are the terminal's copies)
    assert first.times[0] == epoch("2026-04-01T08:00:01Z") and len(first.times) == 5
    assert first.request["model"] == "gpt-5-codex"
    # Codex went on from the replacement history.
    assert [i.get("role") for i in second.request["input"]] == ["user", "user", "assistant"]
    view = OpenAIResponsesCodec().parse(first.request, b"")
    assert [[b.type for b in m.blocks] for m in view.messages] == [
        [TEXT],
        [THINKING],
        [TOOL_CALL],
        [TOOL_RESULT],
        [TEXT],
    ]


def test_an_older_compaction_goes_on_from_its_summary(tmp_path: Path) -> None:
    (session,) = read(write(tmp_path / "rollout-x.jsonl", rollout({"message": "Summary: add the remote."})))
    summary = session.windows[1].request["input"][0]
    assert summary["role"] == "user" and summary["content"][0]["text"] == "Summary: add the remote."


def test_rollouts_from_before_the_payload_wrapping_are_read(tmp_path: Path) -> None:
    lines = [
        {"id": SID, "timestamp": "2025-06-01T08:00:00Z", "instructions": None},
        {"record_type": "state"},
        _user("list the branches"),
        {
            "type": "function_call",
            "name": "shell",
            "call_id": "c1",
            "arguments": '{"command": ["git", "branch"]}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "* main"},
    ]
    (session,) = read(write(tmp_path / "rollout-2025-06-01.jsonl", lines))
    assert session.id == SID and len(session.windows[0].request["input"]) == 3


def test_what_is_not_a_codex_rollout_yields_nothing(tmp_path: Path) -> None:
    claude = [{"type": "user", "sessionId": "s", "cwd": CWD, "message": {"role": "user", "content": "hi"}}]
    assert read(write(tmp_path / "s.jsonl", claude)) == []
