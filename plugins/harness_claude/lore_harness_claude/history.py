"""Claude Code's own transcripts, for ``lore import --from claude-code``.

Claude Code writes every session to ``~/.claude/projects/<project>/<session id>.jsonl``
(``$CLAUDE_CONFIG_DIR/projects`` when that is set), one JSON object a line:

* ``user`` and ``assistant`` lines carry one API message each (``message.role`` and
  ``content``), with ``sessionId``, ``cwd`` (the directory the session runs in) and
  ``timestamp``. Claude Code writes one line per content block of an answer and one per
  parallel tool result: consecutive lines of one role are one API message, as it sends them;
* a ``system`` line with ``subtype: compact_boundary`` marks Claude Code's own compaction: it
  went on from the ``isCompactSummary`` user message that follows, so that starts a new
  context window;
* ``isSidechain`` lines belong to a subagent (older versions; newer ones write subagents to
  ``<session>/subagents/``, which is not imported), and ``isApiErrorMessage`` lines are
  errors Claude Code shows but never sends: both are left out, as are the other line types
  (``summary``, ``file-history-snapshot``, ``progress``, ...).

The session is rebuilt as Anthropic Messages requests, one per context window. What Claude
Code adds when it sends a message and does not write down (``<system-reminder>`` blocks) is
not in the transcript, so a session continued later through the gateway differs from its
imported history from the first such block on.
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
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

API = AnthropicMessagesCodec.api
#: Transcript files: Claude Code's own, and gzip copies (an archive, a data set).
SUFFIXES = (".jsonl", ".jsonl.gz")
#: Subagent transcripts live below the session's own folder: their work is summarised in the
#: session's Task results, and they are not conversations of their own.
SUBAGENTS = "subagents"


def history_root() -> Path:
    base = os.environ.get("CLAUDE_CONFIG_DIR") or str(Path.home() / ".claude")
    return Path(base) / "projects"


def history_sources(root: Path) -> list[HistorySource]:
    """Every transcript under ``root`` (or ``root`` itself, a file), oldest change first."""
    if root.is_file():
        paths = [root]
    else:
        paths = [
            p
            for p in root.rglob("*")
            if p.name.endswith(SUFFIXES) and SUBAGENTS not in p.relative_to(root).parts and p.is_file()
        ]
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
    """The file's JSON objects. A line that is not JSON is skipped: the last line of a
    session Claude Code is still writing may be cut short."""
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
    """An ISO 8601 timestamp (``2026-02-08T09:16:52.874Z``) in epoch seconds; 0 if not one."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A message's content as content blocks, as they go on the wire (empty text dropped)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and not (b.get("type") == "text" and not b.get("text"))]


class _Window:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.times: list[float] = []

    def add(self, role: str, blocks: list[dict[str, Any]], at: float) -> None:
        if self.messages and self.messages[-1]["role"] == role:
            self.messages[-1]["content"].extend(blocks)
        else:
            self.messages.append({"role": role, "content": blocks})
            self.times.append(at)


def read_history(source: HistorySource) -> Iterator[ImportedSession]:
    """The one session of a transcript file (nothing when it is not Claude Code's)."""
    path = Path(source.key)
    windows: list[_Window] = [_Window()]
    session_ids: list[str] = []
    cwd = ""
    model: str | None = None
    for record in records(path):
        if "payload" in record:
            return  # a Codex rollout (a --path folder may hold both)
        if record.get("isSidechain") or record.get("isApiErrorMessage"):
            continue
        session_id = record.get("sessionId")
        if isinstance(session_id, str) and session_id and session_id not in session_ids:
            session_ids.append(session_id)
        if not cwd and isinstance(record.get("cwd"), str):
            cwd = record["cwd"]
        kind = record.get("type")
        if kind == "system":
            if record.get("subtype") == "compact_boundary" and windows[-1].messages:
                windows.append(_Window())
            continue
        message = record.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            continue
        role = message.get("role") or kind
        blocks = _blocks(message.get("content"))
        if role not in ("user", "assistant") or not blocks:
            continue
        if (
            role == "assistant"
            and isinstance(message.get("model"), str)
            and message["model"] != "<synthetic>"
        ):
            model = message["model"]
        windows[-1].add(role, blocks, epoch(record.get("timestamp")))
    windows = [w for w in windows if w.messages]
    if not windows:
        return
    # The file is named after the session; a copy elsewhere (a data set) may be named
    # otherwise, and then the id its lines carry is the one its requests carried.
    stem = path.name.split(".", 1)[0]
    session_id = stem if stem in session_ids or not session_ids else session_ids[0]
    request: dict[str, Any] = {"model": model} if model else {}
    yield ImportedSession(
        id=session_id,
        project=cwd,
        api=API,
        windows=[HistoryWindow(request={**request, "messages": w.messages}, times=w.times) for w in windows],
    )
