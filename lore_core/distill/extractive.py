"""The extractive observer: a deterministic, LLM-free observation log.

It keeps the lines of a segment that carry facts a summary loses (file paths, error lines,
commands, numbers, decisions) and every tool call's gist, stamped with date and time, in the
same event-log shape the LLM observer writes. It is what distillation falls back to when no
worker model is usable, and the baseline the benchmark measures the LLM observer against.

It never invents anything: each kept line is a (cleaned, possibly shortened) line of the
source, so it cannot hallucinate, but it cannot say *why* either.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from lore_core.distill.facts import (
    find_error_lines,
    find_numbers,
    find_paths,
    has_command,
    has_decision,
    is_error_line,
    is_test_summary,
)
from lore_core.distill.inputs import DistillInput
from lore_core.distill.render import SKIPPED_ROLES, clean, tool_names_of
from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT

# Longest line kept; longer ones are cut (the head of an error or a command says most).
MAX_LINE_CHARS = 300
# At most this many error lines and paths per tool output.
MAX_ERRORS_PER_OUTPUT = 12
MAX_PATHS_PER_OUTPUT = 20
# Keys of a tool call's input that say what it did (a shell command, the file it touched).
GIST_KEYS = ("command", "cmd", "file_path", "path", "filePath", "pattern", "url", "query", "description")
# Tools whose output is file content the agent looked at, not an event: an "error" in the
# code it read is not an error that happened. Their outputs only contribute file paths.
READ_TOOLS = frozenset({"Read", "read", "read_file", "View", "view", "NotebookRead", "cat"})


def _clip(line: str, limit: int = MAX_LINE_CHARS) -> str:
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _key(line: str) -> str:
    return " ".join(line.lower().split())


def keep_text_line(line: str) -> bool:
    """Whether a line of user or assistant text carries a fact worth keeping."""
    return bool(
        find_paths(line)
        or is_error_line(line)
        or has_command(line)
        or find_numbers(line)
        or has_decision(line)
    )


def call_gist(tool: str, tool_input: object) -> str:
    """``Bash: pytest -q`` / ``Edit: src/app.py``: the part of a call's input that says
    what it did."""
    if isinstance(tool_input, dict):
        for key in GIST_KEYS:
            value = tool_input.get(key)
            if isinstance(value, str | list) and value:
                text = " ".join(value) if isinstance(value, list) else value
                return f"{tool}: {clean(text)}"
        paths = find_paths(clean(str(tool_input)))
        if paths:
            return f"{tool}: {', '.join(paths[:5])}"
    return tool


class _Events:
    """The kept lines of one message, deduplicated against everything kept before."""

    def __init__(self, stamp: str, seen: set[str], paths_seen: set[str]) -> None:
        self.stamp = stamp
        self.seen = seen
        # Paths already in the log: a tool output's file list names only new ones.
        self.paths_seen = paths_seen
        self.lines: list[str] = []

    def keep(self, who: str, line: str, limit: int = MAX_LINE_CHARS) -> None:
        line = _clip(line, limit)
        key = _key(f"{who}: {line}")
        if line and key not in self.seen:
            self.seen.add(key)
            self.lines.append(f"{self.stamp}{who}: {line}")
            self.paths_seen.update(find_paths(line))


def _tool_result_events(events: _Events, tool: str, text: str, is_error: bool) -> None:
    who = f"tool <- {tool}"
    paths = [p for p in find_paths(text) if p not in events.paths_seen]
    if paths:
        events.paths_seen.update(paths)
        more = len(paths) - MAX_PATHS_PER_OUTPUT
        listed = ", ".join(paths[:MAX_PATHS_PER_OUTPUT]) + (f" (+{more} more)" if more > 0 else "")
        events.keep(who, f"files: {listed}", limit=4 * MAX_LINE_CHARS)
    if tool in READ_TOOLS and not is_error:
        return
    errors = find_error_lines(text)
    if is_error and not errors and text:
        errors = [text.splitlines()[0]]
    for line in errors[:MAX_ERRORS_PER_OUTPUT]:
        events.keep(who, line)
    if len(errors) > MAX_ERRORS_PER_OUTPUT:
        events.keep(who, f"(+{len(errors) - MAX_ERRORS_PER_OUTPUT} more error lines)")
    # Test runners print their counts last; the last few summaries say how the run ended.
    for line in [line for line in text.splitlines() if is_test_summary(line)][-3:]:
        events.keep(who, line)


def extractive_observe(messages: Sequence[DistillInput], previous: str = "") -> str:
    """An event log of ``messages``. Lines already in ``previous`` (earlier observations) or
    already kept are not repeated."""
    seen = {_key(line.split("] ", 1)[-1]) for line in previous.splitlines() if line.strip()}
    paths_seen = set(find_paths(previous))
    names = tool_names_of(messages)
    out: list[str] = []
    day = None
    for msg in messages:
        if msg.role in SKIPPED_ROLES:
            continue
        when = datetime.fromtimestamp(msg.timestamp, UTC) if msg.timestamp > 0 else None
        events = _Events(f"[{when:%H:%M}] " if when else "", seen, paths_seen)
        for block in msg.blocks:
            if block.type == TEXT:
                lines = [line for line in clean(block.text).splitlines() if line.strip()]
                for index, line in enumerate(lines):
                    # A user's request is kept even without facts in it: it is the task.
                    if (msg.role == "user" and index == 0) or keep_text_line(line):
                        asks = msg.role == "user" and line.rstrip().endswith("?")
                        events.keep(msg.role, ("(asks) " if asks else "") + line)
            elif block.type == TOOL_CALL:
                events.keep(msg.role, "-> " + call_gist(block.tool_name or "tool", block.tool_input))
            elif block.type == TOOL_RESULT:
                tool = block.tool_name or names.get(block.tool_call_id or "", "tool")
                _tool_result_events(events, tool, clean(block.text), block.is_error)
        if not events.lines:
            continue
        if when is not None and when.date() != day:
            day = when.date()
            out.append(f"## {day.isoformat()}")
        out.extend(events.lines)
    return "\n".join(out)
