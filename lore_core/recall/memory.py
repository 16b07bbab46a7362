"""Recall across requests: the recall tool in a request, and the recalls the client saw
only as marker lines put back into its history as they went upstream.

:func:`inject_tool` appends the ``recall`` tool to a request that offers tools (after
composition, so it is the last tool and the cached prefix before it stays valid).
:meth:`RecallMemory.restore` turns the marker lines the client kept in its history back into
the tool call + tool result that really went upstream, through the codec's
:class:`~lore_core.interfaces.RecallWire` (so the next prompt's prefix stays cache-stable).
"""

from __future__ import annotations

import logging
from typing import Any

from lore_core.interfaces import Codec, RecallWire
from lore_core.model import Message, RequestView
from lore_core.recall.tool import TOOL_NAME, add_recall_tool, recall_tool, tool_name
from lore_core.wire.turns import MARKER_PREFIXES, call_ids, text_of

log = logging.getLogger("lore.recall.proxy")

STATE_KEY = "recall.restore"
# Sessions whose records stay cached in memory.
MAX_CACHED_SESSIONS = 1000
# Records kept per session: one per recall turn; old ones fall off (their markers then stay
# plain text in the history, which is still a valid conversation).
MAX_RECORDS = 200


def inject_tool(codec: Codec, view: RequestView, enabled: bool = True) -> bool:
    """Append the recall tool when the request offers tools and has none named ``recall``.
    Returns whether the gateway now owns a recall tool in this request."""
    if not enabled or codec.recall is None or not view.tools:
        return False
    named = [t for t in view.tools if tool_name(t) == TOOL_NAME]
    if named:
        # Already added (a view composed again, e.g. after an overflow) is ours; any other
        # tool named recall is the client's own, and so are its calls.
        ours = recall_tool(codec)
        return all(t == ours for t in named)
    view.tools = add_recall_tool(codec, view.tools)
    view.modified = True
    return True


class RecallMemory:
    """Per session, what went upstream for each recall the client saw only as a marker (or
    did not see at all, when mixed with its own tool calls). Persisted with the store's
    session state, a memory cache in front."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._cache: dict[str, list[dict[str, Any]]] = {}

    async def records(self, session_id: str) -> list[dict[str, Any]]:
        cached = self._cache.get(session_id)
        if cached is not None:
            return cached
        try:
            value = await self.store.get_state(session_id, STATE_KEY, [])
        except Exception as exc:
            # Not cached: the store may come back (records of an earlier run are in it).
            log.debug("could not read the recall records of session %s: %s", session_id, exc)
            return []
        records = value if isinstance(value, list) else []
        self._remember(session_id, records)
        return records

    def _remember(self, session_id: str, records: list[dict[str, Any]]) -> None:
        self._cache.pop(session_id, None)
        self._cache[session_id] = records  # most recently used last
        while len(self._cache) > MAX_CACHED_SESSIONS:
            self._cache.pop(next(iter(self._cache)))

    def forget(self, session_id: str) -> None:
        """Drop the session's cached records (``lore forget``; the store drops its own)."""
        self._cache.pop(session_id, None)

    async def add(self, session_id: str, record: dict[str, Any]) -> None:
        records = list(await self.records(session_id))
        records.append(record)
        records = records[-MAX_RECORDS:]
        self._remember(session_id, records)
        try:
            await self.store.set_state(session_id, STATE_KEY, records)
        except Exception:
            log.exception("could not persist a recall record of session %s", session_id)

    async def restore(self, codec: Codec, view: RequestView, session_id: str) -> RequestView:
        """``view`` with every remembered recall put back as it went upstream."""
        if codec.recall is None:
            return view
        records = await self.records(session_id)
        if not records:
            return view
        try:
            messages = _restore(codec.recall, codec.api, view.messages, records)
        except Exception:
            log.exception("restoring recall exchanges failed; the history is sent as the client sent it")
            return view
        if messages is None:
            return view
        view.messages = messages
        view.modified = True
        return view


def _restore(
    recall: RecallWire, api: str, messages: list[Message], records: list[dict[str, Any]]
) -> list[Message] | None:
    out = list(messages)
    changed = False
    used: set[int] = set()
    mine = [(n, r) for n, r in enumerate(records) if r.get("api") == api]
    anchors = {r.get("anchor") for _, r in mine if r.get("kind") == "mixed"}
    i = 0
    while i < len(out):
        msg = out[i]
        if msg.role != "assistant":
            i += 1
            continue
        # Cheap checks first: most assistant messages hold no marker and no anchored call.
        text = text_of(msg)
        has_marker = MARKER_PREFIXES[0] in text or MARKER_PREFIXES[1] in text
        if not has_marker and not (anchors and anchors & set(call_ids(msg))):
            i += 1
            continue
        replaced = None
        for n, record in mine:
            if n in used:
                continue
            if record.get("kind") == "loop":
                replaced = recall.restore_loop(out, i, record)
            elif record.get("kind") == "mixed":
                replaced = recall.restore_mixed(out, i, record)
            if replaced is not None:
                used.add(n)
                break
        if replaced is None:
            i += 1
            continue
        out, i = replaced
        changed = True
    return out if changed else None
