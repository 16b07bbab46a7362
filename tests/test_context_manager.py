"""The context manager's per-session choices: the layer-0 cap, bust vs continue, holding
after busts, overflow, calibration from usage, side requests, a slow store, and
``forceMinLayer`` persisted across a restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import pytest

from lore_core.builtin.context_layers import LAYERS
from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import LoreConfig, ModelConfig
from lore_core.context import compose as C
from lore_core.context import manager as M
from lore_core.context.economics import compression_pays
from lore_core.context.manager import FORCE_MIN_LAYER, ContextManager
from lore_core.context.pricing import PriceTable
from lore_core.context.tokens import TokenCounter
from lore_core.interfaces import CompositionContext
from lore_core.model import AssistantMessage, Exchange, Usage
from lore_core.storage.records import StoredDistillation
from lore_core.testing.simulate import anthropic_messages, coding_session
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

SID = "session-manager"
codec = AnthropicMessagesCodec()
TURNS = coding_session(40, seed=21)


def view_of(turns, model="claude-sonnet-4-5", messages=None):
    raw = {
        "model": model,
        "max_tokens": 1024,
        "system": "You are a coding agent.",
        "messages": messages if messages is not None else anthropic_messages(turns, answered=False),
    }
    return codec.parse(raw, json.dumps(raw).encode())


def config(**budget):
    cfg = LoreConfig()
    for key, value in budget.items():
        setattr(cfg.budget, key, value)
    return cfg


async def with_logs(store, turns, share=0.8, sid=SID):
    view = view_of(turns)
    ids = [i for i in C.view_message_ids(sid, view.messages) if i is not None]
    upto = int(len(ids) * share)
    for n, start in enumerate(range(0, upto, 12)):
        await store.write_distillation(
            StoredDistillation(
                id=f"{sid}-log{n:03d}",
                session_id=sid,
                generation=0,
                text=f"log {n}: edited src/app/models.py, 12 tests pass",
                source_ids=list(dict.fromkeys(ids[start : min(start + 12, upto)])),
                end=float(n),
            )
        )


async def memory_store():
    store = MemoryStore()
    await store.open()
    return store


#: (the view that went upstream, the context it was composed with), as the pipeline's Turn
#: carries them from composition to the exchange.
SENT: list[tuple[object, CompositionContext]] = []


async def turn(manager, view, sid=SID):
    ctx = CompositionContext(sid, "/project", "generic", codec)
    out = await manager.compose(view, ctx)
    SENT.append((out, ctx))
    return out, ctx.composition


def composed(view):
    """The context ``view`` went upstream with (``None``: it was never sent)."""
    return next((ctx for out, ctx in reversed(SENT) if out is view), None)


def exchange_of(view, **fields):
    return Exchange(
        api=codec.api,
        path="/v1/messages",
        request=view,
        harness="generic",
        session_id=SID,
        project="/project",
        upstream="http://fake",
        composed=composed(view),
        **fields,
    )


def answered(manager, view, *, read=0, write=0, uncached=0, sid=SID):
    manager.exchange_finished(
        Exchange(
            api=codec.api,
            path="/v1/messages",
            request=view,
            harness="generic",
            session_id=sid,
            project="/project",
            upstream="http://fake",
            composed=composed(view),
            status=200,
            response=AssistantMessage(
                usage=Usage(
                    input_tokens=uncached, output_tokens=50, cache_read_tokens=read, cache_write_tokens=write
                ),
                model=view.model,
                complete=True,
            ),
        )
    )


# -- the layer-0 cap and bust vs continue -------------------------------------------------


def test_under_the_cap_the_request_is_passed_through():
    async def run():
        manager = ContextManager(
            config(max_layer0_tokens=10_000_000), PriceTable(), await memory_store(), LAYERS
        )
        return await turn(manager, view_of(TURNS))

    out, plan = asyncio.run(run())
    assert plan.layer == 0 and not out.modified


def test_past_the_cap_compression_happens_when_it_pays():
    async def run():
        store = await memory_store()
        await with_logs(store, TURNS, share=0.97)
        manager = ContextManager(config(max_layer0_tokens=5_000), PriceTable(), store, LAYERS)
        out, plan = await turn(manager, view_of(TURNS))
        return manager, out, plan

    manager, out, plan = asyncio.run(run())
    assert plan.layer == 1 and plan.reason == "cost" and out.modified
    status = manager.session_status(SID)
    assert status["layer"] == 1 and status["recompositions"] == 1 and status["cap"] == 5_000
    assert status["distillations_in_prefix"] > 0


def test_past_the_cap_nothing_changes_when_compressing_does_not_pay():
    async def run():
        # No distillations: layer 1 would be as large as the raw prompt.
        manager = ContextManager(config(max_layer0_tokens=5_000), PriceTable(), await memory_store(), LAYERS)
        return await turn(manager, view_of(TURNS))

    out, plan = asyncio.run(run())
    assert plan.layer == 0 and not out.modified and plan.reason == "does-not-pay"


def test_the_system_prompt_and_tools_count_as_cached_when_weighing_compression():
    """A 20K-token system prompt stays cached through a re-composition: compressing a 101K
    prompt to 35K rewrites only 15K of it, which pays (the literal rule, with all 35K
    written, would keep growing at layer 0)."""
    turns = TURNS[:20]
    raw = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": "Rules of the house. " * 4000,
        "messages": anthropic_messages(turns, answered=False),
    }

    async def run():
        store = await memory_store()
        await with_logs(store, turns, share=0.8)
        manager = ContextManager(config(max_layer0_tokens=5_000), PriceTable(), store, LAYERS)
        return await turn(manager, codec.parse(raw, json.dumps(raw).encode()))

    _, plan = asyncio.run(run())
    assert plan.layer == 1 and plan.reason == "cost"
    sonnet = PriceTable().lookup("claude-sonnet-4-5")
    full = C.analyse(codec.parse(raw, json.dumps(raw).encode()), SID, TokenCounter()).raw_total
    assert full > 100_000 and 30_000 < plan.tokens < 40_000
    assert not compression_pays(full, plan.tokens, sonnet)
    assert compression_pays(full, plan.tokens, sonnet, kept_cached_tokens=20_000)


def test_a_disabled_cap_keeps_layer0_while_the_prompt_fits():
    async def run():
        store = await memory_store()
        await with_logs(store, TURNS)
        manager = ContextManager(config(max_layer0_tokens=0), PriceTable(), store, LAYERS)
        return await turn(manager, view_of(TURNS))

    _, plan = asyncio.run(run())
    assert plan.layer == 0


def test_the_first_turn_uses_the_uncalibrated_cap_then_calibrates_from_usage():
    async def run():
        manager = ContextManager(config(), PriceTable(), await memory_store(), LAYERS)
        view = view_of(TURNS[:10])
        await turn(manager, view)
        first = manager.session_status(SID)
        estimate = first["prompt_tokens_estimated"]
        answered(manager, view, write=int(estimate * 1.5))
        await turn(manager, view_of(TURNS[:11]))
        return first, manager.session_status(SID)

    first, later = asyncio.run(run())
    # Sonnet's input is $3/Mtok: $0.10 a turn is 33K, so the 40K floor; x 0.7 before any usage.
    assert first["cap"] == 28_000 and first["calibration_factor"] == 1.0
    assert later["cap"] == 40_000
    assert later["calibration_factor"] == pytest.approx(1.5, rel=0.01)
    assert later["prompt_tokens_real"] > 0


def test_after_two_busts_compressing_stops_until_the_prompt_no_longer_fits():
    small = PriceTable({"claude-small": ModelConfig(max_input_tokens=60_000, context_window=80_000)})

    async def run():
        store = await memory_store()
        await with_logs(store, TURNS)
        manager = ContextManager(config(max_layer0_tokens=5_000), small, store, LAYERS)
        v = view_of(TURNS[:12], model="claude-small")
        _, plan = await turn(manager, v)
        assert plan.layer == 1 and plan.reason == "cost"
        # The first answer cached the prompt; two in a row then read nothing back: busts.
        answered(manager, v, write=2_600)
        answered(manager, v, read=0, write=2_600)
        answered(manager, v, read=0, write=2_600)
        state = manager.session(SID)
        assert state.cache.holding and manager.session_status(SID)["busts"] == 2
        # Past the cap, compressing would pay, but the session holds: it keeps growing.
        state.pinned = None  # as if the pinned state were lost: layer 0 again, past the cap
        _, held = await turn(manager, view_of(TURNS[:14], model="claude-small"))
        # When the prompt no longer fits, compressing is not optional and ends the hold.
        _, forced = await turn(manager, view_of(TURNS[:40], model="claude-small"))
        return held, forced, state

    held, forced, state = asyncio.run(run())
    assert held.layer == 0 and held.reason == "holding"
    assert forced.layer >= 1 and forced.reason == "overflow"
    assert not state.cache.holding


def test_an_overflow_resizes_the_retry_by_the_upstreams_count():
    """The upstream counts 50% more than the local tokenizer and refuses a prompt that looked
    like it fit: the retry is sized by its count (the calibration rises at once)."""
    small = PriceTable({"claude-small": ModelConfig(max_input_tokens=50_000, context_window=60_000)})

    async def run():
        store = await memory_store()
        await with_logs(store, TURNS[:10], share=0.6)
        manager = ContextManager(config(max_layer0_tokens=0), small, store, LAYERS)
        view = view_of(TURNS[:10], model="claude-small")
        sent, first = await turn(manager, view)
        # "prompt is too long: N tokens > 50000 maximum", N = 1.5 x the local count.
        manager.overflowed(exchange_of(sent), int(first.tokens * 1.5))
        await manager.force_min_layer(SID, 2)
        _, retry = await turn(manager, view)
        return first, retry, manager.session_status(SID)

    first, retry, status = asyncio.run(run())
    usable = min(50_000, 60_000 - 1024) * M.FIT_SHARE
    assert first.layer == 0 and first.tokens <= usable < first.tokens * 1.5
    assert status["calibration_factor"] == pytest.approx(1.5, rel=0.01)
    assert retry.layer >= 2 and retry.tokens * 1.5 <= usable


def test_an_overflow_without_numbers_means_at_least_the_models_limit():
    small = PriceTable({"claude-small": ModelConfig(max_input_tokens=50_000, context_window=60_000)})

    async def run():
        manager = ContextManager(config(max_layer0_tokens=0), small, await memory_store(), LAYERS)
        view = view_of(TURNS[:10], model="claude-small")
        sent, first = await turn(manager, view)
        manager.overflowed(
            exchange_of(view_of(TURNS[:3], model="claude-small")), None
        )  # never composed: ignored
        assert manager.session_status(SID)["calibration_factor"] == 1.0
        manager.overflowed(exchange_of(sent), None)
        return first, manager.session_status(SID)

    first, status = asyncio.run(run())
    assert status["calibration_factor"] == pytest.approx(50_001 / first.tokens, rel=0.01)


def test_a_prompt_that_does_not_fit_gets_the_least_layer_that_does():
    tiny = PriceTable({"claude-tiny": ModelConfig(max_input_tokens=12_000, context_window=16_000)})

    async def run():
        store = await memory_store()
        await with_logs(store, TURNS, share=0.5)
        manager = ContextManager(config(max_layer0_tokens=0), tiny, store, LAYERS)
        view = view_of(TURNS, model="claude-tiny")
        return await turn(manager, view), manager

    (_out, plan), manager = asyncio.run(run())
    assert plan.reason == "overflow" and plan.layer >= 2
    usable = min(12_000, 16_000 - 1024)
    if plan.layer < 4:
        assert plan.tokens <= usable * M.FIT_SHARE
    assert manager.health()["by_layer"][str(plan.layer)] == 1


def test_a_side_request_never_moves_the_pinned_composition():
    async def run():
        store = await memory_store()
        await with_logs(store, TURNS, share=0.97)
        manager = ContextManager(config(max_layer0_tokens=5_000), PriceTable(), store, LAYERS)
        main = view_of(TURNS[:30])
        _, plan = await turn(manager, main)
        assert plan.layer == 1, plan.reason
        pinned = manager.session(SID).pinned
        answered(manager, main, read=0, write=9_000)
        side = view_of([], messages=[{"role": "user", "content": "Write a 5-word title for this chat."}])
        _, side_plan = await turn(manager, side)
        answered(manager, side, read=0, write=0, uncached=40)
        _, next_plan = await turn(manager, view_of(TURNS[:31]))
        return plan, pinned, side_plan, next_plan, manager

    plan, pinned, side_plan, next_plan, manager = asyncio.run(run())
    assert plan.layer == 1 and side_plan.layer == 0
    assert next_plan.reason == "pinned" and next_plan.cut_id == pinned.cut_id
    assert manager.session(SID).cache.zero_write_turns == 0  # the side answer was not counted


# -- forceMinLayer ------------------------------------------------------------------------


def test_force_min_layer_survives_a_restart_with_the_duckdb_store(tmp_path):
    duckdb_store = pytest.importorskip("lore_store_duckdb.store")
    path = tmp_path / "lore.duckdb"

    async def before_restart():
        store = duckdb_store.DuckDBStore(path)
        await store.open()
        manager = ContextManager(config(), PriceTable(), store, LAYERS)
        assert await manager.force_min_layer(SID, 3) is True
        assert manager.session_status(SID)["force_min_layer"] == 3
        await store.close()

    async def after_restart():
        store = duckdb_store.DuckDBStore(path)
        await store.open()
        try:
            assert await store.get_state(SID, FORCE_MIN_LAYER) == 3
            manager = ContextManager(config(), PriceTable(), store, LAYERS)
            _, plan = await turn(manager, view_of(TURNS[:6]))
            other = await turn(manager, view_of(TURNS[:6]), sid="another-session")
            return plan, other[1], manager.session_status(SID)
        finally:
            await store.close()

    asyncio.run(before_restart())
    plan, other, status = asyncio.run(after_restart())
    # The first turn after the restart starts at the persisted layer; other sessions do not.
    assert plan.layer == 3 and plan.reason == "forced"
    assert status["force_min_layer"] == 3
    assert other.layer == 0


def test_force_min_layer_is_clamped_and_read_once():
    class CountingStore(MemoryStore):
        reads = 0

        async def get_state(self, session_id, key, default=None):
            CountingStore.reads += 1
            return await super().get_state(session_id, key, default)

    async def run():
        store = CountingStore()
        await store.open()
        await store.set_state(SID, FORCE_MIN_LAYER, 9)
        manager = ContextManager(config(), PriceTable(), store, LAYERS)
        for n in (5, 6, 7):
            await turn(manager, view_of(TURNS[:n]))
        return manager

    manager = asyncio.run(run())
    assert CountingStore.reads == 1
    assert manager.session_status(SID)["force_min_layer"] == 4 and manager.session_status(SID)["layer"] == 4


# -- a slow or failing store --------------------------------------------------------------


def test_a_slow_store_never_holds_the_request(monkeypatch):
    monkeypatch.setattr(M, "STORE_TIMEOUT_SECONDS", 0.05)

    class Slow(MemoryStore):
        async def list_distillations(self, session_id=None, include_archived=True):
            await asyncio.sleep(30)
            return []

        async def get_state(self, session_id, key, default=None):
            raise RuntimeError("store unavailable")

    async def run():
        store = Slow()
        await store.open()
        manager = ContextManager(config(max_layer0_tokens=5_000), PriceTable(), store, LAYERS)
        out, plan = await turn(manager, view_of(TURNS))
        return manager, out, plan

    manager, out, plan = asyncio.run(run())
    # Without distillations nothing pays: the request goes out as it came.
    assert plan.layer == 0 and not out.modified
    assert manager.counts["store_timeouts"] == 1 and manager.counts["store_errors"] == 1
    assert manager.session(SID).force_loaded is False  # tried again on the next turn


def test_a_saturated_store_is_logged_once_a_minute_per_kind(monkeypatch, caplog):
    """Every request of a saturated gateway misses the store: one line per kind of miss and
    minute, saying how many went unlogged; the counts still see every one."""
    monkeypatch.setattr(M, "STORE_TIMEOUT_SECONDS", 0.01)
    clock = [1000.0]

    async def slow() -> None:
        await asyncio.sleep(1)

    async def run() -> ContextManager:
        manager = ContextManager(config(), PriceTable(), await memory_store(), LAYERS)
        manager._miss_clock = lambda: clock[0]
        for step in (0, 1, 2, 61, 62):
            clock[0] = 1000.0 + step
            for what in ("distillations", "knowledge"):
                with contextlib.suppress(M._StoreMiss):
                    await manager._store_call(what, slow())
        return manager

    with caplog.at_level(logging.WARNING, logger="lore.context"):
        manager = asyncio.run(run())
    lines = [r.getMessage() for r in caplog.records if "did not answer" in r.getMessage()]
    missed = "context: the store did not answer {} in time; using what is known"
    more = " (2 more since the last such line)"
    assert lines == [
        missed.format("distillations"),
        missed.format("knowledge"),
        missed.format("distillations") + more,
        missed.format("knowledge") + more,
    ]
    assert manager.counts["store_timeouts"] == 10


def test_status_and_health_report_the_figures_others_show():
    async def run():
        manager = ContextManager(config(), PriceTable(), await memory_store(), LAYERS)
        view = view_of(TURNS[:8])
        await turn(manager, view)
        answered(manager, view, read=3_000, write=1_000, uncached=100)
        return manager

    manager = asyncio.run(run())
    status = manager.session_status(SID)
    for key in (
        "layer",
        "force_min_layer",
        "prompt_tokens",
        "cap",
        "session_cost_usd",
        "cache_hit_rate",
        "busts",
    ):
        assert key in status
    assert status["cache_hit_rate"] == pytest.approx(3_000 / 4_100)
    assert status["session_cost_usd"] > 0
    health = manager.health()
    assert health["sessions"] == 1 and health["by_layer"]["0"] == 1
    assert health["compose_ms_p99"] is not None
    assert manager.session_status("unknown")["layer"] is None


def test_each_conversation_of_a_session_keeps_its_own_pinned_composition():
    """Sub-agents and side requests share the session id, not the conversation."""

    async def run():
        store = await memory_store()
        await with_logs(store, TURNS, share=0.97)
        manager = ContextManager(config(max_layer0_tokens=5_000), PriceTable(), store, LAYERS)
        _, first = await turn(manager, view_of(TURNS[:30]))
        state = manager.session(SID)
        main_key, pinned = state.main, state.pinned
        assert first.layer == 1 and pinned is not None
        # A sub-agent runs a few turns of its own conversation ...
        agent = coding_session(6, seed=99)
        agent_plans = [(await turn(manager, view_of(agent[:n])))[1] for n in (1, 2)]
        # ... and the main conversation continues exactly where it was.
        _, again = await turn(manager, view_of(TURNS[:31]))
        reported = manager.session_status(SID)
        # A conversation that restarts small and keeps going becomes the main one.
        for n in (3, 4, 5):
            await turn(manager, view_of(agent[:n]))
        return state, main_key, pinned, agent_plans, again, reported, manager.session_status(SID)

    state, main_key, pinned, agent_plans, again, reported, later = asyncio.run(run())
    assert [p.layer for p in agent_plans] == [0, 0]
    assert again.reason == "pinned" and again.cut_id == pinned.cut_id
    assert reported["layer"] == 1 and reported["threads"] == 2 and reported["turns"] == 4
    assert state.main != main_key and later["layer"] == 0
    assert state.threads[main_key].pinned is not None  # kept for when it comes back


def test_a_responses_request_continuing_server_state_is_never_composed():
    from lore_core.testing.simulate import responses_items
    from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec

    responses = OpenAIResponsesCodec()
    raw = {"model": "gpt-4.1", "previous_response_id": "resp_1", "input": responses_items(TURNS[:30])}

    async def run():
        manager = ContextManager(config(), PriceTable(), await memory_store(), LAYERS)
        await manager.force_min_layer(SID, 2)
        view = responses.parse(raw, json.dumps(raw).encode())
        ctx = CompositionContext(SID, "/project", "codex", responses)
        out = await manager.compose(view, ctx)
        return out, ctx.composition

    out, plan = asyncio.run(run())
    assert plan.layer == 0 and plan.reason == "server-state" and not out.modified


def test_force_min_layer_applies_at_once_even_when_the_store_cannot_persist_it():
    class ReadOnly(MemoryStore):
        async def set_state(self, session_id, key, value):
            raise RuntimeError("disk full")

    async def run():
        store = ReadOnly()
        await store.open()
        manager = ContextManager(config(), PriceTable(), store, LAYERS)
        persisted = await manager.force_min_layer(SID, 2)
        _, plan = await turn(manager, view_of(TURNS[:5]))
        return persisted, plan, manager

    persisted, plan, manager = asyncio.run(run())
    assert persisted is False and plan.layer == 2 and manager.counts["store_errors"] == 1


def test_after_an_overflow_the_next_turn_is_composed_afresh_even_at_the_same_layer():
    async def run():
        store = await memory_store()
        await with_logs(store, TURNS[:20], share=0.5)
        tiny = PriceTable({"claude-tiny": ModelConfig(max_input_tokens=60_000, context_window=70_000)})
        manager = ContextManager(config(max_layer0_tokens=0), tiny, store, LAYERS)
        _, first = await turn(manager, view_of(TURNS[:20], model="claude-tiny"))
        # The distiller caught up meanwhile.
        ids = [i for i in C.view_message_ids(SID, view_of(TURNS[:21]).messages) if i is not None]
        await store.write_distillation(
            StoredDistillation(
                id="late", session_id=SID, generation=0, text="late log", source_ids=ids, end=99.0
            )
        )
        manager.invalidate(SID)
        # The upstream refused the prompt: the overflow recovery raises forceMinLayer to
        # the layer the session is already at.
        await manager.force_min_layer(SID, first.layer)
        _, after = await turn(manager, view_of(TURNS[:21], model="claude-tiny"))
        return first, after

    first, after = asyncio.run(run())
    assert first.layer >= 1 and after.layer >= first.layer
    assert after.reason == "forced" and after.cut_index > first.cut_index


def test_urgent_distillation_is_asked_for_when_a_turn_needs_compressing_at_most_every_interval():
    calls = []
    now = [1000.0]

    async def distil(session_id):
        calls.append(session_id)

    async def run():
        manager = ContextManager(
            config(max_layer0_tokens=5_000),
            PriceTable(),
            await memory_store(),
            LAYERS,
            distill_now=distil,
            clock=lambda: now[0],
        )
        for n in (20, 21, 22):  # past the cap, nothing distilled: each turn would ask
            await turn(manager, view_of(TURNS[:n]))
            await asyncio.sleep(0)
        now[0] += M.URGENT_INTERVAL_SECONDS
        await turn(manager, view_of(TURNS[:23]))
        await asyncio.sleep(0)
        await manager.stop()
        return manager

    manager = asyncio.run(run())
    assert calls == [SID, SID] and manager.counts["urgent_distillations"] == 2


def test_idle_conversations_and_sessions_are_forgotten():
    now = [0.0]

    async def run():
        manager = ContextManager(config(), PriceTable(), await memory_store(), LAYERS, clock=lambda: now[0])
        await turn(manager, view_of(TURNS[:3]))
        await turn(manager, view_of(coding_session(2, seed=5)))  # a side conversation
        await turn(manager, view_of([], messages=[{"role": "user", "content": "hi"}]), sid="other")
        now[0] += M.THREAD_IDLE_SECONDS + 1
        await turn(manager, view_of(TURNS[:4]))
        manager.sweep()
        threads = len(manager.session(SID).threads)
        now[0] += M.SESSION_IDLE_SECONDS + 1
        manager.sweep()
        return manager, threads

    manager, threads = asyncio.run(run())
    assert threads == 1 and manager.sessions == {}


def test_sessions_are_bounded_by_count_too(monkeypatch: pytest.MonkeyPatch):
    """Past ``MAX_SESSIONS`` the least recently seen sessions are forgotten (a soak sees
    thousands of sessions well within the idle time)."""
    monkeypatch.setattr(M, "MAX_SESSIONS", 3)
    now = [0.0]

    async def run():
        manager = ContextManager(config(), PriceTable(), await memory_store(), LAYERS, clock=lambda: now[0])
        for i in range(5):
            now[0] += 1
            await turn(manager, view_of([], messages=[{"role": "user", "content": f"hi {i}"}]), sid=f"s{i}")
        now[0] += 1
        await turn(manager, view_of([], messages=[{"role": "user", "content": "again"}]), sid="s0")
        manager.sweep()
        return manager

    manager = asyncio.run(run())
    assert sorted(manager.sessions) == ["s0", "s3", "s4"]
