"""A store with something in every tier, and a comparable picture of every tier, read
through the :class:`~lore_core.interfaces.Store` protocol: what the tests of ``lore store
copy`` (:mod:`lore_core.storage.copy`) fill a source with and compare both sides by."""

from __future__ import annotations

from typing import Any

import attrs

from lore_core.interfaces import (
    DistillationStore,
    EntityStore,
    EventLogStore,
    KnowledgeStore,
    Store,
    require_tier,
    tier_of,
)
from lore_core.storage.copy import ALL
from lore_core.storage.entities import Entity
from lore_core.storage.events import NewEvent, WorkingFact, WorkingSnapshot
from lore_core.storage.knowledge import (
    AUTHOR_CURATOR,
    AUTHOR_USER,
    KnowledgeContradiction,
    KnowledgeVersion,
    TeamBinding,
    make_decision,
    new_version_id,
    next_version,
)
from lore_core.storage.records import StoredDistillation, distillation_id
from lore_core.testing.builders import answer, batch_of, exchange, text, tool_call, tool_result


def _entry(
    logical_id: str, title: str, project: str, at: float, author: str = AUTHOR_USER
) -> KnowledgeVersion:
    return KnowledgeVersion(
        version_id=new_version_id(logical_id, 1),
        logical_id=logical_id,
        version=1,
        category="gotcha",
        title=title,
        content=f"about {title}",
        project=project,
        created_at=at,
        created_by=author,
        updated_by=author,
    )


async def fill_every_tier(store: Store, sessions: int = 3, turns: int = 4) -> None:
    """Write something of every tier into ``store`` (open): ``sessions`` sessions of
    ``turns`` exchanges in two projects (a fork and a tool call among them), session state
    and spend, distillations (one archived by a meta-distillation), knowledge (an edited
    entry, a deleted one, reinforced metrics), a contradiction, entities (a merged one),
    team bindings, a policy, decisions, and two runs of the event log with a checkpoint.
    The store must have every tier."""
    distillations = require_tier(store, DistillationStore)
    knowledge = require_tier(store, KnowledgeStore)
    entities = require_tier(store, EntityStore)
    events = require_tier(store, EventLogStore)
    base = 1_700_000_000.0
    for s in range(sessions):
        session = f"copy-s{s}"
        project = "/work/alpha" if s % 2 == 0 else "/work/beta"
        history = [text("user", f"session {s}: how do we deploy the billing service")]
        for t in range(turns):
            at = base + s * 1000 + t * 10
            reply = f"turn {t} of session {s}: run make deploy after the migration"
            await store.write(batch_of(exchange(list(history), answer(reply), session, project, at=at)))
            history += [text("assistant", reply), text("user", f"and then step {t + 1}?")]
        # A tool call, and a fork: the last question edited.
        tools = [
            *history[:-1],
            tool_call("Bash", f"call-{s}", {"command": "make deploy"}, say="Deploying"),
            tool_result(f"call-{s}", "deployed in 41 s"),
        ]
        await store.write(
            batch_of(exchange(tools, answer("done"), session, project, at=base + s * 1000 + 500))
        )
        forked = [*history[:-1], text("user", "actually, roll it back")]
        await store.write(
            batch_of(exchange(forked, answer("rolled back"), session, project, at=base + s * 1000 + 600))
        )
    await store.set_states(
        [
            ("copy-s0", "forceMinLayer", 2),
            ("copy-s0", "spendUsd", {"total": 0.25, "calls": 3}),
            ("", "spendDay", {"day": "2026-12-07", "usd": 1.5}),
            ("lore:history-import", "done:/tmp/x.jsonl", {"size": 10, "mtime": 5.0}),
        ]
    )
    # Distillations: two observation logs of copy-s0, then a meta-distillation archiving them.
    messages = await store.session_messages("copy-s0")
    halves = [[m.id for m in messages[:4]], [m.id for m in messages[4:8]]]
    firsts = []
    for i, ids in enumerate(halves):
        d = StoredDistillation(
            id=distillation_id("copy-s0", 0, ids),
            session_id="copy-s0",
            generation=0,
            text=f"observation {i}: the billing deploy needs the migration first",
            source_ids=ids,
            project="/work/alpha",
            created_at=base + 700 + i,
            start=base,
            end=base + 100,
            method="extractive",
            source_tokens=100,
            input_tokens=120,
            output_tokens=20,
            compression_ratio=5.0,
        )
        await distillations.write_distillation(d)
        firsts.append(d.id)
    meta = StoredDistillation(
        id=distillation_id("copy-s0", 1, firsts),
        session_id="copy-s0",
        generation=1,
        text="the billing deploy: migration, then make deploy",
        source_ids=firsts,
        project="/work/alpha",
        created_at=base + 800,
        worker_provider="fake",
        worker_model="fake-1",
    )
    await distillations.write_distillation(meta, archive=firsts)
    # Knowledge: an entry edited twice, one deleted, one curated; metrics moved.
    kept = _entry("aaaa000000000001", "Deploy after the migration", "/work/alpha", base + 900)
    await knowledge.write_knowledge(kept)
    edited = next_version(kept, updated_by=AUTHOR_USER, at=base + 910, content="migrate, then deploy")
    await knowledge.write_knowledge(edited)
    await knowledge.write_knowledge(
        next_version(edited, updated_by=AUTHOR_CURATOR, at=base + 920, title="Deploy order")
    )
    gone = _entry("aaaa000000000002", "Use tabs", "/work/beta", base + 930)
    await knowledge.write_knowledge(gone)
    await knowledge.write_knowledge(next_version(gone, updated_by=AUTHOR_USER, at=base + 940, deleted=True))
    curated = _entry("aaaa000000000003", "Billing uses Postgres", "/work/alpha", base + 950, AUTHOR_CURATOR)
    await knowledge.write_knowledge(curated)
    await knowledge.reinforce_knowledge([curated.logical_id], 0.125, base + 960)
    await knowledge.record_contradiction(
        KnowledgeContradiction(
            kept.logical_id,
            curated.logical_id,
            "/work/alpha",
            "open",
            "fp-a",
            "fp-c",
            base + 970,
            "worker:x/y",
        )
    )
    # Entities: two, one merged into the other.
    await entities.write_entities(
        [
            Entity(
                "e-billing", "service", "billing-api", ["billing"], project="/work/alpha", created_at=base
            ),
            Entity("e-old", "service", "billing-v1", project="/work/alpha", merged_into="e-billing"),
            Entity("e-pg", "tool", "PostgreSQL", ["pg", "postgres"], created_at=base + 1),
        ]
    )
    # Teams.
    await knowledge.set_team_binding("/work/alpha", TeamBinding("/work/alpha", "core", base + 980, "manual"))
    await knowledge.set_team_policy("core", "auto")
    await knowledge.record_decisions(
        [make_decision(kept.logical_id, "fp-a", "approved", "ana", base + 990.000001, project="/work/alpha")]
    )
    # The event log: two runs, one checkpointed with a working snapshot.
    note = NewEvent("note", "the parser fails on empty input")
    status = NewEvent("status", "editing parser.py", working=True, key="editing")
    await events.append_events("/work/alpha", "build", [note, status], base + 1000)
    await events.append_events("/work/alpha", "build", [note], base + 1001)
    await events.append_events("/work/beta", "review", [status], base + 1002)
    snapshot = WorkingSnapshot(2, (WorkingFact("editing", "editing parser.py", 2, "status"),), base + 1003)
    await events.advance_run("/work/alpha", "build", 2, snapshot, base + 1003)


def _plain(record: Any) -> Any:
    return None if record is None else attrs.asdict(record)


async def picture(store: Store) -> dict[str, Any]:
    """Every tier of ``store`` as plain data, ordered, for comparing two stores (a tier the
    store lacks is left out)."""
    sessions = await store.list_sessions(limit=ALL)
    messages = []
    for s in sessions:
        messages += [attrs.asdict(m) for m in await store.session_messages(s.id)]
    inventory = await store.inventory()
    found: dict[str, Any] = {
        "projects": sorted(p.id for p in await store.list_projects()),
        "sessions": sorted((attrs.asdict(s) for s in sessions), key=lambda s: s["id"]),
        "messages": sorted(messages, key=lambda m: m["id"]),
        "state": {sid: await store.session_state(sid) for sid in inventory.state_sessions},
    }
    distillations = tier_of(store, DistillationStore)
    if distillations is not None:
        found["distillations"] = sorted(
            (attrs.asdict(d) for d in await distillations.list_distillations(None)), key=lambda d: d["id"]
        )
    knowledge = tier_of(store, KnowledgeStore)
    if knowledge is not None:
        metrics = await knowledge.knowledge_metrics(None)
        found["knowledge"] = {
            i: [attrs.asdict(v) for v in await knowledge.knowledge_versions(i)] for i in sorted(metrics)
        }
        found["metrics"] = {i: attrs.asdict(m) for i, m in sorted(metrics.items())}
        found["contradictions"] = [attrs.asdict(c) for c in await knowledge.knowledge_contradictions(None)]
        found["bindings"] = {p: _plain(await knowledge.team_binding(p)) for p in inventory.bound_projects}
        found["policies"] = {t: await knowledge.team_policy(t) for t in inventory.policy_teams}
        found["decisions"] = [attrs.asdict(d) for d in await knowledge.knowledge_decisions(None)]
    entities = tier_of(store, EntityStore)
    if entities is not None:
        found["entities"] = sorted(
            (attrs.asdict(e) for e in await entities.list_entities(None, include_merged=True)),
            key=lambda e: e["id"],
        )
    events = tier_of(store, EventLogStore)
    if events is not None:
        runs = {}
        for project, run in inventory.runs:
            state = await events.run_state(project, run)
            snapshot = await events.working_snapshot(project, run)
            runs[f"{project} {run}"] = {
                "seqs": None if state is None else (state.last_seq, state.covered_seq),
                "events": [attrs.asdict(e) for e in await events.run_events(project, run)],
                "snapshot": None if snapshot is None else attrs.asdict(snapshot),
            }
        found["runs"] = runs
    return found
