"""Reading a query into its plan: the patterns fire on the phrase that names an event, not on
a word that merely occurs, and what they read only weighs results up within bounds, so an
incidental word never changes the top result.

Beside ``tests/test_recall_passages.py``, which pins each pattern's hits (which test failed
first, what we committed after 'X', the most edited file)."""

from __future__ import annotations

import asyncio

import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.model import TOOL_CALL, TOOL_RESULT, Block, Message
from lore_core.recall.engine import RecallResponse, detail_terms, focus_session
from lore_core.recall.intent import about_user, parse
from lore_core.recall.ranking import MAX_BOOST
from lore_core.recall.sources import SourceHit
from lore_core.recall.store_engine import store_recall_engine
from lore_core.recall.tool import format_response
from lore_core.testing.builders import batch_of, exchange, text

PROJECT = "/work/alpha"

#: Ordinary questions, each with words that a keyword rule could mistake for an event, an
#: order or a question about the user. None of them asks about an event.
PLAIN = [
    "what web framework is the dashboard built on?",  # "web"
    "which editor config did we settle on?",  # "edit"
    "how does the linear regression in the forecast module work?",  # "linear"
    "what does the search endpoint return for an empty query?",  # "search"
    "how do we make the release tarball?",  # "make"
    "what is the timeout of the upstream client?",  # "time"
    "which branch of the if statement handles the empty list?",  # "branch"
    "what was the planned order of the migrations?",  # "plan"
    "how are new users created in the admin UI?",  # "new", "created"
    "what does the agent loop do between two turns?",  # "agent"
    "why is the cache keyed by the session id?",  # "why is"
    "what did the profiler show about the hot loop?",  # "show"
    "which package manager did we settle on for the front end?",
    "what is the default page size of the API?",
    "what turned out to cause the memory leak in the worker?",
    "which web server runs the docs site?",  # "web"
    "what did the code review say about error handling?",
    "what value did we give the max connections setting?",
    "what was left unfinished in the storage refactor?",
    "which environment variable turns tracing on?",
    "how did we get around the rate limit of the API?",
    "what is the difference between the two cache layers?",
]

#: Questions about the session's work said in the first person: not about the user.
WORK_IN_FIRST_PERSON = [
    "how did I fix the flaky test?",
    "where did I set the retry limit in the config?",
    "what did I change in the parser module?",
    "how did I get around the lock timeout?",
]

#: Questions about what the user said, or the user's own life: about the user.
ABOUT_THE_USER = [
    "what did I tell you about the naming of the flags?",
    "Which device did I set up first, the smart thermostat or the new router?",  # "set up"
    "What was my previous personal best time for the charity 5K run?",  # "run"
    "How many kitchen items did I replace or fix?",  # "fix"
    "when I asked for the audit, how did I describe the bug?",
    "Which airline did I fly with to Miami?",
    "How many tanks do I currently have?",
]


@pytest.mark.parametrize("query", PLAIN)
def test_incidental_words_read_as_plain(query: str) -> None:
    plan = parse(query)
    assert plan.events == () and plan.order is None and not plan.about_user, plan


@pytest.mark.parametrize("query", WORK_IN_FIRST_PERSON)
def test_the_sessions_work_in_the_first_person_is_not_about_the_user(query: str) -> None:
    assert not about_user(query)


@pytest.mark.parametrize("query", ABOUT_THE_USER)
def test_what_the_user_said_is_about_the_user(query: str) -> None:
    assert about_user(query)


@pytest.mark.parametrize(
    ("query", "events"),
    [
        ("what web framework did we decide on for the dashboard?", ("decision",)),  # not a web search
        ("which editor config did we settle on after the lint errors?", ("lintfinding",)),  # not an edit
        ("did we search the web for the linear regression formula?", ("weblookup",)),  # not a ticket
    ],
)
def test_a_real_reading_beside_an_incidental_word(query: str, events: tuple[str, ...]) -> None:
    assert parse(query).events == events


def test_the_plan_holds_the_terms_searched() -> None:
    plan = parse("which test failed first in the search module?")
    assert "search" in plan.terms and "first" not in plan.terms and plan.order == "first"


# -- ranking: an incidental reading never changes the top result --------------------------------


def _call(name: str, call_id: str, args: dict[str, str]) -> Message:
    return Message("assistant", [Block(TOOL_CALL, tool_name=name, tool_call_id=call_id, tool_input=args)])


def _out(call_id: str, content: str) -> Message:
    return Message("user", [Block(TOOL_RESULT, text=content, tool_call_id=call_id)])


def _store() -> MemoryStore:
    """A session that decided on a web framework after five web searches, edited files while
    settling an editor config, fixed a flaky test, and talked about a linear regression."""
    turns: list[Message] = [text("user", "we need a dashboard for the ingest stats")]
    for n in range(5):
        turns += [
            _call("WebSearch", f"w{n}", {"query": f"python dashboard web framework comparison {n}"}),
            _out(f"w{n}", f"Result {n}: a listicle of web frameworks, dashboards and admin panels"),
        ]
    turns.append(
        text(
            "assistant",
            "Decision: we decided on Starlette as the web framework for the dashboard, because it "
            "is already a dependency and the dashboard is four pages.",
        )
    )
    for n in range(4):
        turns += [
            _call("Edit", f"e{n}", {"file_path": f"src/widget{n}.py", "old_string": "a", "new_string": "b"}),
            _out(f"e{n}", f"The file src/widget{n}.py has been updated."),
        ]
    turns.append(
        text(
            "assistant",
            "We settled on an .editorconfig with 4-space indents and LF line endings for the editor config.",
        )
    )
    turns += [
        _call("Bash", "t1", {"command": "pytest tests/test_ingest.py"}),
        _out("t1", "FAILED tests/test_ingest.py::test_flaky_clock - AssertionError\nExit code 1"),
        text(
            "assistant",
            "The flaky test was fixed by freezing the clock with a fixture instead of sleeping; "
            "the race between the ticker and the assertion is gone.",
        ),
        text("user", "also, the forecast uses a linear regression over the last 30 days"),
        text("assistant", "The linear regression in the forecast module fits a least-squares line."),
    ]
    store = MemoryStore()

    async def fill() -> None:
        await store.open()
        await store.write(batch_of(exchange(turns, session="s-dash", at=1000.0)))

    asyncio.run(fill())
    return store


def _search(store: MemoryStore, query: str) -> RecallResponse:
    return asyncio.run(store_recall_engine(store).search(query, "project", None, PROJECT, 10))


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ("what web framework did we decide on for the dashboard?", "we decided on Starlette"),
        ("which editor config did we settle on?", "4-space indents"),
        ("how does the linear regression in the forecast work?", "least-squares line"),
        ("how did I fix the flaky test?", "freezing the clock"),
    ],
)
def test_an_incidental_word_does_not_change_the_top_result(query: str, answer: str) -> None:
    response = _search(_store(), query)
    assert answer in response.results[0].text, [r.text[:80] for r in response.results[:3]]


def test_a_boost_reorders_only_results_of_comparable_relevance() -> None:
    """Every reading together adds at most MAX_BOOST of the best score: the asked event cannot
    lift a result past the best unless it scores at least half as much."""
    assert MAX_BOOST <= 1.0


# -- nothing relevant --------------------------------------------------------------------------


def test_a_query_about_something_never_discussed_is_told_so() -> None:
    store = _store()
    # One word of it (dashboard) is in memory; nothing else.
    query = "which sourdough starter recipe did grandma send for the dashboard?"
    response = _search(store, query)
    assert response.results and not response.matched
    shown = format_response(response)
    assert shown.startswith(f'Nothing in memory matches "{query}"')
    assert len(shown) < 2500  # the closest few, briefly: not a page of unrelated memories
    asked = _search(store, "which web framework did we pick for the dashboard?")
    assert asked.matched and "memories for" in format_response(asked)


# -- how much of a query its readings explain -------------------------------------------------


def test_a_reading_that_is_the_whole_question_weighs_fully() -> None:
    assert parse("which test failed first?").reading_share == 1.0
    passing = parse("Why did the wingman state save/load unit test fail on the first full test run?")
    assert passing.events == ("testfailure",) and passing.reading_share < 0.3


# -- the focus search: the subject's session, then the detail inside it ------------------------


def _hit(session: str, text: str, score: float) -> SourceHit:
    return SourceHit(f"{session}:{score}", score, text, {"session": session})


def test_the_session_the_hits_point_at() -> None:
    hits = [_hit("a", "x", 5.0), _hit("a", "x", 4.0), _hit("b", "x", 3.0)]
    assert focus_session(hits) == "a"
    assert focus_session([_hit("a", "x", 1.0), _hit("b", "x", 1.0), _hit("c", "x", 1.0)]) is None


def test_detail_terms_are_those_few_of_the_sessions_hits_hold() -> None:
    texts = [f"the wingman review step {n}" for n in range(9)] + ["wingman timeouts: git 60s, review 5min"]
    assert detail_terms(["timeouts", "wingman", "review"], texts) == ["timeouts"]
    assert detail_terms(["wingman", "review"], texts) == []  # all subject: nothing to focus on


def test_the_detail_is_searched_inside_the_subjects_session() -> None:
    """Many passages of one session say its subject; the one with the detail asked says it
    once. The focus search finds the session from the query's hits and searches it for the
    query's terms that few of its hits hold (the detail), not for the subject's words."""
    subject = "the wingman background review loop runs external commands"
    turns = [text("user", f"let us build {subject}")]
    for n in range(12):
        turns += [
            text("assistant", f"step {n}: {subject}, done"),
            text("user", f"next step after {n} of {subject}"),
        ]
    turns.append(text("assistant", "They got timeouts: git 60s, review 5min, apply 15min."))
    other = [text("user", f"document {subject}"), text("assistant", f"docs of {subject} written")]
    store = MemoryStore()

    async def fill() -> None:
        await store.open()
        await store.write(batch_of(exchange(turns, session="s-wingman", at=1000.0)))
        await store.write(batch_of(exchange(other, session="s-docs", at=2000.0)))

    asyncio.run(fill())
    response = asyncio.run(
        store_recall_engine(store).search(
            "which timeouts did the wingman background review loop for external commands get?",
            "project",
            None,
            PROJECT,
            4,
        )
    )
    focus = response.metadata["focus"]
    assert (
        focus["session"] == "s-wingman" and "timeouts" in focus["terms"] and "wingman" not in focus["terms"]
    )
    assert any("git 60s" in r.text for r in response.results)
