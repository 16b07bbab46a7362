"""Codex's own session files ("rollouts"), for ``lore import --from codex``.

Codex writes every session to ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``
(``$CODEX_HOME/sessions`` when that is set), one ``{timestamp, type, payload}`` object a line:

* ``session_meta`` (first): the session's ``id`` (what its requests carry as ``session-id``)
  and ``cwd``; ``turn_context``: the model (and the cwd again);
* ``response_item``: a Responses API input item exactly as Codex sends it back to the model
  (``message``, ``reasoning``, ``function_call`` / ``function_call_output``,
  ``custom_tool_call`` / ``custom_tool_call_output``, ...);
* ``compacted``: Codex's own compaction; it went on from ``replacement_history`` (older
  versions: from the summary in ``message``), which starts a new context window;
* ``event_msg`` lines are what the terminal showed (copies of the items): left out.

Rollouts written before the ``payload`` wrapping (2025) hold a first line with the session's
``id`` and the items themselves on the following lines; they are read too.

The session is rebuilt as Responses API requests, one per context window.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from lore_core.interfaces import HistorySource, HistoryWindow, ImportedSession
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec

API = OpenAIResponsesCodec.api
SUFFIXES = (".jsonl", ".jsonl.gz")
#: Item types of the rollouts written before the ``payload`` wrapping.
_LEGACY_ITEMS = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "web_search_call",
    }
)


def history_root() -> Path:
    base = os.environ.get("CODEX_HOME") or str(Path.home() / ".codex")
    return Path(base) / "sessions"


def history_sources(root: Path) -> list[HistorySource]:
    """Every session file under ``root`` (or ``root`` itself, a file), oldest change first."""
    paths = (
        [root]
        if root.is_file()
        else [p for p in root.rglob("*") if p.name.endswith(SUFFIXES) and p.is_file()]
    )
    sources = []
    for path in paths:
        stat = path.stat()
        sources.append(HistorySource(key=str(path), size=stat.st_size, modified=stat.st_mtime))
    return sorted(sources, key=lambda s: (s.modified, s.key))


def _open(path: Path) -> IO[str]:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def records(path: Path) -> Iterator[dict[str, Any]]:
    """The file's JSON objects; a line that is not JSON (the cut-short end of a session Codex
    is still writing) is skipped."""
    with _open(path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


def epoch(value: Any) -> float:
    """An ISO 8601 timestamp in epoch seconds; 0 if not one."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


class _Window:
    def __init__(self, items: list[dict[str, Any]] | None = None, at: float = 0.0) -> None:
        self.items: list[dict[str, Any]] = items or []
        self.times: list[float] = [at] * len(self.items)

    def add(self, item: dict[str, Any], at: float) -> None:
        self.items.append(item)
        self.times.append(at)


def read_history(source: HistorySource) -> Iterator[ImportedSession]:
    """The one session of a rollout file (nothing when it is not Codex's)."""
    path = Path(source.key)
    session_id = ""
    cwd = ""
    model: str | None = None
    windows = [_Window()]
    first = True
    for record in records(path):
        at = epoch(record.get("timestamp"))
        payload = record.get("payload")
        if first:
            first = False
            legacy_meta = (
                "payload" not in record and isinstance(record.get("id"), str) and "type" not in record
            )
            if record.get("type") != "session_meta" and not legacy_meta:
                return  # not a rollout (a --path folder may hold other transcripts)
            meta = payload if isinstance(payload, dict) else record
            session_id = str(meta.get("id") or "")
            cwd = _text(meta.get("cwd"))
            continue
        kind = record.get("type")
        if not isinstance(payload, dict):
            if "payload" not in record and kind in _LEGACY_ITEMS:
                windows[-1].add(record, at)
            continue
        if kind == "response_item":
            windows[-1].add(payload, at)
        elif kind == "turn_context":
            model = _text(payload.get("model")) or model
            cwd = cwd or _text(payload.get("cwd"))
        elif kind == "compacted":
            history = payload.get("replacement_history")
            if isinstance(history, list):
                items = [i for i in history if isinstance(i, dict)]
            else:
                # Older Codex carried on from its summary, sent as a user message.
                summary = payload.get("message") if isinstance(payload.get("message"), str) else ""
                text = {"type": "input_text", "text": summary}
                items = [{"type": "message", "role": "user", "content": [text]}] if summary else []
            windows.append(_Window(items, at))
    windows = [w for w in windows if w.items]
    if not session_id or not windows:
        return
    request: dict[str, Any] = {"model": model} if model else {}
    yield ImportedSession(
        id=session_id,
        project=cwd,
        api=API,
        windows=[HistoryWindow(request={**request, "input": w.items}, times=w.times) for w in windows],
    )
