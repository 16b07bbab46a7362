"""Records of the event log (docs/events.md): agents outside the proxy append events to a
*run* (a named stream within a project); each gets ``seq``, server-assigned and monotonic per
run. The consolidation pipeline (:mod:`lore_core.events.log`) turns events into distilled
memories behind the writes and advances the run's checkpoint ``covered_seq``: every event
up to it is in some memory, every event after it is not (yet).

Memories are stored as distillations of the run's own session id (:func:`run_session_id`),
so they are indexed, embedded and searched exactly like the proxy's observation logs.
"""

from __future__ import annotations

import hashlib
import re

import attrs

#: A run's name: what agents pass; it also appears in ids, so it is kept plain.
_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$")
_KIND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$")
MAX_EVENT_CHARS = 20_000
MAX_KEY_CHARS = 200
#: Events one request may append.
MAX_BATCH = 1_000


def valid_run_name(value: str) -> bool:
    return bool(_RUN_NAME.match(value))


def valid_kind(value: str) -> bool:
    return bool(_KIND.match(value))


@attrs.frozen
class NewEvent:
    """An event as a writer sends it. ``working``: a live coordination fact (who is doing
    what now), keyed by ``key``; a later working fact with the same key replaces it, and
    one with empty ``content`` clears it."""

    kind: str
    content: str
    working: bool = False
    key: str | None = None


@attrs.frozen
class RunEvent:
    """One stored event."""

    project: str
    run: str
    seq: int
    kind: str
    content: str
    working: bool
    key: str | None
    created_at: float

    @property
    def working_key(self) -> str:
        """The slot a working fact fills: its key, else its own seq (nothing replaces it)."""
        return self.key if self.key else f"seq:{self.seq}"


@attrs.frozen
class RunState:
    """``last_seq``: the newest event; ``covered_seq``: the distilled checkpoint."""

    project: str
    run: str
    last_seq: int
    covered_seq: int
    created_at: float
    updated_at: float


@attrs.frozen
class WorkingFact:
    key: str
    content: str
    seq: int
    kind: str = "fact"


@attrs.frozen
class WorkingSnapshot:
    """The working facts of a run as of ``as_of_seq`` (its checkpoint when it was taken)."""

    as_of_seq: int
    facts: tuple[WorkingFact, ...]
    taken_at: float


def run_session_id(project: str, run: str) -> str:
    """The session id a run's memories are stored under (session ids are global, run names
    are per project: the project's hash keeps two projects' runs apart)."""
    digest = hashlib.blake2b(project.encode(), digest_size=4).hexdigest()
    return f"run:{run}:{digest}"


def memory_id(project: str, run: str, first_seq: int) -> str:
    """The id of the memory that starts at ``first_seq``: derived, so a consolidation step
    redone after a crash finds the memory it already wrote instead of writing a second."""
    digest = hashlib.blake2b(f"{project}\0{run}".encode(), digest_size=8).hexdigest()
    return f"ev-{digest}-{first_seq}"


def event_ref(seq: int) -> str:
    """How a memory's ``source_ids`` name the events it holds."""
    return f"ev:{seq}"


def seq_of_ref(ref: str) -> int | None:
    if not ref.startswith("ev:"):
        return None
    try:
        return int(ref[3:])
    except ValueError:
        return None
