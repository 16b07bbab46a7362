"""Spend that survives a restart: the cost tracker's figures kept in the store's state.

:class:`~lore_core.context.economics.CostTracker` adds up real usage in memory; without this a
restart would forget the day's spend (and a daily budget would start over) and every session's
cost. What it holds:

- the day's spend under the gateway's own state id (:data:`GATEWAY_STATE_ID`), key
  ``spend:<YYYY-MM-DD>`` (local day), a number of USD;
- each session's spend under the session, key ``spendUsd``;
- the day's spend by model (USD, exchanges, tokens) and by session, under the gateway's
  state id, key ``spendDetail:<YYYY-MM-DD>`` (:class:`DayDetail`; ``lore spend`` reads it
  with :func:`spend_report`). Days before it was kept have their total only.

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

import attrs

from lore_core.context.economics import CostTracker
from lore_core.interfaces import Store
from lore_core.model import Usage

log = logging.getLogger("lore.context")

#: The state id the gateway keeps its own values under: no client session has an empty id.
GATEWAY_STATE_ID = ""
SESSION_SPEND_KEY = "spendUsd"


#: What is added up per model and day (USD, then counts).
MODEL_FIELDS = (
    "usd",
    "exchanges",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
)
#: Models kept by name per day; more (a client can name any) are added up as "other".
MAX_MODELS_PER_DAY = 200


def day_key(day: dt.date) -> str:
    return f"spend:{day.isoformat()}"


def detail_key(day: dt.date) -> str:
    return f"spendDetail:{day.isoformat()}"


def _number(value: Any) -> float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else 0


@attrs.define
class DayDetail:
    """One day's spend by model and by session, as stored (``spendDetail:<day>``):
    ``{"models": {model: {field: number}}, "sessions": {session id: usd}}``."""

    models: dict[str, dict[str, float]] = attrs.field(factory=dict)
    sessions: dict[str, float] = attrs.field(factory=dict)

    def note(self, session_id: str, model: str, usage: Usage, usd: float) -> None:
        if model not in self.models and len(self.models) >= MAX_MODELS_PER_DAY:
            model = "other"
        row = self.models.get(model)
        if row is None:
            row = self.models[model] = dict.fromkeys(MODEL_FIELDS, 0)
        row["usd"] += usd
        row["exchanges"] += 1
        row["input_tokens"] += usage.input_tokens
        row["output_tokens"] += usage.output_tokens
        row["cache_read_tokens"] += usage.cache_read_tokens
        row["cache_write_tokens"] += usage.cache_write_tokens
        self.sessions[session_id] = self.sessions.get(session_id, 0.0) + usd

    def add(self, other: DayDetail) -> None:
        for model, fields in other.models.items():
            row = self.models.setdefault(model, dict.fromkeys(MODEL_FIELDS, 0))
            for name in MODEL_FIELDS:
                row[name] += fields.get(name, 0)
        for session_id, usd in other.sessions.items():
            self.sessions[session_id] = self.sessions.get(session_id, 0.0) + usd

    def as_json(self) -> dict[str, Any]:
        return {"models": self.models, "sessions": self.sessions}

    @classmethod
    def from_json(cls, value: Any) -> DayDetail:
        """What a store holds; anything of the wrong shape reads as nothing."""
        detail = cls()
        if not isinstance(value, dict):
            return detail
        models, sessions = value.get("models"), value.get("sessions")
        if isinstance(models, dict):
            for model, fields in models.items():
                if isinstance(fields, dict):
                    detail.models[str(model)] = {name: _number(fields.get(name)) for name in MODEL_FIELDS}
        if isinstance(sessions, dict):
            detail.sessions = {str(sid): float(_number(usd)) for sid, usd in sessions.items()}
        return detail


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
        # Spent since the last save, by day, model and session (see DayDetail).
        self._unsaved_detail: dict[dt.date, DayDetail] = {}

    def note(self, session_id: str, model: str | None, usage: Usage, usd: float) -> None:
        """One exchange's cost (what :meth:`CostTracker.record` returned) by model and
        session, saved with the rest by :meth:`save`. In memory only: a few additions."""
        day = self.costs.today()
        detail = self._unsaved_detail.get(day)
        if detail is None:
            detail = self._unsaved_detail[day] = DayDetail()
        detail.note(session_id, model or "unknown", usage, usd)

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
            details, self._unsaved_detail = self._unsaved_detail, {}
            for day, detail in details.items():
                try:
                    stored = DayDetail.from_json(
                        await self.store.get_state(GATEWAY_STATE_ID, detail_key(day))
                    )
                    stored.add(detail)
                    await self.store.set_state(GATEWAY_STATE_ID, detail_key(day), stored.as_json())
                except Exception as exc:
                    log.warning("could not save the spend of %s by model and session: %s", day, exc)
                    self._unsaved_detail.setdefault(day, DayDetail()).add(detail)
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


async def spend_report(store: Store, today: dt.date, days: int) -> dict[str, Any]:
    """``lore spend``: the ``days`` local days up to ``today`` from what the store keeps, by
    day (every day, oldest first), by model and by session (most spent first)."""
    state = await store.session_state(GATEWAY_STATE_ID)
    first = today - dt.timedelta(days=days - 1)
    by_day: list[dict[str, Any]] = []
    total = 0.0
    merged = DayDetail()
    for offset in range(days):
        day = first + dt.timedelta(days=offset)
        usd = round(_usd(state.get(day_key(day), 0)), 6)
        total += usd
        by_day.append({"day": day.isoformat(), "usd": usd})
        merged.add(DayDetail.from_json(state.get(detail_key(day))))
    models = sorted(merged.models.items(), key=lambda item: (-item[1]["usd"], item[0]))
    by_model: list[dict[str, Any]] = [
        {"model": model, "usd": round(fields["usd"], 6), **{k: int(fields[k]) for k in MODEL_FIELDS[1:]}}
        for model, fields in models
    ]
    sessions = sorted(merged.sessions.items(), key=lambda item: (-item[1], item[0]))
    by_session = [{"session": sid, "usd": round(usd, 6)} for sid, usd in sessions]
    return {
        "since": first.isoformat(),
        "until": today.isoformat(),
        "days": days,
        "total_usd": round(total, 6),
        "by_day": by_day,
        "by_model": by_model,
        "by_session": by_session,
    }
