"""Tool calls and their outputs as text: what a call did in one line (:func:`call_source`:
the command, the path, the pattern), a call rendered readably (:func:`render_call`), an output
as its reader saw it (:func:`result_text`) and the exit status it reports
(:func:`exit_code`). Passage headers, stored results and search all say where a passage came
from with these.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

#: The model's recall tool (:mod:`lore_core.recall.tool`). Its results are copies of stored
#: memories: kept in the history, left out of search, so a recall never finds earlier
#: recalls' echoes of what it is looking for.
RECALL_TOOL_NAME = "recall"

#: Longest "source" (command, path, pattern) a header repeats.
SOURCE_CHARS = 200


# Keys of a tool call's input that say what it did, best first.
SOURCE_KEYS = (
    "command", "cmd", "file_path", "path", "filePath", "notebook_path", "pattern", "url",
    "query", "description", "subject", "title", "prompt", "name",
)  # fmt: skip
# Input keys that are plumbing, not content (Codex's exec limits, Claude Code's timeouts).
_NOISE_KEYS = frozenset(
    {"yield_time_ms", "max_output_tokens", "timeout", "run_in_background", "session_id", "login", "shell"}
)
# The files a patch (Codex's apply_patch) touches.
_PATCH_FILE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", re.M)
# A shell tool's exit status as harnesses print it ("Exit code 1", Codex's "Process exited
# with code 1").
_EXIT = re.compile(r"^(?:Exit code|Process exited with code)\s+(-?\d+)\s*$", re.M)


@attrs.frozen
class CallInfo:
    """What a tool result needs to know of the call that produced it."""

    tool: str
    source: str | None = None


def one_line(text: str, limit: int = SOURCE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def call_source(tool_input: Any) -> str | None:
    """The part of a call's input that says what it did: the command, the path, ..."""
    if isinstance(tool_input, str):
        patched = _PATCH_FILE.search(tool_input)
        if patched:  # a patch: the files it touches
            files = list(dict.fromkeys(m.group(1).strip() for m in _PATCH_FILE.finditer(tool_input)))
            return one_line(", ".join(files))
        first = next((line for line in tool_input.splitlines() if line.strip()), "")
        return one_line(first) if first else None
    if isinstance(tool_input, Mapping):
        for key in SOURCE_KEYS:
            value = tool_input.get(key)
            if isinstance(value, str) and value.strip():
                return one_line(value)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return one_line(" ".join(value))
    return None


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def render_call(tool: str, tool_input: Any) -> str:
    """A tool call as readable text: ``tool: source`` then the other input fields as
    ``key: value`` lines (multi-line values on their own lines), plumbing keys left out."""
    if tool_input is None or tool_input == {} or tool_input == "":
        return tool
    if not isinstance(tool_input, Mapping):
        text = _value_text(tool_input)
        return f"{tool}:\n{text}" if "\n" in text else f"{tool}: {text}"
    lines = [tool]
    lead = None
    for key in SOURCE_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value.strip():
            lead = key
            lines[0] = f"{tool}: {value}" if "\n" not in value else f"{tool}:\n{value}"
            break
    for key in sorted(tool_input):
        if key == lead or key in _NOISE_KEYS:
            continue
        text = _value_text(tool_input[key])
        if text == "":
            continue
        lines.append(f"{key}:\n{text}" if "\n" in text else f"{key}: {text}")
    return "\n".join(lines)


def result_text(text: str) -> str:
    """A tool output as its reader saw it: a JSON envelope ``{"output": "...", ...}`` (how
    some harnesses wrap a tool's output) is unwrapped to the output itself."""
    stripped = text.lstrip()
    if stripped.startswith("{") and '"output"' in stripped[:4000]:
        try:
            value = json.loads(stripped)
        except ValueError:
            return text
        if isinstance(value, dict) and isinstance(value.get("output"), str):
            meta = value.get("metadata")
            code = meta.get("exit_code") if isinstance(meta, dict) else None
            head = f"Exit code {code}\n" if isinstance(code, int) and code != 0 else ""
            return head + value["output"]
    return text


def exit_code(text: str) -> int | None:
    """The exit status a shell tool's output reports, if any."""
    match = _EXIT.search(text[:2000])
    if match is None:
        tail = text[-2000:]
        match = _EXIT.search(tail)
    return int(match.group(1)) if match else None
