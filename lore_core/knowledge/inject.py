"""Knowledge in the prompt, cache-stable (docs/context.md).

Per session, at its first request that offers tools (the agent's own loop; a harness's small
side requests get none), the injector **pins**:

* the baseline block (preferences and the catalogue) and the context-bound block (the
  entries most relevant to the session's opening request), as text, kept byte for byte for
  the whole session: the codec places them after the client's own system prompt, where the
  provider caches them (Anthropic: their own block with a 1-hour breakpoint);
* which version of every alive entry that picture reflects (``known``).

On every later request it compares the project's entries with ``known``. What changed
(created, edited, deleted) becomes one **delta**: a short synthetic user message placed
right after the request's last message, on the session's main conversation, and recorded
with that message's id, so every later request carries it at the same place (the prefix up
to it stays byte-identical and cached). The pin and its deltas are kept in the store's
session state (key ``ltm``), so a restart renders the same bytes.

Reading the entries costs one store read per project after each knowledge write (the book
tells the injector), none otherwise. The known entities (names, kind, aliases) are part of
the baseline the same way: read with the entries, after each entity write (the entity book
tells the injector too).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from lore_core.config import KnowledgeConfig
from lore_core.knowledge.book import KnowledgeBook
from lore_core.knowledge.entities import EntityBook
from lore_core.knowledge.prompt import baseline_text, choose_context, context_text, delta_text
from lore_core.knowledge.shared import MARK_REFRESH_SECONDS, read_mark
from lore_core.model import TEXT, Block, Message
from lore_core.storage.entities import Entity
from lore_core.storage.knowledge import KnowledgeMetric, KnowledgeVersion

log = logging.getLogger("lore.knowledge")

STATE_KEY = "ltm"
#: Sessions whose pin stays in memory (the oldest are read from the store again).
MAX_PINNED_SESSIONS = 10_000
#: Confidence an entry gains each time a session's context-bound block carries it.
INJECTION_REINFORCEMENT = 0.02


@attrs.define
class Delta:
    """A change message, placed after the message ``anchor_id`` of conversation ``thread``."""

    anchor_id: str | None
    anchor_index: int
    text: str
    thread: str


@attrs.define
class Pin:
    """A session's knowledge as pinned at its first request, and the deltas since."""

    baseline: str
    context: str
    context_ids: list[str]
    #: logical_id -> version_id of every entry the blocks and deltas reflect.
    known: dict[str, str]
    deltas: list[Delta] = attrs.field(factory=list)
    #: The injector's write counter when ``known`` was last brought up to date.
    generation: int = -1

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self, filter=lambda a, _: a.name != "generation")

    @classmethod
    def from_json(cls, raw: Any) -> Pin | None:
        if not isinstance(raw, dict):
            return None
        try:
            deltas = [Delta(**d) for d in raw.get("deltas", [])]
            return cls(
                baseline=str(raw["baseline"]),
                context=str(raw["context"]),
                context_ids=[str(i) for i in raw.get("context_ids", [])],
                known={str(k): str(v) for k, v in dict(raw.get("known", {})).items()},
                deltas=deltas,
            )
        except (KeyError, TypeError, ValueError):
            return None


@attrs.define
class Injection:
    """What one request gets: the two system blocks and the deltas to place, each after
    the message at its index in the request's message list."""

    baseline: str = ""
    context: str = ""
    deltas: list[tuple[int, Message]] = attrs.field(factory=list)


@attrs.define
class _Entries:
    generation: int
    entries: list[KnowledgeVersion]
    metrics: dict[str, KnowledgeMetric]
    #: The project's entities and the global ones (for the baseline).
    entities: list[Entity] = attrs.field(factory=list)


class KnowledgeInjector:
    def __init__(
        self,
        book: KnowledgeBook,
        config: KnowledgeConfig,
        count: Callable[[str], int],
        clock: Callable[[], float] = time.time,
        entities: EntityBook | None = None,
    ) -> None:
        self.book = book
        self.store = book.store
        self.entity_book = entities
        self.config = config
        self.count = count
        self._clock = clock
        self._generation = 0
        self._entries: dict[str, _Entries] = {}
        self._pins: dict[str, Pin | None] = {}
        # The generation at which the whole store was found without any knowledge (until an
        # entry is written, no project needs a read: the common case, and every load test).
        self._store_empty_at: int | None = None
        self._store_checked_at: int | None = None
        # On a shared store: the other gateways' change mark last seen, and when it was read
        # (lore_core.knowledge.shared).
        self._mark: Any = None
        self._mark_read_at = float("-inf")
        book.listeners.append(self._changed)
        if entities is not None:
            entities.listeners.append(self._changed)

    def _changed(self, _written: object) -> None:
        self._generation += 1

    async def _current(self, project: str | None) -> list[KnowledgeVersion]:
        return await self.book.entries(project) if self.book.available else []

    async def _entities(self, project: str | None) -> list[Entity]:
        if self.entity_book is None or self.config.baseline_entities == 0:
            return []
        if not self.entity_book.available:
            return []
        return await self.entity_book.entities(project)

    def _mark_due(self, session_id: str) -> bool:
        """On a shared store: is the change mark to be read before this request (a new
        session, or the last read is older than MARK_REFRESH_SECONDS)?"""
        if not self.store.shared:
            return False
        return session_id not in self._pins or self._clock() - self._mark_read_at >= MARK_REFRESH_SECONDS

    async def _check_mark(self, session_id: str) -> None:
        """Another gateway wrote knowledge or entities since the mark was last read: read
        the entries again (a new generation)."""
        if not self._mark_due(session_id):
            return
        self._mark_read_at = self._clock()
        try:
            mark = await read_mark(self.store)
        except Exception as exc:
            log.warning("knowledge: could not read the other gateways' change mark: %s", exc)
            return
        if mark != self._mark:
            self._mark = mark
            self._generation += 1

    def forget(self, session_id: str) -> None:
        self._pins.pop(session_id, None)

    async def _project_entries(self, project: str) -> _Entries:
        cached = self._entries.get(project)
        if cached is not None and cached.generation == self._generation:
            return cached
        generation = self._generation
        if self._store_checked_at != generation:
            self._store_checked_at = generation
            if not await self._current(None) and not await self._entities(None):
                self._store_empty_at = generation
        if self._store_empty_at == generation:
            return _Entries(generation, [], {})
        entries = await self._current(project)
        entities = await self._entities(project)
        metrics = (
            await self.book.knowledge_store.knowledge_metrics([e.logical_id for e in entries])
            if entries
            else {}
        )
        floor = self.config.confidence_floor
        # Restricted entries never leave the store (recall can still find them locally).
        shown = [
            e
            for e in entries
            if e.sensitivity != "restricted"
            and (metrics.get(e.logical_id) is None or metrics[e.logical_id].confidence >= floor)
        ]
        found = _Entries(generation, shown, metrics, entities)
        if len(self._entries) > 256:
            self._entries.clear()
        self._entries[project] = found
        return found

    async def _pin(self, session_id: str) -> Pin | None:
        if session_id not in self._pins:
            raw = await self.store.get_state(session_id, STATE_KEY)
            self._pins[session_id] = Pin.from_json(raw)
            self._trim()
        return self._pins[session_id]

    def _pin_empty(self, session_id: str, generation: int) -> None:
        """A session of a project without knowledge (most, and every one under a load test):
        an empty pin in memory only, no store read or write. Entries created later arrive as
        deltas; after a restart the session pins what exists then."""
        if session_id not in self._pins:
            self._pins[session_id] = Pin("", "", [], {}, generation=generation)
            self._trim()

    def _trim(self) -> None:
        # The context manager forgets idle sessions (forget()); this bounds the rest.
        while len(self._pins) > MAX_PINNED_SESSIONS:
            del self._pins[next(iter(self._pins))]

    async def _save(self, session_id: str, pin: Pin) -> None:
        self._pins[session_id] = pin
        await self.store.set_state(session_id, STATE_KEY, pin.as_json())

    def cached(
        self, session_id: str, project: str, *, message_ids: Sequence[str | None], thread: str
    ) -> Injection | None:
        """The request's knowledge when it needs no store read (the session is pinned and
        nothing changed since): the common case, answered without awaiting anything.
        ``None``: call :meth:`for_request`."""
        if not self.config.enabled:
            return Injection()
        if self._mark_due(session_id):
            return None
        if self._store_empty_at == self._generation:
            self._pin_empty(session_id, self._generation)
            return Injection()
        pin = self._pins.get(session_id)
        entries = self._entries.get(project)
        if pin is None or entries is None or entries.generation != self._generation:
            return None
        if pin.generation != self._generation:
            return None
        return Injection(pin.baseline, pin.context, self._placed(pin, message_ids, thread))

    async def for_request(
        self,
        session_id: str,
        project: str,
        *,
        opening_text: str,
        message_ids: Sequence[str | None],
        thread: str,
        main: bool,
    ) -> Injection:
        """The knowledge of one request. ``opening_text``: the session's opening request
        (chooses the context-bound entries at the pin); ``message_ids``: the request's
        message ids, in order (deltas are anchored to them)."""
        if not self.config.enabled:
            return Injection()
        await self._check_mark(session_id)
        current = await self._project_entries(project)
        if not current.entries and not current.entities and session_id not in self._pins:
            self._pin_empty(session_id, current.generation)
            return Injection()
        pin = await self._pin(session_id)
        if pin is None:
            pin = self._new_pin(current, opening_text)
            pin.generation = current.generation
            await self._save(session_id, pin)
            if pin.context_ids:
                await self.book.reinforce(pin.context_ids, INJECTION_REINFORCEMENT)
        elif main and pin.generation != current.generation:
            changed = await self._changes(pin, current.entries)
            pin.generation = current.generation
            if changed:
                anchor = len(message_ids) - 1
                pin.deltas.append(
                    Delta(message_ids[anchor] if anchor >= 0 else None, anchor, delta_text(changed), thread)
                )
                for entry in changed:
                    pin.known[entry.logical_id] = entry.version_id
                await self._save(session_id, pin)
        return Injection(pin.baseline, pin.context, self._placed(pin, message_ids, thread))

    def _new_pin(self, current: _Entries, opening_text: str) -> Pin:
        entries = current.entries
        baseline = baseline_text(
            entries,
            current.metrics,
            max_tokens=self.config.baseline_max_tokens,
            count=self.count,
            entities=current.entities,
            max_entities=self.config.baseline_entities,
        )
        chosen = choose_context(
            opening_text,
            entries,
            limit=self.config.context_entries,
            max_tokens=self.config.context_max_tokens,
            count=self.count,
        )
        return Pin(
            baseline=baseline,
            context=context_text(chosen),
            context_ids=[e.logical_id for e in chosen],
            known={e.logical_id: e.version_id for e in entries},
        )

    async def _changes(self, pin: Pin, entries: Sequence[KnowledgeVersion]) -> list[KnowledgeVersion]:
        """Entries whose current version the pin does not reflect: new or edited ones, and
        the death certificates of entries it showed that are gone."""
        alive = {e.logical_id: e for e in entries}
        changed = [e for e in entries if pin.known.get(e.logical_id) != e.version_id]
        for logical_id in sorted(set(pin.known) - set(alive)):
            gone = await self.book.get(logical_id)
            if gone is not None and gone.version_id != pin.known[logical_id]:
                changed.append(gone)
        return changed

    def _placed(self, pin: Pin, message_ids: Sequence[str | None], thread: str) -> list[tuple[int, Message]]:
        placed = []
        for delta in pin.deltas:
            if delta.thread != thread:
                continue
            index = _index_of(message_ids, delta.anchor_id, delta.anchor_index)
            if index is None:
                continue  # another branch of the conversation: its history never had it
            placed.append((index, delta_message(delta.text)))
        return placed


def delta_message(text: str) -> Message:
    return Message(role="user", blocks=[Block(TEXT, text=text)], synthetic=True)


def _index_of(ids: Sequence[str | None], wanted: str | None, hint: int) -> int | None:
    if wanted is None:
        return hint if 0 <= hint < len(ids) and ids[hint] is None else None
    if 0 <= hint < len(ids) and ids[hint] == wanted:
        return hint
    for i, found in enumerate(ids):
        if found == wanted:
            return i
    return None
