"""The gateway's store writer batches exchanges: at most one write per flush interval, even
when traffic never lets its queue run empty, and nothing submitted is lost."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import StoreConfig
from lore_core.storage.records import WriteBatch
from lore_core.storage.writer import StoreWriter
from lore_core.testing.builders import answer, exchange, text

INTERVAL_MS = 100


class SlowStore(MemoryStore):
    """A memory store whose writes take a while, as a database's do."""

    def __init__(self, write_seconds: float) -> None:
        super().__init__()
        self.write_seconds = write_seconds
        self.writes = 0

    async def write(self, batch: WriteBatch) -> int:
        self.writes += 1
        await asyncio.sleep(self.write_seconds)
        return await super().write(batch)


def test_a_waiting_reader_gets_the_write_at_once() -> None:
    """Recall waits for what finished before it (read-your-writes): the writer then skips
    its batching pause instead of making the reader wait the interval out."""

    async def go() -> int:
        store = SlowStore(write_seconds=0.0)
        # An interval of an hour: waiting it out would time wait_idle out.
        writer = StoreWriter(store, StoreConfig(flush_interval_ms=3_600_000))
        await writer.start()
        writer.submit(exchange([text("user", "hello")], answer("hi"), session="s-wait"))
        await writer.wait_idle(timeout=60.0)
        writes = store.writes
        await writer.stop()
        return writes

    assert asyncio.run(go()) == 1


def test_steady_traffic_gets_one_write_per_interval_and_loses_nothing() -> None:
    flush_starts: list[float] = []

    async def go() -> SlowStore:
        # Each write takes a quarter of an interval and an exchange arrives every 5 ms: the
        # queue is never empty when a write ends.
        store = SlowStore(write_seconds=INTERVAL_MS / 4000)
        writer = StoreWriter(store, StoreConfig(flush_interval_ms=INTERVAL_MS))
        flush = writer._flush_once

        async def timed_flush() -> None:
            flush_starts.append(asyncio.get_running_loop().time())
            await flush()

        writer._flush_once = timed_flush  # type: ignore[method-assign]
        await writer.start()
        for i in range(120):
            writer.submit(exchange([text("user", f"question {i}")], answer(f"answer {i}"), session=f"s-{i}"))
            await asyncio.sleep(0.005)
        # A reader waiting (wait_idle) is a reason to write at once: not steady traffic.
        traffic_ended.append(asyncio.get_running_loop().time())
        await writer.wait_idle()
        await writer.stop()
        return store

    traffic_ended: list[float] = []
    store = asyncio.run(go())
    assert store.writes >= 2
    steady = [t for t in flush_starts if t <= traffic_ended[0]]
    gaps = [b - a for a, b in itertools.pairwise(steady)]
    # asyncio may wake a timer up to its clock's resolution early: a millisecond of slack.
    assert min(gaps) >= INTERVAL_MS / 1000 - 0.001, gaps
    sessions = {s.id for s in asyncio.run(store.list_sessions(limit=1000))}
    assert sessions == {f"s-{i}" for i in range(120)}


@pytest.mark.slow
def test_a_reader_under_steady_traffic_waits_for_what_came_before_it() -> None:
    """Under steady traffic the queue is never empty after a write. A reader (recall, the
    distiller, ``/lore/api``) waits for the write that holds what was submitted before it,
    not for an empty queue: that never came, and every wait ran into its timeout."""
    traffic = 1000  # an exchange every 5 ms, about 5 s of it

    async def go() -> tuple[int, list[str]]:
        store = SlowStore(write_seconds=INTERVAL_MS / 4000)
        writer = StoreWriter(store, StoreConfig(flush_interval_ms=INTERVAL_MS))
        await writer.start()
        sent = 0

        async def steady() -> None:
            nonlocal sent
            for i in range(traffic):
                writer.submit(exchange([text("user", f"q {i}")], answer(f"a {i}"), session=f"s-{i}"))
                sent += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(steady())
        await asyncio.sleep(0.05)
        writer.submit(exchange([text("user", "mine")], answer("yes"), session="s-reader"))
        await writer.wait_idle(timeout=60.0)
        returned_after = sent
        mine = [m.text for m in await store.session_messages("s-reader")]
        await task
        await writer.stop()
        return returned_after, mine

    returned_after, mine = asyncio.run(go())
    assert mine == ["mine", "yes"]
    assert returned_after < traffic  # it did not wait for the traffic to end
