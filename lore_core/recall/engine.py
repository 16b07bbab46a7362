"""The recall engine: hybrid search over every registered source, and opening one result.

``search`` runs, for each source kind the scope allows:

* per text source, the relaxed full-text cascade (:mod:`lore_core.recall.cascade`) for the
  query;
* per vector source, a nearest-neighbour search for the query's embedding;
* optionally, the same searches (plain, no cascade) for 2-3 LLM rephrasings
  (:mod:`lore_core.recall.expansion`), weighted half;

and makes the answer of those lists (:mod:`lore_core.recall.ranking`: fused by reciprocal
rank fusion, re-ranked by their lists' normalised scores, :mod:`lore_core.recall.fusion`).

Recall is a tool the model calls, so nothing here raises into the caller: bad input gives a
response whose ``error`` explains it, a failing source is reported in ``notes`` while the
others still answer, and an embedder that cannot work (:class:`EmbedderUnavailable`) makes
the search full-text only, said once in the response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import Any

import attrs

from lore_core.interfaces import Embedder, EmbedderUnavailable
from lore_core.recall.cascade import DEFAULT_MIN_HITS, cascade_search, query_terms
from lore_core.recall.expansion import DEFAULT_TIMEOUT_SECONDS, Completer, Expansion, expand_query
from lore_core.recall.fusion import (
    BM25,
    EXPANSION_WEIGHT,
    VECTOR,
    Ranked,
    RankedList,
    fuse,
    list_weights,
    rerank,
)
from lore_core.recall.ids import Kind, RecallIdError, Scope, ScopeError, format_id, parse_id, parse_scope
from lore_core.recall.intent import QueryPlan, title_match
from lore_core.recall.intent import parse as parse_intent
from lore_core.recall.ranking import (
    MATCH_FLOOR,
    UNREAD,
    RecallResult,
    Unread,
    answer_of,
    known_passages,
    rank,
    relevant_ids,
    similarities,
    term_patterns,
    unread_bounds,
    when,
)
from lore_core.recall.sources import (
    ITEM,
    NEXT,
    PREVIOUS,
    AliasExpansion,
    AliasSource,
    DocFreqSource,
    Opener,
    PassageVectorSource,
    SearchFilter,
    SessionDirectory,
    SourceHit,
    TextSource,
    VectorSource,
)
from lore_core.storage.records import PassageRef
from lore_core.storage.tags import tags_of

log = logging.getLogger("lore.recall")

DEFAULT_LIMIT = 10
MAX_LIMIT = 50
# A query is a few words; anything longer is a pasted log or file. Its head is kept (cut at
# a word boundary): that is where the error line or the question usually is.
MAX_QUERY_CHARS = 2000
# Each list fetches more than the final limit, so fusion has overlap to reward.
FETCH_FACTOR = 3
# The vector lists fetch deeper: a passing mention of the thing asked ("my Zumba class on
# Tuesdays" for "which fitness classes do I attend") is often a weak neighbour of the
# question, and the ANN search costs the same at 50 as at 30 (the extra cost is reading
# 20 more passages). LongMemEval turn all@10 0.849 -> 0.858 at 5x, 4x lost a session; the
# full-text lists fetched deeper changed nothing but their cost (benchmarks/README.md).
VECTOR_FETCH_FACTOR = 5
#: Passages fetched for the events a query asks about (a session rarely has more of one kind).
EVENT_FETCH = 200
#: Weight of the event lists in fusion, beside the query's own lists (1.0 each). 0.5 lost
#: 2 of the 166 generated real-session questions and changed none of the 96 natural ones.
EVENT_WEIGHT = 1.0
#: The focus search (``RecallEngine._focus_lists``): the best full-text hits read for the
#: session they point at, the share of their scores it must hold, the hits of it needed to
#: tell its subject's words from the detail's, the share of those hits a detail term may
#: be in at most, and the weight of its list. Set once, by reason, then measured on the
#: natural and the generated real-session questions: 46 and 163 of 96 and 166 (41 and 163
#: without); DETAIL_SHARE 0.2 / 0.45, FOCUS_SHARE 0.35, FOCUS_HITS 40 and a weight of 2
#: moved the natural set by -3 to +1 and were not taken.
FOCUS_HITS = 20
FOCUS_SHARE = 0.5
FOCUS_MIN_TEXTS = 5
DETAIL_SHARE = 0.3
FOCUS_WEIGHT = 1.0
#: Full-text hits read to place an "after 'X'" anchor in time.
ANCHOR_FETCH = 20
#: A quoted phrase names a session when it matches that session's title this well (the
#: share of its words, in order) ...
SESSION_MATCH = 0.75
#: ... and better than any other title by this much.
SESSION_MARGIN = 0.15
DEFAULT_SOURCE_TIMEOUT_SECONDS = 10.0
# What a vector list answers when the query has no embedding (the embedder failed).
_NO_VECTOR = object()
#: Reads of unread vector passages a search makes before it reads all that are left
#: (:meth:`RecallEngine._rank`; each read is one store query).
READ_ROUNDS = 3
#: Scores closer than this are taken as equal (``rank`` sorts scores rounded to 12 places).
_TIE = 1e-9


@attrs.define
class RecallResponse:
    query: str = ""
    scope: str = ""
    results: list[RecallResult] = attrs.field(factory=list)
    #: Set when nothing could be searched or opened; the text to show the model.
    error: str | None = None
    #: Degradations the model should know about (a failed source, full-text only, ...),
    #: each said once.
    notes: list[str] = attrs.field(factory=list)
    #: For logs and tests: terms searched, rephrasings, truncation, ``full_text_only``.
    metadata: dict[str, Any] = attrs.field(factory=dict)
    #: True for the answer of :meth:`RecallEngine.open` (one result, full text).
    opened: bool = False

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    @property
    def matched(self) -> bool:
        """Whether some result clears :data:`MATCH_FLOOR`: when none does, the memory holds
        nothing that matches the query, and the results are only the closest there is."""
        return any(r.relevance >= MATCH_FLOOR for r in self.results)


def truncate_query(query: str, max_chars: int = MAX_QUERY_CHARS) -> tuple[str, bool]:
    """Whitespace collapsed, then cut to ``max_chars`` at a word boundary when possible."""
    text = " ".join(query.split())
    if len(text) <= max_chars:
        return text, False
    cut = text[:max_chars]
    space = cut.rfind(" ")
    if space > max_chars // 2:
        cut = cut[:space]
    return cut, True


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    # getattr: an exception, not a plugin; WorkerError and EmbedderUnavailable carry ``reason``.
    reason = getattr(exc, "reason", None) or str(exc) or exc.__class__.__name__
    return " ".join(str(reason).split())[:200]


def focus_session(hits: Sequence[SourceHit]) -> str | None:
    """The session a query's full-text hits point at: the one holding at least
    :data:`FOCUS_SHARE` of the best :data:`FOCUS_HITS` hits' scores (``None`` when no
    session does, or the hits name none)."""
    top = list(hits[:FOCUS_HITS])
    total = sum(max(0.0, float(h.score)) for h in top)
    if total <= 0:
        return None
    by_session: dict[str, float] = {}
    for h in top:
        sid = h.meta.get("session")
        if sid:
            by_session[sid] = by_session.get(sid, 0.0) + max(0.0, float(h.score))
    if not by_session:
        return None
    best = max(by_session, key=lambda sid: by_session[sid])
    return best if by_session[best] >= FOCUS_SHARE * total else None


def detail_terms(terms: Sequence[str], texts: Sequence[str]) -> list[str]:
    """The terms of a query that at most :data:`DETAIL_SHARE` of ``texts`` (one session's
    hits) hold: the detail asked, once the subject's words, which that session's hits
    nearly all hold, are left out. Empty when every term is that common or none is."""
    if len(texts) < FOCUS_MIN_TEXTS or len(terms) < 2:
        return []
    lowered = [t.lower() for t in texts]
    detail = []
    for term, (pattern, _) in zip(terms, term_patterns(terms), strict=True):
        share = sum(1 for t in lowered if pattern.search(t)) / len(lowered)
        if share <= DETAIL_SHARE:
            detail.append(term)
    return detail if 0 < len(detail) < len(terms) else []


class RecallEngine:
    """Hybrid recall over registered sources. One per gateway; safe to share between
    concurrent searches (it keeps no per-search state)."""

    def __init__(
        self,
        *,
        embedder: Embedder | None = None,
        worker: Completer | None = None,
        expand: bool = False,
        expansion_timeout: float = DEFAULT_TIMEOUT_SECONDS,
        source_timeout: float = DEFAULT_SOURCE_TIMEOUT_SECONDS,
        cascade_min_hits: int = DEFAULT_MIN_HITS,
        max_query_chars: int = MAX_QUERY_CHARS,
        sessions: SessionDirectory | None = None,
        aliases: AliasSource | None = None,
        read_every_passage: bool = False,
    ) -> None:
        self.embedder = embedder
        #: Read every vector passage found, not only those that can reach the answer: the
        #: answer is the same, and the lists handed to :func:`rank` are complete (a benchmark
        #: capturing them to replay other rankings, ``retrieval_quality.py --dump-lists``).
        self.read_every_passage = read_every_passage
        #: Where the entities a query names are found (alias expansion); ``None``: none.
        self.aliases = aliases
        #: Where a session named in a query is looked up by its title.
        self.sessions = sessions
        self.worker = worker
        self.expand = expand
        self.expansion_timeout = expansion_timeout
        self.source_timeout = source_timeout
        self.cascade_min_hits = cascade_min_hits
        self.max_query_chars = max_query_chars
        self._text: dict[Kind, list[TextSource]] = {}
        self._vector: dict[Kind, list[VectorSource]] = {}
        self._openers: dict[Kind, list[Opener]] = {}
        self._logged: set[str] = set()
        #: Why this engine has no vector search at all (e.g. no embedding provider is
        #: installed); each search's notes then say it is full-text only.
        self.vectors_unavailable: str | None = None

    # -- registration ------------------------------------------------------------------------

    def add_text_source(self, kind: Kind | str, source: TextSource) -> None:
        self._text.setdefault(Kind(kind), []).append(source)

    def add_vector_source(self, kind: Kind | str, source: VectorSource) -> None:
        self._vector.setdefault(Kind(kind), []).append(source)

    def add_opener(self, kind: Kind | str, opener: Opener) -> None:
        self._openers.setdefault(Kind(kind), []).append(opener)

    def _log_once(self, text: str) -> None:
        # Degradations repeat on every recall; the log says each distinct one once.
        if text not in self._logged:
            self._logged.add(text)
            log.warning("recall: %s", text)

    async def _bounded(self, awaitable: Awaitable[Any]) -> Any:
        return await asyncio.wait_for(awaitable, timeout=self.source_timeout)

    # -- search ------------------------------------------------------------------------------

    async def search(
        self,
        query: object,
        scope: object = None,
        session: str | None = None,
        project: str | None = None,
        limit: object = DEFAULT_LIMIT,
    ) -> RecallResponse:
        """Search memory. Never raises (but for cancellation): see the module docstring."""
        try:
            return await self._search(query, scope, session, project, limit)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not break the model's turn
            log.exception("recall search failed")
            return RecallResponse(query=str(query)[:200], error=f"recall failed: {_reason(exc)}")

    async def _search(
        self, query: object, scope_in: object, session: str | None, project: str | None, limit_in: object
    ) -> RecallResponse:
        try:
            scope = parse_scope(scope_in)
        except ScopeError as exc:
            return RecallResponse(error=str(exc))
        if not isinstance(query, str) or not query.strip():
            return RecallResponse(
                scope=scope.value, error="empty query: say what to look for, or pass an id to open a result"
            )
        text, truncated = truncate_query(query, self.max_query_chars)
        response = RecallResponse(query=text, scope=scope.value)
        if truncated:
            response.metadata["truncated_from"] = len(query)
            response.note(f"the query was cut to its first {len(text)} characters")
        limit = self._limit(limit_in)
        if scope is Scope.SESSION and not session:
            response.error = (
                "scope 'session' needs the current session, which is not known here; use 'project'"
            )
            return response

        kinds = [k for k in scope.kinds if self._text.get(k) or self._vector.get(k)]
        if not kinds:
            response.error = f"nothing to search: no memory source is available for scope '{scope.value}'"
            return response
        intent = parse_intent(text)
        caller = session  # whose credentials a worker call uses
        named = await self._named_session(intent, scope, project, response)
        if named is not None:
            session = named
            # Confined to the session the query names, what it asks of that session is all
            # the question: its readings weigh fully (``boost``).
            intent = attrs.evolve(intent, reading_share=1.0)
        # The session's name is not what to look for in it.
        if named is not None and (query_terms(intent.text) or intent.events):
            text = intent.text
        if not intent.plain:
            response.metadata["intent"] = {
                "events": list(intent.events), "order": intent.order,
                "anchor": intent.anchor, "anchor_side": intent.anchor_side,
                "about_user": intent.about_user,
            }  # fmt: skip
        terms = query_terms(text)
        response.metadata["terms"] = terms
        vector_sources = any(self._vector.get(k) for k in kinds) and self.embedder is not None
        if not terms and not vector_sources:
            response.error = "the query has no searchable words (only stop words or punctuation)"
            return response

        if self.vectors_unavailable and not vector_sources:
            reason = self.vectors_unavailable
            response.metadata["full_text_only"] = reason
            response.note(f"vector search unavailable ({reason}); results are from full-text search only")
        bm25_weight, vector_weight = list_weights(len(terms))
        fetch, vector_fetch = limit * FETCH_FACTOR, limit * VECTOR_FETCH_FACTOR
        filters = {k: self._filter(scope, k, session, project, named is not None) for k in kinds}

        expansion_task: asyncio.Task[Expansion] | None = None
        if self.expand and self.worker is not None:
            expansion_task = asyncio.create_task(
                expand_query(text, self.worker, timeout=self.expansion_timeout, session_id=caller)
            )

        # Alias expansion: the full-text lists search the query with the other names of the
        # entities it names added (kept beside the name used, not in its place: a separate
        # list without the name would weigh the question's other words up; measured on
        # LongMemEval, benchmarks/aliases.py). The query's embedding stays the query's own.
        expansions = await self._alias_expansions(text, project, response)
        searched = text
        if expansions:
            names = dict.fromkeys(n for e in expansions for n in e.names)
            searched = text + " " + " ".join(names)

        try:
            lists: list[RankedList] = []
            failures: list[str] = []
            # The query is embedded while the full-text lists already run: the vector lists
            # wait for it, the others do not.
            query_vector = asyncio.ensure_future(self._embed_one(text, response)) if vector_sources else None
            lists += await self._run_lists(
                kinds, filters, searched, query_vector,
                bm25_weight, vector_weight, fetch, vector_fetch, "q0", True, response, failures,
            )  # fmt: skip
            if expansion_task is not None:
                expansion = await expansion_task
                expansion_task = None
                if expansion.skipped:
                    response.metadata["expansion_skipped"] = expansion.skipped
                response.metadata["expansions"] = list(expansion.rephrasings)
                vectors = (
                    await self._embed(expansion.rephrasings, response)
                    if vector_sources and expansion.rephrasings and "full_text_only" not in response.metadata
                    else None
                )
                for i, rephrasing in enumerate(expansion.rephrasings, start=1):
                    lists += await self._run_lists(
                        kinds, filters, rephrasing, vectors[i - 1] if vectors else None,
                        bm25_weight * EXPANSION_WEIGHT, vector_weight * EXPANSION_WEIGHT,
                        fetch, vector_fetch, f"q{i}", False, response, failures,
                    )  # fmt: skip
            if intent.events:
                lists += await self._event_lists(kinds, filters, intent, response, failures)
            if named is None and scope is not Scope.SESSION:
                lists += await self._focus_lists(kinds, filters, intent, lists, fetch, response)
            anchor = await self._anchor(kinds, filters, intent) if intent.anchor else None
        finally:
            if expansion_task is not None:
                expansion_task.cancel()

        response.results = await self._rank(lists, intent, anchor, limit, response, failures)
        if failures and not lists:
            # Every list failed: an empty result would read as "nothing remembered".
            response.error = "recall failed: " + "; ".join(dict.fromkeys(failures))
        return response

    async def _alias_expansions(
        self, text: str, project: str | None, response: RecallResponse
    ) -> list[AliasExpansion]:
        """The entities the query names (alias expansion), said in the response."""
        if self.aliases is None:
            return []
        try:
            found = list(await self._bounded(self.aliases.expand(text, project)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an entity table that fails costs the expansion only
            self._log_once(f"alias expansion failed: {_reason(exc)}")
            response.note(f"alias expansion failed: {_reason(exc)}")
            return []
        if found:
            response.metadata["aliases"] = [e.as_json() for e in found]
            for e in found:
                names = ", ".join(f'"{n}"' for n in e.names)
                response.note(f'"{e.matched}" is {e.entity}: also searched for {names}')
        return found

    def _limit(self, value: object) -> int:
        try:
            limit = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return DEFAULT_LIMIT
        return max(1, min(MAX_LIMIT, limit))

    @staticmethod
    def _filter(
        scope: Scope, kind: Kind, session: str | None, project: str | None, named: bool = False
    ) -> SearchFilter:
        in_session = scope is Scope.SESSION or (named and kind in (Kind.MESSAGE, Kind.DISTILLATION))
        return SearchFilter(
            scope=scope,
            session=session if in_session else None,
            project=None if scope.crosses_projects(kind) else project,
            home=project,
        )

    async def _named_session(
        self, intent: QueryPlan, scope: Scope, project: str | None, response: RecallResponse
    ) -> str | None:
        """The session a quoted phrase of the query names by its title (its first prompt),
        when one title matches clearly better than the others; ``None`` otherwise."""
        if intent.session_quote is None or self.sessions is None or scope is Scope.KNOWLEDGE:
            return None
        try:
            titles = await self._bounded(self.sessions.titles(None if scope is Scope.ALL else project))
        except Exception as exc:  # a missing directory costs precision, never the answer
            self._log_once(f"session titles unavailable: {_reason(exc)}")
            return None
        ranked = sorted(((title_match(intent.session_quote, t), sid, t) for sid, t in titles), reverse=True)
        if not ranked or ranked[0][0] < SESSION_MATCH:
            return None
        if len(ranked) > 1 and ranked[0][0] - ranked[1][0] < SESSION_MARGIN:
            return None
        _, sid, title = ranked[0]
        response.metadata["session"] = sid
        response.note(f'searched the session that started with "{" ".join(title.split())[:80]}" ({sid})')
        return sid

    async def _embed(self, texts: Sequence[str], response: RecallResponse) -> list[list[float]] | None:
        if self.embedder is None or "full_text_only" in response.metadata:
            return None
        try:
            vectors = await self._bounded(self.embedder.embed_query(list(texts)))
        except EmbedderUnavailable as exc:
            reason = exc.reason
            response.metadata["full_text_only"] = reason
            response.note(f"vector search unavailable ({reason}); results are from full-text search only")
            self._log_once(f"embedder unavailable, full-text only: {reason}")
            return None
        except Exception as exc:
            reason = _reason(exc)
            response.metadata["full_text_only"] = reason
            response.note(f"vector search failed ({reason}); results are from full-text search only")
            self._log_once(f"embedding failed, full-text only: {reason}")
            return None
        if not isinstance(vectors, list) or len(vectors) != len(texts):
            response.metadata["full_text_only"] = "embedder returned a wrong number of vectors"
            response.note("vector search failed; results are from full-text search only")
            return None
        return vectors

    async def _embed_one(self, text: str, response: RecallResponse) -> list[float] | None:
        vectors = await self._embed([text], response)
        return vectors[0] if vectors else None

    @staticmethod
    async def _vector_search(
        source: VectorSource,
        vector: list[float] | asyncio.Future[list[float] | None],
        where: SearchFilter,
        fetch: int,
    ) -> Any:
        if not isinstance(vector, list):
            awaited = await vector
            if awaited is None:
                return _NO_VECTOR
            vector = awaited
        if isinstance(source, PassageVectorSource):
            return await source.nearest(vector, where, fetch)  # read later: RecallEngine._rank
        return await source.search_vector(vector, where, fetch)

    async def _run_lists(
        self,
        kinds: Sequence[Kind],
        filters: dict[Kind, SearchFilter],
        text: str,
        vector: list[float] | asyncio.Future[list[float] | None] | None,
        bm25_weight: float,
        vector_weight: float,
        fetch: int,
        vector_fetch: int,
        tag: str,
        use_cascade: bool,
        response: RecallResponse,
        failures: list[str],
    ) -> list[RankedList]:
        jobs: list[tuple[str, Kind, str, Awaitable[Sequence[Any]], float, Any]] = []
        for kind in kinds:
            where = filters[kind]
            for source in self._text.get(kind, []):
                jobs.append(
                    (f"{kind.value}:{source.name}:{BM25}:{tag}", kind, BM25,
                     self._text_search(source, text, where, fetch, use_cascade, response, tag), bm25_weight,
                     source)
                )  # fmt: skip
            if vector is not None:
                for vsource in self._vector.get(kind, []):
                    jobs.append(
                        (f"{kind.value}:{vsource.name}:{VECTOR}:{tag}", kind, VECTOR,
                         self._vector_search(vsource, vector, where, vector_fetch), vector_weight, vsource)
                    )  # fmt: skip
        outcomes = await asyncio.gather(*(self._bounded(job[3]) for job in jobs), return_exceptions=True)
        lists: list[RankedList] = []
        for (name, kind, method, _, weight, source), outcome in zip(jobs, outcomes, strict=True):
            source_name = name.split(":")[1]
            if isinstance(outcome, asyncio.CancelledError):
                raise outcome
            if outcome is _NO_VECTOR:
                continue  # the query could not be embedded (said once in the notes)
            if isinstance(outcome, BaseException):
                reason = _reason(outcome)
                # The legs that gave nothing, by kind and method (a pack's "degraded").
                failed = response.metadata.setdefault("failed_legs", [])
                if f"{kind.label}:{method}" not in failed:
                    failed.append(f"{kind.label}:{method}")
                failures.append(f"{kind.label} {method} search ({source_name}): {reason}")
                response.note(f"recall failed for {kind.label} {method} search ({source_name}): {reason}")
                self._log_once(f"{kind.label} {method} search ({source_name}) failed: {reason}")
                continue
            items: list[Ranked] = []
            allowed = filters[kind].scope.kinds
            for hit in outcome or []:
                if isinstance(hit, PassageRef):
                    unread = Unread(source, hit, kind, allowed)
                    items.append(Ranked(UNREAD + unread.key, hit.score, unread))
                    continue
                try:
                    # getattr: a source (kernel-internal, not a plugin) may return hits of its
                    # own class; without ``kind`` a hit is of the kind the source serves.
                    hit_kind = Kind(hit.kind) if getattr(hit, "kind", None) else kind
                    rid = format_id(hit_kind, str(hit.key))
                except (RecallIdError, AttributeError, ValueError):
                    continue  # a source bug: skip the hit, never the list
                if hit_kind not in allowed:
                    continue  # a mixed source's hit of a kind this scope excludes
                items.append(Ranked(rid, float(hit.score), (hit_kind, hit)))
            lists.append(RankedList(name, items, weight, method))
        return lists

    async def _rank(
        self,
        lists: list[RankedList],
        intent: QueryPlan,
        anchor: tuple[float, int, int] | None,
        limit: int,
        response: RecallResponse,
        failures: list[str],
    ) -> list[RecallResult]:
        """:func:`rank` over the lists, once the vector lists' passages that can reach the
        answer are read (the rest never are: reading one means reading and cutting its
        whole item, ~0.5 ms a passage at 1M messages, and most never reach the answer).

        A passage a full-text list holds is not read again. Then, for a query that orders
        by nothing but score, in rounds: the passages of items a read passage belongs to
        (they join its result), and those whose fusion score reaches the last result of the
        answer made of what is read (while that answer is not full, twice as many as it
        lacks, best first), each with its item's other unread passages. Fusion scores need
        no text, and a passage's score in the answer is at most its fusion score (its
        kind's prior only lowers it, an item ranks by its best passage). So once every
        passage left unread scores below a full answer's last result, reading them would
        give this same answer (a passage left unread has no read passage of its item to
        join, and ranks after every result); the last round reads all that is left. A query
        that orders by time or by event tags, or lifts a request by its reply's score, reads
        every passage (so does an engine told to ``read_every_passage``)."""
        lists = known_passages(lists)
        if not any(isinstance(item.payload, Unread) for ranked in lists for item in ranked.items):
            return rank(lists, intent, anchor, limit)
        if self.read_every_passage or intent.events or intent.order or intent.anchor or intent.about_user:
            lists = await self._read(lists, None, response, failures)
            return rank(lists, intent, anchor, limit)
        fused, relevant = rerank(fuse(lists), lists), relevant_ids(lists)
        answer = answer_of(fused, relevant, intent, anchor, limit, similarities(lists))
        for round_ in range(1, READ_ROUNDS + 1):
            bounds = unread_bounds(fused, relevant)
            if not bounds:
                return answer
            owners = {f.id: f.payload.ref.item for f in fused if isinstance(f.payload, Unread)}
            read_items = {
                str(f.payload[1].meta.get(ITEM))
                for f in fused
                if not isinstance(f.payload, Unread) and f.payload[1].meta.get(ITEM)
            }
            # Passages of an item a read passage belongs to join its result when read.
            wanted = {rid for rid, owner in owners.items() if owner in read_items}
            if len(answer) >= limit:
                floor = min(r.score for r in answer)
                if not wanted and max(bounds.values()) < floor - _TIE:
                    return answer
                wanted |= {rid for rid, bound in bounds.items() if bound >= floor - _TIE}
            else:
                # Not full: the likeliest passages to fill it, a few more than it lacks.
                best = sorted(bounds, key=lambda rid: -bounds[rid])
                wanted |= set(best[: 2 * (limit - len(answer))])
            # Those read make their items' other passages join too: read them together (a
            # session's search finds most passages of its few items).
            chosen = {owners[rid] for rid in wanted}
            wanted |= {rid for rid, owner in owners.items() if owner in chosen}
            if round_ == READ_ROUNDS:
                wanted = set(bounds)  # the rest, in one last read
            lists = await self._read(lists, wanted, response, failures)
            fused, relevant = rerank(fuse(lists), lists), relevant_ids(lists)
            answer = answer_of(fused, relevant, intent, anchor, limit, similarities(lists))
        return answer  # the last round read every passage left

    async def _read(
        self, lists: list[RankedList], wanted: set[str] | None, response: RecallResponse, failures: list[str]
    ) -> list[RankedList]:
        """The lists with the unread passages ``wanted`` (every one with ``None``) read: each
        becomes its hit under its result id; one whose item is gone, of a kind the scope
        excludes, or whose source fails, leaves its list (a failure is said like a failed
        list's)."""
        pending: dict[str, Unread] = {}
        for ranked in lists:
            for item in ranked.items:
                if isinstance(item.payload, Unread) and (wanted is None or item.id in wanted):
                    pending.setdefault(item.id, item.payload)
        if not pending:
            return lists
        by_source: dict[int, list[Unread]] = {}
        for unread in pending.values():
            by_source.setdefault(id(unread.source), []).append(unread)
        found: dict[str, Ranked | None] = dict.fromkeys(pending)
        for group in by_source.values():
            source, kind = group[0].source, group[0].kind
            try:
                hits = await self._bounded(source.read([u.ref for u in group]))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason, name = _reason(exc), source.name
                failures.append(f"{kind.label} vector search ({name}): {reason}")
                response.note(f"recall failed for {kind.label} vector search ({name}): {reason}")
                self._log_once(f"{kind.label} vector search ({name}) failed reading passages: {reason}")
                continue
            by_key = {str(hit.key): hit for hit in hits}
            for unread in group:
                hit = by_key.get(unread.key)
                if hit is None:
                    continue
                hit_kind = Kind(hit.kind) if hit.kind else unread.kind
                if hit_kind in unread.allowed:
                    rid = format_id(hit_kind, str(hit.key))
                    found[UNREAD + unread.key] = Ranked(rid, 0.0, (hit_kind, hit))
        out: list[RankedList] = []
        for ranked in lists:
            items: list[Ranked] = []
            for item in ranked.items:
                if item.id not in found:
                    items.append(item)
                elif (read := found[item.id]) is not None:
                    items.append(Ranked(read.id, item.score, read.payload))
            out.append(attrs.evolve(ranked, items=items))
        return out

    async def _event_lists(
        self,
        kinds: Sequence[Kind],
        filters: dict[Kind, SearchFilter],
        intent: QueryPlan,
        response: RecallResponse,
        failures: list[str],
    ) -> list[RankedList]:
        """One full-text list per text source of the passages tagged with the events the
        query asks about (the tags are single tokens in each passage's header), so those
        passages are candidates whatever words the question used."""
        query = " ".join(intent.events)
        lists: list[RankedList] = []
        for kind in kinds:
            for source in self._text.get(kind, []):
                try:
                    hits = await self._bounded(source.search(query, filters[kind], EVENT_FETCH))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    failures.append(f"{kind.label} event search ({source.name}): {_reason(exc)}")
                    response.note(
                        f"recall failed for {kind.label} event search ({source.name}): {_reason(exc)}"
                    )
                    continue
                items = [
                    Ranked(
                        format_id(hit.kind or kind, str(hit.key)), float(hit.score), (hit.kind or kind, hit)
                    )
                    for hit in hits
                    if set(tags_of(hit.text)) & set(intent.events)
                ]
                lists.append(RankedList(f"{kind.value}:{source.name}:events", items, EVENT_WEIGHT, BM25))
        return lists

    async def _focus_lists(
        self,
        kinds: Sequence[Kind],
        filters: dict[Kind, SearchFilter],
        plan: QueryPlan,
        lists: Sequence[RankedList],
        fetch: int,
        response: RecallResponse,
    ) -> list[RankedList]:
        """A question names its subject, then asks a detail of it ("which timeouts did the
        wingman review end up with"): the subject's words are all over the session that
        was about it, so across the project they find that session, and inside it they find
        everything. Once the query's own full-text hits point at one session, its
        :func:`detail_terms` (the query's terms that few of that session's hits hold) are
        searched again inside it: one more candidate list, weighed like the others."""
        hits = [
            item.payload[1]
            for ranked in lists
            if ranked.method == BM25
            and ranked.name.startswith(Kind.MESSAGE.value)
            and ranked.name.endswith(":q0")
            for item in ranked.items
            if not isinstance(item.payload, Unread)
        ]
        session = focus_session(hits)
        if session is None:
            return []
        detail = detail_terms(plan.terms, [h.text for h in hits if h.meta.get("session") == session])
        if not detail:
            return []
        response.metadata["focus"] = {"session": session, "terms": detail}
        out: list[RankedList] = []
        where = attrs.evolve(filters[Kind.MESSAGE], session=session)
        for source in self._text.get(Kind.MESSAGE, []):
            try:
                found = await self._bounded(source.search(" ".join(detail), where, fetch))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._log_once(f"message focus search ({source.name}) failed: {_reason(exc)}")
                continue
            items = [
                Ranked(
                    format_id(hit.kind or Kind.MESSAGE, str(hit.key)),
                    float(hit.score),
                    (hit.kind or Kind.MESSAGE, hit),
                )
                for hit in found
            ]
            out.append(RankedList(f"{Kind.MESSAGE.value}:{source.name}:focus", items, FOCUS_WEIGHT, BM25))
        return out

    async def _anchor(
        self, kinds: Sequence[Kind], filters: dict[Kind, SearchFilter], intent: QueryPlan
    ) -> tuple[float, int, int] | None:
        """When the anchor phrase of the query ("after 'X'") happened: the time of the best
        full-text match for it, preferring passages that record one of the asked events (a
        commit message matched in the commit itself, not in a later summary)."""
        assert intent.anchor is not None
        best: tuple[int, float, tuple[float, int, int]] | None = None
        for kind in kinds:
            for source in self._text.get(kind, []):
                try:
                    hits = await self._bounded(source.search(intent.anchor, filters[kind], ANCHOR_FETCH))
                except asyncio.CancelledError:
                    raise
                except Exception:
                    continue
                phrase = " ".join(intent.anchor.lower().split())
                for hit in hits:
                    literal = phrase in " ".join(hit.text.lower().split())
                    tagged = bool(set(tags_of(hit.text)) & set(intent.events))
                    rank = 2 * literal + tagged
                    candidate = (rank, float(hit.score), when(hit.meta))
                    if best is None or candidate[:2] > best[:2]:
                        best = candidate
        return best[2] if best is not None else None

    async def _text_search(
        self,
        source: TextSource,
        text: str,
        where: SearchFilter,
        fetch: int,
        use_cascade: bool,
        response: RecallResponse,
        tag: str,
    ) -> Sequence[SourceHit]:
        async def run(q: str) -> Sequence[SourceHit]:
            return await source.search(q, where, fetch)

        doc_freq = source.doc_freq if isinstance(source, DocFreqSource) else None
        result = await cascade_search(
            text,
            run,
            min_hits=self.cascade_min_hits if use_cascade else 0,
            max_steps=6 if use_cascade else 0,
            doc_freq=doc_freq,
        )
        if use_cascade and len(result.tried) > 1:
            response.metadata.setdefault("relaxed", {})[source.name] = result.terms
        return result.hits

    # -- open --------------------------------------------------------------------------------

    async def open(self, recall_id: object) -> RecallResponse:
        """One result in full by its id. Never raises (but for cancellation)."""
        try:
            rid = parse_id(recall_id)
        except RecallIdError as exc:
            return RecallResponse(error=str(exc), opened=True)
        response = RecallResponse(query=str(rid), opened=True)
        openers = self._openers.get(rid.kind, [])
        if not openers:
            response.error = f"cannot open {rid}: no {rid.kind.label} memory is available here"
            return response
        failures: list[str] = []
        for opener in openers:
            try:
                hit = await self._bounded(opener.open(rid.key))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures.append(_reason(exc))
                self._log_once(f"opening {rid.kind.label} failed: {_reason(exc)}")
                continue
            if hit is not None:
                meta = dict(hit.meta)
                for key in (PREVIOUS, NEXT):  # paging keys as ids the model can pass back
                    if meta.get(key):
                        meta[key] = format_id(rid.kind, str(meta[key]))
                response.results = [RecallResult(str(rid), rid.kind.label, 0.0, hit.text, meta)]
                return response
        if failures:
            response.error = f"recall failed: cannot open {rid}: " + "; ".join(failures)
        else:
            response.error = f"no memory with id {rid} (mistyped, or no longer stored)"
        return response
