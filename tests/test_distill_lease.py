"""Distillation and curation of a session are claimed by one scheduler at a time (a lease
in the store, ``distill:<session>``): a second gateway's scheduler on the same store skips a
session the first is distilling, the lease is released when the run ends, and a lease left
by a crashed gateway holds the session off until it expires, then another takes over."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import DistillConfig
from lore_core.curation import Distillation, DistillInput
from lore_core.distill.observer import LLMObserver
from lore_core.distill.scheduler import CLAIMED_ELSEWHERE, DistillScheduler, lease_key
from lore_core.testing.builders import answer, batch_of, exchange, text

CONFIG = DistillConfig(first_segment_min_messages=1, first_segment_min_tokens=1)


class HeldObserver:
    """The extractive observer, held at its first segment until ``go`` is set."""

    def __init__(self) -> None:
        self.inner = LLMObserver(None)
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def observe(
        self,
        messages: Sequence[DistillInput],
        previous: str = "",
        *,
        session_id: str | None = None,
        tool_names: Mapping[str, str] | None = None,
    ) -> Distillation:
        self.entered.set()
        await self.go.wait()
        return await self.inner.observe(messages, previous, session_id=session_id, tool_names=tool_names)


async def filled() -> MemoryStore:
    store = MemoryStore()
    await store.open()
    history = [text("user", "look at src/parser.py: the build fails on empty input")]
    await store.write(batch_of(exchange(history, answer("fixed the parser"), session="s-1")))
    return store


def test_one_scheduler_at_a_time_distils_a_session() -> None:
    async def main() -> None:
        store = await filled()
        held = HeldObserver()
        a = DistillScheduler(store, CONFIG, None, observer=held)
        b = DistillScheduler(store, CONFIG, None)
        assert a.holder != b.holder
        run_a = asyncio.create_task(a.distill_session("s-1"))
        await held.entered.wait()
        skipped = await b.distill_session("s-1")
        assert skipped.notes == [CLAIMED_ELSEWHERE] and not skipped.observed
        assert b.counts["claimed_elsewhere"] == 1
        held.go.set()
        report = await run_a
        assert sum(report.observed.values()) == 1
        assert len(await store.list_distillations("s-1")) == 1
        # Released: B may run now, and finds nothing left to do.
        again = await b.distill_session("s-1")
        assert CLAIMED_ELSEWHERE not in again.notes and not again.observed

    asyncio.run(main())


def test_a_crashed_holders_lease_runs_out() -> None:
    async def main() -> None:
        store = await filled()
        # A gateway claimed the session and died: its lease stays until it expires.
        assert await store.claim_lease(lease_key("s-1"), "crashed-gateway", 0.3)
        b = DistillScheduler(store, CONFIG, None)
        assert (await b.distill_session("s-1")).notes == [CLAIMED_ELSEWHERE]
        await asyncio.sleep(0.4)
        report = await b.distill_session("s-1")
        assert CLAIMED_ELSEWHERE not in report.notes and sum(report.observed.values()) == 1

    asyncio.run(main())


def test_a_run_whose_lease_was_taken_stops_after_its_segment() -> None:
    """A run that outlived its lease (another gateway took the session meanwhile) writes the
    segment it had and stops: the other goes on from what is stored."""
    config = DistillConfig(
        first_segment_min_messages=1, first_segment_min_tokens=1, segment_max_tokens=60, lease_seconds=0.2
    )

    async def main() -> None:
        store = MemoryStore()
        await store.open()
        history: list[Any] = []
        for i in range(6):
            history.append(text("user", f"step {i}: " + "look at the parser and the lexer " * 8))
            await store.write(batch_of(exchange(list(history), answer(f"done {i} " * 20), session="s-1")))
            history.append(text("assistant", f"done {i} " * 20))
        held = HeldObserver()
        a = DistillScheduler(store, config, None, observer=held)
        run_a = asyncio.create_task(a.distill_session("s-1"))
        await held.entered.wait()
        await asyncio.sleep(0.3)  # A's lease ran out
        assert await store.claim_lease(lease_key("s-1"), "other-gateway", 60)
        held.go.set()
        report = await run_a
        assert CLAIMED_ELSEWHERE in report.notes
        assert sum(report.observed.values()) == 1 and len(await store.list_distillations("s-1")) == 1

    asyncio.run(main())
