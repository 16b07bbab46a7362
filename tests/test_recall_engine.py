"""The recall engine with small in-memory sources: hybrid fusion, scopes, the cascade,
expansion through the fake upstream, degradation (failing sources, no embedder) and the
clear answers bad input gets instead of exceptions."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest

from lore_core.config import WorkerConfig
from lore_core.interfaces import Embedder as EmbedderBase
from lore_core.interfaces import EmbedderUnavailable
from lore_core.recall import (
    Kind,
    RecallEngine,
    RecallResponse,
    SearchFilter,
    SourceHit,
    StoreDistillationOpener,
    StoreMessageSource,
)
from lore_core.recall.cascade import tokenize
from lore_core.recall.engine import DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_CHARS
from lore_core.storage.records import StoredMessage, WriteBatch
from lore_core.testing.fake_upstream import FakeUpstream, Reply
from lore_core.worker.client import WorkerClient


def run(coro):
    return asyncio.run(coro)


class Docs:
    """A text source over ``key -> (text, meta)`` that requires every query term (the
    strictest full-text behaviour), honours the filter, and records its calls."""

    def __init__(self, name: str, docs: dict[str, tuple[str, dict]], *, fail: Exception | None = None):
        self.name = name
        self.docs = docs
        self.fail = fail
        self.calls: list[tuple[str, SearchFilter, int]] = []

    async def search(self, query: str, where: SearchFilter, limit: int) -> list[SourceHit]:
        self.calls.append((query, where, limit))
        if self.fail is not None:
            raise self.fail
        terms = set(query.split())
        hits = []
        for key, (text, meta) in self.docs.items():
            if where.session is not None and meta.get("session") != where.session:
                continue
            if where.project is not None and meta.get("project") != where.project:
                continue
            words = tokenize(text)
            if terms <= set(words):
                hits.append(SourceHit(key, float(sum(words.count(t) for t in terms)), text, dict(meta)))
        hits.sort(key=lambda h: (-h.score, h.key))
        return hits[:limit]

    async def open(self, key: str) -> SourceHit | None:
        if key not in self.docs:
            return None
        text, meta = self.docs[key]
        return SourceHit(key, 0.0, text, dict(meta))


class DfDocs(Docs):
    def doc_freq(self, term: str) -> int:
        return sum(1 for text, _ in self.docs.values() if term in tokenize(text))


VOCAB = ["websocket", "socket", "network", "reconnect", "retry", "database", "sql", "auth", "token"]


def embed_text(text: str) -> list[float]:
    words = set(tokenize(text))
    vec = [1.0 if w in words else 0.0 for w in VOCAB]
    # "socket" and "websocket" are near-synonyms to this toy model.
    if "websocket" in words or "socket" in words:
        vec[0] = vec[1] = 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class Embedder(EmbedderBase):
    name = "toy"
    dimensions = len(VOCAB)

    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.fail is not None:
            raise self.fail
        return [embed_text(t) for t in texts]

    def health(self) -> dict:
        return {"ok": self.fail is None}


class Vectors:
    def __init__(self, name: str, docs: dict[str, tuple[str, dict]], *, fail: Exception | None = None):
        self.name = name
        self.docs = docs
        self.fail = fail
        self.calls: list[SearchFilter] = []
        self.limits: list[int] = []

    async def search_vector(
        self, vector: Sequence[float], where: SearchFilter, limit: int
    ) -> list[SourceHit]:
        self.calls.append(where)
        self.limits.append(limit)
        if self.fail is not None:
            raise self.fail
        hits = []
        for key, (text, meta) in self.docs.items():
            if where.project is not None and meta.get("project") != where.project:
                continue
            score = sum(a * b for a, b in zip(vector, embed_text(text), strict=True))
            if score > 0:
                hits.append(SourceHit(key, score, text, dict(meta)))
        hits.sort(key=lambda h: (-h.score, h.key))
        return hits[:limit]


P, S = "/work/proj", "sess-1"
MESSAGES = {
    "m1": ("the websocket reconnect test is flaky on CI", {"session": S, "project": P, "role": "user"}),
    "m2": ("fixed reconnect by adding retry with backoff", {"session": S, "project": P, "role": "assistant"}),
    "m3": ("database migration for auth token table", {"session": "sess-2", "project": P, "role": "user"}),
    "m4": ("socket closed unexpectedly", {"session": S, "project": P, "role": "tool"}),
    "m9": ("websocket reconnect elsewhere", {"session": "sess-9", "project": "/other", "role": "user"}),
}
KNOWLEDGE = {
    "auth-1": ("auth tokens rotate every hour", {"project": P}),
    "auth-x": ("auth tokens in the other project", {"project": "/other"}),
}


def engine_with(**kwargs) -> tuple[RecallEngine, Docs, Vectors, Docs]:
    engine = RecallEngine(**kwargs)
    text, vectors, knowledge = (
        Docs("messages", MESSAGES),
        Vectors("message-vectors", MESSAGES),
        Docs("kb", KNOWLEDGE),
    )
    engine.add_text_source(Kind.MESSAGE, text)
    engine.add_vector_source(Kind.MESSAGE, vectors)
    engine.add_opener(Kind.MESSAGE, text)
    engine.add_text_source(Kind.KNOWLEDGE, knowledge)
    engine.add_opener(Kind.KNOWLEDGE, knowledge)
    return engine, text, vectors, knowledge


def search(engine: RecallEngine, query, scope="project", session=S, project=P, limit=10) -> RecallResponse:
    return run(engine.search(query, scope, session, project, limit))


# -- hybrid search ----------------------------------------------------------------------------


def test_results_carry_prefixed_ids_source_score_and_text():
    engine, *_ = engine_with(embedder=Embedder())
    response = search(engine, "websocket reconnect")
    assert response.error is None
    top = response.results[0]
    assert top.id == "t:m1" and top.source == "message"
    assert top.text == MESSAGES["m1"][0]
    assert top.meta["role"] == "user" and top.score > 0
    assert [r.score for r in response.results] == sorted((r.score for r in response.results), reverse=True)
    assert len({r.id for r in response.results}) == len(response.results)


def test_vector_list_adds_what_full_text_misses():
    engine, *_ = engine_with(embedder=Embedder())
    ids = [r.id for r in search(engine, "websocket reconnect").results]
    # "socket closed unexpectedly" shares no term with the query, only meaning.
    assert "t:m4" in ids
    engine, *_ = engine_with()  # no embedder: full text only
    assert "t:m4" not in [r.id for r in search(engine, "websocket reconnect").results]


class Fixed:
    """A source answering every query with the same ranked keys and scores."""

    def __init__(self, name: str, hits: list[tuple[str, float]]) -> None:
        self.name = name
        self.hits = hits

    async def search(self, query, where, limit):
        return [SourceHit(k, score, k) for k, score in self.hits]

    async def search_vector(self, vector, where, limit):
        return [SourceHit(k, score, k) for k, score in self.hits]


def test_single_term_queries_lean_on_full_text():
    def order(query: str) -> list[str]:
        engine = RecallEngine(embedder=Embedder())
        engine.add_text_source(Kind.MESSAGE, Fixed("bm25", [("a", 10.0), ("x", 3.0), ("y", 1.0)]))
        engine.add_vector_source(Kind.MESSAGE, Fixed("vec", [("v", 0.9), ("w", 0.1)]))
        return [r.id for r in search(engine, query).results][:3]

    # "x" is a weak second in full text, "v" first in vectors. One term: the vector list
    # weighs little, so even a weak full-text hit beats its first.
    assert order("websocket") == ["t:a", "t:x", "t:v"]
    # Two terms: the vector list's first hit beats a weak full-text one.
    assert order("websocket reconnect") == ["t:a", "t:v", "t:x"]


def test_a_first_hit_of_one_list_is_not_buried_by_vague_hits_of_both():
    """Rank fusion alone puts an item both lists hold low down above the first hit of one
    list (2/90 > 1/61); the re-ranking by normalised scores keeps the clear winner first."""
    vague = [(f"m{i}", 5.0 - i * 0.1) for i in range(30)]
    engine = RecallEngine(embedder=Embedder())
    engine.add_text_source(Kind.MESSAGE, Fixed("bm25", [("exact", 40.0), *vague]))
    engine.add_vector_source(
        Kind.MESSAGE, Fixed("vec", [(k, 0.5 - i * 0.01) for i, (k, _) in enumerate(vague)])
    )
    results = search(engine, "months between degree and job").results
    assert results[0].id == "t:exact"


def test_limit_is_clamped_and_defaulted():
    engine, text, vectors, _ = engine_with(embedder=Embedder())
    assert len(search(engine, "reconnect", limit=1).results) == 1
    search(engine, "reconnect", limit="many")
    assert text.calls[-1][2] == DEFAULT_LIMIT * 3
    search(engine, "reconnect", limit=10_000)
    assert text.calls[-1][2] == MAX_LIMIT * 3
    search(engine, "reconnect", limit=0)
    assert text.calls[-1][2] == 3
    # The vector lists fetch deeper than the full-text ones (see VECTOR_FETCH_FACTOR).
    assert vectors.limits == [5, DEFAULT_LIMIT * 5, MAX_LIMIT * 5, 5]


# -- scopes -----------------------------------------------------------------------------------


def test_session_scope_filters_on_the_session_and_skips_knowledge():
    engine, text, _, knowledge = engine_with()
    response = search(engine, "reconnect", scope="session")
    assert {r.id for r in response.results} == {"t:m1", "t:m2"}
    assert text.calls[-1][1] == SearchFilter(scope=text.calls[-1][1].scope, session=S, project=P, home=P)
    assert knowledge.calls == []


def test_project_scope_stays_in_the_project_for_every_kind():
    engine, text, _, knowledge = engine_with()
    response = search(engine, "auth tokens")
    assert [r.id for r in response.results] == ["k:auth-1"]
    assert knowledge.calls[-1][1].project == P and text.calls[-1][1].project == P
    assert text.calls[-1][1].session is None
    assert "t:m9" not in [r.id for r in search(engine, "websocket").results]


def test_all_scope_adds_other_projects_knowledge_only():
    engine, text, _, knowledge = engine_with()
    response = search(engine, "auth tokens", scope="all")
    assert {r.id for r in response.results} == {"k:auth-1", "k:auth-x"}
    assert knowledge.calls[-1][1].project is None
    assert text.calls[-1][1].project == P  # messages of other projects stay out


def test_knowledge_scope_searches_knowledge_only():
    engine, text, vectors, _ = engine_with(embedder=Embedder())
    response = search(engine, "auth tokens", scope="knowledge")
    assert [r.id for r in response.results] == ["k:auth-1"]
    assert text.calls == [] and vectors.calls == []


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "   \n", None, 42])
def test_empty_query_is_a_clear_answer(query):
    engine, *_ = engine_with()
    response = search(engine, query)
    assert response.results == []
    assert response.error.startswith("empty query")


def test_unknown_scope_is_a_clear_answer():
    engine, text, *_ = engine_with()
    response = search(engine, "reconnect", scope="galaxy")
    assert "unknown scope 'galaxy'" in response.error
    assert "session | project | knowledge | all" in response.error
    assert text.calls == []


def test_session_scope_without_a_session():
    engine, *_ = engine_with()
    assert "needs the current session" in search(engine, "reconnect", scope="session", session=None).error


def test_stop_word_only_query():
    engine, text, *_ = engine_with()
    assert "no searchable words" in search(engine, "what is it that we did?").error
    assert text.calls == []


def test_huge_query_is_truncated_and_still_searches():
    engine, text, *_ = engine_with()
    query = "websocket reconnect " + "lorem ipsum dolor " * 6000  # ~100 KB
    assert len(query) > 100_000
    response = search(engine, query)
    assert response.error is None
    assert len(response.query) <= MAX_QUERY_CHARS
    assert response.metadata["truncated_from"] == len(query)
    assert any("cut to its first" in n for n in response.notes)
    assert all(len(q) < 1000 for q, _, _ in text.calls)
    # The cascade relaxed the padded query down to terms that match.
    assert "t:m1" in [r.id for r in response.results]


def test_no_sources_for_the_scope():
    engine = RecallEngine()
    assert (
        search(engine, "anything").error
        == "nothing to search: no memory source is available for scope 'project'"
    )


def test_a_source_returning_bad_keys_loses_only_those_hits():
    engine = RecallEngine()
    engine.add_text_source(
        Kind.MESSAGE,
        Docs("m", {"good": ("alpha", {}), "bad key": ("alpha", {}), "": ("alpha", {})}),
    )
    assert [r.id for r in search(engine, "alpha", project=None).results] == ["t:good"]


def test_an_internal_failure_is_still_an_answer():
    class Weird:
        name = "weird"

        async def search(self, query, where, limit):
            return 5  # not a list: a source bug

    engine = RecallEngine()
    engine.add_text_source(Kind.MESSAGE, Weird())
    response = search(engine, "alpha")
    assert response.error is not None and response.error.startswith("recall failed:")


# -- degradation -------------------------------------------------------------------------------


def test_a_failing_source_degrades_while_others_answer():
    engine, *_ = engine_with()
    engine.add_text_source(Kind.MESSAGE, Docs("broken-index", {}, fail=OSError("index file is corrupt")))
    response = search(engine, "reconnect")
    assert response.error is None
    assert {"t:m1", "t:m2"} <= {r.id for r in response.results}
    assert response.notes == ["recall failed for message bm25 search (broken-index): index file is corrupt"]


def test_every_source_failing_is_reported_as_recall_failed():
    engine = RecallEngine()
    engine.add_text_source(Kind.MESSAGE, Docs("a", {}, fail=OSError("disk gone")))
    engine.add_text_source(Kind.KNOWLEDGE, Docs("b", {}, fail=RuntimeError("locked")))
    response = search(engine, "reconnect")
    assert response.results == []
    assert response.error == (
        "recall failed: message bm25 search (a): disk gone; knowledge bm25 search (b): locked"
    )


def test_a_hanging_source_times_out():
    class Hangs:
        name = "hangs"

        async def search(self, query, where, limit):
            await asyncio.Event().wait()

    engine, *_ = engine_with(source_timeout=0.05)
    engine.add_text_source(Kind.MESSAGE, Hangs())
    response = search(engine, "reconnect")
    assert {"t:m1", "t:m2"} <= {r.id for r in response.results}
    assert "recall failed for message bm25 search (hangs): timed out" in response.notes


def test_embedder_unavailable_degrades_to_full_text_once():
    embedder = Embedder(fail=EmbedderUnavailable("model file missing"))
    engine, _, vectors, _ = engine_with(embedder=embedder)
    engine.add_vector_source(Kind.KNOWLEDGE, Vectors("kb-vectors", KNOWLEDGE))
    response = search(engine, "websocket reconnect")
    assert response.error is None
    assert [r.id for r in response.results][:1] == ["t:m1"]
    assert response.metadata["full_text_only"] == "model file missing"
    assert response.notes == [
        "vector search unavailable (model file missing); results are from full-text search only"
    ]
    assert vectors.calls == [] and len(embedder.calls) == 1


def test_embedder_crash_is_degradation_too():
    engine, *_ = engine_with(embedder=Embedder(fail=ValueError("bad tensor")))
    response = search(engine, "websocket reconnect")
    assert response.results and response.metadata["full_text_only"] == "bad tensor"


def test_a_failing_vector_source_degrades_alone():
    engine, *_ = engine_with(embedder=Embedder())
    engine.add_vector_source(Kind.MESSAGE, Vectors("ann", {}, fail=RuntimeError("ann index missing")))
    response = search(engine, "websocket reconnect")
    assert response.results and response.notes == [
        "recall failed for message vector search (ann): ann index missing"
    ]


# -- the cascade inside the engine ------------------------------------------------------------


def test_long_question_finds_matches_through_the_cascade():
    engine = RecallEngine()
    source = DfDocs("messages", MESSAGES)
    engine.add_text_source(Kind.MESSAGE, source)
    response = search(engine, "How did we finally fix that annoying flaky websocket reconnect test on CI?")
    assert response.results and response.results[0].id == "t:m1"
    assert "messages" in response.metadata["relaxed"]
    assert len(source.calls) > 1


# -- expansion ---------------------------------------------------------------------------------


def worker_for(fake: FakeUpstream) -> WorkerClient:
    return WorkerClient(
        WorkerConfig(upstream=fake.url, model="m", api_key="k", api="openai-chat", max_retries=0)
    )


def test_expansion_finds_what_the_words_miss(fake_upstream):
    fake_upstream.enqueue(Reply(text='["retry backoff", "websocket reconnect"]'))
    worker = worker_for(fake_upstream)

    async def go():
        engine, text, *_ = engine_with(worker=worker, expand=True)
        try:
            return await engine.search("flaky reconnect", "project", S, P), text
        finally:
            await worker.close()

    response, text = run(go())
    assert response.metadata["expansions"] == ["retry backoff", "websocket reconnect"]
    ids = [r.id for r in response.results]
    # m1 matches the original words (full weight), m2 only a rephrasing (half weight).
    assert ids[0] == "t:m1" and "t:m2" in ids
    assert {q for q, _, _ in text.calls} >= {"flaky reconnect", "retry backoff", "websocket reconnect"}


class ByQuery:
    """A text source whose answer depends only on the exact query it gets."""

    name = "by-query"

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers

    async def search(self, query, where, limit):
        return [SourceHit(k, 1.0, k) for k in self.answers.get(query, [])]


def test_rephrasing_lists_count_half(fake_upstream):
    fake_upstream.enqueue(Reply(text='["gamma delta"]'))
    worker = worker_for(fake_upstream)

    async def go():
        engine = RecallEngine(worker=worker, expand=True, cascade_min_hits=1)
        engine.add_text_source(Kind.MESSAGE, ByQuery({"alpha beta": ["x", "o"], "gamma delta": ["e"]}))
        try:
            return await engine.search("alpha beta", "project", S, P)
        finally:
            await worker.close()

    response = run(go())
    # "e" is first for the rephrasing but counts 0.5/61, less than "o" second for the query (1/62).
    assert [r.id for r in response.results] == ["t:x", "t:o", "t:e"]


def test_expansion_without_worker_is_skipped_and_search_answers(fake_upstream):
    worker = WorkerClient(WorkerConfig())
    engine, *_ = engine_with(worker=worker, expand=True)
    response = search(engine, "reconnect")
    assert response.results
    assert response.metadata["expansion_skipped"].startswith("no worker:")
    assert fake_upstream.api_requests() == []


def test_slow_expansion_times_out_and_search_answers(fake_upstream):
    fake_upstream.enqueue(Reply(text='["late"]', delay_headers=1.5))
    worker = worker_for(fake_upstream)

    async def go():
        engine, *_ = engine_with(worker=worker, expand=True, expansion_timeout=0.1)
        try:
            return await engine.search("reconnect", "project", S, P)
        finally:
            await worker.close()

    response = run(go())
    assert response.results and response.metadata["expansion_skipped"] == "timed out after 0.1s"
    assert response.metadata["expansions"] == []


def test_expansion_off_makes_no_worker_call(fake_upstream):
    engine, *_ = engine_with(worker=worker_for(fake_upstream))
    search(engine, "reconnect")
    assert fake_upstream.api_requests() == []


# -- open -------------------------------------------------------------------------------------


def test_open_returns_the_full_item():
    engine, *_ = engine_with()
    response = run(engine.open("t:m2"))
    assert response.opened and response.error is None
    [item] = response.results
    assert (item.id, item.source, item.text) == ("t:m2", "message", MESSAGES["m2"][0])


@pytest.mark.parametrize(
    ("rid", "error"),
    [
        ("t:nope", "no memory with id t:nope (mistyped, or no longer stored)"),
        ("d:abc", "cannot open d:abc: no distillation memory is available here"),
        ("zz", "invalid recall id 'zz': expected a prefix"),
        ("", "empty recall id"),
        (None, "a recall id must be a string, got NoneType"),
    ],
)
def test_open_bad_ids_are_clear_answers(rid, error):
    engine, *_ = engine_with()
    response = run(engine.open(rid))
    assert response.results == [] and response.error.startswith(error)


def test_open_tries_every_opener_and_reports_failures():
    class Broken:
        async def open(self, key):
            raise OSError("store closed")

    engine, *_ = engine_with()
    engine._openers[Kind.MESSAGE].insert(0, Broken())
    assert run(engine.open("t:m1")).results[0].text == MESSAGES["m1"][0]
    assert run(engine.open("t:none")).error == "recall failed: cannot open t:none: store closed"


# -- the kernel store through the adapter -----------------------------------------------------


def test_store_source_over_the_memory_store_messages_and_distillations():
    from lore_core.builtin.memory_store import MemoryStore
    from lore_core.storage.records import StoredDistillation

    async def go():
        store = MemoryStore()
        await store.open()
        await store.write(
            WriteBatch(
                messages=[
                    StoredMessage("a1", S, None, 0, "user", text="deploy script fails on arm64", project=P),
                    StoredMessage("a2", S, "a1", 1, "assistant", text="use the multiarch image", project=P),
                ]
            )
        )
        await store.write_distillation(
            StoredDistillation(
                "dd1", S, 0, "- deploy on arm64 fixed with the multiarch image", ["a1", "a2"], P
            )
        )
        engine = RecallEngine()
        source = StoreMessageSource(store)
        engine.add_text_source(Kind.MESSAGE, source)
        engine.add_opener(Kind.MESSAGE, source)
        engine.add_opener(Kind.DISTILLATION, StoreDistillationOpener(store))
        found = await engine.search("why does the deploy script fail on arm64 machines?", "session", S, P)
        return found, await engine.open("t:a2"), await engine.open("d:dd1"), await engine.open("d:none")

    found, message, distillation, missing = run(go())
    by_id = {r.id: r for r in found.results}
    assert by_id["t:a1:0"].source == "message" and by_id["t:a1:0"].meta["session"] == S
    assert by_id["d:dd1:0"].source == "distillation"
    assert message.results[0].text == "[assistant]\nuse the multiarch image"
    assert distillation.results[0].text.startswith("[distillation]\n- deploy on arm64")
    assert distillation.results[0].meta["generation"] == 0
    assert missing.error.startswith("no memory with id d:none")


def test_a_mixed_source_keeps_each_hits_kind_within_the_scope():
    class Mixed:
        name = "mixed"

        async def search(self, query, where, limit):
            return [SourceHit("m", 2.0, "alpha one"), SourceHit("k1", 1.0, "alpha two", kind=Kind.KNOWLEDGE)]

    engine = RecallEngine()
    engine.add_text_source(Kind.MESSAGE, Mixed())
    assert [r.id for r in search(engine, "alpha").results] == ["t:m", "k:k1"]
    assert [r.id for r in search(engine, "alpha", scope="session").results] == ["t:m"]


def test_distillations_join_under_their_prefix_and_the_session_filter():
    engine, *_ = engine_with()
    notes = Docs(
        "observations",
        {
            "obs-1": ("reconnect fixed with retry backoff", {"session": S, "project": P}),
            "obs-2": ("reconnect discussed elsewhere", {"session": "sess-2", "project": P}),
        },
    )
    engine.add_text_source(Kind.DISTILLATION, notes)
    ids = {r.id: r.source for r in search(engine, "reconnect", scope="session").results}
    assert ids["d:obs-1"] == "distillation" and "d:obs-2" not in ids
    assert "d:obs-2" in {r.id for r in search(engine, "reconnect").results}


def test_a_query_without_words_can_still_search_vectors():
    engine, text, vectors, _ = engine_with(embedder=Embedder())
    response = search(engine, "why?? ...")
    assert response.error is None and vectors.calls and text.calls == []


def test_default_scope_is_project():
    engine, text, *_ = engine_with()
    response = search(engine, "reconnect", scope=None)
    assert response.scope == "project" and text.calls[-1][1].project == P
