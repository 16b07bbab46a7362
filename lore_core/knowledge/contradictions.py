"""Contradictions between knowledge entries (docs/knowledge.md): detected by the worker
model, recorded, and never resolved by the machine.

* **Finding pairs.** The entries of a project that a worker may see (never restricted ones;
  sensitive ones only with ``knowledge.workerSeesSensitive``) are paired by similarity: the cosine of their
  embeddings (the on-device embedder), or the overlap of their words without one. Pairs of
  at least :data:`PAIR_SIMILARITY` (:data:`WORD_OVERLAP` for words) are candidates, most
  similar first, at most :data:`MAX_JUDGED_PER_SCAN` judged per scan (the rest next time).
* **Judging.** The worker is shown the two entries (prompt ``prompts/contradiction.md``)
  and answers whether they give opposite instructions. The pair is recorded ``open`` or
  ``cleared`` with the model and the time. Nothing else happens: no merge, no edit, no
  delete.
* **When a pair is judged again** (the question the reference leaves open): when either
  side's *title or content* changed since the judgement, compared by a fingerprint of the
  two (:func:`~lore_core.storage.knowledge.content_fingerprint`) kept with the record.
  Not on a version bump alone: re-categorising, re-scoping, a sensitivity change or
  reinforcement leave what the entry says the same, so the judgement stands and costs no
  worker call. A person's decision (kept both) is subject to the same rule: it is about the
  two texts as they were, and a new text gets a new judgement.
* **Resolving** is a person's: keep one (the other gets a death certificate, with the user
  as author) or keep both; either is recorded on the pair.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from lore_core.context.framing import worker_data
from lore_core.interfaces import Embedder
from lore_core.knowledge.book import DELETED, UNCHANGED, KnowledgeBook, KnowledgeInputError, Provenance
from lore_core.knowledge.curator import answer_json, shown_to_worker
from lore_core.knowledge.prompts import load_prompt
from lore_core.knowledge.search import EntryVectors, cosine
from lore_core.storage.knowledge import (
    AUTHOR_USER,
    KnowledgeContradiction,
    KnowledgeVersion,
    content_fingerprint,
    pair_ids,
)
from lore_core.worker.client import WorkerClient, WorkerError

log = logging.getLogger("lore.knowledge")

#: Embedding cosine from which two entries are worth asking about. Measured with the
#: on-device model on hand-written coding rules: six opposite pairs ("indent with tabs" /
#: "with four spaces", "use DuckDB" / "use SQLite, not DuckDB", ...) 0.57-0.86; four
#: compatible pairs on one subject 0.22-0.49; unrelated pairs about 0. The judge, not this
#: threshold, decides: it only keeps the worker calls to pairs about one subject.
PAIR_SIMILARITY = 0.5
#: Without an embedder: the share of shared words (Jaccard over title and content words).
WORD_OVERLAP = 0.25
#: Worker calls one scan makes at most; the other candidates wait for the next scan.
MAX_JUDGED_PER_SCAN = 12
#: Entries compared per project at most (the most recent): pairs grow with the square.
MAX_ENTRIES_COMPARED = 400
_WORD = re.compile(r"[\w./-]+")


@attrs.define
class Judgement:
    contradiction: bool
    reason: str
    judged_by: str


@attrs.define
class ScanReport:
    project: str
    candidates: int = 0
    judged: int = 0
    opened: list[tuple[str, str]] = attrs.field(factory=list)
    cleared: list[tuple[str, str]] = attrs.field(factory=list)
    #: Why the scan stopped early (no worker, a failed call), or "".
    stopped: str = ""


class ContradictionJudge:
    """One worker call per pair; the answer is validated before anything is recorded."""

    def __init__(self, worker: WorkerClient) -> None:
        self.worker = worker

    async def judge(self, first: KnowledgeVersion, second: KnowledgeVersion) -> Judgement:
        prompt = "\n".join(
            [
                _entry_block(first),
                _entry_block(second),
            ]
        )
        result = await self.worker.complete(load_prompt("contradiction"), prompt, purpose="contradictions")
        contradiction, reason = parse_judgement(result.text)
        return Judgement(contradiction, reason, f"worker:{result.provider}/{result.model}")


def _entry_block(entry: KnowledgeVersion) -> str:
    return (
        f'<entry id="{entry.ref}" category="{entry.category}" title={json.dumps(entry.title)}>\n'
        f"{worker_data(entry.content.strip())}\n</entry>"
    )


def parse_judgement(text: str) -> tuple[bool, str]:
    """``(contradiction, reason)`` from the worker's answer, or :class:`WorkerError`."""
    raw = answer_json(text)
    if not isinstance(raw, dict) or not isinstance(raw.get("contradiction"), bool):
        raise WorkerError('the answer is not a JSON object with a true/false "contradiction"', 200)
    reason = raw.get("reason")
    return raw["contradiction"], " ".join(reason.split())[:500] if isinstance(reason, str) else ""


class ContradictionFinder:
    """Scans a project's entries for contradicting pairs and records the worker's verdicts;
    resolves pairs as a person decides."""

    def __init__(
        self,
        book: KnowledgeBook,
        judge: ContradictionJudge | None,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.time,
        *,
        include_sensitive: bool = False,
    ) -> None:
        self.book = book
        self.store = book.store
        self.judge = judge
        self.embedder = embedder
        self._vectors = EntryVectors(embedder) if embedder is not None else None
        #: ``knowledge.workerSeesSensitive``: sensitive entries may be shown to the judge.
        self.include_sensitive = include_sensitive
        self._clock = clock

    async def scan(self, project: str) -> ScanReport:
        """Judge the candidate pairs of ``project`` that have no judgement of their current
        texts. :class:`~lore_core.worker.client.WorkerUnavailable` propagates (nothing to
        judge with: the caller tries later); a failed call stops the scan (reported)."""
        report = ScanReport(project)
        if self.judge is None:
            report.stopped = "no worker to judge with"
            return report
        entries = self.shown(await self.book.entries(project, include_global=False))
        entries = sorted(entries, key=lambda e: e.created_at)[-MAX_ENTRIES_COMPARED:]
        known = {c.ids: c for c in await self.book.knowledge_store.knowledge_contradictions(project)}
        pairs = await self._candidates(entries)
        todo = []
        for first, second in pairs:
            previous = known.get(pair_ids(first.logical_id, second.logical_id))
            if previous is not None and _fingerprints(previous) == _pair_fingerprints(first, second):
                continue  # judged (or decided by a person) on these very texts
            todo.append((first, second))
        report.candidates = len(todo)
        for first, second in todo[:MAX_JUDGED_PER_SCAN]:
            try:
                verdict = await self.judge.judge(first, second)
            except WorkerError as exc:
                report.stopped = f"the worker call failed: {exc}"
                log.warning("knowledge contradictions of %s: %s (tried again later)", project, exc)
                break
            await self.book.knowledge_store.record_contradiction(
                _record(first, second, project, "open" if verdict.contradiction else "cleared", self._clock(),
                        verdict.judged_by, verdict.reason)
            )  # fmt: skip
            report.judged += 1
            ids = pair_ids(first.logical_id, second.logical_id)
            (report.opened if verdict.contradiction else report.cleared).append(ids)
            if verdict.contradiction:
                log.info(
                    "knowledge: k:%s %r and k:%s %r contradict (%s): `lore knowledge contradictions`",
                    first.logical_id, first.title, second.logical_id, second.title, verdict.reason,
                )  # fmt: skip
        return report

    def shown(self, entries: Sequence[KnowledgeVersion]) -> list[KnowledgeVersion]:
        """The entries the judge (a worker model, often hosted) may see."""
        return shown_to_worker(entries, include_sensitive=self.include_sensitive)

    async def _candidates(
        self, entries: Sequence[KnowledgeVersion]
    ) -> list[tuple[KnowledgeVersion, KnowledgeVersion]]:
        """Pairs worth judging, most similar first."""
        if len(entries) < 2:
            return []
        similarity = await self._similarity(entries)
        scored = [
            (score, a, b)
            for (a, b) in itertools.combinations(entries, 2)
            if (score := similarity(a, b)) is not None
        ]
        scored.sort(key=lambda t: -t[0])
        return [(a, b) for _, a, b in scored]

    async def _similarity(
        self, entries: Sequence[KnowledgeVersion]
    ) -> Callable[[KnowledgeVersion, KnowledgeVersion], float | None]:
        vectors = await self._embed(entries)
        if vectors is not None:

            def by_vector(a: KnowledgeVersion, b: KnowledgeVersion) -> float | None:
                score = cosine(vectors[a.version_id], vectors[b.version_id])
                return score if score >= PAIR_SIMILARITY else None

            return by_vector
        words = {e.version_id: set(_WORD.findall(f"{e.title} {e.content}".casefold())) for e in entries}

        def by_words(a: KnowledgeVersion, b: KnowledgeVersion) -> float | None:
            wa, wb = words[a.version_id], words[b.version_id]
            score = len(wa & wb) / len(wa | wb) if wa | wb else 0.0
            return score if score >= WORD_OVERLAP else None

        return by_words

    async def _embed(self, entries: Sequence[KnowledgeVersion]) -> dict[str, list[float]] | None:
        if self._vectors is None:
            return None
        try:
            return await self._vectors.of(entries)
        except Exception as exc:
            log.debug("no embeddings for the contradiction scan (word overlap instead): %s", exc)
            return None

    # -- a person's decisions ----------------------------------------------------------------

    async def resolve(self, a: str, b: str, *, keep: str | None) -> KnowledgeContradiction:
        """Keep the entry ``keep`` (the other gets a death certificate), or both with
        ``keep=None``. Raises :class:`~lore_core.knowledge.book.KnowledgeInputError` for ids
        that are not two alive entries of one project, or a ``keep`` that is neither."""
        first_id, second_id = (i.removeprefix("k:") for i in (a, b))
        if first_id == second_id:
            raise KnowledgeInputError("a contradiction needs two different entries")
        first, second = await self.book.get(first_id), await self.book.get(second_id)
        for ident, entry in ((first_id, first), (second_id, second)):
            if entry is None:
                raise KnowledgeInputError(f"no knowledge entry k:{ident}")
            if entry.is_deleted:
                raise KnowledgeInputError(f"k:{ident} is deleted already")
        assert first is not None and second is not None
        if first.project != second.project:
            raise KnowledgeInputError(f"k:{first_id} and k:{second_id} belong to different projects")
        kept = keep.removeprefix("k:") if keep is not None else None
        if kept is not None and kept not in (first_id, second_id):
            raise KnowledgeInputError(
                f"--keep must name one of the two entries (k:{first_id} or k:{second_id})"
            )
        if kept is not None:
            dropped = second_id if kept == first_id else first_id
            result = await self.book.delete(
                dropped, provenance=Provenance(author=AUTHOR_USER, source_ref="resolve")
            )
            if result.status not in (DELETED, UNCHANGED):
                raise KnowledgeInputError(f"k:{dropped} could not be deleted: {result.reason}")
        record = _record(
            first, second, first.project, "resolved" if kept else "kept", self._clock(), AUTHOR_USER,
            f"kept k:{kept}" if kept else "kept both", kept_id=kept,
        )  # fmt: skip
        await self.book.knowledge_store.record_contradiction(record)
        return record


def _pair_fingerprints(a: KnowledgeVersion, b: KnowledgeVersion) -> tuple[str, str]:
    first, second = (a, b) if a.logical_id < b.logical_id else (b, a)
    return content_fingerprint(first), content_fingerprint(second)


def _fingerprints(judgement: KnowledgeContradiction) -> tuple[str, str]:
    return judgement.first_fingerprint, judgement.second_fingerprint


def _record(
    a: KnowledgeVersion,
    b: KnowledgeVersion,
    project: str,
    status: str,
    at: float,
    judged_by: str,
    reason: str,
    kept_id: str | None = None,
) -> KnowledgeContradiction:
    first_id, second_id = pair_ids(a.logical_id, b.logical_id)
    first_fp, second_fp = _pair_fingerprints(a, b)
    return KnowledgeContradiction(
        first_id, second_id, project, status, first_fp, second_fp, at, judged_by, reason, kept_id
    )


def contradiction_json(
    judgement: KnowledgeContradiction, entries: dict[str, KnowledgeVersion] | None = None
) -> dict[str, Any]:
    """The API's and ``lore knowledge contradictions --json``'s form of a pair."""

    def side(ident: str) -> dict[str, Any]:
        entry = (entries or {}).get(ident)
        found: dict[str, Any] = {"id": f"k:{ident}"}
        if entry is not None:
            found.update(
                title=entry.title, content=entry.content, category=entry.category, deleted=entry.is_deleted
            )
        return found

    return {
        "first": side(judgement.first_id),
        "second": side(judgement.second_id),
        "project": judgement.project,
        "status": judgement.status,
        "reason": judgement.reason,
        "judged_by": judgement.judged_by,
        "judged_at": judgement.judged_at,
        "kept": f"k:{judgement.kept_id}" if judgement.kept_id else None,
    }


async def list_contradictions(
    book: KnowledgeBook, project: str | None, statuses: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The judged pairs of ``project`` (every project's with ``None``) as
    :func:`contradiction_json`, open ones first, then newest first."""
    records = await book.knowledge_store.knowledge_contradictions(project, statuses=statuses)
    entries = await _entries_of(book, records)
    records.sort(key=lambda c: (c.status != "open", -c.judged_at))
    return [contradiction_json(c, entries) for c in records]


async def describe(book: KnowledgeBook, record: KnowledgeContradiction) -> dict[str, Any]:
    """One pair as :func:`contradiction_json`, with its entries' titles and texts."""
    return contradiction_json(record, await _entries_of(book, [record]))


async def _entries_of(
    book: KnowledgeBook, records: Sequence[KnowledgeContradiction]
) -> dict[str, KnowledgeVersion]:
    ids = {i for c in records for i in c.ids}
    return {i: e for i in ids if (e := await book.get(i)) is not None}


def scan_json(report: ScanReport) -> dict[str, Any]:
    return {
        "project": report.project,
        "candidates": report.candidates,
        "judged": report.judged,
        "opened": [[f"k:{a}", f"k:{b}"] for a, b in report.opened],
        "cleared": [[f"k:{a}", f"k:{b}"] for a, b in report.cleared],
        "stopped": report.stopped or None,
    }
