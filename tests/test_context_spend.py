"""Spend kept in the store's state (lore_core.context.spend): saved in batches, loaded once,
never counted twice, and kept for the next save when the store fails."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from lore_core.builtin.memory_store import MemoryStore
from lore_core.context.economics import CostTracker
from lore_core.context.pricing import PriceTable
from lore_core.context.spend import GATEWAY_STATE_ID, SESSION_SPEND_KEY, SpendBook, day_key
from lore_core.model import Usage

NOON = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC).timestamp()
TODAY = dt.date(2026, 11, 30)
DOLLAR = Usage(input_tokens=1_000_000 // 3)  # $1.00 at Sonnet's $3/Mtok input (to 1e-6)


def tracker(clock: float = NOON) -> CostTracker:
    return CostTracker(PriceTable(), 10.0, clock=lambda: clock, tz=dt.UTC)


async def opened_store() -> MemoryStore:
    store = MemoryStore()
    await store.open()
    return store


def test_spend_is_saved_and_loaded_by_the_next_run() -> None:
    async def run() -> tuple[CostTracker, Any, Any]:
        store = await opened_store()
        first = tracker()
        book = SpendBook(first, store)
        assert await book.load_today()
        first.record("s1", "claude-sonnet-4-5", DOLLAR)
        first.record("s2", "claude-sonnet-4-5", DOLLAR)
        await book.save()
        first.record("s1", "claude-sonnet-4-5", DOLLAR)
        await book.save()
        await book.save()  # nothing new: nothing added

        second = tracker()
        again = SpendBook(second, store)
        await again.load_today()
        await again.load_today()  # once only
        await again.load_session("s1")
        await again.load_session("s1")
        day = await store.get_state(GATEWAY_STATE_ID, day_key(TODAY))
        session = await store.get_state("s1", SESSION_SPEND_KEY)
        return second, day, session

    second, day, session = asyncio.run(run())
    assert round(day, 4) == 3.0 and round(session, 4) == 2.0
    assert round(second.day_cost(), 4) == 3.0
    assert round(second.session_cost("s1"), 4) == 2.0
    assert second.session_cost("s2") == 0.0  # not loaded until asked for


def test_new_spend_adds_to_what_an_earlier_run_saved() -> None:
    async def run() -> tuple[CostTracker, float, float]:
        store = await opened_store()
        await store.set_state(GATEWAY_STATE_ID, day_key(TODAY), 5.0)
        await store.set_state("s1", SESSION_SPEND_KEY, 4.0)
        costs = tracker()
        book = SpendBook(costs, store)
        # A session's spend saved before its stored total was ever read: read first, once.
        costs.record("s1", "claude-sonnet-4-5", DOLLAR)
        await book.save()
        await book.load_session("s1")
        return (
            costs,
            await store.get_state(GATEWAY_STATE_ID, day_key(TODAY)),
            await store.get_state("s1", SESSION_SPEND_KEY),
        )

    costs, day, session = asyncio.run(run())
    assert round(day, 4) == 6.0 and round(session, 4) == 5.0
    assert round(costs.day_cost(), 4) == 6.0 and round(costs.session_cost("s1"), 4) == 5.0


class FlakyStore(MemoryStore):
    """set_state fails while ``failing``."""

    failing = True

    async def set_state(self, session_id: str, key: str, value: Any) -> None:
        if self.failing:
            raise OSError("disk full")
        await super().set_state(session_id, key, value)


def test_a_failed_save_keeps_the_spend_for_the_next_one() -> None:
    async def run() -> tuple[float, float]:
        store = FlakyStore()
        await store.open()
        costs = tracker()
        book = SpendBook(costs, store)
        costs.record("s1", "claude-sonnet-4-5", DOLLAR)
        await book.save()  # logged, kept
        costs.record("s1", "claude-sonnet-4-5", DOLLAR)
        store.failing = False
        await book.save()
        return (
            await store.get_state(GATEWAY_STATE_ID, day_key(TODAY)),
            await store.get_state("s1", SESSION_SPEND_KEY),
        )

    day, session = asyncio.run(run())
    assert round(day, 4) == 2.0 and round(session, 4) == 2.0


class CountingStore(MemoryStore):
    """Counts the state calls a save makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def set_state(self, session_id: str, key: str, value: Any) -> None:
        self.calls.append("set_state")
        await super().set_state(session_id, key, value)

    async def set_states(self, values: Any) -> None:
        self.calls.append("set_states")
        for session_id, key, value in values:
            await super().set_state(session_id, key, value)

    async def get_state(self, session_id: str, key: str, default: Any = None) -> Any:
        self.calls.append("get_state")
        return await super().get_state(session_id, key, default)

    async def get_states(self, key: str, session_ids: Any) -> dict[str, Any]:
        self.calls.append("get_states")
        return await super().get_states(key, session_ids)


def test_the_spend_of_many_sessions_is_saved_in_one_read_and_one_write() -> None:
    async def run() -> tuple[list[str], list[Any]]:
        store = CountingStore()
        await store.open()
        await store.set_state("s-7", SESSION_SPEND_KEY, 5.0)  # an earlier run's
        costs = tracker()
        book = SpendBook(costs, store)
        assert await book.load_today()
        for i in range(50):
            costs.record(f"s-{i}", "claude-sonnet-4-5", DOLLAR)
        store.calls.clear()
        await book.save()
        return list(store.calls), [await store.get_state(f"s-{i}", SESSION_SPEND_KEY) for i in (0, 7, 49)]

    calls, saved = asyncio.run(run())
    # The day: one read and one write; the 50 sessions: one of each.
    assert sorted(calls) == ["get_state", "get_states", "set_state", "set_states"]
    assert [round(x, 4) for x in saved] == [1.0, 6.0, 1.0]


def test_a_new_day_starts_from_its_own_total() -> None:
    async def run() -> CostTracker:
        store = await opened_store()
        await store.set_state(GATEWAY_STATE_ID, day_key(TODAY - dt.timedelta(days=1)), 9.0)
        costs = tracker()
        await SpendBook(costs, store).load_today()
        return costs

    assert asyncio.run(run()).day_cost() == 0.0


def test_sessions_not_seen_for_long_are_forgotten_and_read_back_from_the_store(monkeypatch: Any) -> None:
    import lore_core.context.economics as economics

    monkeypatch.setattr(economics, "MAX_TRACKED_SESSIONS", 3)

    async def run() -> tuple[CostTracker, int]:
        store = await opened_store()
        costs = tracker()
        book = SpendBook(costs, store)
        costs.record("s1", "claude-sonnet-4-5", DOLLAR)
        await book.save()
        for other in ("s2", "s3", "s4"):  # s1 is now the least recently used of four
            costs.record(other, "claude-sonnet-4-5", DOLLAR)
        await book.save()
        tracked = len(costs._sessions)
        # s1 comes back: its earlier spend is read from the store, not lost or doubled.
        costs.record("s1", "claude-sonnet-4-5", DOLLAR)
        await book.save()
        await book.load_session("s1")
        return costs, tracked

    costs, tracked = asyncio.run(run())
    assert tracked == 3
    assert round(costs.session_cost("s1"), 4) == 2.0
