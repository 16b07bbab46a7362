"""Knowledge upkeep in the background: the curator after distillation, ``.lore.md`` kept in
step with the store, and the daily decay of confidence.

* **Curation** runs after a session's idle (or on-demand) distillation, and during a long
  session after ``knowledge.curateEveryTurns`` turns since it last ran. It shows the worker
  the session's distillations it has not curated yet and the project's entries (restricted
  ones never leave the store), and applies the operations through the book, with the
  curator's provenance. A create whose text is nearly the same as an entry of its category
  (cosine >= :data:`DUPLICATE_SIMILARITY` with the on-device embedder) reconfirms that entry
  instead. Which distillations were curated is kept in session state, so a restart repeats
  nothing; without a usable worker the run is skipped and tried again later. The entities
  the curator names (:mod:`lore_core.knowledge.entities`) are written after the operations:
  a known name gains the aliases it lacks, a new one is created, then relations are added
  between entities the project knows; what the entity book refuses is counted, not retried.
* **``.lore.md``** at a project's root (when the project is a directory): written
  :data:`EXPORT_DEBOUNCE_SECONDS` after the project's knowledge last changed, and imported
  when it changes on disk (someone edited it, or ``git pull`` brought a teammate's entries).
  Our own writes are recognised by the file's size and modification time.
* **Decay**: once a day, entries nothing reinforced for ``knowledge.decayAfterDays`` lose
  ``knowledge.decayPerDay`` of their confidence.
* **Contradictions** (:mod:`lore_core.knowledge.contradictions`): a project whose entries
  changed is scanned :data:`CONTRADICTION_DELAY_SECONDS` after the last change (and once
  after it is first seen in a run of the gateway, for what changed while none ran); the
  worker's verdicts are recorded, nothing is edited. Like curation, only with a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs

from lore_core.config import KnowledgeConfig
from lore_core.curation import Operation, ProposedEntity
from lore_core.interfaces import DistillationStore, Embedder, KnowledgeCurator, Tier, tier_of
from lore_core.knowledge import lorefile
from lore_core.knowledge.book import CREATED, REFUSED, KnowledgeBook, Provenance, WriteResult
from lore_core.knowledge.contradictions import ContradictionFinder
from lore_core.knowledge.entities import REFUSED as ENTITY_REFUSED
from lore_core.knowledge.entities import EntityBook
from lore_core.knowledge.search import EntryVectors, cosine
from lore_core.storage.knowledge import AUTHOR_CURATOR, KnowledgeVersion
from lore_core.worker.client import WorkerError, WorkerUnavailable

log = logging.getLogger("lore.knowledge")

#: Session state: ids of the distillations the curator has seen.
CURATED_KEY = "knowledge.curated"
#: Gateway state: when the last decay pass ran.
DECAY_KEY = "knowledge.decayedAt"
GATEWAY_STATE_ID = "_gateway"
#: Confidence an entry gains when the curator reconfirms it.
RECONFIRM_REINFORCEMENT = 0.1
#: A new entry this close to an existing one of its category is that entry again.
DUPLICATE_SIMILARITY = 0.92
EXPORT_DEBOUNCE_SECONDS = 2.0
#: Sessions whose turns since their last curation are counted (the most recent ones).
MAX_TRACKED_SESSIONS = 10_000
WATCH_SECONDS = 2.0
#: Projects whose .lore.md is watched: those seen within this long.
WATCH_PROJECTS_SECONDS = 24 * 3600.0
DAY = 86_400.0
#: A project is scanned for contradictions this long after its knowledge last changed (a
#: burst of curator writes or an import is judged once, at the end) ...
CONTRADICTION_DELAY_SECONDS = 30.0
#: ... and, when no worker could judge, tried again this much later.
CONTRADICTION_RETRY_SECONDS = 600.0
# A worker that fails curation tends to fail it for every session: one warning, then at most
# one this often, with a count (every failure is counted on /health: knowledge.curation.errors).
FAILURE_LOG_EVERY_SECONDS = 300.0


@attrs.define
class CurationReport:
    session_id: str
    observations: int = 0
    applied: Counter[str] = attrs.field(factory=Counter)
    refused: list[tuple[str, str]] = attrs.field(factory=list)
    warnings: list[str] = attrs.field(factory=list)
    skipped: str = ""
    #: Entity writes by outcome (created, updated, unchanged, refused; ``skipped``: items of
    #: the answer that were not usable, aliases of entities this project may not change,
    #: relations to names it does not know).
    entities: Counter[str] = attrs.field(factory=Counter)

    def as_json(self) -> dict[str, Any]:
        return {
            "session": self.session_id,
            "observations": self.observations,
            "applied": dict(self.applied),
            "refused": [{"title": t, "reason": r} for t, r in self.refused],
            "warnings": self.warnings,
            "skipped": self.skipped,
            "entities": dict(self.entities),
        }


class KnowledgeUpkeep:
    def __init__(
        self,
        book: KnowledgeBook,
        config: KnowledgeConfig,
        curator: KnowledgeCurator | None,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.time,
        contradictions: ContradictionFinder | None = None,
        entities: EntityBook | None = None,
    ) -> None:
        self.book = book
        #: Where the curator's entities are written (``None``: they are not).
        self.entities = entities
        self.store = book.store
        self.config = config
        self.curator = curator
        self.embedder = embedder
        self.contradictions = contradictions
        # Project -> when its entries should next be scanned for contradictions.
        self._unjudged: dict[str, float] = {}
        self._clock = clock
        # Turns since each session's last curation, most recent last (bounded).
        self._turns: dict[str, int] = {}
        # One curation at a time: they are rare, and two of one session must not interleave.
        self._lock = asyncio.Lock()
        # Project -> when its knowledge last changed (export pending) / was seen in a request.
        self._dirty: dict[str, float] = {}
        self._seen: dict[str, float] = {}
        # Project -> (size, mtime_ns) of .lore.md as we last wrote or read it.
        self._file_state: dict[str, tuple[int, int] | None] = {}
        # Project -> why its .lore.md was last not written (logged once per reason).
        self._unwritable: dict[str, str] = {}
        self._vectors = EntryVectors(embedder) if embedder is not None else None
        self._task: asyncio.Task[None] | None = None
        self.counts: Counter[str] = Counter()
        self._failure_logged_at = float("-inf")
        self._failures_unlogged = 0
        book.listeners.append(self._changed)

    # -- the request path's side ---------------------------------------------------------------

    def note_turn(self, session_id: str, project: str) -> None:
        self._turns[session_id] = self._turns.pop(session_id, 0) + 1
        if len(self._turns) > MAX_TRACKED_SESSIONS:
            del self._turns[next(iter(self._turns))]
        if project:
            if project not in self._seen:
                self._unjudged.setdefault(project, self._clock())
            self._seen[project] = self._clock()

    def _changed(self, version: KnowledgeVersion) -> None:
        if version.project:
            self.export_due(version.project)
            self._unjudged[version.project] = self._clock() + CONTRADICTION_DELAY_SECONDS

    def export_due(self, project: str) -> None:
        """What ``project`` shares changed (an entry, a team decision, a binding): its
        ``.lore.md`` is written again after the debounce."""
        self._dirty[project] = self._clock()

    # -- curation ------------------------------------------------------------------------------

    async def after_distill(self, session_id: str, project: str, reason: str) -> None:
        """Called by the distillation scheduler after each run of a session."""
        if not self.config.enabled or self.curator is None or not self.book.available:
            return
        if (
            reason not in ("idle", "manual")
            and self._turns.get(session_id, 0) < self.config.curate_every_turns
        ):
            return
        await self.curate_session(session_id, project)

    def _log_failure(self, session_id: str, exc: WorkerError) -> None:
        now = self._clock()
        if now - self._failure_logged_at < FAILURE_LOG_EVERY_SECONDS:
            self._failures_unlogged += 1
            log.debug("knowledge curation of %s failed (tried again later): %s", session_id, exc)
            return
        since = f" ({self._failures_unlogged} more since the last warning)" if self._failures_unlogged else ""
        log.warning("knowledge curation of %s failed (tried again later): %s%s", session_id, exc, since)
        self._failure_logged_at = now
        self._failures_unlogged = 0

    async def curate_session(self, session_id: str, project: str) -> CurationReport:
        report = CurationReport(session_id)
        if self.curator is None:
            report.skipped = "no knowledge curator"
            return report
        distillations = tier_of(self.store, DistillationStore)
        if distillations is None or not self.book.available:
            missing = Tier.KNOWLEDGE if distillations is not None else Tier.DISTILLATIONS
            report.skipped = f"the {self.store.name} store has no {missing.label}"
            return report
        async with self._lock:
            curated = set(await self.store.get_state(session_id, CURATED_KEY, None) or [])
            observations = [
                d
                for d in await distillations.list_distillations(session_id, include_archived=True)
                if d.id not in curated
            ]
            report.observations = len(observations)
            if not observations:
                return report
            entries = [e for e in await self.book.entries(project) if e.sensitivity != "restricted"]
            # Only a curator that may write entities is shown them (a plugin's may not take them).
            known: dict[str, Any] = {}
            if self.entities is not None:
                known["entities"] = await self._known_entities(project)
            try:
                curation = await self.curator.curate(observations, entries, session_id=session_id, **known)
            except WorkerUnavailable as exc:
                report.skipped = f"no usable worker ({exc})"
                return report
            except WorkerError as exc:
                self.counts["errors"] += 1
                self._log_failure(session_id, exc)
                report.skipped = f"the worker call failed: {exc}"
                return report
            report.warnings = curation.warnings
            for warning in curation.warnings:
                log.warning("knowledge curator, session %s: %s", session_id, warning)
            provenance = Provenance(
                author=AUTHOR_CURATOR,
                source_session=session_id,
                worker_provider=curation.worker_provider,
                worker_model=curation.worker_model,
            )
            by_id = {e.logical_id: e for e in entries}
            seen = set(by_id) if curation.shown_ids is None else set(curation.shown_ids)
            for op in curation.operations:
                result = await self._apply(
                    op, project, by_id, seen, attrs.evolve(provenance, source_ref=op.source)
                )
                if result.version is not None and result.status == CREATED:
                    seen.add(result.version.logical_id)  # its own entry: a later create may edit it
                report.applied[result.status] += 1
                if result.version is not None and result.changed:
                    by_id[result.version.logical_id] = result.version  # later operations see it
                if result.status == REFUSED:
                    report.refused.append((op.title or op.logical_id or "", result.reason))
            if self.entities is not None:
                report.entities["skipped"] += curation.entities_skipped
                await self._write_entities(curation.entities, project, report)
            done = sorted(curated | {d.id for d in observations})
            await self.store.set_state(session_id, CURATED_KEY, done[-2000:])
            self._turns.pop(session_id, None)
            self.counts["runs"] += 1
            return report

    async def _known_entities(self, project: str) -> list[Any]:
        assert self.entities is not None
        return await self.entities.entities(project) if self.entities.available else []

    async def _write_entities(
        self, proposed: list[ProposedEntity], project: str, report: CurationReport
    ) -> None:
        """The curator's entities through the entity book: names first (every entity
        exists before relations between them are added), then relations by name."""
        book = self.entities
        if book is None or not proposed:
            return
        if not book.available:
            report.entities["skipped"] += len(proposed)
            return
        ids: dict[str, str] = {}
        for item in proposed:
            result = await book.create(project=project, name=item.name, kind=item.kind, author=AUTHOR_CURATOR)
            report.entities[result.status] += 1
            if result.status == ENTITY_REFUSED or result.entity is None:
                report.refused.append((item.name, result.reason))
                continue
            entity = result.entity
            ids[item.name] = entity.ref
            if entity.project != project:
                # A global entity is changed by people only, never by one project's curator.
                report.entities["skipped"] += len(item.aliases)
                continue
            for alias in item.aliases:
                added = await book.add_alias(entity.ref, alias, author=AUTHOR_CURATOR)
                if added.changed:
                    report.entities["aliases"] += 1
                elif added.status == ENTITY_REFUSED:
                    report.entities["refused"] += 1
                    report.refused.append((f"{item.name}: {alias}", added.reason))
        for item in proposed:
            source = ids.get(item.name)
            if source is None:
                continue
            for relation in item.relations:
                result = await book.relate(
                    source, relation.predicate, relation.target, project=project, author=AUTHOR_CURATOR
                )
                if result.changed:
                    report.entities["relations"] += 1
                elif result.status == ENTITY_REFUSED:
                    report.entities["skipped"] += 1  # an unknown target, usually

    async def _apply(
        self,
        op: Operation,
        project: str,
        by_id: dict[str, KnowledgeVersion],
        seen: set[str],
        provenance: Provenance,
    ) -> WriteResult:
        if op.op == "create":
            assert op.category and op.title and op.content
            twin = await self._near_duplicate(op, by_id.values())
            if twin is not None and not await self._opposes(twin, op):
                await self.book.reinforce([twin.logical_id], RECONFIRM_REINFORCEMENT)
                return WriteResult("reconfirmed", twin)
            return await self.book.create(
                project=project,
                category=op.category,
                title=op.title,
                content=op.content,
                provenance=provenance,
                # A create with a known title edits that entry (the book's title rule): never
                # one the worker was not shown (sensitive or restricted ones).
                may_edit=lambda entry: entry.logical_id in seen,
            )
        assert op.logical_id is not None
        if op.op == "update":
            return await self.book.update(
                op.logical_id, provenance=provenance, title=op.title, content=op.content, category=op.category
            )
        if op.op == "delete":
            return await self.book.delete(op.logical_id, provenance=provenance)
        await self.book.reinforce([op.logical_id], RECONFIRM_REINFORCEMENT)
        return WriteResult("reconfirmed", by_id.get(op.logical_id))

    async def _opposes(self, twin: KnowledgeVersion, op: Operation) -> bool:
        """Whether the judge says a near-duplicate create says the opposite of its twin
        ("indent with tabs" / "indent with spaces" embed almost alike): then it is a new
        entry (and a contradiction to record), not a reconfirmation. Without a judge, or
        when it fails, the create reconfirms as before."""
        judge = self.contradictions.judge if self.contradictions is not None else None
        if judge is None or self.contradictions is None or not self.contradictions.shown([twin]):
            return False  # no judge, or the twin is not for a worker's eyes
        assert op.category and op.title and op.content
        proposed = KnowledgeVersion(
            "proposed.1", "proposed", 1, op.category, op.title, op.content, project=twin.project
        )
        try:
            return (await judge.judge(twin, proposed)).contradiction
        except (WorkerError, WorkerUnavailable) as exc:
            log.debug("no contradiction judgement for a near-duplicate (reconfirmed): %s", exc)
            return False

    async def _near_duplicate(
        self, op: Operation, entries: Iterable[KnowledgeVersion]
    ) -> KnowledgeVersion | None:
        same = [e for e in entries if e.category == op.category]
        if self.embedder is None or self._vectors is None or not same:
            return None
        try:
            (new,) = await self.embedder.embed([f"{op.title}\n{op.content}"])
            vectors = await self._vectors.of(same)
        except Exception as exc:
            log.debug("no embedding for knowledge dedup: %s", exc)
            return None
        best, best_score = None, 0.0
        for entry in same:
            score = cosine(new, vectors[entry.version_id])
            if score > best_score:
                best, best_score = entry, score
        return best if best_score >= DUPLICATE_SIMILARITY else None

    # -- .lore.md and decay --------------------------------------------------------------------

    async def start(self) -> None:
        if self.book.available:  # without the knowledge tier there is nothing to keep up
            self._task = asyncio.create_task(self._watch(), name="lore-knowledge")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        # What changed in the last seconds still reaches .lore.md.
        await self.sync_files(force=True)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            try:
                await self.sync_files()
                await self.decay_if_due()
                await self.judge_due()
            except Exception:
                log.exception("knowledge upkeep failed (tried again)")

    async def judge_due(self) -> None:
        """Scan the projects whose time has come for contradictions."""
        if not self.config.enabled or self.contradictions is None or self.contradictions.judge is None:
            return
        now = self._clock()
        for project, at in list(self._unjudged.items()):
            if at > now:
                continue
            try:
                report = await self.contradictions.scan(project)
            except WorkerUnavailable:
                self._unjudged[project] = now + CONTRADICTION_RETRY_SECONDS
                continue
            if report.stopped or report.candidates > report.judged:
                # A failed call, or more pairs than one scan judges: the rest later.
                self._unjudged[project] = now + (CONTRADICTION_RETRY_SECONDS if report.stopped else 1.0)
            elif self._unjudged.get(project) == at:
                del self._unjudged[project]
            self.counts["contradiction_scans"] += 1

    def lore_md(self, project: str) -> Path | None:
        root = Path(project)
        return root / lorefile.FILE_NAME if project and root.is_absolute() and root.is_dir() else None

    async def sync_files(self, force: bool = False) -> None:
        """Import the .lore.md files that changed on disk, then export the projects whose
        knowledge changed (after the debounce)."""
        if not (self.config.enabled and self.config.lore_md and self.book.available):
            return
        now = self._clock()
        for project in [p for p, at in self._seen.items() if now - at < WATCH_PROJECTS_SECONDS]:
            path = self.lore_md(project)
            if path is None:
                continue
            state = _file_state(path)
            # Imported when first seen (edited while no gateway ran, or a teammate's file
            # from a pull) and whenever it changed since we last wrote or read it.
            if state is not None and state != self._file_state.get(project):
                with contextlib.suppress(OSError, ValueError):
                    await self.import_file(project, path)
            self._file_state.setdefault(project, state)
        for project, at in list(self._dirty.items()):
            if force or now - at >= EXPORT_DEBOUNCE_SECONDS:
                del self._dirty[project]
                path = self.lore_md(project)
                # Kept in step where the repository has one; created only when configured.
                if path is not None and (self.config.create_lore_md or path.exists()):
                    await self.export_file(project, path)

    async def export_file(self, project: str, path: Path) -> lorefile.ExportReport:
        problem = lorefile.unsafe_to_write(path)
        if problem is not None:
            # Not an owned directory, or a symlinked file (review F16): skipped, said once.
            if self._unwritable.get(project) != problem:
                log.warning("knowledge: %s not written: %s", path, problem)
                self._unwritable[project] = problem
            return lorefile.ExportReport(path=path)
        self._unwritable.pop(project, None)
        report = await lorefile.export(self.book, project, path)
        self._file_state[project] = _file_state(path)
        if report.changed:
            log.info("knowledge: wrote %s (%d entries)", path, report.written)
        return report

    async def import_file(self, project: str, path: Path) -> lorefile.ImportReport:
        try:
            report = await lorefile.import_file(self.book, project, path)
        except (OSError, ValueError) as exc:
            log.warning("knowledge: could not import %s: %s", path, exc)
            self._file_state[project] = _file_state(path)
            raise
        self._file_state[project] = _file_state(path)
        if report.decisions:
            # Team decisions arrived (a teammate's file): what we share may differ from it now.
            self.export_due(project)
        for title, reason in report.refused:
            log.warning("knowledge: %s: %r not imported: %s", path, title, reason)
        for problem in report.problems:
            log.warning("knowledge: %s: %s", path, problem)
        log.info(
            "knowledge: imported %s: %d created, %d updated, %d refused",
            path,
            len(report.created),
            len(report.updated),
            len(report.refused),
        )
        return report

    async def decay_if_due(self) -> int:
        now = self._clock()
        last = await self.store.get_state(GATEWAY_STATE_ID, DECAY_KEY, None)
        if isinstance(last, int | float) and now - float(last) < DAY:
            return 0
        await self.store.set_state(GATEWAY_STATE_ID, DECAY_KEY, now)
        if last is None or self.config.decay_per_day <= 0:
            return 0  # the first pass only starts the clock
        days = min((now - float(last)) / DAY, 30.0)
        factor = (1.0 - self.config.decay_per_day) ** days
        changed = await self.book.knowledge_store.decay_knowledge(
            factor, now - self.config.decay_after_days * DAY
        )
        if changed:
            log.info("knowledge: confidence of %d entries decayed by %.3f", changed, 1 - factor)
        return changed


def _file_state(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)
