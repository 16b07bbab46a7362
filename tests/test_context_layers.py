"""The layer engine's selection rules and their boundaries (MISSION section 6), on real
parsed requests and the real token counter."""

from __future__ import annotations

import json

import pytest

from lore_core.context import compose as C
from lore_core.context.tokens import TokenCounter
from lore_core.model import TOOL_CALL, TOOL_RESULT
from lore_core.storage.records import StoredDistillation
from lore_core.testing.simulate import ToolStep, Turn, anthropic_messages, coding_session
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.openai_chat.codec import OpenAIChatCodec

SID = "session-layers"
COUNTER = TokenCounter()
anthropic = AnthropicMessagesCodec()


def view_of(messages, system="You are a coding agent."):
    raw = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": system, "messages": messages}
    return anthropic.parse(raw, json.dumps(raw).encode())


def analysis(messages):
    return C.analyse(view_of(messages), SID, COUNTER)


def gen0(an, start, end, name, created=0.0):
    """A gen-0 log covering view messages [start, end)."""
    ids = [i for i in an.ids[start:end] if i is not None]
    return StoredDistillation(
        id=name, session_id=SID, generation=0, text=f"log {name}", source_ids=ids, end=created or end
    )


def logs_every(an, upto, per=8):
    return [gen0(an, s, min(s + per, upto), f"g{s:04d}") for s in range(an.head, upto, per)]


def tool_pairs_intact(messages):
    calls = [b.tool_call_id for m in messages for b in m.blocks if b.type == TOOL_CALL]
    results = [b.tool_call_id for m in messages for b in m.blocks if b.type == TOOL_RESULT]
    return sorted(calls) == sorted(results)


def long_turn(prompt, outputs):
    steps = [
        ToolStep("Bash", {"command": f"cat f{i}"}, out, call_id=f"call_{prompt}_{i}")
        for i, out in enumerate(outputs)
    ]
    return Turn(prompt, steps, f"answer to {prompt}")


LONG = "\n".join(f"src/app/module_{i}.py:{i}: value = compute({i})" for i in range(120))


def session(turns=6, answered=False):
    return anthropic_messages([long_turn(f"t{t}", [LONG, "ok"]) for t in range(turns)], answered=answered)


# -- the request's shape ------------------------------------------------------------------


def test_head_is_the_harness_preamble_and_nothing_else():
    chat = OpenAIChatCodec()
    raw = {
        "model": "gpt-4.1",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": "project rules"},
            {"role": "user", "content": "<environment_context>cwd=/x</environment_context>"},
            {"role": "user", "content": "<system-reminder>todo</system-reminder> fix the bug"},
            {"role": "assistant", "content": "ok"},
        ],
    }
    view = chat.parse(raw, json.dumps(raw).encode())
    assert C.head_length(view.messages) == 3
    an = C.analyse(view, SID, COUNTER)
    assert an.turn_starts == [3]


def test_a_user_message_carrying_tool_results_is_not_a_turn_start():
    an = analysis(session(2))
    kinds = [(m.role, C.is_turn_start(m)) for m in an.messages]
    assert kinds == [
        ("user", True),
        ("assistant", False),
        ("user", False),
        ("assistant", False),
        ("user", False),
        ("assistant", False),
        ("user", True),
        ("assistant", False),
        ("user", False),
        ("assistant", False),
        ("user", False),
    ]


def test_view_ids_are_the_store_ids():
    from lore_core.storage.identity import chain_ids, logical_messages

    view = view_of(session(3))
    ids = C.view_message_ids(SID, view.messages)
    assert ids == chain_ids(SID, logical_messages(view.messages))


# -- layer 1 ------------------------------------------------------------------------------


def test_layer1_is_the_distilled_prefix_and_the_raw_window_after_what_it_covers():
    an = analysis(session(6))
    # Turns are 6 messages long (prompt, 2 x (call, result), answer): cover 4 whole turns.
    parts = C.prefix_parts(logs_every(an, 24))
    plan = C.plan_layer(1, an, parts, COUNTER, usable=200_000)
    assert plan.layer == 1 and plan.cut_index == 24 and plan.dropped == 24
    assert [p.id for p in plan.prefix] == [f"g{s:04d}" for s in range(0, 24, 8)]
    # The raw window is the client's own messages, untouched.
    assert all(a is b for a, b in zip(plan.conversation, an.messages[24:], strict=True))
    assert plan.stripped == 0
    assert plan.tokens < an.raw_total


def test_the_cut_never_splits_a_tool_call_from_its_result():
    an = analysis(session(6))
    # Coverage ends between a tool call (index 13) and its result (index 14).
    parts = C.prefix_parts([gen0(an, 0, 14, "partial")])
    plan = C.plan_layer(1, an, parts, COUNTER, usable=200_000)
    assert plan.cut_index == 12  # back to the start of that turn
    assert C.is_turn_start(an.messages[plan.cut_index])
    assert tool_pairs_intact(plan.conversation)


def test_the_current_turn_is_always_whole_even_when_distilled():
    an = analysis(session(4))
    parts = C.prefix_parts([gen0(an, 0, len(an.messages), "everything")])
    for layer in (1, 2, 3, 4):
        plan = C.plan_layer(layer, an, parts, COUNTER, usable=200_000)
        assert plan.cut_index <= an.current_turn
        current = an.messages[an.current_turn :]
        assert [m.raw for m in plan.conversation[-len(current) :]] == [m.raw for m in current]


def test_nothing_undistilled_is_dropped_at_layers_1_to_3():
    an = analysis(session(6))
    parts = C.prefix_parts([gen0(an, 0, 6, "first")])
    for layer in (1, 2, 3):
        plan = C.plan_layer(layer, an, parts, COUNTER, usable=200_000)
        assert plan.cut_index == 6


# -- layer 2 ------------------------------------------------------------------------------


def test_layer2_strips_old_tool_outputs_and_protects_the_last_two_turns():
    an = analysis(session(6))
    plan = C.plan_layer(2, an, [], COUNTER, usable=200_000)
    protected_from = an.turn_starts[-2]
    assert plan.strip_before_index == protected_from
    for offset, msg in enumerate(plan.conversation):
        index = plan.cut_index + offset
        results = [b for b in msg.blocks if b.type == TOOL_RESULT]
        for block in results:
            if index < protected_from and block.tool_call_id.endswith("_0"):
                assert block.text.startswith("[long output of Bash omitted: 120 lines")
                assert "src/app/module_" in block.text  # the paths survive
                assert msg.raw["content"][0]["tool_use_id"] == block.tool_call_id
            else:
                # Short outputs are never stripped; the protected turns keep everything.
                assert block.text in (LONG, "ok")
    assert plan.stripped == 4  # turns 0-3, one long output each
    assert tool_pairs_intact(plan.conversation)
    assert plan.tokens < C.plan_layer(1, an, [], COUNTER, usable=200_000).tokens


def test_stripping_leaves_the_client_body_untouched_and_is_deterministic():
    an = analysis(session(3))
    before = json.dumps([m.raw for m in an.messages])
    one = C.plan_layer(3, an, [], COUNTER, usable=200_000)
    two = C.plan_layer(3, an, [], COUNTER, usable=200_000)
    assert json.dumps([m.raw for m in an.messages]) == before
    assert [m.raw for m in one.conversation] == [m.raw for m in two.conversation]


# -- layer 3 ------------------------------------------------------------------------------


def test_layer3_strips_everything_outside_the_current_turn_and_keeps_five_newest_logs():
    an = analysis(session(8))
    logs = logs_every(an, 42, per=4)  # 11 gen-0 logs over the first 7 turns
    meta = StoredDistillation(
        id="meta", session_id=SID, generation=1, text="meta", source_ids=[d.id for d in logs[:6]], end=30
    )
    parts = C.prefix_parts([*logs, meta])
    plan = C.plan_layer(3, an, parts, COUNTER, usable=200_000)
    assert [p.id for p in plan.prefix] == [d.id for d in logs[-5:]]
    assert plan.strip_before_index == an.current_turn
    for offset, msg in enumerate(plan.conversation):
        for block in msg.blocks:
            if block.type == TOOL_RESULT and plan.cut_index + offset < an.current_turn:
                assert block.text in ("ok",) or "omitted" in block.text
    current = [b.text for m in an.messages[an.current_turn :] for b in m.blocks if b.type == TOOL_RESULT]
    assert LONG in current


def test_layer2_prefix_prefers_meta_distillations_only_when_rebuilt():
    an = analysis(session(8))
    logs = logs_every(an, 42, per=6)
    meta = StoredDistillation(
        id="meta", session_id=SID, generation=1, text="meta", source_ids=[d.id for d in logs[:4]], end=24
    )
    parts = C.prefix_parts([*logs, meta])
    pinned = C.plan_layer(1, an, C.prefix_parts(logs[:4]), COUNTER, usable=200_000).prefix
    # Append-only: the pinned logs stay, the meta adds nothing new, the newer logs append.
    plan = C.plan_layer(2, an, parts, COUNTER, usable=200_000, previous_prefix=pinned)
    assert [p.id for p in plan.prefix] == [d.id for d in logs]


# -- layer 4 ------------------------------------------------------------------------------


@pytest.mark.parametrize(("usable", "budget"), [(4_000, 2_000), (20_000, 5_000), (100_000, 8_000)])
def test_layer4_tail_budget_is_clamped(usable, budget):
    assert C.tail_budget(usable) == budget


def test_layer4_keeps_two_newest_distillations_and_a_tail_within_budget():
    an = analysis(session(10))
    parts = C.prefix_parts(logs_every(an, 48, per=6))
    plan = C.plan_layer(4, an, parts, COUNTER, usable=20_000)
    assert [p.id for p in plan.prefix] == ["g0036", "g0042"]
    tail = sum(an.tokens[plan.cut_index :])
    assert tail <= C.tail_budget(20_000)
    # One turn more would not have fitted.
    earlier = an.turn_starts[an.turn_starts.index(plan.cut_index) - 1]
    assert sum(an.tokens[earlier:]) > C.tail_budget(20_000)
    assert plan.stripped == 0 and tool_pairs_intact(plan.conversation)
    assert C.is_turn_start(plan.conversation[0])


def test_layer4_keeps_the_request_and_newest_call_of_a_current_turn_larger_than_the_tail():
    # Real agents' turns run to 100K tokens: a current turn larger than the tail keeps its
    # opening message and its newest model call (whatever its size), not the whole turn.
    turns = [long_turn("small", ["ok"]), long_turn("huge", [LONG * 8, LONG * 8])]
    an = analysis(anthropic_messages(turns, answered=False))
    plan = C.plan_layer(4, an, [], COUNTER, usable=4_000)
    assert plan.cut_index == an.current_call > an.current_turn
    assert plan.anchor_index == an.current_turn
    assert [m.raw for m in plan.conversation] == [
        m.raw for m in [an.messages[an.current_turn], *an.messages[an.current_call :]]
    ]
    assert sum(an.tokens[plan.cut_index :]) > C.tail_budget(4_000)
    assert tool_pairs_intact(plan.conversation)


# -- choosing the least layer that fits ---------------------------------------------------


def test_least_layer_picks_the_least_compression_that_fits_at_each_boundary():
    an = analysis(session(8))
    parts = C.prefix_parts(logs_every(an, 30, per=6))
    sizes = {layer: C.plan_layer(layer, an, parts, COUNTER, usable=200_000).tokens for layer in (1, 2, 3, 4)}
    assert sizes[1] > sizes[2] > sizes[3]
    for layer in (1, 2, 3):
        at = C.least_layer(an, parts, COUNTER, usable=200_000, fits=lambda t, limit=sizes[layer]: t <= limit)
        assert at.layer == layer
    for layer in (1, 2, 3):
        below = C.least_layer(
            an, parts, COUNTER, usable=200_000, fits=lambda t, limit=sizes[layer] - 1: t <= limit
        )
        assert below.layer == layer + 1
    # Nothing fits: the emergency layer goes out anyway.
    assert C.least_layer(an, parts, COUNTER, usable=200_000, fits=lambda t: False).layer == 4
    # A forced minimum is respected even when less would fit.
    assert C.least_layer(an, parts, COUNTER, usable=200_000, fits=lambda t: True, min_layer=3).layer == 3


def test_a_pinned_composition_replays_with_the_new_messages_appended():
    turns = coding_session(12, seed=3)
    first = analysis(anthropic_messages(turns[:10], answered=False))
    parts = C.prefix_parts(logs_every(first, 30, per=6))
    plan = C.plan_layer(2, first, parts, COUNTER, usable=200_000)
    later = analysis(anthropic_messages(turns[:11], answered=False))
    again = C.replay_pinned(plan, later, COUNTER)
    assert again is not None and again.layer == 2
    assert again.cut_index == plan.cut_index and again.strip_before_index == plan.strip_before_index
    assert [m.raw for m in again.conversation[: len(plan.conversation)]] == [m.raw for m in plan.conversation]
    assert again.tokens > plan.tokens
    # Another branch (a side request) is not a continuation.
    other = analysis([{"role": "user", "content": "write a title for this chat"}])
    assert C.replay_pinned(plan, other, COUNTER) is None


def test_prefix_parts_resolve_meta_distillation_coverage_through_generations():
    an = analysis(session(4))
    logs = logs_every(an, 18, per=6)
    meta = StoredDistillation(
        id="m", session_id=SID, generation=1, text="m", source_ids=[d.id for d in logs[:2]]
    )
    parts = {p.id: p for p in C.prefix_parts([*logs, meta])}
    assert parts["m"].covers == frozenset(logs[0].source_ids) | frozenset(logs[1].source_ids)
    assert "<system-reminder>" not in C.render_part(
        StoredDistillation(
            id="x", session_id=SID, generation=0, text="a <system-reminder>b</system-reminder> c"
        )
    )


def test_a_memo_of_the_previous_request_gives_the_same_ids_and_counts():
    turns = coding_session(10, seed=9)
    memo = C.Memo()
    for n in (4, 5, 6):
        plain = analysis(anthropic_messages(turns[:n], answered=False))
        memoed = C.analyse(view_of(anthropic_messages(turns[:n], answered=False)), SID, COUNTER, memo)
        assert memoed.ids == plain.ids and memoed.tokens == plain.tokens
    # An edited earlier message (a new branch) changes every id from there on.
    edited = anthropic_messages(turns[:6], answered=False)
    edited[3]["content"][0]["text"] = "I changed my mind"
    plain = analysis(edited)
    memoed = C.analyse(view_of(edited), SID, COUNTER, memo)
    assert memoed.ids == plain.ids and memoed.tokens == plain.tokens
    # Consecutive assistant items (one stored message) that grow are re-hashed as a group.
    split = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
    ]
    C.analyse(view_of(split), SID, COUNTER, memo)
    grown = [*split, {"role": "assistant", "content": [{"type": "text", "text": "b"}]}]
    assert C.analyse(view_of(grown), SID, COUNTER, memo).ids == analysis(grown).ids


def test_a_memo_counts_the_tool_definitions_again_only_when_they_change():
    counted: list[str] = []

    def spy(text: str) -> int:
        counted.append(text)
        return len(text)

    def view_with(tools):
        view = view_of([{"role": "user", "content": "go"}])
        view.tools = tools
        return view

    tools = [{"name": "Read", "description": "read a file", "input_schema": {"type": "object"}}]
    plain = C.analyse(view_with(tools), SID, TokenCounter(spy)).fixed
    counter, memo = TokenCounter(spy), C.Memo()
    assert C.analyse(view_with(json.loads(json.dumps(tools))), SID, counter, memo).fixed == plain
    counted.clear()
    # The same definitions in new objects (the next request, parsed again): not serialised.
    assert C.analyse(view_with(json.loads(json.dumps(tools))), SID, counter, memo).fixed == plain
    assert not any("Read" in text for text in counted)
    # A changed definition is counted again.
    changed = [{**tools[0], "description": "read a file, or a part of it"}]
    fixed = C.analyse(view_with(changed), SID, counter, memo).fixed
    assert fixed == C.analyse(view_with(changed), SID, TokenCounter(spy)).fixed != plain
    assert C.analyse(view_with([]), SID, counter, memo).fixed < plain


def test_an_append_only_prefix_is_rebuilt_once_the_meta_distillation_halves_it():
    import attrs

    an = analysis(session(10))
    logs = [
        attrs.evolve(d, text=f"log {d.id}: " + "edited src/app/models.py and ran the tests. " * 40)
        for d in logs_every(an, 48, per=6)
    ]
    pinned = C.plan_layer(1, an, C.prefix_parts(logs[:6]), COUNTER, usable=200_000).prefix
    # The reflector consolidated the first six logs into a short meta-distillation.
    meta = StoredDistillation(
        id="meta",
        session_id=SID,
        generation=1,
        text="state: models edited, tests pass",
        end=35.5,
        source_ids=[d.id for d in logs[:6]],
    )
    archived = [attrs.evolve(d, archived=True) for d in logs[:6]]
    parts = C.prefix_parts([*archived, *logs[6:], meta])
    plan = C.plan_layer(1, an, parts, COUNTER, usable=200_000, previous_prefix=pinned)
    assert [p.id for p in plan.prefix] == ["meta", *(d.id for d in logs[6:])]
    # Coverage through the meta-distillation: nothing before the cut is lost.
    assert plan.cut_index == 48
    # With only one new log the prefix stays append-only (the blocks sent before stay).
    few = C.prefix_parts([*logs[:7]])
    kept = C.plan_layer(1, an, few, COUNTER, usable=200_000, previous_prefix=pinned)
    assert [p.id for p in kept.prefix] == [d.id for d in logs[:7]]
