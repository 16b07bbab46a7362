"""Contradictions (lore_core.knowledge.contradictions) with a scripted judge: an opposing pair
becomes ``open``, a similar compatible pair ``cleared``, neither entry changes; only a change
of title or content brings a pair back to the judge; a person resolves (keep one, keep
both); restricted entries are never shown to the worker."""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from collections.abc import Sequence

import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.knowledge.book import KnowledgeBook, KnowledgeInputError
from lore_core.knowledge.contradictions import (
    ContradictionFinder,
    ContradictionJudge,
    Judgement,
    parse_judgement,
)
from lore_core.storage.knowledge import KnowledgeVersion
from lore_core.worker.client import WorkerError

P = "/work/shop"


class BagOfWords:
    """A deterministic embedder: word counts over the call's vocabulary, unit length."""

    min_similarity = None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vocab = sorted(set(re.findall(r"\w+", " ".join(texts).lower())))
        out = []
        for text in texts:
            counts = Counter(re.findall(r"\w+", text.lower()))
            vector = [float(counts.get(w, 0)) for w in vocab]
            norm = math.sqrt(sum(v * v for v in vector)) or 1.0
            out.append([v / norm for v in vector])
        return out


class Scripted(ContradictionJudge):
    """Opposite when one entry says tabs and the other spaces."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail

    async def judge(self, first: KnowledgeVersion, second: KnowledgeVersion) -> Judgement:
        self.calls.append((first.title, second.title))
        if self.fail is not None:
            raise self.fail
        texts = {first.content.lower(), second.content.lower()}
        opposite = any("tabs" in t for t in texts) and any("spaces" in t for t in texts)
        return Judgement(opposite, "tabs against spaces" if opposite else "compatible", "worker:test/judge")


async def setup(judge: Scripted) -> tuple[MemoryStore, KnowledgeBook, ContradictionFinder]:
    store = MemoryStore()
    await store.open()
    book = KnowledgeBook(store)
    return store, book, ContradictionFinder(book, judge, BagOfWords())  # type: ignore[arg-type]


async def add(book: KnowledgeBook, title: str, content: str, **kw: str) -> KnowledgeVersion:
    result = await book.create(project=P, category="pattern", title=title, content=content, **kw)
    assert result.version is not None
    return result.version


def test_an_opposing_pair_is_open_a_compatible_one_cleared_and_no_entry_changes() -> None:
    judge = Scripted()

    async def run():
        store, book, finder = await setup(judge)
        tabs = await add(book, "Indentation", "Indent Python code with tabs in this repo.")
        spaces = await add(book, "Indent style", "Indent Python code with four spaces in this repo.")
        width = await add(
            book, "Indent width", "Indent Python code with care in this repo, lines wrap at 110."
        )
        await add(book, "Release day", "Releases go out on Tuesdays after the standup.")
        before = {e.logical_id: e.version for e in await book.entries(P)}
        report = await finder.scan(P)
        after = {e.logical_id: e.version for e in await book.entries(P)}
        return store, report, before, after, (tabs, spaces, width)

    store, report, before, after, (tabs, spaces, width) = asyncio.run(run())
    assert before == after  # judged, never edited, merged or deleted
    records = {c.ids: c for c in asyncio.run(store.knowledge_contradictions(P))}
    tab_pair = tuple(sorted((tabs.logical_id, spaces.logical_id)))
    assert records[tab_pair].status == "open" and records[tab_pair].reason == "tabs against spaces"
    assert records[tab_pair].judged_by == "worker:test/judge"
    # Similar but compatible (both about indenting Python code here): cleared.
    width_pair = tuple(sorted((tabs.logical_id, width.logical_id)))
    assert records[width_pair].status == "cleared"
    # The release entry shares nothing with the others: never a candidate, never asked about.
    assert all("Release day" not in call for call in judge.calls)
    assert report.opened == [tab_pair] and report.judged == len(judge.calls) == len(records)


def test_only_a_change_of_text_brings_a_pair_back_to_the_judge() -> None:
    judge = Scripted()

    async def run():
        store, book, finder = await setup(judge)
        tabs = await add(book, "Indentation", "Indent Python code with tabs.")
        spaces = await add(book, "Indent style", "Indent Python code with spaces.")
        await finder.scan(P)
        first_calls = len(judge.calls)
        # Re-categorised and reinforced: what it says is the same, no new judgement.
        await book.update(tabs.logical_id, category="preference")
        await book.reinforce([tabs.logical_id], 0.1)
        await finder.scan(P)
        unchanged_calls = len(judge.calls)
        # The text changes: judged again, and now compatible.
        await book.update(spaces.logical_id, content="Indent Python code with tabs, never mixing.")
        await finder.scan(P)
        (record,) = await store.knowledge_contradictions(P)
        return first_calls, unchanged_calls, len(judge.calls), record

    first_calls, unchanged_calls, calls, record = asyncio.run(run())
    assert first_calls == 1 and unchanged_calls == 1 and calls == 2
    assert record.status == "cleared"


def test_resolving_keeps_one_or_both_as_a_person_decides() -> None:
    judge = Scripted()

    async def run():
        store, book, finder = await setup(judge)
        tabs = await add(book, "Indentation", "Indent Python code with tabs.")
        spaces = await add(book, "Indent style", "Indent Python code with spaces.")
        await finder.scan(P)
        with pytest.raises(KnowledgeInputError, match="must name one of the two"):
            await finder.resolve(tabs.ref, spaces.ref, keep="k:someone-else")
        with pytest.raises(KnowledgeInputError, match="no knowledge entry"):
            await finder.resolve(tabs.ref, "k:missing-entry", keep=None)
        kept = await finder.resolve(tabs.ref, spaces.ref, keep=spaces.ref)
        alive = [e.title for e in await book.entries(P)]
        dropped = await book.get(tabs.logical_id)
        with pytest.raises(KnowledgeInputError, match="deleted already"):
            await finder.resolve(tabs.ref, spaces.ref, keep=None)
        # Keep both: recorded, and not asked about again while the texts stay.
        a = await add(book, "Quotes", "Use double quotes in Python.")
        b = await add(book, "Quote style", "Use single quotes in Python, tabs for indents.")
        both = await finder.resolve(a.ref, b.ref, keep=None)
        calls = len(judge.calls)
        await finder.scan(P)
        pairs = {c.ids: c.status for c in await store.knowledge_contradictions(P)}
        return kept, alive, dropped, both, judge.calls[calls:], pairs, (a, b)

    kept, alive, dropped, both, later_calls, pairs, (a, b) = asyncio.run(run())
    assert kept.status == "resolved" and kept.judged_by == "user" and kept.kept_id is not None
    assert alive == ["Indent style"]
    assert dropped is not None and dropped.is_deleted and dropped.updated_by == "user"
    assert both.status == "kept" and both.kept_id is None
    assert pairs[tuple(sorted((a.logical_id, b.logical_id)))] == "kept"
    # The kept pair is not judged again (a new pair it forms with another entry is).
    assert all({"Quotes", "Quote style"} != set(call) for call in later_calls)


@pytest.mark.parametrize("sensitivity", ["restricted", "sensitive"])
def test_entries_not_for_a_workers_eyes_are_never_shown_to_the_judge(sensitivity: str) -> None:
    judge = Scripted()

    async def run(include_sensitive: bool):
        _store, book, finder = await setup(judge)
        finder.include_sensitive = include_sensitive
        await add(book, "Indentation", "Indent Python code with tabs.", sensitivity=sensitivity)
        await add(book, "Indent style", "Indent Python code with spaces.")
        return await finder.scan(P)

    report = asyncio.run(run(include_sensitive=False))
    assert judge.calls == [] and report.candidates == 0
    # knowledge.workerSeesSensitive lets sensitive entries through, never restricted ones.
    report = asyncio.run(run(include_sensitive=True))
    assert len(judge.calls) == (1 if sensitivity == "sensitive" else 0)


def test_a_failed_judgement_stops_the_scan_and_records_nothing() -> None:
    judge = Scripted(fail=WorkerError("upstream said 500", 500))

    async def run():
        store, book, finder = await setup(judge)
        await add(book, "Indentation", "Indent Python code with tabs.")
        await add(book, "Indent style", "Indent Python code with spaces.")
        report = await finder.scan(P)
        return report, await store.knowledge_contradictions(P)

    report, records = asyncio.run(run())
    assert "failed" in report.stopped and records == []


def test_without_an_embedder_shared_words_find_the_pairs() -> None:
    judge = Scripted()

    async def run():
        store = MemoryStore()
        await store.open()
        book = KnowledgeBook(store)
        finder = ContradictionFinder(book, judge, None)
        await add(book, "Indentation", "Indent Python code with tabs.")
        await add(book, "Indent style", "Indent Python code with spaces.")
        await add(book, "Release day", "Releases go out on Tuesdays.")
        return await finder.scan(P)

    report = asyncio.run(run())
    assert len(report.opened) == 1 and judge.calls == [("Indentation", "Indent style")]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"contradiction": true, "reason": "tabs vs spaces"}', (True, "tabs vs spaces")),
        ('```json\n{"contradiction": false, "reason": "ok"}\n```', (False, "ok")),
        ('Sure! {"contradiction": false} is my answer', (False, "")),
    ],
)
def test_judgements_are_read_from_the_answer(answer: str, expected: tuple[bool, str]) -> None:
    assert parse_judgement(answer) == expected


@pytest.mark.parametrize("answer", ["yes", '{"contradiction": "yes"}', "[]", ""])
def test_an_answer_that_is_not_a_judgement_is_an_error(answer: str) -> None:
    with pytest.raises(WorkerError):
        parse_judgement(answer)
