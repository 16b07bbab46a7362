"""``LocalEmbedder``: all-MiniLM-L6-v2 on onnxruntime, batched, off the event loop.

Nothing heavy is imported or loaded until the first use: numpy, onnxruntime and tokenizers
are imported inside the loading code, so importing this module (and the plugin) stays cheap
for CLI commands that never embed.

Inference runs in one dedicated thread. One, because onnxruntime already spreads a single
run over ``threads`` cores; two concurrent runs would only fight over the same cores. Each
``embed`` call hands that thread one batch at a time, and at most ``queueSize`` batches wait
in front of the thread; further callers wait on the event loop.

``embed_query`` (a search's query) skips that queue: its batches go to a lane of their own
that the thread serves before each model run of a background batch, and as a job of its own
when the thread is idle. A query so waits for at most one model run (``maxBatchTokens``
padded tokens) of the indexer's backlog, not for the queued batches.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lore_core.interfaces import Embedder
from lore_embed_local.config import EmbedLocalConfig
from lore_embed_local.errors import EmbedderUnavailable
from lore_embed_local.model import (
    DIMENSIONS,
    MIN_SIMILARITY,
    MODEL_ID,
    MODEL_SHA256,
    TOKENIZER_SHA256,
    ModelFileError,
    check_sha256,
    packaged_model_path,
    packaged_tokenizer_path,
)

log = logging.getLogger("lore.embed_local")

# A text much longer than the model can read is cut before tokenising (tokenising 100 KB
# costs ~40 ms, for 256 tokens of it). Generous: English averages ~4-5 characters a token.
_CHARS_PER_TOKEN_BOUND = 16
# Matches up to and including the last whitespace character of a span.
_UP_TO_LAST_SPACE = re.compile(r"[\s\S]*\s")
# Tokens shared by consecutive chunks, so a sentence cut by a boundary is whole in one.
DEFAULT_CHUNK_OVERLAP = 32


class _Runtime:
    """The loaded model: run from inference threads (an onnxruntime session and a tokenizer
    may be used from several threads at once)."""

    def __init__(self, session: Any, encoder: Any, np: Any, input_names: set[str], output: str) -> None:
        self.session = session
        self.encoder = encoder
        self.np = np
        self.input_names = input_names
        self.output = output


#: Models loaded in this process, by their files and settings: an embedder asking for one
#: loaded before gets it at once. A process runs one gateway, which loads the model when it
#: first embeds and keeps it until it stops (so does its process); a process that builds
#: several in turn (the test suite, a program embedding Lore) loads it once (0.5-0.8 s of
#: CPU each time otherwise), and keeps it (~100 MB) for its life.
_LOADED: dict[tuple[str, str, int, int], _Runtime] = {}
_LOADED_LOCK = threading.Lock()


class _Query:
    """One batch of a query's texts, waiting in the urgent lane; ``future`` gets its vectors."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.future: Future[list[list[float]]] = Future()


class LocalEmbedder(Embedder):
    """The ``local`` embedding provider (see :class:`lore_core.interfaces.Embedder`).

    ``embed`` returns one unit-length 384-dim vector per text; ``embed_query`` the same
    vectors, ahead of queued ``embed`` batches. Each text is truncated to
    ``maxTokens``: callers that need all of a long message split it first with
    :meth:`chunk` and embed the pieces. If the model cannot be loaded, ``health()`` says
    why and every ``embed`` raises :class:`EmbedderUnavailable` (logged once).
    """

    name = "local"
    dimensions = DIMENSIONS
    #: The vector space; see :data:`lore_embed_local.model.MODEL_ID`.
    model_id = MODEL_ID
    #: See :data:`lore_embed_local.model.MIN_SIMILARITY`.
    min_similarity = MIN_SIMILARITY

    def __init__(self, settings: EmbedLocalConfig | None = None) -> None:
        self.settings = settings if settings is not None else EmbedLocalConfig()
        self.settings.check()
        self.threads = self.settings.threads or min(os.cpu_count() or 1, 4)
        self._lock = threading.Lock()
        # Separate, so chunking (perhaps on the event loop) never waits for a model load.
        self._splitter_lock = threading.Lock()
        self._runtime: _Runtime | None = None
        self._splitter: Any = None
        self._error: str | None = None
        self._executor: ThreadPoolExecutor | None = None
        # asyncio primitives belong to one event loop; keep one queue bound per loop.
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        # The urgent lane: queries' batches, oldest first. A deque's append and popleft are
        # atomic, so the event loop adds and the inference thread takes without a lock.
        self._queries: deque[_Query] = deque()
        # ``free`` is set only in the inference thread, while it may serve queries (not
        # while it runs one: a query's own runs do not stop to serve the next).
        self._thread = threading.local()

    # -- the Embedder interface ------------------------------------------------------------

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed ``texts`` in the inference thread; one unit vector per text, in order."""
        loop = asyncio.get_running_loop()

        async def run(batch: list[str]) -> list[list[float]]:
            async with self._slot(loop):
                return await loop.run_in_executor(self._worker(), self._embed_lists, batch)

        return await self._embed_batches(texts, run)

    async def embed_query(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed a search's query: the vectors ``embed`` gives (the same batches, so the
        same runs), but in the urgent lane, ahead of queued ``embed`` batches. It takes no
        queue slot: those bound background work, and a query waits for at most the model
        run in progress."""
        return await self._embed_batches(texts, self._run_query)

    def health(self) -> dict[str, Any]:
        """``ok``, a one-line ``detail`` and, when not ok, the bare ``reason``. Never loads
        the model: before the first load it only checks that the files exist."""
        report: dict[str, Any] = {
            "provider": self.name,
            "model": MODEL_ID,
            "dimensions": DIMENSIONS,
            "loaded": self._runtime is not None,
            "threads": self.threads,
            "maxTokens": self.settings.max_tokens,
        }
        if self._error is not None:
            detail = self._unavailable_detail(self._error)
            return {**report, "ok": False, "reason": self._error, "detail": detail}
        if self._runtime is not None:
            return {**report, "ok": True, "detail": f"{MODEL_ID} loaded ({self.threads} threads)"}
        try:
            self._paths()
        except ModelFileError as exc:
            return {**report, "ok": False, "reason": str(exc), "detail": self._unavailable_detail(str(exc))}
        return {**report, "ok": True, "detail": f"{MODEL_ID} found; it loads on first use"}

    # -- extras ----------------------------------------------------------------------------

    async def load(self) -> None:
        """Load the model now (in the inference thread), e.g. at gateway start-up, so the
        first recall does not pay for it. Raises :class:`EmbedderUnavailable`."""
        await asyncio.get_running_loop().run_in_executor(self._worker(), self._ensure_runtime)

    def embed_blocking(self, texts: Sequence[str]) -> Any:
        """Embed in the calling thread; a float32 numpy array of shape (len(texts), 384).

        For batch jobs and benchmarks that own their thread; never call it on the event
        loop. The texts are tokenised together, then run in model calls of at most
        ``maxBatchTokens`` padded tokens each, texts of similar length together. In the
        inference thread, waiting queries run before each of those calls.
        """
        runtime = self._ensure_runtime()
        np = runtime.np
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return out
        rows = self._tokenize(runtime, list(texts))
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        budget = self.settings.max_batch_tokens
        start = 0
        while start < len(order):
            # Grow the run while its padded size (count x longest, the longest being the
            # last since the order is by length) stays within the budget.
            end = start + 1
            while end < len(order) and (end + 1 - start) * len(rows[order[end]]) <= budget:
                end += 1
            picked = order[start:end]
            # Cooperative: a background batch lets the queries that came meanwhile go first.
            self._serve_queries()
            out[picked] = self._run(runtime, [rows[i] for i in picked])
            start = end
        return out

    def chunk(
        self, text: str, max_tokens: int | None = None, overlap: int = DEFAULT_CHUNK_OVERLAP
    ) -> list[str]:
        """Split ``text`` into pieces that each fit the model (``max_tokens`` including the
        two special tokens; default ``maxTokens``), consecutive pieces sharing about
        ``overlap`` tokens. Pieces are substrings of ``text`` and are cut between words. A
        text that fits is returned whole (``[""]`` for an empty one).

        Needs only the tokenizer (loaded on first use, ~20 ms). CPU-bound (~0.3 ms per KB):
        run it off the event loop for large texts. Raises :class:`EmbedderUnavailable` if
        the tokenizer cannot be loaded.
        """
        limit = (max_tokens or self.settings.max_tokens) - 2
        if limit < 1:
            raise ValueError("max_tokens must leave room for at least one token")
        if not 0 <= overlap < limit:
            raise ValueError("overlap must be at least 0 and smaller than max_tokens - 2")
        encoding = self._ensure_splitter().encode(text, add_special_tokens=False)
        count = len(encoding.ids)
        if count <= limit:
            return [text]
        offsets, words = encoding.offsets, encoding.word_ids
        pieces: list[str] = []
        start = 0
        while start < count:
            end = min(start + limit, count)
            if end < count:
                end = _word_start(words, end, floor=start + 1)
            pieces.append(text[offsets[start][0] : offsets[end - 1][1]])
            if end >= count:
                break
            start = max(_word_start(words, end - overlap, floor=start + 1), start + 1)
        return pieces

    async def close(self) -> None:
        """Stop the inference thread (waiting for the batch it runs); the model stays loaded
        for the next embedder of this process that asks for it (:data:`_LOADED`)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.get_running_loop().run_in_executor(None, executor.shutdown)
        self._runtime = None

    # -- loading ---------------------------------------------------------------------------

    def _paths(self) -> tuple[Path, Path]:
        model = Path(self.settings.model_path) if self.settings.model_path else packaged_model_path()
        tokenizer = (
            Path(self.settings.tokenizer_path) if self.settings.tokenizer_path else packaged_tokenizer_path()
        )
        for path in (model, tokenizer):
            if not path.is_file():
                raise ModelFileError(f"{path} does not exist")
        return model, tokenizer

    def _ensure_splitter(self) -> Any:
        if self._splitter is None:
            with self._splitter_lock:
                if self._splitter is None:
                    try:
                        _, tokenizer_path = self._paths()
                        from tokenizers import Tokenizer

                        splitter = Tokenizer.from_file(str(tokenizer_path))
                    except Exception as exc:
                        raise EmbedderUnavailable(f"cannot load the tokenizer: {_one_line(exc)}") from exc
                    splitter.no_truncation()
                    splitter.no_padding()
                    self._splitter = splitter
        return self._splitter

    def _ensure_runtime(self) -> _Runtime:
        runtime = self._runtime
        if runtime is not None:
            return runtime
        with self._lock:
            if self._runtime is None:
                if self._error is not None:
                    raise EmbedderUnavailable(self._error)
                try:
                    self._runtime = self._shared_runtime()
                except Exception as exc:
                    self._error = _one_line(exc) if isinstance(exc, ModelFileError) else _describe(exc)
                    # Once, here: later calls raise at once without logging again.
                    log.warning(self._unavailable_detail(self._error))
                    raise EmbedderUnavailable(self._error) from exc
            return self._runtime

    def _shared_runtime(self) -> _Runtime:
        model, tokenizer = self._paths()
        key = (str(model.resolve()), str(tokenizer.resolve()), self.settings.max_tokens, self.threads)
        with _LOADED_LOCK:
            runtime = _LOADED.get(key)
            if runtime is None:
                runtime = _LOADED[key] = self._load()
            return runtime

    def _load(self) -> _Runtime:
        model_path, tokenizer_path = self._paths()
        # The packaged files are pinned: a different file would be another vector space.
        if not self.settings.model_path:
            check_sha256(model_path, MODEL_SHA256)
        if not self.settings.tokenizer_path:
            check_sha256(tokenizer_path, TOKENIZER_SHA256)

        import numpy as np
        import onnxruntime as ort
        from tokenizers import Tokenizer

        try:
            encoder = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:
            raise ModelFileError(f"cannot load the tokenizer {tokenizer_path}: {_one_line(exc)}") from exc
        # The shipped tokenizer.json pads every text to a fixed 128 and truncates at 128: we
        # truncate at maxTokens and pad to the longest text of each batch ourselves.
        encoder.enable_truncation(max_length=self.settings.max_tokens)
        encoder.no_padding()

        options = ort.SessionOptions()
        # With the arena, memory peaks (2.9 GB at batch 64 of long texts) stay reserved for
        # the life of the process; without it the model runs in ~340 MB at a small cost.
        options.enable_cpu_mem_arena = False
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle workers would spin on the cores the gateway's event loop needs.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ModelFileError(f"onnxruntime cannot load {model_path}: {_one_line(exc)}") from exc
        input_names = {i.name for i in session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - input_names
        if missing:
            raise ModelFileError(f"{model_path} is not a BERT-style encoder (no input {sorted(missing)})")
        runtime = _Runtime(session, encoder, np, input_names, session.get_outputs()[0].name)
        # One tiny run proves the file computes vectors of the promised size.
        ids = np.array([[101, 102]], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        shape = session.run([runtime.output], feeds)[0].shape
        if len(shape) != 3 or shape[-1] != DIMENSIONS:
            expected = f"(batch, tokens, {DIMENSIONS})"
            raise ModelFileError(f"{model_path} outputs shape {shape}, expected {expected}")
        return runtime

    # -- inference (in the inference thread) -----------------------------------------------

    def _embed_lists(self, texts: list[str]) -> list[list[float]]:
        return self.embed_blocking(texts).tolist()

    def _serve_queries(self) -> None:
        """Run the waiting queries, oldest first; a no-op outside the inference thread (a
        batch job's own thread must not run the model beside it) and inside a query."""
        if not getattr(self._thread, "free", False):
            return
        # Only this thread takes from the lane, so a non-empty lane has a query to take.
        while self._queries:
            query = self._queries.popleft()
            # False when its caller was cancelled: skip it.
            if not query.future.set_running_or_notify_cancel():
                continue
            self._thread.free = False
            try:
                query.future.set_result(self._embed_lists(query.texts))
            except BaseException as exc:  # the caller gets it, as from run_in_executor
                query.future.set_exception(exc)
            finally:
                self._thread.free = True

    def _mark_inference_thread(self) -> None:
        self._thread.free = True

    def _run(self, runtime: _Runtime, rows: list[list[int]]) -> Any:
        """One model run over token rows: unit vectors, float32, shape (len(rows), 384)."""
        np = runtime.np
        ids, mask = _pad(np, rows)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in runtime.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = runtime.session.run([runtime.output], feeds)[0]
        # Mean over the real tokens, then L2: what sentence-transformers' Pooling(mean) and
        # Normalize modules do for this model (the ONNX file stops at the hidden states).
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, 1e-12)

    def _tokenize(self, runtime: _Runtime, texts: list[str]) -> list[list[int]]:
        """Token ids per text ([CLS] ... [SEP]), truncated to maxTokens."""
        encoder = runtime.encoder
        bound = self.settings.max_tokens * _CHARS_PER_TOKEN_BOUND
        cut = [_cut_at_space(text, bound) for text in texts]
        encodings = encoder.encode_batch(cut)
        for i, (text, short) in enumerate(zip(texts, cut, strict=True)):
            # A cut text gives the same tokens as the whole one only if truncation still
            # happened within it; otherwise (runs of whitespace, giant words) use the whole.
            if short is not text and not encodings[i].overflowing:
                encodings[i] = encoder.encode(text)
        return [e.ids for e in encodings]

    def _encode(self, runtime: _Runtime, texts: list[str]) -> tuple[Any, Any]:
        """Token ids and attention mask, truncated to maxTokens, padded to the longest."""
        return _pad(runtime.np, self._tokenize(runtime, texts))

    # -- helpers ---------------------------------------------------------------------------

    async def _embed_batches(
        self, texts: Sequence[str], run: Callable[[list[str]], Awaitable[list[list[float]]]]
    ) -> list[list[float]]:
        """Cut ``texts`` into batches, ``run`` each, and return the vectors in order."""
        texts = list(texts)
        if not texts:
            return []
        if self._error is not None:
            raise EmbedderUnavailable(self._error)
        # Shortest first, so each batch holds texts of similar length and pads little.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[list[float]] = [[] for _ in texts]
        size = self.settings.batch_size
        for start in range(0, len(order), size):
            picked = order[start : start + size]
            vectors = await run([texts[i] for i in picked])
            for i, vector in zip(picked, vectors, strict=True):
                out[i] = vector
        return out

    async def _run_query(self, batch: list[str]) -> list[list[float]]:
        query = _Query(batch)
        self._queries.append(query)
        # Two paths to the query; whichever comes first takes it from the lane and the
        # other finds it gone: a background batch in progress serves it before its next
        # model run, and this job serves it when the thread is idle.
        self._worker().submit(self._serve_queries)
        return await asyncio.wrap_future(query.future)

    def _worker(self) -> ThreadPoolExecutor:
        if self._executor is None:
            with self._lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(
                        max_workers=1,
                        thread_name_prefix="lore-embed",
                        initializer=self._mark_inference_thread,
                    )
        return self._executor

    def _slot(self, loop: asyncio.AbstractEventLoop) -> asyncio.Semaphore:
        slot = self._slots.get(loop)
        if slot is None:
            slot = self._slots[loop] = asyncio.Semaphore(self.settings.queue_size)
        return slot

    @staticmethod
    def _unavailable_detail(reason: str) -> str:
        return f"local embeddings unavailable, recall uses full-text search only: {reason}"


def _pad(np: Any, rows: list[list[int]]) -> tuple[Any, Any]:
    """Ids and attention mask, padded with 0 ([PAD]) to the longest row."""
    width = max(len(row) for row in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def _cut_at_space(text: str, bound: int) -> str:
    """``text`` cut at its last whitespace before ``bound`` characters (whole if shorter)."""
    if len(text) <= bound:
        return text
    match = _UP_TO_LAST_SPACE.match(text, bound // 2, bound)
    return text[: match.end()] if match else text


def _word_start(words: list[int | None], index: int, floor: int) -> int:
    """Move a boundary ``index`` back to the first token of the word it would split, but
    not below ``floor`` (``floor`` >= 1). A word reaching back past ``floor`` is longer
    than a chunk and is split where ``index`` says after all."""
    index = max(index, floor)
    i = index
    while i > floor and words[i] is not None and words[i] == words[i - 1]:
        i -= 1
    if words[i] is not None and words[i] == words[i - 1]:
        return index
    return i


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        return f"a dependency is missing: {_one_line(exc)}"
    return f"{type(exc).__name__}: {_one_line(exc)}"
