"""Teams: a bound project shares only what its policy and the team's decisions let through;
approval is copied forward but covers a text, so an edit waits for approval; decision records
travel in ``.lore.md`` and two stores converge whatever order their decisions arrive in."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lore_core.builtin.memory_store import MemoryStore
from lore_core.knowledge import lorefile, teams
from lore_core.knowledge.book import KnowledgeBook, KnowledgeInputError
from lore_core.knowledge.imports import export_text
from lore_core.storage.knowledge import content_fingerprint, make_decision, standing_decision

PROJECT = "/work/shop"
ELSEWHERE = "/home/bo/clones/shop"  # a teammate's clone of the same repository


class Clock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


def new_book(clock: Clock | None = None) -> KnowledgeBook:
    return KnowledgeBook(MemoryStore(), clock=clock or Clock())


async def add(book: KnowledgeBook, title: str, content: str, project: str = PROJECT, **kw: Any) -> str:
    result = await book.create(project=project, category="decision", title=title, content=content, **kw)
    assert result.version is not None, result.reason
    return result.version.logical_id


async def shared_text(book: KnowledgeBook, project: str = PROJECT) -> str:
    text, _ = await lorefile.render_project(book, project)
    return text


def test_manual_policy_shares_approved_texts_only_and_an_edit_waits_for_approval() -> None:
    async def scenario() -> None:
        book = new_book()
        await teams.bind(book.store, PROJECT, "core", "manual")
        duck = await add(book, "Use DuckDB", "DuckDB is the store.")
        nightly = await add(book, "Nightly builds", "Build main every night.")

        # New entries are pending: nothing of them is shared, and the listing says so.
        text = await shared_text(book)
        assert "DuckDB" not in text and "Nightly" not in text
        pending = await teams.pending_json(book, PROJECT)
        assert {p["id"] for p in pending["pending"]} == {f"k:{duck}", f"k:{nightly}"}
        _, report = await lorefile.render_project(book, PROJECT)
        assert report.skipped_unapproved == 2 and report.team == "core"

        approval = await teams.decide(book, duck, "approved", "Ana Lima")
        assert approval.state == "approved" and approval.decision is not None
        assert approval.decision.decided_by == "Ana Lima" and approval.decision.decided_at > 0
        await teams.decide(book, nightly, "rejected", "Bo")
        text = await shared_text(book)
        assert "DuckDB is the store." in text and "Nightly" not in text
        # The decision records of every entry travel with the file (the rejected one's too).
        assert text.count("<!-- lore:decision ") == 2
        assert f"lore:decision {nightly} rejected" in text

        # An edit cannot launder new text: the approval stays with the entry (the team keeps
        # seeing the approved text) but does not cover the edit, which is pending.
        await book.update(duck, content="SQLite is the store.", provenance=None)
        approval = await teams.TeamView.load(book.store, PROJECT)
        assert approval is not None
        current = await book.get(duck)
        assert current is not None
        seen = await approval.approval(current)
        assert seen.state == "pending" and seen.shared is not None and seen.shared.version == 1
        assert seen.as_json()["changed_since_approval"] is True
        text = await shared_text(book)
        assert "DuckDB is the store." in text and "SQLite" not in text
        json_export, _ = await export_text(book, PROJECT, "json")
        assert "SQLite" not in json_export and "DuckDB is the store." in json_export

        # Re-categorising keeps the approval (the text is the same); approving the edit shares it.
        await teams.decide(book, duck, "approved", "Ana Lima")
        await book.update(duck, category="architecture")
        text = await shared_text(book)
        assert "SQLite is the store." in text and "## Architecture\n\n<!-- lore:" in text
        assert (await teams.pending_json(book, PROJECT))["pending"] == []

    run(scenario())


def test_auto_policy_shares_what_nobody_rejected_and_a_rejected_edit_falls_back() -> None:
    async def scenario() -> None:
        book = new_book()
        await teams.bind(book.store, PROJECT, "core")
        assert (await teams.team_state(book.store, PROJECT)).policy == "auto"  # type: ignore[union-attr]
        duck = await add(book, "Use DuckDB", "DuckDB is the store.")
        assert "DuckDB is the store." in await shared_text(book)
        assert (await teams.pending_json(book, PROJECT))["pending"] == []
        await book.update(duck, content="SQLite is the store.")
        await teams.decide(book, duck, "rejected", "Bo")
        text = await shared_text(book)
        assert "DuckDB is the store." in text and "SQLite" not in text
        # The team-wide policy applies where the project sets none; the project's overrides it.
        await teams.set_policy(book.store, PROJECT, "manual", team_wide=True)
        state = await teams.team_state(book.store, PROJECT)
        assert state is not None and (state.policy, state.policy_from) == ("manual", "team")
        await teams.bind(book.store, PROJECT, "core", "auto")
        state = await teams.team_state(book.store, PROJECT)
        assert state is not None and (state.policy, state.policy_from) == ("auto", "project")
        # Unbound: everything exportable is shared again, decision records stay in the store.
        await teams.unbind(book.store, PROJECT)
        text = await shared_text(book)
        assert "SQLite is the store." in text and "lore:decision" not in text
        assert len(await book.store.knowledge_decisions(PROJECT)) == 1

    run(scenario())


def test_what_cannot_be_decided_is_refused_with_the_reason() -> None:
    async def scenario() -> None:
        book = new_book()
        duck = await add(book, "Use DuckDB", "DuckDB is the store.")
        with pytest.raises(teams.TeamConflict, match="not bound to a team"):
            await teams.decide(book, duck, "approved", "Ana")
        await teams.bind(book.store, PROJECT, "core", "manual")
        secret = await add(book, "Vault path", "The vault lives at /srv/vault.", sensitivity="restricted")
        everyone = await add(book, "Tabs", "Tabs everywhere.", scope="global")
        cases = [
            (secret, "approved", "Ana", teams.TeamConflict, "restricted"),
            (everyone, "approved", "Ana", teams.TeamConflict, "global entry"),
            (duck, "maybe", "Ana", KnowledgeInputError, "decision must be one of"),
            (duck, "approved", "Ana --> <b>", KnowledgeInputError, "may not hold"),
            (duck, "approved", " ", KnowledgeInputError, "1-100 characters"),
            ("k:0000000000000000", "approved", "Ana", KnowledgeInputError, "no knowledge entry"),
        ]
        for ident, decision, by, error, reason in cases:
            with pytest.raises(error, match=reason):
                await teams.decide(book, ident, decision, by)
        with pytest.raises(KnowledgeInputError, match="team must be"):
            await teams.bind(book.store, PROJECT, "two words")
        with pytest.raises(KnowledgeInputError, match="policy must be one of"):
            await teams.set_policy(book.store, PROJECT, "sometimes")
        await book.delete(duck)
        with pytest.raises(teams.TeamConflict, match="was deleted"):
            await teams.decide(book, duck, "approved", "Ana")
        assert await book.store.knowledge_decisions() == []
        # A restricted entry's records never leave either (there are none to leave).
        assert "Vault" not in await shared_text(book)

    run(scenario())


def test_a_teammates_import_brings_approvals_and_rejections_along(tmp_path: Path) -> None:
    async def scenario() -> None:
        ana, bo = new_book(), new_book(Clock(1_800_000_500.0))
        for book, project in ((ana, PROJECT), (bo, ELSEWHERE)):
            await teams.bind(book.store, project, "core", "manual")
        duck = await add(ana, "Use DuckDB", "DuckDB is the store.")
        draft = await add(ana, "Half-baked idea", "Rewrite it in a weekend.")
        await teams.decide(ana, duck, "approved", "Ana")

        file = tmp_path / ".lore.md"
        file.write_text(await shared_text(ana))
        report = await lorefile.import_file(bo, ELSEWHERE, file)
        assert report.decisions == 1 and [v.logical_id for v in report.created] == [duck]
        # The approved entry arrives approved; the pending one's content never left Ana's store.
        assert (await teams.pending_json(bo, ELSEWHERE))["pending"] == []
        assert await bo.get(draft) is None
        assert "DuckDB is the store." in await shared_text(bo, ELSEWHERE)

        # Bo rejects it later; Ana imports Bo's file: the rejection stands on both sides.
        await teams.decide(bo, duck, "rejected", "Bo")
        file.write_text(await shared_text(bo, ELSEWHERE))
        report = await lorefile.import_file(ana, PROJECT, file)
        assert report.decisions == 1 and report.created == [] and report.updated == []
        for book, project in ((ana, PROJECT), (bo, ELSEWHERE)):
            assert "DuckDB is the store." not in await shared_text(book, project)
            rejected = (await teams.pending_json(book, project))["rejected"]
            assert [r["id"] for r in rejected] == [f"k:{duck}"]
        # Importing a file again adds nothing (records are a set).
        assert (await lorefile.import_file(ana, PROJECT, file)).decisions == 0

    run(scenario())


def test_importing_our_own_export_does_not_undo_a_pending_edit(tmp_path: Path) -> None:
    async def scenario() -> None:
        book = new_book()
        await teams.bind(book.store, PROJECT, "core", "manual")
        duck = await add(book, "Use DuckDB", "DuckDB is the store.")
        await teams.decide(book, duck, "approved", "Ana")
        await book.update(duck, content="SQLite is the store.")
        file = tmp_path / ".lore.md"
        await lorefile.export(book, PROJECT, file)
        assert "DuckDB is the store." in file.read_text()
        report = await lorefile.import_file(book, PROJECT, file)
        assert report.changed is False
        current = await book.get(duck)
        assert current is not None and current.content == "SQLite is the store."
        # A hand edit of that text is still an edit.
        file.write_text(file.read_text().replace("DuckDB is the store.", "DuckDB, version 1.4."))
        report = await lorefile.import_file(book, PROJECT, file)
        assert [v.content for v in report.updated] == ["DuckDB, version 1.4."]

    run(scenario())


def test_decision_records_round_trip_through_the_file_and_bad_ones_are_reported() -> None:
    record = make_decision(
        "3f2a9c1d8e7b6a50", "0123456789abcdef01234567", "rejected", "Ana Lima", 1.8e9 + 0.25
    )
    line = lorefile.render_decision(record)
    assert line == (
        "<!-- lore:decision 3f2a9c1d8e7b6a50 rejected 0123456789abcdef01234567 "
        "2027-01-15T08:00:00.250000Z Ana Lima -->"
    )
    text = (
        lorefile.render([], decisions=[record])
        + "<!-- lore:decision 3f2a9c1d8e7b6a50 approved zz 2027 x -->\n"
    )
    parsed = lorefile.parse(text)
    assert parsed.decisions == [record]
    assert parsed.problems == [f"line {text.count(chr(10))}: malformed team decision record: ignored"]
    # Content that reads like a record is escaped, and stays content.
    entry = lorefile.ParsedEntry("abcd1234", "gotcha", "Records", "<!-- lore:decision x -->", line=0)
    again = lorefile.parse(lorefile.render([entry]))
    assert again.decisions == [] and again.entries[0].content == "<!-- lore:decision x -->"


# -- convergence ---------------------------------------------------------------------------------

# One step: a store (0 or 1) decides (approve/reject) at one of a few instants (so ties
# happen), or one store's .lore.md is imported by the other.
STEP = st.one_of(
    st.tuples(
        st.just("decide"), st.integers(0, 1), st.sampled_from(["approved", "rejected"]), st.integers(0, 3)
    ),
    st.tuples(st.just("send"), st.integers(0, 1), st.none(), st.none()),
)


async def _converge(
    steps: list[tuple[str, int, str | None, int | None]], final_order: tuple[int, int]
) -> None:
    projects = (PROJECT, ELSEWHERE)
    books = [KnowledgeBook(MemoryStore()) for _ in projects]
    for book, project in zip(books, projects, strict=True):
        await teams.bind(book.store, project, "core", "manual")
    duck = await add(books[0], "Use DuckDB", "DuckDB is the store.")
    await teams.decide(books[0], duck, "approved", "Ana")  # so the entry reaches the other store
    await lorefile.import_parsed(books[1], ELSEWHERE, lorefile.parse(await shared_text(books[0])), Path("f"))
    names = itertools.count()

    async def send(source: int) -> None:
        text = await shared_text(books[source], projects[source])
        await lorefile.import_parsed(books[1 - source], projects[1 - source], lorefile.parse(text), Path("f"))

    for kind, who, decision, instant in steps:
        if kind == "send":
            await send(who)
            continue
        assert decision is not None and instant is not None
        books[who].clock = lambda instant=instant: 1_800_000_000.0 + instant
        await teams.decide(books[who], duck, decision, f"reviewer-{who}-{next(names)}")
    for source in final_order:
        await send(source)
    for source in final_order:  # and once more: nothing changes any further
        await send(source)
    held = [await book.store.knowledge_decisions() for book in books]
    assert {d.decision_id for d in held[0]} == {d.decision_id for d in held[1]}
    states = []
    for book, project in zip(books, projects, strict=True):
        entry = await book.get(duck)
        assert entry is not None
        view = await teams.TeamView.load(book.store, project)
        assert view is not None
        states.append((await view.approval(entry)).state)
    assert states[0] == states[1]
    # And it is the rule's answer over the union: latest, a rejection wins a tie, then the id.
    entry = await books[0].get(duck)
    assert entry is not None
    standing = standing_decision(held[0], content_fingerprint(entry))
    assert standing is not None and states[0] == standing.decision
    texts = [await shared_text(book, project) for book, project in zip(books, projects, strict=True)]
    assert texts[0] == texts[1]  # the same file on both machines, byte for byte


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, max_size=12), final_order=st.sampled_from([(0, 1), (1, 0)]))
def test_two_stores_converge_whatever_the_interleaving(
    steps: list[tuple[str, int, str | None, int | None]], final_order: tuple[int, int]
) -> None:
    run(_converge(steps, final_order))


def test_a_rejection_wins_a_tie_and_the_later_decision_stands() -> None:
    fp = "0123456789abcdef01234567"
    approve = make_decision("abcd1234", fp, "approved", "Ana", 100.0)
    reject = make_decision("abcd1234", fp, "rejected", "Bo", 100.0)
    later = make_decision("abcd1234", fp, "approved", "Cy", 100.000001)
    for order in itertools.permutations([approve, reject]):
        assert standing_decision(list(order), fp) == reject
    for order in itertools.permutations([approve, reject, later]):
        assert standing_decision(list(order), fp) == later
    assert standing_decision([approve], "another text") is None
