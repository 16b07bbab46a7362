"""Knowledge upkeep (lore_core.knowledge.curation) with a scripted curator: operations applied
through the book with the curator's provenance, near-duplicates reconfirmed instead of
created, each distillation curated once, nothing without a worker, decay once a day."""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import KnowledgeConfig
from lore_core.knowledge.book import KnowledgeBook
from lore_core.knowledge.curation import DAY, FAILURE_LOG_EVERY_SECONDS, KnowledgeUpkeep
from lore_core.knowledge.curator import Curation, LLMKnowledgeCurator, Operation, parse_operations
from lore_core.storage.knowledge import KnowledgeVersion
from lore_core.storage.records import StoredDistillation
from lore_core.worker.client import NoWorker, WorkerError

P = "/work/shop"


class BagOfWords:
    """A deterministic embedder: word counts over a fixed vocabulary, unit length."""

    min_similarity = None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            counts = Counter(re.findall(r"\w+", text.lower()))
            vocab = sorted(set(re.findall(r"\w+", " ".join(texts).lower())) | set(counts))
            vector = [float(counts.get(w, 0)) for w in vocab]
            norm = math.sqrt(sum(v * v for v in vector)) or 1.0
            out.append([v / norm for v in vector])
        # One vocabulary per call: pad every vector to the longest.
        width = max(len(v) for v in out)
        return [v + [0.0] * (width - len(v)) for v in out]


class Scripted(LLMKnowledgeCurator):
    """Answers with the operations it was given. ``shows_only_normal``: like the LLM curator,
    its worker sees only ``normal`` entries and it says which (``Curation.shown_ids``)."""

    def __init__(self, operations: list[Operation] | Exception, *, shows_only_normal: bool = False) -> None:
        self.operations = operations
        self.shows_only_normal = shows_only_normal
        self.calls: list[tuple[list[str], list[str]]] = []

    async def curate(
        self,
        observations: Sequence[StoredDistillation],
        entries: Sequence[KnowledgeVersion],
        *,
        session_id: str | None = None,
    ) -> Curation:
        self.calls.append(([o.id for o in observations], [e.title for e in entries]))
        if isinstance(self.operations, Exception):
            raise self.operations
        shown = (
            frozenset(e.logical_id for e in entries if e.sensitivity == "normal")
            if self.shows_only_normal
            else None
        )
        return Curation(list(self.operations), [], "anthropic", "claude-worker", shown_ids=shown)


async def setup(curator: Scripted, **config: Any) -> tuple[MemoryStore, KnowledgeBook, KnowledgeUpkeep]:
    store = MemoryStore()
    await store.open()
    book = KnowledgeBook(store)
    upkeep = KnowledgeUpkeep(book, KnowledgeConfig(**config), curator, BagOfWords())  # type: ignore[arg-type]
    await store.write_distillation(
        StoredDistillation(
            id="log1", session_id="s1", generation=0, text="- decided to use pytest -q", project=P
        )
    )
    return store, book, upkeep


def test_operations_are_applied_with_the_curators_provenance_and_each_log_is_curated_once() -> None:
    curator = Scripted(
        [
            Operation(
                "create", category="preference", title="Tests", content="Run the tests with pytest -q."
            ),
            Operation(
                "create", category="preference", title="The tests", content="Run the tests with pytest -q!"
            ),
            Operation("create", category="gotcha", title="Clock", content="Freeze time in tests."),
        ]
    )

    async def run() -> Any:
        store, book, upkeep = await setup(curator)
        first = await upkeep.curate_session("s1", P)
        again = await upkeep.curate_session("s1", P)
        return first, again, await book.entries(P), await store.knowledge_metrics()

    first, again, entries, metrics = asyncio.run(run())
    # The second create is the first one again (cosine >= 0.92): reconfirmed, not a new entry.
    assert sorted(e.title for e in entries) == ["Clock", "Tests"]
    assert first.applied["created"] == 2 and first.applied["reconfirmed"] == 1
    tests = next(e for e in entries if e.title == "Tests")
    assert (tests.created_by, tests.source_session, tests.worker_model) == ("curator", "s1", "claude-worker")
    assert metrics[tests.logical_id].confidence > 0.6  # reinforced by the reconfirmation
    assert again.observations == 0 and len(curator.calls) == 1  # log1 is not shown twice


def test_without_a_worker_nothing_is_invented_and_the_log_waits() -> None:
    curator = Scripted(NoWorker("no credentials for this session"))

    async def run() -> Any:
        _, book, upkeep = await setup(curator)
        report = await upkeep.curate_session("s1", P)
        curator.operations = [Operation("create", category="gotcha", title="Later", content="With a worker.")]
        later = await upkeep.curate_session("s1", P)
        return report, later, await book.entries(P)

    report, later, entries = asyncio.run(run())
    assert "no usable worker" in report.skipped
    assert later.applied["created"] == 1 and [e.title for e in entries] == ["Later"]


def test_a_failing_worker_is_one_warning_per_interval_not_one_per_session(
    caplog: pytest.LogCaptureFixture,
) -> None:
    curator = Scripted(WorkerError('the answer is not a JSON object with an "operations" list', 200))
    now = [1000.0]

    async def run() -> Counter[str]:
        store = MemoryStore()
        await store.open()
        upkeep = KnowledgeUpkeep(KnowledgeBook(store), KnowledgeConfig(), curator, clock=lambda: now[0])
        for i in range(50):
            sid = f"s{i}"
            await store.write_distillation(
                StoredDistillation(id=f"log{i}", session_id=sid, generation=0, text="- a step", project=P)
            )
            await upkeep.curate_session(sid, P)
            now[0] += 1.0
        now[0] += FAILURE_LOG_EVERY_SECONDS
        await upkeep.curate_session("s0", P)
        return upkeep.counts

    with caplog.at_level(logging.WARNING, logger="lore.knowledge"):
        counts = asyncio.run(run())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert counts["errors"] == 51  # every failure is counted
    assert len(warnings) == 2, warnings
    assert "knowledge curation of s0 failed" in warnings[0] and "more since" not in warnings[0]
    assert warnings[1].endswith("(49 more since the last warning)")


def test_turn_rule_and_idle_trigger() -> None:
    curator = Scripted([])

    async def run() -> int:
        _, _, upkeep = await setup(curator, curate_every_turns=3)
        for _ in range(2):
            upkeep.note_turn("s1", P)
        await upkeep.after_distill("s1", P, "turn")  # 2 turns: not yet
        upkeep.note_turn("s1", P)
        await upkeep.after_distill("s1", P, "turn")  # 3 turns: curated
        return len(curator.calls)

    assert asyncio.run(run()) == 1


def test_decay_runs_once_a_day_on_entries_nothing_reinforced() -> None:
    now = [1_000_000.0]

    async def run() -> tuple[float, float, int]:
        store = MemoryStore()
        await store.open()
        book = KnowledgeBook(store, clock=lambda: now[0])
        upkeep = KnowledgeUpkeep(book, KnowledgeConfig(decay_after_days=1), None, clock=lambda: now[0])
        old = (await book.create(project=P, category="gotcha", title="Old", content="x")).version
        assert await upkeep.decay_if_due() == 0  # starts the clock
        now[0] += 3 * DAY
        fresh = (await book.create(project=P, category="gotcha", title="Fresh", content="y")).version
        changed = await upkeep.decay_if_due()
        assert await upkeep.decay_if_due() == 0  # not twice in a day
        metrics = await store.knowledge_metrics()
        return metrics[old.logical_id].confidence, metrics[fresh.logical_id].confidence, changed

    old, fresh, changed = asyncio.run(run())
    assert changed == 1 and fresh == 0.9 and abs(old - 0.9 * 0.98**3) < 1e-9


def test_the_answer_is_validated_before_anything_is_written() -> None:
    text = """```json
    {"operations": [
      {"op": "create", "category": "decision", "title": "Use uv", "content": "uv manages the env.",
       "rejected": "pip-tools"},
      {"op": "create", "category": "decision", "title": "Bare", "content": "No alternative named."},
      {"op": "update", "id": "k:unknown0000000", "content": "x"},
      {"op": "reconfirm", "id": "k:aaaaaaaaaaaaaaaa"},
      {"op": "merge"}, "text", {"op": "create", "category": "opinion", "title": "t", "content": "c"}
    ]}
    ```"""
    ops, warnings = parse_operations(text, {"aaaaaaaaaaaaaaaa"})
    assert [(o.op, o.title or o.logical_id) for o in ops] == [
        ("create", "Use uv"),
        ("reconfirm", "aaaaaaaaaaaaaaaa"),
    ]
    assert ops[0].content == "uv manages the env.\nRejected: pip-tools"
    assert len(warnings) == 5


def test_a_near_duplicate_that_says_the_opposite_is_a_new_entry_not_a_reconfirmation() -> None:
    """Opposite rules about one subject embed almost alike: with a judge, the curator's
    create of the opposite rule becomes an entry (the contradiction scan then records the
    pair for a person), instead of reinforcing the rule it reverses."""
    from lore_core.knowledge.contradictions import ContradictionFinder, ContradictionJudge, Judgement

    class Opposite(ContradictionJudge):
        def __init__(self) -> None:
            self.calls = 0

        async def judge(self, first: KnowledgeVersion, second: KnowledgeVersion) -> Judgement:
            self.calls += 1
            return Judgement("never" in second.content, "always vs never", "worker:test/judge")

    class Alike:
        """Every text embeds the same: each create is a near-duplicate of the first."""

        min_similarity = None

        async def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return [[1.0, 0.0] for _ in texts]

    judge = Opposite()
    curator = Scripted(
        [
            Operation(
                "create", category="preference", title="Mocks", content="Always mock the network in tests."
            ),
            Operation(
                "create", category="preference", title="Mocks!", content="Always mock the network in tests!"
            ),
            Operation(
                "create",
                category="preference",
                title="No mocks",
                content="Always never mock the network in tests.",
            ),
        ]
    )

    async def run() -> Any:
        store = MemoryStore()
        await store.open()
        book = KnowledgeBook(store)
        finder = ContradictionFinder(book, judge, Alike())  # type: ignore[arg-type]
        upkeep = KnowledgeUpkeep(
            book,
            KnowledgeConfig(),
            curator,
            Alike(),
            contradictions=finder,  # type: ignore[arg-type]
        )
        await store.write_distillation(
            StoredDistillation(id="log1", session_id="s1", generation=0, text="- mocks", project=P)
        )
        report = await upkeep.curate_session("s1", P)
        return report, sorted(e.title for e in await book.entries(P))

    report, titles = asyncio.run(run())
    assert titles == ["Mocks", "No mocks"]
    assert report.applied["created"] == 2 and report.applied["reconfirmed"] == 1
    assert judge.calls == 2  # asked about each near-duplicate, nothing else


def test_a_create_never_edits_by_title_an_entry_the_worker_was_not_shown() -> None:
    """The book turns a create with a known title into an edit of that entry: from the
    curator, only of an entry its worker saw. A sensitive entry hidden from the worker and a
    restricted one (never given to any curator) keep their text; a shown one is edited."""
    operations = [
        Operation("create", category="gotcha", title="Deploy keys", content="Keys live in the wiki."),
        Operation("create", category="gotcha", title="Vault", content="The vault is open."),
        Operation("create", category="gotcha", title="Clock", content="Freeze time with freezegun."),
    ]

    async def run(curator: Scripted) -> tuple[Any, dict[str, str]]:
        _store, book, upkeep = await setup(curator)
        await book.create(
            project=P,
            category="gotcha",
            title="Deploy keys",
            content="Rotate on Fridays.",
            sensitivity="sensitive",
        )
        await book.create(
            project=P,
            category="gotcha",
            title="Vault",
            content="Unsealed by two people.",
            sensitivity="restricted",
        )
        await book.create(project=P, category="gotcha", title="Clock", content="Freeze time in tests.")
        report = await upkeep.curate_session("s1", P)
        return report, {e.title: e.content for e in await book.entries(P)}

    report, contents = asyncio.run(run(Scripted(operations, shows_only_normal=True)))
    assert contents == {
        "Deploy keys": "Rotate on Fridays.",
        "Vault": "Unsealed by two people.",
        "Clock": "Freeze time with freezegun.",
    }
    assert report.applied["refused"] == 2 and report.applied["updated"] == 1
    assert all("may not edit" in reason for _, reason in report.refused)

    # A curator that does not say what it showed was given the sensitive entry, never the
    # restricted one.
    report, contents = asyncio.run(run(Scripted(operations)))
    assert contents["Deploy keys"] == "Keys live in the wiki."
    assert contents["Vault"] == "Unsealed by two people."
    assert report.applied["refused"] == 1
