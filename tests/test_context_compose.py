"""Composition rendered on the wire through each codec: byte-stable prefixes across
consecutive turns at layers 1-3, layer-0 passthrough, well-formed requests and Anthropic's
cache breakpoints."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from lore_core.builtin.context_layers import LAYERS
from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import LoreConfig, ModelConfig
from lore_core.context import compose as C
from lore_core.context.manager import ContextManager
from lore_core.context.pricing import PriceTable
from lore_core.interfaces import CompositionContext, PromptLayer
from lore_core.storage.records import StoredDistillation
from lore_core.testing.simulate import anthropic_messages, chat_messages, coding_session, responses_items
from lore_core.wire.anthropic.cache import MAX_BREAKPOINTS
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.openai_chat.codec import OpenAIChatCodec
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec

SID = "session-compose"
CODECS = {
    "anthropic-messages": AnthropicMessagesCodec(),
    "openai-chat": OpenAIChatCodec(),
    "openai-responses": OpenAIResponsesCodec(),
}


def request(api, turns, *, markers=False):
    if api == "anthropic-messages":
        raw = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 2048,
            "system": [{"type": "text", "text": "You are a coding agent."}],
            "messages": anthropic_messages(turns, answered=False),
            "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}],
            "metadata": {"user_id": "u1"},
        }
        if markers:
            raw["system"][0]["cache_control"] = {"type": "ephemeral"}
            raw["tools"][0]["cache_control"] = {"type": "ephemeral"}
            for msg in raw["messages"][-3:-1]:
                msg["content"][-1]["cache_control"] = {"type": "ephemeral"}
    elif api == "openai-chat":
        raw = {
            "model": "gpt-4.1",
            "messages": chat_messages(turns, answered=False, system="You are a coding agent."),
            "temperature": 0.2,
        }
    else:
        raw = {
            "model": "gpt-4.1",
            "instructions": "You are a coding agent.",
            "input": responses_items(turns, answered=False),
            "store": False,
        }
    return CODECS[api].parse(raw, json.dumps(raw).encode())


def wire_items(api, body):
    return body["input"] if api == "openai-responses" else body["messages"]


def drop_markers(value):
    if isinstance(value, dict):
        return {k: drop_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [drop_markers(v) for v in value]
    return value


async def manager_with_logs(api, turns, upto_share=0.4):
    """A context manager whose store holds gen-0 logs over the first part of the session."""
    store = MemoryStore()
    await store.open()
    manager = ContextManager(LoreConfig(), PriceTable(), store, LAYERS)
    view = request(api, turns)
    ids = [i for i in C.view_message_ids(SID, view.messages) if i is not None]
    upto = int(len(ids) * upto_share)
    for n, start in enumerate(range(0, upto, 10)):
        await store.write_distillation(
            StoredDistillation(
                id=f"log{n:03d}",
                session_id=SID,
                generation=0,
                text=f"observation log {n}: ran pytest, edited src/app/models.py",
                source_ids=list(dict.fromkeys(ids[start : min(start + 10, upto)])),
                end=float(n),
            )
        )
    return manager


async def compose(manager, api, view):
    ctx = CompositionContext(SID, "/project", "generic", CODECS[api])
    out = await manager.compose(view, ctx)
    return out, ctx.composition


@pytest.mark.parametrize("api", sorted(CODECS))
@pytest.mark.parametrize("layer", [1, 2, 3])
def test_prefix_is_byte_identical_across_consecutive_turns(api, layer):
    turns = coding_session(16, seed=11)

    async def run():
        manager = await manager_with_logs(api, turns[:12])
        manager.session(SID).force_min_layer = layer
        manager.session(SID).force_loaded = True
        bodies = []
        for n in (12, 13, 14):
            out, plan = await compose(manager, api, request(api, turns[:n]))
            assert plan.layer == layer and out.modified
            assert plan.reason == ("forced" if n == 12 else "pinned")
            bodies.append(CODECS[api].render(out))
        return manager, bodies

    manager, bodies = asyncio.run(run())
    raw_items = wire_items(api, json.loads(request(api, turns[:14]).body))
    assert "[Lore memory]" in json.dumps(bodies[-1])
    assert len(wire_items(api, bodies[-1])) < len(raw_items)
    if layer >= 2:
        assert "omitted" in json.dumps(bodies[-1])
    for before, after in itertools.pairwise(bodies):
        old, new = wire_items(api, before), wire_items(api, after)
        assert len(new) > len(old)
        # Every item sent before is sent again, byte for byte, at the same place; only the
        # conversation's tail marker may move.
        assert [json.dumps(i) for i in old[:-1]] == [json.dumps(i) for i in new[: len(old) - 1]]
        assert json.dumps(drop_markers(old[-1])) == json.dumps(drop_markers(new[len(old) - 1]))
        for key in set(before) - {"messages", "input"}:
            assert json.dumps(before[key]) == json.dumps(after[key]), key
    # Fields the pipeline does not own travel unchanged.
    extra = {"anthropic-messages": "metadata", "openai-chat": "temperature", "openai-responses": "store"}[api]
    assert extra in bodies[-1]
    status = manager.session_status(SID)
    assert status["layer"] == layer and status["recompositions"] == 1


@pytest.mark.parametrize("api", sorted(CODECS))
def test_layer0_is_a_byte_for_byte_passthrough(api):
    turns = coding_session(6, seed=2)

    async def run():
        manager = await manager_with_logs(api, turns)
        view = request(api, turns)
        body = view.body
        out, plan = await compose(manager, api, view)
        return body, out, plan

    body, out, plan = asyncio.run(run())
    assert plan.layer == 0 and not out.modified and out.body == body


def anthropic_well_formed(body):
    msgs = body["messages"]
    roles = [m["role"] for m in msgs]
    assert roles[0] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    for i, msg in enumerate(msgs):
        content = msg["content"] if isinstance(msg["content"], list) else []
        uses = [b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
        if uses:
            following = msgs[i + 1]["content"]
            results = [b["tool_use_id"] for b in following if b.get("type") == "tool_result"]
            assert sorted(uses) == sorted(results)
        if msg["role"] == "user":
            for b in content:
                if b.get("type") == "tool_result":
                    prev = [x["id"] for x in msgs[i - 1]["content"] if x.get("type") == "tool_use"]
                    assert b["tool_use_id"] in prev


def count_markers(body):
    text = json.dumps(body)
    return text.count('"cache_control"')


@pytest.mark.parametrize("layer", [1, 2, 3, 4])
def test_anthropic_requests_are_well_formed_and_never_exceed_four_breakpoints(layer):
    turns = coding_session(14, seed=5)

    async def run():
        manager = await manager_with_logs("anthropic-messages", turns)
        manager.session(SID).force_min_layer = layer
        manager.session(SID).force_loaded = True
        out, plan = await compose(
            manager, "anthropic-messages", request("anthropic-messages", turns, markers=True)
        )
        return CODECS["anthropic-messages"].render(out), plan

    body, plan = asyncio.run(run())
    assert plan.layer == layer
    anthropic_well_formed(body)
    assert count_markers(body) <= MAX_BREAKPOINTS
    # The gateway's stable block (the end of the distilled prefix) carries a breakpoint,
    # and the client's newest message marker is kept.
    prefix = body["messages"][0]["content"]
    assert prefix[0]["text"].startswith("[Lore memory]")
    assert "cache_control" in prefix[-1]
    assert "cache_control" in body["messages"][-2]["content"][-1]


def test_gateway_adds_prefix_and_tail_breakpoints_for_a_client_without_markers():
    turns = coding_session(12, seed=8)

    async def run():
        manager = await manager_with_logs("anthropic-messages", turns)
        manager.session(SID).force_min_layer = 1
        manager.session(SID).force_loaded = True
        out, _ = await compose(manager, "anthropic-messages", request("anthropic-messages", turns))
        return CODECS["anthropic-messages"].render(out)

    body = asyncio.run(run())
    assert count_markers(body) == 2
    assert "cache_control" in body["messages"][0]["content"][-1]
    assert "cache_control" in body["messages"][-1]["content"][-1]
    anthropic_well_formed(body)


def test_a_layer_that_fails_mid_composition_sends_the_request_unchanged():
    turns = coding_session(10, seed=4)

    class Broken(PromptLayer):
        name, priority, builtin = "broken", 450, True

        def compose(self, view, ctx):
            raise RuntimeError("boom")

    async def run():
        manager = await manager_with_logs("anthropic-messages", turns)
        manager.layers = sorted([*LAYERS, Broken()], key=lambda layer: layer.priority)
        manager.session(SID).force_min_layer = 2
        manager.session(SID).force_loaded = True
        view = request("anthropic-messages", turns)
        original = [m.raw for m in view.messages]
        out, _ = await compose(manager, "anthropic-messages", view)
        return original, out, manager

    original, out, manager = asyncio.run(run())
    assert [m.raw for m in out.messages] == original and not out.modified
    assert manager.counts["layer_errors"] == 1


def test_an_async_third_party_layer_runs_in_priority_order():
    turns = coding_session(4, seed=4)
    seen = []

    class Async(PromptLayer):
        name, priority = "async-note", 650

        async def compose(self, view, ctx):
            seen.append(ctx.composition.layer)
            return view

    async def run():
        manager = await manager_with_logs("openai-chat", turns)
        manager.layers = sorted([*LAYERS, Async()], key=lambda layer: layer.priority)
        return await compose(manager, "openai-chat", request("openai-chat", turns))

    _out, plan = asyncio.run(run())
    assert seen == [0] and plan.layer == 0


def test_gateway_breakpoints_take_the_one_hour_ttl_when_a_later_client_marker_has_it():
    turns = coding_session(12, seed=8)

    async def run():
        manager = await manager_with_logs("anthropic-messages", turns)
        manager.session(SID).force_min_layer = 1
        manager.session(SID).force_loaded = True
        view = request("anthropic-messages", turns)
        view.raw["messages"][-1]["content"][-1]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
        view = CODECS["anthropic-messages"].parse(view.raw, json.dumps(view.raw).encode())
        out, _ = await compose(manager, "anthropic-messages", view)
        return CODECS["anthropic-messages"].render(out)

    body = asyncio.run(run())
    ttls = [
        block["cache_control"].get("ttl", "5m")
        for msg in body["messages"]
        for block in (msg["content"] if isinstance(msg["content"], list) else [])
        if "cache_control" in block
    ]
    assert ttls == ["1h", "1h"]  # the prefix's, then the client's: never 5m before 1h


TOOLS = {
    "openai-chat": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
    "openai-responses": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
}


def agent_request(api, turns):
    """A request of the agent's own loop: it offers tools (knowledge goes only there)."""
    view = request(api, turns)
    if api in TOOLS:
        raw = {**view.raw, "tools": TOOLS[api]}
        view = CODECS[api].parse(raw, json.dumps(raw).encode())
    return view


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize("api", sorted(CODECS))
def test_knowledge_blocks_are_pinned_and_changes_arrive_as_deltas(api, layer):
    from lore_core.knowledge.book import KnowledgeBook
    from lore_core.knowledge.inject import KnowledgeInjector

    turns = coding_session(14, seed=6)

    async def run():
        manager = await manager_with_logs(api, turns)
        book = KnowledgeBook(manager.store)
        manager.knowledge = KnowledgeInjector(book, LoreConfig().knowledge, manager.counter.text)
        pref = await book.create(
            project="/project",
            category="preference",
            title="Test runner",
            content="Run tests with pytest -q.",
        )
        if layer:
            manager.session(SID).force_min_layer = layer
            manager.session(SID).force_loaded = True
        else:
            manager.budget.max_layer0_tokens = 1_000_000  # no cost cap: stays at layer 0
        bodies = []
        for n in (10, 11, 12, 13):
            if n == 12:  # knowledge changes mid-session
                await book.update(pref.version.logical_id, content="Run tests with tox -q.")
            out, plan = await compose(manager, api, agent_request(api, turns[:n]))
            assert plan.layer == layer
            bodies.append(CODECS[api].render(out))
        return bodies

    bodies = asyncio.run(run())
    for body in bodies:
        assert json.dumps(body).count("Run tests with pytest -q.") == 1  # the frozen baseline
    assert all("tox -q" not in json.dumps(b) for b in bodies[:2])
    # The change arrives once, as a delta after the last message of the turn it appeared in,
    # and stays at that place: each request extends the previous one (cache prefix intact).
    for body in bodies[2:]:
        assert json.dumps(body).count("Run tests with tox -q.") == 1
    if layer == 0:
        for before, after in itertools.pairwise(bodies[2:]):
            old, new = wire_items(api, drop_markers(before)), wire_items(api, drop_markers(after))
            assert new[: len(old)] == old
    delta_items = [i for i, item in enumerate(wire_items(api, bodies[3])) if "tox -q" in json.dumps(item)]
    assert len(delta_items) == 1
    if api == "anthropic-messages":
        block = bodies[0]["system"][-1]
        assert block["text"].startswith("<lore-knowledge>")
        assert block["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
        assert all(drop_markers(b["system"]) == drop_markers(bodies[0]["system"]) for b in bodies)
        markers = sum(
            1
            for item in bodies[3]["messages"]
            for part in (item["content"] if isinstance(item["content"], list) else [])
            if "cache_control" in part
        ) + sum(1 for part in bodies[3]["system"] if "cache_control" in part)
        assert markers <= MAX_BREAKPOINTS
    elif api == "openai-responses":
        assert bodies[0]["instructions"].startswith("You are a coding agent.\n\n<lore-knowledge>")
        assert all(b["instructions"] == bodies[0]["instructions"] for b in bodies)
    else:
        assert bodies[0]["messages"][1]["role"] == "system"
        assert "<lore-knowledge>" in bodies[0]["messages"][1]["content"]


def test_knowledge_takes_the_one_hour_breakpoint_within_four_when_the_client_uses_three():
    from lore_core.knowledge.book import KnowledgeBook
    from lore_core.knowledge.inject import KnowledgeInjector

    turns = coding_session(12, seed=9)

    async def run():
        manager = await manager_with_logs("anthropic-messages", turns)
        manager.budget.max_layer0_tokens = 1_000_000
        book = KnowledgeBook(manager.store)
        manager.knowledge = KnowledgeInjector(book, LoreConfig().knowledge, manager.counter.text)
        await book.create(project="/project", category="preference", title="Style", content="Type hints.")
        view = request("anthropic-messages", turns[:10], markers=True)  # system, tools, 2 messages
        out, plan = await compose(manager, "anthropic-messages", view)
        return CODECS["anthropic-messages"].render(out), plan

    body, plan = asyncio.run(run())
    assert plan.layer == 0 and plan.ltm_baseline
    markers = [
        part["cache_control"]
        for part in [*body["system"], *body["tools"]]
        + [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]]
        if "cache_control" in part
    ]
    assert len(markers) == MAX_BREAKPOINTS
    knowledge = next(b for b in body["system"] if b["text"].startswith("<lore-knowledge>"))
    assert knowledge["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    # The client's newest message marker stays (the most useful one), and every 1-hour
    # breakpoint comes before every 5-minute one (Anthropic's rule).
    assert "cache_control" in body["messages"][-2]["content"][-1]
    ttls = [m.get("ttl", "5m") for m in markers]
    assert ttls == sorted(ttls, key=lambda t: t != "1h") and ttls.count("1h") >= 2


def test_knowledge_is_left_out_of_a_request_it_would_crowd_on_a_small_window():
    from lore_core.knowledge.book import KnowledgeBook
    from lore_core.knowledge.inject import KnowledgeInjector

    turns = coding_session(6, seed=3)

    async def run():
        manager = await manager_with_logs("anthropic-messages", turns)
        book = KnowledgeBook(manager.store)
        manager.knowledge = KnowledgeInjector(book, LoreConfig().knowledge, manager.counter.text)
        for n in range(40):
            await book.create(
                project="/project",
                category="preference",
                title=f"Preference {n}",
                content=f"Always do thing number {n} the long and careful way, with every check. " * 3,
            )
        raw = {**request("anthropic-messages", turns).raw, "model": "tiny-model"}
        view = CODECS["anthropic-messages"].parse(raw, json.dumps(raw).encode())
        manager.prices = PriceTable.from_config(
            LoreConfig(models={"tiny-model": ModelConfig(context_window=8_000, max_input_tokens=8_000)})
        )
        out, plan = await compose(manager, "anthropic-messages", view)
        return out, plan, manager

    out, plan, manager = asyncio.run(run())
    assert not plan.ltm_baseline and not plan.ltm_context
    assert manager.counts["knowledge_skipped"] == 1
    assert "<lore-knowledge>" not in json.dumps(CODECS["anthropic-messages"].render(out))


def test_a_project_without_knowledge_costs_no_store_read_per_session():
    from lore_core.knowledge.book import KnowledgeBook
    from lore_core.knowledge.inject import STATE_KEY, KnowledgeInjector

    turns = coding_session(4, seed=2)

    async def run():
        manager = await manager_with_logs("anthropic-messages", turns)
        book = KnowledgeBook(manager.store)
        manager.knowledge = KnowledgeInjector(book, LoreConfig().knowledge, manager.counter.text)
        reads = []
        original = manager.store.get_state

        async def counted(session_id, key, default=None):
            reads.append(key)
            return await original(session_id, key, default)

        manager.store.get_state = counted
        out, plan = await compose(manager, "anthropic-messages", request("anthropic-messages", turns))
        state = await manager.store.session_state(SID)
        return out, plan, reads, state

    _out, plan, reads, state = asyncio.run(run())
    assert STATE_KEY not in reads and STATE_KEY not in state
    assert not plan.ltm_baseline and not plan.deltas


def test_a_store_without_any_knowledge_is_read_once_for_all_projects():
    """Every session of a load test has its own project: with no knowledge in the whole
    store, none of them costs a read; once an entry exists, a session already running gets
    it as a delta (its frozen blocks stay empty), a new session in its blocks."""
    from lore_core.knowledge.book import KnowledgeBook
    from lore_core.knowledge.inject import KnowledgeInjector

    async def run():
        store = MemoryStore()
        await store.open()
        book = KnowledgeBook(store)
        injector = KnowledgeInjector(book, LoreConfig().knowledge, len)
        reads = []
        original = store.current_knowledge

        async def counted(project=None, **kw):
            reads.append(project)
            return await original(project, **kw)

        store.current_knowledge = counted

        async def ask(session, project, ids):
            known = injector.cached(session, project, message_ids=ids, thread="main")
            if known is not None:
                return known
            return await injector.for_request(
                session, project, opening_text="fix the parser", message_ids=ids, thread="main", main=True
            )

        for n in range(50):
            assert not (await ask(f"s{n}", f"/p{n}", ["m1"])).baseline
        assert reads == [None]  # one look at the whole store
        await book.create(project="/p7", category="preference", title="Runner", content="Use pytest -q.")
        running = await ask("s7", "/p7", ["m1", "m2"])
        fresh = await ask("new", "/p7", ["m1"])
        other = await ask("s8", "/p8", ["m1", "m2"])
        return running, fresh, other

    running, fresh, other = asyncio.run(run())
    assert not running.baseline and "Use pytest -q." in running.deltas[0][1].blocks[0].text
    assert "Use pytest -q." in fresh.baseline and not fresh.deltas
    assert not other.baseline and not other.deltas


def test_a_store_slower_than_the_request_path_still_gets_the_session_its_knowledge(monkeypatch):
    """The request path waits STORE_TIMEOUT_SECONDS for a session's knowledge, then goes
    without (fail open). The read goes on in the background: the session's next request
    finds the knowledge cached instead of starting the same slow read and missing it again."""
    from lore_core.context import manager as M
    from lore_core.knowledge.book import KnowledgeBook
    from lore_core.knowledge.inject import KnowledgeInjector

    monkeypatch.setattr(M, "STORE_TIMEOUT_SECONDS", 0.05)
    turns = coding_session(12, seed=3)
    api = "anthropic-messages"

    async def run():
        manager = await manager_with_logs(api, turns)
        manager.budget.max_layer0_tokens = 1_000_000
        book = KnowledgeBook(manager.store)
        await book.create(project="/project", category="preference", title="Runner", content="Use pytest -q.")
        manager.knowledge = KnowledgeInjector(book, LoreConfig().knowledge, manager.counter.text)
        reads = []
        original = manager.store.current_knowledge

        async def slow(project=None, **kw):
            reads.append(project)
            await asyncio.sleep(0.2)  # four times what the request path waits
            return await original(project, **kw)

        manager.store.current_knowledge = slow
        plans = []
        for n in (10, 11, 12):
            _out, plan = await compose(manager, api, agent_request(api, turns[:n]))
            plans.append(plan)
            await asyncio.sleep(0.5)  # the client's think time: the read finishes meanwhile
        return manager, plans, reads

    manager, plans, reads = asyncio.run(run())
    assert not plans[0].ltm_baseline  # the first request did not wait for the slow store
    assert all("Use pytest -q." in p.ltm_baseline for p in plans[1:])
    assert reads == [None, "/project"]  # one read, finished in the background
    assert manager.counts["store_timeouts"] == 1
