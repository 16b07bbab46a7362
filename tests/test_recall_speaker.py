"""A question about the user ("which airline did I fly") is answered by what the user said:
the assistant's replies, which restate and riff on it, weigh less, and a reply's relevance
counts for the request it answered."""

from __future__ import annotations

import asyncio

import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.recall.intent import about_user, parse
from lore_core.recall.store_engine import store_recall_engine
from lore_core.testing.builders import batch_of, exchange, text

PROJECT = "/work/alpha"


@pytest.mark.parametrize(
    "query",
    [
        "Which airline did I fly with to Miami?",
        "How many tanks do I currently have?",
        "What did I ask you to change in the parser?",
        "I\u2019m a bit anxious about getting around Tokyo. Do you have any tips?",
    ],
)
def test_questions_about_the_user(query: str) -> None:
    assert about_user(query) and parse(query).about_user and not parse(query).plain


@pytest.mark.parametrize(
    "query",
    [
        "which test failed first?",
        "what did we commit after the refactor?",
        "You mentioned a wine for the lamb recipe. Can you remind me which?",
        "In our previous chat, what did you suggest for the posture videos?",
        "which airline flies to Miami most often?",
    ],
)
def test_questions_not_about_the_user(query: str) -> None:
    assert not about_user(query)


@pytest.mark.parametrize(
    "query",
    ["which file did I edit last?", "why did I choose DuckDB?", "which tests failed after my change?"],
)
def test_questions_about_coding_events_are_not_about_the_user(query: str) -> None:
    """The model calling recall may say "I" of itself: what the assistant did answers these."""
    intent = parse(query)
    assert intent.events and not intent.about_user


def _store() -> MemoryStore:
    """One remark of the user's, and a long reply that says the question's words more."""
    store = MemoryStore()
    reply = (
        "Airline options to Miami: JetBlue, American and Delta all fly to Miami daily. "
        "Which airline to fly to Miami depends on your airport: the airline with most Miami "
        "flights from Boston is JetBlue; fly American to Miami from Dallas."
    )
    turns = [
        text("user", "Planning the spring trip. By the way, I flew JetBlue to Miami in February."),
        text("assistant", reply),
    ]
    other = [
        text("user", "what should I pack for a beach week"),
        text("assistant", "Sunscreen, hat, sandals."),
    ]

    async def fill() -> None:
        await store.open()
        await store.write(batch_of(exchange(turns, session="s-trip", at=1000.0)))
        await store.write(batch_of(exchange(other, session="s-pack", at=2000.0)))

    asyncio.run(fill())
    return store


def _first_role(store: MemoryStore, query: str) -> str:
    response = asyncio.run(store_recall_engine(store).search(query, "project", None, PROJECT, 5))
    assert response.error is None, response.error
    return str(response.results[0].meta["role"])


def test_the_users_remark_answers_a_question_about_the_user() -> None:
    store = _store()
    # The reply holds the question's words three times over; the user said it once.
    assert _first_role(store, "which airline flies to Miami?") == "assistant"
    assert _first_role(store, "Which airline did I fly to Miami?") == "user"


def test_a_reply_lifts_the_request_it_answered() -> None:
    """The request says the fact in few of the question's words; another message says more
    of them and is not the answer. The reply about the request's subject ranks the request."""
    store = MemoryStore()
    reply = "Airline choice to Miami: JetBlue flies to Miami from Boston; the airline suits a Miami trip."

    async def fill() -> None:
        await store.open()
        trip = [text("user", "By the way, I flew JetBlue to Miami."), text("assistant", reply)]
        posters = [
            text("user", "I collect posters: every airline and every Miami beach poster I find."),
            text("assistant", "A fine collection."),
        ]
        await store.write(batch_of(exchange(trip, session="s-trip", at=1000.0)))
        await store.write(batch_of(exchange(posters, session="s-posters", at=2000.0)))

    asyncio.run(fill())
    response = asyncio.run(
        store_recall_engine(store).search("Which airline did I fly to Miami?", "project", None, PROJECT, 5)
    )
    first = response.results[0]
    assert first.meta["session"] == "s-trip" and first.meta["role"] == "user", [
        (r.meta["session"], r.meta["role"], round(r.score, 3)) for r in response.results
    ]
