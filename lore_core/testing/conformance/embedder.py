"""The embedder conformance suite: the contract of :class:`lore_core.interfaces.Embedder` as tests.

Every embedding provider subclasses :class:`EmbedderConformance` in its own tests and must
pass it, as the on-device provider (``plugins/embed_local/tests/test_conformance.py``) and
the kernel's test embedder (``tests/test_embedder_conformance.py``) do::

    from lore_core.testing.conformance.embedder import EmbedderConformance

    class TestMyEmbedder(EmbedderConformance):
        @pytest.fixture
        def make_embedder(self):
            # Each call returns a new embedder object, as a gateway start builds one.
            return lambda: MyEmbedder(model="small")

        # Optional: one that cannot work (no model file, unreachable host), to check it
        # fails the way callers degrade on. Without it those checks are skipped.
        @pytest.fixture
        def make_unavailable_embedder(self, tmp_path):
            return lambda: MyEmbedder(model_path=tmp_path / "missing.onnx")

Most checks use one embedder from the ``embedder`` fixture (``make_embedder()``, loaded and
closed around the test when it has ``load``/``close``); a provider that is slow to load may
override ``embedder`` to share one object between tests. The checks that need a fresh object
(the vector space survives a restart) call ``make_embedder`` themselves.

What the gateway relies on (:mod:`lore_core.recall.indexer`, :mod:`lore_core.recall.sources`):
one unit-length vector of ``dimensions`` floats per text, in order, the same for the same text
whatever else is in the batch and across restarts (stored vectors are compared with
tomorrow's query vectors), ``model_id`` (else ``name``) naming that vector space, texts longer
than the model reads handled (truncated, or split by the optional ``chunk``), related texts
closer than unrelated ones (and on the right side of ``min_similarity`` when the provider
declares it), ``embed_query`` (a search's query) giving the vectors ``embed`` gives, ``embed``
never blocking the event loop, and failures that mean "no embeddings
here" raised as :class:`~lore_core.interfaces.EmbedderUnavailable` with a one-line reason.

Texts are few and short, so a real model runs the suite in seconds. Tests drive coroutines
with ``asyncio.run``: no async pytest plugin is needed.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import pytest

from lore_core.interfaces import Embedder, EmbedderUnavailable
from lore_core.recall.sources import vector_index_name

#: Texts of every kind a conversation holds: prose, code, paths, unicode, odd whitespace.
TEXTS = (
    "We deploy the release to production on Friday.",
    "The database migration failed with a SQL error.",
    "def retry(fn, attempts=3):\n    return fn()\n",
    "/home/dev/project/src/main.py:42: TypeError",
    "Le déploiement est prévu vendredi.",
)
#: Odd text a client may send (lone surrogates excepted: the gateway replaces them first).
ODD_TEXTS = (
    "",
    " ",
    "\n\t\r\n",
    "日本語のテキストと中文",
    "مرحبا بالعالم",
    "emoji 🚀🔥 and a family 👨‍👩‍👧 (ZWJ)",
    "e\u0301 combining, \u200b zero width, \ufeff BOM, \ufffd replacement",
    "NUL \x00 and controls \x01\x1f\x7f",
    "x" * 3000,  # one word far longer than any token vocabulary entry
    "😀" * 600,
    "\U0010fffd private use plane 16",
)
#: (query, related text, unrelated text): plain English a general model ranks the same way.
SIMILARITY_CASES = (
    (
        "deploy the release",
        "the rollout will ship the new deployment",
        "the postgres database migration broke",
    ),
    (
        "the database migration failed",
        "postgres sql migration error",
        "we ship the release tomorrow",
    ),
)

#: Tolerances for "the same vector": inference may round differently in another batch.
SAME_VECTOR_COSINE = 1 - 1e-4
SAME_COMPONENT = 1e-3


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def assert_same_vector(a: Sequence[float], b: Sequence[float], what: str) -> None:
    assert len(a) == len(b), what
    assert cosine(a, b) >= SAME_VECTOR_COSINE, f"{what}: cosine {cosine(a, b)}"
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= SAME_COMPONENT, what


async def _maybe(result: Any) -> Any:
    return await result if asyncio.iscoroutine(result) else result


async def _load(embedder: Embedder) -> None:
    await _maybe(embedder.load())


async def _close(embedder: Embedder) -> None:
    await _maybe(embedder.close())


class EmbedderConformance:
    """Subclass in a ``test_*.py`` module and provide the ``make_embedder`` fixture."""

    #: (query, related, unrelated) triples the model must rank; override for a model with a
    #: narrow vocabulary (a test model) or another language.
    similarity_cases: ClassVar[Sequence[tuple[str, str, str]]] = SIMILARITY_CASES
    #: A text longer than the model reads (truncated or chunked, never an error).
    long_text: ClassVar[str] = " ".join(
        f"Step {i}: the gateway stores message {i} and indexes its passages for recall." for i in range(400)
    )

    @pytest.fixture
    def make_embedder(self) -> Callable[[], Embedder]:
        raise NotImplementedError("an embedder's test class provides the make_embedder fixture")

    @pytest.fixture
    def make_unavailable_embedder(self) -> Callable[[], Embedder]:
        pytest.skip("the test class provides no make_unavailable_embedder fixture")

    @pytest.fixture
    def embedder(self, make_embedder: Callable[[], Embedder]) -> Iterator[Embedder]:
        emb = make_embedder()
        asyncio.run(_load(emb))
        yield emb
        asyncio.run(_close(emb))

    # -- helpers ---------------------------------------------------------------------------

    def embed(self, embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
        return asyncio.run(embedder.embed(texts))

    def check_vectors(self, embedder: Embedder, texts: Sequence[str], vectors: Any) -> None:
        assert isinstance(vectors, list), type(vectors)
        assert len(vectors) == len(texts), f"{len(vectors)} vectors for {len(texts)} texts"
        for text, vector in zip(texts, vectors, strict=True):
            label = repr(text[:40])
            assert len(vector) == embedder.dimensions, f"{label}: {len(vector)} != {embedder.dimensions}"
            assert all(isinstance(x, float) and math.isfinite(x) for x in vector), label
            norm = math.sqrt(sum(x * x for x in vector))
            assert abs(norm - 1.0) <= 1e-3, f"{label}: not unit length ({norm})"

    # -- identity ----------------------------------------------------------------------------

    def test_declares_its_space(self, embedder: Embedder) -> None:
        assert isinstance(embedder.name, str) and embedder.name
        assert isinstance(embedder.dimensions, int) and not isinstance(embedder.dimensions, bool)
        assert embedder.dimensions > 0
        model_id = embedder.model_id
        assert model_id is None or (isinstance(model_id, str) and model_id.strip()), repr(model_id)
        floor = embedder.min_similarity
        if floor is not None:
            assert isinstance(floor, float) and -1.0 <= floor < 1.0, floor

    def test_health_is_a_report(self, embedder: Embedder) -> None:
        report = embedder.health()
        assert isinstance(report, dict)
        assert report.get("ok") is True, report
        assert "detail" not in report or isinstance(report["detail"], str)

    def test_model_id_is_stable(self, embedder: Embedder, make_embedder: Callable[[], Embedder]) -> None:
        before = vector_index_name(embedder)
        self.embed(embedder, TEXTS[:2])
        assert vector_index_name(embedder) == before, "embedding changed the vector space's name"
        fresh = make_embedder()
        try:
            assert vector_index_name(fresh) == before, "another instance names another vector space"
            assert (fresh.name, fresh.dimensions) == (embedder.name, embedder.dimensions)
        finally:
            asyncio.run(_close(fresh))

    # -- vectors -----------------------------------------------------------------------------

    def test_vectors_have_the_declared_dimensions_and_unit_length(self, embedder: Embedder) -> None:
        vectors = self.embed(embedder, list(TEXTS))
        self.check_vectors(embedder, TEXTS, vectors)
        distinct = {tuple(round(x, 4) for x in v) for v in vectors}
        assert len(distinct) > 1, "every text has the same vector"

    def test_the_same_text_gives_the_same_vector(self, embedder: Embedder) -> None:
        first = self.embed(embedder, [TEXTS[0]])[0]
        again = self.embed(embedder, [TEXTS[0]])[0]
        assert_same_vector(first, again, "the same text embedded twice")

    def test_vectors_survive_a_restart(
        self, embedder: Embedder, make_embedder: Callable[[], Embedder]
    ) -> None:
        before = self.embed(embedder, list(TEXTS[:3]))
        fresh = make_embedder()

        async def main() -> list[list[float]]:
            await _load(fresh)
            try:
                return await fresh.embed(list(TEXTS[:3]))
            finally:
                await _close(fresh)

        after = asyncio.run(main())
        for text, a, b in zip(TEXTS[:3], before, after, strict=True):
            assert_same_vector(a, b, f"{text!r} after a restart")

    def test_a_batch_equals_one_text_at_a_time_in_order(self, embedder: Embedder) -> None:
        texts = [TEXTS[2], TEXTS[0], TEXTS[3], TEXTS[0], TEXTS[1], TEXTS[4]]
        batch = self.embed(embedder, texts)
        self.check_vectors(embedder, texts, batch)
        for text, vector in zip(texts, batch, strict=True):
            alone = self.embed(embedder, [text])[0]
            assert_same_vector(vector, alone, f"{text!r} in a batch and alone")
        # A tuple is a sequence too.
        as_tuple = self.embed(embedder, tuple(texts[:2]))
        for a, b in zip(as_tuple, batch[:2], strict=True):
            assert_same_vector(a, b, "a tuple of texts")

    def test_no_texts_no_vectors(self, embedder: Embedder) -> None:
        assert self.embed(embedder, []) == []
        assert self.embed(embedder, ()) == []

    def test_odd_and_unicode_text(self, embedder: Embedder) -> None:
        vectors = self.embed(embedder, list(ODD_TEXTS))
        self.check_vectors(embedder, ODD_TEXTS, vectors)
        for text, vector in zip(ODD_TEXTS, vectors, strict=True):
            assert_same_vector(vector, self.embed(embedder, [text])[0], f"{text[:30]!r} alone")

    def test_long_text_is_handled(self, embedder: Embedder) -> None:
        text = self.long_text
        [vector] = self.embed(embedder, [text])
        self.check_vectors(embedder, [text], [vector])
        assert_same_vector(vector, self.embed(embedder, [text])[0], "a long text twice")
        chunk = embedder.chunk
        short = TEXTS[0]
        assert chunk(short) == [short], "a text that fits is one piece"
        pieces = chunk(text)
        assert isinstance(pieces, list) and pieces and all(isinstance(p, str) and p for p in pieces)
        assert text.startswith(pieces[0]) and text.endswith(pieces[-1]), "the pieces cover the text"
        position = 0
        for piece in pieces:
            found = text.find(piece, position)
            assert found >= 0, "every piece is a substring of the text, in order"
            position = found + 1
        self.check_vectors(embedder, pieces, self.embed(embedder, pieces))

    def test_related_texts_score_higher_than_unrelated_ones(self, embedder: Embedder) -> None:
        floor = embedder.min_similarity
        for query, related, unrelated in self.similarity_cases:
            q, r, u = self.embed(embedder, [query, related, unrelated])
            near, far = cosine(q, r), cosine(q, u)
            assert near > far, f"{query!r}: related {near:.3f} <= unrelated {far:.3f}"
            if floor is not None:
                # Recall keeps vector hits at or above min_similarity and drops the rest.
                assert near >= floor, f"{related!r} is related to {query!r} ({near:.3f} < {floor})"
                assert far < floor, f"{unrelated!r} is unrelated to {query!r} ({far:.3f} >= {floor})"

    def test_embed_query_gives_the_vectors_embed_gives(self, embedder: Embedder) -> None:
        # Recall compares a query's vector (embed_query) with stored ones (embed).
        texts = list(TEXTS)
        vectors = self.embed(embedder, texts)
        queries = asyncio.run(embedder.embed_query(texts))
        self.check_vectors(embedder, texts, queries)
        for text, a, b in zip(texts, vectors, queries, strict=True):
            assert_same_vector(a, b, f"{text!r} by embed and by embed_query")
        assert asyncio.run(embedder.embed_query([])) == []

    # -- the event loop --------------------------------------------------------------------

    def test_concurrent_calls_get_their_own_vectors(self, embedder: Embedder) -> None:
        groups = [list(TEXTS[:2]), [TEXTS[3]], list(TEXTS[1:5])]
        sequential = [self.embed(embedder, g) for g in groups]

        async def main() -> list[list[list[float]]]:
            return list(await asyncio.gather(*(embedder.embed(g) for g in groups)))

        for group, alone, together in zip(groups, sequential, asyncio.run(main()), strict=True):
            assert len(together) == len(group)
            for a, b in zip(alone, together, strict=True):
                assert_same_vector(a, b, "the same texts embedded concurrently")

    def test_embed_does_not_block_the_event_loop(self, embedder: Embedder) -> None:
        texts = [f"{t} ({i})" for i in range(8) for t in TEXTS]

        async def main() -> tuple[float, float]:
            gaps: list[float] = []
            stop = asyncio.Event()

            async def tick() -> None:
                last = time.perf_counter()
                while not stop.is_set():
                    await asyncio.sleep(0.005)
                    now = time.perf_counter()
                    gaps.append(now - last)
                    last = now

            ticker = asyncio.create_task(tick())
            await asyncio.sleep(0.02)
            start = time.perf_counter()
            await embedder.embed(texts)
            took = time.perf_counter() - start
            stop.set()
            await ticker
            return took, max(gaps)

        took, longest_gap = asyncio.run(main())
        # A blocking embed stalls the loop for all of its run; one off the loop leaves it
        # answering within a scheduling delay.
        assert longest_gap <= max(0.25, 0.6 * took), f"the loop stalled {longest_gap:.3f}s of {took:.3f}s"

    # -- failure -----------------------------------------------------------------------------

    def test_an_unavailable_embedder_raises_embedder_unavailable(
        self, make_unavailable_embedder: Callable[[], Embedder]
    ) -> None:
        emb = make_unavailable_embedder()

        async def main() -> list[EmbedderUnavailable]:
            errors = []
            try:
                await _maybe(emb.load())
            except EmbedderUnavailable as exc:
                errors.append(exc)
            for embed in (emb.embed, emb.embed, emb.embed_query):
                try:
                    await embed(["hello", "world"])
                except EmbedderUnavailable as exc:
                    errors.append(exc)
                else:
                    raise AssertionError(f"{embed.__name__} worked on an embedder that cannot")
            await _close(emb)
            return errors

        errors = asyncio.run(main())
        for error in errors:
            assert isinstance(error.reason, str) and error.reason.strip(), repr(error.reason)
            assert "\n" not in error.reason, f"the reason is one line: {error.reason!r}"
        report = emb.health()
        assert isinstance(report, dict) and report.get("ok") is False, report
