"""``lore forget <session>``: remove a session and everything derived from it, for good.

Two halves:

* **The store removes it** (:meth:`~lore_core.interfaces.Store.forget_session`): the
  session's messages, its distillations, their full-text passages and vectors, its row and
  its per-session state (but the keys the kernel keeps, none of which holds text: the
  amnesia ranges and this module's mark, the owner, the spend), and the bytes of all of it in
  the store's files, not only the rows (a DuckDB file keeps deleted rows' bytes until the
  file is rewritten, LanceDB keeps deleted rows until its fragments are).
* **The writer never stores it again** (:func:`drop_forgotten`): clients resend the whole
  history with every request, so a forgotten session would come back with its next request.
  A :class:`ForgetMark`, kept in the session's state, says what was forgotten: the message
  ids (the hash chain of :func:`~lore_core.storage.identity.message_id`: a resent history
  has the same ids) and the position after the last one. The writer drops

  - a message whose id was forgotten;
  - a message below that position whose parent was forgotten or dropped: the client's own
    form of a forgotten message (an answer resent without what the gateway stored of it, a
    regenerated answer, an edit of an old prompt) and what follows it in the old history;
  - every message of an exchange that began before the forget (it was sent with the
    forgotten history in its context).

  New turns after the forget (a message at or past that position, or on a history that
  shares nothing with the forgotten one) are stored as usual: the session goes on, without
  its past. Its title, the first prompt, is not stored again.

What is not forgotten, by design: what the client keeps itself (its transcript, and anything
it sends anew, such as a summary of the conversation it writes), knowledge entries curated
from the session (listed in the report: they are versioned, and a person deletes them with
``lore knowledge delete``), and the ids of the forgotten messages (hashes of their content
and of the chain before them: they confirm a guess of a whole message, never reveal one).
"""

from __future__ import annotations

import fcntl
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from lore_core.interfaces import DistillationStore, KnowledgeStore, tier_of
from lore_core.storage.journal import LOCK_FILE, SUFFIX, JournalError, encode, read_segment
from lore_core.storage.records import StoredMessage, WriteBatch

if TYPE_CHECKING:
    from lore_core.interfaces import Store


@attrs.frozen
class ForgetMark:
    """What of a session was forgotten (see the module docstring)."""

    #: Ids of the forgotten messages.
    ids: frozenset[str] = frozenset()
    #: The position after the last forgotten message: below it, a continuation of a
    #: forgotten message is forgotten too.
    before: int = 0
    #: When the forget began (epoch seconds): an exchange that began earlier is dropped whole.
    at: float = 0.0

    def merged(self, other: ForgetMark) -> ForgetMark:
        """Both marks at once (a session forgotten twice keeps what both forgot)."""
        return ForgetMark(self.ids | other.ids, max(self.before, other.before), max(self.at, other.at))

    def as_json(self) -> dict[str, Any]:
        # Sorted: the stored state is the same whatever the set's order.
        return {"ids": sorted(self.ids), "before": self.before, "at": self.at}

    @classmethod
    def from_json(cls, raw: Any) -> ForgetMark | None:
        """The mark as :meth:`as_json` wrote it; ``None`` for anything else."""
        if not isinstance(raw, Mapping):
            return None
        ids = raw.get("ids")
        try:
            before, at = int(raw.get("before", 0)), float(raw.get("at", 0.0))
        except (TypeError, ValueError):
            return None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return None
        return cls(frozenset(ids), before, at)


#: The mark of a session being forgotten right now: every message of it is dropped until the
#: store has forgotten it (a turn finishing meanwhile would otherwise be written after the
#: store read what to forget, and stay).
HOLD = ForgetMark(before=0, at=math.inf)


@attrs.frozen
class ForgetReport:
    """What :meth:`~lore_core.interfaces.Store.forget_session` removed, and what it cost."""

    session_id: str
    #: Whether the store had anything of the session (a row, messages or distillations).
    found: bool
    messages: int = 0
    distillations: int = 0
    #: Full-text index rows (passages of its messages and distillations) removed.
    passages: int = 0
    #: Vectors removed, over every embedding model's index.
    vectors: int = 0
    #: Per-session state keys removed.
    state_keys: tuple[str, ...] = ()
    #: Wall-clock seconds, in all and by step (backend-specific names, e.g. ``rows``,
    #: ``fulltext``, ``vectors``, ``rewrite``).
    seconds: float = 0.0
    steps: Mapping[str, float] = attrs.field(factory=dict)
    #: The store's files before and after (bytes; 0 for a store without files).
    bytes_before: int = 0
    bytes_after: int = 0
    #: Knowledge entries (``k:`` ids) whose current version was curated from the session:
    #: kept (the kernel fills this in; see the module docstring).
    knowledge: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["state_keys"] = list(self.state_keys)
        out["knowledge"] = list(self.knowledge)
        out["steps"] = {k: round(v, 4) for k, v in self.steps.items()}
        out["seconds"] = round(self.seconds, 4)
        return out


def drop_forgotten(
    batch: WriteBatch, mark_of: Callable[[str], ForgetMark | None], started_at: float | None = None
) -> tuple[WriteBatch, int]:
    """``batch`` without what the marks forgot, and how many messages were dropped.

    ``mark_of(session_id)``: the session's mark, or ``None``. ``started_at``: when the
    exchange the batch comes from began (``None``: a batch of several, a journal's replay).
    Messages are taken in the batch's order (an exchange's records are in position order,
    its answer last), so a continuation is judged after its parent.
    """
    marks: dict[str, ForgetMark | None] = {}

    def mark(session_id: str) -> ForgetMark | None:
        if session_id not in marks:
            marks[session_id] = mark_of(session_id)
        return marks[session_id]

    kept = []
    dropped: set[str] = set()
    for m in batch.messages:
        found = mark(m.session_id)
        if found is not None and _forgotten(m.id, m.parent_id, m.position, found, dropped, started_at):
            dropped.add(m.id)
        else:
            kept.append(m)
    forgotten_sessions = {s.id for s in batch.sessions if mark(s.id) is not None}
    if not dropped and not forgotten_sessions:
        return batch, 0
    # A forgotten session's title (its first prompt) is not stored again.
    sessions = [attrs.evolve(s, title="") if s.id in forgotten_sessions else s for s in batch.sessions]
    return WriteBatch(list(batch.projects), sessions, kept), len(dropped)


def _forgotten(
    ident: str,
    parent: str | None,
    position: int,
    mark: ForgetMark,
    dropped: set[str],
    started_at: float | None,
) -> bool:
    if started_at is not None and started_at < mark.at:
        return True
    if ident in mark.ids:
        return True
    return position < mark.before and parent is not None and (parent in mark.ids or parent in dropped)


def mark_for(messages: Iterable[Any], at: float) -> ForgetMark:
    """The mark that forgets these stored messages (``StoredMessage``s: ``id``, ``position``)."""
    ids, before = set(), 0
    for m in messages:
        ids.add(m.id)
        before = max(before, m.position + 1)
    return ForgetMark(frozenset(ids), before, at)


def kept_state_keys() -> tuple[str, ...]:
    """The per-session state a forget keeps, none of which holds text: the amnesia ranges and
    the forget mark (what keeps a resent history out), the owning credentials' hash (the
    session stays its owner's: another client must not adopt it by resending it) and its
    spend (money spent stays spent)."""
    from lore_core.context.spend import SESSION_SPEND_KEY
    from lore_core.http.access import OWNER_STATE_KEY
    from lore_core.storage.amnesia import STATE_KEY

    return (STATE_KEY, OWNER_STATE_KEY, SESSION_SPEND_KEY)


class MarkBook(Protocol):
    """Where marks are kept (:class:`~lore_core.storage.amnesia.Amnesia`)."""

    async def forget(self, session_id: str, mark: ForgetMark) -> ForgetMark: ...


async def forget_stored_session(
    store: Store,
    marks: MarkBook,
    session_id: str,
    at: float,
    journaled: Iterable[StoredMessage] = (),
) -> ForgetReport | None:
    """Forget what ``store`` holds of the session: the mark first (persisted: a crash after it
    leaves the session in the store, never a session that comes back when resent; forgetting
    again finishes the job), then the store's own forget. ``journaled``: the session's
    messages a journal held (:func:`scrub_journal`), forgotten too. ``None`` when there is
    nothing of the session. The gateway wraps this with what it holds in memory
    (:meth:`lore_core.gateway.Gateway.forget_session`); without a gateway it is all there is."""
    journaled = list(journaled)
    messages = await store.session_messages(session_id)
    session = await store.get_session(session_id)
    tier = tier_of(store, DistillationStore)
    distillations = await tier.list_distillations(session_id) if tier is not None else []
    if session is None and not messages and not distillations and not journaled:
        return None
    await marks.forget(session_id, mark_for([*messages, *journaled], at))
    report = await store.forget_session(session_id, keep_state=kept_state_keys())
    if journaled:
        report = attrs.evolve(report, found=True)
    knowledge = tier_of(store, KnowledgeStore)
    entries = await knowledge.current_knowledge(None) if knowledge is not None else []
    curated = tuple(sorted(e.ref for e in entries if e.source_session == session_id))
    return attrs.evolve(report, knowledge=curated)


def scrub_journal(directory: Path | None, session_id: str) -> list[StoredMessage]:
    """Take the session's records out of a journal no gateway holds (what a gateway that
    died left for its next start to replay), segment by segment; returns the messages taken
    out, for the mark (they are not in the store yet, and a resend must not bring them back
    either). Raises :class:`~lore_core.storage.journal.JournalError` while a gateway holds
    the journal: its own forget empties it."""
    if directory is None or not directory.is_dir():
        return []
    try:
        lock = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise JournalError(f"cannot use the journal directory {directory}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise JournalError(f"a gateway is using the journal {directory}") from None
        removed: list[StoredMessage] = []
        for path in sorted(directory.glob(f"*{SUFFIX}")):
            batches, _ = read_segment(path)
            kept: list[WriteBatch] = []
            changed = False
            for batch in batches:
                mine = [m for m in batch.messages if m.session_id == session_id]
                sessions = [s for s in batch.sessions if s.id != session_id]
                if mine or len(sessions) != len(batch.sessions):
                    changed = True
                    removed += mine
                    others = [m for m in batch.messages if m.session_id != session_id]
                    batch = WriteBatch(batch.projects, sessions, others)
                if batch:
                    kept.append(batch)
            if changed:
                # Written beside it, then renamed over it: a crash leaves one or the other.
                fresh = path.with_name(path.name + ".scrubbing")
                fresh.write_bytes(b"".join(encode(b) for b in kept))
                os.replace(fresh, path)
        return removed
    finally:
        os.close(lock)  # releases the lock
