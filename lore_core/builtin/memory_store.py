"""The kernel's reference store: everything in memory, nothing survives a restart.

It is the executable reading of the :class:`~lore_core.interfaces.Store` contract (it passes
the same conformance suite as real backends) and the fallback when no persistent backend is
installed. Search is a plain BM25 over the passages (:mod:`lore_core.storage.passages`) of lower-cased
word tokens, and vector search a brute-force cosine over every passage vector; fine for
thousands of messages, not for millions.
"""

from __future__ import annotations

import asyncio
import copy
import math
import operator
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from lore_core.config import LoreConfig
from lore_core.hookspecs import hookimpl
from lore_core.interfaces import (
    DistillationStore,
    EntityStore,
    EventLogStore,
    KnowledgeStore,
    Store,
    StoreFactory,
    Tier,
    VectorStore,
)
from lore_core.storage.entities import Entity, entity_order
from lore_core.storage.events import NewEvent, RunEvent, RunState, WorkingSnapshot
from lore_core.storage.forget import ForgetReport
from lore_core.storage.identity import count_branches
from lore_core.storage.knowledge import (
    DEFAULT_CONFIDENCE,
    INITIAL_CONFIDENCE,
    KnowledgeConflict,
    KnowledgeContradiction,
    KnowledgeDecision,
    KnowledgeMetric,
    KnowledgeVersion,
    TeamBinding,
    canonical_order,
    normalize_title,
)
from lore_core.storage.passages import Passage, cut_text, message_passages, passage_key
from lore_core.storage.records import (
    DISTILLATION_PREFIX,
    DISTILLATION_ROLE,
    VECTOR_DISTILLATION,
    VECTOR_MESSAGE,
    EmbeddingItem,
    ItemVectors,
    PassageRef,
    Project,
    ProjectSummary,
    SearchHit,
    Session,
    StoredDistillation,
    StoredMessage,
    StoreInventory,
    VectorDimensionError,
    WriteBatch,
    merge_project,
    merge_session,
)

# Runs of letters and digits (an underscore splits, as in the DuckDB store's index).
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
# A handful of English stop words, so that queries behave like the real backends' analysers.
_STOP = frozenset("a an and are as at be by for from in is it of on or that the this to was with".split())
_K1, _B = 1.2, 0.75


def tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


class MemoryStore(Store, DistillationStore, VectorStore, KnowledgeStore, EntityStore, EventLogStore):
    name = "memory"
    #: Every optional tier (lore_core.interfaces.Tier).
    tiers = frozenset(Tier)
    schema_version = 1
    #: Nothing survives a restart, so there is nothing to journal.
    journal_dir: Path | None = None

    def __init__(self, config: LoreConfig | None = None) -> None:
        self._projects: dict[str, Project] = {}
        self._sessions: dict[str, Session] = {}
        self._messages: dict[str, StoredMessage] = {}
        self._by_session: dict[str, list[str]] = {}
        self._state: dict[tuple[str, str], Any] = {}
        self._distillations: dict[str, StoredDistillation] = {}
        # BM25 over passages: passage key -> term counts, length; document frequencies.
        self._terms: dict[str, Counter[str]] = {}
        self._lengths: dict[str, int] = {}
        self._df: Counter[str] = Counter()
        # Passage key -> (item id as search shows it, the passage).
        self._passages: dict[str, tuple[str, Passage]] = {}
        # Every message and distillation in arrival order: (kind, id); the index is the
        # item's embedding cursor (1-based). A forgotten item leaves None (cursors stay).
        self._arrivals: list[tuple[str, str] | None] = []
        # model -> {"dimensions": int, "done": highest embedded cursor,
        #           "rows": [(kind, item id, chunk, vector)]}
        self._vectors: dict[str, dict[str, Any]] = {}
        # Knowledge: logical_id -> its versions, oldest first; the metric register.
        self._knowledge: dict[str, list[KnowledgeVersion]] = {}
        self._contradictions: dict[tuple[str, str], KnowledgeContradiction] = {}
        self._metrics: dict[str, KnowledgeMetric] = {}
        # Entities: id -> the row (merged ones included).
        self._entities: dict[str, Entity] = {}
        # Teams: project -> binding, team -> policy, decision_id -> decision.
        self._bindings: dict[str, TeamBinding] = {}
        self._team_policies: dict[str, str] = {}
        self._decisions: dict[str, KnowledgeDecision] = {}
        # The event log: (project, run) -> its events (seq i at index i - 1), state, snapshot.
        self._events: dict[tuple[str, str], list[RunEvent]] = {}
        self._runs: dict[tuple[str, str], RunState] = {}
        self._snapshots: dict[tuple[str, str], WorkingSnapshot] = {}
        # Leases: key -> (holder, expires at).
        self._leases: dict[str, tuple[str, float]] = {}
        self._open = False

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    def health(self) -> dict[str, Any]:
        return {"ok": self._open, "detail": "in memory: nothing survives a restart", "persistent": False}

    # -- writes ----------------------------------------------------------------------------

    async def write(self, batch: WriteBatch) -> int:
        batch = batch.merged()
        for p in batch.projects:
            old = self._projects.get(p.id)
            self._projects[p.id] = p if old is None else merge_project(old, p)
        for s in batch.sessions:
            old_s = self._sessions.get(s.id)
            self._sessions[s.id] = attrs.evolve(s) if old_s is None else merge_session(old_s, s)
        added = 0
        for m in batch.messages:
            if m.id in self._messages:
                continue
            self._messages[m.id] = copy.deepcopy(m)
            self._by_session.setdefault(m.session_id, []).append(m.id)
            self._index(m.id, message_passages(m.role, m.blocks, m.text))
            self._arrivals.append((VECTOR_MESSAGE, m.id))
            added += 1
        await asyncio.sleep(0)
        return added

    def _index(self, item_id: str, passages: Sequence[Passage]) -> None:
        for p in passages:
            key = passage_key(item_id, p.index)
            terms = Counter(tokens(p.text))
            self._passages[key] = (item_id, p)
            self._terms[key] = terms
            self._lengths[key] = sum(terms.values())
            self._df.update(terms.keys())

    def _unindex(self, item_ids: set[str]) -> int:
        """Drop every passage of these items (ids as search shows them); returns how many."""
        keys = [key for key, (item_id, _) in self._passages.items() if item_id in item_ids]
        for key in keys:
            del self._passages[key]
            self._lengths.pop(key, None)
            self._df.subtract(self._terms.pop(key, Counter()).keys())
        self._df = +self._df  # terms no passage has any more are gone, not at zero
        return len(keys)

    # -- forgetting ------------------------------------------------------------------------

    async def forget_session(self, session_id: str, keep_state: Sequence[str] = ()) -> ForgetReport:
        started = time.monotonic()
        message_ids = set(self._by_session.pop(session_id, []))
        distillation_ids = {d.id for d in self._distillations.values() if d.session_id == session_id}
        found = session_id in self._sessions or bool(message_ids or distillation_ids)
        for ident in message_ids:
            del self._messages[ident]
        for ident in distillation_ids:
            del self._distillations[ident]
        self._sessions.pop(session_id, None)
        passages = self._unindex(message_ids | {DISTILLATION_PREFIX + i for i in distillation_ids})
        gone = {(VECTOR_MESSAGE, i) for i in message_ids} | {
            (VECTOR_DISTILLATION, i) for i in distillation_ids
        }
        # Cursors stay where they are: the vectors of everything else are still written.
        self._arrivals = [None if a in gone else a for a in self._arrivals]
        vectors = 0
        for index in self._vectors.values():
            kept = [row for row in index["rows"] if (row[0], row[1]) not in gone]
            vectors += len(index["rows"]) - len(kept)
            index["rows"] = kept
        keys = sorted(k for (s, k) in self._state if s == session_id and k not in keep_state)
        for key in keys:
            del self._state[(session_id, key)]
        await asyncio.sleep(0)
        seconds = time.monotonic() - started
        return ForgetReport(
            session_id,
            found,
            messages=len(message_ids),
            distillations=len(distillation_ids),
            passages=passages,
            vectors=vectors,
            state_keys=tuple(keys),
            seconds=seconds,
            steps={"rows": seconds},
        )

    async def write_distillation(self, distillation: StoredDistillation, archive: Sequence[str] = ()) -> bool:
        new = distillation.id not in self._distillations
        if new:
            self._distillations[distillation.id] = copy.deepcopy(distillation)
            # Messages and distillations share one BM25 corpus, as in the real backends.
            self._index(distillation.ref, cut_text(distillation.text))
            self._arrivals.append((VECTOR_DISTILLATION, distillation.id))
        await self.archive_distillations(archive)
        return new

    async def list_distillations(
        self, session_id: str | None = None, include_archived: bool = True
    ) -> list[StoredDistillation]:
        rows = [
            copy.deepcopy(d)
            for d in self._distillations.values()
            if (session_id is None or d.session_id == session_id) and (include_archived or not d.archived)
        ]
        return sorted(rows, key=lambda d: (d.created_at, d.generation, d.id))

    async def get_distillation(self, distillation_id: str) -> StoredDistillation | None:
        found = self._distillations.get(distillation_id.removeprefix(DISTILLATION_PREFIX))
        return copy.deepcopy(found) if found else None

    async def archive_distillations(self, ids: Sequence[str]) -> int:
        changed = 0
        for i in ids:
            d = self._distillations.get(i.removeprefix(DISTILLATION_PREFIX))
            if d is not None and not d.archived:
                d.archived = True
                changed += 1
        return changed

    async def distilled_message_ids(self, session_id: str) -> set[str]:
        return {
            i
            for d in self._distillations.values()
            if d.session_id == session_id and d.generation == 0
            for i in d.source_ids
        }

    async def set_state(self, session_id: str, key: str, value: Any) -> None:
        self._state[(session_id, key)] = copy.deepcopy(value)

    # -- reads -----------------------------------------------------------------------------

    async def get_state(self, session_id: str, key: str, default: Any = None) -> Any:
        return copy.deepcopy(self._state.get((session_id, key), default))

    async def session_state(self, session_id: str) -> dict[str, Any]:
        return {k: copy.deepcopy(v) for (s, k), v in self._state.items() if s == session_id}

    def _filled(self, session: Session) -> Session:
        msgs = [self._messages[i] for i in self._by_session.get(session.id, [])]
        return attrs.evolve(session, message_count=len(msgs), branch_count=count_branches(msgs))

    async def get_session(self, session_id: str) -> Session | None:
        s = self._sessions.get(session_id)
        return self._filled(s) if s else None

    async def list_sessions(
        self,
        project: str | None = None,
        limit: int = 50,
        *,
        before: tuple[float, str] | None = None,
        since: float | None = None,
        harness: str | None = None,
        model: str | None = None,
        text: str | None = None,
    ) -> list[Session]:
        needle = text.lower() if text else ""

        def wanted(s: Session) -> bool:
            return (
                (project is None or s.project == project)
                and (before is None or (s.updated_at, s.id) < (float(before[0]), str(before[1])))
                and (since is None or s.updated_at >= since)
                and (not harness or s.harness == harness)
                and (not model or s.model == model)
                and (
                    not needle
                    or any(needle in (v or "").lower() for v in (s.title, s.id, s.model, s.project))
                )
            )

        rows = [s for s in self._sessions.values() if wanted(s)]
        rows.sort(key=lambda s: (s.updated_at, s.id), reverse=True)
        return [self._filled(s) for s in rows[: max(0, limit)]]

    async def list_projects(self) -> list[Project]:
        return sorted((attrs.evolve(p) for p in self._projects.values()), key=lambda p: p.id)

    async def project_summaries(self, spend_key: str) -> list[ProjectSummary]:
        found: dict[str, ProjectSummary] = {}

        def summary(project: str) -> ProjectSummary:
            return found.setdefault(project, ProjectSummary(project))

        for p in self._projects.values():
            summary(p.id)
        last: dict[str, float] = {}
        for s in self._sessions.values():
            row = summary(s.project)
            row.sessions += 1
            row.messages += len(self._by_session.get(s.id, []))
            last[s.project] = max(last.get(s.project, s.updated_at), s.updated_at)
            spent = self._state.get((s.id, spend_key))
            if isinstance(spent, int | float) and not isinstance(spent, bool):
                row.spend_usd += float(spent)
        for v in self._current():
            if not v.is_deleted and v.scope == "project" and v.project:
                summary(v.project).knowledge += 1
        for project, row in found.items():
            seen = self._projects.get(project)
            row.last_activity = last.get(project, seen.last_seen_at if seen else 0.0)
        return sorted(found.values(), key=lambda r: (-r.last_activity, r.project))

    async def session_messages(self, session_id: str) -> list[StoredMessage]:
        msgs = [copy.deepcopy(self._messages[i]) for i in self._by_session.get(session_id, [])]
        return sorted(msgs, key=lambda m: (m.position, m.created_at, m.id))

    async def get_messages(self, ids: Sequence[str]) -> list[StoredMessage]:
        return [copy.deepcopy(self._messages[i]) for i in ids if i in self._messages]

    async def search(
        self,
        query: str,
        session_id: str | None = None,
        project: str | None = None,
        limit: int = 10,
    ) -> list[SearchHit]:
        terms = set(tokens(query))
        if not terms or limit <= 0:
            return []
        n = len(self._terms)
        avg = (sum(self._lengths.values()) / n) if n else 1.0
        hits: list[SearchHit] = []
        for key, tf in self._terms.items():
            if not terms & tf.keys():
                continue
            item_id, passage = self._passages[key]
            owner = self._item(item_id)
            assert owner is not None
            if session_id is not None and owner.session_id != session_id:
                continue
            if project is not None and owner.project != project:
                continue
            score = 0.0
            for t in terms:
                f = tf.get(t, 0)
                if not f:
                    continue
                idf = math.log(1 + (n - self._df[t] + 0.5) / (self._df[t] + 0.5))
                score += idf * f * (_K1 + 1) / (f + _K1 * (1 - _B + _B * self._lengths[key] / avg))
            hits.append(self._hit(item_id, passage, score))
        hits.sort(key=lambda h: (-h.score, h.id, h.passage or 0))
        return hits[:limit]

    async def sync_search_index(self, progress: Callable[[int, int], None] | None = None) -> int:
        # Passages are indexed as items are written: nothing is ever behind.
        if progress is not None:
            progress(0, 0)
        return 0

    def _item(self, item_id: str) -> StoredMessage | StoredDistillation | None:
        if item_id.startswith(DISTILLATION_PREFIX):
            return self._distillations.get(item_id[len(DISTILLATION_PREFIX) :])
        return self._messages.get(item_id)

    def _hit(self, item_id: str, passage: Passage, score: float) -> SearchHit:
        owner = self._item(item_id)
        assert owner is not None
        if isinstance(owner, StoredDistillation):
            role, position = DISTILLATION_ROLE, 0
        else:
            role, position = owner.role, owner.position
        return SearchHit(
            item_id, owner.session_id, owner.project, role, score, passage.text, position, owner.created_at,
            passage=passage.index, start=passage.start, end=passage.end, tool=passage.tool,
            source=passage.source,
        )  # fmt: skip

    # -- vectors ---------------------------------------------------------------------------

    def _owner(self, kind: str, ident: str) -> StoredMessage | StoredDistillation | None:
        return self._messages.get(ident) if kind == VECTOR_MESSAGE else self._distillations.get(ident)

    async def pending_embeddings(self, model: str, limit: int = 256) -> list[EmbeddingItem]:
        done = self._vectors.get(model, {}).get("done", 0)
        out: list[EmbeddingItem] = []
        for cursor in range(done + 1, len(self._arrivals) + 1):
            if len(out) >= limit:
                break
            arrival = self._arrivals[cursor - 1]
            if arrival is None:
                continue  # forgotten
            kind, ident = arrival
            owner = self._owner(kind, ident)
            assert owner is not None
            item = EmbeddingItem(
                kind, ident, owner.text, owner.session_id, owner.project, owner.created_at, cursor
            )
            if isinstance(owner, StoredMessage):
                item.role, item.blocks = owner.role, copy.deepcopy(owner.blocks)
            out.append(item)
        return out

    async def write_vectors(self, model: str, dimensions: int, items: Sequence[ItemVectors]) -> int:
        index = self._vectors.setdefault(model, {"dimensions": dimensions, "done": 0, "rows": []})
        if index["dimensions"] != dimensions:
            raise VectorDimensionError(
                f"the {model!r} index holds {index['dimensions']}-dimensional vectors, not {dimensions}"
            )
        rows: list[tuple[str, str, int, list[float]]] = []
        for iv in items:
            if self._owner(iv.item.kind, iv.item.id) is None:
                continue  # forgotten since it was read as pending
            for chunk, vector in zip(iv.passage_indexes(), iv.vectors, strict=True):
                if len(vector) != dimensions:
                    raise VectorDimensionError(f"a vector of {len(vector)} dimensions, expected {dimensions}")
                rows.append((iv.item.kind, iv.item.id, chunk, [float(x) for x in vector]))
        known = {(k, i) for k, i, _, _ in index["rows"]}
        index["rows"].extend(r for r in rows if (r[0], r[1]) not in known)  # a re-write is no duplicate
        if items:
            index["done"] = max(index["done"], max(iv.item.cursor for iv in items))
        await asyncio.sleep(0)
        return len(rows)

    async def nearest_passages(
        self,
        model: str,
        vector: Sequence[float],
        kinds: Sequence[str] | None = None,
        session_id: str | None = None,
        project: str | None = None,
        limit: int = 10,
    ) -> list[PassageRef]:
        index = self._vectors.get(model)
        if index is None or limit <= 0:
            return []
        if len(vector) != index["dimensions"]:
            raise VectorDimensionError(
                f"a query vector of {len(vector)} dimensions for a {index['dimensions']}-dimensional index"
            )
        query = [float(x) for x in vector]
        scored: list[tuple[float, str, int]] = []
        for kind, ident, chunk, row in index["rows"]:
            if kinds is not None and kind not in kinds:
                continue
            owner = self._owner(kind, ident)
            if owner is None:
                continue
            if session_id is not None and owner.session_id != session_id:
                continue
            if project is not None and owner.project != project:
                continue
            scored.append((sum(map(operator.mul, row, query)), ident, chunk))
        scored.sort(key=lambda x: (-x[0], x[1], x[2]))
        # A passage with facets has several vectors: it counts once, at its best (the first).
        best: dict[tuple[str, int], tuple[float, str, int]] = {}
        for entry in scored:
            best.setdefault((entry[1], entry[2]), entry)
        return [PassageRef(ident, chunk, score) for score, ident, chunk in list(best.values())[:limit]]

    async def read_passages(self, refs: Sequence[PassageRef]) -> list[SearchHit]:
        hits: list[SearchHit] = []
        for ref in refs:
            # A message's passages are keyed by its id, a distillation's by ``d:<id>``.
            for item_id in (ref.item, DISTILLATION_PREFIX + ref.item):
                found = self._passages.get(passage_key(item_id, ref.passage))
                if found is not None:
                    hits.append(self._hit(item_id, found[1], ref.score))
                    break
        return hits

    async def vector_stats(self, model: str | None = None) -> dict[str, Any]:
        models = [model] if model is not None else sorted(self._vectors)
        out: dict[str, Any] = {}
        for name in models:
            index = self._vectors.get(name, {"dimensions": None, "done": 0, "rows": []})
            out[name] = {
                "dimensions": index["dimensions"],
                "vectors": len(index["rows"]),
                "items": len({(k, i) for k, i, _, _ in index["rows"]}),
                "pending": sum(1 for a in self._arrivals[index["done"] :] if a is not None),
            }
        return out

    async def reset_vectors(self, model: str) -> None:
        self._vectors.pop(model, None)

    # -- knowledge -------------------------------------------------------------------------

    async def write_knowledge(self, version: KnowledgeVersion) -> bool:
        versions = self._knowledge.get(version.logical_id, [])
        if any(v.version_id == version.version_id for v in versions):
            return False
        expected = versions[-1].version + 1 if versions else 1
        if version.version != expected:
            raise KnowledgeConflict(
                f"k:{version.logical_id}: version {version.version} does not follow {expected - 1}"
            )
        self._knowledge.setdefault(version.logical_id, []).append(copy.deepcopy(version))
        if version.version == 1 and version.logical_id not in self._metrics:
            confidence = INITIAL_CONFIDENCE.get(version.created_by, DEFAULT_CONFIDENCE)
            self._metrics[version.logical_id] = KnowledgeMetric(
                version.logical_id, confidence, version.created_at
            )
        return True

    def _versions_read(self, logical_id: str) -> list[KnowledgeVersion]:
        versions = self._knowledge.get(logical_id, [])
        return [attrs.evolve(v, is_current=i == len(versions) - 1) for i, v in enumerate(versions)]

    async def knowledge_versions(self, logical_id: str) -> list[KnowledgeVersion]:
        return self._versions_read(logical_id)

    def _current(self) -> list[KnowledgeVersion]:
        return [attrs.evolve(versions[-1], is_current=True) for versions in self._knowledge.values()]

    async def deleted_knowledge(
        self, project: str | None = None, *, include_global: bool = True
    ) -> list[KnowledgeVersion]:
        found = [
            copy.deepcopy(v)
            for v in self._current()
            if v.is_deleted
            and (
                project is None
                or (v.scope == "project" and v.project == project)
                or (include_global and v.scope == "global")
            )
        ]
        found.sort(key=lambda v: v.logical_id)
        found.sort(key=lambda v: v.created_at, reverse=True)
        return found

    async def current_knowledge(
        self, project: str | None = None, *, include_global: bool = True
    ) -> list[KnowledgeVersion]:
        found = [
            v
            for v in self._current()
            if not v.is_deleted
            and (
                project is None
                or (v.scope == "project" and v.project == project)
                or (include_global and v.scope == "global")
            )
        ]
        return sorted(found, key=canonical_order)

    async def knowledge_tombstone(
        self, project: str, *, logical_id: str | None = None, title: str | None = None
    ) -> KnowledgeVersion | None:
        # The base table: every entry's current version, deleted ones included.
        current = self._current()
        if logical_id is not None:
            for v in current:
                if v.logical_id == logical_id:
                    return v if v.is_deleted else None
        if title is not None:
            wanted = normalize_title(title)
            for v in sorted(current, key=lambda v: v.created_at):
                if (
                    v.is_deleted
                    and normalize_title(v.title) == wanted
                    and (v.scope == "global" or v.project == project)
                ):
                    return v
        return None

    async def knowledge_metrics(self, logical_ids: Sequence[str] | None = None) -> dict[str, KnowledgeMetric]:
        ids = self._metrics.keys() if logical_ids is None else logical_ids
        return {i: attrs.evolve(self._metrics[i]) for i in ids if i in self._metrics}

    async def reinforce_knowledge(self, logical_ids: Sequence[str], amount: float, at: float) -> int:
        for i in set(logical_ids):
            metric = self._metrics.get(i) or KnowledgeMetric(i, DEFAULT_CONFIDENCE)
            self._metrics[i] = KnowledgeMetric(i, min(1.0, metric.confidence + amount), at)
        return len(set(logical_ids))

    async def decay_knowledge(self, factor: float, not_reinforced_since: float) -> int:
        changed = 0
        for i, metric in self._metrics.items():
            if metric.last_reinforced_at is None or metric.last_reinforced_at < not_reinforced_since:
                self._metrics[i] = attrs.evolve(metric, confidence=metric.confidence * factor)
                changed += 1
        return changed

    async def record_contradiction(self, judgement: KnowledgeContradiction) -> None:
        self._contradictions.pop(judgement.ids, None)  # newest last
        self._contradictions[judgement.ids] = copy.deepcopy(judgement)

    async def knowledge_contradictions(
        self, project: str | None = None, *, statuses: Sequence[str] | None = None
    ) -> list[KnowledgeContradiction]:
        found = [
            copy.deepcopy(c)
            for c in self._contradictions.values()
            if (project is None or c.project == project) and (statuses is None or c.status in statuses)
        ]
        return sorted(found, key=lambda c: -c.judged_at)

    # -- entities --------------------------------------------------------------------------

    async def write_entities(self, entities: Sequence[Entity]) -> None:
        for entity in entities:
            self._entities[entity.id] = copy.deepcopy(entity)

    async def delete_entities(self, entity_ids: Sequence[str], updated: Sequence[Entity] = ()) -> int:
        removed = sum(1 for i in set(entity_ids) if self._entities.pop(i, None) is not None)
        await self.write_entities(updated)
        return removed

    async def get_entity(self, entity_id: str) -> Entity | None:
        found = self._entities.get(entity_id)
        return copy.deepcopy(found) if found is not None else None

    async def list_entities(
        self, project: str | None = None, *, include_global: bool = True, include_merged: bool = False
    ) -> list[Entity]:
        found = [
            copy.deepcopy(e)
            for e in self._entities.values()
            if (include_merged or e.merged_into is None)
            and (project is None or e.project == project or (include_global and e.project == ""))
        ]
        return sorted(found, key=entity_order)

    async def team_binding(self, project: str) -> TeamBinding | None:
        found = self._bindings.get(project)
        return attrs.evolve(found) if found is not None else None

    async def set_team_binding(self, project: str, binding: TeamBinding | None) -> None:
        if binding is None:
            self._bindings.pop(project, None)
        else:
            self._bindings[project] = attrs.evolve(binding, project=project)

    async def team_policy(self, team: str) -> str | None:
        return self._team_policies.get(team)

    async def set_team_policy(self, team: str, policy: str) -> None:
        self._team_policies[team] = policy

    async def record_decisions(self, decisions: Sequence[KnowledgeDecision]) -> int:
        new = 0
        for decision in decisions:
            if decision.decision_id not in self._decisions:
                self._decisions[decision.decision_id] = decision
                new += 1
        return new

    async def knowledge_decisions(
        self, project: str | None = None, *, logical_ids: Sequence[str] | None = None
    ) -> list[KnowledgeDecision]:
        wanted = set(logical_ids) if logical_ids is not None else None
        found = [
            d
            for d in self._decisions.values()
            if (project is None or d.project == project) and (wanted is None or d.logical_id in wanted)
        ]
        return sorted(found, key=lambda d: (d.logical_id, d.decided_at, d.decision_id))

    async def append_events(self, project: str, run: str, events: Sequence[NewEvent], at: float) -> list[int]:
        key = (project, run)
        log = self._events.setdefault(key, [])
        state = self._runs.get(key) or RunState(project, run, 0, 0, at, at)
        seqs = list(range(state.last_seq + 1, state.last_seq + 1 + len(events)))
        for seq, event in zip(seqs, events, strict=True):
            log.append(RunEvent(project, run, seq, event.kind, event.content, event.working, event.key, at))
        self._runs[key] = attrs.evolve(state, last_seq=state.last_seq + len(events), updated_at=at)
        return seqs

    async def run_events(
        self,
        project: str,
        run: str,
        *,
        after_seq: int = 0,
        upto_seq: int | None = None,
        limit: int | None = None,
        newest: bool = False,
    ) -> list[RunEvent]:
        log = self._events.get((project, run), [])
        found = [e for e in log[max(0, after_seq) :] if upto_seq is None or e.seq <= upto_seq]
        if limit is not None:
            found = found[-limit:] if newest and limit > 0 else found[: max(0, limit)]
        return found

    async def run_state(self, project: str, run: str) -> RunState | None:
        return self._runs.get((project, run))

    async def advance_run(
        self, project: str, run: str, covered_seq: int, snapshot: WorkingSnapshot | None, at: float
    ) -> None:
        key = (project, run)
        state = self._runs.get(key)
        if state is None or covered_seq <= state.covered_seq:
            return
        self._runs[key] = attrs.evolve(state, covered_seq=min(covered_seq, state.last_seq), updated_at=at)
        if snapshot is not None:
            self._snapshots[key] = snapshot

    async def working_snapshot(self, project: str, run: str) -> WorkingSnapshot | None:
        return self._snapshots.get((project, run))

    async def list_runs(self, project: str | None = None, limit: int = 100) -> list[RunState]:
        runs = [s for s in self._runs.values() if project is None or s.project == project]
        runs.sort(key=lambda s: (s.project, s.run))
        runs.sort(key=lambda s: s.updated_at, reverse=True)
        return runs[: max(0, limit)]

    async def runs_behind(self, limit: int = 1_000) -> list[RunState]:
        behind = [s for s in self._runs.values() if s.last_seq > s.covered_seq]
        return sorted(behind, key=lambda s: (s.updated_at, s.project, s.run))[:limit]

    async def claim_lease(self, key: str, holder: str, seconds: float) -> bool:
        now = time.time()
        current = self._leases.get(key)
        if current is not None and current[0] != holder and current[1] > now:
            return False
        self._leases[key] = (holder, now + seconds)
        return True

    async def release_lease(self, key: str, holder: str) -> None:
        if self._leases.get(key, ("", 0.0))[0] == holder:
            del self._leases[key]

    async def inventory(self) -> StoreInventory:
        return StoreInventory(
            state_sessions=tuple(sorted({s for s, _ in self._state})),
            runs=tuple(sorted(self._runs)),
            bound_projects=tuple(sorted(self._bindings)),
            policy_teams=tuple(sorted(self._team_policies)),
        )

    async def set_knowledge_metrics(self, metrics: Sequence[KnowledgeMetric]) -> int:
        for metric in metrics:
            self._metrics[metric.logical_id] = attrs.evolve(metric)
        return len(metrics)

    async def stats(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "path": None,
            "size_bytes": 0,
            "schema_version": self.schema_version,
            "projects": len(self._projects),
            "sessions": len(self._sessions),
            "messages": len(self._messages),
            "distillations": len(self._distillations),
            "knowledge": sum(1 for v in self._current() if not v.is_deleted),
            "entities": sum(1 for e in self._entities.values() if e.merged_into is None),
            "vectors": await self.vector_stats(),
        }


@hookimpl
def lore_register_stores(register: Callable[[StoreFactory], None]) -> None:
    # The class is its own factory: named "memory", built from the configuration.
    register(MemoryStore)
