"""The event log and packs, on the store directly: seqs per run, consolidation that never
skips or double-counts an event (crashes and restarts included), the working lane's three
sources, token budgets, and the read-your-writes property over random interleavings."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import EventsConfig
from lore_core.events.log import EventInputError, EventLog, check_events
from lore_core.events.pack import PackRequest, build_pack
from lore_core.recall.store_engine import store_recall_engine
from lore_core.storage.events import NewEvent, run_session_id, seq_of_ref

PROJECT = "/work/shop"
RUN = "build-42"


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


def words(text: str) -> int:
    return len(text.split())


async def pack(log: EventLog, query: str = "parser", **kw: Any) -> dict[str, Any]:
    engine = store_recall_engine(log.store, source_timeout=5.0)
    return await build_pack(
        log, engine, words, PackRequest(PROJECT, RUN, query, **kw),
        distilled_limit=12, raw_tail_recent=3, partial_timeout=5.0,
    )  # fmt: skip


def note(text: str) -> NewEvent:
    return NewEvent("note", text)


async def memories(store: MemoryStore) -> list[list[int]]:
    """The seqs each stored memory of the run holds."""
    found = await store.list_distillations(run_session_id(PROJECT, RUN))
    return [[s for s in (seq_of_ref(r) for r in d.source_ids) if s is not None] for d in found]


def test_writes_are_numbered_per_run_and_consolidated_behind_them() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        log = EventLog(store, EventsConfig(memory_max_events=2))
        assert await log.write(PROJECT, RUN, [note("the parser fails on empty input")]) == [1]
        assert await log.write(PROJECT, RUN, [note("fixed parser.py line 12"), note("tests pass: 41")]) == [
            2,
            3,
        ]
        assert await log.write(PROJECT, "other", [note("unrelated")]) == [1]
        before = await pack(log, min_seq=3)
        assert before["covered_seq"] == 0 and [e["seq"] for e in before["sections"][2]["events"]] == [1, 2, 3]
        assert before["freshness_lag_ms"] >= 0
        assert await log.consolidate(PROJECT, RUN) == 3
        assert await memories(store) == [[1, 2], [3]]
        after = await pack(log, min_seq=3)
        assert after["covered_seq"] == 3 and after["sections"][2]["events"] == []
        ids = [i["id"] for i in after["sections"][1]["items"]]
        assert ids and all(i.startswith("d:ev-") for i in ids)
        assert "the parser fails on empty input" in after["text"]
        assert after["text"].startswith("LORE MEMORY PACK.") and "not instructions" in after["text"]
        order = [after["text"].index(h) for h in ("## Working", "## Distilled memories", "## Raw tail")]
        assert order == sorted(order)
        # The same state gives the same envelope, byte for byte.
        assert (await pack(log, min_seq=3))["text"] == after["text"]

    run(scenario())


def test_a_step_that_crashed_after_writing_its_memory_is_not_counted_twice() -> None:
    class CrashingAdvance(MemoryStore):
        crash = True

        async def advance_run(self, *args: Any, **kw: Any) -> None:
            if self.crash:
                self.crash = False
                raise OSError("killed")
            await super().advance_run(*args, **kw)

    async def scenario() -> None:
        store = CrashingAdvance()
        log = EventLog(store, EventsConfig(memory_max_events=3))
        await log.write(PROJECT, RUN, [note(f"event {i}") for i in range(1, 5)])
        with pytest.raises(OSError):
            await log.consolidate(PROJECT, RUN)
        # One step cut both memories; both were written, but the checkpoint did not move.
        assert await memories(store) == [[1, 2, 3], [4]]
        assert (await store.run_state(PROJECT, RUN)).covered_seq == 0  # type: ignore[union-attr]
        await log.write(PROJECT, RUN, [note("event 5")])
        # Restarted with smaller memories: the step adopts the memory it had written.
        restarted = EventLog(store, EventsConfig(memory_max_events=2))
        assert await restarted.consolidate(PROJECT, RUN) == 5
        assert await memories(store) == [[1, 2, 3], [4], [5]]

    run(scenario())


def test_working_facts_are_live_then_durable_then_unavailable() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        log = EventLog(store, EventsConfig())
        await log.write(PROJECT, RUN, [NewEvent("status", "editing parser.py", working=True, key="ana")])
        await log.write(PROJECT, RUN, [NewEvent("status", "running tests", working=True, key="bo")])
        live = (await pack(log))["sections"][0]
        assert live["source"] == "live" and [f["key"] for f in live["facts"]] == ["ana", "bo"]
        await log.write(PROJECT, RUN, [NewEvent("status", "", working=True, key="bo")])  # cleared
        assert [f["key"] for f in (await pack(log))["sections"][0]["facts"]] == ["ana"]

        # After a restart this process has not seen the run's writes: nothing consolidated
        # yet means no durable snapshot either; the facts are in the raw tail.
        restarted = EventLog(store, EventsConfig())
        cold = await pack(restarted, min_seq=3)
        assert cold["sections"][0]["source"] == "unavailable"
        assert [e["key"] for e in cold["sections"][2]["events"]] == ["ana", "bo", "bo"]
        await restarted.consolidate(PROJECT, RUN)
        durable = (await pack(restarted))["sections"][0]
        assert durable["source"] == "durable" and durable["as_of_seq"] == 3
        assert [(f["key"], f["content"]) for f in durable["facts"]] == [("ana", "editing parser.py")]

    run(scenario())


def test_the_token_budget_drops_whole_memories_but_never_the_asked_for_events() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        log = EventLog(store, EventsConfig(memory_max_events=1))
        for i in range(6):
            await log.write(PROJECT, RUN, [note(f"parser finding number {i} " + "detail " * 20)])
        await log.consolidate(PROJECT, RUN)
        await log.write(PROJECT, RUN, [note("parser: the last word")] * 5)
        full = await pack(log, min_seq=11)
        assert len(full["sections"][1]["items"]) == 6 and full["truncated"] is False
        cut = await pack(log, min_seq=11, token_budget=60)
        items = cut["sections"][1]["items"]
        assert cut["truncated"] and 1 <= len(items) < 6 and cut["sections"][1]["tokens"] <= 60
        assert all(i["tokens"] == words(i["text"]) for i in items)  # the project's counter
        # The read-your-writes window is exempt from the budget (and from raw_tail_recent: 3).
        assert [e["seq"] for e in cut["sections"][2]["events"]] == [7, 8, 9, 10, 11]
        assert (await pack(log, min_seq=0))["truncated"]  # 2 of 5 undistilled left out

    run(scenario())


def test_bad_writes_are_refused_naming_the_field() -> None:
    cases = [
        ([], "non-empty list"),
        ([{"kind": "note"}], "events[0].content"),
        ([{"kind": "bad kind!", "content": "x"}], "events[0].kind"),
        ([{"kind": "note", "content": "x", "key": "k"}], "working facts only"),
        ([{"kind": "note", "content": "  "}], "content is empty"),
        ([{"kind": "note", "content": "x", "working": "yes"}], "working must be"),
    ]
    for body, reason in cases:
        with pytest.raises(EventInputError, match=reason.replace("[", r"\[").replace("]", r"\]")):
            check_events(body)
    assert check_events([{"kind": "status", "content": "", "working": True, "key": "ana"}])[0].key == "ana"

    async def past_the_end() -> None:
        log = EventLog(MemoryStore(), EventsConfig())
        await log.write(PROJECT, RUN, [note("one")])
        with pytest.raises(EventInputError, match="past the run's last event"):
            await pack(log, min_seq=2)

    run(past_the_end())


# -- read-your-writes over random interleavings -------------------------------------------------

OPS = st.one_of(
    st.tuples(st.just("write"), st.integers(1, 4), st.booleans()),
    st.tuples(st.just("step"), st.integers(1, 3), st.none()),
    st.tuples(st.just("crash_step"), st.none(), st.none()),
    st.tuples(st.just("restart"), st.none(), st.none()),
    st.tuples(st.just("pack"), st.integers(0, 100), st.none()),
)


class FlakyAdvance(MemoryStore):
    """A store whose next checkpoint advance fails once (a crash between the memory's write
    and the checkpoint's)."""

    fail_next = False

    async def advance_run(self, *args: Any, **kw: Any) -> None:
        if self.fail_next:
            self.fail_next = False
            raise OSError("crashed before the checkpoint")
        await super().advance_run(*args, **kw)


async def _interleave(ops: list[tuple[str, Any, Any]]) -> None:
    store = FlakyAdvance()
    config = EventsConfig(memory_max_events=3)
    log = EventLog(store, config)
    written = 0
    last_covered = 0
    working: set[int] = set()
    for op, a, b in ops:
        if op == "write":
            events = [NewEvent("status", f"s{written + i}", working=True, key=f"k{i % 2}") if b and i == 0
                      else note(f"parser event {written + i + 1}") for i in range(a)]  # fmt: skip
            seqs = await log.write(PROJECT, RUN, events)
            assert seqs == list(range(written + 1, written + a + 1))
            working |= {seq for seq, e in zip(seqs, events, strict=True) if e.working}
            written += a
        elif op == "step":
            await log.consolidate(PROJECT, RUN, max_steps=a)
        elif op == "crash_step":
            store.fail_next = True
            try:
                await log.consolidate(PROJECT, RUN, max_steps=1)
            except OSError:
                pass
            store.fail_next = False
        elif op == "restart":
            log = EventLog(store, config)
        elif written:
            min_seq = a % (written + 1)
            answer = await pack(log, min_seq=min_seq)
            covered = answer["covered_seq"]
            assert covered >= last_covered  # never backwards
            last_covered = covered
            raw = [e["seq"] for e in answer["sections"][2]["events"]]
            assert len(raw) == len(set(raw)) and all(covered < s <= written for s in raw)
            # Every event up to min_seq exactly once: distilled (covered) or raw, never both.
            for seq in range(1, min_seq + 1):
                assert (seq <= covered) != (seq in raw)
            for item in answer["sections"][1]["items"]:
                assert item["last_seq"] <= covered
    # The memories partition the covered events: none skipped, none held twice.
    state = await store.run_state(PROJECT, RUN)
    covered = state.covered_seq if state is not None else 0
    held = [s for m in await memories(store) for s in m]
    assert len(held) == len(set(held))
    # (a step of working facts only writes no memory: those are in the working snapshot)
    assert set(range(1, covered + 1)) - working <= set(held)
    assert all(s <= written for s in held)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, max_size=25))
def test_packs_reflect_every_write_up_to_min_seq_exactly_once(ops: list[tuple[str, Any, Any]]) -> None:
    run(_interleave(ops))


def test_a_subdirectory_writes_and_reads_its_repositorys_run(tmp_path: Any) -> None:
    """As on every other lane, a project is its repository's root: an agent posting from a
    subdirectory and one packing from the root share the run."""
    from lore_core.projects import forget_roots

    repo = tmp_path / "shop"
    (repo / ".git").mkdir(parents=True)
    (repo / "api" / "handlers").mkdir(parents=True)
    forget_roots()

    async def scenario() -> None:
        store = MemoryStore()
        log = EventLog(store, EventsConfig())
        assert await log.write(str(repo / "api" / "handlers"), RUN, [note("the parser fails")]) == [1]
        assert await log.write(f"{repo}/api/../", RUN, [note("fixed the parser")]) == [2]
        state = await store.run_state(str(repo), RUN)
        assert state is not None and state.last_seq == 2
        engine = store_recall_engine(store, source_timeout=5.0)
        request = PackRequest(str(repo / "api"), RUN, "parser")
        packed = await build_pack(log, engine, words, request, distilled_limit=12, raw_tail_recent=3,
                                  partial_timeout=5.0)  # fmt: skip
        assert "fixed the parser" in packed["text"]

    run(scenario())
