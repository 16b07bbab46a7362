"""The store writer: finished exchanges go through an async queue, in batches, off the hot path.

``submit`` turns a finished exchange into records (message ids, masking: only the messages
the session's previous exchanges did not have, a fraction of a millisecond), appends them to
the journal (:mod:`lore_core.storage.journal`) and queues them; the response to the client never
waits for the store. A background task wakes on the first queued batch, waits at most
``store.flushIntervalMs`` for more and hands the store one merged
:class:`~lore_core.storage.records.WriteBatch`. So an exchange is in the store within about the flush
interval plus one write; until then the journal holds it, and a gateway killed in between
replays it at its next start. ``stop`` flushes everything on a clean shutdown.

Store failures never reach the proxy. The first failure makes the writer *degraded*: one
error line in the log, the reason on ``/health``; the batch stays pending and is retried with
backoff (a store that could not open is reopened), with at most ``store.maxPendingMessages``
held in memory. The first success after that logs one line saying the store recovered.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from lore_core.config import ConfigError, LoreConfig, StoreConfig
from lore_core.install import plugin_hint
from lore_core.interfaces import Store, StoreFactory, StoreTierError, check_tiers
from lore_core.model import Exchange
from lore_core.storage.convert import records_from_exchange
from lore_core.storage.forget import ForgetMark, drop_forgotten
from lore_core.storage.identity import ChainMemo
from lore_core.storage.journal import Journal, JournalError
from lore_core.storage.records import StoreUnavailable, WriteBatch

log = logging.getLogger("lore.store")

#: Exchanges' batches merged into one write at most, so one write stays short.
MAX_BATCH_EXCHANGES = 2000
#: Message ids remembered as stored, so a resent history is not even converted to rows
#: (~140 bytes each; a session whose ids were forgotten has its next resend converted and
#: skipped by the store instead).
KNOWN_IDS = 100_000
_BACKOFF = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class ForgetMarks(Protocol):
    """Where the writer finds what of a session was forgotten (``lore forget``; the gateway's
    :class:`~lore_core.storage.amnesia.Amnesia`)."""

    def forgotten(self, session_id: str) -> ForgetMark | None:
        """The session's mark, from memory (``None``: nothing forgotten)."""
        ...

    async def load(self, session_id: str) -> Any:
        """Read the session's mark from the store into memory."""
        ...


class StoreWriter:
    """Owns the store for the gateway: opens it, writes batches, reports its health."""

    def __init__(self, store: Store, config: StoreConfig, journal: Journal | None = None) -> None:
        self.store = store
        self.flush_interval = max(0.0, config.flush_interval_ms / 1000.0)
        self.max_pending = max(1, config.max_pending_messages)
        #: Where submitted records wait until the store commits them (None: not kept).
        self.journal = journal
        self.journal_error: str | None = None
        self._queue: asyncio.Queue[WriteBatch] | None = None
        self._queued_messages = 0  # in the batches on _queue (not yet collected)
        self._task: asyncio.Task[None] | None = None
        self._pending = WriteBatch()
        self._known: OrderedDict[str, None] = OrderedDict()
        # Message ids of each session's last exchange, so a resent history is not hashed again.
        self._chains = ChainMemo()
        self._opened = False
        self._stopping = False
        self._failures = 0
        self._idle: asyncio.Event | None = None
        # Batches submitted (or replayed), taken into _pending, and taken when the last write
        # committed: a reader waits for what was submitted before it, not for an empty queue,
        # which steady traffic never leaves (every wait_idle would time out).
        self._submitted = 0
        self._taken = 0
        self._written = 0
        self._progress = asyncio.Event()
        self._wakeup = asyncio.Event()
        # Set by a reader waiting for the write (wait_idle): the batching pause ends.
        self._urgent = asyncio.Event()
        self._lock = asyncio.Lock()
        self.error: str | None = None
        #: Called with the number of new messages after each write that added some (the
        #: vector indexer wakes on it). Must be cheap and not block.
        self.listeners: list[Callable[[int], None]] = []
        #: What of each session was forgotten: what a client resends of it is dropped before
        #: it is journaled or queued (lore_core.storage.forget). ``None``: nothing is.
        self.forget_marks: ForgetMarks | None = None
        self.stats: dict[str, Any] = {
            "exchanges": 0,
            "messages_written": 0,
            "batches": 0,
            "dropped_messages": 0,
            "forgotten_messages": 0,
            "last_flush_at": None,
        }

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._idle = asyncio.Event()
        self._idle.set()
        await self._try_open()
        self._replay_journal()
        await self._drop_forgotten_replay()
        self._task = asyncio.create_task(self._run(), name="lore-store-writer")

    def _replay_journal(self) -> None:
        """What an earlier run acknowledged but did not commit becomes pending again (the
        store skips what it has: writes are idempotent)."""
        if self.journal is None:
            return
        try:
            batches = self.journal.open()
        except JournalError as exc:
            self._journal_failed(str(exc))
            self.journal = None
            return
        for batch in batches:
            self._pending.extend(batch)
        self._submitted += len(batches)
        self._taken += len(batches)
        if batches:
            self._pending = self._pending.merged()
            for m in self._pending.messages:
                self._known[m.id] = None
            log.warning(
                "store: replaying %d exchanges (%d messages) the last run acknowledged but had not written",
                len(batches),
                len(self._pending.messages),
            )
            assert self._idle is not None
            self._idle.clear()
            self._wakeup.set()

    async def _drop_forgotten_replay(self) -> None:
        """A replayed record of a session forgotten since it was journaled is not written
        (``lore forget`` waits for the journal to empty, so this is for a crash in between)."""
        if self.forget_marks is None or not self._pending:
            return
        for session_id in {m.session_id for m in self._pending.messages}:
            await self.forget_marks.load(session_id)
        self._pending, dropped = drop_forgotten(self._pending, self.forget_marks.forgotten)
        if dropped:
            self.stats["forgotten_messages"] += dropped
            log.warning("store: %d replayed messages belong to forgotten sessions; not written", dropped)

    async def stop(self, timeout: float = 10.0) -> None:
        """Flush everything queued, then close the store."""
        self._stopping = True
        if self._task is not None:
            try:
                await asyncio.wait_for(self._drain(), timeout)
            except TimeoutError:
                log.error("store: shutdown flush timed out; %d messages not written", self.queued)
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self._opened:
            try:
                await self.store.close()
            except Exception as exc:
                log.error("store: closing %s failed: %s", self.store.name, exc)
            self._opened = False
        if self.journal is not None:
            # Everything written: nothing to replay. Otherwise the journal stays for the
            # next start.
            self.journal.close(committed=not self.queued and self.error is None)

    async def _drain(self) -> None:
        assert self._queue is not None
        while self._queue.qsize() or self._pending:
            if not self._opened and not await self._try_open():
                return  # nothing can be written; stop() reports it
            await self._flush_once()
            if self.error:
                return

    # -- the hot path's side ---------------------------------------------------------------

    def submit(self, exchange: Exchange) -> None:
        """Turn a finished exchange into records, journal and queue them. Never waits for
        the store, never raises into the proxy."""
        if self._queue is None:
            return
        self.stats["exchanges"] += 1
        try:
            batch = records_from_exchange(exchange, self._known, self._chains)
        except Exception:
            log.exception("store: could not turn an exchange of session %s into records", exchange.session_id)
            return
        # One lookup for a session never forgotten (the request path's only cost of forget).
        if self.forget_marks is not None and self.forget_marks.forgotten(exchange.session_id) is not None:
            try:
                batch, dropped = drop_forgotten(batch, self.forget_marks.forgotten, exchange.started_at)
            except Exception:
                # Never store what may be forgotten: the exchange is dropped whole.
                log.exception("store: could not check session %s for forgotten messages", exchange.session_id)
                return
            self.stats["forgotten_messages"] += dropped
        # Known from now on: the session's next exchange resends these and must not queue
        # them again. Dropped pending messages are forgotten again (_bound_pending).
        for m in batch.messages:
            self._known[m.id] = None
        while len(self._known) > KNOWN_IDS:
            self._known.popitem(last=False)
        if self.journal is not None:
            try:
                self.journal.append(batch)
            except (OSError, JournalError) as exc:
                self._journal_failed(f"appending to the journal failed: {_one_line(exc)}")
            else:
                if self.journal_error is not None:
                    log.warning("store: the journal works again")
                    self.journal_error = None
        self._queue.put_nowait(batch)
        self._queued_messages += len(batch.messages)
        self._submitted += 1
        if self._idle is not None:
            self._idle.clear()
        self._wakeup.set()

    def _journal_failed(self, reason: str) -> None:
        if self.journal_error != reason:
            log.error("store: %s (exchanges are kept in memory until written)", reason)
        self.journal_error = reason

    def knows_any(self, message_ids: Sequence[str]) -> bool:
        """Whether one of these messages was submitted lately (written or still queued):
        what the store may not have yet."""
        return any(mid in self._known for mid in message_ids)

    def forget(self, session_id: str, message_ids: Collection[str]) -> None:
        """Drop a forgotten session from what the writer remembers (its chains, the ids it
        knows as stored) and from what waits to be written (nothing, once :meth:`wait_idle`
        returned, unless a write failed meanwhile)."""
        self._chains.forget(session_id)
        for ident in message_ids:
            self._known.pop(ident, None)
        if self._pending.messages:
            self._pending.messages = [m for m in self._pending.messages if m.session_id != session_id]

    async def release_journal(self) -> None:
        """Delete the journal's segments whose records are written (a flush with nothing new
        to write seals the current segment): after :meth:`wait_idle`, what was submitted before
        is then in the store only."""
        if self._queue is not None:
            await self._flush_once()

    @property
    def queued(self) -> int:
        """Messages submitted and not yet written."""
        return self._queued_messages + len(self._pending.messages)

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until everything submitted so far is written (recall, ``/lore/api``, tests);
        what is submitted meanwhile is not waited for. A reader waiting is a reason to write
        now: the writer skips what is left of its batching pause (``store.flushIntervalMs``),
        so a recall right after a turn waits for one write, not for the interval. Raises
        ``TimeoutError`` after ``timeout`` seconds."""
        target = self._submitted
        if self._queue is None or self._written >= target:
            return
        self._urgent.set()
        async with asyncio.timeout(timeout):
            while self._written < target:
                await self._progress.wait()

    def _advance(self) -> None:
        """Everything taken into ``_pending`` so far is written (or was nothing): wake the
        readers waiting for it."""
        self._written = self._taken
        self._progress.set()
        self._progress = asyncio.Event()

    async def _pause(self, seconds: float) -> None:
        """Sleep up to ``seconds`` for more exchanges to share a write, unless a reader is
        waiting for it (:meth:`wait_idle`)."""
        if seconds <= 0 or self._urgent.is_set():
            return
        try:
            # Not asyncio.wait_for: on Python 3.11 it can lose a cancellation (stop()).
            async with asyncio.timeout(seconds):
                await self._urgent.wait()
        except TimeoutError:
            pass

    # -- the background task ---------------------------------------------------------------

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        last_flush = -math.inf
        while True:
            if not self._pending and not self._queue.qsize():
                # Sleep until an exchange arrives, without taking it off the queue.
                self._wakeup.clear()
                await self._wakeup.wait()
                # Give the exchanges that finish together a chance to share one write.
                await self._pause(self.flush_interval)
            elif self._queue.qsize() < MAX_BATCH_EXCHANGES:
                # Under steady traffic the queue is never empty after a write: still at most
                # one write per interval. A write has a fixed cost (DuckDB: a few ms per
                # statement, whatever the row count), so writing back to back in batches of
                # a few exchanges would spend a CPU core on it and slow the proxy.
                await self._pause(last_flush + self.flush_interval - loop.time())
            self._urgent.clear()
            if not self._opened and not await self._try_open():
                await asyncio.sleep(self._backoff())
                continue
            last_flush = loop.time()
            await self._flush_once()
            if self.error:
                await asyncio.sleep(self._backoff())

    async def _flush_once(self) -> None:
        async with self._lock:  # the run loop and stop() may both flush
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        assert self._queue is not None
        batches = self._collect()
        if batches:
            for queued in batches:
                self._pending.extend(queued)
            self._pending = self._pending.merged()
            self._bound_pending()
        # Everything journaled so far is pending now (or written): once this write commits,
        # the journal's segments up to here can go.
        sealed = self.journal.seal() if self.journal is not None and not self._queue.qsize() else None
        if not self._pending:
            self._release_journal(sealed)
            self._advance()
            self._mark_idle()
            return
        batch = self._pending
        try:
            added = await self.store.write(batch)
        except Exception as exc:
            self._degrade(f"writing to the {self.store.name} store failed: {_one_line(exc)}")
            return
        self._pending = WriteBatch()
        self._release_journal(sealed)
        self._advance()
        self.stats["messages_written"] += int(added or 0)
        if added:
            for listener in self.listeners:
                try:
                    listener(int(added))
                except Exception:
                    log.exception("store: a write listener failed")
        self.stats["batches"] += 1
        self.stats["last_flush_at"] = time.time()
        self._recovered()
        self._mark_idle()

    def _release_journal(self, sealed: int | None) -> None:
        if self.journal is not None and sealed is not None:
            self.journal.release(sealed)

    def _collect(self) -> list[WriteBatch]:
        assert self._queue is not None
        out: list[WriteBatch] = []
        while len(out) < MAX_BATCH_EXCHANGES:
            try:
                batch = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            out.append(batch)
            self._queued_messages -= len(batch.messages)
        self._taken += len(out)
        return out

    def _mark_idle(self) -> None:
        if (
            self._idle is not None
            and self._queue is not None
            and not self._queue.qsize()
            and not self._pending
        ):
            self._idle.set()

    def _bound_pending(self) -> None:
        extra = len(self._pending.messages) - self.max_pending
        if extra > 0:
            # Oldest first: the newest messages are the ones the next turn resends anyway
            # (and is let to store them again: they are not known any more).
            for m in self._pending.messages[:extra]:
                self._known.pop(m.id, None)
            del self._pending.messages[:extra]
            self.stats["dropped_messages"] += extra
            log.error("store: %d pending messages dropped (the store has been failing)", extra)

    # -- failure handling ------------------------------------------------------------------

    async def _try_open(self) -> bool:
        try:
            await self.store.open()
        except Exception as exc:
            reason = str(exc) if isinstance(exc, StoreUnavailable) else _one_line(exc)
            self._degrade(f"the {self.store.name} store cannot be opened: {reason}")
            return False
        self._opened = True
        self._recovered()
        return True

    def _degrade(self, reason: str) -> None:
        self._failures += 1
        if self.error != reason:
            # One line per distinct problem, not one per retry.
            log.error("store degraded (the proxy keeps passing traffic): %s", reason)
        self.error = reason

    def _recovered(self) -> None:
        if self.error is not None:
            log.warning("store recovered: %s works again", self.store.name)
        self.error = None
        self._failures = 0

    def _backoff(self) -> float:
        return _BACKOFF[min(self._failures, len(_BACKOFF)) - 1] if self._failures else self.flush_interval

    # -- reporting -------------------------------------------------------------------------

    @property
    def opened(self) -> bool:
        return self._opened

    @property
    def degraded(self) -> bool:
        return self.error is not None or self.journal_error is not None

    def health(self) -> dict[str, Any]:
        try:
            backend = self.store.health()
        except Exception as exc:
            backend = {"ok": False, "detail": _one_line(exc)}
        return {
            "backend": self.store.name,
            "status": "degraded" if self.degraded else "ok",
            "error": self.error or self.journal_error,
            "queued": self.queued,
            "flush_interval_ms": round(self.flush_interval * 1000),
            **self.stats,
            "store": backend,
            "journal": self.journal.health() if self.journal is not None else None,
        }


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, StoreUnavailable) else text


def choose_store(config: LoreConfig, stores: Mapping[str, StoreFactory]) -> Store:
    """The configured backend; by default ``duckdb`` when installed, else the in-memory
    reference store (with a warning: nothing persists)."""
    name = config.store.backend
    if not name:
        name = "duckdb" if "duckdb" in stores else "memory"
        if name == "memory":
            log.warning(
                "no persistent store is installed, messages are kept in memory only; "
                "add lore-store-duckdb with: %s",
                plugin_hint("lore-store-duckdb"),
            )
    factory = stores.get(name)
    if factory is None:
        known = ", ".join(sorted(stores)) or "none"
        raise ConfigError(f"store.backend: no store backend named {name!r} is installed (installed: {known})")
    store = factory(config)
    try:
        check_tiers(store)  # once, at start-up: a tier declared and not implemented stops here
    except StoreTierError as exc:
        raise ConfigError(f"store.backend: {exc}") from None
    return store
