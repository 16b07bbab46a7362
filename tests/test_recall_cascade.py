"""The relaxed full-text cascade: stop words, drop order (IDF or heuristic), bounded steps."""

from __future__ import annotations

import asyncio

import pytest

from lore_core.recall.cascade import (
    MAX_TERMS,
    cascade_search,
    drop_order,
    heuristic_informativeness,
    query_terms,
    tokenize,
)


class AndIndex:
    """A tiny full-text index that requires every term (the strictest backend behaviour),
    recording each query it gets."""

    def __init__(self, docs: dict[str, str]) -> None:
        self.docs = {k: set(tokenize(v)) for k, v in docs.items()}
        self.queries: list[str] = []

    async def search(self, query: str) -> list[str]:
        self.queries.append(query)
        terms = set(query.split())
        return sorted(k for k, words in self.docs.items() if terms <= words)

    def doc_freq(self, term: str) -> int:
        return sum(1 for words in self.docs.values() if term in words)


def run(coro):
    return asyncio.run(coro)


def test_tokenize_keeps_identifiers_whole_and_dedupes():
    assert tokenize("Fix user_id in auth.py, v1.2 and X-Api-Key; fix it") == [
        "fix",
        "user_id",
        "in",
        "auth.py",
        "v1.2",
        "and",
        "x-api-key",
        "it",
    ]
    assert "привет" in tokenize("привет мир")


def test_query_terms_drop_stop_and_question_words():
    assert query_terms("How did we fix the flaky websocket reconnect test last week?") == [
        "fix",
        "flaky",
        "websocket",
        "reconnect",
        "test",
    ]
    assert query_terms("what is it that we did?") == []
    assert query_terms("a b 7 cc") == ["7", "cc"]  # single letters are noise, digits are not
    assert len(query_terms(" ".join(f"word{i}" for i in range(100)))) == MAX_TERMS


def test_query_terms_drop_words_that_only_place_the_question_in_time():
    # "lately" matched as a word ranks every other "lately" remark beside the topic's.
    assert query_terms("I've had trouble with my phone's battery lately") == [
        "ve",
        "trouble",
        "phone",
        "battery",
    ]
    assert query_terms("what feed did I buy in the past two months, or recently?") == ["feed", "buy", "two"]


def test_heuristic_prefers_identifiers():
    assert heuristic_informativeness("user_id") > heuristic_informativeness("users")
    assert heuristic_informativeness("getuser", "getUser") > heuristic_informativeness("getuser")
    assert heuristic_informativeness("e404") > heuristic_informativeness("eror")
    order = drop_order(["flaky", "to", "websocket", "retry_count"])
    assert order[0] == "to" and order[-1] == "retry_count"


def test_drop_order_by_document_frequency():
    df = {"test": 50, "websocket": 3, "flaky": 10, "reconnect": 2}
    assert drop_order(list(df), df.get) == ["test", "flaky", "websocket", "reconnect"]


def test_equal_frequencies_fall_back_to_the_heuristic():
    df = {"flaky": 3, "retry_count": 3, "e404": 3}
    assert drop_order(["retry_count", "flaky", "e404"], df.get) == ["flaky", "e404", "retry_count"]


def test_drop_order_unseen_terms_first_unknown_terms_last():
    df = {"common": 9, "rare": 1, "never": 0}
    order = drop_order(["mystery", "common", "never", "rare"], df.get)  # "mystery" -> None
    assert order == ["never", "common", "rare", "mystery"]


def test_doc_freq_errors_count_as_unknown():
    def broken(term: str) -> int:
        if term == "bad":
            raise RuntimeError("index gone")
        return 5

    assert drop_order(["bad", "fine"], broken)[-1] == "bad"


def test_full_query_first_and_stops_when_enough():
    docs = {"1": "websocket reconnect flaky", "2": "websocket reconnect", "3": "websocket reconnect"}
    index = AndIndex(docs)
    result = run(cascade_search("websocket reconnect", index.search, min_hits=3))
    assert index.queries == ["websocket reconnect"]
    assert result.hits == ["1", "2", "3"] and result.tried == [["websocket", "reconnect"]]


def test_long_question_relaxes_until_hits_using_idf():
    docs = {f"n{i}": f"test run number {i}" for i in range(20)}
    docs["fix"] = "websocket reconnect test fixed by backoff"
    index = AndIndex(docs)
    question = "How did we fix the flaky websocket reconnect test in the gateway last week?"
    result = run(cascade_search(question, index.search, min_hits=1, doc_freq=index.doc_freq))
    assert result.hits == ["fix"]
    # The first search had every informative term; each step dropped the commonest ones
    # ("test" is in 21 documents, terms no document has go before it).
    assert result.tried[0] == ["fix", "flaky", "websocket", "reconnect", "test", "gateway"]
    assert "websocket" in result.terms and "reconnect" in result.terms
    assert all(len(b) < len(a) for a, b in zip(result.tried, result.tried[1:], strict=False))


def test_heuristic_relaxation_without_doc_freq():
    index = AndIndex({"hit": "retry_count handling"})
    result = run(cascade_search("where did we change the retry_count of uploads", index.search, min_hits=1))
    assert result.hits == ["hit"]
    assert result.terms == ["retry_count"]


def test_stops_at_one_term_and_returns_best_seen():
    index = AndIndex({"a": "alpha"})
    result = run(cascade_search("alpha beta gamma delta", index.search, min_hits=5))
    # Shortest word first, then later words first among equals; ends at the first word.
    assert result.tried == [
        ["alpha", "beta", "gamma", "delta"],
        ["alpha", "gamma", "delta"],
        ["alpha", "gamma"],
        ["alpha"],
    ]
    # Never enough hits: the search that found the most wins.
    assert result.hits == ["a"]
    assert len(index.queries) == len(result.tried)


def test_best_result_is_kept_when_the_last_step_finds_less():
    async def search(query: str) -> list[str]:
        return ["x", "y"] if len(query.split()) == 2 else []

    result = run(cascade_search("alpha beta gamma", search, min_hits=5))
    assert result.hits == ["x", "y"] and len(result.terms) == 2


def test_number_of_steps_is_bounded():
    index = AndIndex({})
    huge = " ".join(f"term{i}x" for i in range(500))
    result = run(cascade_search(huge, index.search, min_hits=1, max_steps=3))
    assert len(index.queries) == 4  # the first search plus three relaxations
    assert len(result.tried[0]) == MAX_TERMS
    # Without a small max_steps a long query still reaches one term in few searches.
    index = AndIndex({})
    run(cascade_search(huge, index.search, min_hits=1, max_steps=50))
    assert len(index.queries[-1].split()) == 1
    assert len(index.queries) <= 10


def test_no_informative_terms_searches_nothing():
    index = AndIndex({"a": "the"})
    result = run(cascade_search("what was it?", index.search))
    assert result.hits == [] and result.tried == [] and index.queries == []


def test_zero_steps_is_one_plain_search():
    index = AndIndex({})
    run(cascade_search("alpha beta", index.search, min_hits=1, max_steps=0))
    assert index.queries == ["alpha beta"]


def test_search_errors_propagate():
    async def broken(query: str) -> list[str]:
        raise OSError("disk on fire")

    with pytest.raises(OSError, match="disk on fire"):
        run(cascade_search("alpha", broken))
