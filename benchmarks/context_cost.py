"""What the gradient context manager saves: a long coding session replayed through three
prompt strategies against a simulated provider cache, side by side in one run.

**Generated session** (the default). The session is generated deterministically
(:mod:`lore_core.testing.simulate`: prompts, file reads, test runs with failures, greps,
diffs, edits; harness reminders), in the shape Claude Code sends to the Anthropic Messages
API, with a ~3.6K-token system prompt and 24 tool definitions (~18K tokens, as large as
Claude Code's own). Every model call of the session (after the user's prompt and after each
tool result) is one request, replayed in order through:

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

**Real sessions** (``--data DIR``: a folder of real Claude Code and Codex transcripts with
``questions.jsonl`` and ``sessions/``; never part of this repository). Each session is
replayed as **one growing conversation**: its context windows joined and the client's own
compaction summaries dropped (Claude Code's ``isCompactSummary`` message, Codex's
``replacement_history``), because under Lore the client never compacts, and so that all
strategies answer the same turns with the same real answers (replaying per window would
hand every strategy the real client's compactions). Every model call is one request (the
history before an assistant turn; the turn is the answer, its tokens the output), timed by
the transcript. Claude Code sessions go to the Messages API with the system prompt and tools
above (the transcripts hold neither), Codex sessions to the Responses API with their own
instructions. The strategies:

(a) raw passthrough as above;
(b) compaction as the real clients do it: past 80% of the window a summarising call (the
    prompt read, 3K tokens written), then the conversation carries on from the summary
    alone plus the pending tool call and its result (Claude Code and Codex keep no raw
    messages);
(c) Lore twice, the scheduler's rules applied to the replay by :class:`ReplayDistiller`
    with the real observer: full 16K-token segments (rendered) after each exchange,
    everything when the context manager asks for an urgent distillation or the session
    goes idle (``distill.idleTimeoutSeconds`` between requests, ten times that while a tool
    runs); once with the **extractive observer** (no worker: no meta-distillation, the
    reflector has no fallback) and once with the **test worker** (:class:`TestWorker`, a
    deterministic LLM-observer stand-in that answers the real observer and reflector
    prompts with plausible compressed logs, ~1/14 of the segment it reads; its calls are
    charged at the session model's prices, uncached).

The provider cache: a request reads from the cache the part of its prompt whose bytes match
the previous request's (cache breakpoints removed before comparing), and writes the rest.
In a replay the entry also expires after ``--cache-ttl`` seconds without a request (default
300: Anthropic's default TTL; ``0`` never expires, as in the generated session). Prices are
the session model's (Sonnet: input $3, output $15, cache read $0.30, cache write $3.75 per
Mtok; GPT-5 for Codex); tokens are the engine's local counts. Output tokens are the same
for every strategy.

Printed per strategy: total cost, as a multiple of raw passthrough's and (replays) a share
of compaction's, cache-read share of input tokens, mean input tokens per request, and
(Lore) the time of each composition, p50/p99. Run by hand::

    python benchmarks/context_cost.py                 # 500 user turns, ~1,800 requests
    python benchmarks/context_cost.py --turns 150     # a shorter session, ~15 s
    python benchmarks/context_cost.py --data SESSIONS_DIR              # all, ~4 min
    python benchmarks/context_cost.py --data SESSIONS_DIR --sessions 2
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import gzip
import json
import os
import re
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from transcripts import CLAUDE, CODEX, CODEX_TOOLS, Item, Session, Window, load_sessions, model_calls
from transcripts import _claude_block as claude_block

from lore_core.builtin.context_layers import LAYERS
from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import LoreConfig
from lore_core.context import compose as C
from lore_core.context.manager import ContextManager
from lore_core.context.pricing import ModelInfo, PriceTable
from lore_core.context.tokens import TokenCounter
from lore_core.curation import DistillInput, ObservationInput
from lore_core.distill.extractive import extractive_observe
from lore_core.distill.observer import LLMObserver, observer_prompt
from lore_core.distill.prompts import load_prompt
from lore_core.distill.reflector import LLMReflector
from lore_core.distill.render import render_segment, tool_names_of
from lore_core.distill.scheduler import TOOL_WAIT_FACTOR, _previous_text, _row, policy_of
from lore_core.distill.segment import split_segments
from lore_core.interfaces import CompositionContext
from lore_core.knowledge.book import KnowledgeBook
from lore_core.knowledge.inject import KnowledgeInjector
from lore_core.model import AssistantMessage, Exchange, RequestView, Usage
from lore_core.storage.knowledge import CATEGORIES
from lore_core.storage.records import StoredDistillation, distillation_id
from lore_core.testing.simulate import Turn, coding_session, requests
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec
from lore_core.worker.client import WorkerResult

MODEL = "claude-sonnet-4-5"
SESSION = "bench-session"
#: A cache breakpoint as rendered (either TTL): the provider's cache ignores them.
MARKER = re.compile(r', "cache_control": \{"type": "ephemeral"(?:, "ttl": "(?:5m|1h)")?\}')
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


def wire_bytes(view: RequestView, codec: Any = codec) -> bytes:
    """The request as the provider sees it, breakpoints removed (they do not change what is
    cached)."""
    body = codec.render(view) if view.modified else view.raw
    return MARKER.sub("", json.dumps(body, ensure_ascii=False)).encode()


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
    """Prefix-matching provider cache: one entry, the previous request's prompt. With a
    ``ttl`` (seconds) the entry expires when no request reads it for that long (replays
    have the transcripts' times; Anthropic's default cache lives 5 minutes)."""

    def __init__(self, ttl: float = 0.0) -> None:
        self.previous = b""
        self.ttl = ttl
        self.last = 0.0
        self.expired = 0

    def charge(self, body: bytes, tokens: int, now: float = 0.0) -> tuple[int, int]:
        """(cache-read tokens, cache-write tokens) of one request."""
        if self.ttl and self.previous and now - self.last > self.ttl:
            self.previous = b""
            self.expired += 1
        self.last = now
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


#: Knowledge of the --knowledge runs: generated entries of a project like the session's.
KNOWLEDGE_TOPICS = (
    "checkout", "payments", "orders", "inventory", "auth", "search", "billing", "emails",
    "migrations", "caching", "logging", "metrics", "queues", "uploads", "reports",
)  # fmt: skip
#: A knowledge change (an edit, or a new entry) every this many requests.
KNOWLEDGE_CHANGE_EVERY = 150


async def seed_knowledge(store: MemoryStore, project: str, entries: int) -> KnowledgeBook:
    """``entries`` generated entries in every category (a fifth of them preferences)."""
    book = KnowledgeBook(store)
    for n in range(entries):
        topic = KNOWLEDGE_TOPICS[n % len(KNOWLEDGE_TOPICS)]
        category = CATEGORIES[n % len(CATEGORIES)]
        await book.create(
            project=project,
            category=category,
            title=f"{topic.title()} {category} {n}",
            content=(
                f"In src/{topic}/service.py the {topic} module keeps its state in the {topic}_v{n} "
                f"table; run `pytest tests/{topic} -q` after changing it, and keep the retry policy "
                f"of {n % 5 + 2} attempts with exponential backoff. Agreed in review #{100 + n}."
            ),
        )
    return book


async def change_knowledge(book: KnowledgeBook, project: str, n: int) -> None:
    """The n-th mid-session change: an entry edited, or a new one (alternately)."""
    entries = await book.entries(project)
    if n % 2 and entries:
        target = entries[n % len(entries)]
        await book.update(target.logical_id, content=target.content + f" Revised in change {n}.")
    else:
        await book.create(
            project=project,
            category="gotcha",
            title=f"Gotcha found mid-session {n}",
            content=f"The fixture in tests/conftest.py leaks a temp dir per test (change {n}).",
        )


async def run_lore(
    plan,
    turns,
    model: ModelInfo,
    counter: TokenCounter,
    config: LoreConfig,
    label: str,
    knowledge: int = 0,
) -> Ledger:
    ledger = Ledger(label, model)
    cache = SimulatedCache()
    store = MemoryStore()
    await store.open()
    distiller = SimulatedDistiller(store, counter)
    manager = ContextManager(
        config, PriceTable(), store, LAYERS, counter=counter, distill_version=lambda: distiller.version
    )
    book = None
    if knowledge:
        book = await seed_knowledge(store, "/bench", knowledge)
        manager.knowledge = KnowledgeInjector(book, config.knowledge, counter.text)
    for index, (t, call, history) in enumerate(plan):
        if book is not None and index and index % KNOWLEDGE_CHANGE_EVERY == 0:
            await change_knowledge(book, "/bench", index // KNOWLEDGE_CHANGE_EVERY)
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
                composed=ctx,
                status=200,
                response=AssistantMessage(usage=usage, model=MODEL, complete=True),
            )
        )
        await distiller.after(view)
    ledger.extra_calls = manager.session_status(SESSION)["recompositions"]
    ledger.add_worker(distiller.calls, distiller.input_tokens, distiller.output_tokens)
    return ledger


# ---------------------------------------------------------------------------------------------
# Real sessions (--data)
# ---------------------------------------------------------------------------------------------

CODEX_MODEL = "gpt-5"
#: The harness's compaction summary, and how much of the assistant's text it is cut from.
REPLAY_SUMMARY_CHARS = SUMMARY_TOKENS * 4


@attrs.define
class Wire:
    """How one agent's requests look on the wire: Claude Code sends Anthropic Messages (with
    this benchmark's Claude-Code-sized system prompt and tools, which the transcripts do not
    hold), Codex the Responses API (with the session's own instructions)."""

    agent: str
    codec: Any
    model: str
    harness: str
    path: str
    instructions: str = ""

    def body(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        if self.agent == CLAUDE:
            return {
                "model": self.model,
                "max_tokens": 8192,
                "system": [{"type": "text", "text": system_prompt(), "cache_control": {"type": "ephemeral"}}],
                "tools": TOOLS,
                "messages": items,
                "stream": True,
            }
        return {
            "model": self.model,
            "instructions": self.instructions,
            "input": items,
            "tools": CODEX_TOOLS,
            "stream": True,
            "store": False,
        }

    def view(self, items: list[dict[str, Any]]) -> RequestView:
        return self.codec.parse(self.body(items), b"")

    def user_text(self, text: str) -> dict[str, Any]:
        if self.agent == CLAUDE:
            return {"role": "user", "content": [{"type": "text", "text": text}]}
        return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


@attrs.define
class Replay:
    """One real session as one growing conversation: its context windows concatenated, the
    client's own compaction summaries (Claude Code's ``isCompactSummary`` message, Codex's
    ``replacement_history``) dropped, so every strategy sees the same turns and none inherits
    the client's compactions."""

    session: Session
    wire: Wire
    items: list[Item]
    #: Epoch seconds of each item (its first transcript line).
    times: list[float]
    #: (history length, answer length) of every model call, request by request.
    calls: list[tuple[int, int]]

    def history(self, end: int) -> list[dict[str, Any]]:
        return [item.wire for item in self.items[:end]]


def _epoch(stamp: Any) -> float:
    if not isinstance(stamp, str) or not stamp:
        return 0.0
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _raw_lines(data: Path, session_id: str) -> dict[int, dict[str, Any]]:
    with gzip.open(data / "sessions" / f"{session_id}.jsonl.gz", "rt", encoding="utf-8") as f:
        return {n: json.loads(line) for n, line in enumerate(f, start=1) if line.strip()}


def _claude_items(lines: dict[int, dict[str, Any]]) -> list[Item]:
    """The session's messages as transcripts.py joins them (consecutive lines of one role
    are one API message), across compactions, without the compact summaries."""
    items: list[Item] = []
    for number, line in lines.items():
        if line.get("type") == "system" or line.get("isCompactSummary"):
            continue
        message = line.get("message") or {}
        role = message.get("role") or line.get("type")
        if role not in ("user", "assistant"):
            continue
        content = message.get("content")
        raw_blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        blocks = [b for b in (claude_block(x) for x in raw_blocks) if b is not None]
        if not blocks:
            continue
        if items and items[-1].role == role:
            items[-1].wire["content"].extend(blocks)
            items[-1].lines.append(number)
        else:
            items.append(Item(role, {"role": role, "content": blocks}, [number]))
    return items


def load_replay(data: Path, session: Session, every: int = 1) -> Replay:
    lines = _raw_lines(data, session.id)
    if session.agent == CLAUDE:
        items = _claude_items(lines)
        wire = Wire(CLAUDE, codec, MODEL, "claude", "/v1/messages")
    else:
        # Items a ``compacted`` line carries (its replacement history) are copies of earlier
        # user messages plus Codex's summary: the continuous conversation has the originals.
        compacted = {n for n, line in lines.items() if line.get("type") == "compacted"}
        items = [it for w in session.windows for it in w.items if not (set(it.lines) & compacted)]
        wire = Wire(
            CODEX, OpenAIResponsesCodec(), CODEX_MODEL, "codex", "/v1/responses", session.instructions
        )
    times = [_epoch(lines[it.lines[0]].get("timestamp")) for it in items]
    for i in range(1, len(times)):  # a line without a time takes its predecessor's
        times[i] = times[i] or times[i - 1]
    calls = [
        (len(call.history), len(call.answer))
        for call in model_calls(Window(items), every=every)
        if call.answer is not None and call.history
    ]
    return Replay(session, wire, items, times, calls)


def _turn_start_item(item: Item) -> bool:
    if item.role != "user":
        return False
    content = item.wire.get("content")
    return not (
        isinstance(content, list)
        and any(b.get("type") == "tool_result" for b in content if isinstance(b, dict))
    )


def answer_tokens(replay: Replay, end: int, length: int, counter: TokenCounter) -> int:
    """Output tokens of a model call: the assistant items the real model answered with."""
    view = replay.wire.view([it.wire for it in replay.items[end : end + length]])
    return max(sum(counter.message(m) for m in view.messages), 1)


def run_raw_replay(
    replay: Replay, model: ModelInfo, counter: TokenCounter, usable: int, ttl: float
) -> Ledger:
    """The history as the client sends it, the oldest turns dropped once it passes the window."""
    ledger = Ledger("raw passthrough", model)
    cache = SimulatedCache(ttl)
    starts = [i for i, it in enumerate(replay.items) if _turn_start_item(it)]
    start = 0
    for end, length in replay.calls:
        history = replay.history(end)
        view = replay.wire.view(history[start:])
        while counter.request(view) > usable:
            later = [s for s in starts if start < s < end]
            if not later:
                break
            start = later[0]
            view = replay.wire.view(history[start:])
        tokens = counter.request(view)
        read, write = cache.charge(wire_bytes(view, replay.wire.codec), tokens, replay.times[end - 1])
        ledger.add(read, write, answer_tokens(replay, end, length, counter))
    return ledger


def run_compaction_replay(
    replay: Replay, model: ModelInfo, counter: TokenCounter, window: int, ttl: float
) -> Ledger:
    """The harness's own compaction, as Claude Code and Codex do it: past 80% of the window an
    extra call reads the prompt and writes a 3K-token summary, and the conversation carries on
    from that summary alone (the real clients keep no raw messages), plus the pending tool
    call and its result, so the request stays valid."""
    ledger = Ledger("compaction at 80%", model)
    cache = SimulatedCache(ttl)
    start = 0
    prefix: list[dict[str, Any]] = []
    for end, length in replay.calls:
        history = replay.history(end)
        view = replay.wire.view(prefix + history[start:])
        tokens = counter.request(view)
        if tokens > 0.8 * window:
            read, write = cache.charge(wire_bytes(view, replay.wire.codec), tokens, replay.times[end - 1])
            ledger.add(read, write, SUMMARY_TOKENS)
            ledger.extra_calls += 1
            start = _restart_point(replay.items, end)
            said = [
                b.text
                for it in replay.items[:end]
                if it.role == "assistant"
                for m in replay.wire.view([it.wire]).messages
                for b in m.blocks
                if b.type == "text"
            ]
            summary = "This session is being continued from a previous conversation. Summary:\n"
            prefix = [replay.wire.user_text(summary + " ".join(said)[-REPLAY_SUMMARY_CHARS:])]
            view = replay.wire.view(prefix + history[start:])
            tokens = counter.request(view)
        read, write = cache.charge(wire_bytes(view, replay.wire.codec), tokens, replay.times[end - 1])
        ledger.add(read, write, answer_tokens(replay, end, length, counter))
    return ledger


def _restart_point(items: Sequence[Item], end: int) -> int:
    """Where a compacted conversation resumes: the latest turn start, or the start of the
    latest run of assistant items (a tool call with its result after it), before ``end``."""
    for i in range(end - 1, -1, -1):
        if _turn_start_item(items[i]) or (
            items[i].role == "assistant" and (i == 0 or items[i - 1].role != "assistant")
        ):
            return i
    return 0


# -- the test worker ----------------------------------------------------------------------------

#: The test worker's observation log is at most this many times shorter (in characters) than
#: the rendered segment it reads: ~1-1.5K tokens for a full 16K-token segment, about what an
#: LLM observer writes.
TEST_WORKER_RATIO = 14
_EVENT = re.compile(r"^\[(\d\d:\d\d):\d\d\] (\w+)(?: (->|<-) ([^\s:]+)(?: \(error\))?)?:? ?(.*)$")
_DATE = re.compile(r"^## \d{4}-\d\d-\d\d$")
_ERROR = re.compile(r"(?i)\b(error|failed|fail|panic|exception|traceback|denied|not found)\b")
_OBSERVATION = re.compile(r'<observation from="([^"]*)" to="([^"]*)">\n(.*?)\n</observation>', re.S)
_PATH = re.compile(
    r"(?<![\w/.-])(?:[\w.-]+/)+[\w.-]+\.\w{1,6}\b|\b[\w-]+\.(?:go|py|ts|js|md|json|yaml|yml|toml|sh)\b"
)


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def test_observation(prompt: str) -> str:
    """A plausible observation log of the ``<conversation_segment>`` in an observer prompt,
    at most 1/14 of the segment's length: one bullet per user message ("User asks: ..."), per
    tool error (its first error line), per run of calls of one tool (their inputs, merged)
    and per assistant text (its start), chosen in that order of priority until the budget is
    spent and written in the segment's order under its date headings."""
    match = re.search(r"<conversation_segment[^>]*>\n(.*)\n</conversation_segment>", prompt, re.S)
    segment = match.group(1) if match else ""
    budget = max(400, len(segment) // TEST_WORKER_RATIO)
    # (priority, order, text); a date heading has priority -1 (always kept).
    events: list[tuple[int, int, str]] = []
    lines = segment.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if _DATE.match(line):
            events.append((-1, len(events), line))
            continue
        event = _EVENT.match(line)
        if not event:
            continue
        clock, role, arrow, tool, rest = event.groups()
        body = [rest]
        while i < len(lines) and not _EVENT.match(lines[i]) and not _DATE.match(lines[i]):
            body.append(lines[i])
            i += 1
        if arrow == "->":
            last = events[-1] if events else None
            if (
                last is not None
                and last[0] == 2
                and last[2].startswith(f"- {clock[:2]}")
                and f" {tool}: " in last[2]
            ):
                events[-1] = (2, last[1], _one_line(last[2] + "; " + rest, 300))
            else:
                events.append((2, len(events), f"- {clock} {tool}: {_one_line(rest, 160)}"))
        elif arrow == "<-":
            errors = (
                [b for b in body if _ERROR.search(b)]
                if "(error)" in line or any(_ERROR.search(b) for b in body)
                else []
            )
            if errors:
                events.append((1, len(events), f"- {clock} {tool} error: {_one_line(errors[0], 200)}"))
        elif role == "user":
            events.append((0, len(events), f"- {clock} User asks: {_one_line(' '.join(body), 240)}"))
        elif role == "assistant":
            events.append((3, len(events), f"- {clock} {_one_line(' '.join(body), 160)}"))
    kept: list[tuple[int, int, str]] = []
    spent = 0
    for entry in sorted(events):
        if entry[0] >= 0 and spent + len(entry[2]) > budget:
            continue
        spent += len(entry[2]) + 1
        kept.append(entry)
    out = [text for _, _, text in sorted(kept, key=lambda e: e[1])]
    if not any(text.startswith("- ") for text in out):
        out.append("- nothing worth recording in this segment")
    return "\n".join(out)


def test_meta_distillation(prompt: str) -> str:
    """A plausible meta-distillation of the logs in a reflector prompt, in the four required
    sections: the newest log's last bullets (current state), the user's requests (key
    decisions), the files named (technical changes) and one line per log (timeline), the
    previous consolidation's sections carried forward, each section bounded."""
    previous = re.search(r"<previous_meta_distillation>\n(.*?)\n</previous_meta_distillation>", prompt, re.S)
    old = previous.group(1) if previous else ""

    def section(name: str) -> list[str]:
        found = re.search(rf"## {name}\n(.*?)(?:\n## |\Z)", old, re.S)
        return [line for line in found.group(1).splitlines() if line.startswith("- ")] if found else []

    observations = _OBSERVATION.findall(prompt)
    bullets = [line for _, _, text in observations for line in text.splitlines() if line.startswith("- ")]
    asks = section("Key decisions") + [b for b in bullets if "User asks:" in b]
    paths = list(dict.fromkeys(p for b in section("Technical changes") + bullets for p in _PATH.findall(b)))
    timeline = section("Timeline") + [
        f"- {start[:10]} {start[11:16]}-{end[11:16]}: "
        + _one_line(next((line[2:] for line in text.splitlines() if line.startswith("- ")), "(nothing)"), 140)
        for start, end, text in observations
    ]
    current = [b for b in observations[-1][2].splitlines() if b.startswith("- ")][-8:] if observations else []
    return "\n".join(
        [
            "## Current state",
            *(current or ["- (nothing recorded)"]),
            "",
            "## Key decisions",
            *(asks[-20:] or ["- (no requests recorded)"]),
            "",
            "## Technical changes",
            *(
                [f"- touched {p}" if not p.startswith("- ") else p for p in paths[-40:]]
                or ["- (no files recorded)"]
            ),
            "",
            "## Timeline",
            *(timeline[-40:] or ["- (no dated observations)"]),
        ]
    )


class TestWorker:
    """The LLM-observer stand-in of the replay: a deterministic worker answering the real
    :class:`~lore_core.distill.observer.Observer` and
    :class:`~lore_core.distill.reflector.Reflector` prompts with :func:`test_observation` and
    :func:`test_meta_distillation`. Its calls are counted so that the benchmark charges what
    the real worker (the session's own model) would cost."""

    def __init__(self, counter: TokenCounter, model: str) -> None:
        self.counter = counter
        self.model = model
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0

    async def complete(
        self,
        system: str,
        prompt: str,
        *,
        session_id: str | None = None,
        purpose: str = "worker",
        max_tokens: int | None = None,
    ) -> WorkerResult:
        text = test_meta_distillation(prompt) if purpose == "reflector" else test_observation(prompt)
        usage = Usage(
            input_tokens=self.counter.text(system) + self.counter.text(prompt),
            output_tokens=self.counter.text(text),
        )
        self.calls += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        return WorkerResult(
            text=text, usage=usage, model=self.model, api="test", provider="test", upstream="test"
        )


# -- the replay's distiller ---------------------------------------------------------------------


class ReplayDistiller:
    """The scheduler's rules on the replayed conversation, with the real observer (and, with
    a worker, the real reflector): after every exchange the full 16K-token segments of what
    is undistilled (measured rendered, as the scheduler does); everything, the tail too, when
    the context manager asks for an urgent distillation or when the session goes idle (no
    request for ``distill.idleTimeoutSeconds``, ten times that while a tool call awaits its
    result); past ``distill.metaThreshold`` logs, a meta-distillation of all but the newest
    ``distill.recentSegmentsToKeep`` (only with a worker: the reflector has no fallback)."""

    def __init__(
        self, store: MemoryStore, counter: TokenCounter, worker: TestWorker | None, config: LoreConfig
    ) -> None:
        self.store = store
        self.counter = counter
        self.config = config.distill
        self.policy = policy_of(config.distill)
        self.observer = LLMObserver(worker)  # type: ignore[arg-type]
        self.reflector = LLMReflector(worker) if worker is not None else None  # type: ignore[arg-type]
        self.memo = C.Memo()
        self.covered: set[str] = set()
        self.version = 0
        self.logs = 0
        self.source_tokens = 0
        self.rendered_tokens = 0
        self.log_tokens = 0

    async def after(self, view: RequestView, times: Sequence[float], everything: bool) -> None:
        an = C.analyse(view, SESSION, self.counter, self.memo)
        inputs: list[DistillInput] = []
        for i, (msg, ident) in enumerate(zip(an.messages, an.ids, strict=True)):
            if ident is None:
                continue
            if inputs and inputs[-1].id == ident:  # one stored message (consecutive assistant items)
                inputs[-1].blocks.extend(msg.blocks)
                continue
            inputs.append(DistillInput(ident, msg.role, times[i], list(msg.blocks)))
        todo = [m for m in inputs if m.id not in self.covered]
        if not todo:
            return
        live = await self.store.list_distillations(SESSION, include_archived=False)
        first = not any(d.generation == 0 for d in live)
        segments = split_segments(todo, self.policy, first=first)
        if not everything:
            segments = [s for s in segments if s.reason != "end"]
        if not segments:
            return
        names = tool_names_of(inputs)
        for segment in segments:
            dist = await self.observer.observe(
                segment.messages, _previous_text(live), session_id=SESSION, tool_names=names
            )
            row = _row(dist, SESSION, "/bench")
            await self.store.write_distillation(row)
            live.append(row)
            self.covered.update(segment.ids)
            self.version += 1
            self.logs += 1
            self.source_tokens += sum(
                an.tokens[i] for i, ident in enumerate(an.ids) if ident in set(segment.ids)
            )
            self.rendered_tokens += dist.provenance.input_tokens
            self.log_tokens += self.counter.text(dist.text)
        await self._reflect(live)

    async def _reflect(self, live: list[StoredDistillation]) -> None:
        gen0 = sorted((d for d in live if d.generation == 0), key=lambda d: (d.end, d.created_at, d.id))
        if self.reflector is None or len(gen0) < max(1, self.config.meta_threshold):
            return
        keep = max(0, self.config.recent_segments_to_keep)
        consolidate = gen0[: len(gen0) - keep] if keep else gen0
        metas = sorted((d for d in live if d.generation >= 1), key=lambda d: (d.created_at, d.id))
        previous = metas[-1] if metas else None
        observations = [ObservationInput(d.id, d.text, d.start, d.end, d.generation) for d in consolidate]
        dist = await self.reflector.reflect(
            observations, previous.text if previous else "", session_id=SESSION
        )
        sources = [d.id for d in consolidate] + ([previous.id] if previous else [])
        row = _row(dist, SESSION, "/bench", sources)
        await self.store.write_distillation(row, archive=sources)
        self.version += 1


async def run_lore_replay(
    replay: Replay,
    model: ModelInfo,
    counter: TokenCounter,
    config: LoreConfig,
    label: str,
    worker: TestWorker | None,
    ttl: float = 0.0,
    knowledge: int = 0,
) -> tuple[Ledger, ReplayDistiller]:
    ledger = Ledger(label, model)
    cache = SimulatedCache(ttl)
    store = MemoryStore()
    await store.open()
    distiller = ReplayDistiller(store, counter, worker, config)
    book = await seed_knowledge(store, replay.session.project, knowledge) if knowledge else None
    wire = replay.wire
    now = [replay.times[0] if replay.times else 0.0]
    urgent: list[str] = []

    async def distill_now(session_id: str) -> None:
        urgent.append(session_id)  # done after the exchange, before the next request

    manager = ContextManager(
        config,
        PriceTable(),
        store,
        LAYERS,
        counter=counter,
        distill_version=lambda: distiller.version,
        distill_now=distill_now,
        clock=lambda: now[0],
    )
    if book is not None:
        manager.knowledge = KnowledgeInjector(book, config.knowledge, counter.text, clock=lambda: now[0])
    idle = config.distill.idle_timeout_seconds
    for index, (end, length) in enumerate(replay.calls):
        if book is not None and index and index % KNOWLEDGE_CHANGE_EVERY == 0:
            await change_knowledge(book, replay.session.project, index // KNOWLEDGE_CHANGE_EVERY)
        now[0] = replay.times[end - 1]
        view = wire.view(replay.history(end))
        ctx = CompositionContext(SESSION, replay.session.project, wire.harness, wire.codec)
        started = time.perf_counter()
        out = await manager.compose(view, ctx)
        ledger.compose_ms.append((time.perf_counter() - started) * 1000)
        layer = ctx.composition.layer if ctx.composition is not None else 0
        ledger.layers[layer] = ledger.layers.get(layer, 0) + 1
        tokens = counter.request(out)
        read, write = cache.charge(wire_bytes(out, wire.codec), tokens, now[0])
        usage = ledger.add(read, write, answer_tokens(replay, end, length, counter))
        manager.exchange_finished(
            Exchange(
                api=wire.codec.api,
                path=wire.path,
                request=out,
                harness=wire.harness,
                session_id=SESSION,
                project=replay.session.project,
                upstream="simulated",
                composed=ctx,
                status=200,
                response=AssistantMessage(usage=usage, model=wire.model, complete=True),
            )
        )
        await asyncio.sleep(0)  # let the manager's urgent-distillation task run
        # Idle: the gap until the next request (the session's answer awaits a tool result
        # when the next request answers a tool call).
        nxt = replay.calls[index + 1][0] if index + 1 < len(replay.calls) else None
        gap = (replay.times[nxt - 1] - now[0]) if nxt is not None else float("inf")
        awaits_tool = nxt is not None and not _turn_start_item(replay.items[nxt - 1])
        went_idle = gap >= idle * (TOOL_WAIT_FACTOR if awaits_tool else 1)
        # The store now holds the request and its answer: that is what the scheduler reads.
        stored = wire.view(replay.history(end + length))
        await distiller.after(stored, replay.times, everything=bool(urgent) or went_idle)
        urgent.clear()
    ledger.extra_calls = manager.session_status(SESSION)["recompositions"]
    if worker is not None:
        ledger.add_worker(worker.calls, worker.input_tokens, worker.output_tokens)
    return ledger, distiller


# ---------------------------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=500, help="user turns (each 0-6 tool calls)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data", help="a folder of real sessions (questions.jsonl, sessions/): replay those")
    parser.add_argument("--sessions", type=int, default=0, help="with --data: the first N sessions (0: all)")
    parser.add_argument("--session", action="append", help="with --data: only sessions whose id starts so")
    parser.add_argument("--agent", choices=("all", CLAUDE, CODEX), default="all", help="with --data")
    parser.add_argument(
        "--every", type=int, default=1, help="with --data: a request every N items (1: each call)"
    )
    parser.add_argument(
        "--knowledge",
        type=int,
        default=30,
        help="also run Lore with this many knowledge entries injected, one changing every "
        f"{KNOWLEDGE_CHANGE_EVERY} requests (0: not)",
    )
    parser.add_argument(
        "--cache-ttl",
        type=float,
        default=300.0,
        help="with --data: the cache entry expires after this many idle seconds",
    )
    args = parser.parse_args()
    if args.data:
        replay_main(args)
        return

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
    if args.knowledge:
        label = f"Lore (knowledge {args.knowledge})"
        ledgers.append(
            asyncio.run(run_lore(plan, turns, model, counter, LoreConfig(), label, knowledge=args.knowledge))
        )

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
    if args.knowledge:
        knowing_check(lore, ledgers[-1])


def knowing_check(without: Ledger, with_knowledge: Ledger) -> None:
    """Knowledge injected (and changing mid-session) against the same run without it."""

    def read_share(ledger: Ledger) -> float:
        return ledger.read / ledger.input_tokens if ledger.input_tokens else 0.0

    cost = with_knowledge.cost / without.cost
    shares = read_share(with_knowledge), read_share(without)
    print(
        f"{with_knowledge.name}: cost {cost:.3f}x the same run without knowledge "
        f"({'within' if abs(cost - 1) <= 0.05 else 'NOT within'} 5%); cache-read share "
        f"{shares[0]:.1%} against {shares[1]:.1%} "
        f"({'within' if abs(shares[0] - shares[1]) <= 0.05 else 'NOT within'} 5 points); "
        f"a change every {KNOWLEDGE_CHANGE_EVERY} requests."
    )


def _row_of(ledger: Ledger, raw: float, compaction: float | None) -> str:
    share = ledger.read / ledger.input_tokens if ledger.input_tokens else 0.0
    mean = ledger.input_tokens / ledger.requests if ledger.requests else 0.0
    p50 = f"{quantile(ledger.compose_ms, 0.5):.2f} ms" if ledger.compose_ms else "-"
    p99 = f"{quantile(ledger.compose_ms, 0.99):.2f} ms" if ledger.compose_ms else "-"
    layers = " ".join(f"{k}:{v}" for k, v in sorted(ledger.layers.items())) or "-"
    of_compaction = f"{ledger.cost / compaction:.0%}" if compaction else "-"
    return (
        f"{ledger.name:<26} {ledger.cost:>8.2f} {ledger.cost / raw:>6.2f}x {of_compaction:>6} {share:>9.1%} "
        f"{mean:>11,.0f} {ledger.extra_calls:>6} {p50:>11} {p99:>8}  {layers}"
    )


def short_id(session_id: str) -> str:
    """The first 8 hex digits of a session's UUID (Claude Code ids may start with a date)."""
    parts = session_id.split("-")
    return parts[3] if len(parts) > 5 and parts[0].isdigit() and len(parts[0]) == 4 else session_id[:8]


def replay_main(args: argparse.Namespace) -> None:
    data = Path(args.data)
    sessions = load_sessions(data)
    if args.agent != "all":
        sessions = [s for s in sessions if s.agent == args.agent]
    if args.session:
        sessions = [s for s in sessions if any(s.id.startswith(p) for p in args.session)]
    if args.sessions > 0:
        sessions = sessions[: args.sessions]
    counter = TokenCounter()
    ttl = f"cache entries expire after {args.cache_ttl:.0f} s idle" if args.cache_ttl else "no cache expiry"
    print(f"data: {data.resolve()} ({len(sessions)} sessions, replayed request by request; {ttl})")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    totals: dict[str, float] = {}
    met: dict[str, list[str]] = {}
    for session in sessions:
        replay = load_replay(data, session, every=args.every)
        # The replayed histories are the benchmark's input: keep the collector off them.
        gc.collect()
        gc.freeze()
        wire = replay.wire
        model = PriceTable().lookup(wire.model)
        window = model.max_input_tokens
        final = wire.view(replay.history(replay.calls[-1][0]))
        content = sum(counter.message(m) for m in final.messages)
        print()
        print(
            f"session {session.id} ({session.agent}, the client's {len(session.windows)} context windows "
            f"joined): {len(replay.calls)} requests, {len(replay.items)} messages, {content:,} tokens of "
            f"conversation; model {wire.model} (window {window:,}), ${model.input}/${model.output}/"
            f"${model.cache_read}/${model.cache_write} per Mtok"
        )
        raw = run_raw_replay(replay, model, counter, int(window * 0.95), args.cache_ttl)
        compaction = run_compaction_replay(replay, model, counter, window, args.cache_ttl)
        lores = []
        for label, worker in (
            ("Lore (extractive observer)", None),
            ("Lore (test worker)", TestWorker(counter, wire.model)),
        ):
            ledger, distiller = asyncio.run(
                run_lore_replay(replay, model, counter, LoreConfig(), label, worker, args.cache_ttl)
            )
            lores.append((ledger, distiller))
        knowing = None
        if args.knowledge:
            knowing, _ = asyncio.run(
                run_lore_replay(
                    replay,
                    model,
                    counter,
                    LoreConfig(),
                    f"Lore (extr. + knowledge {args.knowledge})",
                    None,
                    args.cache_ttl,
                    knowledge=args.knowledge,
                )
            )
        header = (
            f"{'strategy':<26} {'cost $':>8} {'vs raw':>7} {'vs cmp':>6} {'cache-read':>10} "
            f"{'mean in/req':>11} {'extra':>6} {'compose p50':>11} {'p99':>8}  layers"
        )
        print(header)
        print("-" * len(header))
        print(_row_of(raw, raw.cost, compaction.cost))
        print(_row_of(compaction, raw.cost, compaction.cost))
        for ledger, _ in lores:
            print(_row_of(ledger, raw.cost, compaction.cost))
        if knowing is not None:
            print(_row_of(knowing, raw.cost, compaction.cost))
        for ledger, distiller in lores:
            share = ledger.read / ledger.input_tokens if ledger.input_tokens else 0.0
            checks = {
                "<= 1/3 of raw": ledger.cost <= raw.cost / 3,
                "below compaction": ledger.cost < compaction.cost,
                "cache reads >= 90%": share >= 0.9,
            }
            if all(checks.values()):
                met.setdefault(ledger.name, []).append(short_id(session.id))
            ratio = distiller.source_tokens / distiller.log_tokens if distiller.log_tokens else 0.0
            rendered = distiller.rendered_tokens / distiller.log_tokens if distiller.log_tokens else 0.0
            print(
                f"{ledger.name}: {', '.join(f'{k} ' + ('yes' if ok else 'NO') for k, ok in checks.items())}; "
                f"{distiller.logs} logs, {ratio:.1f}x smaller than the messages they cover ({rendered:.1f}x "
                "the rendered segments)"
                + (
                    f"; distillation ${ledger.worker_cost:.2f} in {ledger.worker_calls} worker calls"
                    if ledger.worker_calls
                    else ""
                )
            )
        if knowing is not None:
            knowing_check(lores[0][0], knowing)
            share = knowing.read / knowing.input_tokens if knowing.input_tokens else 0.0
            if knowing.cost <= raw.cost / 3 and knowing.cost < compaction.cost and share >= 0.9:
                met.setdefault(knowing.name, []).append(short_id(session.id))
        for ledger in (raw, compaction, *(lo for lo, _ in lores), *([knowing] if knowing else [])):
            totals[ledger.name] = totals.get(ledger.name, 0.0) + ledger.cost
    if not sessions:
        print("no session matched")
        return
    print()
    raw_total, compaction_total = totals["raw passthrough"], totals["compaction at 80%"]
    print(
        f"all {len(sessions)} sessions: raw passthrough ${raw_total:.2f}, compaction ${compaction_total:.2f}"
    )
    for name, cost in list(totals.items())[2:]:
        ok = met.get(name, [])
        print(
            f"  {name}: ${cost:.2f}, {cost / raw_total:.2f}x raw, {cost / compaction_total:.0%} of "
            f"compaction; every check met in {len(ok)} sessions ({' '.join(ok) or '-'})"
        )
    knowing_name = next((name for name in totals if "knowledge" in name), None)
    if knowing_name is not None:
        base = totals["Lore (extractive observer)"]
        print(f"  with knowledge: {totals[knowing_name] / base:.3f}x the cost of the same runs without it")


if __name__ == "__main__":
    main()
