"""The gradient context manager: the choice of layer on every turn, with the state it keeps
per session (:mod:`~lore_core.context.sessions`).

One :class:`ContextManager` per gateway (``gateway.context``). On each request it measures
the conversation (cached per-message token counts), decides which layer (0-4,
docs/context.md) the prompt is sent at, and hands the plan (a
:class:`~lore_core.context.compose.Composition`) to the prompt layers, which place its parts
on the wire. After each response it learns from the usage the upstream reported: the token
calibration, the cache state (busts, zero-write turns) and the session's cost.

The choice, in order:

1. a session keeps the composition it has (layer 0, or the pinned layer-1..4 composition
   with the new messages appended) while it fits, so the provider's cache keeps hitting;
2. it re-composes when the prompt no longer fits, when ``forceMinLayer`` asks for more, or
   when it is past the layer-0 cap and :func:`~lore_core.context.economics.decide_compression`
   says rewriting the cache pays (never while holding after repeated busts);
3. re-composing picks the least layer that fits and pins it.

The rules of 1 and 2 are :func:`~lore_core.context.plan.recompose_need`.

Nothing here blocks the request path for long: store reads (distillations, the persisted
``forceMinLayer``) are cached per session and bounded by a short timeout; a slow store
means the last known state.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import attrs

from lore_core.config import LoreConfig
from lore_core.context.compose import (
    Analysis,
    Composition,
    PrefixPart,
    analyse,
    least_layer,
    prefix_parts,
    raw_composition,
    replay_pinned,
    tail_budget,
    unchanged_start_tokens,
)
from lore_core.context.economics import (
    CostTracker,
    cache_ttl,
    decide_compression,
    layer0_cap,
)
from lore_core.context.overflow import Overflow, next_min_layer
from lore_core.context.plan import recompose_need, usable_tokens
from lore_core.context.pricing import PriceTable
from lore_core.context.sessions import SessionContext, ThreadState, elect_main, thread_key
from lore_core.context.tokens import TokenCounter, default_counter, prompt_tokens
from lore_core.interfaces import CompositionContext, DistillationStore, PromptLayer, Store, tier_of
from lore_core.knowledge.inject import Injection, KnowledgeInjector
from lore_core.model import TEXT, Exchange, RequestView

log = logging.getLogger("lore.context")

#: Session state key of the persisted minimum context layer (see docs/context.md).
FORCE_MIN_LAYER = "forceMinLayer"

#: A composition is sized to at most this share of the model's input limit: the local
#: estimate, even calibrated, is not exact.
FIT_SHARE = 0.95
#: Knowledge (its blocks and deltas) may take at most this share of what a prompt may use.
KNOWLEDGE_WINDOW_SHARE = 0.15
#: Longest wait for the store on the request path (seconds).
STORE_TIMEOUT_SECONDS = 0.5
#: A saturated store misses that budget on every request: each kind of miss is logged at
#: most once per this many seconds, with how many went unlogged (``/health`` counts them all).
STORE_MISS_LOG_EVERY_SECONDS = 60.0
#: Distillations are re-read at most this often per session unless the distiller wrote.
DISTILLATIONS_TTL_SECONDS = 30.0
#: Urgent distillations of one session start at most this often.
URGENT_INTERVAL_SECONDS = 30.0
#: A conversation idle this long is forgotten (the provider's cache of it expired long ago;
#: it is composed afresh if it comes back) ...
THREAD_IDLE_SECONDS = 3600.0
#: ... and a session idle this long too (its forceMinLayer is read from the store again).
SESSION_IDLE_SECONDS = 6 * 3600.0
#: Sessions kept at most (least recently seen dropped first): each holds its last request's
#: measured messages (~20 KiB), and a gateway may see thousands of sessions within the idle
#: time (a forgotten session is measured again on its next request).
MAX_SESSIONS = 1_000
#: Every this many requests, idle state is swept.
SWEEP_EVERY = 256
#: Composition times kept for the p50/p99 on ``/health``.
TIMING_WINDOW = 1_000
#: Highest layer.
MAX_LAYER = 4


@attrs.define
class _Sent:
    """What was composed for one request, until its response arrives."""

    session_id: str
    thread: str
    estimate: int
    #: Sent after the conversation's cache entry expired (idle past the TTL).
    expired: bool = False


def _record_of(exchange: Exchange) -> _Sent | None:
    """What was composed for the exchange's request (``None``: not composed here)."""
    composed = exchange.composed
    record = composed.record if isinstance(composed, CompositionContext) else None
    return record if isinstance(record, _Sent) else None


T = TypeVar("T")


def _detached_task(coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
    """A task started from a request that outlives it: run in a fresh context, so it (and the
    session state that keeps it after it is done) does not keep the request alive: the task
    would copy the request's context, which holds Quart's request with its whole body."""
    return asyncio.create_task(coro, name=name, context=contextvars.Context())


class ContextManager:
    """Held by the gateway as ``gateway.context``."""

    def __init__(
        self,
        config: LoreConfig,
        prices: PriceTable,
        store: Store | None = None,
        layers: Sequence[PromptLayer] = (),
        *,
        counter: TokenCounter | None = None,
        distill_version: Callable[[], int] | None = None,
        distill_now: Callable[[str], Awaitable[Any]] | None = None,
        costs: CostTracker | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.budget = config.budget
        self.prices = prices
        self.store = store
        self.layers = list(layers)
        self.counter = counter or default_counter()
        # A tracker handed in is recorded into by its owner (the gateway prices every
        # exchange); one of our own is recorded here.
        self._own_costs = costs is None
        self.costs = costs or CostTracker(prices, config.budget.daily_budget_usd)
        self._distill_version = distill_version or (lambda: 0)
        # Distils a session's undistilled tail at once (docs/context.md: "urgently when the
        # context manager needs it"); one run per session at a time, off the request path.
        self._distill_now = distill_now
        self._urgent: dict[str, asyncio.Task[None]] = {}
        # A session's knowledge read still running (it outlives a request that stopped
        # waiting for it, so the session's next request finds the knowledge cached).
        self._knowledge_reads: dict[str, asyncio.Task[Injection]] = {}
        self._urgent_at: dict[str, float] = {}
        self._planned = 0
        self._clock = clock
        self.sessions: dict[str, SessionContext] = {}
        self._timings: collections.deque[float] = collections.deque(maxlen=TIMING_WINDOW)
        self.counts: collections.Counter[str] = collections.Counter()
        self._miss_logged_at: dict[str, float] = {}
        self._miss_clock: Callable[[], float] = time.monotonic
        self._misses_unlogged: collections.Counter[str] = collections.Counter()
        #: Long-term knowledge for each request (lore_core.knowledge.inject): pinned per
        #: session, counted in the budget like the rest of the prompt. ``None``: no knowledge.
        self.knowledge: KnowledgeInjector | None = None

    # -- sessions ------------------------------------------------------------------------------

    def session(self, session_id: str) -> SessionContext:
        state = self.sessions.get(session_id)
        if state is None:
            state = self.sessions[session_id] = SessionContext(session_id)
        return state

    async def _store_call(self, what: str, call: Any) -> Any:
        try:
            return await asyncio.wait_for(call, STORE_TIMEOUT_SECONDS)
        except TimeoutError:
            self.counts["store_timeouts"] += 1
            self._log_miss(what, f"context: the store did not answer {what} in time; using what is known")
        except Exception as exc:
            self.counts["store_errors"] += 1
            self._log_miss(what, f"context: could not read {what} from the store: {exc}")
        raise _StoreMiss

    def _log_miss(self, what: str, text: str) -> None:
        now = self._miss_clock()
        last = self._miss_logged_at.get(what)
        if last is not None and now - last < STORE_MISS_LOG_EVERY_SECONDS:
            self._misses_unlogged[what] += 1
            return
        self._miss_logged_at[what] = now
        unlogged = self._misses_unlogged.pop(what, 0)
        suffix = f" ({unlogged} more since the last such line)" if unlogged else ""
        log.warning("%s%s", text, suffix)

    async def _load_force(self, state: SessionContext) -> None:
        """The persisted ``forceMinLayer``, read on the session's first turn after start."""
        if state.force_loaded or self.store is None:
            state.force_loaded = True
            return
        try:
            value = await self._store_call(
                FORCE_MIN_LAYER, self.store.get_state(state.session_id, FORCE_MIN_LAYER, 0)
            )
        except _StoreMiss:
            return  # tried again next turn
        state.force_min_layer = _as_layer(value)
        state.force_loaded = True

    def overflowed(self, refused: Exchange, tokens: int | None) -> None:
        """The upstream refused ``refused`` (an exchange whose request was composed here,
        not finished) as too long, saying it had ``tokens`` (``None``: it did not say; more than
        the model's input limit, then). The session's calibration rises so that the next
        composition, the retry of this very request included, is sized by the upstream's
        count, not the local one (tokenizers differ most on a session's first, uncalibrated
        turn)."""
        sent = _record_of(refused)
        state = self.sessions.get(sent.session_id) if sent is not None else None
        if sent is None or state is None:
            return
        if tokens is None:
            tokens = self.prices.lookup(refused.request.model).max_input_tokens + 1
        state.calibration.at_least(sent.estimate, tokens)

    async def refused_as_too_long(
        self, session_id: str, overflow: Overflow, refused: Exchange | None = None
    ) -> int:
        """The upstream refused the session's prompt as too long: raise the session's
        persisted ``forceMinLayer`` (2 or 3 by overshoot); returns the new value.
        ``refused``: the refused exchange, not finished yet: the session is calibrated from
        the refusal."""
        layer = next_min_layer(self.session(session_id).force_min_layer, overflow)
        if refused is not None:
            try:
                self.overflowed(refused, overflow.tokens)
            except Exception:
                log.exception("could not learn from the overflow of session %s", session_id)
        log.warning(
            "session %s: the upstream refused the prompt as too long (%s); its turns start at layer %d now",
            session_id,
            overflow.message[:200],
            layer,
        )
        await self.force_min_layer(session_id, layer)  # never raises for the store
        return layer

    async def force_min_layer(self, session_id: str, layer: int) -> bool:
        """Make the session's turns start at ``layer`` (0-4) or above, from its next turn;
        persisted, so it survives restarts. The overflow recovery calls this when the
        upstream answered "prompt is too long". Takes effect at once even when the store
        cannot persist it (returns whether it was persisted; never raises for the store)."""
        layer = _as_layer(layer)
        state = self.session(session_id)
        state.force_min_layer = layer
        state.force_loaded = True
        if layer > 0:
            # The pinned composition is what the upstream refused: the next turn is composed
            # afresh (at ``layer`` or above), never replayed.
            for thread in state.threads.values():
                thread.pinned = None
        if self.store is None:
            return False
        try:
            await self.store.set_state(session_id, FORCE_MIN_LAYER, layer)
        except Exception as exc:
            self.counts["store_errors"] += 1
            log.warning("context: could not persist forceMinLayer of %s: %s", session_id, exc)
            return False
        return True

    async def _parts(self, state: SessionContext, wait: bool) -> list[PrefixPart]:
        """The session's distillations as prefix parts: cached, re-read when the distiller
        wrote or the cache is old. ``wait``: a re-composition is about to use them, so read
        now (bounded by the store timeout) rather than in the background."""
        version = self._distill_version()
        fresh = state.parts is not None and (
            version == state.parts_version and self._clock() - state.parts_read_at < DISTILLATIONS_TTL_SECONDS
        )
        if fresh or self.store is None:
            return state.parts or []
        if wait:
            if state.refreshing is not None and not state.refreshing.done():
                await asyncio.wait({state.refreshing}, timeout=STORE_TIMEOUT_SECONDS)
            else:
                await self._refresh_parts(state, version)
        elif state.refreshing is None or state.refreshing.done():
            state.refreshing = _detached_task(
                self._refresh_parts(state, version), f"lore-parts-{state.session_id[:16]}"
            )
        return state.parts or []

    async def _refresh_parts(self, state: SessionContext, version: int) -> None:
        assert self.store is not None
        distillations = tier_of(self.store, DistillationStore)
        try:
            rows = (
                await self._store_call(
                    "distillations", distillations.list_distillations(state.session_id, include_archived=True)
                )
                if distillations is not None
                else []  # a store without distillations: the prompt has no distilled parts
            )
        except _StoreMiss:
            return
        state.parts = prefix_parts(rows, state.rendered)
        state.parts_version = version
        state.parts_read_at = self._clock()

    def _distil_urgently(self, session_id: str) -> None:
        distill_now = self._distill_now  # a local: the None check then holds inside run()
        if distill_now is None:
            return
        running = self._urgent.get(session_id)
        if running is not None and not running.done():
            return
        # A session past the cap asks on every turn; the worker is not called on every turn.
        now = self._clock()
        if now - self._urgent_at.get(session_id, float("-inf")) < URGENT_INTERVAL_SECONDS:
            return
        self._urgent_at[session_id] = now

        async def run() -> None:
            try:
                await distill_now(session_id)
                self.counts["urgent_distillations"] += 1
            except Exception as exc:
                log.warning("context: urgent distillation of %s failed: %s", session_id, exc)

        task = _detached_task(run(), f"lore-urgent-distill-{session_id[:16]}")
        self._urgent[session_id] = task
        task.add_done_callback(
            lambda done: self._urgent.pop(session_id, None) if self._urgent.get(session_id) is done else None
        )

    async def stop(self) -> None:
        """Cancel urgent distillations and store reads still running (re-done on demand after
        a restart)."""
        tasks: list[asyncio.Task[Any]] = [t for t in self._urgent.values() if not t.done()]
        tasks += [t for t in self._knowledge_reads.values() if not t.done()]
        tasks += [
            s.refreshing
            for s in self.sessions.values()
            if s.refreshing is not None and not s.refreshing.done()
        ]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    def invalidate(self, session_id: str) -> None:
        """Forget the cached distillations of a session (read again on its next turn)."""
        state = self.sessions.get(session_id)
        if state is not None:
            state.parts_read_at = 0.0

    async def _knowledge(
        self,
        view: RequestView,
        ctx: CompositionContext,
        an: Analysis,
        thread: ThreadState,
        state: SessionContext,
    ) -> Injection:
        """This request's knowledge blocks and deltas; none for requests without tools (a
        harness's side requests) and none when the injector fails (logged; fail open)."""
        if self.knowledge is None or not view.tools:
            return Injection()
        known = self.knowledge.cached(ctx.session_id, ctx.project, message_ids=an.ids, thread=thread.key)
        if known is not None:
            return known
        sid = ctx.session_id
        reading = self._knowledge_reads.get(sid)
        if reading is not None and not reading.done():
            # Another request of the session started the read: wait for that one (bounded),
            # then take this request's own from what it cached.
            try:
                await self._store_call("knowledge", asyncio.shield(reading))
            except _StoreMiss:
                return Injection()
            known = self.knowledge.cached(sid, ctx.project, message_ids=an.ids, thread=thread.key)
            return known if known is not None else Injection()
        opening = an.messages[an.head] if an.head < len(an.messages) else None
        opening_text = " ".join(b.text for b in opening.blocks if b.type == TEXT) if opening else ""
        # A read the store answers late is not given up with the request: it finishes in
        # the background and fills the injector's caches, so a store slower than the request
        # path's bound still gets the session its knowledge from its next request on (given
        # up, every request would start the same slow read again and miss it again).
        reading = _detached_task(
            self.knowledge.for_request(
                sid,
                ctx.project,
                opening_text=opening_text,
                message_ids=an.ids,
                thread=thread.key,
                main=thread.key == state.main,
            ),
            f"lore-knowledge-{sid[:16]}",
        )
        self._knowledge_reads[sid] = reading
        reading.add_done_callback(lambda done: self._knowledge_read_done(sid, done))
        try:
            return await self._store_call("knowledge", asyncio.shield(reading))
        except _StoreMiss:  # a failure, a timeout (logged by _store_call): fail open
            return Injection()

    def _knowledge_read_done(self, session_id: str, done: asyncio.Task[Injection]) -> None:
        if self._knowledge_reads.get(session_id) is done:
            del self._knowledge_reads[session_id]
        if not done.cancelled() and done.exception() is not None:
            # Retrieved here, as nobody may await it any more; one that finished in time
            # was logged by _store_call already.
            log.debug("context: a knowledge read of %s failed: %s", session_id, done.exception())

    # -- the turn ------------------------------------------------------------------------------

    def sweep(self, now: float | None = None) -> None:
        """Forget idle conversations and sessions (their state holds the last request's
        messages)."""
        now = self._clock() if now is None else now
        for sid, state in list(self.sessions.items()):
            if now - state.last_seen > SESSION_IDLE_SECONDS:
                self._forget(sid)
                continue
            for key, thread in list(state.threads.items()):
                if now - thread.last_seen > THREAD_IDLE_SECONDS and key != state.main:
                    del state.threads[key]
        extra = len(self.sessions) - MAX_SESSIONS
        if extra > 0:
            by_age = sorted(self.sessions.items(), key=lambda item: item[1].last_seen)
            for sid, _ in by_age[:extra]:
                self._forget(sid)

    def forget(self, session_id: str) -> None:
        """Drop what is held of a session (``lore forget``): its state holds the last
        request's messages and its distillations as prefix parts."""
        if session_id in self.sessions:
            self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        del self.sessions[session_id]
        self._urgent_at.pop(session_id, None)
        if self.knowledge is not None:
            self.knowledge.forget(session_id)

    async def plan(self, view: RequestView, ctx: CompositionContext) -> Composition:
        """Choose this request's layer and composition (see the module docstring)."""
        self._planned += 1
        if self._planned % SWEEP_EVERY == 0:
            self.sweep()
        state = self.session(ctx.session_id)
        state.last_seen = self._clock()
        await self._load_force(state)
        model = self.prices.lookup(view.model)
        usable = usable_tokens(model, view)
        key = thread_key(view)
        known = state.threads.get(key)
        # Idle past the TTL: the provider dropped the cached prompt (this turn writes it all).
        expired = (
            known is not None and known.turns > 0 and state.last_seen - known.last_seen > cache_ttl(view.raw)
        )
        thread = state.thread(key, state.last_seen)
        an = analyse(view, ctx.session_id, self.counter, thread.memo)
        thread.messages = len(an.messages)
        elect_main(state, thread)
        correct = state.calibration.correct
        limit = int(usable * FIT_SHARE)

        def fits(tokens: int) -> bool:
            return correct(tokens) <= limit

        knowledge = await self._knowledge(view, ctx, an, thread, state)
        extra = self._knowledge_tokens(knowledge, usable)
        pressure = self.costs.pressure() if self.costs.daily_budget_usd > 0 else None
        cap = layer0_cap(
            model,
            self.budget,
            calibrated=state.calibration.calibrated,
            zero_cache_write_turns=thread.cache.zero_write_turns,
            pressure=pressure,
        )

        current: Composition | None = None
        if thread.pinned is not None:
            current = replay_pinned(thread.pinned, an, self.counter, extra_tokens=extra)
        if current is None:
            current = raw_composition(an)
            if extra:
                current.tokens += extra
        size = correct(current.tokens)
        need, kept_reason = recompose_need(
            current,
            server_state=ctx.codec.continues_server_state(view),
            force_min_layer=state.force_min_layer,
            fits=fits(current.tokens),
            size=size,
            cap=cap,
            cache=thread.cache,
            expired=expired,
        )
        if kept_reason is not None:
            current.reason = kept_reason
        composition = current
        if need:
            parts = await self._parts(state, wait=True)
            previous = thread.pinned.prefix if thread.pinned is not None else ()
            candidate = least_layer(
                an,
                parts,
                self.counter,
                usable=usable,
                fits=fits,
                min_layer=max(state.force_min_layer, 1),
                previous_prefix=previous,
                extra_tokens=extra,
            )
            # Distil the undistilled tail at once so a later re-composition can drop it, but
            # for cost only when it is worth a worker call: a raw window past the cut of at
            # most the layer-4 tail is what any layer keeps anyway (a session past the cap
            # would otherwise distil a few messages every interval, each call paying for the
            # observer's prompt and the previous observations again).
            if need != "cost" or sum(an.tokens[candidate.cut_index :]) > tail_budget(usable):
                self._distil_urgently(ctx.session_id)
            if need == "cost":
                kept = correct(unchanged_start_tokens(an, current, candidate, self.counter))
                compressed = correct(candidate.tokens)
                decision = decide_compression(size, compressed, model, cap, thread.cache, kept, expired)
                if not decision.compress:
                    need = ""
                    if composition.layer == 0:
                        composition.reason = decision.reason
                elif expired:
                    thread.cache.release()  # the cache starts afresh with this prompt
            elif need == "overflow":
                # Compressing to fit is not optional: a hold after repeated busts ends here.
                thread.cache.release()
            if need:
                candidate.reason = need
                composition = candidate
                thread.pinned = candidate
                thread.recompositions += 1
        else:
            if current.layer > 0:
                thread.pinned = current
            # Keep looking at the distiller's output while under no pressure, so the first
            # re-composition does not wait for the store.
            if state.parts is None or cap.tokens is None or size > cap.tokens // 2:
                await self._parts(state, wait=False)
        if extra:
            composition.ltm_baseline, composition.ltm_context = knowledge.baseline, knowledge.context
            composition.deltas = [(an.messages[i], m) for i, m in knowledge.deltas if i < len(an.messages)]
        thread.layer = composition.layer
        thread.reason = composition.reason
        thread.model = view.model
        thread.cap = cap
        thread.estimated_tokens = correct(composition.tokens)
        thread.turns += 1
        state.turns += 1
        # Carried by the request (ctx -> its exchange) until its response arrives.
        ctx.record = _Sent(ctx.session_id, key, composition.tokens, expired)
        self.counts[f"layer{composition.layer}"] += 1
        return composition

    def _knowledge_tokens(self, knowledge: Injection, usable: int) -> int:
        """Tokens the knowledge adds; 0 (and nothing injected) when it would take more than
        :data:`KNOWLEDGE_WINDOW_SHARE` of what the prompt may use: knowledge never crowds
        out the conversation on a small window."""
        texts = [knowledge.baseline, knowledge.context, *(m.blocks[0].text for _, m in knowledge.deltas)]
        tokens = sum(self.counter.text(t) for t in texts if t)
        if tokens > usable * KNOWLEDGE_WINDOW_SHARE:
            self.counts["knowledge_skipped"] += 1
            return 0
        return tokens

    async def compose(self, view: RequestView, ctx: CompositionContext) -> RequestView:
        """Plan the turn, then run the prompt layers in priority order. A failing layer is
        skipped; when a layer fails while a compressed composition is being placed, the
        request goes out as the client sent it (fail open, never half-composed)."""
        started = time.perf_counter()
        try:
            ctx.composition = await self.plan(view, ctx)
        except Exception:
            self.counts["plan_errors"] += 1
            log.exception("context: planning the turn failed; sending the request unchanged")
            ctx.composition = None
        client = view
        if ctx.composition is not None and ctx.composition.modified:
            # The layers place the composition on a copy: the client's own view is what the
            # store records (the conversation as the client will resend it).
            view = attrs.evolve(view)
        for layer in self.layers:
            try:
                result = layer.compose(view, ctx)
                if inspect.isawaitable(result):
                    result = await result
                view = result
            except Exception:
                self.counts["layer_errors"] += 1
                log.exception("prompt layer %s failed; continuing without it", layer.name)
                if layer.builtin and view is not client:
                    view = client
                    ctx.composition = None
        if view is not client:
            ctx.client_view = client
        self._timings.append((time.perf_counter() - started) * 1000)
        return view

    def exchange_finished(self, exchange: Exchange) -> None:
        """Learn from a response's usage: calibration, cache state, cost; and give the
        exchange back the client's own request view (what the store must record), in place
        of the composed one that went upstream, and the layer that one was composed at.
        Called before anything else sees the exchange. Never raises."""
        sent = _record_of(exchange)
        composed = exchange.composed
        client = composed.client_view if isinstance(composed, CompositionContext) else None
        plan = composed.composition if isinstance(composed, CompositionContext) else None
        if isinstance(plan, Composition):
            # Stored with the answer (the session reader shows each turn's layer).
            exchange.context_layer = plan.layer
        # Consumed here: the exchange lives on in the writer's queue and the distiller, the
        # plan and the composed view need not.
        exchange.composed = None
        if client is not None:
            exchange.request = client
        response = exchange.response
        if response is None:
            return
        usage = response.usage
        if prompt_tokens(usage) <= 0:
            return
        state = self.session(exchange.session_id)
        if self._own_costs:
            try:
                self.costs.record(exchange.session_id, response.model or exchange.request.model, usage)
            except Exception:
                log.exception("context: could not record a response's cost")
        state.input_tokens += prompt_tokens(usage)
        state.cache_read_tokens += usage.cache_read_tokens
        if sent is not None:
            state.calibration.record(sent.estimate, usage)
        # An exchange composed elsewhere (or not at all) is taken for the main conversation.
        thread = state.threads.get(sent.thread if sent is not None else state.main or "")
        if thread is None:
            return
        thread.real_tokens = prompt_tokens(usage)
        if thread.cache.observe(usage, expired=sent is not None and sent.expired):
            thread.busts += 1

    # -- reporting -------------------------------------------------------------------------

    def session_status(self, session_id: str) -> dict[str, Any]:
        """The context figures of one session (its main conversation's layer, tokens and
        cache; the session's cost and cache-hit rate), for ``/lore:status`` and ``lore status``."""
        state = self.sessions.get(session_id)
        if state is None or state.main is None:
            forced = state.force_min_layer if state is not None else 0
            return {"session_id": session_id, "layer": None, "turns": 0, "force_min_layer": forced}
        main = state.main_thread
        cap = main.cap
        return {
            "session_id": session_id,
            "layer": main.layer,
            "reason": main.reason,
            "force_min_layer": state.force_min_layer,
            "model": main.model,
            "turns": state.turns,
            "threads": len(state.threads),
            "prompt_tokens": main.real_tokens or main.estimated_tokens,
            "prompt_tokens_real": main.real_tokens,
            "prompt_tokens_estimated": main.estimated_tokens,
            "cap": cap.tokens if cap else None,
            "cap_reason": cap.reason if cap else None,
            "calibration_factor": round(state.calibration.factor, 4),
            "session_cost_usd": round(self.costs.session_cost(session_id), 6),
            "cache_hit_rate": (state.cache_read_tokens / state.input_tokens) if state.input_tokens else None,
            "busts": main.busts,
            "consecutive_busts": main.cache.consecutive_busts,
            "holding": main.cache.holding,
            "recompositions": main.recompositions,
            "distillations_in_prefix": len(main.pinned.prefix) if main.pinned else 0,
            "dropped_messages": main.pinned.dropped if main.pinned else 0,
            "stripped_messages": main.pinned.stripped if main.pinned else 0,
        }

    def health(self) -> dict[str, Any]:
        timings = sorted(self._timings)
        by_layer = {str(i): self.counts.get(f"layer{i}", 0) for i in range(MAX_LAYER + 1)}
        return {
            "sessions": len(self.sessions),
            "compositions": sum(by_layer.values()),
            "by_layer": by_layer,
            "compose_ms_p50": round(_quantile(timings, 0.5), 3) if timings else None,
            "compose_ms_p99": round(_quantile(timings, 0.99), 3) if timings else None,
            # store_timeouts, store_errors, plan_errors, layer_errors, urgent_distillations
            "events": {k: v for k, v in self.counts.items() if not k[-1].isdigit()},
            "daily_spend_usd": round(self.costs.day_cost(), 6),
        }


class _StoreMiss(Exception):
    """The store could not answer in time (or at all)."""


def _as_layer(value: Any) -> int:
    try:
        return min(max(int(value), 0), MAX_LAYER)
    except (TypeError, ValueError):
        return 0


def _quantile(ordered: Sequence[float], q: float) -> float:
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]
