"""What the recall engine needs from the places it searches, as small protocols.

The engine does not know stores, tiers or tables: each tier that can be searched registers
sources for its result kind (:class:`~lore_core.recall.ids.Kind`):

* a :class:`TextSource` answers full-text (BM25) searches, best first; it may offer
  ``doc_freq(term)`` so the relaxed cascade can drop the commonest terms first;
* a :class:`VectorSource` answers nearest-neighbour searches for a query embedding;
* an :class:`Opener` returns one item in full for ``recall(id=...)``.

Sources return :class:`SourceHit` keys *without* the id prefix; the engine adds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from lore_core.recall.ids import Scope


@attrs.define
class SourceHit:
    key: str
    score: float
    text: str
    # Shown with the result when present: session, project, role, created_at, title, ...
    meta: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class SearchFilter:
    """Where a source must look. ``None`` means "do not filter on this"."""

    scope: Scope
    session: str | None = None
    project: str | None = None


class TextSource(Protocol):
    name: str

    async def search(self, query: str, where: SearchFilter, limit: int) -> Sequence[SourceHit]:
        """BM25 search, best first; ``query`` is space-separated terms."""


@runtime_checkable
class DocFreqSource(Protocol):
    """Optional capability of a :class:`TextSource`: in how many documents a term occurs
    (``None`` when unknown). Must be cheap; it is called once per query term."""

    def doc_freq(self, term: str) -> int | None: ...


class VectorSource(Protocol):
    name: str

    async def search_vector(
        self, vector: Sequence[float], where: SearchFilter, limit: int
    ) -> Sequence[SourceHit]:
        """Nearest items to a unit-length query vector, best first."""


class Opener(Protocol):
    async def open(self, key: str) -> SourceHit | None:
        """The item in full, or ``None`` when no item has this key."""


class MessageStore(Protocol):
    """The parts of :class:`lore_core.interfaces.Store` the message adapter uses."""

    async def search(
        self, query: str, session_id: str | None = None, project: str | None = None, limit: int = 10
    ) -> Sequence[Any]: ...

    async def get_messages(self, ids: Sequence[str]) -> Sequence[Any]: ...


class StoreMessageSource:
    """Temporal messages (``t:``) from any store with the kernel's ``search`` and
    ``get_messages``: a text source and an opener."""

    def __init__(self, store: MessageStore, name: str = "messages") -> None:
        self.store = store
        self.name = name

    async def search(self, query: str, where: SearchFilter, limit: int) -> list[SourceHit]:
        hits = await self.store.search(query, session_id=where.session, project=where.project, limit=limit)
        return [
            SourceHit(
                key=h.id,
                score=float(h.score),
                text=h.text,
                meta={
                    "session": h.session_id,
                    "project": h.project,
                    "role": h.role,
                    "position": h.position,
                    "created_at": h.created_at,
                },
            )
            for h in hits
        ]

    async def open(self, key: str) -> SourceHit | None:
        found = await self.store.get_messages([key])
        if not found:
            return None
        m = found[0]
        return SourceHit(
            key=m.id,
            score=0.0,
            text=m.text,
            meta={
                "session": m.session_id,
                "project": m.project,
                "role": m.role,
                "position": m.position,
                "created_at": m.created_at,
            },
        )
