"""Records of long-term knowledge (tier 3, docs/knowledge.md), and the rules every backend
shares.

An entry has one ``logical_id`` and many immutable versions; exactly one is current. An edit
appends a version; a delete appends a *death certificate* (a current version with
``is_deleted``). Nothing is overwritten or physically removed. Lookups that must see
deletions (every import lane asks "did the user throw this away?") read the base table
through :meth:`~lore_core.interfaces.KnowledgeStore.knowledge_tombstone`, never the "current and
alive" listing (:meth:`~lore_core.interfaces.KnowledgeStore.current_knowledge`), which by definition
cannot show what it would guard against.

The two mutable numbers of an entry, ``confidence`` and ``last_reinforced_at``, live in a
metric register keyed by ``logical_id`` (:class:`KnowledgeMetric`), so versions stay
immutable.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
import unicodedata
from collections.abc import Sequence
from typing import Any

import attrs

#: The five categories, in the fixed order of ``.lore.md`` and of every rendering.
CATEGORIES = ("decision", "pattern", "preference", "architecture", "gotcha")
#: ``project``: one project's; ``global``: every project's (cross-project knowledge).
SCOPES = ("project", "global")
#: What may leave the machine: ``normal`` is exported and injected; ``sensitive`` is
#: injected but exported only when asked for explicitly; ``restricted`` never leaves the
#: store (not exported, not sent to a hosted worker).
SENSITIVITIES = ("normal", "sensitive", "restricted")
#: Who wrote a version (``created_by`` / ``updated_by``).
AUTHOR_CURATOR = "curator"
AUTHOR_USER = "user"
AUTHOR_IMPORT = "import"

#: Confidence an entry starts with, by author: people are believed more than the curator.
INITIAL_CONFIDENCE = {AUTHOR_USER: 0.9, AUTHOR_IMPORT: 0.8, AUTHOR_CURATOR: 0.6}
DEFAULT_CONFIDENCE = 0.6


class KnowledgeConflict(ValueError):
    """A version that does not follow the entry's current one (a concurrent edit, or a
    version number that skips): nothing was written."""


@attrs.define
class KnowledgeVersion:
    """One immutable version of a knowledge entry."""

    version_id: str
    logical_id: str
    #: 1 for a new entry; each edit or delete appends ``current + 1``.
    version: int
    category: str
    title: str
    content: str
    #: ``project`` (the default) or ``global``.
    scope: str = "project"
    #: The project (directory) an entry of scope ``project`` belongs to; ``""`` for global.
    project: str = ""
    sensitivity: str = "normal"
    #: A death certificate: the entry is deleted as of this version.
    is_deleted: bool = False
    created_at: float = 0.0
    #: Who created the entry (copied forward to every version) and who wrote this version.
    created_by: str = AUTHOR_USER
    updated_by: str = AUTHOR_USER
    #: Provenance of this version: the session and the item (``d:...``, ``t:...``,
    #: ``.lore.md``, ``cli``) it came from, and the worker that produced it.
    source_session: str | None = None
    source_ref: str | None = None
    worker_provider: str | None = None
    worker_model: str | None = None
    #: Set by the store on reads: whether this is the entry's current version.
    is_current: bool = False

    @property
    def ref(self) -> str:
        """The id recall and people use: ``k:<logical_id>``."""
        return f"k:{self.logical_id}"


@attrs.define
class KnowledgeMetric:
    """The mutable register of one entry."""

    logical_id: str
    confidence: float
    last_reinforced_at: float | None = None


def new_logical_id() -> str:
    """A new entry's id: 16 hex digits, random (ids never collide across machines that
    later share a ``.lore.md``)."""
    return secrets.token_hex(8)


def new_version_id(logical_id: str, version: int) -> str:
    return f"{logical_id}.{version}"


_LOGICAL_ID = re.compile(r"^[0-9a-z][0-9a-z_-]{3,63}$")


def valid_logical_id(value: str) -> bool:
    """Ids as ``.lore.md`` markers and ``k:`` references carry them."""
    return bool(_LOGICAL_ID.match(value))


_SPACE = re.compile(r"\s+")
_EDGE_PUNCTUATION = " \t\r\n.,;:!?-*_`'\""


def normalize_title(title: str) -> str:
    """The form titles are compared in (deduplication, death certificates): Unicode NFKC,
    case-folded, whitespace collapsed, punctuation at either end dropped."""
    text = unicodedata.normalize("NFKC", title).casefold()
    return _SPACE.sub(" ", text).strip(_EDGE_PUNCTUATION)


def category_rank(category: str) -> int:
    return CATEGORIES.index(category) if category in CATEGORIES else len(CATEGORIES)


def canonical_order(version: KnowledgeVersion) -> tuple[int, str, str]:
    """The one order of entries everywhere (prompt blocks, ``.lore.md``, listings):
    category in :data:`CATEGORIES` order, then normalised title, then id."""
    return (category_rank(version.category), normalize_title(version.title), version.logical_id)


def next_version(
    current: KnowledgeVersion,
    *,
    updated_by: str,
    at: float | None = None,
    deleted: bool = False,
    **changes: Any,
) -> KnowledgeVersion:
    """The version that follows ``current``: the same entry with ``changes`` applied, its
    creator copied forward, provenance of this version only (unset unless given)."""
    number = current.version + 1
    fields: dict[str, Any] = {
        "source_session": None,
        "source_ref": None,
        "worker_provider": None,
        "worker_model": None,
        **changes,
    }
    return attrs.evolve(
        current,
        version_id=new_version_id(current.logical_id, number),
        version=number,
        is_deleted=deleted,
        created_at=time.time() if at is None else at,
        updated_by=updated_by,
        is_current=False,
        **fields,
    )


# ---------------------------------------------------------------------------------------------
# Contradictions: pairs of entries judged by the worker model, never resolved by it
# ---------------------------------------------------------------------------------------------

#: ``open``: the pair gives opposite instructions and nobody has chosen yet; ``cleared``: the
#: worker judged it compatible; ``kept``: a person kept both; ``resolved``: a person kept one
#: (the other has a death certificate).
CONTRADICTION_STATUSES = ("open", "cleared", "kept", "resolved")


@attrs.define
class KnowledgeContradiction:
    """The latest judgement of one pair of entries (``first_id`` < ``second_id``).

    Each side's :func:`content_fingerprint` at the time of judgement is kept: a pair is
    judged again only when either side's title or content changed since, not when an entry
    is re-categorised, re-scoped or reinforced (those cannot make two rules opposite)."""

    first_id: str
    second_id: str
    project: str
    status: str
    first_fingerprint: str
    second_fingerprint: str
    judged_at: float
    #: ``worker:<provider>/<model>`` for the worker's judgements, ``user`` for a person's.
    judged_by: str
    reason: str = ""
    #: A ``resolved`` pair: the entry that was kept.
    kept_id: str | None = None

    @property
    def ids(self) -> tuple[str, str]:
        return (self.first_id, self.second_id)


def pair_ids(a: str, b: str) -> tuple[str, str]:
    """The pair's key: its two logical ids in order."""
    return (a, b) if a < b else (b, a)


def content_fingerprint(version: KnowledgeVersion) -> str:
    """What a contradiction judgement depends on: the normalised title and the content."""
    text = normalize_title(version.title) + "\n" + _SPACE.sub(" ", version.content).strip()
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


# ---------------------------------------------------------------------------------------------
# Teams: approval as append-only decision records that travel with the entries
# ---------------------------------------------------------------------------------------------

#: How a team-bound project promotes entries: ``auto`` shares every entry nobody rejected;
#: ``manual`` shares only what somebody approved (a new entry is ``pending``).
POLICIES = ("auto", "manual")
DEFAULT_POLICY = "auto"
APPROVED, REJECTED, PENDING = "approved", "rejected", "pending"
DECISIONS = (APPROVED, REJECTED)


@attrs.define(frozen=True)
class KnowledgeDecision:
    """One person's approval or rejection of one text of an entry: immutable, never edited.

    A decision is about content, not about a version number: ``fingerprint`` is the
    :func:`content_fingerprint` (title and content) it was made on, so it means the same on a
    teammate's machine, whose store numbers the versions of an imported entry its own way.
    ``decision_id`` is derived from everything but ``project`` (a directory path, different in
    every clone), so the same decision exchanged twice, in either direction, is stored once."""

    decision_id: str
    logical_id: str
    fingerprint: str
    decision: str
    decided_by: str
    #: Seconds since the epoch, to the microsecond (what a ``.lore.md`` record carries).
    decided_at: float
    #: The project (directory) of the store that holds the record; not part of the id.
    project: str = ""


def decision_micros(at: float) -> int:
    return round(at * 1_000_000)


def make_decision(
    logical_id: str, fingerprint: str, decision: str, decided_by: str, decided_at: float, project: str = ""
) -> KnowledgeDecision:
    """A decision with its derived id (the time kept to the microsecond)."""
    micros = decision_micros(decided_at)
    key = "\n".join((logical_id, fingerprint, decision, decided_by, str(micros)))
    return KnowledgeDecision(
        decision_id=hashlib.blake2b(key.encode(), digest_size=12).hexdigest(),
        logical_id=logical_id,
        fingerprint=fingerprint,
        decision=decision,
        decided_by=decided_by,
        decided_at=micros / 1_000_000,
        project=project,
    )


def decision_rank(decision: KnowledgeDecision) -> tuple[int, int, str]:
    """The convergence rule: of the decisions on one text, the one with the greatest rank
    stands. Later wins; at the same microsecond a rejection wins; then the greater id. A
    total order over the set, so every store holding the same records agrees, whatever order
    they arrived in."""
    return (decision_micros(decision.decided_at), decision.decision == REJECTED, decision.decision_id)


def standing_decision(decisions: Sequence[KnowledgeDecision], fingerprint: str) -> KnowledgeDecision | None:
    """The decision that stands for one text of an entry, or ``None`` (undecided)."""
    on_text = [d for d in decisions if d.fingerprint == fingerprint]
    return max(on_text, key=decision_rank) if on_text else None


@attrs.define
class TeamBinding:
    """A project bound to a team: ``policy`` overrides the team's (``None``: the team's)."""

    project: str
    team: str
    bound_at: float
    policy: str | None = None
