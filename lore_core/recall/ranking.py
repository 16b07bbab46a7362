"""The answer made of a search's ranked lists (:func:`rank`): fused and re-ranked
(:mod:`lore_core.recall.fusion`), what scores too little of its lists' best left out, weighed
by the passage's kind and, in a question about the user, by speaker, lifted for what the
query asks beyond its words (events, order, an anchor in time), an item's passages grouped,
repeats dropped, cut to the limit; and each result's own :func:`relevance` to the query.

A pure function of the lists the engine (:mod:`lore_core.recall.engine`) fetched, so other
rankings can be replayed on captured lists (``benchmarks/rank_replay.py``).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from lore_core.recall.cascade import heuristic_informativeness
from lore_core.recall.fusion import VECTOR, Fused, Ranked, RankedList, fuse, rerank
from lore_core.recall.ids import Kind
from lore_core.recall.intent import BEFORE, FIRST, LAST, MOST, QueryPlan
from lore_core.recall.sources import ITEM, PASSAGE, SOURCE, SPAN, PassageVectorSource
from lore_core.storage.passages import only_recall_calls, passage_key, prose_header, reasoning_header
from lore_core.storage.records import PassageRef
from lore_core.storage.tags import tags_of

#: Meta key: the event tags of a result's passage(s) (:func:`lore_core.storage.tags.tags_of`).
TAGS = "tags"
#: Passages of one item in one result at most (a long output matched all over would
#: otherwise fill the answer alone).
MERGE_PASSAGES = 3
#: Meta key: the texts of a grouped result's passages, in their order in the item.
TEXTS = "texts"
#: Between two passages of one result that are not adjacent in their item.
GAP = "[...]"
#: Score factors of a passage's kind (see _prior): what was said in the conversation (the
#: user's and the assistant's own prose) 1.0; reasoning and tool calls WORK_PRIOR; a tool's
#: output OUTPUT_PRIOR; what retells the conversation (a distillation, a "user" message of
#: RETOLD_PARTS passages or more) RETOLD_PRIOR. Measured on both real-session sets and
#: LongMemEval (natural / generated questions, of 96 / 166; LongMemEval turn all@10):
#: outputs 0.75 and the rest 1.0 (before) 47 / 164 / 0.858; work and distillations 0.67,
#: outputs 0.5: 49 / 164 / 0.858 (every LongMemEval type the same); 0.77 / 0.58: 49 / 164;
#: 0.5 / 0.375: 50 / 162; then what retells at 0.5: 52 / 164 / 0.858 (distillations alone
#: 50, long "user" messages alone 50; at 0.67 both: 51). Raising the assistant's prose
#: alone (not the user's) gained as much on the natural set but lost a LongMemEval question
#: (0.849): in a chat the assistant's replies are not more telling than the user's turns.
OUTPUT_PRIOR = 0.5
WORK_PRIOR = 0.67
RETOLD_PRIOR = 0.5
#: A "user" message cut into this many passages or more (some 5,000 characters and up) is
#: not something the user typed: a client's summary of the conversation so far after a
#: compaction, or a paste. 6, 8 and 12 gave the same on both real-session sets (52 / 164);
#: LongMemEval turn all@10 0.858 at 6 and 8 (all@5 0.717 at 6, 0.726 at 8). The assistant's
#: long messages are its own reports and stay what was said (counted with them, 4 parts
#: lost a LongMemEval question whose answer was a long reply).
RETOLD_PARTS = 8
_OUTPUT_HEADER = "[tool "
_SAID_HEADERS = (prose_header("user"), prose_header("assistant"))
_USER_PARTS = re.compile(re.escape(prose_header("user")) + r" part \d+/(\d+)")


#: The shares of the best score a result gains for what the query asks beyond its words
#: (:func:`boost`): recording the asked events (all of them), being the first/last/nearest
#: the anchor of the candidates, and at most in all. Measured on both real-session sets
#: (generated / natural questions, of 166 / 96): 0.25/0.25/0.5 gave 140 / 46, 0.5/0.5/1.0
#: 161 / 43 until the boosts were scaled by QueryPlan.reading_share (163 / 45), 1.0/1.0/2.0
#: 164 / 45 (but a boost of twice the best is no longer "comparable relevance").
EVENT_BOOST = 0.5
ORDER_BOOST = 0.5
MAX_BOOST = 1.0
#: Score factor of the assistant's prose in a question about the user (see _user_said).
#: Chosen on LongMemEval (0.3: turn all@10 0.840 against 0.792 at 1.0; benchmarks/README.md);
#: on the natural real-session questions 0.3, 0.6 and 1.0 answered the same 47 of 96 (measured
#: before the passage-kind weights, OUTPUT_PRIOR and WORK_PRIOR, lifted the set to 52) ...
ANSWER_PRIOR = 0.3
#: ... and the share of a reply's score its request gets, if more than its own.
REQUEST_LIFT = 1.0
# The assistant's own words: its answers and its reasoning (which restates the request too:
# "The user is asking me to ...").
_ANSWER_HEADERS = (prose_header("assistant"), reasoning_header("assistant"))


#: Without asked events, a "first"/"last" query weighs up by time the results scoring at
#: least this share of the best.
ORDER_SHARE = 0.5


#: A result is kept when, in some list, its score is at least this share of that list's
#: best: what scores a small fraction of the best match is noise the model would pay to read.
RELEVANCE_FLOOR = 0.1
#: A search matched something when a result's :func:`relevance` reaches this: it holds at
#: least this weighted share of the query's terms, or its embedding is this close to the
#: query's. Below it on every result, the memory holds nothing on the query, and the model
#: is told so with the closest results (``tool.format_response``). Calibrated on the best
#: relevance of each search (docs/recall.md, "Nothing relevant"): at 0.45, 1 of the 262
#: questions of two real-session sets falls under it (0.5: 10; 0.4: none), and 5 of 40
#: questions about things neither set's sessions discussed clear it (0.5: 1; 0.4: 11).
MATCH_FLOOR = 0.45
# Endings :func:`_stem` takes off, longest first.
_ENDINGS = ("ations", "ation", "ings", "ing", "ies", "ied", "ers", "er", "ed", "es", "ly", "s")


@attrs.frozen
class Unread:
    """The payload of a vector list's passage not read yet (:class:`PassageVectorSource`):
    it takes part in fusion by its score and enters the answer once read. Its list item's id
    is :data:`UNREAD` and its passage key until then (its kind, hence its result id, is
    known once read)."""

    source: PassageVectorSource
    ref: PassageRef
    #: The kind the source was registered for, and the kinds the search's scope allows.
    kind: Kind
    allowed: tuple[Kind, ...]

    @property
    def key(self) -> str:
        return passage_key(self.ref.item, self.ref.passage)


#: The id prefix of an unread passage's list item (never a result id: ids start with a kind).
UNREAD = "?"


@attrs.define
class RecallResult:
    id: str
    #: The kind's label: ``message``, ``distillation``, ``knowledge`` or ``entity``.
    source: str
    #: The ranking score: what orders the results of one search (fused list scores, kind
    #: priors, boosts). Comparable only within one search; never shown as a confidence.
    score: float
    text: str
    meta: dict[str, Any] = attrs.field(factory=dict)
    #: How well this result matches the query on its own, 0-1 (:func:`relevance`): the
    #: number shown to the model and the one the "nothing relevant" floor reads.
    relevance: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source": self.source,
            "score": round(self.score, 6),
            "relevance": round(self.relevance, 2),
            "text": self.text,
            **self.meta,
        }


def _prior(kind: Kind, text: str) -> float:
    """How much a passage's own kind counts. What was said in the conversation (the user's
    requests and answers, the assistant's reports and explanations in its own words) is
    where a decision, a cause, an instruction or what was left is stated to the other
    party; reasoning restates the request and plans, a tool call is the work itself, a
    distillation retells the conversation, and they all share a question's subject words
    as readily. A tool's output is evidence, often long and repetitive, whose words a
    question shares by accident as often as on purpose; so is what retells the
    conversation (a distillation, a client's summary after a compaction stored as a long
    "user" message): it holds everything's words, the detail asked among them. Curated
    knowledge and entities count as said. At most 1.0: a passage's score in the answer is
    at most its fusion score (:meth:`RecallEngine._rank` reads passages by that bound)."""
    if kind is Kind.DISTILLATION:
        return RETOLD_PRIOR
    if kind is not Kind.MESSAGE:
        return 1.0
    if text.startswith(_OUTPUT_HEADER):
        return OUTPUT_PRIOR
    if not text.startswith(_SAID_HEADERS):
        return WORK_PRIOR
    long = _USER_PARTS.match(text)
    return RETOLD_PRIOR if long is not None and int(long.group(1)) >= RETOLD_PARTS else 1.0


def _user_said(results: Sequence[RecallResult]) -> None:
    """For a question about the user (:func:`lore_core.recall.intent.about_user`): what the
    user said is the evidence. The assistant's prose weighs :data:`ANSWER_PRIOR` (replies
    restate and riff on what was asked: on LongMemEval they filled answers whose evidence
    was one remark of the user's), and a reply's relevance counts for its request, the
    user's message just before it, when that is among the candidates (:data:`REQUEST_LIFT`
    of the reply's score, if more than its own): a reply about the thing asked is evidence
    that the request said it. Tool calls, outputs and reasoning keep their weight. In place."""
    lifted: dict[tuple[Any, int], float] = {}
    for r in results:
        position = r.meta.get("position")
        if (
            r.meta.get("role") == "assistant"
            and r.text.startswith(_ANSWER_HEADERS)
            and isinstance(position, int)
        ):
            request = (r.meta.get("session"), position - 1)
            lifted[request] = max(lifted.get(request, 0.0), REQUEST_LIFT * r.score)
            r.score *= ANSWER_PRIOR
    for r in results:
        position = r.meta.get("position")
        if r.meta.get("role") == "user" and isinstance(position, int):
            r.score = max(r.score, lifted.get((r.meta.get("session"), position), 0.0))


def when(meta: Mapping[str, Any]) -> tuple[float, int, int]:
    """A result's place in time: when its item was stored, its position in the session,
    the passage's index in the item."""
    passages = meta.get("passages")
    index = min(passages) if isinstance(passages, list) and passages else meta.get(PASSAGE)
    return (
        float(meta.get("created_at") or 0.0),
        int(meta.get("position") or 0),
        int(index) if isinstance(index, int) else 0,
    )


def _stem(term: str) -> str:
    """A term without its commonest English endings, so "installation" finds "installing"
    and "InstallHooks" (the full-text index stems as well)."""
    for ending in _ENDINGS:
        if len(term) - len(ending) >= 4 and term.endswith(ending):
            return term[: -len(ending)]
    return term


def term_patterns(terms: Sequence[str]) -> tuple[tuple[re.Pattern[str], float], ...]:
    """Per informative term of a query, a pattern finding it (stemmed, at a word's start)
    and its weight (:func:`~lore_core.recall.cascade.heuristic_informativeness`: names,
    paths and numbers weigh more than plain words). Built once per query: a search ranks
    its lists up to four times (``RecallEngine._rank``'s read rounds) and the focus list
    reads the same terms."""
    return _term_patterns(tuple(terms))


@functools.lru_cache(maxsize=256)
def _term_patterns(terms: tuple[str, ...]) -> tuple[tuple[re.Pattern[str], float], ...]:
    return tuple(
        (re.compile(r"(?<![a-z0-9])" + re.escape(_stem(t))), heuristic_informativeness(t)) for t in terms
    )


def relevance(
    text: str, patterns: Sequence[tuple[re.Pattern[str], float]], similarity: float | None
) -> float:
    """How well a result matches a query on its own, 0-1: the larger of the weighted share
    of the query's terms its text holds and its embedding's cosine similarity to the query
    (when a vector list found it). Unlike the ranking score it does not depend on the other
    candidates, so it can say that nothing matches (:data:`MATCH_FLOOR`)."""
    lexical = 0.0
    if patterns:
        lowered = text.lower()
        total = sum(w for _, w in patterns)
        lexical = sum(w for p, w in patterns if p.search(lowered)) / total if total else 0.0
    return max(lexical, min(1.0, max(0.0, similarity or 0.0)))


def boost(
    results: Sequence[RecallResult], plan: QueryPlan, anchor: tuple[float, int, int] | None = None
) -> None:
    """Weigh up, in place, the results that show what the query asks for beyond its words:
    the asked events (a result recording them), the ``first``/``last`` of them (or of the
    best matches, without events), what the events acted on ``most`` often, what came
    ``after``/``before`` the anchor. Each reading adds a bounded share of the best score to
    a result's (:data:`EVENT_BOOST`, :data:`ORDER_BOOST`, at most :data:`MAX_BOOST` in all),
    so it reorders results of comparable relevance only: a result scoring under half the
    best is never lifted past it, however many patterns it fits, and a reading that fired
    on an incidental word costs little."""
    if not results or (not plan.events and not plan.order and anchor is None):
        return
    extra = dict.fromkeys((id(r) for r in results), 0.0)
    wanted = set(plan.events)
    if wanted:
        for r in results:
            extra[id(r)] += EVENT_BOOST * len(set(r.meta.get(TAGS, ())) & wanted) / len(wanted)
    if plan.order is not None or anchor is not None:
        # The candidates for "which one": those showing an asked event, else the best matches.
        lead = [r for r in results if wanted & set(r.meta.get(TAGS, ()))] if wanted else []
        if not lead:
            top = max(r.score for r in results)
            lead = [r for r in results if r.score >= ORDER_SHARE * top]
        if anchor is not None:
            after = plan.anchor_side != BEFORE
            lead = [r for r in lead if (when(r.meta) > anchor) == after and when(r.meta) != anchor]
            lead.sort(key=lambda r: when(r.meta), reverse=not after)  # nearest the anchor first
            shares = [1.0 - i / len(lead) for i in range(len(lead))]
        elif plan.order == MOST:
            # What the events acted on most often (a file edited twelve times).
            counts = Counter(r.meta.get(SOURCE) for r in lead)
            most = max(counts.values(), default=1)
            shares = [counts[r.meta.get(SOURCE)] / most for r in lead]
        else:
            lead.sort(key=lambda r: when(r.meta), reverse=plan.order == LAST)
            shares = [1.0 - i / len(lead) for i in range(len(lead))]
        for r, share in zip(lead, shares, strict=True):
            extra[id(r)] += ORDER_BOOST * share
    # Added, in shares of the best score: a result the lists ranked last (normalised to 0)
    # can still be the one asked for, and none gains more than MAX_BOOST of the best.
    # Scaled by how much of the query its readings explain (QueryPlan.reading_share): a
    # question that is all "which test failed first" gains the whole boost, one that names
    # a test failure in passing, as the subject of something else it asks, a fraction.
    top = max(r.score for r in results)
    gate = plan.reading_share if plan.events else 1.0
    for r in results:
        r.score += top * min(MAX_BOOST, extra[id(r)]) * gate


def rank(
    lists: Sequence[RankedList], intent: QueryPlan, anchor: tuple[float, int, int] | None, limit: int
) -> list[RecallResult]:
    """The answer made of a search's ranked lists: fused and re-ranked, what scores too
    little of its lists' best left out, weighed by kind (:func:`_prior`) and, in a question
    about the user, by speaker (:func:`_user_said`), an item's passages
    grouped, repeats dropped, ordered as the query asks, cut to ``limit``. Everything after
    the lists are fetched, so a benchmark can replay captured lists through exactly this
    (``benchmarks/rank_replay.py``). Passages not read yet (:class:`Unread`) count in the
    fusion of the others and are left out of the answer."""
    return answer_of(
        rerank(fuse(lists), lists), relevant_ids(lists), intent, anchor, limit, similarities(lists)
    )


def similarities(lists: Sequence[RankedList]) -> dict[str, float]:
    """Each result's best cosine similarity to the query in the vector lists."""
    out: dict[str, float] = {}
    for ranked in lists:
        if ranked.method == VECTOR:
            for item in ranked.items:
                out[item.id] = max(out.get(item.id, -1.0), float(item.score))
    return out


def answer_of(
    fused: Sequence[Fused],
    relevant: set[str],
    intent: QueryPlan,
    anchor: tuple[float, int, int] | None,
    limit: int,
    similarity: Mapping[str, float] | None = None,
) -> list[RecallResult]:
    """:func:`rank` after fusion: ``fused`` re-ranked, ``relevant`` the ids kept,
    ``similarity`` the results' cosines to the query (:func:`similarities`)."""
    similarity = similarity or {}
    patterns = term_patterns(intent.terms)
    results = [
        RecallResult(id=f.id, source=f.payload[0].label,
                     score=f.score * _prior(f.payload[0], f.payload[1].text),
                     text=f.payload[1].text, meta={**f.payload[1].meta, TAGS: tags_of(f.payload[1].text)},
                     relevance=relevance(f.payload[1].text, patterns, similarity.get(f.id)))
        for f in fused
        if f.id in relevant and not isinstance(f.payload, Unread) and not only_recall_calls(f.payload[1].text)
    ]  # fmt: skip
    if intent.about_user:
        _user_said(results)
    boost(results, intent, anchor)
    results.sort(key=lambda r: -round(r.score, 12))  # stable: equal scores keep their order
    grouped = group_passages(results, intent.events, intent.order)
    return distinct(grouped, limit)


def known_passages(lists: Sequence[RankedList]) -> list[RankedList]:
    """The lists with each unread passage that another list holds read (a vector hit the
    full-text search also found): under that list's id and with its hit."""
    known: dict[str, Ranked] = {}
    for ranked in lists:
        for item in ranked.items:
            if not isinstance(item.payload, Unread):
                known.setdefault(str(item.payload[1].key), item)
    out: list[RankedList] = []
    for ranked in lists:
        items = []
        for item in ranked.items:
            if isinstance(item.payload, Unread) and (same := known.get(item.payload.key)) is not None:
                item = Ranked(same.id, item.score, same.payload)
            items.append(item)
        out.append(attrs.evolve(ranked, items=items))
    return out


def unread_bounds(fused: Sequence[Fused], relevant: set[str]) -> dict[str, float]:
    """The unread passages' fusion scores (the most they can score in an answer), by list
    item id; one that no list finds relevant can score nothing."""
    return {f.id: f.score if f.id in relevant else -math.inf for f in fused if isinstance(f.payload, Unread)}


def relevant_ids(lists: Sequence[RankedList], floor: float = RELEVANCE_FLOOR) -> set[str]:
    """Ids scoring at least ``floor`` times their list's best score in some list."""
    keep: set[str] = set()
    for ranked in lists:
        top = max((item.score for item in ranked.items), default=0.0)
        for item in ranked.items:
            if top <= 0 or item.score >= floor * top:
                keep.add(item.id)
    return keep


def group_passages(
    results: Sequence[RecallResult], events: Iterable[str] = (), order: str | None = None
) -> list[RecallResult]:
    """One result per item, in the order of its best passage: the item's other matching
    passages (at most :data:`MERGE_PASSAGES` in all) join it, in their order in the item,
    so ten results are ten things remembered, not three passages of one long output, and
    two facts of one item (its middle and its end) still come back together. Passages
    recording one of the asked ``events`` are chosen first (a run of four subagent calls
    must show the call the question is about, not three passages the vectors liked more),
    the earliest of them when the query asks for the ``first`` one, the latest for the
    ``last``. Results without a passage pass as they are."""
    wanted = set(events)
    out: list[RecallResult] = []
    groups: dict[tuple[str, str], list[RecallResult]] = {}
    for r in results:
        index = r.meta.get(PASSAGE)
        item = r.meta.get(ITEM)
        if not isinstance(index, int) or not item:
            out.append(r)
            continue
        key = (r.source, str(item))
        if key not in groups:
            groups[key] = []
            out.append(r)  # the item's place; replaced by the grouped result below
        groups[key].append(r)
    held_by_best: dict[int, RecallResult] = {}
    for candidates in groups.values():
        best = candidates[0]
        ordered = sorted(candidates, key=lambda r: _member_rank(r, wanted, order))  # stable: then by score
        members: list[tuple[int, RecallResult]] = []
        for r in ordered:
            index = r.meta[PASSAGE]
            if len(members) < MERGE_PASSAGES and all(index != i for i, _ in members):
                members.append((index, r))
        held = RecallResult(best.id, best.source, best.score, best.text, dict(best.meta), best.relevance)
        if len(members) > 1 or members[0][1] is not best:
            _regroup(held, members)
            held.score = best.score  # the item ranks by its best passage
        held_by_best[id(best)] = held
    return [held_by_best.get(id(r), r) for r in out]


def _member_rank(r: RecallResult, wanted: set[str], order: str | None) -> tuple[int, int]:
    if not wanted & set(r.meta.get(TAGS, ())):
        return (1, 0)
    index = int(r.meta[PASSAGE])
    return (0, index if order == FIRST else -index if order == LAST else 0)


def _regroup(held: RecallResult, members: list[tuple[int, RecallResult]]) -> None:
    members.sort(key=lambda m: m[0])
    texts: list[str] = []
    for n, (index, r) in enumerate(members):
        if n and index != members[n - 1][0] + 1:
            texts.append(GAP)
        texts.append(r.text)
    held.text = "\n".join(texts)
    held.score = max(r.score for _, r in members)  # the item's best passage
    held.relevance = max(r.relevance for _, r in members)
    held.meta[TEXTS] = [r.text for _, r in members]
    held.meta[TAGS] = sorted({t for _, r in members for t in r.meta.get(TAGS, ())})
    held.meta["passages"] = [i for i, _ in members]
    spans = [r.meta.get(SPAN) for _, r in members]
    if all(isinstance(x, tuple | list) and None not in x for x in spans):
        held.meta[SPAN] = (min(x[0] for x in spans), max(x[1] for x in spans))  # type: ignore[index]


_PART = re.compile(r" part \d+/\d+")


def _text_key(text: str) -> str:
    # Which piece of its item a passage is does not make its text another.
    head, _, body = text.partition("\n")
    return " ".join(f"{_PART.sub('', head)}\n{body}".split()).lower()


def distinct(results: Sequence[RecallResult], limit: int | None = None) -> list[RecallResult]:
    """Results without repeats: a passage whose text a better result already holds is
    dropped (the same ``git status`` output stored twice, a file read twice); the first
    ``limit`` of them when given."""
    seen: set[str] = set()
    out: list[RecallResult] = []
    for r in results:
        if limit is not None and len(out) >= limit:
            break
        key = _text_key(r.text)
        if key and key in seen:
            continue
        seen.add(key)
        out.append(r)
    return out
