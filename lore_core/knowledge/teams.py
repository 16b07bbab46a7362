"""Teams: a project bound to a team shares only what the team's decisions let through.

A project is bound to a team with a promotion policy (``auto`` or ``manual``; the project's
own policy overrides the team's, and ``auto`` is the default). Sharing means every export:
``.lore.md`` and ``lore export``; the developer's own prompts keep every alive entry.

Approval is **team state, not local metadata**: each approval or rejection is an immutable
:class:`~lore_core.storage.knowledge.KnowledgeDecision` about one *text* of an entry (the
fingerprint of its title and content), written into the ``.lore.md`` beside the entries and
read back by a teammate's import. Records are only ever added, and what stands is a pure
function of the set held (:func:`~lore_core.storage.knowledge.decision_rank`: the latest
decision on a text wins, a rejection wins a tie, then the greater id), so two stores that
exchange their records, in either direction and any number of times, agree.

What the team sees of an entry:

* its current text, when the decision standing on that text approves it, or when nothing
  was decided on it and the policy is ``auto``;
* otherwise the latest earlier text of the entry that would be shared by the same rule: an
  approval stays with the entry through later edits (copied forward), but it covers the text
  it was given to, so an edit's new text is ``pending`` until approved and cannot be
  laundered into the team by editing an approved entry;
* nothing, when no text of the entry qualifies (a new entry under ``manual``, a rejected one).

Changing an entry's category, scope or sensitivity keeps its approval (the text is the
same); restricted entries are never shared and cannot be decided on.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from lore_core.interfaces import KnowledgeStore, Store, require_tier
from lore_core.knowledge.book import KnowledgeBook, KnowledgeInputError
from lore_core.storage.knowledge import (
    APPROVED,
    DECISIONS,
    DEFAULT_POLICY,
    PENDING,
    POLICIES,
    REJECTED,
    KnowledgeDecision,
    KnowledgeVersion,
    TeamBinding,
    content_fingerprint,
    make_decision,
    standing_decision,
)
from lore_core.storage.masking import mask_secrets

# Team names and reviewer names travel in ``.lore.md`` records (inside an HTML comment).
_TEAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@/-]{0,99}$")
MAX_REVIEWER_CHARS = 100


class TeamConflict(KnowledgeInputError):
    """A well-formed request the project's state does not allow (not bound, a deleted,
    global or restricted entry): the API answers 409."""


@attrs.define
class TeamState:
    """A bound project: its team and the policy in force, and where that policy is set
    (``project``, ``team`` or ``default``)."""

    project: str
    team: str
    policy: str
    policy_from: str
    bound_at: float

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.define
class Approval:
    """One entry as its team sees it: the state of its current text, the decision standing
    on that text, and the version whose text is shared (``None``: not shared)."""

    entry: KnowledgeVersion
    state: str
    decision: KnowledgeDecision | None
    shared: KnowledgeVersion | None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.entry.ref,
            "title": self.entry.title,
            "category": self.entry.category,
            "state": self.state,
            "decision": decision_json(self.decision) if self.decision else None,
            "shared_version": self.shared.version if self.shared else None,
        }
        # A text approved earlier is what the team sees while this edit waits.
        out["changed_since_approval"] = self.shared is not None and self.shared.version != self.entry.version
        return out


def decision_json(decision: KnowledgeDecision) -> dict[str, Any]:
    return attrs.asdict(decision)


def check_team_name(team: str) -> str:
    if not _TEAM_NAME.match(team):
        raise KnowledgeInputError(
            "team must be 1-100 characters: letters, digits and . _ @ / - (starting with a letter or digit)"
        )
    return team


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise KnowledgeInputError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    return policy


def check_reviewer(name: str) -> str:
    """Who decides, as the record will carry it: one line, no comment delimiters."""
    name = " ".join(name.split())
    if not name or len(name) > MAX_REVIEWER_CHARS:
        raise KnowledgeInputError(f"the reviewer's name must be 1-{MAX_REVIEWER_CHARS} characters")
    if any(c in name for c in "<>") or "--" in name or not name.isprintable():
        raise KnowledgeInputError("the reviewer's name may not hold <, > or --")
    if mask_secrets(name) != name:
        raise KnowledgeInputError("the reviewer's name looks like a secret (a key or token)")
    return name


async def team_state(store: Store, project: str) -> TeamState | None:
    """The project's binding with its policy resolved, or ``None`` when it is not bound."""
    teams = require_tier(store, KnowledgeStore)  # teams are part of the knowledge tier
    binding = await teams.team_binding(project)
    if binding is None:
        return None
    if binding.policy is not None:
        return TeamState(project, binding.team, binding.policy, "project", binding.bound_at)
    team_wide = await teams.team_policy(binding.team)
    if team_wide is not None:
        return TeamState(project, binding.team, team_wide, "team", binding.bound_at)
    return TeamState(project, binding.team, DEFAULT_POLICY, "default", binding.bound_at)


async def bind(
    store: Store, project: str, team: str, policy: str | None = None, clock: Callable[[], float] = time.time
) -> TeamState:
    """Bind ``project`` to ``team`` (replacing another binding); ``policy`` set for this
    project only, else the team's."""
    check_team_name(team)
    if policy is not None:
        check_policy(policy)
    await require_tier(store, KnowledgeStore).set_team_binding(
        project, TeamBinding(project, team, clock(), policy)
    )
    state = await team_state(store, project)
    assert state is not None
    return state


async def unbind(store: Store, project: str) -> TeamState | None:
    """Unbind ``project``; the binding it had (``None``: it had none). Decision records are
    kept: binding again brings them back into force."""
    state = await team_state(store, project)
    if state is not None:
        await require_tier(store, KnowledgeStore).set_team_binding(project, None)
    return state


async def set_policy(store: Store, project: str, policy: str, *, team_wide: bool = False) -> TeamState:
    """Set the policy of the bound ``project``, or with ``team_wide`` of its whole team (for
    every project of the team that does not set its own)."""
    check_policy(policy)
    teams = require_tier(store, KnowledgeStore)
    binding = await teams.team_binding(project)
    if binding is None:
        raise TeamConflict("this project is not bound to a team: lore team bind <team> first")
    if team_wide:
        await teams.set_team_policy(binding.team, policy)
    else:
        await teams.set_team_binding(project, attrs.evolve(binding, policy=policy))
    state = await team_state(store, project)
    assert state is not None
    return state


def _shared_by(policy: str, standing: KnowledgeDecision | None) -> bool:
    if standing is None:
        return policy == "auto"
    return standing.decision == APPROVED


class TeamView:
    """A bound project's entries as its team sees them (built by :meth:`load`)."""

    def __init__(self, store: Store, state: TeamState, decisions: Sequence[KnowledgeDecision]) -> None:
        self.store = store
        self.state = state
        self.decisions = list(decisions)
        self._by_entry: dict[str, list[KnowledgeDecision]] = {}
        for d in self.decisions:
            self._by_entry.setdefault(d.logical_id, []).append(d)

    @classmethod
    async def load(cls, store: Store, project: str) -> TeamView | None:
        """``None`` when the project is not bound (everything exportable is shared)."""
        state = await team_state(store, project)
        if state is None:
            return None
        return cls(store, state, await require_tier(store, KnowledgeStore).knowledge_decisions(project))

    def of_entry(self, logical_id: str) -> list[KnowledgeDecision]:
        return self._by_entry.get(logical_id, [])

    async def approval(self, entry: KnowledgeVersion) -> Approval:
        decisions = self.of_entry(entry.logical_id)
        standing = standing_decision(decisions, content_fingerprint(entry))
        if standing is not None:
            state = standing.decision
        else:
            state = APPROVED if self.state.policy == "auto" else PENDING
        if entry.is_deleted or entry.sensitivity == "restricted":
            return Approval(entry, state, standing, None)
        if _shared_by(self.state.policy, standing):
            return Approval(entry, state, standing, entry)
        # Copied forward: the latest earlier text the team let through stays shared.
        for older in reversed(
            await require_tier(self.store, KnowledgeStore).knowledge_versions(entry.logical_id)
        ):
            if older.version >= entry.version or older.is_deleted:
                continue
            if _shared_by(self.state.policy, standing_decision(decisions, content_fingerprint(older))):
                shared = attrs.evolve(
                    older,
                    # What the team sees is the older text with the entry's standing metadata
                    # (a re-categorised or more sensitive entry stays so).
                    category=entry.category,
                    sensitivity=entry.sensitivity,
                    scope=entry.scope,
                    project=entry.project,
                    is_current=True,
                )
                return Approval(entry, state, standing, shared)
        return Approval(entry, state, standing, None)


async def decide(
    book: KnowledgeBook, logical_id: str, decision: str, by: str, project: str | None = None
) -> Approval:
    """Record ``by``'s decision on the current text of an entry of a bound project."""
    if decision not in DECISIONS:
        raise KnowledgeInputError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
    by = check_reviewer(by)
    entry = await book.get(logical_id)
    if entry is None:
        raise KnowledgeInputError(f"no knowledge entry {logical_id!r}")
    if entry.is_deleted:
        raise TeamConflict(f"{entry.ref} was deleted: nothing to decide")
    if entry.scope != "project" or not entry.project:
        raise TeamConflict(f"{entry.ref} is a global entry: only a project's entries are shared with a team")
    if project is not None and entry.project != project:
        raise TeamConflict(f"{entry.ref} belongs to another project ({entry.project})")
    if entry.sensitivity == "restricted":
        raise TeamConflict(f"{entry.ref} is restricted: it is never shared, so it cannot be approved")
    view = await TeamView.load(book.store, entry.project)
    if view is None:
        raise TeamConflict(f"the project of {entry.ref} is not bound to a team: lore team bind <team> first")
    record = make_decision(
        entry.logical_id, content_fingerprint(entry), decision, by, book.clock(), project=entry.project
    )
    await book.knowledge_store.record_decisions([record])
    view = await TeamView.load(book.store, entry.project)
    assert view is not None
    return await view.approval(entry)


async def approvals(book: KnowledgeBook, project: str, states: Sequence[str] | None = None) -> list[Approval]:
    """The approval of each alive entry of the bound ``project`` (``states``: only those in
    one of them); raises when the project is not bound."""
    view = await TeamView.load(book.store, project)
    if view is None:
        raise TeamConflict("this project is not bound to a team: lore team bind <team> first")
    found = []
    for entry in await book.entries(project, include_global=False):
        if entry.scope != "project" or entry.project != project or entry.sensitivity == "restricted":
            continue
        approval = await view.approval(entry)
        if states is None or approval.state in states:
            found.append(approval)
    return found


async def pending_json(book: KnowledgeBook, project: str) -> dict[str, Any]:
    """What ``lore knowledge pending`` shows: the binding, and every entry whose current text
    waits for a decision (under ``auto`` nothing waits; rejected texts are listed apart)."""
    state = await team_state(book.store, project)
    if state is None:
        raise TeamConflict("this project is not bound to a team: lore team bind <team> first")
    every = await approvals(book, project)
    return {
        "team": state.as_json(),
        "pending": [a.as_json() for a in every if a.state == PENDING],
        "rejected": [a.as_json() for a in every if a.state == REJECTED],
    }


async def team_json(store: Store, project: str) -> dict[str, Any]:
    state = await team_state(store, project)
    return {"project": project, "bound": state is not None, **(state.as_json() if state else {})}
