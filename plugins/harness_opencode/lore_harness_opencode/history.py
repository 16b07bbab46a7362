"""OpenCode's own session storage, for ``lore import --from opencode``.

OpenCode keeps its sessions under ``$XDG_DATA_HOME/opencode`` (``~/.local/share/opencode``):

* since 1.2, in the SQLite database ``opencode.db``: tables ``session`` (``id``,
  ``directory``: where it ran, ``time_updated`` in ms), ``message`` (``session_id``,
  ``time_created``, ``data``: the message's JSON without its ids) and ``part`` (``message_id``,
  ``session_id``, ``data``);
* before, as JSON files: ``storage/session/<project>/<session>.json``,
  ``storage/message/<session>/<message>.json``, ``storage/part/<message>/<part>.json``, the
  same objects with their ids. OpenCode 1.2 moved them into the database and left them
  there: a session the database holds is read from it only.

A message (``role`` ``user`` or ``assistant``) is a list of parts: ``text``, ``reasoning``,
``tool`` (``callID``, ``tool``, ``state`` with ``input`` and ``output`` or ``error``),
``file``, ``compaction``, and bookkeeping (``step-start`` / ``step-finish``, ``snapshot``,
``patch``, ...). Each source is one session (a session's database rows, or its JSON file).

The session is rebuilt as Anthropic Messages requests (whatever provider the session used:
the shape OpenCode sends Anthropic), one per context window: an assistant message's steps
(between ``step-start`` parts) become an assistant message with its text, thinking and
``tool_use`` blocks and a user message with the ``tool_result`` blocks; a user message with a
``compaction`` part (OpenCode's own compaction, sent as "What did we do so far?") starts a new
window. File attachments are left out (their bytes are not conversation).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lore_core.interfaces import HistorySource, HistoryWindow, ImportedSession
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

API = AnthropicMessagesCodec.api
DATABASE = "opencode.db"
STORAGE = "storage"
#: What OpenCode sends the model for the user message of its compaction.
COMPACTION_PROMPT = "What did we do so far?"
#: What OpenCode sends for a tool call that never finished.
INTERRUPTED = "[Tool execution was interrupted]"
#: Between a database path and a session id in a source key.
_SEPARATOR = "#"

#: (message info, its parts), a session's messages in order.
Messages = list[tuple[dict[str, Any], list[dict[str, Any]]]]


def history_root() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "opencode"


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------


def history_sources(root: Path) -> list[HistorySource]:
    """One source per session: those of the database (``root`` may be the database itself),
    then those of the older JSON storage that the database does not hold."""
    database = root if root.is_file() else root / DATABASE
    sources = _database_sources(database) if database.is_file() else []
    storage = root / STORAGE if (root / STORAGE).is_dir() else root
    if root.is_dir() and (storage / "session").is_dir():
        held = {s.key.rsplit(_SEPARATOR, 1)[1] for s in sources}
        sources += [s for s in _storage_sources(storage) if Path(s.key).stem not in held]
    return sorted(sources, key=lambda s: (s.modified, s.key))


def _connect(database: Path) -> sqlite3.Connection:
    # Read-only: OpenCode may be running and writing it (WAL lets both go on).
    return sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)


def _database_sources(database: Path) -> list[HistorySource]:
    with _connect(database) as con:
        sizes = dict(
            con.execute("SELECT session_id, sum(length(data)) FROM part GROUP BY session_id").fetchall()
        )
        rows = con.execute("SELECT id, time_updated FROM session").fetchall()
    return [
        HistorySource(
            key=f"{database}{_SEPARATOR}{sid}", size=int(sizes.get(sid) or 0), modified=(updated or 0) / 1000
        )
        for sid, updated in rows
    ]


def _storage_sources(storage: Path) -> list[HistorySource]:
    sources = []
    for path in (storage / "session").glob("*/*.json"):
        # The session file barely changes; its messages' folder does with every message.
        messages = storage / "message" / path.stem
        stats = [path.stat()] + ([messages.stat()] if messages.is_dir() else [])
        size = sum(p.stat().st_size for p in messages.glob("*.json")) if messages.is_dir() else 0
        modified = max(s.st_mtime for s in stats)
        sources.append(HistorySource(key=str(path), size=path.stat().st_size + size, modified=modified))
    return sources


# ---------------------------------------------------------------------------------------------
# Reading one session
# ---------------------------------------------------------------------------------------------


def read_history(source: HistorySource) -> Iterator[ImportedSession]:
    """The session of one source: database rows or JSON files."""
    database, _, session_id = source.key.rpartition(_SEPARATOR)
    if database and Path(database).is_file():
        found = _database_session(Path(database), session_id)
    else:
        found = _storage_session(Path(source.key))
    if found is None:
        return
    session_id, directory, messages = found
    windows = conversation(messages)
    if windows:
        yield ImportedSession(id=session_id, project=directory, api=API, windows=windows)


def _json(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str | bytes) else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _database_session(database: Path, session_id: str) -> tuple[str, str, Messages] | None:
    with _connect(database) as con:
        row = con.execute("SELECT id, directory FROM session WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None  # deleted since it was listed
        infos = con.execute(
            "SELECT id, time_created, data FROM message WHERE session_id = ? ORDER BY time_created, id",
            (session_id,),
        ).fetchall()
        parts: dict[str, list[dict[str, Any]]] = {}
        for message_id, data in con.execute(
            "SELECT message_id, data FROM part WHERE session_id = ? ORDER BY message_id, id", (session_id,)
        ):
            parts.setdefault(message_id, []).append(_json(data))
    messages: Messages = []
    for message_id, created, data in infos:
        info = _json(data)
        info.setdefault("time", {}).setdefault("created", created)
        messages.append((info, parts.get(message_id, [])))
    return str(row[0]), str(row[1] or ""), messages


def _storage_session(path: Path) -> tuple[str, str, Messages] | None:
    session = _json(path.read_text(encoding="utf-8"))
    session_id = session.get("id")
    if not isinstance(session_id, str) or not session_id:
        return None
    storage = path.parents[2]  # storage/session/<project>/<session>.json
    infos = [_json(p.read_text(encoding="utf-8")) for p in (storage / "message" / session_id).glob("*.json")]
    infos.sort(key=lambda i: (_created(i), str(i.get("id", ""))))
    messages: Messages = []
    for info in infos:
        folder = storage / "part" / str(info.get("id", ""))
        parts = sorted(
            (_json(p.read_text(encoding="utf-8")) for p in folder.glob("*.json")),
            key=lambda p: str(p.get("id", "")),
        )
        messages.append((info, parts))
    directory = session.get("directory")
    return session_id, directory if isinstance(directory, str) else "", messages


def _created(info: dict[str, Any]) -> float:
    time = info.get("time")
    created = time.get("created") if isinstance(time, dict) else None
    return float(created) if isinstance(created, int | float) else 0.0


# ---------------------------------------------------------------------------------------------
# OpenCode messages -> Anthropic Messages
# ---------------------------------------------------------------------------------------------


class _Window:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.times: list[float] = []

    def add(self, role: str, blocks: list[dict[str, Any]], at: float) -> None:
        # Consecutive messages of one role are one (tool results and the next prompt).
        if not blocks:
            return
        if self.messages and self.messages[-1]["role"] == role:
            self.messages[-1]["content"].extend(blocks)
        else:
            self.messages.append({"role": role, "content": blocks})
            self.times.append(at)


def conversation(messages: Messages) -> list[HistoryWindow]:
    """A session's messages as Anthropic Messages requests, one per context window."""
    windows = [_Window()]
    model: str | None = None
    for info, parts in messages:
        at = _created(info) / 1000
        role = info.get("role")
        if role == "user":
            if any(p.get("type") == "compaction" for p in parts):
                if windows[-1].messages:
                    windows.append(_Window())
                windows[-1].add("user", [{"type": "text", "text": COMPACTION_PROMPT}], at)
                continue
            windows[-1].add("user", _user_blocks(parts), at)
        elif role == "assistant":
            if isinstance(info.get("modelID"), str):
                model = info["modelID"]
            for content, results in _steps(parts):
                windows[-1].add("assistant", content, at)
                windows[-1].add("user", results, at)
    request: dict[str, Any] = {"model": model} if model else {}
    return [
        HistoryWindow(request={**request, "messages": w.messages}, times=w.times)
        for w in windows
        if w.messages
    ]


def _user_blocks(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks = []
    for part in parts:
        if part.get("type") == "text" and part.get("text") and not part.get("ignored"):
            blocks.append({"type": "text", "text": part["text"]})
    return blocks


def _steps(parts: list[dict[str, Any]]) -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Each step of an assistant message: what the model said (text, thinking, tool calls)
    and the results of its calls."""
    content: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for part in parts:
        kind = part.get("type")
        if kind == "step-start" and (content or results):
            yield content, results
            content, results = [], []
        elif kind == "text" and part.get("text"):
            content.append({"type": "text", "text": part["text"]})
        elif kind == "reasoning" and part.get("text"):
            block: dict[str, Any] = {"type": "thinking", "thinking": part["text"]}
            signature = ((part.get("metadata") or {}).get("anthropic") or {}).get("signature")
            if isinstance(signature, str):
                block["signature"] = signature
            content.append(block)
        elif kind == "tool" and isinstance(part.get("callID"), str):
            state: dict[str, Any] = part["state"] if isinstance(part.get("state"), dict) else {}
            call_input = state.get("input") if isinstance(state.get("input"), dict) else {}
            content.append(
                {
                    "type": "tool_use",
                    "id": part["callID"],
                    "name": str(part.get("tool", "")),
                    "input": call_input,
                }
            )
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": part["callID"]}
            status = state.get("status")
            if status == "completed":
                result["content"] = str(state.get("output", ""))
            elif status == "error":
                result |= {"content": str(state.get("error", "")), "is_error": True}
            else:
                result |= {"content": INTERRUPTED, "is_error": True}
            results.append(result)
    if content or results:
        yield content, results
