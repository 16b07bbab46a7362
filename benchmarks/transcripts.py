"""Real coding-agent transcripts as the requests their clients sent (shared by the benchmarks).

Reads the development set of real sessions (a folder with ``questions.jsonl`` and
``sessions/<id>.jsonl.gz``, see its README; it is never part of this repository, the
benchmarks take it as an argument) and turns each session into what its client put on the
wire:

* **Claude Code** lines (one per content block of an API response) are joined into API
  messages: consecutive lines of one role are one message. A ``compact_boundary`` ends a
  context window; the next one starts from the ``isCompactSummary`` user message.
* **Codex** rollout items are Responses API input items as they were sent (``message``,
  ``function_call``, ``function_call_output``, ``custom_tool_call``, ...). A ``compacted``
  marker ends a window; the next starts from its ``replacement_history``.

A :class:`Window` is the part of a session between two compactions. :func:`model_calls`
cuts a window into model calls: each is the history up to an assistant turn (the request)
and that turn (what the model answered), so a replay can answer every request with the
turn the real model gave.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

CLAUDE = "claude-code"
CODEX = "codex"

#: Where each agent's sessions are replayed (one project per source repository).
PROJECTS = {CLAUDE: "/workspace/entireio-cli", CODEX: "/workspace/entireio-git-sync"}

# Codex output items: what the model produced in one turn (reasoning is not in the data).
_CODEX_OUTPUT = ("function_call", "custom_tool_call", "web_search_call", "local_shell_call")

#: Tools a Claude Code request offers (names and minimal schemas; the real client offers ~20).
CLAUDE_TOOLS: list[dict[str, Any]] = [
    {
        "name": name,
        "description": description,
        "input_schema": {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]},
    }
    for name, description, key in (
        ("Bash", "Run a shell command", "command"),
        ("Read", "Read a file", "file_path"),
        ("Edit", "Edit a file", "file_path"),
        ("Write", "Write a file", "file_path"),
        ("Grep", "Search file contents", "pattern"),
        ("Glob", "Find files by pattern", "pattern"),
        ("Task", "Hand a job to a subagent", "prompt"),
    )
]
#: Tools a Codex request offers.
CODEX_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a command",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    },
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch"},
]


@attrs.define
class Item:
    """One wire message (Claude Code) or input item (Codex), with where it came from."""

    role: str  # "user", "assistant", "developer", "tool", "system"
    wire: dict[str, Any]
    lines: list[int] = attrs.field(factory=list)

    @property
    def is_model_output(self) -> bool:
        return self.role == "assistant"


@attrs.define
class Window:
    """The messages of one context window, in order."""

    items: list[Item]
    #: The session file's line that starts the window (1 for the first).
    first_line: int = 1


@attrs.define
class Session:
    id: str
    agent: str
    windows: list[Window]
    #: Codex: the system prompt (``instructions``); Claude Code transcripts hold none.
    instructions: str = ""
    lines: int = 0
    #: The project the session is filed under: ``SOURCE.json``'s ``project`` (one per source
    #: repository), else the agent's default (:data:`PROJECTS`).
    source_project: str = ""

    @property
    def project(self) -> str:
        return self.source_project or PROJECTS[self.agent]


@attrs.define
class ModelCall:
    """One request of a replay: ``history`` is what the client sent, ``answer`` what the
    model gave back (``None`` when the window ends with the client's turn)."""

    history: list[Item]
    answer: list[Item] | None


@attrs.define
class Question:
    id: str
    session: str
    agent: str
    question: str
    key_facts: list[str]
    kind: str
    depth: str
    before_compaction: bool
    evidence: list[int] = attrs.field(factory=list)


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if line.strip():
                yield number, json.loads(line)


# ---------------------------------------------------------------------------------------------
# Claude Code
# ---------------------------------------------------------------------------------------------


def _claude_block(block: Any) -> dict[str, Any] | None:
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")} if block.get("text") else None
    if kind == "thinking":
        text = block.get("thinking", "")
        return {"type": "thinking", "thinking": text, "signature": "replayed"} if text else None
    if kind == "tool_use":
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": block.get("input", {})}
    if kind == "tool_result":
        out = {
            "type": "tool_result",
            "tool_use_id": block["tool_use_id"],
            "content": block.get("content", ""),
        }
        if block.get("is_error"):
            out["is_error"] = True
        return out
    return dict(block)


def _claude_session(session_id: str, path: Path) -> Session:
    windows: list[Window] = []
    items: list[Item] = []
    first_line = 1
    last = 0
    for number, line in _lines(path):
        last = number
        kind = line.get("type")
        if kind == "system":
            if line.get("subtype") == "compact_boundary" and items:
                windows.append(Window(items, first_line))
                items, first_line = [], number + 1
            continue
        message = line.get("message") or {}
        role = message.get("role") or kind
        if role not in ("user", "assistant"):
            continue
        content = message.get("content")
        raw_blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        blocks = [b for b in (_claude_block(x) for x in raw_blocks) if b is not None]
        if not blocks:
            continue
        if items and items[-1].role == role:
            items[-1].wire["content"].extend(blocks)
            items[-1].lines.append(number)
        else:
            items.append(Item(role, {"role": role, "content": blocks}, [number]))
    if items:
        windows.append(Window(items, first_line))
    return Session(session_id, CLAUDE, windows, lines=last)


# ---------------------------------------------------------------------------------------------
# Codex
# ---------------------------------------------------------------------------------------------


def _codex_role(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind == "message":
        return str(item.get("role", "user"))
    if kind in _CODEX_OUTPUT:
        return "assistant"
    return "tool"


def _codex_session(session_id: str, path: Path) -> Session:
    windows: list[Window] = []
    items: list[Item] = []
    instructions = ""
    first_line = 1
    last = 0
    for number, line in _lines(path):
        last = number
        kind = line.get("type")
        payload = line.get("payload") or {}
        if kind == "session_meta":
            instructions = ((payload.get("base_instructions") or {}).get("text")) or ""
        elif kind == "compacted":
            if items:
                windows.append(Window(items, first_line))
            history = payload.get("replacement_history") or []
            items = [Item(_codex_role(x), dict(x), [number]) for x in history if isinstance(x, dict)]
            first_line = number
        elif kind == "response_item" and isinstance(payload, dict) and payload.get("type") != "reasoning":
            items.append(Item(_codex_role(payload), dict(payload), [number]))
    if items:
        windows.append(Window(items, first_line))
    return Session(session_id, CODEX, windows, instructions=instructions, lines=last)


# ---------------------------------------------------------------------------------------------
# Public
# ---------------------------------------------------------------------------------------------


def load_session(data: Path, session_id: str, agent: str) -> Session:
    path = data / "sessions" / f"{session_id}.jsonl.gz"
    return _claude_session(session_id, path) if agent == CLAUDE else _codex_session(session_id, path)


def load_questions(data: Path) -> list[Question]:
    out = []
    with open(data / "questions.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                q = json.loads(line)
                out.append(
                    Question(
                        id=q["id"],
                        session=q["session"],
                        agent=q["agent"],
                        question=q["question"],
                        key_facts=list(q["key_facts"]),
                        kind=q["kind"],
                        depth=q["depth"],
                        before_compaction=bool(q["before_compaction"]),
                        evidence=list(q.get("evidence") or []),
                    )
                )
    return out


def load_sessions(data: Path, only: set[str] | None = None) -> list[Session]:
    """Every session the questions name (or only those in ``only``), in the questions' order."""
    seen: dict[str, str] = {}
    for q in load_questions(data):
        seen.setdefault(q.session, q.agent)
    projects = session_projects(data)
    out = []
    for sid, agent in seen.items():
        if only is None or sid in only:
            session = load_session(data, sid, agent)
            session.source_project = projects.get(sid, "")
            out.append(session)
    return out


def session_projects(data: Path) -> dict[str, str]:
    """Session id -> project, from the folder's ``SOURCE.json`` (empty when it has none)."""
    source = data / "SOURCE.json"
    if not source.exists():
        return {}
    sessions = json.loads(source.read_text(encoding="utf-8")).get("sessions") or []
    return {s["session"]: s["project"] for s in sessions if s.get("session") and s.get("project")}


def replayed_text(item: Item) -> str:
    """What a reader of the session sees of one item: message text, each tool call's name and
    input JSON, tool outputs; not thinking (the data set's "replayed text")."""
    wire = item.wire
    parts: list[str] = []

    def content_text(content: Any) -> None:
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    kind = block.get("type")
                    if kind in ("text", "input_text", "output_text"):
                        parts.append(str(block.get("text", "")))
                    elif kind == "tool_use":
                        parts.append(f"{block.get('name')} {json.dumps(block.get('input', {}))}")
                    elif kind == "tool_result":
                        content_text(block.get("content"))

    if "content" in wire:
        content_text(wire["content"])
    kind = wire.get("type")
    if kind in ("function_call", "custom_tool_call", "local_shell_call", "web_search_call"):
        arguments = wire.get("arguments") or wire.get("input") or wire.get("action") or ""
        parts.append(f"{wire.get('name', kind)} {arguments}")
    if "output" in wire:
        content_text(wire["output"])
    return "\n".join(p for p in parts if p)


def model_calls(window: Window, every: int = 150) -> list[ModelCall]:
    """The window as a few cumulative requests: one before an assistant turn each time at
    least ``every`` items were added since the last request, and one before the window's
    last assistant turn. A window that ends with the client's turn gets a last request with
    everything and no answer. A Codex turn is a run of consecutive output items."""
    items = window.items
    # Start index and length of each assistant turn.
    turns: list[tuple[int, int]] = []
    i = 0
    while i < len(items):
        if items[i].is_model_output:
            j = i
            while j < len(items) and items[j].is_model_output:
                j += 1
            turns.append((i, j - i))
            i = j
        else:
            i += 1
    calls: list[ModelCall] = []
    sent = 0
    for index, (start, length) in enumerate(turns):
        if start - sent >= every or index == len(turns) - 1:
            calls.append(ModelCall(items[:start], items[start : start + length]))
            sent = start
    end = turns[-1][0] + turns[-1][1] if turns else 0
    if end < len(items):
        calls.append(ModelCall(list(items), None))
    return calls


def normalise(text: str) -> str:
    """The scoring rule of the data set: lower-cased, markdown markers removed, whitespace
    collapsed."""
    for marker in "*`_#>":
        text = text.replace(marker, "")
    return " ".join(text.lower().split())


def supported(text: str, key_facts: list[str]) -> bool:
    haystack = normalise(text)
    return all(normalise(fact) in haystack for fact in key_facts)
