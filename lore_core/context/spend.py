"""Spend that survives a restart: the cost tracker's figures kept in the store's state.

:class:`~lore_core.context.economics.CostTracker` adds up real usage in memory; without this a
restart would forget the day's spend (and a daily budget would start over) and every session's
cost. What it holds:

- the day's spend under the gateway's own state id (:data:`GATEWAY_STATE_ID`), key
  ``spend:<YYYY-MM-DD>`` (local day), a number of USD;
- each session's spend under the session, key ``spendUsd``.

Writes are batched (:meth:`SpendBook.save`, called every few seconds and at shutdown): a
request never waits for the store. Stored values are only ever increased by what was spent
since the last save, read and written back (this gateway is the store's only writer), so a
save that fails keeps its increments for the next one and nothing is counted twice.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any

from lore_core.context.economics import CostTracker
from lore_core.interfaces import Store

log = logging.getLogger("lore.context")

#: The state id the gateway keeps its own values under: no client session has an empty id.
GATEWAY_STATE_ID = ""
SESSION_SPEND_KEY = "spendUsd"


def day_key(day: dt.date) -> str:
    return f"spend:{day.isoformat()}"


def _usd(value: Any) -> float:
    try:
        usd = float(value)
    except (TypeError, ValueError):
        return 0.0
    return usd if usd > 0 else 0.0


class SpendBook:
    """Loads and saves a :class:`CostTracker`'s spend in a store's state."""

    def __init__(self, costs: CostTracker, store: Store) -> None:
        self.costs = costs
        self.store = store
        # Days whose stored spend was added to the tracker already (the tracker says it of
        # sessions: it forgets sessions not seen for long, and then their loaded state).
        self._loaded_days: set[dt.date] = set()
        self._lock = asyncio.Lock()
        self._last_error: str | None = None  # logged once, not once per save

    async def load_today(self) -> bool:
        """Add today's stored spend to the tracker (once); returns whether it is loaded."""
        async with self._lock:
            return await self._load_day(self.costs.today())

    async def load_session(self, session_id: str) -> None:
        """Add a session's stored spend to the tracker (once), before reporting it."""
        async with self._lock:
            await self._load_session(session_id)

    async def save(self) -> None:
        """Write what was spent since the last save. What cannot be written is kept for the
        next call; raises nothing."""
        async with self._lock:
            days, sessions = self.costs.take_unsaved()
            for day, usd in days.items():
                try:
                    await self._load_day(day)
                    await self._add(GATEWAY_STATE_ID, day_key(day), usd)
                except Exception as exc:
                    log.warning("could not save the spend of %s: %s", day, exc)
                    self.costs.unsaved_day(day, usd)
            if not sessions:
                return
            try:
                await self._add_sessions(sessions)
            except Exception as exc:
                # All of them wait for the next call: a failing store (a full disk) is
                # logged once, not once per save.
                for session_id, usd in sessions.items():
                    self.costs.unsaved_session(session_id, usd)
                if str(exc) != self._last_error:
                    log.warning("could not save the spend of sessions (tried again later): %s", exc)
                self._last_error = str(exc)
            else:
                self._last_error = None

    async def _add_sessions(self, sessions: dict[str, float]) -> None:
        """Add each session's new spend to what is stored: one read and one write for all of
        them (one each per session took seconds under load, and the store's write lock)."""
        stored = await self.store.get_states(SESSION_SPEND_KEY, list(sessions))
        for session_id in sessions:
            if not self.costs.holds_saved(session_id):
                self.costs.add_saved(session_id=session_id, usd=_usd(stored.get(session_id, 0)))
        await self.store.set_states(
            [
                (session_id, SESSION_SPEND_KEY, _usd(stored.get(session_id, 0)) + usd)
                for session_id, usd in sessions.items()
            ]
        )

    async def _add(self, state_id: str, key: str, usd: float) -> None:
        """Read, add, write back: this gateway is the store's only writer."""
        stored = _usd(await self.store.get_state(state_id, key, 0))
        await self.store.set_state(state_id, key, stored + usd)

    async def _load_day(self, day: dt.date) -> bool:
        if day in self._loaded_days:
            return True
        try:
            stored = await self.store.get_state(GATEWAY_STATE_ID, day_key(day), 0)
        except Exception as exc:
            log.warning("could not read the spend of %s (tried again later): %s", day, exc)
            return False
        self.costs.add_saved(day=day, usd=_usd(stored))
        self._loaded_days.add(day)
        return True

    async def _load_session(self, session_id: str) -> None:
        if self.costs.holds_saved(session_id):
            return
        stored = await self.store.get_state(session_id, SESSION_SPEND_KEY, 0)
        self.costs.add_saved(session_id=session_id, usd=_usd(stored))
