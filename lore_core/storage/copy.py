"""Copy a whole memory from one store into another through the :class:`~lore_core.interfaces.Store`
protocol of both (``lore store copy``): any pair of backends, never SQL against one engine.

What is copied, tier by tier (each read from the source and written with the destination's
ordinary, idempotent writes): projects, sessions and messages (every branch; the destination
cuts its own full-text passages as it stores them), per-session state (the context state,
spend, forget and amnesia marks, the gateway's own values under ``""``), distillations
(archived ones archived again), knowledge (every version of every entry, death certificates
included, then the metric register as it stands), contradictions, entities (merged ones
too), team bindings, team policies, approval decisions, and the event log (each run's
events, checkpoint and working snapshot). Vectors are not: the protocol has no read of
them, and the destination's indexer (a gateway's, or ``lore reindex``) embeds every item it
finds pending.

A copy is idempotent and so resumable: message ids are derived from content, distillation
and decision ids likewise, knowledge versions keep their ids, and the rest are upserts; a
second copy adds nothing, and a copy cut short goes on where it stopped when run again.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs

from lore_core.interfaces import (
    DistillationStore,
    EntityStore,
    EventLogStore,
    KnowledgeStore,
    Store,
    Tier,
    TierUnavailable,
    has_tier,
    tier_of,
)
from lore_core.storage.events import NewEvent
from lore_core.storage.knowledge import KnowledgeConflict
from lore_core.storage.records import Session, WriteBatch

#: Every session, whatever the store's paging default.
ALL = 1_000_000_000
#: Messages per write: one transaction each on the destination.
BATCH_MESSAGES = 5_000

#: The tiers counted on both sides, in the order they are copied.
TIERS = (
    "projects",
    "sessions",
    "messages",
    "session state",
    "distillations",
    "knowledge entries",
    "knowledge versions",
    "contradictions",
    "entities",
    "team bindings",
    "team policies",
    "decisions",
    "event runs",
    "events",
)

_T = TypeVar("_T", DistillationStore, KnowledgeStore, EntityStore, EventLogStore)

#: ``progress(tier, done, total)``: called as a tier goes (messages in batches).
Progress = Callable[[str, int, int], None]


@attrs.define
class TierCount:
    tier: str
    source: int
    destination: int
    #: What this copy added (messages, distillations, versions, decisions, events) or
    #: wrote (the upserted tiers); ``None`` for a tier that was not copied.
    written: int | None = None
    #: Why the tier was left out (a store without it), else ``""``.
    skipped: str = ""

    def matches(self, merged: bool) -> bool:
        """Equal counts after a copy into an empty store; into one that held data already
        (``merged``), at least the source's."""
        if self.skipped:
            return True
        return self.destination >= self.source if merged else self.destination == self.source


@attrs.define
class CopyReport:
    source: str
    destination: str
    merged: bool
    tiers: list[TierCount] = attrs.field(factory=list)
    failures: list[str] = attrs.field(factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures and all(t.matches(self.merged) for t in self.tiers)

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "destination": self.destination,
            "merged": self.merged,
            "ok": self.ok,
            "tiers": [attrs.asdict(t) | {"ok": t.matches(self.merged)} for t in self.tiers],
            "failures": list(self.failures),
            "vectors": "not copied: the destination's indexer embeds every item (a gateway, or lore reindex)",
            "seconds": round(self.seconds, 3),
        }


#: The optional tier each counted tier belongs to; the others are every store's.
TIER_OF: dict[str, Tier] = {
    "distillations": Tier.DISTILLATIONS,
    "knowledge entries": Tier.KNOWLEDGE,
    "knowledge versions": Tier.KNOWLEDGE,
    "contradictions": Tier.KNOWLEDGE,
    "team bindings": Tier.KNOWLEDGE,
    "team policies": Tier.KNOWLEDGE,
    "decisions": Tier.KNOWLEDGE,
    "entities": Tier.ENTITIES,
    "event runs": Tier.EVENTS,
    "events": Tier.EVENTS,
}


def missing_tiers(*stores: Store) -> dict[str, str]:
    """The counted tiers one of ``stores`` lacks, and why (the first store lacking it)."""
    missing: dict[str, str] = {}
    for name, tier in TIER_OF.items():
        for store in stores:
            if not has_tier(store, tier):
                missing[name] = str(TierUnavailable(store, tier))
                break
    return missing


async def count_tiers(store: Store) -> tuple[dict[str, int], dict[str, str]]:
    """Every tier's count read through the store's interfaces, and the tiers it lacks (why)."""
    counts: dict[str, int] = dict.fromkeys(TIERS, 0)
    counts["projects"] = len(await store.list_projects())
    sessions = await store.list_sessions(limit=ALL)
    counts["sessions"] = len(sessions)
    counts["messages"] = sum(s.message_count for s in sessions)
    inventory = await store.inventory()
    for session_id in inventory.state_sessions:
        counts["session state"] += len(await store.session_state(session_id))
    distillations = tier_of(store, DistillationStore)
    if distillations is not None:
        counts["distillations"] = len(await distillations.list_distillations(None))
    knowledge = tier_of(store, KnowledgeStore)
    if knowledge is not None:
        metrics = await knowledge.knowledge_metrics(None)
        counts["knowledge entries"] = len(metrics)
        for logical_id in metrics:
            counts["knowledge versions"] += len(await knowledge.knowledge_versions(logical_id))
        counts["contradictions"] = len(await knowledge.knowledge_contradictions(None))
        counts["team bindings"] = len(inventory.bound_projects)
        counts["team policies"] = len(inventory.policy_teams)
        counts["decisions"] = len(await knowledge.knowledge_decisions(None))
    entities = tier_of(store, EntityStore)
    if entities is not None:
        counts["entities"] = len(await entities.list_entities(None, include_merged=True))
    events = tier_of(store, EventLogStore)
    if events is not None:
        counts["event runs"] = len(inventory.runs)
        for project, run in inventory.runs:
            state = await events.run_state(project, run)
            counts["events"] += state.last_seq if state is not None else 0
    return counts, missing_tiers(store)


def holds_anything(counts: dict[str, int]) -> bool:
    return any(counts.values())


async def copy_store(
    source: Store,
    destination: Store,
    *,
    merged: bool = False,
    progress: Progress | None = None,
) -> CopyReport:
    """Copy everything ``source`` holds into ``destination`` (both open) and count both
    sides afterwards; a tier one of them lacks is left out (reported why). The caller decides
    whether a destination holding data may be copied into (``merged``: the count check then
    asks for at least the source's counts)."""
    started = time.monotonic()
    report = CopyReport(source=_where(source), destination=_where(destination), merged=merged)
    written: dict[str, int] = {}
    skipped = missing_tiers(source, destination)

    def step(tier: str, done: int, total: int) -> None:
        if progress is not None:
            progress(tier, done, total)

    def both(interface: type[_T]) -> tuple[_T, _T] | None:
        """The tier's interface on both sides, or ``None`` when either lacks it."""
        here, there = tier_of(source, interface), tier_of(destination, interface)
        return (here, there) if here is not None and there is not None else None

    # -- projects, sessions, messages ---------------------------------------------------------
    projects = await source.list_projects()
    sessions = await source.list_sessions(limit=ALL)
    total = sum(s.message_count for s in sessions)
    by_project = {p.id: p for p in projects}
    added = done = 0
    batch = WriteBatch(projects=list(projects))
    step("messages", 0, total)
    for session in sorted(sessions, key=lambda s: (s.created_at, s.id)):
        messages = await source.session_messages(session.id)
        batch.sessions.append(_bare(session))
        if session.project in by_project:
            batch.projects.append(by_project[session.project])
        for start in range(0, len(messages), BATCH_MESSAGES):
            batch.messages.extend(messages[start : start + BATCH_MESSAGES])
            if len(batch.messages) >= BATCH_MESSAGES:
                added += await destination.write(batch)
                done += len(batch.messages)
                step("messages", done, total)
                batch = WriteBatch(sessions=[_bare(session)])
    if batch:
        added += await destination.write(batch)
        done += len(batch.messages)
    step("messages", done, total)
    written["projects"] = len(projects)
    written["sessions"] = len(sessions)
    written["messages"] = added

    # -- session state ----------------------------------------------------------------------
    inventory = await source.inventory()
    values: list[tuple[str, str, Any]] = []
    for session_id in inventory.state_sessions:
        values.extend((session_id, k, v) for k, v in (await source.session_state(session_id)).items())
    if values:
        await destination.set_states(values)
    written["session state"] = len(values)
    step("session state", len(values), len(values))

    # -- distillations ------------------------------------------------------------------------
    pair_d = both(DistillationStore)
    if pair_d is not None:
        source_d, destination_d = pair_d
        distillations = await source_d.list_distillations(None)
        new = 0
        for i, d in enumerate(distillations, 1):
            new += bool(await destination_d.write_distillation(d))
            if i % 200 == 0:
                step("distillations", i, len(distillations))
        archived = [d.id for d in distillations if d.archived]
        if archived:
            await destination_d.archive_distillations(archived)
        written["distillations"] = new
        step("distillations", len(distillations), len(distillations))

    # -- knowledge, teams, decisions --------------------------------------------------------
    pair_k = both(KnowledgeStore)
    if pair_k is not None:
        source_k, destination_k = pair_k
        metrics = await source_k.knowledge_metrics(None)
        versions_new = 0
        for i, logical_id in enumerate(metrics, 1):
            have = {v.version_id for v in await destination_k.knowledge_versions(logical_id)}
            for version in await source_k.knowledge_versions(logical_id):
                if version.version_id in have:
                    continue
                try:
                    versions_new += bool(
                        await destination_k.write_knowledge(attrs.evolve(version, is_current=False))
                    )
                except KnowledgeConflict as exc:
                    report.failures.append(f"knowledge k:{logical_id} version {version.version}: {exc}")
                    break
            step("knowledge", i, len(metrics))
        written["knowledge versions"] = versions_new
        written["knowledge entries"] = await destination_k.set_knowledge_metrics(list(metrics.values()))
        contradictions = await source_k.knowledge_contradictions(None)
        for judgement in reversed(contradictions):  # oldest first: the latest judgement wins
            await destination_k.record_contradiction(judgement)
        written["contradictions"] = len(contradictions)
        for project in inventory.bound_projects:
            await destination_k.set_team_binding(project, await source_k.team_binding(project))
        written["team bindings"] = len(inventory.bound_projects)
        for team in inventory.policy_teams:
            policy = await source_k.team_policy(team)
            if policy is not None:
                await destination_k.set_team_policy(team, policy)
        written["team policies"] = len(inventory.policy_teams)
        decisions = await source_k.knowledge_decisions(None)
        written["decisions"] = await destination_k.record_decisions(decisions) if decisions else 0

    # -- entities -----------------------------------------------------------------------------
    pair_e = both(EntityStore)
    if pair_e is not None:
        entities = await pair_e[0].list_entities(None, include_merged=True)
        if entities:
            await pair_e[1].write_entities(entities)
        written["entities"] = len(entities)

    # -- the event log ----------------------------------------------------------------------
    pair_v = both(EventLogStore)
    if pair_v is not None:
        source_v, destination_v = pair_v
        events_new = 0
        for i, (project, run) in enumerate(inventory.runs, 1):
            state = await source_v.run_state(project, run)
            if state is None:
                continue
            there = await destination_v.run_state(project, run)
            after = there.last_seq if there is not None else 0
            pending = await source_v.run_events(project, run, after_seq=after)
            # One append per stretch of events of one time: append_events stamps its call's time.
            for at, group in itertools.groupby(pending, key=lambda e: e.created_at):
                events = [NewEvent(e.kind, e.content, e.working, e.key) for e in group]
                events_new += len(await destination_v.append_events(project, run, events, at))
            snapshot = await source_v.working_snapshot(project, run)
            await destination_v.advance_run(project, run, state.covered_seq, snapshot, state.updated_at)
            step("event runs", i, len(inventory.runs))
        written["event runs"] = len(inventory.runs)
        written["events"] = events_new

    # -- the count check ----------------------------------------------------------------------
    source_counts, _ = await count_tiers(source)
    destination_counts, _ = await count_tiers(destination)
    for tier in TIERS:
        why = skipped.get(tier, "")
        report.tiers.append(
            TierCount(
                tier,
                source_counts[tier],
                destination_counts[tier],
                None if why else written.get(tier),
                why,
            )
        )
    report.seconds = time.monotonic() - started
    return report


def _bare(session: Session) -> Session:
    """A session as a write takes it (the counts are the store's to derive)."""
    return attrs.evolve(session, message_count=0, branch_count=0)


def _where(store: Store) -> str:
    return f"{store.name} {store.location}" if store.location else store.name


def same_store(a: Store, b: Store) -> bool:
    """Two handles on one store (copying a store into itself is refused)."""
    return a.name == b.name and a.location is not None and a.location == b.location


def tier_lines(report: CopyReport) -> Sequence[str]:
    """The count check as a table for people."""
    lines = [f"{'tier':<20} {'source':>10} {'destination':>12} {'written':>9}"]
    for t in report.tiers:
        mark = "" if t.matches(report.merged) else "   MISMATCH"
        if t.skipped:
            lines.append(f"{t.tier:<20} {'-':>10} {'-':>12} {'-':>9}   not copied: {t.skipped}")
            continue
        shown = "" if t.written is None else str(t.written)
        lines.append(f"{t.tier:<20} {t.source:>10} {t.destination:>12} {shown:>9}{mark}")
    return lines
