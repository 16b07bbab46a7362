"""The running gateway: what one gateway process holds (configuration, plugins, the store and
its writer, the upstream client, the background workers), built, started, stopped and
reported on here. The request path itself is :mod:`lore_core.pipeline`, whose phases read
what they need from the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import inspect
import json
import logging
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any

import pluggy

from lore_core import __version__
from lore_core.builtin.handlers import builtin_handlers
from lore_core.config import LoreConfig, default_data_dir, upstream_env_var
from lore_core.context.economics import CostTracker, Throttle
from lore_core.context.manager import ContextManager
from lore_core.context.pricing import PriceTable
from lore_core.context.spend import SpendBook
from lore_core.distill.scheduler import DistillScheduler
from lore_core.events.log import EventLog
from lore_core.http.access import SessionOwners, TokenKeeper, allowed_upstreams, owner_key
from lore_core.http.metrics import Metrics, opentelemetry_tracer
from lore_core.http.peers import PeerUsers
from lore_core.interfaces import (
    Codec,
    EditPolicy,
    Embedder,
    Store,
)
from lore_core.knowledge.book import KnowledgeBook
from lore_core.knowledge.contradictions import ContradictionFinder, ContradictionJudge
from lore_core.knowledge.curation import KnowledgeUpkeep
from lore_core.knowledge.entities import EntityBook
from lore_core.knowledge.inject import KnowledgeInjector
from lore_core.pipeline.send import Pacer
from lore_core.pipeline.upstream import UpstreamClient
from lore_core.plugins import Registry, bootstrap
from lore_core.recall.indexer import VectorIndexer
from lore_core.recall.memory import RecallMemory
from lore_core.recall.sources import StoreSessionDirectory, choose_embedder, vector_index_name
from lore_core.recall.store_engine import store_recall_engine
from lore_core.recall.tool import TOOL_NAME
from lore_core.storage.amnesia import Amnesia
from lore_core.storage.forget import ForgetReport, forget_stored_session
from lore_core.storage.journal import Journal
from lore_core.storage.private import private_directory
from lore_core.storage.writer import StoreWriter, choose_store
from lore_core.worker.client import WorkerClient

log = logging.getLogger("lore.gateway")

#: How often new spend is written to the store (a restart loses at most this much).
SPEND_SAVE_SECONDS = 5.0
#: How long a forget waits for the store to write what it was given before.
FORGET_SETTLE_SECONDS = 30.0


class ForgetFailed(Exception):
    """A forget that could not start; the message says why and that nothing was forgotten."""


async def await_all(results: Iterable[Any]) -> None:
    """Await whatever awaitables lifecycle hook implementations returned."""
    for result in results:
        if inspect.isawaitable(result):
            await result


class Gateway:
    """Everything one gateway process holds. Built by :meth:`load`; started by ``app.py``."""

    def __init__(self, config: LoreConfig, pm: pluggy.PluginManager, registry: Registry) -> None:
        self.config = config
        # The data directory (token, default store, logs) is its owner's only, a store made
        # before with looser modes included: before anything is written there.
        secure_data_dir(default_data_dir())
        # Who may talk to the gateway (lore_core/http/access.py): made or read at start.
        self.tokens = TokenKeeper(config)
        self.pm = pm
        self.registry = registry
        self.upstream = UpstreamClient(config.upstream)
        self.started_at = time.time()
        self.stats: Counter[str] = Counter()
        # The request log line and /lore/api/metrics (lore_core/http/metrics.py).
        self.metrics = Metrics(log_requests=config.server.log_requests)
        if config.server.trace_requests:
            self.metrics.tracer = opentelemetry_tracer()
        self.cwd = os.getcwd()
        #: Every harness, by name: the one that recognises a request best identifies it.
        self.harnesses = sorted(registry.harnesses.values(), key=lambda h: h.name)
        # The store is opened in start(); every finished exchange is queued to it.
        self.store = choose_store(config, registry.stores)
        journal_dir = self.store.journal_dir
        journal = Journal(journal_dir, fsync=config.store.fsync) if journal_dir is not None else None
        self.writer = StoreWriter(self.store, config.store, journal)
        # Background LLM work (distillation, curation) borrows each session's credentials,
        # held in memory only, or uses the worker configured in .lore.json.
        self.price_table = PriceTable.from_config(config)
        self.worker = WorkerClient(
            config.worker,
            config.upstream,
            codecs=registry.codecs,
            providers=registry.providers,
            price_for=lambda model, usage: self.price_table.lookup(model).cost(usage),
        )
        # Spend from real usage and the price table; over the daily budget, upstream calls
        # wait a little (docs/context.md, cost tracker).
        self.costs = CostTracker(self.price_table, config.budget.daily_budget_usd)
        # ... kept in the store, so a restart neither resets the daily budget nor the
        # sessions' spend.
        self.spend = SpendBook(self.costs, self.store)
        self._spend_saver: asyncio.Task[None] | None = None
        self.throttle = Throttle(config.budget.max_delay_seconds)
        self.pacer = Pacer(self.costs, self.throttle, self.price_table)
        # /lore:amnesia: conversation positions of a session the store must not keep; and
        # what `lore forget` forgot, which the writer drops when a client resends it.
        self.amnesia = Amnesia(self.store)
        self.writer.forget_marks = self.amnesia
        self._forgetting = asyncio.Lock()
        # Whose memory a model request may reach (lore_core/pipeline/ownership.py): each
        # session's owning credentials (kept in the store), the loopback client's OS user,
        # the upstreams memory may go to.
        self.owners = SessionOwners(self.store, owner_key())
        self.peer_users = PeerUsers()
        self.allowed_upstreams = allowed_upstreams(config)
        if not self.peer_users.available:
            log.warning(
                "this system cannot tell which OS user a loopback client runs as: every local "
                "process counts as the gateway's user on the model routes (server.requireTokenForMemory "
                "makes memory need the token there)"
            )
        # Small fire-and-forget jobs of the request path (held so they are not collected).
        self._background: set[asyncio.Task[Any]] = set()
        # The gradient context manager: which layer each turn's prompt is sent at.
        self.context = ContextManager(
            config,
            self.price_table,
            self.store,
            registry.prompt_layers,
            distill_version=lambda: sum(self.distiller.counts.values()),
            distill_now=lambda sid: self.distiller.distill_session(sid, reason="urgent"),
            costs=self.costs,
        )
        # Long-term knowledge: every write goes through the book; the injector puts it in
        # each session's prompt, pinned per session (lore_core/knowledge/).
        self.knowledge = KnowledgeBook(self.store)
        # Entities (names, aliases, relations) beside it, through their own book.
        self.entities = EntityBook(self.store)
        if config.knowledge.enabled:
            self.context.knowledge = KnowledgeInjector(
                self.knowledge, config.knowledge, self.context.counter.text, entities=self.entities
            )
        self.embedder = choose_embedder(config, registry.embedders)
        # The engine behind `lore recall` (and the model's recall tool once it is wired).
        self.recall = store_recall_engine(
            self.store,
            self.worker,
            self.embedder,
            expand=expansion_enabled(config),
            expansion_timeout=config.recall.expand_timeout_seconds,
            entities=self.entities,
            expand_aliases=config.recall.expand_aliases,
            vector_index=self._serving_vector_index,
        )
        # The event log agents write to (POST /v1/events) and the engine packs read it with
        # (POST /v1/pack): recall's, with legs bounded by the partial-result timeout.
        self.events = EventLog(self.store, config.events)
        self.pack_engine = store_recall_engine(
            self.store,
            None,
            self.embedder,
            entities=self.entities,
            expand_aliases=config.recall.expand_aliases,
            source_timeout=config.events.retrieval_partial_timeout_ms / 1000,
            vector_index=self._serving_vector_index,
        )
        # Embeds what the store holds in the background, woken by each write.
        self.indexer: VectorIndexer | None = None
        if self.embedder is not None and config.embedding.index:
            self.indexer = VectorIndexer(
                self.store,
                self.embedder,
                batch_size=config.embedding.batch_size,
                max_chunks=config.embedding.max_chunks_per_item,
                batch_timeout=config.embedding.batch_timeout_seconds,
                store_ready=lambda: self.writer.opened,
            )
            self.writer.listeners.append(self.indexer.notify)
        # What went upstream for each recall the client saw only as a marker.
        self.recall_memory = RecallMemory(self.store)
        #: What plugins see of the gateway (lifecycle and exchange hooks).
        self.app = GatewayApp(self)
        #: The tool whose calls the relay holds back and the gateway runs.
        self.recall_tool_name = TOOL_NAME
        _report_codec_features(registry.codecs.values())
        _report_codec_upstreams(registry, config)
        # Distillation runs in the background on idle sessions (never on the request path);
        # the knowledge curator follows it, .lore.md and decay run beside it.
        curators = registry.choose_curators(config, self.worker)
        # Contradictions are judged by the worker under the same rule as curation.
        self.contradictions = ContradictionFinder(
            self.knowledge,
            # The LLM curator's rule: distill.observer "extractive" means no LLM calls in the
            # background, so none for contradictions either.
            ContradictionJudge(self.worker) if config.distill.observer == "llm" else None,
            self.embedder,
            include_sensitive=config.knowledge.worker_sees_sensitive,
        )
        self.knowledge_upkeep = KnowledgeUpkeep(
            self.knowledge,
            config.knowledge,
            curators.knowledge,
            self.embedder,
            contradictions=self.contradictions,
            entities=self.entities,
        )
        self.distiller = DistillScheduler(
            self.store,
            config.distill,
            self.worker,
            settle=self.settle_writes,
            observer=curators.observer,
            reflector=curators.reflector,
            after_run=self.knowledge_upkeep.after_distill,
        )
        #: Requests the gateway answers itself, in the order they are asked.
        self.request_handlers = sorted(
            [*builtin_handlers(self), *registry.request_handlers], key=lambda h: (h.priority, h.name)
        )

    @classmethod
    def load(
        cls,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        load_entrypoints: bool = True,
        extra_plugins: Iterable[object] = (),
    ) -> Gateway:
        """Plugins first (they declare config sections), then the configuration
        (:func:`lore_core.plugins.bootstrap`, as every ``lore`` command does)."""
        boot = bootstrap(env, cwd, load_entrypoints, extra_plugins)
        return cls(boot.config, boot.pm, boot.registry)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self.upstream.start()
        # A store that cannot open leaves the writer degraded (it retries); never fatal.
        await self.writer.start()
        if self.indexer is not None:
            await self.indexer.start()
        await self.distiller.start()
        await self.knowledge_upkeep.start()
        await self.events.start()
        self._spend_saver = asyncio.create_task(self._save_spend_periodically(), name="lore-spend-saver")
        # The embedder is not loaded here: the indexer loads it when it has something to
        # embed, a recall when it embeds its query. An idle gateway does not hold the model
        # (about 100 MB with its runtime); /health says it "loads on first use".
        await await_all(self.pm.hook.lore_startup(app=self.app))

    async def stop(self) -> None:
        try:
            await await_all(self.pm.hook.lore_shutdown(app=self.app))
        finally:
            grace = self.config.server.shutdown_grace_seconds
            # An interrupted distillation is re-done on the next start (it is derived state).
            async with _stop_step("context manager"):
                await self.context.stop()
            async with _stop_step("distiller"):
                await self.distiller.stop()
            async with _stop_step("knowledge upkeep"):
                await self.knowledge_upkeep.stop()
            async with _stop_step("event log"):
                # An unfinished step is redone at the next start (the events are stored).
                await self.events.stop()
            async with _stop_step("spend"):
                if self._spend_saver is not None:
                    self._spend_saver.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._spend_saver
                await self.spend.save()
            if self.indexer is not None:
                # Before the writer closes the store: the batch in progress is written.
                async with _stop_step("vector indexer"):
                    await self.indexer.stop(grace)
            # Flush every queued exchange before the process goes away.
            async with _stop_step("store"):
                await self.writer.stop(grace)
            await self.worker.close()
            await self.upstream.close()
            # The embedder's inference thread goes with the gateway (the process keeps the model).
            if self.embedder is not None:
                try:
                    await self.embedder.close()
                except Exception:
                    log.exception("closing the embedding provider failed")

    def spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run a small job of the request path in the background (held so it is not
        collected); dropped when no loop runs (a synchronous caller)."""
        try:
            task = asyncio.get_running_loop().create_task(work)
        except RuntimeError:
            work.close()
            return
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def stop_budget_seconds(self) -> float:
        """How long :meth:`stop` may take at most: the indexer's and the writer's grace, and a
        margin for the rest (closing the store, a checkpoint)."""
        return 2 * self.config.server.shutdown_grace_seconds + STOP_MARGIN_SECONDS

    async def _save_spend_periodically(self) -> None:
        """Load today's saved spend once the store is open, then save new spend every few
        seconds (never on the request path)."""
        while True:
            try:
                if self.writer.opened:
                    await self.spend.load_today()
                    await self.spend.save()
            except Exception:
                log.exception("saving spend failed (tried again)")
            await asyncio.sleep(SPEND_SAVE_SECONDS)

    async def settle_writes(self, timeout: float = 5.0) -> None:
        """Let exchanges already queued reach the store before distillation (or a status
        report) reads it."""
        try:
            await self.writer.wait_idle(timeout=timeout)
        except TimeoutError:
            pass

    # -- recall ------------------------------------------------------------------------------

    def _serving_vector_index(self) -> str:
        """The vector index recall searches: the indexer's choice (the index a new one
        replaces, while that one backfills), else the embedder's own."""
        if self.indexer is not None:
            return self.indexer.serving_index()
        return vector_index_name(self.embedder) if self.embedder is not None else ""

    async def forget_session(self, session_id: str) -> ForgetReport | None:
        """``lore forget``: remove the session from the store and from what the gateway holds
        of it, and keep a resent history of it out (:mod:`lore_core.storage.forget`). ``None``
        when the store has nothing of it. Raises :class:`ForgetFailed` when the store cannot
        take what was submitted before (it would be written after the forget).

        Turns of the session that finish while this runs are not stored; the session's turns
        after it are (a history the client resends is not)."""
        async with self._forgetting:  # one at a time: each rewrites the store's files
            at = time.time()
            self.amnesia.hold(session_id)
            try:
                try:
                    # What was submitted before (the session's last turns) reaches the store,
                    # and so what is forgotten, and leaves the journal.
                    await self.writer.wait_idle(timeout=FORGET_SETTLE_SECONDS)
                    await self.writer.release_journal()
                except TimeoutError:
                    raise ForgetFailed(
                        f"the store has not written what it was given within {FORGET_SETTLE_SECONDS:.0f} s "
                        f"({self.writer.error or 'busy'}); nothing was forgotten, try again"
                    ) from None
                async with self.distiller.forgetting(session_id):
                    report = await forget_stored_session(self.store, self.amnesia, session_id, at)
            finally:
                self.amnesia.release(session_id)
            if report is None:
                return None
            # What the gateway holds in memory goes too: the writer's chains and known ids,
            # the context manager's state (the last request, distillations as prefix parts),
            # the recall tool's records, recall's cached session titles.
            mark = self.amnesia.forgotten(session_id)
            self.writer.forget(session_id, mark.ids if mark is not None else ())
            self.context.forget(session_id)
            self.recall_memory.forget(session_id)
            for engine in (self.recall, self.pack_engine):
                if isinstance(engine.sessions, StoreSessionDirectory):
                    engine.sessions.forget(session_id)
            log.info(
                "forgot session %s: %d messages, %d distillations, %d passages, %d vectors (%.2f s)",
                session_id,
                report.messages,
                report.distillations,
                report.passages,
                report.vectors,
                report.seconds,
            )
            return report

    # -- reporting ---------------------------------------------------------------------------

    def degraded(self) -> list[str]:
        """What does not work right now, one line each; empty when everything does. Traffic
        flows in every case: these are what the memory (or an upstream) lacks meanwhile."""
        out = []
        store = self.writer.health()
        if store["status"] != "ok":
            out.append(f"store: {store['error']}")
        if self.indexer is not None and self.indexer.error is not None:
            out.append(f"vector index: {self.indexer.error}")
        worker = self.worker.status()
        if worker["state"] == "circuit_open":
            out.append(f"worker: {worker['reason']}")
        out += [f"upstream {origin}: {reason}" for origin, reason in self.upstream.failing.items()]
        return out

    def health(self, private: bool = False) -> dict[str, Any]:
        """What ``/health`` shows anyone on loopback; ``private`` (the local API's status,
        behind the token) adds what names sessions: they are what reaches a session's
        memory."""
        degraded = self.degraded()
        distill = self.distiller.health()
        if not private:
            del distill["running_sessions"]
        return {
            # "degraded": the proxy passes traffic, but something in "degraded" fails.
            "status": "degraded" if degraded else "ok",
            "degraded": degraded,
            "version": __version__,
            "uptime_seconds": round(time.time() - self.started_at, 1),
            "upstreams": dict(self.upstream.urls),
            "plugins": sorted(name for name, plugin in self.pm.list_name_plugin() if plugin is not None),
            "stats": dict(self.stats),
            "store": self.writer.health(),
            "worker": self.worker.status(),
            "distill": distill,
            "context": self.context.health(),
            "embedder": _embedder_health(self.embedder),
            "indexer": self.indexer.health() if self.indexer is not None else {"ok": False, "state": "off"},
            "spend": {
                "today_usd": round(self.costs.day_cost(), 6),
                "daily_budget_usd": self.costs.daily_budget_usd,
            },
            "throttle": self.throttle.counters(),
            "events": self.events.health(),
            "knowledge": {"curation": dict(self.knowledge_upkeep.counts)},
        }


def secure_data_dir(directory: Path) -> None:
    """:func:`~lore_core.storage.private.private_directory` on the data directory; a failure
    is logged, not fatal (the token or the store then says what it cannot write)."""
    try:
        private_directory(directory)
    except OSError as exc:
        log.warning("cannot make the data directory %s owner-only: %s", directory, exc.strerror or exc)


def expansion_enabled(config: LoreConfig) -> bool:
    """Whether recall asks the worker for rephrasings (``recall.expand``): ``auto`` only when
    a worker is configured for background work, so that by default no recall waits for, or
    pays for, a call of the session's own (main) model."""
    mode = config.recall.expand
    if mode == "auto":
        worker = config.worker
        return bool(worker.model or worker.upstream or worker.api_key)
    return mode == "always"


def _embedder_health(embedder: Embedder | None) -> dict[str, Any]:
    if embedder is None:
        return {"ok": False, "detail": "no embedding provider installed: recall uses full-text search only"}
    try:
        return {"provider": embedder.name, **embedder.health()}
    except Exception as exc:
        return {"provider": embedder.name, "ok": False, "detail": f"health check failed: {exc}"}


class GatewayApp:
    """:class:`~lore_core.interfaces.LoreApp` over a gateway: what its plugins see."""

    def __init__(self, gateway: Gateway) -> None:
        #: The gateway itself: for the kernel's own request handlers only (not in LoreApp).
        self.gateway = gateway

    @property
    def config(self) -> LoreConfig:
        return self.gateway.config

    @property
    def store(self) -> Store:
        return self.gateway.store

    @property
    def store_open(self) -> bool:
        return self.gateway.writer.opened

    @property
    def cwd(self) -> str:
        return self.gateway.cwd

    def stats(self) -> dict[str, int]:
        return dict(self.gateway.stats)


def _report_codec_features(codecs: Iterable[Codec]) -> None:
    """Say which optional features a codec does not supply: they are off for its API."""
    for codec in codecs:
        missing = []
        if codec.recall is None:
            missing.append("the recall tool")
        if codec.stream_editor(EditPolicy(hold_tool=None, context_limit=0, usage_share=0.0)) is None:
            missing.append("streamed recall rounds and usage scaling")
        if codec.buffered_editor(EditPolicy(hold_tool=None, context_limit=0, usage_share=0.0)) is None:
            missing.append("non-streamed recall rounds and usage scaling")
        if codec.worker_request("model", "", "", 1) is None:
            missing.append("worker calls")
        if missing:
            log.info("codec %s does not supply %s: off for its API", codec.api, ", ".join(missing))


def _report_codec_upstreams(registry: Registry, config: LoreConfig) -> None:
    """Warn of a codec whose provider has no upstream: its requests get a 502 until one is
    configured (or a model prefix or ``X-Lore-Upstream-URL`` names one)."""
    for codec in registry.codecs.values():
        if codec.provider in config.upstream.urls:
            continue
        if codec.provider in registry.providers:
            where = f"upstream.{codec.provider} or {upstream_env_var(codec.provider)}"
        else:
            where = "a plugin declaring it (lore_register_providers)"
        log.warning(
            "codec %s speaks the provider %r, which has no upstream: its requests are refused "
            "(502) unless upstream.byModelPrefix or X-Lore-Upstream-URL names one; needs %s",
            codec.api,
            codec.provider,
            where,
        )


#: What stopping may take beyond the indexer's and the writer's grace (closing the store
#: checkpoints DuckDB; the full-text index thread is waited for a few seconds).
STOP_MARGIN_SECONDS = 60.0
#: A step of the stop slower than this is logged with its time.
_SLOW_STOP_STEP_SECONDS = 2.0


@contextlib.asynccontextmanager
async def _stop_step(what: str) -> AsyncIterator[None]:
    """Log a step of the gateway's stop that took long (a slow stop says where it waited)."""
    started = time.monotonic()
    try:
        yield
    finally:
        took = time.monotonic() - started
        if took >= _SLOW_STOP_STEP_SECONDS:
            log.info("stopping: the %s took %.1f s", what, took)


# ---------------------------------------------------------------------------------------------
# One gateway per store
# ---------------------------------------------------------------------------------------------
#
# DuckDB lets one process write a file; a second gateway on the same store used to start
# anyway, store nothing durable and log a traceback every few seconds. So `lore serve` claims
# the store first: an exclusive lock on a file beside the store's own, which names the gateway
# holding it and which the system drops when that process ends (kill -9 included).


class StoreHeld(Exception):
    """Another gateway holds this store; the message says which and what to do."""


class StoreClaim:
    """This process's claim on a store (:func:`claim_store`), held until :meth:`release`."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # drops the lock
            self._fd = None


def store_claim_path(store: Store) -> Path | None:
    """Where a gateway's claim on ``store`` is kept: beside the store's journal, named after the
    store (``lore.duckdb.gateway``); ``None`` for a store that keeps nothing across a restart
    (every gateway then has its own)."""
    journal = store.journal_dir
    if journal is None:
        return None
    return journal.with_name(journal.name.removesuffix(".journal") + ".gateway")


def claim_store(store: Store, url: str) -> StoreClaim | None:
    """Claim ``store`` for the gateway about to serve at ``url``; raise :class:`StoreHeld`
    when another gateway holds it. ``None`` when there is nothing to claim, or the claim file
    cannot be made (the store then reports its own error when it opens)."""
    path = store_claim_path(store)
    if path is None:
        return None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        log.warning("cannot claim the store at %s: %s", path, exc.strerror or exc)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _read_claim(fd)
        os.close(fd)
        raise StoreHeld(held_message(store, holder)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "url": url, "since": time.time()}).encode(), 0)
    return StoreClaim(path, fd)


def store_holder(store: Store) -> dict[str, Any] | None:
    """The gateway holding ``store`` now (``{"pid": ..., "url": ...}``, either may be missing),
    or ``None`` when no gateway does."""
    path = store_claim_path(store)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            # A shared lock is granted only while nobody holds the exclusive one.
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _read_claim(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_claim(fd: int) -> dict[str, Any]:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def held_message(store: Store, holder: Mapping[str, Any]) -> str:
    """What to say when ``holder`` (:func:`store_holder`) holds the store another process wants."""
    where = store.location or store.name
    pid, url = holder.get("pid"), holder.get("url")
    who = f"the gateway at {url}" if url else "another gateway"
    if pid:
        who += f" (pid {pid})"
    port = str(url).rsplit(":", 1)[-1] if url else ""
    stop = f"lore stop --port {port}" if port.isdigit() else "lore stop"
    return (
        f"the store {where} is in use by {who}. Use that gateway, stop it first ({stop}), "
        "or give this one another store (LORE_DB_PATH=... or store.path in .lore.json)"
    )
