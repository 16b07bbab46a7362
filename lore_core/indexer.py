"""The background vector indexer: embeds what the store holds, off the request path.

Whatever the store reports as pending for the embedder's model (messages as the writer
lands them, distillations as the distiller writes them, and after a model change everything:
the backfill) is embedded in batches of ``embedding.batchSize`` items: each text is cut into
overlapping chunks that fit the model (the embedder's own ``chunk`` when it has one, else
character windows), the chunks are embedded, and the vectors written to the store, which
marks the items embedded. Nothing is kept beside the store: after a crash or a failed batch
the next pass asks the store again, so no work is lost and none is done twice. At most one
batch is held in memory.

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

from lore_core.interfaces import Embedder, EmbedderUnavailable
from lore_core.recall.sources import embedder_model
from lore_core.store import EmbeddingItem, ItemVectors

log = logging.getLogger("lore.indexer")

#: Texts shorter than this are one chunk whatever the tokenizer says (a token is at least
#: one character, and models read at least this many tokens).
_SHORT_TEXT = 250
#: Character windows for embedders that cannot split by tokens themselves.
FALLBACK_CHUNK_CHARS = 1000
FALLBACK_OVERLAP_CHARS = 150
#: Pieces embedded per item at most (``embedding.maxChunksPerItem``'s default).
DEFAULT_MAX_CHUNKS = 16
#: Compact the store's vector index after this long without new items (if it was written).
IDLE_OPTIMIZE_SECONDS = 30.0
_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
#: An embedder that cannot load is asked again this rarely (it caches its failure anyway).
_UNAVAILABLE_RETRY_SECONDS = 300.0


def char_windows(
    text: str, size: int = FALLBACK_CHUNK_CHARS, overlap: int = FALLBACK_OVERLAP_CHARS
) -> list[str]:
    """Overlapping windows of about ``size`` characters, cut at whitespace when possible."""
    if len(text) <= size:
        return [text]
    out: list[str] = []
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            space = text.rfind(" ", start + size // 2, end)
            end = space if space > 0 else end
        out.append(text[start:end].strip())
        if end >= len(text):
            break
        # The next window starts ``overlap`` characters back, at the start of a word.
        back = max(end - overlap, start + 1)
        space = text.find(" ", back, end)
        start = space + 1 if space >= 0 else back
    return [p for p in out if p]


def cap_chunks(chunks: list[str], max_chunks: int) -> list[str]:
    """At most ``max_chunks``: the head of a long text and its last piece (a pasted log's
    error line is usually at one end)."""
    if len(chunks) <= max_chunks:
        return chunks
    return [*chunks[: max_chunks - 1], chunks[-1]] if max_chunks > 1 else chunks[:1]


def text_chunks(text: str, embedder: Any, max_chunks: int = DEFAULT_MAX_CHUNKS) -> list[str]:
    """The pieces of ``text`` the indexer embeds, in order ([] for a blank text): the
    embedder's own ``chunk`` when it has one, else character windows, at most
    ``max_chunks`` of them (:func:`cap_chunks`). A store's vector hit names its best piece
    by position in this list, and recall finds that piece again with :func:`chunk_span`:
    the one rule for both."""
    if not text.strip():
        return []
    if len(text) <= _SHORT_TEXT:
        return [text]
    splitter = getattr(embedder, "chunk", None)
    pieces: list[str] | None = None
    if splitter is not None:
        try:
            pieces = [p for p in splitter(text) if p.strip()]
        except Exception:  # no tokenizer: character windows still cover the text
            pieces = None
    if not pieces:
        pieces = char_windows(text)
    return cap_chunks(pieces, max(1, max_chunks))


def chunk_span(
    text: str, chunk: int, embedder: Any, max_chunks: int = DEFAULT_MAX_CHUNKS
) -> tuple[int, int] | None:
    """Where piece number ``chunk`` of :func:`text_chunks` lies in ``text``: its
    ``(start, end)`` character offsets. ``None`` when there is no such piece, or when the
    pieces are not substrings of the text (a chunker that rewrites what it cuts)."""
    pieces = text_chunks(text, embedder, max_chunks)
    if not 0 <= chunk < len(pieces):
        return None
    # Each piece starts after the one before it, so searching on from the previous piece
    # finds a repeated passage at the place the chunker cut it.
    start = 0
    for piece in pieces[: chunk + 1]:
        start = text.find(piece, start)
        if start < 0:
            return None
    return start, start + len(pieces[chunk])


class VectorIndexer:
    """Keeps the store's vector index for ``embedder``'s model current."""

    def __init__(
        self,
        store: Any,
        embedder: Embedder,
        batch_size: int = 64,
        max_chunks: int = DEFAULT_MAX_CHUNKS,
        interval: float = 2.0,
        store_ready: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.model = embedder_model(embedder)
        self.batch_size = max(1, batch_size)
        self.max_chunks = max(1, max_chunks)
        self.interval = interval
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
        self.items_indexed = 0
        self.vectors_written = 0
        self.batches = 0
        self.last_batch_seconds: float | None = None

    # -- lifecycle (gateway) -----------------------------------------------------------------

    async def start(self) -> None:
        self._stopping = False
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
        load = getattr(self.embedder, "load", None)
        if load is not None:
            try:
                await load()  # at once, rather than inside the first batch
            except EmbedderUnavailable:
                pass  # embed() raises it again below, where it is reported
            except Exception:
                log.exception("vector indexer: the embedder failed to load")
        announced = busy = False
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
            except NotImplementedError:
                self.state, self.error = "unsupported", f"the {self.store.name} store has no vector index"
                log.warning("vector indexer: %s; recall uses full-text search only", self.error)
                return
            except Exception as exc:
                self._fail("error", " ".join(str(exc).split())[:300] or type(exc).__name__, log.error)
                await self._sleep(_BACKOFF[min(self._failures, len(_BACKOFF)) - 1])
                continue
            if self.error is not None:
                log.warning("vector indexer works again")
            self.error, self._failures = None, 0
            if done:
                if not busy:
                    # Out of idle: count what is pending now (health shows it going down).
                    busy = True
                    await self._refresh_pending(announce=False)
                await asyncio.sleep(0)  # let the loop breathe between batches
                continue
            busy = False
            self.state = "idle"
            await self._idle_upkeep()
            await self._sleep(self.interval)

    async def _refresh_pending(self, announce: bool) -> None:
        try:
            stats = (await self.store.vector_stats(self.model)).get(self.model, {})
        except Exception:  # a count for /health only (NotImplementedError is said by the loop)
            return
        self.pending = stats.get("pending")
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
        optimize = getattr(self.store, "optimize_vectors", None)
        if (
            optimize is None
            or not self._written_since_optimize
            or time.monotonic() - self._last_item_at < IDLE_OPTIMIZE_SECONDS
        ):
            return
        self._written_since_optimize = 0
        try:
            await optimize(self.model)
        except Exception as exc:
            log.warning("vector indexer: compacting the index failed: %s", " ".join(str(exc).split()))

    # -- the work ----------------------------------------------------------------------------

    async def index_batch(self) -> int:
        """Embed and write one batch of pending items; return how many (0: none pending)."""
        items = await self.store.pending_embeddings(self.model, limit=self.batch_size)
        if not items:
            self.pending = 0
            return 0
        self.state = "indexing"
        started = time.monotonic()
        pieces = await asyncio.to_thread(self._chunk_all, items)
        texts = [t for chunks in pieces for t in chunks]
        vectors = await self.embedder.embed(texts) if texts else []
        if len(vectors) != len(texts):
            raise RuntimeError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
        done: list[ItemVectors] = []
        at = 0
        for item, chunks in zip(items, pieces, strict=True):
            done.append(ItemVectors(item, list(vectors[at : at + len(chunks)])))
            at += len(chunks)
        dimensions = len(vectors[0]) if vectors else int(self.embedder.dimensions)
        written = await self.store.write_vectors(self.model, dimensions, done)
        self.items_indexed += len(items)
        self.vectors_written += int(written or 0)
        self.batches += 1
        self._written_since_optimize += 1
        self._last_item_at = time.monotonic()
        self.last_batch_seconds = round(time.monotonic() - started, 3)
        if self.pending is not None:
            self.pending = max(0, self.pending - len(items))
        return len(items)

    def _chunk_all(self, items: Sequence[EmbeddingItem]) -> list[list[str]]:
        return [self.chunks(item.text) for item in items]

    def chunks(self, text: str) -> list[str]:
        """The pieces of ``text`` to embed ([] for a blank text): :func:`text_chunks`."""
        return text_chunks(text, self.embedder, self.max_chunks)

    async def run_until_idle(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed everything pending (``lore reindex``); ``progress(done, total)`` after each
        batch. Stops early only on an error, which propagates; what was written stays."""
        total = 0
        try:
            stats = (await self.store.vector_stats(self.model)).get(self.model, {})
            total = int(stats.get("pending") or 0)
        except NotImplementedError:
            raise
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
        optimize = getattr(self.store, "optimize_vectors", None)
        if optimize is not None and done:
            await optimize(self.model)
        return done

    # -- reporting ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return {
            "ok": self.error is None,
            "state": self.state,
            "model": self.model,
            "error": self.error,
            "pending": self.pending,
            "items_indexed": self.items_indexed,
            "vectors_written": self.vectors_written,
            "batches": self.batches,
            "last_batch_seconds": self.last_batch_seconds,
        }
