"""The scheduler's rules on a real store and a real worker client (the fake worker behind
it): repeated consolidation folds the previous meta-distillation in and archives it, and a
turn-triggered run distils only full segments."""

from __future__ import annotations

import asyncio
from typing import Any

from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import DistillConfig, WorkerConfig
from lore_core.distill.prompts import REFLECTOR_MARKER
from lore_core.distill.scheduler import DistillScheduler
from lore_core.model import Message
from lore_core.testing.builders import answer, batch_of, exchange, text
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.fake_worker import observer_responder, request_texts
from lore_core.worker.client import WorkerClient


def make(fake: FakeUpstream, **distill: Any) -> tuple[MemoryStore, DistillScheduler, WorkerClient]:
    fake.responder = observer_responder()
    worker = WorkerClient(WorkerConfig(upstream=fake.url, api_key="k", model="claude-test"))
    store = MemoryStore()
    config = DistillConfig(first_segment_min_messages=1, first_segment_min_tokens=1, **distill)
    return store, DistillScheduler(store, config, worker), worker


def test_consolidation_folds_in_the_previous_meta_distillation(fake_upstream: FakeUpstream) -> None:
    store, scheduler, worker = make(fake_upstream, meta_threshold=2, recent_segments_to_keep=1)
    history: list[Message] = []

    async def round_(word: str, at: float) -> None:
        history.append(text("user", f"{word}: look at src/{word}.py"))
        await store.write(batch_of(exchange(list(history), answer(f"{word} done"), at=at)))
        history.append(text("assistant", f"{word} done"))
        await scheduler.distill_session("s-1")

    async def main() -> None:
        await store.open()
        try:
            await round_("alpha", 1000.0)
            await round_("beta", 2000.0)
            await round_("gamma", 3000.0)
            rows = await store.list_distillations("s-1")
            gen0 = [d for d in rows if d.generation == 0]
            metas = [d for d in rows if d.generation == 1]
            assert [d.archived for d in gen0] == [True, True, False]
            assert len(metas) == 2
            first, second = metas
            assert first.source_ids == [gen0[0].id] and first.archived
            # The second consolidation read the first one and replaced it.
            assert second.source_ids == [gen0[1].id, first.id] and not second.archived
            live = await store.list_distillations("s-1", include_archived=False)
            assert {d.id for d in live} == {gen0[2].id, second.id}
            reflector_calls = [
                r for r in fake_upstream.api_requests() if REFLECTOR_MARKER in request_texts(r.json)[0]
            ]
            assert len(reflector_calls) == 2
            assert "Consolidated 1 observation logs" in request_texts(reflector_calls[1].json)[1]
        finally:
            await worker.close()
            await store.close()

    asyncio.run(main())


def test_a_turn_distils_full_segments_and_leaves_the_tail(fake_upstream: FakeUpstream) -> None:
    store, scheduler, worker = make(fake_upstream, segment_max_tokens=60)
    messages = [text("user" if i % 2 == 0 else "assistant", f"step {i}: " + "word " * 40) for i in range(6)]

    async def main() -> None:
        await store.open()
        try:
            await store.write(batch_of(exchange(messages)))
            report = await scheduler.distill_session("s-1", reason="turn")
            assert sum(report.observed.values()) >= 1 and report.remaining_messages >= 1
            left = report.remaining_messages
            stored = await store.session_messages("s-1")
            done = await store.distilled_message_ids("s-1")
            assert [m.id for m in stored if m.id not in done] == [m.id for m in stored[-left:]]
            # Idle: the tail goes too.
            report = await scheduler.distill_session("s-1", reason="idle")
            assert report.remaining_messages == 0
            assert await store.distilled_message_ids("s-1") == {m.id for m in stored}
        finally:
            await worker.close()
            await store.close()

    asyncio.run(main())
