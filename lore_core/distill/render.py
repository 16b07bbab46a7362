"""Rendering a segment of messages as the observer's input text.

The observer reads a compact transcript, one event per line group::

    ## 2026-11-30
    [03:12:05] user: the tests in tests/test_api.py fail since the rename
    [03:12:09] assistant -> Bash {"command": "pytest -q tests/test_api.py"}
    [03:12:14] tool <- Bash (error):
    ...output...

What it must not see, and never will, whatever the harness put in the conversation:

* harness housekeeping (``<system-reminder>`` and friends): it is not what happened, and it
  would be distilled into every observation log again and again;
* obvious secrets (provider keys, tokens, private key blocks): masked before anything else
  looks at the text (docs/storage.md);
* long tool outputs: an output longer than ``tool_output_max_chars`` becomes an annotation
  that keeps the tool's name, the line count, whether errors appeared, the file paths, the
  error lines and the last lines (where test runners print their summary). A 50 KB log
  becomes a few hundred bytes that still say what mattered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from lore_core.curation import DistillInput
from lore_core.distill.facts import find_error_lines, find_paths
from lore_core.model import IMAGE, TEXT, TOOL_CALL, TOOL_RESULT
from lore_core.storage.housekeeping import strip_housekeeping
from lore_core.storage.masking import map_json, mask_secrets

DEFAULT_TOOL_OUTPUT_MAX_CHARS = 4000
# Roles whose messages are instructions to the model, not events of the session.
SKIPPED_ROLES = frozenset({"system", "developer"})
# Longest single string value shown in a tool call's input (file contents, edit strings).
TOOL_INPUT_VALUE_CHARS = 300
# Longest error / tail line kept in an annotation.
ANNOTATION_LINE_CHARS = 240


def clean(text: str) -> str:
    """Housekeeping stripped and secrets masked: what every rendered text goes through."""
    return mask_secrets(strip_housekeeping(text)).strip()


def _clip(line: str, limit: int = ANNOTATION_LINE_CHARS) -> str:
    line = line.strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def annotate_output(tool: str, text: str, is_error: bool, max_chars: int) -> str:
    """The annotation replacing a tool output longer than ``max_chars``; never longer than
    ``max_chars`` itself. ``text`` must already be cleaned."""
    lines = text.splitlines()
    errors = find_error_lines(text)
    paths = find_paths(text)
    header = (
        f"[long output of {tool} omitted: {len(lines)} lines, {len(text)} chars, "
        f"errors: {'yes' if errors or is_error else 'no'}]"
    )
    parts = [header]
    budget = max_chars - len(header) - 1
    # Paths first, then errors, then the tail: each section gets what the previous left,
    # and stops whole lines before the budget, so the annotation stays well-formed.
    sections: list[tuple[str, list[str], str]] = [
        ("files: ", paths, ", "),
        ("error lines:\n", [_clip(e) for e in errors], "\n"),
    ]
    tail = [_clip(line) for line in lines[-5:] if line.strip()]
    tail = [line for line in tail if line not in set(sections[1][1])]
    if tail:
        sections.append(("last lines:\n", tail, "\n"))
    for index, (title, items, sep) in enumerate(sections):
        if not items or budget <= len(title) + 20:
            continue
        # Paths may take up to half of what is left, errors most of the rest.
        share = budget // 2 if index == 0 else budget
        kept: list[str] = []
        used = len(title)
        for item in items:
            cost = len(item) + len(sep)
            if used + cost > share - 24:
                break
            kept.append(item)
            used += cost
        if not kept:
            continue
        more = len(items) - len(kept)
        body = title + sep.join(kept) + (f"{sep}(+{more} more)" if more else "")
        parts.append(body)
        budget -= len(body) + 1
    return "\n".join(parts)[:max_chars]


def _short_string(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    value = mask_secrets(value)
    if len(value) > TOOL_INPUT_VALUE_CHARS:
        lines = value.count("\n") + 1
        return value[: TOOL_INPUT_VALUE_CHARS - 60] + f"… [+{len(value)} chars, {lines} lines]"
    return value


def _short_value(value: Any) -> Any:
    """Tool input with long strings (file contents, edit strings) cut down to their head
    (a copy made without recursion: tool input may nest as deep as the JSON parser allows)."""
    return map_json(value, _short_string)


def render_tool_input(tool_input: Any, max_chars: int) -> str:
    if tool_input is None or tool_input == {}:
        return ""
    try:
        text = json.dumps(_short_value(tool_input), ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError):
        text = mask_secrets(str(tool_input))
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def render_text(text: str, max_chars: int) -> str:
    """A text block (already cleaned). A huge paste keeps its head and tail; the middle
    becomes an annotation like a long tool output's."""
    limit = max_chars * 4
    if len(text) <= limit:
        return text
    head, middle, tail = text[:max_chars], text[max_chars:-max_chars], text[-max_chars:]
    return f"{head}\n{annotate_output('pasted text', middle, False, max_chars)}\n{tail}"


def _timestamp(ts: float) -> datetime | None:
    if not ts or ts <= 0:
        return None
    return datetime.fromtimestamp(ts, UTC)


def render_message(
    msg: DistillInput,
    tool_names: Mapping[str, str] | None = None,
    tool_output_max_chars: int = DEFAULT_TOOL_OUTPUT_MAX_CHARS,
) -> str:
    """One message as transcript lines (no date header); empty when nothing is left of it
    (housekeeping only, thinking only, a system message)."""
    if msg.role in SKIPPED_ROLES:
        return ""
    when = _timestamp(msg.timestamp)
    stamp = f"[{when:%H:%M:%S}] " if when else ""
    names = tool_names or {}
    out: list[str] = []
    texts: list[str] = []
    for block in msg.blocks:
        if block.type == TEXT:
            text = clean(block.text)
            if text:
                texts.append(render_text(text, tool_output_max_chars))
        elif block.type == IMAGE:
            texts.append("[image]")
        elif block.type == TOOL_CALL:
            if texts:
                out.append(f"{stamp}{msg.role}: " + "\n".join(texts))
                texts = []
            args = render_tool_input(block.tool_input, tool_output_max_chars)
            out.append(f"{stamp}{msg.role} -> {block.tool_name or 'tool'}" + (f" {args}" if args else ""))
        elif block.type == TOOL_RESULT:
            if texts:
                out.append(f"{stamp}{msg.role}: " + "\n".join(texts))
                texts = []
            tool = block.tool_name or names.get(block.tool_call_id or "", "tool")
            text = clean(block.text)
            flag = " (error)" if block.is_error else ""
            if len(text) > tool_output_max_chars:
                text = annotate_output(tool, text, block.is_error, tool_output_max_chars)
            out.append(f"{stamp}tool <- {tool}{flag}:" + (f"\n{text}" if text else " (no output)"))
        # Thinking and unknown blocks are left out: not shown to the user, often encrypted,
        # and what the assistant concluded shows up in its text and actions anyway.
    if texts:
        out.append(f"{stamp}{msg.role}: " + "\n".join(texts))
    return "\n".join(out)


def tool_names_of(messages: Iterable[DistillInput]) -> dict[str, str]:
    """Tool call id -> tool name, so results (which carry only the id) can be named."""
    return {
        b.tool_call_id: b.tool_name
        for m in messages
        for b in m.blocks
        if b.type == TOOL_CALL and b.tool_call_id and b.tool_name
    }


def render_segment(
    messages: Sequence[DistillInput],
    tool_output_max_chars: int = DEFAULT_TOOL_OUTPUT_MAX_CHARS,
    tool_names: Mapping[str, str] | None = None,
) -> str:
    """The observer's input for a segment: messages in order with a ``## YYYY-MM-DD`` line
    wherever the (UTC) date changes. ``tool_names`` may name tools of calls made before the
    segment started."""
    names = {**(tool_names or {}), **tool_names_of(messages)}
    out: list[str] = []
    day = None
    for msg in messages:
        text = render_message(msg, names, tool_output_max_chars)
        if not text:
            continue
        when = _timestamp(msg.timestamp)
        if when is not None and when.date() != day:
            day = when.date()
            out.append(f"## {day.isoformat()}")
        out.append(text)
    return "\n".join(out)
