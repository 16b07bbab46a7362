"""Rules for real agent sessions: turns of dozens of tool calls (a cut inside a turn), urgent
distillation only when it pays for a worker call, and cache entries that expire while the
developer is away (an expiry is not a bust). All data is generated here."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from lore_core.builtin.context_layers import LAYERS
from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import LoreConfig
from lore_core.context import compose as C
from lore_core.context import economics as ec
from lore_core.context.manager import ContextManager
from lore_core.context.pricing import PriceTable
from lore_core.context.tokens import TokenCounter
from lore_core.interfaces import CompositionContext
from lore_core.model import TOOL_CALL, TOOL_RESULT, AssistantMessage, Exchange, Usage
from lore_core.storage.records import StoredDistillation
from lore_core.testing.simulate import (
    ToolStep,
    Turn,
    anthropic_messages,
    chat_messages,
    responses_items,
)
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.openai_chat.codec import OpenAIChatCodec
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec

SID = "session-long-turns"
COUNTER = TokenCounter()
SONNET = PriceTable().lookup("claude-sonnet-4-5")
CODECS = {
    "anthropic-messages": AnthropicMessagesCodec(),
    "openai-chat": OpenAIChatCodec(),
    "openai-responses": OpenAIResponsesCodec(),
}
#: The long turn's request (what the window must keep when it starts inside that turn).
REQUEST = "Move the retry loop of the worker into its own module"
#: A file read of ~2.5K tokens.
LONG = "\n".join(f"src/app/module_{i}.py:{i}: value = compute({i})" for i in range(120))


def turn(prompt: str, outputs: list[str]) -> Turn:
    steps = [
        ToolStep("Bash", {"command": f"cat f{i}"}, out, call_id=f"call_{prompt.split()[0]}_{i}")
        for i, out in enumerate(outputs)
    ]
    return Turn(prompt, steps, f"answer to {prompt}")


def agentic_session(calls: int = 12) -> list[Turn]:
    """Two short turns, then the current one: a single request worked through ``calls`` tool
    calls (what real agents do; ~30K tokens here)."""
    return [turn("t0", [LONG, "ok"]), turn("t1", ["ok"]), turn(REQUEST, [LONG] * calls)]


def request(api: str, turns: list[Turn], model: str = "claude-sonnet-4-5"):
    if api == "anthropic-messages":
        raw = {
            "model": model,
            "max_tokens": 2048,
            "system": "agent",
            "messages": anthropic_messages(turns, answered=False),
        }
    elif api == "openai-chat":
        raw = {"model": model, "messages": chat_messages(turns, answered=False, system="agent")}
    else:
        raw = {"model": model, "instructions": "agent", "input": responses_items(turns, answered=False)}
    return CODECS[api].parse(raw, json.dumps(raw).encode())


def log_over(view, start: int, end: int, name: str) -> StoredDistillation:
    ids = list(dict.fromkeys(i for i in C.view_message_ids(SID, view.messages)[start:end] if i is not None))
    return StoredDistillation(
        id=name, session_id=SID, generation=0, text=f"- {name}: ran cat", source_ids=ids, end=end
    )


def tool_pairs_intact(messages) -> bool:
    calls = [b.tool_call_id for m in messages for b in m.blocks if b.type == TOOL_CALL]
    results = [b.tool_call_id for m in messages for b in m.blocks if b.type == TOOL_RESULT]
    return sorted(calls) == sorted(results)


# -- where a window may start --------------------------------------------------------------


def test_cut_points_are_turn_starts_and_model_calls_never_between_a_call_and_its_result():
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
        {"type": "function_call", "call_id": "a", "name": "exec", "arguments": "{}"},
        {"type": "function_call", "call_id": "b", "name": "exec", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "b", "output": "B"},
        # A model call while call a's result is still to come: cutting here would orphan it.
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "waiting"}]},
        {"type": "function_call_output", "call_id": "a", "output": "A"},
        {"type": "function_call", "call_id": "c", "name": "exec", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "C"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
    ]
    view = CODECS["openai-responses"].parse({"model": "gpt-5", "input": items}, b"")
    an = C.analyse(view, SID, COUNTER)
    assert an.cuts == [0, 1, 6, 8]
    assert an.current_call == 8


def test_a_long_turn_is_cut_at_a_model_call_and_keeps_its_opening_request():
    view = request("anthropic-messages", agentic_session())
    an = C.analyse(view, SID, COUNTER)
    big = an.current_turn
    # Distilled up to the 7th call of the long turn (its prompt and 6 call/result pairs).
    upto = big + 1 + 2 * 6
    plan = C.plan_layer(1, an, C.prefix_parts([log_over(view, 0, upto, "log")]), COUNTER, usable=200_000)
    # The old rule cut at the turn start: the whole ~30K-token turn stayed raw.
    assert plan.cut_index == upto and an.messages[upto].role == "assistant"
    assert plan.anchor_index == big and plan.dropped == upto - 1
    assert [m.raw for m in plan.conversation] == [m.raw for m in [an.messages[big], *an.messages[upto:]]]
    assert tool_pairs_intact(plan.conversation)
    assert plan.tokens < an.fixed + sum(an.tokens[big:]) - 10_000


def test_a_turn_within_the_tail_budget_stays_whole():
    turns = [turn("t0", [LONG, LONG, "ok"]), turn("small", ["ok", "ok", "ok"])]
    view = request("anthropic-messages", turns)
    an = C.analyse(view, SID, COUNTER)
    small = an.current_turn
    plan = C.plan_layer(1, an, C.prefix_parts([log_over(view, 0, small + 3, "log")]), COUNTER, usable=200_000)
    assert plan.cut_index == small and plan.anchor_index is None


@pytest.mark.parametrize("api", sorted(CODECS))
def test_a_window_inside_a_turn_is_well_formed_and_byte_stable_on_every_api(api):
    """The long turn goes on (one more tool call per request): the composition cut inside it
    is pinned, the anchor and everything sent before stay byte-identical, only new calls are
    appended."""
    session = agentic_session(calls=10)
    prompt, steps = session[-1].prompt, session[-1].steps

    def at(calls: int):
        return request(api, [*session[:-1], Turn(prompt, steps[:calls], "")])

    async def run():
        store = MemoryStore()
        await store.open()
        first = at(8)
        an = C.analyse(first, SID, COUNTER)
        # Logs over everything up to the long turn's 6th call.
        await store.write_distillation(log_over(first, 0, an.cuts[-3], "log"))
        manager = ContextManager(LoreConfig(), PriceTable(), store, LAYERS)
        manager.session(SID).force_min_layer = 1
        manager.session(SID).force_loaded = True
        bodies, plans = [], []
        for calls in (8, 9, 10):
            ctx = CompositionContext(SID, "/project", "generic", CODECS[api])
            out = await manager.compose(at(calls), ctx)
            plans.append(ctx.composition)
            bodies.append(CODECS[api].render(out))
        return bodies, plans

    bodies, plans = asyncio.run(run())
    assert [p.reason for p in plans] == ["forced", "pinned", "pinned"]
    assert all(p.anchor_index is not None for p in plans)
    key = "input" if api == "openai-responses" else "messages"
    for before, after in itertools.pairwise(bodies):
        old, new = before[key], after[key]
        assert len(new) > len(old)
        assert [json.dumps(i) for i in old[:-1]] == [json.dumps(i) for i in new[: len(old) - 1]]
    text = json.dumps(bodies[-1][key])
    assert "[Lore memory]" in text and text.count(prompt) == 1  # the turn's request, once
    view = CODECS[api].parse(bodies[-1], b"")
    assert tool_pairs_intact([m for m in view.messages if not m.synthetic])


# -- urgent distillation -------------------------------------------------------------------


def test_an_urgent_distillation_for_cost_needs_a_tail_worth_a_worker_call():
    """Past the cap, every turn considers compressing; when what is undistilled past the
    cut is no more than the layer-4 tail, a worker call would buy nothing (the old rule asked
    for one every 30 seconds, a few messages each)."""
    calls: list[str] = []
    now = [1000.0]

    async def distil(session_id: str) -> None:
        calls.append(session_id)

    session = agentic_session(calls=10)

    async def run(covered_share: float) -> list[str]:
        calls.clear()
        store = MemoryStore()
        await store.open()
        view = request("anthropic-messages", session)
        an = C.analyse(view, SID, COUNTER)
        # Covered up to a model call of the long turn: the tail after it is what is left.
        await store.write_distillation(
            log_over(view, 0, an.cuts[int((len(an.cuts) - 1) * covered_share)], "log")
        )
        cfg = LoreConfig()
        cfg.budget.max_layer0_tokens = 5_000
        manager = ContextManager(cfg, PriceTable(), store, LAYERS, distill_now=distil, clock=lambda: now[0])
        await manager.compose(view, CompositionContext(SID, "/p", "generic", CODECS["anthropic-messages"]))
        await asyncio.sleep(0)
        await manager.stop()
        return list(calls)

    assert asyncio.run(run(0.95)) == []  # ~2 calls (5K tokens) undistilled
    assert asyncio.run(run(0.3)) == [SID]  # ~20K undistilled


# -- cache expiry --------------------------------------------------------------------------


def usage(read: int, write: int) -> Usage:
    return Usage(input_tokens=10, cache_read_tokens=read, cache_write_tokens=write, output_tokens=50)


def test_a_cache_expiry_is_not_a_bust_and_never_starts_a_hold():
    state = ec.CacheState()
    state.observe(usage(0, 60_000))
    # Two pauses past the TTL in a row: the provider dropped the entry each time.
    assert not state.observe(usage(0, 61_000), expired=True)
    assert not state.observe(usage(0, 62_000), expired=True)
    assert state.consecutive_busts == 0 and not state.holding
    # The same misses without the pauses are busts, and two of them hold.
    state.observe(usage(0, 61_000))
    state.observe(usage(0, 62_000))
    assert state.holding


def test_an_expired_cache_makes_any_smaller_prompt_pay_even_while_holding():
    cap = ec.Layer0Cap(40_000, "floor")
    held = ec.CacheState(holding=True)
    # 45K read from the cache: a 38K prompt written anew does not pay (nor while holding) ...
    assert not ec.decide_compression(45_000, 38_000, SONNET, cap, ec.CacheState()).compress
    assert ec.decide_compression(45_000, 38_000, SONNET, cap, held).reason == "holding"
    # ... but once the entry has expired the 45K are written anyway.
    assert ec.decide_compression(45_000, 38_000, SONNET, cap, held, expired=True) == ec.CompressionDecision(
        True, "expired", 3.0
    )
    assert not ec.decide_compression(45_000, 46_000, SONNET, cap, held, expired=True).compress
    assert ec.decide_compression(30_000, 10_000, SONNET, cap, held, expired=True).reason == "under-cap"


def test_a_session_with_pauses_keeps_compressing():
    """Requests more than the cache TTL apart read nothing back: the old rule took two such
    misses for busts, held, and let the session grow uncompressed to the window."""
    now = [10_000.0]
    session = agentic_session(calls=12)
    prompt, steps = session[-1].prompt, session[-1].steps
    api = "anthropic-messages"

    async def run():
        store = MemoryStore()
        await store.open()
        full = request(api, session)
        await store.write_distillation(log_over(full, 0, C.analyse(full, SID, COUNTER).cuts[-4], "log"))
        cfg = LoreConfig()
        cfg.budget.max_layer0_tokens = 20_000
        manager = ContextManager(cfg, PriceTable(), store, LAYERS, clock=lambda: now[0])
        plans = []
        for calls in (4, 5, 6, 12):
            now[0] += ec.CACHE_TTL_SECONDS + 60
            view = request(api, [*session[:-1], Turn(prompt, steps[:calls], "")])
            ctx = CompositionContext(SID, "/p", "generic", CODECS[api])
            out = await manager.compose(view, ctx)
            plans.append(ctx.composition)
            tokens = COUNTER.request(out)
            manager.exchange_finished(
                Exchange(
                    api=api,
                    path="/v1/messages",
                    request=out,
                    harness="generic",
                    session_id=SID,
                    project="/p",
                    upstream="test",
                    composed=ctx,
                    status=200,
                    response=AssistantMessage(
                        usage=usage(0, tokens), model="claude-sonnet-4-5", complete=True
                    ),
                )
            )
        return plans, manager.session(SID).main_thread.cache

    plans, cache = asyncio.run(run())
    assert not cache.holding and cache.consecutive_busts == 0
    assert plans[-1].layer == 1 and plans[-1].tokens < 20_000


def test_a_client_marking_the_one_hour_cache_keeps_its_entry_for_an_hour():
    marked = {"type": "text", "text": "agent", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    assert ec.cache_ttl({"system": [marked], "messages": []}) == ec.CACHE_TTL_HOUR_SECONDS
    last = {"role": "user", "content": [{**marked, "text": "go on"}]}
    assert ec.cache_ttl({"messages": [{"role": "user", "content": "hi"}, last]}) == ec.CACHE_TTL_HOUR_SECONDS
    five = {"type": "text", "text": "agent", "cache_control": {"type": "ephemeral"}}
    assert ec.cache_ttl({"system": [five], "tools": [], "messages": []}) == ec.CACHE_TTL_SECONDS
    assert ec.cache_ttl({"input": "hi"}) == ec.CACHE_TTL_SECONDS
