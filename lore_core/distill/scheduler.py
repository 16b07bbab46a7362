"""The distillation scheduler: decides when a session's conversation becomes observation logs
(generation 0) and when old logs are consolidated (generation 1), and runs that off the
request path.

When:

* **idle**: a session with no request for ``distill.idleTimeoutSeconds`` is distilled
  (debounced: every new request restarts the wait). Not while the last answer is a tool call
  awaiting its result (the agent is working, the turn is not over); such a session waits ten
  times as long, so an abandoned tool call cannot keep it undistilled for ever;
* **after a turn**, when the undistilled part of the session exceeds
  ``distill.segmentMaxTokens``: the full segments are distilled at once, the tail waits for
  idle (see *The turn rule* below);
* **on demand** (``lore distill``, ``POST /lore/api/distill``).

What is undistilled is derived from the store every time (messages of the current branch
that no gen-0 distillation lists as a source), never remembered beside it: a crash between
the worker's answer and the write re-does that segment, and since a distillation's id is a
hash of its sources, writing the same segment twice stores it once. One distillation runs at
a time per session (a lock), however it was triggered.

Gen-0 uses the LLM observer when the worker is usable, else the extractive observer (and the
provenance says so). When a session has ``distill.metaThreshold`` unarchived gen-0 logs, the
reflector consolidates all but the newest ``distill.recentSegmentsToKeep`` (plus the previous
meta-distillation) into one gen-1 row, written together with the archiving of its sources.
The reflector has no fallback: without a worker, consolidation waits.

The turn rule: a run reads the whole session, so a turn does not launch one until a segment
may be full. Each tracked session keeps an estimate of its undistilled tokens (a
:class:`Backlog`): the tail its last run left, plus what each finished exchange added (the
request's messages past the history the previous exchange left, and the answer), measured
as the segmenter measures them (:func:`~lore_core.distill.segment.message_sizes`). A turn
launches a run when that estimate reaches ``distill.segmentMaxTokens``, and whenever the
estimate is unknown: a request that does not extend the history the previous one left (a
resend, a branch, an edit), a pause of a segment gap since the previous exchange, a failed
run. Unsure means run, as every turn did before. A session's first exchange since the
scheduler started (a new session, a restart) or since its estimate was dropped (only the
``MAX_BACKLOGS`` most recent are kept) is measured whole when its request is short (at most
``FIRST_EXCHANGE_MAX_ITEMS`` items, not server-side state): the history it resends holds
everything undistilled, so a new session's first turn reads nothing; a longer one is
unknown. The same request sent again (a client's retry: as long as the previous one, ending
with the same message) adds only its answer. Idle and on-demand runs do not look at the
estimate; every run resets it from what the store held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import attrs

from lore_core.config import DistillConfig
from lore_core.curation import Distillation, DistillInput, ObservationInput
from lore_core.distill.extractive import extractive_observe
from lore_core.distill.observer import LLMObserver
from lore_core.distill.reflector import LLMReflector
from lore_core.distill.render import tool_names_of
from lore_core.distill.segment import Segment, SegmentPolicy, message_sizes, split_segments
from lore_core.interfaces import (
    DistillationStore,
    Observer,
    Reflector,
    Store,
    Tier,
    has_tier,
    require_tier,
    tier_of,
)
from lore_core.model import TOOL_CALL, Exchange
from lore_core.storage.identity import logical_messages, main_branch, message_key
from lore_core.storage.masking import mask_secrets
from lore_core.storage.records import StoredDistillation, StoredMessage, distillation_id
from lore_core.worker.client import WorkerClient, WorkerError, WorkerUnavailable

log = logging.getLogger("lore.distill")

#: An idle session whose last answer awaits a tool result waits this many idle timeouts.
TOOL_WAIT_FACTOR = 10
#: Sessions looked at when the gateway starts, to finish what a previous run left undistilled.
RESUME_SESSIONS = 200
#: Sessions the background loop distils at once (each reads its session from the store).
#: Sessions due beyond these wait as entries of the tracking tables, not as tasks: under
#: overload (more runs due than finish) nothing grows but that queue.
MAX_PARALLEL_SESSIONS = 2
#: Sessions whose undistilled estimate is kept (the turn rule); the least recent are dropped.
MAX_BACKLOGS = 1024
#: A first exchange is measured whole (on the event loop) only up to this many wire items.
FIRST_EXCHANGE_MAX_ITEMS = 16
#: Sessions tracked at most (waiting for their idle or turn run). Past it, under sessions
#: arriving faster than runs finish, the longest-tracked is dropped: its messages stay
#: stored and searchable, and its tail is distilled when it is next seen or on demand.
MAX_TRACKED_SESSIONS = 10_000
#: Waits after a failed worker call before the session is tried again (then the last one).
RETRY_SECONDS = (30.0, 60.0, 120.0, 300.0)
#: At most one warning this often about sessions dropped from tracking.
UNTRACKED_LOG_EVERY_SECONDS = 300.0
#: The note of a run that found the session claimed by another gateway (a shared store).
CLAIMED_ELSEWHERE = "claimed by another gateway: it distils and curates the session now"


def lease_key(session_id: str) -> str:
    return f"distill:{session_id}"


def new_holder() -> str:
    """This process's name as a lease holder: unique among the gateways on one store."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


Progress = Callable[[int, int], None]


@attrs.define
class DistillReport:
    """What one :meth:`DistillScheduler.distill_session` run did."""

    session_id: str
    # Gen-0 rows written, by method ("llm" / "extractive").
    observed: dict[str, int] = attrs.field(factory=dict)
    # Gen-1 rows written and gen-0 rows they archived.
    reflected: int = 0
    archived: int = 0
    # Undistilled messages left (below the first-segment minimum, or the tail after a
    # turn-triggered run).
    remaining_messages: int = 0
    # Why work was skipped or stopped, when it was ("worker unavailable: ...").
    notes: list[str] = attrs.field(factory=list)

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def policy_of(config: DistillConfig) -> SegmentPolicy:
    return SegmentPolicy(
        max_tokens=config.segment_max_tokens,
        first_min_messages=config.first_segment_min_messages,
        first_min_tokens=config.first_segment_min_tokens,
        tool_output_max_chars=config.tool_output_max_chars,
    )


def _inputs(messages: Sequence[StoredMessage]) -> list[DistillInput]:
    return [DistillInput.from_block_dicts(m.id, m.role, m.created_at, m.blocks) for m in messages]


def _row(
    dist: Distillation, session_id: str, project: str, source_ids: list[str] | None = None
) -> StoredDistillation:
    prov = dist.provenance
    sources = list(source_ids if source_ids is not None else prov.source_ids)
    return StoredDistillation(
        id=distillation_id(session_id, prov.generation, sources),
        session_id=session_id,
        generation=prov.generation,
        # The worker read masked text, but its answer is not ours to trust: masked again
        # before it is stored, as every text written to the store is (review F10).
        text=mask_secrets(dist.text),
        source_ids=sources,
        project=project,
        created_at=time.time(),
        start=prov.start,
        end=prov.end,
        method=prov.method,
        source_tokens=prov.source_tokens,
        input_tokens=prov.input_tokens,
        output_tokens=prov.output_tokens,
        compression_ratio=prov.compression_ratio,
        worker_provider=prov.worker_provider,
        worker_model=prov.worker_model,
    )


def _previous_text(live: Sequence[StoredDistillation]) -> str:
    """What the observer is told was observed before: the current meta-distillation, then
    the unarchived logs, oldest first (the observer keeps their tail)."""
    ordered = sorted(live, key=lambda d: (-d.generation, d.end, d.created_at))
    return "\n\n".join(d.text for d in ordered)


def awaits_tool_result(exchange: Exchange) -> bool:
    """The answer ended in a tool call: the client runs the tool and comes back."""
    response = exchange.response
    if response is None:
        return False
    if response.stop_reason in ("tool_use", "tool_calls"):
        return True
    return bool(response.blocks) and response.blocks[-1].type == TOOL_CALL


@attrs.define
class Backlog:
    """A tracked session's estimate of its undistilled tokens, for the turn rule (see the
    module docstring)."""

    # The tail the last run left plus what exchanges added since; None: unknown (a turn runs).
    tokens: int | None = None
    # The last exchange's request length (wire items), whether its answer extends the history
    # the next request resends, and when it started (the time its messages are stored with).
    items: int = 0
    answered: bool = False
    started_at: float | None = None
    # The last request's last message, compared by value: the same request again is a retry.
    last_key: tuple[Any, ...] | None = None

    def add(self, exchange: Exchange, policy: SegmentPolicy) -> None:
        """Count what ``exchange`` added to the session."""
        first = self.started_at is None
        added = self._added(exchange, policy)
        if added is None:
            self.tokens = None
        elif first:
            self.tokens = added
        elif self.tokens is not None:
            self.tokens += added

    def _added(self, exchange: Exchange, policy: SegmentPolicy) -> int | None:
        """Estimated tokens of the exchange's new messages and answer; ``None`` when unsure."""
        items = exchange.request.messages
        response = exchange.response
        answer = list(response.blocks) if response is not None else []
        known, answered, before, last_key = self.items, self.answered, self.started_at, self.last_key
        self.items, self.answered, self.started_at = len(items), bool(answer), exchange.started_at
        self.last_key = message_key(items[-1]) if items else None
        skip = 0
        if before is None:
            # Nothing to compare with: the request's history bounds what is undistilled,
            # when it carries the history and is short enough to measure here.
            if exchange.server_state or len(items) > FIRST_EXCHANGE_MAX_ITEMS:
                return None
            new = logical_messages(items)
        elif exchange.started_at - before >= policy.gap_seconds:
            return None  # a pause that may end a segment
        elif len(items) == known and last_key is not None and self.last_key == last_key:
            new = []  # the same request again (a client's retry): only its answer is new
        elif exchange.server_state:
            new = logical_messages(items)  # server-side state: the request carries only new items
        elif len(items) < known:
            return None  # not the previous history extended: a resend, an edit, a branch
        else:
            new = logical_messages(items[known:])
            if answered:
                # The previous answer, resent (counted when it came; rendered for tool names).
                if not new or new[0].role != "assistant":
                    return None
                skip = 1
        inputs = [DistillInput("", m.role, exchange.started_at, m.blocks) for m in new]
        if answer:
            inputs.append(DistillInput("", "assistant", exchange.started_at, answer))
        return sum(message_sizes(inputs, policy)[skip:])


class DistillScheduler:
    """One per gateway (or per ``lore distill`` run without a gateway)."""

    def __init__(
        self,
        store: Store,
        config: DistillConfig,
        worker: WorkerClient | None,
        *,
        settle: Callable[[], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.time,
        observer: Observer | None = None,
        reflector: Reflector | None = None,
        after_run: Callable[[str, str, str], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        # Called with (session, project, reason) after each run that read a session: the
        # knowledge curator follows distillation (lore_core.knowledge.curation).
        self.after_run = after_run
        self.config = config
        self.worker = worker
        self.policy = policy_of(config)
        # The curators come from the plugin registry (Registry.choose_curators); these defaults
        # serve callers without a registry.
        self.observer: Observer = observer or LLMObserver(worker, config.tool_output_max_chars)
        self.reflector: Reflector | None = (
            reflector if reflector is not None else (LLMReflector(worker) if worker is not None else None)
        )
        # Called before reading the store: lets exchanges already queued to the writer land.
        self._settle = settle
        self._clock = clock
        # Wall-clock time of each tracked session's last request, and whether its last answer
        # awaits a tool result. Sessions leave once an idle run found nothing more to do.
        self._seen: dict[str, float] = {}
        self._awaiting_tool: dict[str, bool] = {}
        # Sessions whose last turn may have pushed the undistilled part past the cap, and the
        # estimate that decides it (the turn rule).
        self._turned: set[str] = set()
        self._backlog: dict[str, Backlog] = {}
        self._failures: Counter[str] = Counter()
        # Sessions dropped from tracking because MAX_TRACKED_SESSIONS were (overload).
        self.untracked = 0
        self._untracked_logged_at = float("-inf")
        self._retry_at: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: dict[str, asyncio.Task[DistillReport | None]] = {}
        self._wake: asyncio.Event | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self.counts: Counter[str] = Counter()
        self.last_error: str | None = None
        # Who this scheduler is when it claims a session's lease (a shared store: one
        # gateway at a time distils and curates a session).
        self.holder = new_holder()

    @property
    def distillations(self) -> DistillationStore:
        """Where distillations go; :class:`~lore_core.interfaces.TierUnavailable` on a store
        without the tier."""
        return require_tier(self.store, DistillationStore)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self, resume: bool = True) -> None:
        self._wake = asyncio.Event()
        if not has_tier(self.store, Tier.DISTILLATIONS):
            log.info("distillation is off: the %s store has no distillations", self.store.name)
            return
        self._loop_task = asyncio.create_task(self._run(resume), name="lore-distill")

    async def stop(self) -> None:
        """Cancel what runs: an interrupted distillation is simply re-done next time."""
        tasks = [t for t in (self._loop_task, *self._tasks.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._loop_task = None
        self._tasks.clear()

    # -- the request path's side (never blocks, never raises) --------------------------------

    def exchange_finished(self, exchange: Exchange) -> None:
        sid = exchange.session_id
        if sid not in self._seen and len(self._seen) >= MAX_TRACKED_SESSIONS:
            self._untrack_oldest()
        self._seen[sid] = exchange.finished_at or self._clock()
        self._awaiting_tool[sid] = awaits_tool_result(exchange)
        # Kept after the session goes idle (the next turn continues the count), the most
        # recently used last; a session evicted counts as unknown again.
        backlog = self._backlog.pop(sid, None) or Backlog()
        self._backlog[sid] = backlog
        while len(self._backlog) > MAX_BACKLOGS:
            del self._backlog[next(iter(self._backlog))]
        try:
            backlog.add(exchange, self.policy)
        except Exception:
            log.exception("could not estimate what a turn added to session %s", sid)
            backlog.tokens = None
        # The client is back (its credentials with it): no reason to keep waiting. Failing
        # workers stay bounded by the worker's circuit breaker.
        self._retry_at.pop(sid, None)
        if backlog.tokens is None or backlog.tokens >= self.policy.max_tokens:
            self._turned.add(sid)
            # Only a turn run is worth waking the loop for; idle runs wait for its tick.
            if self._wake is not None:
                self._wake.set()

    def _untrack_oldest(self) -> None:
        """Drop the longest-tracked session not running: runs cannot keep up with new
        sessions, and tracking them all would grow without bound."""
        sid = next((s for s in self._seen if s not in self._tasks), None)
        if sid is None:
            return
        self._untrack(sid)
        self._turned.discard(sid)
        self._retry_at.pop(sid, None)
        self._failures.pop(sid, None)
        self.untracked += 1
        now = self._clock()
        if now - self._untracked_logged_at >= UNTRACKED_LOG_EVERY_SECONDS:
            self._untracked_logged_at = now
            log.warning(
                "distillation is behind: %d sessions tracked, %d dropped so far (their tails are "
                "distilled when they are next seen, or by `lore distill`)",
                len(self._seen),
                self.untracked,
            )

    # -- the background loop -------------------------------------------------------------------

    @property
    def tick_seconds(self) -> float:
        return max(0.05, min(1.0, self.config.idle_timeout_seconds / 4))

    async def _run(self, resume: bool) -> None:
        assert self._wake is not None
        if resume:
            await self._resume()
        while True:
            try:
                # Not asyncio.wait_for: on Python 3.11 it loses a cancellation that arrives
                # as the wake does, and stop() then waits for this loop for ever.
                async with asyncio.timeout(self.tick_seconds):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                self._schedule()
            except Exception:
                log.exception("distillation scheduling failed")

    async def _resume(self) -> None:
        """Track recently updated sessions, so that a segment a crash or a stop interrupted
        is distilled without waiting for the session's next request."""
        try:
            sessions = await self.store.list_sessions(limit=RESUME_SESSIONS)
        except Exception as exc:
            log.warning("distillation: cannot list sessions to resume (%s)", exc)
            return
        # Session credentials are held in memory only, so after a restart the worker may
        # have none until the clients come back: give them time (ten idle timeouts) before
        # the extractive observer does the work for good.
        wait = 0.0
        if self.worker is not None and not self.worker.status()["available"]:
            wait = TOOL_WAIT_FACTOR * self.config.idle_timeout_seconds
        for s in sessions:
            self._seen.setdefault(s.id, s.updated_at)
            if wait:
                self._retry_at[s.id] = self._clock() + wait

    def _schedule(self) -> None:
        """Start the runs that are due, at most :data:`MAX_PARALLEL_SESSIONS` at a time; the
        longest-tracked sessions first. Returns at once while every slot is taken, so a
        saturated gateway does not scan its tracked sessions on every exchange."""
        free = MAX_PARALLEL_SESSIONS - len(self._tasks)
        if free <= 0:
            return
        now = self._clock()
        idle = self.config.idle_timeout_seconds
        due: list[tuple[str, str]] = []
        for sid, seen in self._seen.items():
            if sid in self._tasks or self._retry_at.get(sid, 0.0) > now:
                continue
            wait = idle * (TOOL_WAIT_FACTOR if self._awaiting_tool.get(sid) else 1)
            if now - seen >= wait:
                due.append((sid, "idle"))
            elif sid in self._turned:
                due.append((sid, "turn"))
            if len(due) == free:
                break
        for sid, reason in due:
            self._turned.discard(sid)
            self._launch(sid, reason)

    def _launch(self, sid: str, reason: str) -> None:
        task = asyncio.create_task(self._guarded(sid, reason), name=f"lore-distill-{sid[:16]}")
        self._tasks[sid] = task

        def forget(_task: asyncio.Task[DistillReport | None]) -> None:
            self._tasks.pop(sid, None)
            # A slot is free: the next session due need not wait for the tick.
            if self._wake is not None:
                self._wake.set()

        task.add_done_callback(forget)

    async def _guarded(self, sid: str, reason: str) -> DistillReport | None:
        seen = self._seen.get(sid)
        try:
            report = await self.distill_session(sid, reason=reason)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed(sid, exc)
            return None
        if reason == "idle" and self._seen.get(sid) == seen:
            # Nothing more to do until the session's next request (one that arrived during
            # the run changed the time seen, and keeps the session tracked).
            self._untrack(sid)
        return report

    @contextlib.asynccontextmanager
    async def forgetting(self, session_id: str) -> AsyncIterator[None]:
        """Hold distillation of a session off while ``lore forget`` removes it: its run in
        progress is cancelled (what it would write is derived from what goes), none starts
        until the block ends, and the session is no longer tracked afterwards."""
        task = self._tasks.get(session_id)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        async with self._lock(session_id):
            try:
                yield
            finally:
                self._untrack(session_id)
                self._turned.discard(session_id)
                self._backlog.pop(session_id, None)
                self._failures.pop(session_id, None)
                self._retry_at.pop(session_id, None)

    def _untrack(self, sid: str) -> None:
        """Forget a session until its next request."""
        self._seen.pop(sid, None)
        self._awaiting_tool.pop(sid, None)
        lock = self._locks.get(sid)
        if lock is not None and not lock.locked():
            del self._locks[sid]

    def _failed(self, sid: str, exc: BaseException) -> None:
        self._failures[sid] += 1
        delay = RETRY_SECONDS[min(self._failures[sid], len(RETRY_SECONDS)) - 1]
        if isinstance(exc, WorkerError) and self.worker is not None and not self.worker.available(sid):
            # The failure opened the circuit breaker of this session's worker target: the
            # next attempt falls back to the extractive observer at once, rather than leaving
            # the session undistilled.
            delay = 0.0
        self._retry_at[sid] = self._clock() + delay
        self.counts["failures"] += 1
        reason = exc.reason if isinstance(exc, WorkerError) else f"{type(exc).__name__}: {exc}"
        if reason != self.last_error:
            log.warning("distillation of session %s failed (retry in %.0fs): %s", sid, delay, reason)
        self.last_error = reason

    # -- the work ------------------------------------------------------------------------------

    def _lock(self, sid: str) -> asyncio.Lock:
        lock = self._locks.get(sid)
        if lock is None:
            lock = self._locks[sid] = asyncio.Lock()
        return lock

    async def distill_session(
        self, session_id: str, *, reason: str = "manual", progress: Progress | None = None
    ) -> DistillReport:
        """Distil what is undistilled in the session now, then consolidate if due.

        ``reason == "turn"`` distils only full segments (the tail waits for idle). A worker
        call that was attempted and failed raises :class:`~lore_core.worker.client.WorkerError`
        after what was written before it stays written."""
        async with self._lock(session_id):
            key = lease_key(session_id)
            # The lease (distill.leaseSeconds) is renewed after each segment; a gateway gone
            # holds the session off until it runs out.
            if not await self.store.claim_lease(key, self.holder, self.config.lease_seconds):
                self.counts["claimed_elsewhere"] += 1
                return DistillReport(session_id, notes=[CLAIMED_ELSEWHERE])
            try:
                return await self._leased(session_id, reason, progress)
            finally:
                try:
                    await self.store.release_lease(key, self.holder)
                except Exception as exc:  # it runs out by itself
                    log.warning("the lease of session %s could not be released: %s", session_id, exc)

    async def _leased(self, session_id: str, reason: str, progress: Progress | None) -> DistillReport:
        """:meth:`distill_session` under the session's lock and lease."""
        backlog = self._backlog.get(session_id)
        if backlog is not None:
            # What the store holds now is read below: count anew what arrives from here
            # on (an exchange landing during the read is counted twice: towards running).
            backlog.tokens = 0
        try:
            report, tail = await self._distill(session_id, reason, progress)
        except BaseException:
            if backlog is not None:
                backlog.tokens = None
            raise
        if backlog is not None and backlog.tokens is not None:
            backlog.tokens += tail
        return report

    async def _distill(
        self, session_id: str, reason: str, progress: Progress | None
    ) -> tuple[DistillReport, int]:
        """:meth:`distill_session`'s work, under the session's lock; also returns the
        estimated tokens of the undistilled tail it left."""
        if self._settle is not None:
            await self._settle()
        report = DistillReport(session_id)
        messages = main_branch(await self.store.session_messages(session_id))
        if not messages:
            return report, 0
        project = messages[-1].project
        done = await self.distillations.distilled_message_ids(session_id)
        inputs = _inputs(messages)
        names = tool_names_of(inputs)
        todo = [m for m in inputs if m.id not in done]
        existing = await self.distillations.list_distillations(session_id, include_archived=True)
        first = not any(d.generation == 0 for d in existing)
        segments: list[Segment] = split_segments(todo, self.policy, first=first) if todo else []
        if not segments:
            # Below the first segment's minimum (or nothing undistilled).
            tail = sum(message_sizes(todo, self.policy, names))
        else:
            tail = sum(s.tokens for s in segments if s.reason == "end") if reason == "turn" else 0
        if reason == "turn":
            segments = [s for s in segments if s.reason != "end"]
        live = [d for d in existing if not d.archived]
        total = len(segments)
        if progress is not None:
            progress(0, total)
        for index, segment in enumerate(segments):
            dist = await self.observer.observe(
                segment.messages, _previous_text(live), session_id=session_id, tool_names=names
            )
            row = _row(dist, session_id, project)
            if await self.distillations.write_distillation(row):
                live.append(row)
                method = dist.provenance.method
                report.observed[method] = report.observed.get(method, 0) + 1
                self.counts[f"gen0_{method}"] += 1
                if dist.provenance.fallback_reason:
                    note = f"extractive observer: {dist.provenance.fallback_reason}"
                    if note not in report.notes:
                        report.notes.append(note)
            if progress is not None:
                progress(index + 1, total)
            if index + 1 < total and not await self.store.claim_lease(
                lease_key(session_id), self.holder, self.config.lease_seconds
            ):
                # The lease ran out and another gateway holds it now: it goes on from what
                # is written (the undistilled part is derived from the store), consolidates
                # and curates.
                report.notes.append(CLAIMED_ELSEWHERE)
                return report, 0
        covered = {i for s in segments for i in s.ids}
        report.remaining_messages = sum(1 for m in todo if m.id not in covered)
        await self._reflect(session_id, project, live, report)
        self._failures.pop(session_id, None)
        self._retry_at.pop(session_id, None)
        if self.after_run is not None:
            try:
                await self.after_run(session_id, project, reason)
            except Exception:
                log.exception("what follows the distillation of %s failed", session_id)
        return report, tail

    async def compaction_summary(self, session_id: str) -> str | None:
        """The session's memory as a summary, for a harness's own compaction request: the
        live meta-distillation and observation logs, plus an extractive log of what is not
        distilled yet. No LLM call. ``None`` when the store knows nothing of the session."""
        if self._settle is not None:
            await self._settle()
        messages = main_branch(await self.store.session_messages(session_id))
        distillations = tier_of(self.store, DistillationStore)
        # A store without distillations: the summary is an extractive log of every message.
        written = await distillations.list_distillations(session_id) if distillations is not None else []
        live = [d for d in written if not d.archived]
        if not messages and not live:
            return None
        done = await distillations.distilled_message_ids(session_id) if distillations is not None else set()
        tail = [m for m in _inputs(messages) if m.id not in done]
        parts = [d.text.strip() for d in sorted(live, key=lambda d: (-d.generation, d.created_at))]
        if tail:
            parts.append(extractive_observe(tail, "\n\n".join(parts)).strip())
        return "\n\n".join(p for p in parts if p) or None

    async def _reflect(
        self, session_id: str, project: str, live: list[StoredDistillation], report: DistillReport
    ) -> None:
        gen0 = sorted((d for d in live if d.generation == 0), key=lambda d: (d.end, d.created_at, d.id))
        if len(gen0) < max(1, self.config.meta_threshold) or self.reflector is None:
            return
        keep = max(0, self.config.recent_segments_to_keep)
        consolidate = gen0[: len(gen0) - keep] if keep else gen0
        if not consolidate:
            return
        metas = sorted((d for d in live if d.generation >= 1), key=lambda d: (d.created_at, d.id))
        previous = metas[-1] if metas else None
        observations = [ObservationInput(d.id, d.text, d.start, d.end, d.generation) for d in consolidate]
        try:
            dist = await self.reflector.reflect(
                observations, previous.text if previous else "", session_id=session_id
            )
        except WorkerUnavailable as exc:
            report.notes.append(f"consolidation waits: worker unavailable ({exc.reason})")
            return
        sources = [d.id for d in consolidate] + ([previous.id] if previous else [])
        row = _row(dist, session_id, project, sources)
        if previous is not None:
            row.start = min(row.start, previous.start) if previous.start else row.start
        if await self.distillations.write_distillation(row, archive=sources):
            report.reflected += 1
            report.archived += len(sources)
            self.counts["gen1"] += 1

    async def distill_all(
        self, session_ids: Sequence[str] | None = None, progress: Progress | None = None
    ) -> list[DistillReport]:
        """``lore distill``: every given (or recently updated) session, one after another."""
        if session_ids is None:
            session_ids = [s.id for s in await self.store.list_sessions(limit=10_000)]
        reports = []
        for index, sid in enumerate(session_ids):
            reports.append(await self.distill_session(sid))
            if progress is not None:
                progress(index + 1, len(session_ids))
        return reports

    # -- reporting -----------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return {
            "idle_timeout_seconds": self.config.idle_timeout_seconds,
            "tracked_sessions": len(self._seen),
            "running": len(self._tasks),
            # Session ids: the local API's status shows them, the open /health does not.
            "running_sessions": sorted(self._tasks),
            # Sessions whose turns asked for a run not started yet (every slot busy).
            "turn_runs_waiting": len(self._turned),
            # Sessions dropped from tracking since start: runs did not keep up (overload).
            "untracked_sessions": self.untracked,
            "counts": dict(self.counts),
            "last_error": self.last_error,
        }
