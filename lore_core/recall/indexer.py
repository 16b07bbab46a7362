"""The background vector indexer: embeds what the store holds, off the request path.

Whatever the store reports as pending for the embedder's model (messages as the writer
lands them, distillations as the distiller writes them, and after a model change everything:
the backfill) is embedded in batches of ``embedding.batchSize`` items: each item is cut into
its passages (:mod:`lore_core.storage.passages`, the units the full-text index holds too), at most
``embedding.maxChunksPerItem`` of them are embedded (a passage is sized to fit the model),
each with its facets (the sentences of a passage the user wrote, under the passage's index),
and the vectors written to the store under the passages' indexes, which marks the items
embedded. The index is keyed by the model and the passage and facet rules
(:func:`~lore_core.recall.sources.vector_index_name`): new rules start a new index, backfilled
like a model change, and the indexes of older rules for the same model are dropped. One
that differs only in its facet rules numbers the same passages, so recall keeps searching it
while the new one backfills (:meth:`VectorIndexer.serving_index`; on a store of months that
takes hours) and it is dropped once the new one has caught up.

Nothing is kept beside the store: after a crash or a failed batch the next pass asks the
store again, so no work is lost and none is done twice. At most one batch is held in
memory.

The embedder serves recall queries too; :class:`~lore_core.interfaces.Embedder`
implementations run one batch at a time, so a query waits for at most one batch of ours.

Used by the gateway (:meth:`VectorIndexer.start`, woken by the store writer after each
write) and by ``lore reindex`` (:meth:`VectorIndexer.run_until_idle` with a progress
callback, the gateway stopped).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from lore_core.interfaces import (
    Embedder,
    EmbedderUnavailable,
    Store,
    Tier,
    VectorStore,
    has_tier,
    require_tier,
)
from lore_core.recall.sources import PASSAGE_SEPARATOR, same_passages, vector_index_name
from lore_core.storage.facets import MAX_FACETS_PER_ITEM, embedded_body, facets
from lore_core.storage.passages import CallMemo, Passage, cut_text, message_passages
from lore_core.storage.records import VECTOR_MESSAGE, EmbeddingItem, ItemVectors

log = logging.getLogger("lore.indexer")

#: Passages embedded per item at most (``embedding.maxChunksPerItem``'s default).
DEFAULT_MAX_CHUNKS = 16
#: Compact the store's vector index after this long without new items (if it was written).
IDLE_OPTIMIZE_SECONDS = 30.0
_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
#: An embedder that cannot load is asked again this rarely (it caches its failure anyway).
_UNAVAILABLE_RETRY_SECONDS = 300.0
#: While busy, the backlog is counted again this often: under steady writes new items arrive
#: faster than a batch is embedded, and a count taken once when the work began went to 0 on
#: /health while tens of thousands waited (benchmarks/soak.py).
PENDING_RECOUNT_SECONDS = 30.0


def item_passages(item: EmbeddingItem, calls: CallMemo | None = None) -> list[Passage]:
    """The passages of a pending item, by the kernel's rules (:mod:`lore_core.storage.passages`):
    the same ones the store's full-text index holds, so both legs of recall rank the same
    units."""
    if item.kind == VECTOR_MESSAGE:
        if calls is not None:
            return calls.cut(item.session_id, item.role, item.blocks, item.text)
        return message_passages(item.role, item.blocks, item.text)
    return cut_text(item.text)


def embedded_passages(passages: Sequence[Passage], max_chunks: int = DEFAULT_MAX_CHUNKS) -> list[Passage]:
    """The passages of one item that get a vector: those with an
    :func:`~lore_core.storage.facets.embedded_body` (all that was said, a tool call's or
    output's first piece), at most ``max_chunks``: the first ones and the last (a long run
    of steps' head says what it set out to do, its end how it ended). Full-text search
    covers every passage either way."""
    passages = [p for p in passages if embedded_body(p) is not None]
    if len(passages) <= max_chunks:
        return list(passages)
    if max_chunks <= 1:
        return list(passages[:1])
    return [*passages[: max_chunks - 1], passages[-1]]


def embedded_texts(item: EmbeddingItem, passages: Sequence[Passage]) -> list[tuple[int, str]]:
    """``(passage index, text)`` of what gets a vector: each passage's
    :func:`~lore_core.storage.facets.embedded_body` (a tool call's or output's first piece
    only), and after it its facets (:func:`~lore_core.storage.facets.facets`, the
    sentences of what the user wrote), stored under the passage's index so a search finds
    the passage by either."""
    role = item.role if item.kind == VECTOR_MESSAGE else ""
    out: list[tuple[int, str]] = []
    room = MAX_FACETS_PER_ITEM
    for passage in passages:
        body = embedded_body(passage)
        if body is None:
            continue  # not one that gets a vector (embedded_passages leaves these out)
        out.append((passage.index, body))
        sentences = facets(role, passage)[:room] if room else []
        out.extend((passage.index, text) for text in sentences)
        room -= len(sentences)
    return out


class VectorIndexer:
    """Keeps the store's vector index for ``embedder``'s model current."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        batch_size: int = 64,
        max_chunks: int = DEFAULT_MAX_CHUNKS,
        interval: float = 2.0,
        store_ready: Callable[[], bool] | None = None,
        batch_timeout: float = 600.0,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.model = vector_index_name(embedder)
        self.batch_size = max(1, batch_size)
        self.max_chunks = max(1, max_chunks)
        self.interval = interval
        self.batch_timeout = batch_timeout
        self._store_ready = store_ready or (lambda: True)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False
        self._failures = 0
        self._written_since_optimize = 0
        self._last_item_at = 0.0
        self.state = "stopped"
        self.error: str | None = None
        self.pending: int | None = None
        self._pending_counted_at = 0.0
        self.items_indexed = 0
        self.vectors_written = 0
        self.batches = 0
        self.last_batch_seconds: float | None = None
        # Resolves the tools of results stored before results named them (a backfill).
        self._calls = CallMemo()
        #: The index this one replaces, kept for recall while this one backfills (same
        #: passages, other facet rules); None once it has caught up.
        self.previous: str | None = None

    @property
    def vectors(self) -> VectorStore:
        """The store's vector tier; :class:`~lore_core.interfaces.TierUnavailable` without it."""
        return require_tier(self.store, VectorStore)

    def serving_index(self) -> str:
        """The index recall searches: the previous one while this one backfills."""
        return self.previous or self.model

    # -- lifecycle (gateway) -----------------------------------------------------------------

    async def start(self) -> None:
        self._stopping = False
        if not has_tier(self.store, Tier.VECTORS):
            # Declared, not a failure: /health stays ok and shows the state.
            self.state = "unsupported"
            log.info("vector indexer: the %s store has no vector index; recall uses full-text search only",
                     self.store.name)  # fmt: skip
            return
        self.state = "starting"
        self._task = asyncio.create_task(self._run(), name="lore-vector-indexer")

    def notify(self, *_: Any) -> None:
        """New items may be pending (the writer landed messages): look now."""
        self._wake.set()

    async def stop(self, timeout: float = 10.0) -> None:
        """Finish the batch in progress (its vectors are written), then stop."""
        self._stopping = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
            except Exception:
                pass
        self.state = "stopped"

    async def _run(self) -> None:
        # The embedder loads with the first batch that has something to embed (embed()
        # raises EmbedderUnavailable there, reported below): a gateway with nothing to
        # index does not hold the model.
        announced = busy = False
        await self._drop_stale_indexes()
        while not self._stopping:
            if not self._store_ready():
                self.state = "waiting for the store"
                await self._sleep(self.interval)
                continue
            if not announced:
                announced = True
                await self._refresh_pending(announce=True)
            try:
                done = await self.index_batch()
            except asyncio.CancelledError:
                raise
            except EmbedderUnavailable as exc:
                self._fail("unavailable", f"embedder unavailable: {exc.reason}", log.warning)
                await self._sleep(_UNAVAILABLE_RETRY_SECONDS)
                continue
            except Exception as exc:
                self._fail("error", " ".join(str(exc).split())[:300] or type(exc).__name__, log.error)
                await self._sleep(_BACKOFF[min(self._failures, len(_BACKOFF)) - 1])
                continue
            if self.error is not None:
                log.warning("vector indexer works again")
            self.error, self._failures = None, 0
            if done:
                if not busy or time.monotonic() - self._pending_counted_at >= PENDING_RECOUNT_SECONDS:
                    # Out of idle, and now and then while busy: count what is pending (health
                    # shows it going down between counts).
                    busy = True
                    await self._refresh_pending(announce=False)
                await asyncio.sleep(0)  # let the loop breathe between batches
                continue
            busy = False
            self.state = "idle"
            await self._retire_previous()
            await self._idle_upkeep()
            await self._sleep(self.interval)

    async def _drop_stale_indexes(self) -> None:
        """Drop this model's indexes cut by other rules (the new index is backfilled from
        the store), but for one that numbers the same passages (only its facet rules
        differ) while the new index has items to embed: recall searches that one
        meanwhile (:attr:`previous`), and :meth:`_retire_previous` drops it later."""
        base = self.model.split(PASSAGE_SEPARATOR, 1)[0]
        try:
            stats = await self.vectors.vector_stats()
        except Exception:  # the store is not open yet: the loop retries
            return
        backfilling = int((stats.get(self.model) or {}).get("pending") or 0) > 0 or self.model not in stats
        for name in stats:
            if name == self.model or name.split(PASSAGE_SEPARATOR, 1)[0] != base:
                continue
            if backfilling and self.previous is None and same_passages(name, self.model):
                self.previous = name
                log.info("vector indexer: embedding %s; recall searches %s until then", self.model, name)
                continue
            await self._drop(name, "other rules")

    async def _retire_previous(self) -> None:
        """Drop the previous index once this one has nothing left to embed."""
        if self.previous is not None:
            name, self.previous = self.previous, None
            await self._drop(name, f"{self.model} is complete")

    async def _drop(self, name: str, why: str) -> None:
        log.info("vector indexer: dropping %s (%s)", name, why)
        try:
            await self.vectors.reset_vectors(name)
        except Exception as exc:
            log.warning("vector indexer: could not drop %s: %s", name, exc)

    async def _refresh_pending(self, announce: bool) -> None:
        try:
            stats = (await self.vectors.vector_stats(self.model)).get(self.model, {})
        except Exception:  # a count for /health only
            return
        self.pending = stats.get("pending")
        self._pending_counted_at = time.monotonic()
        if announce and self.pending:
            log.info("vector indexer: %d items to embed for %s", self.pending, self.model)

    def _fail(self, state: str, message: str, say: Callable[..., None]) -> None:
        self._failures += 1
        self.state = state
        if message != self.error:
            say("vector indexer: %s (recall keeps answering; the items stay pending)", message)
        self.error = message

    async def _sleep(self, seconds: float) -> None:
        try:
            # Not asyncio.wait_for: on Python 3.11 it loses a cancellation that arrives as the
            # wake does, and stop() then waits for this loop for ever.
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        except TimeoutError:
            pass
        self._wake.clear()

    async def _idle_upkeep(self) -> None:
        if not self._written_since_optimize or time.monotonic() - self._last_item_at < IDLE_OPTIMIZE_SECONDS:
            return
        self._written_since_optimize = 0
        try:
            await self.vectors.optimize_vectors(self.model)
        except Exception as exc:
            log.warning("vector indexer: compacting the index failed: %s", " ".join(str(exc).split()))

    # -- the work ----------------------------------------------------------------------------

    async def index_batch(self) -> int:
        """Embed and write one batch of pending items; return how many (0: none pending)."""
        items = await self.vectors.pending_embeddings(self.model, limit=self.batch_size)
        if not items:
            self.pending = 0
            return 0
        self.state = "indexing"
        started = time.monotonic()
        pieces = await asyncio.to_thread(self._texts_of, items)
        texts = [text for units in pieces for _, text in units]
        try:
            async with asyncio.timeout(self.batch_timeout):
                vectors = await self.embedder.embed(texts) if texts else []
        except TimeoutError:
            raise RuntimeError(
                f"the embedder did not answer a batch of {len(texts)} passages within {self.batch_timeout:g}s"
            ) from None
        if len(vectors) != len(texts):
            raise RuntimeError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
        done: list[ItemVectors] = []
        at = 0
        for item, units in zip(items, pieces, strict=True):
            chunk: list[Sequence[float]] = list(vectors[at : at + len(units)])
            done.append(ItemVectors(item, chunk, [index for index, _ in units]))
            at += len(units)
        dimensions = len(vectors[0]) if vectors else int(self.embedder.dimensions)
        written = await self.vectors.write_vectors(self.model, dimensions, done)
        self.items_indexed += len(items)
        self.vectors_written += int(written or 0)
        self.batches += 1
        self._written_since_optimize += 1
        self._last_item_at = time.monotonic()
        self.last_batch_seconds = round(time.monotonic() - started, 3)
        if self.pending is not None:
            self.pending = max(0, self.pending - len(items))
        return len(items)

    def _texts_of(self, items: Sequence[EmbeddingItem]) -> list[list[tuple[int, str]]]:
        """Per item, ``(passage index, text)`` of everything embedded: each embedded
        passage, then its facets under the same index."""
        return [
            embedded_texts(item, embedded_passages(item_passages(item, self._calls), self.max_chunks))
            for item in items
        ]

    async def run_until_idle(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed everything pending (``lore reindex``); ``progress(done, total)`` after each
        batch. Stops early only on an error, which propagates; what was written stays."""
        total = 0
        await self._drop_stale_indexes()
        vectors = self.vectors  # a store without vectors stops here, with a clear error
        try:
            stats = (await vectors.vector_stats(self.model)).get(self.model, {})
            total = int(stats.get("pending") or 0)
        except Exception:
            total = 0
        done = 0
        if progress is not None:
            progress(0, total)
        while True:
            n = await self.index_batch()
            if not n:
                break
            done += n
            total = max(total, done)
            if progress is not None:
                progress(done, total)
        await self._retire_previous()
        if done:
            await self.vectors.optimize_vectors(self.model)
        return done

    # -- reporting ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return {
            "ok": self.error is None,
            "state": self.state,
            "model": self.model,
            "serving": self.serving_index(),
            "error": self.error,
            "pending": self.pending,
            "items_indexed": self.items_indexed,
            "vectors_written": self.vectors_written,
            "batches": self.batches,
            "last_batch_seconds": self.last_batch_seconds,
        }
