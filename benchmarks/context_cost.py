"""What the gradient context manager saves: a long coding session replayed through three
prompt strategies against a simulated provider cache, side by side in one run.

The session is generated deterministically (:mod:`lore_core.context.simulate`: prompts, file
reads, test runs with failures, greps, diffs, edits; harness reminders), in the shape Claude
Code sends to the Anthropic Messages API, with a ~3.6K-token system prompt and 24 tool
definitions (~18K tokens, as large as Claude Code's own). Every model call of the session
(after the user's prompt and after each tool result) is one request, replayed in order
through:

(a) **raw passthrough**: the history as the client sends it. Past the model's window the
    API would refuse it, so the oldest turns are dropped until it fits (what a client does
    that neither compacts nor manages its context);
(b) **compaction**: like harnesses do, when the prompt passes 80% of the window an extra
    call summarises the conversation (reading the whole prompt, writing a 3K-token
    summary), and the history restarts from that summary;
(c) **Lore**: the real :class:`~lore_core.context.manager.ContextManager` and prompt layers,
    with a store that gets distillations as the real scheduler makes them (a gen-0 log of the
    extractive observer each time 16K tokens are undistilled; past 20 logs, all but the
    newest 5 consolidated into a gen-1 meta-distillation, its text simulated by clipping:
    no LLM runs here). Usage from the simulated cache is fed back, so calibration, busts and
    the cost rules act as in a gateway.

The provider cache: a request reads from the cache the part of its prompt whose bytes match
the previous request's (cache breakpoints removed before comparing), and writes the rest.
Prices are Sonnet's (input $3, output $15, cache read $0.30, cache write $3.75 per Mtok);
tokens are the engine's local counts. Output tokens are the same for every strategy.

Printed per strategy: total cost, cache-read share of input tokens, mean input tokens per
request, and (Lore) the time of each composition, p50/p99. Run by hand::

    python benchmarks/context_cost.py                 # 500 user turns, ~1,800 requests
    python benchmarks/context_cost.py --turns 150     # a shorter session, ~15 s
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from lore_core.builtin.context_layers import LAYERS
from lore_core.builtin.memory_store import MemoryStore
from lore_core.codecs.anthropic import AnthropicMessagesCodec
from lore_core.config import LoreConfig
from lore_core.context import compose as C
from lore_core.context.manager import ContextManager
from lore_core.context.pricing import ModelInfo, PriceTable
from lore_core.context.simulate import Turn, coding_session, requests
from lore_core.context.tokens import TokenCounter
from lore_core.distill.extractive import extractive_observe
from lore_core.distill.inputs import DistillInput
from lore_core.distill.observer import observer_prompt
from lore_core.distill.prompts import load_prompt
from lore_core.distill.render import render_segment, tool_names_of
from lore_core.interfaces import CompositionContext
from lore_core.model import AssistantMessage, Exchange, RequestView, Usage
from lore_core.store import StoredDistillation, distillation_id

MODEL = "claude-sonnet-4-5"
SESSION = "bench-session"
MARKER = ', "cache_control": {"type": "ephemeral"}'
codec = AnthropicMessagesCodec()


def system_prompt() -> str:
    rules = [
        f"- Rule {i}: prefer small, reviewable changes; run the tests after each edit; explain the root "
        f"cause before fixing; never commit secrets; keep the style of the surrounding code ({i})."
        for i in range(90)
    ]
    return "You are a coding agent working in the user's repository.\n" + "\n".join(rules)


#: Sized like Claude Code 2.1's (captured: 24-28 tools, 16-21K tokens of definitions, before a
#: 1.6-6K-token system prompt): ~20K tokens that stay cached whatever the layer.
TOOL_NAMES = ("Read", "Bash", "Grep", "Edit", "Write", "Glob", "Task", "TodoWrite", "WebFetch", "WebSearch")
TOOLS = [
    {
        "name": name,
        "description": f"{name}: " + "use it to work on files and commands in the repository. " * 60,
        "input_schema": {"type": "object", "properties": {"arg": {"type": "string"}}},
    }
    for name in (*TOOL_NAMES, *(f"mcp__tool_{i}" for i in range(14)))
]


def make_view(messages: list[dict[str, Any]]) -> RequestView:
    raw = {
        "model": MODEL,
        "max_tokens": 8192,
        "system": [{"type": "text", "text": system_prompt(), "cache_control": {"type": "ephemeral"}}],
        "tools": TOOLS,
        "messages": messages,
        "stream": True,
    }
    return codec.parse(raw, b"")


def wire_bytes(view: RequestView) -> bytes:
    """The request as the provider sees it, breakpoints removed (they do not change what is
    cached)."""
    body = codec.render(view) if view.modified else view.raw
    return json.dumps(body, ensure_ascii=False).replace(MARKER, "").encode()


def common_prefix(a: bytes, b: bytes) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # binary search on memcmp-speed slice comparisons
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class SimulatedCache:
    """Prefix-matching provider cache: one entry, the previous request's prompt."""

    def __init__(self) -> None:
        self.previous = b""

    def charge(self, body: bytes, tokens: int) -> tuple[int, int]:
        """(cache-read tokens, cache-write tokens) of one request."""
        shared = common_prefix(self.previous, body)
        self.previous = body
        read = round(tokens * shared / len(body)) if body else 0
        return read, tokens - read


class Ledger:
    def __init__(self, name: str, model: ModelInfo) -> None:
        self.name = name
        self.model = model
        self.cost = 0.0
        self.read = 0
        self.write = 0
        self.uncached = 0
        self.requests = 0
        self.extra_calls = 0
        self.compose_ms: list[float] = []
        self.layers: dict[int, int] = {}
        #: Background LLM calls (Lore's distillation), already in ``cost``.
        self.worker_cost = 0.0
        self.worker_calls = 0

    def add(self, read: int, write: int, output: int, uncached: int = 0) -> Usage:
        usage = Usage(
            input_tokens=uncached, output_tokens=output, cache_read_tokens=read, cache_write_tokens=write
        )
        self.cost += self.model.cost(usage)
        self.read += read
        self.write += write
        self.uncached += uncached
        self.requests += 1
        return usage

    def add_worker(self, calls: int, input_tokens: int, output_tokens: int) -> None:
        """Worker calls at the session model's prices (the default worker), uncached."""
        cost = self.model.cost(Usage(input_tokens=input_tokens, output_tokens=output_tokens))
        self.cost += cost
        self.worker_cost += cost
        self.worker_calls += calls

    @property
    def input_tokens(self) -> int:
        return self.read + self.write + self.uncached


def output_tokens(turn_index: int, call_index: int, turns: Sequence[Turn]) -> int:
    """The answer to a request: a tool call, or the turn's final text."""
    turn = turns[turn_index]
    if call_index < len(turn.steps):
        return 60
    return max(len(turn.answer) // 4, 20)


def request_plan(turns: Sequence[Turn]) -> list[tuple[int, int, list[dict[str, Any]]]]:
    """(turn index, call index within the turn, history) of every request, in order."""
    out = []
    histories = requests(list(turns))
    for t, turn in enumerate(turns):
        for call in range(len(turn.steps) + 1):
            out.append((t, call, next(histories)))
    return out


# ---------------------------------------------------------------------------------------------
# (a) raw passthrough
# ---------------------------------------------------------------------------------------------


def fits_window(view: RequestView, counter: TokenCounter, usable: int) -> bool:
    return counter.request(view) <= usable


def drop_oldest(messages: list[dict[str, Any]], start: int) -> int:
    """The next turn start after ``start`` (a user message without tool results)."""
    for i in range(start + 1, len(messages)):
        msg = messages[i]
        content = msg["content"]
        if msg["role"] == "user" and not any(b.get("type") == "tool_result" for b in content):
            return i
    return start


def run_raw(plan, turns, model: ModelInfo, counter: TokenCounter, usable: int) -> Ledger:
    ledger = Ledger("raw passthrough", model)
    cache = SimulatedCache()
    start = 0
    for t, call, history in plan:
        view = make_view(history[start:])
        while not fits_window(view, counter, usable) and drop_oldest(history, start) != start:
            start = drop_oldest(history, start)
            view = make_view(history[start:])
        tokens = counter.request(view)
        read, write = cache.charge(wire_bytes(view), tokens)
        ledger.add(read, write, output_tokens(t, call, turns))
    return ledger


# ---------------------------------------------------------------------------------------------
# (b) compaction
# ---------------------------------------------------------------------------------------------

SUMMARY_TOKENS = 3_000


def summary_of(turns: Sequence[Turn], upto: int) -> str:
    words = " ".join(turn.answer for turn in turns[:upto])
    return (
        "This session is being continued from a previous conversation. Summary:\n"
        + words[-SUMMARY_TOKENS * 4 :]
    )


def run_compaction(plan, turns, model: ModelInfo, counter: TokenCounter, window: int) -> Ledger:
    ledger = Ledger("compaction at 80%", model)
    cache = SimulatedCache()
    start = 0
    summary: str | None = None
    for t, call, history in plan:
        prefix = [{"role": "user", "content": [{"type": "text", "text": summary}]}] if summary else []
        if prefix:
            prefix.append({"role": "assistant", "content": [{"type": "text", "text": "Understood."}]})
        view = make_view(prefix + history[start:])
        tokens = counter.request(view)
        if tokens > 0.8 * window:
            # The harness's own summarising call: reads the prompt, writes the summary ...
            read, write = cache.charge(wire_bytes(view), tokens)
            ledger.add(read, write, SUMMARY_TOKENS)
            ledger.extra_calls += 1
            # ... and the conversation restarts from it, the current turn kept.
            turn_start = max(i for i, m in enumerate(history) if _turn_start(m))
            start = turn_start
            summary = summary_of(turns, t)
            prefix = [
                {"role": "user", "content": [{"type": "text", "text": summary}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Understood."}]},
            ]
            view = make_view(prefix + history[start:])
            tokens = counter.request(view)
        read, write = cache.charge(wire_bytes(view), tokens)
        ledger.add(read, write, output_tokens(t, call, turns))
    return ledger


def _turn_start(msg: dict[str, Any]) -> bool:
    return msg["role"] == "user" and not any(b.get("type") == "tool_result" for b in msg["content"])


# ---------------------------------------------------------------------------------------------
# (c) Lore
# ---------------------------------------------------------------------------------------------

SEGMENT_TOKENS = 16_000
META_THRESHOLD = 20
KEEP_RECENT = 5
META_CHARS = 24_000


class SimulatedDistiller:
    """Writes distillations the way the scheduler does (segment cap, reflector threshold),
    with the extractive observer; the reflector's output is simulated by clipping.

    What the real LLM observer and reflector would cost is counted: each call's input is the
    prompt they would send (system prompt, previous observations, the rendered segment or
    the logs), its output the text written here."""

    def __init__(self, store: MemoryStore, counter: TokenCounter) -> None:
        self.store = store
        self.counter = counter
        self.covered: set[str] = set()
        self.version = 0
        self.clock = 1_790_000_000.0
        self.memo = C.Memo()
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0

    def charge(self, system: str, prompt: str, output: str) -> None:
        self.calls += 1
        self.input_tokens += self.counter.text(system) + self.counter.text(prompt)
        self.output_tokens += self.counter.text(output)

    async def after(self, view: RequestView) -> None:
        an = C.analyse(view, SESSION, self.counter, self.memo)
        # Completed turns only (the scheduler waits for idle or a full segment).
        end = an.current_turn
        todo = [i for i in range(an.head, end) if an.ids[i] is not None and an.ids[i] not in self.covered]
        if sum(an.tokens[i] for i in todo) < SEGMENT_TOKENS:
            return
        self.clock += 600
        inputs = [
            DistillInput(an.ids[i], an.messages[i].role, self.clock, list(an.messages[i].blocks))  # type: ignore[arg-type]
            for i in todo
        ]
        live = [d for d in await self.store.list_distillations(SESSION, include_archived=False)]
        previous = "\n".join(d.text for d in live[-2:])
        text = extractive_observe(inputs, previous)
        rendered = render_segment(inputs, tool_names=tool_names_of(inputs))
        self.charge(load_prompt("observer"), observer_prompt(rendered, previous, 0, 0, len(inputs)), text)
        ids = list(dict.fromkeys(i.id for i in inputs))
        row = StoredDistillation(
            id=distillation_id(SESSION, 0, ids),
            session_id=SESSION,
            generation=0,
            text=text,
            source_ids=ids,
            created_at=self.clock,
            start=self.clock,
            end=self.clock,
        )
        await self.store.write_distillation(row)
        self.covered.update(ids)
        self.version += 1
        gen0 = [
            d
            for d in await self.store.list_distillations(SESSION, include_archived=False)
            if d.generation == 0
        ]
        if len(gen0) >= META_THRESHOLD:
            old = gen0[: len(gen0) - KEEP_RECENT]
            metas = [d for d in live if d.generation >= 1]
            sources = [d.id for d in old] + [m.id for m in metas[-1:]]
            joined = "\n".join([*(m.text for m in metas[-1:]), *(d.text for d in old)])
            self.charge(load_prompt("reflector"), joined, joined[-META_CHARS:])
            meta = StoredDistillation(
                id=distillation_id(SESSION, 1, sources),
                session_id=SESSION,
                generation=1,
                text="## Current state\n" + joined[-META_CHARS:],
                source_ids=sources,
                created_at=self.clock,
                start=old[0].start,
                end=old[-1].end,
            )
            await self.store.write_distillation(meta, archive=sources)
            self.version += 1


async def run_lore(
    plan, turns, model: ModelInfo, counter: TokenCounter, config: LoreConfig, label: str
) -> Ledger:
    ledger = Ledger(label, model)
    cache = SimulatedCache()
    store = MemoryStore()
    await store.open()
    distiller = SimulatedDistiller(store, counter)
    manager = ContextManager(
        config, PriceTable(), store, LAYERS, counter=counter, distill_version=lambda: distiller.version
    )
    for t, call, history in plan:
        view = make_view(history)
        ctx = CompositionContext(SESSION, "/bench", "claude", codec)
        started = time.perf_counter()
        out = await manager.compose(view, ctx)
        ledger.compose_ms.append((time.perf_counter() - started) * 1000)
        layer = ctx.composition.layer if ctx.composition is not None else 0
        ledger.layers[layer] = ledger.layers.get(layer, 0) + 1
        tokens = counter.request(out)
        read, write = cache.charge(wire_bytes(out), tokens)
        usage = ledger.add(read, write, output_tokens(t, call, turns))
        manager.exchange_finished(
            Exchange(
                api=codec.api,
                path="/v1/messages",
                request=out,
                harness="claude",
                session_id=SESSION,
                project="/bench",
                upstream="simulated",
                status=200,
                response=AssistantMessage(usage=usage, model=MODEL, complete=True),
            )
        )
        await distiller.after(view)
    ledger.extra_calls = manager.session_status(SESSION)["recompositions"]
    ledger.add_worker(distiller.calls, distiller.input_tokens, distiller.output_tokens)
    return ledger


# ---------------------------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=500, help="user turns (each 0-6 tool calls)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    turns = coding_session(args.turns, seed=args.seed)
    plan = request_plan(turns)
    # The replayed histories are the benchmark's input, not state a gateway holds: keep the
    # garbage collector from rescanning them during the timed compositions.
    gc.collect()
    gc.freeze()
    counter = TokenCounter()
    model = PriceTable().lookup(MODEL)
    window = model.max_input_tokens
    usable = int(window * 0.95)
    final = make_view(plan[-1][2])
    content = sum(counter.message(m) for m in final.messages)
    print(
        f"session: {len(turns)} user turns, {len(plan)} requests, {len(final.messages)} messages, "
        f"{content:,} tokens of conversation; model {MODEL} (window {window:,}), "
        f"${model.input}/${model.output}/${model.cache_read}/${model.cache_write} per Mtok "
        "(input/output/cache read/cache write)"
    )
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")

    ledgers = [
        run_raw(plan, turns, model, counter, usable),
        run_compaction(plan, turns, model, counter, window),
        asyncio.run(run_lore(plan, turns, model, counter, LoreConfig(), "Lore (defaults)")),
    ]
    # What the layer-0 cap buys: the same engine compressing only when the prompt no longer fits.
    uncapped = LoreConfig()
    uncapped.budget.max_layer0_tokens = 0
    ledgers.append(asyncio.run(run_lore(plan, turns, model, counter, uncapped, "Lore (no cap)")))

    raw = ledgers[0].cost
    print()
    header = (
        f"{'strategy':<20} {'cost $':>9} {'vs raw':>7} {'cache-read':>10} {'mean in/req':>11} "
        f"{'extra':>6} {'compose p50':>11} {'p99':>8}  layers"
    )
    print(header)
    print("-" * len(header))
    for ledger in ledgers:
        share = ledger.read / ledger.input_tokens if ledger.input_tokens else 0.0
        mean = ledger.input_tokens / ledger.requests
        p50 = f"{quantile(ledger.compose_ms, 0.5):.2f} ms" if ledger.compose_ms else "-"
        p99 = f"{quantile(ledger.compose_ms, 0.99):.2f} ms" if ledger.compose_ms else "-"
        layers = " ".join(f"{k}:{v}" for k, v in sorted(ledger.layers.items())) or "-"
        print(
            f"{ledger.name:<20} {ledger.cost:>9.2f} {ledger.cost / raw:>6.2f}x {share:>9.1%} {mean:>11,.0f} "
            f"{ledger.extra_calls:>6} {p50:>11} {p99:>8}  {layers}"
        )
    print()
    print("extra: summarising calls (compaction) or cache-busting re-compositions (Lore).")
    for ledger in ledgers[2:]:
        print(
            f"{ledger.name}: cost includes distillation, ${ledger.worker_cost:.2f} in {ledger.worker_calls} "
            "observer/reflector calls at the session model's prices."
        )
    compaction = ledgers[1].cost
    lore = ledgers[2]
    share = lore.read / lore.input_tokens if lore.input_tokens else 0.0
    checks = {
        "cost <= 1/3 of raw": lore.cost <= raw / 3,
        "below compaction": lore.cost < compaction,
        "cache-read share >= 90%": share >= 0.9,
        "composition p99 < 50 ms": bool(lore.compose_ms) and quantile(lore.compose_ms, 0.99) < 50,
    }
    print(f"{lore.name}: " + ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in checks.items()))
    print(
        f"Lore (defaults) costs {lore.cost / raw:.2f}x raw passthrough and {lore.cost / compaction:.0%} of "
        f"compaction; the cap saves {1 - lore.cost / ledgers[3].cost:.0%} against no cap."
    )
    if lore.compose_ms:
        mean_ms = statistics.fmean(lore.compose_ms)
        print(f"Lore compositions: mean {mean_ms:.2f} ms over {len(plan)} requests.")


if __name__ == "__main__":
    main()
