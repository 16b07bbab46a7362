"""Reading Claude Code's transcripts (``lore import --from claude-code``), on small synthetic
transcripts written here in its format."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from lore_harness_claude.history import epoch
from lore_harness_claude.plugin import ClaudeCodeHarness

from lore_core.interfaces import ImportedSession
from lore_core.model import TEXT, THINKING, TOOL_CALL, TOOL_RESULT
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

SID = "5a5a5a5a-1111-4222-8333-444444444444"
CWD = "/home/dev/shop"


def transcript() -> list[dict[str, Any]]:
    def line(kind: str, second: int, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
        stamp = f"2026-03-01T10:00:{second:02d}.000Z"
        return {"type": kind, "sessionId": SID, "cwd": CWD, "timestamp": stamp, "message": message} | extra

    return [
        {"type": "file-history-snapshot", "messageId": "m0", "snapshot": {}},
        line("user", 1, {"role": "user", "content": "why does checkout time out?"}),
        line("assistant", 2, {"role": "assistant", "model": "claude-opus-4-1", "content": [
            {"type": "thinking", "thinking": "Look at the client.", "signature": "abc"}]}),
        line("assistant", 3, {"role": "assistant", "model": "claude-opus-4-1", "content": [
            {"type": "text", "text": ""},
            {"type": "tool_use", "id": "toolu_1", "name": "Grep", "input": {"pattern": "timeout"}}]}),
        line("user", 4, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "pay.go:9: timeout = 2s"}]}),
        line("assistant", 5, {"role": "assistant", "content": [
            {"type": "text", "text": "side"}]}, isSidechain=True),
        line("assistant", 5, {"role": "assistant", "model": "<synthetic>", "content": [
            {"type": "text", "text": "API Error"}]}, isApiErrorMessage=True),
        line("assistant", 6, {"role": "assistant", "model": "claude-opus-4-1", "content": [
            {"type": "text", "text": "The payment client waits 2s."}]}),
        {"type": "system", "subtype": "compact_boundary", "sessionId": SID,
         "timestamp": "2026-03-01T10:00:07Z"},
        line("user", 8, {"role": "user", "content": "Summary: the timeout is 2s."}, isCompactSummary=True),
        line("assistant", 9, {"role": "assistant", "model": "claude-sonnet-4-5", "content": [
            {"type": "text", "text": "Raised it to 10s."}]}),
    ]  # fmt: skip


def write(path: Path, lines: list[dict[str, Any]], tail: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(x) + "\n" for x in lines) + tail
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def read(path: Path) -> list[ImportedSession]:
    harness = ClaudeCodeHarness()
    return [s for source in harness.history_sources(path) for s in harness.read_history(source)]


def test_the_history_is_claude_codes_projects_folder(monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    assert ClaudeCodeHarness().history_root() == tmp_path / ".claude" / "projects"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cfg"))
    assert ClaudeCodeHarness().history_root() == tmp_path / "cfg" / "projects"


def test_sources_are_the_transcripts_not_the_subagents(tmp_path: Path) -> None:
    root = tmp_path / "projects"
    main = write(root / "-home-dev-shop" / f"{SID}.jsonl", transcript())
    write(root / "-home-dev-shop" / SID / "subagents" / "agent-1.jsonl", transcript())
    archived = write(root / "-home-dev-old" / "old.jsonl.gz", transcript())
    (root / "-home-dev-shop" / "notes.txt").write_text("not a transcript")
    sources = ClaudeCodeHarness().history_sources(root)
    assert sorted(s.key for s in sources) == sorted([str(main), str(archived)])
    assert all(s.size > 0 and s.modified > 0 for s in sources)
    assert [s.key for s in ClaudeCodeHarness().history_sources(main)] == [str(main)]


def test_a_transcript_is_one_session_in_context_windows(tmp_path: Path) -> None:
    # The last line is cut short, as while Claude Code is still writing it.
    path = write(tmp_path / f"{SID}.jsonl", transcript(), tail='{"type": "user", "mess')
    (session,) = read(path)
    assert (session.id, session.project, session.api) == (SID, CWD, AnthropicMessagesCodec.api)
    first, second = session.windows
    assert [(m["role"], [b["type"] for b in m["content"]]) for m in first.request["messages"]] == [
        ("user", ["text"]),
        ("assistant", ["thinking", "tool_use"]),  # two lines of one answer; empty text dropped
        ("user", ["tool_result"]),
        ("assistant", ["text"]),  # the sidechain and the API error are not the conversation
    ]
    assert first.times == [epoch(f"2026-03-01T10:00:0{s}Z") for s in (1, 2, 4, 6)]
    # After the compaction Claude Code went on from the summary.
    assert [m["role"] for m in second.request["messages"]] == ["user", "assistant"]
    assert second.request["messages"][0]["content"][0]["text"] == "Summary: the timeout is 2s."
    assert first.request["model"] == second.request["model"] == "claude-sonnet-4-5"


def test_the_windows_parse_as_claude_code_sends_them(tmp_path: Path) -> None:
    (session,) = read(write(tmp_path / f"{SID}.jsonl", transcript()))
    view = AnthropicMessagesCodec().parse(session.windows[0].request, b"")
    assert [[b.type for b in m.blocks] for m in view.messages] == [
        [TEXT],
        [THINKING, TOOL_CALL],
        [TOOL_RESULT],
        [TEXT],
    ]
    assert view.messages[1].blocks[1].tool_input == {"pattern": "timeout"}


def test_a_copy_named_otherwise_keeps_the_session_id_of_its_lines(tmp_path: Path) -> None:
    (session,) = read(write(tmp_path / f"2026-03-01-{SID}.jsonl.gz", transcript()))
    assert session.id == SID


def test_what_is_not_a_claude_code_transcript_yields_nothing(tmp_path: Path) -> None:
    codex = [
        {"timestamp": "2026-03-01T10:00:00Z", "type": "session_meta", "payload": {"id": "x", "cwd": CWD}}
    ]
    assert read(write(tmp_path / "rollout-1.jsonl", codex)) == []
    assert read(write(tmp_path / "questions.jsonl", [{"id": "q1", "question": "?"}])) == []
