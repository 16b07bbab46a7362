"""The turn rule on a real store and a real worker client (the fake worker behind it): a turn
reads the session only once a segment's worth may be undistilled, and when unsure (a first
exchange, a history that does not extend the previous one) it reads as before; idle still
distils the tail.

The scheduler's background loop is driven step by step: each step does what the loop does
when an exchange wakes it (schedule, then wait for the runs it launched), so that "no read"
is a fact, not a race. Store reads are counted by a thin wrapper around the real store."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from typing import Any

import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import DistillConfig, WorkerConfig
from lore_core.curation import DistillInput
from lore_core.distill import scheduler as scheduler_module
from lore_core.distill.scheduler import (
    FIRST_EXCHANGE_MAX_ITEMS,
    MAX_PARALLEL_SESSIONS,
    DistillScheduler,
    policy_of,
)
from lore_core.distill.segment import split_segments
from lore_core.model import TEXT, TOOL_CALL, AssistantMessage, Block, Exchange, Message
from lore_core.storage.identity import main_branch
from lore_core.testing.builders import answer, batch_of, exchange, text, tool_result
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.fake_worker import observer_responder
from lore_core.worker.client import WorkerClient

START = 1_790_000_000.0
SEGMENT = 400  # estimated tokens: a dozen turns of the conversation below


class CountingStore:
    """A real store whose whole-session reads are counted."""

    READS = ("session_messages", "distilled_message_ids", "list_distillations")

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in self.READS:
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await attr(*args, **kwargs)

        return counted

    @property
    def session_reads(self) -> int:
        return self.calls["session_messages"]


class Harness:
    """A scheduler on a counting store, fed exchanges the way the gateway feeds it (written
    to the store first, then handed over), with a clock the test moves."""

    def __init__(self, fake: FakeUpstream, session: str = "s-turns") -> None:
        fake.responder = observer_responder()
        self.worker = WorkerClient(WorkerConfig(upstream=fake.url, api_key="k", model="claude-test"))
        self.store = CountingStore(MemoryStore())
        self.config = DistillConfig(
            idle_timeout_seconds=600.0,
            segment_max_tokens=SEGMENT,
            first_segment_min_messages=1,
            first_segment_min_tokens=1,
            meta_threshold=50,
        )
        self.now = START
        self.session = session
        self.scheduler = self.new_scheduler()
        self.history: list[Message] = []
        self.turns = 0

    def new_scheduler(self) -> DistillScheduler:
        return DistillScheduler(self.store, self.config, self.worker, clock=lambda: self.now)  # type: ignore[arg-type]

    async def restart(self) -> None:
        """A gateway restart: a new scheduler, knowing nothing of the session."""
        await self.scheduler.stop()
        self.scheduler = self.new_scheduler()
        await self.scheduler.start(resume=False)

    async def step(self) -> None:
        """What the background loop does when woken: schedule, then the runs it launched."""
        self.scheduler._schedule()
        await asyncio.gather(*list(self.scheduler._tasks.values()))

    async def send(self, messages: list[Message], reply: AssistantMessage) -> Exchange:
        self.now += 20.0
        ex = exchange(list(messages), reply, session=self.session, at=self.now)
        await self.store.inner.write(batch_of(ex))
        self.scheduler.exchange_finished(ex)
        await self.step()
        return ex

    async def turn(self) -> None:
        """One agent turn: the user's message or a tool's output, and the answer (every other
        one a tool call, whose result the next turn carries)."""
        n = self.turns
        self.turns += 1
        if n % 2 == 0:
            self.history.append(text("user", f"turn {n}: look at src/module_{n}.py and fix check_{n}"))
            args = {"path": f"src/module_{n}.py"}
            call = Block(TOOL_CALL, tool_name="Read", tool_call_id=f"call-{n}", tool_input=args)
            reply = AssistantMessage(blocks=[Block(TEXT, text=f"reading module {n}"), call], complete=True)
        else:
            self.history.append(tool_result(f"call-{n - 1}", f"def check_{n}():\n    return {n}  # ok\n"))
            reply = answer(f"module {n}: check_{n} fixed, tests pass")
        await self.send(self.history, reply)
        self.history.append(Message("assistant", list(reply.blocks)))

    async def full_segments_left(self) -> int:
        """Full segments in the undistilled part, measured as the scheduler measures them."""
        messages = main_branch(await self.store.inner.session_messages(self.session))
        done = await self.store.inner.distilled_message_ids(self.session)
        todo = [
            DistillInput.from_block_dicts(m.id, m.role, m.created_at, m.blocks)
            for m in messages
            if m.id not in done
        ]
        segments = split_segments(todo, policy_of(self.config), first=not done)
        return sum(1 for s in segments if s.reason != "end")

    async def gen0(self) -> int:
        rows = await self.store.inner.list_distillations(self.session)
        return sum(1 for d in rows if d.generation == 0)


def run(fake: FakeUpstream, body: Any) -> None:
    async def main() -> None:
        harness = Harness(fake)
        await harness.store.inner.open()
        await harness.scheduler.start(resume=False)
        try:
            await body(harness)
        finally:
            await harness.scheduler.stop()
            await harness.worker.close()
            await harness.store.inner.close()

    asyncio.run(main())


def test_small_turns_read_nothing_until_a_segment_may_be_full(fake_upstream: FakeUpstream) -> None:
    async def body(h: Harness) -> None:
        # A new session's first exchange: its short history is measured whole, and below a
        # segment nothing is read.
        await h.turn()
        assert h.store.session_reads == 0
        reads_at: list[int] = []
        for _ in range(79):  # the last answer is text, so idle is the plain timeout
            before = h.store.session_reads
            await h.turn()
            if h.store.session_reads > before:
                reads_at.append(h.turns)
            # Never a full segment left behind after a turn, whether it read or not.
            assert await h.full_segments_left() == 0
        # A read is one run reading the session once, and each run distilled a segment.
        assert h.store.calls["session_messages"] == h.store.calls["distilled_message_ids"]
        assert 2 <= len(reads_at) <= 12, reads_at
        assert await h.gen0() == len(reads_at)
        # Runs came a segment apart, not on every turn.
        gaps = [b - a for a, b in itertools.pairwise(reads_at)]
        assert all(g >= 5 for g in gaps), reads_at

        # Idle: the tail is distilled too.
        messages = main_branch(await h.store.inner.session_messages(h.session))
        assert len(await h.store.inner.distilled_message_ids(h.session)) < len(messages)
        h.now += h.config.idle_timeout_seconds + 1
        await h.step()
        assert await h.store.inner.distilled_message_ids(h.session) == {m.id for m in messages}
        # The session comes back: its next small turn continues the count, reading nothing.
        reads = h.store.session_reads
        await h.turn()
        assert h.store.session_reads == reads

    run(fake_upstream, body)


def test_a_segment_in_one_turn_runs_at_once(fake_upstream: FakeUpstream) -> None:
    async def body(h: Harness) -> None:
        for _ in range(3):
            await h.turn()
        reads = h.store.session_reads
        # A turn that brings a segment's worth at once (a long paste): distilled without idle.
        h.history.append(text("user", "here is the design, " + "every part matters. " * 120))
        await h.send(h.history, answer("understood"))
        assert h.store.session_reads == reads + 1
        assert await h.gen0() >= 1
        assert await h.full_segments_left() == 0

    run(fake_upstream, body)


def test_when_unsure_a_turn_runs_as_before(fake_upstream: FakeUpstream) -> None:
    async def body(h: Harness) -> None:
        for _ in range(4):
            await h.turn()
        reads = h.store.session_reads
        await h.turn()
        assert h.store.session_reads == reads  # a plain small turn: nothing read

        # The same request again (a client's retry): only its answer is new, nothing read.
        await h.send(h.history[:-1], answer("checked again"))
        assert h.store.session_reads == reads

        # A request without the previous answer (the client never resent it): read.
        h.history.pop()
        h.history.append(text("user", "and the other one"))
        await h.send(h.history, answer("done"))
        h.history.append(text("assistant", "done"))
        assert h.store.session_reads == reads + 1

        # A shorter history than the previous request left (an edit, a branch): read.
        await h.send([*h.history[:2], text("user", "no, do it differently")], answer("ok"))
        assert h.store.session_reads == reads + 2

        # A restart: the new scheduler knows nothing of the session. Its first request's
        # history, short and below a segment, bounds what is undistilled: nothing read.
        await h.restart()
        await h.turn()
        assert len(h.history) <= FIRST_EXCHANGE_MAX_ITEMS
        assert h.store.session_reads == reads + 2
        # A pause long enough to end a segment: read.
        h.now += policy_of(h.config).gap_seconds
        await h.turn()
        assert h.store.session_reads == reads + 3

        # Another restart, after a history too long to measure on the request path: read.
        while len(h.history) <= FIRST_EXCHANGE_MAX_ITEMS:
            await h.turn()
        reads = h.store.session_reads
        await h.restart()
        await h.turn()
        assert h.store.session_reads == reads + 1
        await h.turn()
        assert h.store.session_reads == reads + 1

    run(fake_upstream, body)


def test_manual_runs_read_whatever_the_estimate(fake_upstream: FakeUpstream) -> None:
    async def body(h: Harness) -> None:
        for _ in range(3):
            await h.turn()
        reads = h.store.session_reads
        report = await h.scheduler.distill_session(h.session)
        assert h.store.session_reads == reads + 1 and report.remaining_messages == 0
        # The run reset the estimate: the next small turns read nothing.
        for _ in range(3):
            await h.turn()
        assert h.store.session_reads == reads + 1

    run(fake_upstream, body)


class GatedStore(CountingStore):
    """Session reads wait until the test opens the gate: runs pile up as under overload."""

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.at_once = self.most_at_once = 0

    def __getattr__(self, name: str) -> Any:
        attr = super().__getattr__(name)
        if name != "session_messages":
            return attr

        async def gated(*args: Any, **kwargs: Any) -> Any:
            self.at_once += 1
            self.most_at_once = max(self.most_at_once, self.at_once)
            try:
                await self.gate.wait()
                return await attr(*args, **kwargs)
            finally:
                self.at_once -= 1

        return gated


def test_runs_due_beyond_the_slots_wait_as_sessions_not_as_tasks(fake_upstream: FakeUpstream) -> None:
    """More sessions due than the scheduler runs at once (a saturated gateway): it keeps
    MAX_PARALLEL_SESSIONS runs going and the rest as a queue of session ids, never a task
    per session, and every one of them is distilled once the runs can finish."""

    async def body(h: Harness) -> None:
        store = GatedStore(h.store.inner)
        h.scheduler.store = store
        sessions = [f"s-queue-{i}" for i in range(30)]
        for sid in sessions:
            h.now += 1.0
            # A first exchange bringing a segment's worth (a long paste): a run is due.
            paste = "every part of this design matters. " * 60
            history = [text("user", f"{sid}: look at src/app.py and fix the failing check. {paste}")]
            ex = exchange(history, answer(f"{sid}: fixed, tests pass"), session=sid, at=h.now)
            await store.inner.write(batch_of(ex))
            h.scheduler.exchange_finished(ex)
            await asyncio.sleep(0)
        await asyncio.sleep(0.2)  # the background loop wakes and schedules
        distill_tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("lore-distill-")]
        assert len(distill_tasks) == MAX_PARALLEL_SESSIONS
        health = h.scheduler.health()
        assert health["running"] == MAX_PARALLEL_SESSIONS
        assert health["turn_runs_waiting"] == len(sessions) - MAX_PARALLEL_SESSIONS

        store.gate.set()
        async with asyncio.timeout(30):
            while h.scheduler.health()["turn_runs_waiting"] or h.scheduler.health()["running"]:
                await asyncio.sleep(0.05)
        # Each turn run read its session once.
        assert store.calls["session_messages"] == len(sessions)
        h.now += h.config.idle_timeout_seconds + 1
        async with asyncio.timeout(30):
            while True:
                done = [sid for sid in sessions if await store.inner.distilled_message_ids(sid)]
                if len(done) == len(sessions):
                    break
                await asyncio.sleep(0.05)
        assert store.most_at_once == MAX_PARALLEL_SESSIONS

    run(fake_upstream, body)


def test_tracking_is_bounded_when_sessions_come_faster_than_runs(
    fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Sessions arriving faster than runs finish (every slot held) are tracked up to
    MAX_TRACKED_SESSIONS; past it the longest-tracked is dropped, counted and logged once,
    and the sessions still tracked are distilled when the runs can go on."""
    monkeypatch.setattr(scheduler_module, "MAX_TRACKED_SESSIONS", 8)

    async def body(h: Harness) -> None:
        store = GatedStore(h.store.inner)
        h.scheduler.store = store
        paste = "every part of this design matters. " * 60
        sessions = [f"s-flood-{i}" for i in range(20)]
        for sid in sessions:
            h.now += 1.0
            ex = exchange([text("user", f"{sid}: {paste}")], answer(f"{sid}: noted"), session=sid, at=h.now)
            await store.inner.write(batch_of(ex))
            h.scheduler.exchange_finished(ex)
            await asyncio.sleep(0)
        health = h.scheduler.health()
        assert health["tracked_sessions"] == 8
        assert health["untracked_sessions"] == len(sessions) - 8
        assert len(h.scheduler._turned) <= 8 and len(h.scheduler._awaiting_tool) == 8
        # The two running when the table was full were kept; the newest are tracked.
        assert set(sessions[-6:]) <= set(h.scheduler._seen)
        assert sum("distillation is behind" in r.getMessage() for r in caplog.records) == 1

        store.gate.set()
        async with asyncio.timeout(30):
            while h.scheduler.health()["turn_runs_waiting"] or h.scheduler.health()["running"]:
                await asyncio.sleep(0.05)
        for sid in sessions[-6:]:
            assert await store.inner.distilled_message_ids(sid)

    run(fake_upstream, body)
