"""A relaxed full-text cascade: a long natural-language question still finds matches.

A question such as "how did we fix the flaky websocket reconnect test last week?" holds a
few informative words among many that only make it a sentence. A full-text backend that
requires (or strongly rewards) every term finds nothing or the wrong thing for it. The
cascade:

1. tokenizes the query and drops stop words (English function words plus question and
   filler words that carry no topic);
2. searches with the remaining terms;
3. while that returns fewer than ``min_hits`` hits and more than one term is left, drops
   the least informative terms and searches again, at most ``max_steps`` times.

"Least informative" is decided by document frequency when the source can tell it (a
``doc_freq(term) -> int | None`` callable: a term in many documents has a low IDF and
discriminates little), else by a heuristic: short, purely alphabetic words go first, and
words that look like identifiers (digits, ``_``, ``.``, ``-``, camelCase) are kept longest,
because in a coding project those are the names that matter.

Each step drops about a third of the terms (at least one), so even a very long query
reaches a single term within a few searches.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs

# Identifier-like tokens survive whole: "foo_bar.py", "v1.2", "X-Api-Key", "camelCase".
_TOKEN = re.compile(r"[A-Za-z0-9_]+(?:[.\-][A-Za-z0-9_]+)*", re.UNICODE)
_WORD = re.compile(r"\w+", re.UNICODE)

# English function words and the words of asking ("remember", "recall", "tell"): they make a
# question a sentence and say nothing of its topic. Words that are topics in a coding
# project ("search", "find", "show", "make", "time", "run") are not here.
STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing done down during each
    either else ever every few for from further get gets got had has have having he her here
    hers him his how i if in into is it its itself just let like many may me
    might more most much must my myself no nor not now of off on once one only or other our
    ours out over own per please quite rather really same shall she should so some something
    somewhere still such than that the their theirs them then there these they thing things
    this those through to too under until up upon us very via was we were what whatever when
    where whether which while who whom whose why will with within without would yes yet you
    your yours remember recall tell know way
    """.split()
)
# Words that place a question in time ("lately", "in the past two months", "last week"):
# they say when, not what, and matched as words they find whatever else was "recent"
# (LongMemEval: "my phone's battery lately" ranked other "lately" remarks above the battery
# one). Dropped beside other terms; a query of nothing else keeps them.
TIME_WORDS = frozenset(
    """
    last earlier previously ago week weeks day days month months year years yesterday today
    past recent recently lately
    """.split()
)

MAX_TERMS = 32
DEFAULT_MIN_HITS = 3
DEFAULT_MAX_STEPS = 6

DocFreq = Callable[[str], "int | float | None"]


def tokenize(text: str) -> list[str]:
    """Lower-cased tokens, identifier-like tokens whole, in order, duplicates removed."""
    seen: set[str] = set()
    out: list[str] = []
    for match in _TOKEN.finditer(text):
        token = match.group(0).lower()
        if token not in seen:
            seen.add(token)
            out.append(token)
    # Scripts without ASCII letters (CJK, Cyrillic, ...) still yield \w words.
    for match in _WORD.finditer(text):
        token = match.group(0).lower()
        if token not in seen and not token.isascii():
            seen.add(token)
            out.append(token)
    return out


def query_terms(text: str, max_terms: int = MAX_TERMS) -> list[str]:
    """The informative terms of a query: tokens without stop words or single characters,
    at most ``max_terms`` (the first ones: a pasted log's head is usually its point)."""
    terms = [t for t in tokenize(text) if t not in STOP_WORDS and (len(t) > 1 or t.isdigit())]
    topical = [t for t in terms if t not in TIME_WORDS]
    return (topical or terms)[:max_terms]


def _original_case(text: str) -> dict[str, str]:
    return {m.group(0).lower(): m.group(0) for m in _TOKEN.finditer(text)}


def heuristic_informativeness(term: str, original: str | None = None) -> float:
    """Higher = more worth keeping. Identifier-looking terms score highest."""
    score = float(min(len(term), 12))
    raw = original or term
    if any(c.isdigit() for c in term):
        score += 6
    if any(c in "_.-" for c in term):
        score += 8
    if raw[:1].islower() and any(c.isupper() for c in raw[1:]):
        score += 8  # camelCase
    elif raw[:1].isupper() and any(c.isupper() for c in raw[1:]):
        score += 4  # PascalCase / ACRONYM
    return score


def drop_order(terms: Sequence[str], doc_freq: DocFreq | None = None, original: str = "") -> list[str]:
    """``terms`` from least to most informative (the order the cascade drops them in).

    With ``doc_freq``: terms no document contains (frequency 0) go first, since they can
    only prevent matches; then the most frequent (lowest IDF) first. A term the source
    cannot count (``None`` or an exception) is kept longest, ranked among such terms by
    the heuristic. Ties fall back to the heuristic, then to the later position (a
    question's first terms are usually its topic).
    """
    cases = _original_case(original) if original else {}
    position = {t: i for i, t in enumerate(terms)}

    def heuristic(t: str) -> float:
        return heuristic_informativeness(t, cases.get(t))

    if doc_freq is not None:
        group: dict[str, tuple[int, float]] = {}
        for t in terms:
            try:
                value = doc_freq(t)
            except Exception:
                value = None
            if not isinstance(value, int | float) or isinstance(value, bool):
                group[t] = (2, 0.0)
            elif value <= 0:
                group[t] = (0, 0.0)
            else:
                group[t] = (1, -float(value))
        return sorted(terms, key=lambda t: (group[t], heuristic(t), -position[t]))
    return sorted(terms, key=lambda t: (heuristic(t), -position[t]))


@attrs.define
class CascadeResult:
    hits: list[Any]
    #: The term lists searched, in order (the last one produced ``hits`` unless an earlier,
    #: more specific one had more).
    tried: list[list[str]] = attrs.field(factory=list)
    terms: list[str] = attrs.field(factory=list)


async def cascade_search(
    query: str,
    search: Callable[[str], Awaitable[Sequence[Any]]],
    *,
    min_hits: int = DEFAULT_MIN_HITS,
    max_steps: int = DEFAULT_MAX_STEPS,
    doc_freq: DocFreq | None = None,
    max_terms: int = MAX_TERMS,
) -> CascadeResult:
    """Search ``query`` relaxing it step by step (see the module docstring).

    ``search(text)`` runs one full-text search of the space-joined terms. Its exceptions
    propagate: the caller reports a failing source. Returns the hits of the first search
    with at least ``min_hits`` hits, else of the search that found the most (the earliest,
    most specific one among equals). A query without informative terms searches nothing.
    """
    terms = query_terms(query, max_terms)
    result = CascadeResult(hits=[], terms=list(terms))
    if not terms:
        return result
    order = drop_order(terms, doc_freq, query)
    current = list(terms)
    best: list[Any] = []
    best_terms = list(current)
    for step in range(max(0, max_steps) + 1):
        result.tried.append(list(current))
        hits = list(await search(" ".join(current)))
        if len(hits) > len(best):
            best, best_terms = hits, list(current)
        if len(hits) >= min_hits or len(current) <= 1 or step == max_steps:
            break
        n_drop = max(1, len(current) // 3)
        dropping = set()
        for t in order:
            if t in current and t not in dropping:
                dropping.add(t)
                if len(dropping) == n_drop:
                    break
        current = [t for t in current if t not in dropping]
    result.hits, result.terms = best, best_terms
    return result
