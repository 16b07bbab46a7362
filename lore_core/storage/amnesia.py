"""``/lore:amnesia``: stop storing a session, and resume.

What is not stored is decided by message position in the session's conversation: turning
amnesia on opens a range at the command's position, turning it off closes it after the
gateway's answer. The writer skips every message whose position falls in a range, now and
whenever the client resends that history later, so nothing said while amnesia was on ever
reaches the store (and so never reaches distillation or recall). The ranges live in the
store's per-session state and survive a restart.

The same state holds the mark ``lore forget`` leaves (:mod:`lore_core.storage.forget`): what
a client resends of a forgotten session is dropped by the writer the same way.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from lore_core.storage.forget import HOLD, ForgetMark

log = logging.getLogger("lore.amnesia")

STATE_KEY = "amnesia"
#: Sessions without ranges whose (empty) state stays cached.
MAX_CACHED_SESSIONS = 10_000

#: ``(first position, end position)``; the end is exclusive, ``None`` while amnesia is on.
Range = tuple[int, int | None]


def _parse_mark(raw: Any) -> ForgetMark | None:
    found = raw.get(FORGOTTEN) if isinstance(raw, dict) else None
    if found is None:
        return None
    mark = ForgetMark.from_json(found)
    if mark is None:
        log.warning("ignoring a malformed forget mark")
    return mark


#: Where the forget mark lives in the state value (beside ``ranges``): one read per session.
FORGOTTEN = "forgotten"


def _parse(raw: Any) -> list[Range]:
    ranges: list[Range] = []
    for item in (raw or {}).get("ranges", []) if isinstance(raw, dict) else []:
        try:
            start, end = item
            ranges.append((int(start), None if end is None else int(end)))
        except (TypeError, ValueError):
            log.warning("ignoring a malformed amnesia range %r", item)
    return ranges


def is_forgotten(position: int, ranges: list[Range]) -> bool:
    return any(start <= position and (end is None or position < end) for start, end in ranges)


class Amnesia:
    """Per-session forget ranges and forget marks, cached in memory in front of the store's
    state."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._ranges: dict[str, list[Range]] = {}
        # Sessions forgotten (lore forget): their marks stay cached, like ranges.
        self._marks: dict[str, ForgetMark] = {}
        # Sessions being forgotten right now (hold/release): every message is dropped.
        self._held: set[str] = set()
        # Sessions read and found without ranges, most recent last: a cache (forgetting one
        # costs one read on its next request), bounded so a gateway serving for weeks does
        # not keep an entry for every session it ever saw. Sessions with ranges stay.
        self._without: OrderedDict[str, None] = OrderedDict()

    async def load(self, session_id: str) -> list[Range]:
        """The session's ranges (read from the store once per process)."""
        if session_id not in self._ranges:
            try:
                raw = await self.store.get_state(session_id, STATE_KEY)
            except Exception as exc:
                # An unreadable state must not stop the request; it is read again next time.
                log.warning("could not read the amnesia state of %s: %s", session_id, exc)
                return []
            mark = _parse_mark(raw)
            if mark is not None:
                self._marks[session_id] = mark
            self._remember(session_id, _parse(raw))
        elif session_id in self._without:
            self._without.move_to_end(session_id)
        return self._ranges[session_id]

    def _remember(self, session_id: str, ranges: list[Range]) -> None:
        self._ranges[session_id] = ranges
        if ranges or session_id in self._marks:
            self._without.pop(session_id, None)
            return
        self._without[session_id] = None
        self._without.move_to_end(session_id)
        while len(self._without) > MAX_CACHED_SESSIONS:
            gone, _ = self._without.popitem(last=False)
            self._ranges.pop(gone, None)

    def ranges(self, session_id: str) -> list[Range]:
        """The cached ranges (empty until :meth:`load` ran for the session)."""
        return self._ranges.get(session_id, [])

    def is_on(self, session_id: str) -> bool:
        ranges = self.ranges(session_id)
        return bool(ranges) and ranges[-1][1] is None

    async def turn_on(self, session_id: str, position: int) -> bool:
        """Forget from ``position`` on; ``False`` when amnesia was already on."""
        ranges = list(await self.load(session_id))
        if ranges and ranges[-1][1] is None:
            return False
        ranges.append((position, None))
        await self._save(session_id, ranges)
        return True

    async def turn_off(self, session_id: str, end: int) -> bool:
        """Store again from position ``end`` on; ``False`` when amnesia was not on."""
        ranges = list(await self.load(session_id))
        if not ranges or ranges[-1][1] is not None:
            return False
        ranges[-1] = (ranges[-1][0], max(end, ranges[-1][0]))
        await self._save(session_id, ranges)
        return True

    async def _save(self, session_id: str, ranges: list[Range], mark: ForgetMark | None = None) -> None:
        # Persist first: a state the store did not take must not look applied.
        mark = mark if mark is not None else self._marks.get(session_id)
        value: dict[str, Any] = {"ranges": [list(r) for r in ranges]}
        if mark is not None:
            value[FORGOTTEN] = mark.as_json()
        await self.store.set_state(session_id, STATE_KEY, value)
        if mark is not None:
            self._marks[session_id] = mark
        self._remember(session_id, ranges)

    # -- lore forget ---------------------------------------------------------------------------

    def forgotten(self, session_id: str) -> ForgetMark | None:
        """What the writer drops of the session (cached: :meth:`load` read it), or ``None``."""
        if session_id in self._held:
            return HOLD
        return self._marks.get(session_id)

    def hold(self, session_id: str) -> None:
        """Drop every message of the session from now until :meth:`release` (in memory only:
        what a forget in progress must not see written after it read the store)."""
        self._held.add(session_id)

    def release(self, session_id: str) -> None:
        self._held.discard(session_id)

    async def forget(self, session_id: str, mark: ForgetMark) -> ForgetMark:
        """Add ``mark`` to the session's (persisted before it applies); returns the mark now
        in force."""
        # Read from the store, not the cache, and let a failed read raise: the ranges and an
        # earlier mark are written back with the new mark, never replaced by nothing.
        raw = await self.store.get_state(session_id, STATE_KEY)
        old = _parse_mark(raw)
        merged = old.merged(mark) if old is not None else mark
        await self._save(session_id, _parse(raw), merged)
        return merged
