"""Entities in recall (docs/recall.md): alias expansion of queries, and entities as a
searchable kind with ``e:`` ids.

* **Alias expansion**: when a query names a known entity of the project (its canonical name
  or an alias, as a whole word, case-insensitively), the full-text lists also search for
  the entity's other names, so "what port does pg use" finds the messages and entries that
  only ever say "PostgreSQL".
* **Entity search**: an entity is one short document (names, kind, relations) searched by
  BM25 like a knowledge entry; ``recall(id="e:...")`` opens it with its relations, a merged
  id opening the entity it was merged into.

Both read one table of every alive entity, cached until the entity book's write counter
moves (and for at most :data:`TABLE_TTL_SECONDS`, for writers outside this process's book):
a store without entities costs one read per change, and no query work at all.
Restricted entities never reach recall (their names are not expanded either: the expansion
is named in the response).
"""

from __future__ import annotations

import math
import re
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import attrs

from lore_core.interfaces import EntityStore, Store, tier_of
from lore_core.knowledge.entities import EntityBook
from lore_core.knowledge.prompt import tokens
from lore_core.recall.ids import Kind
from lore_core.recall.sources import AliasExpansion, SearchFilter, SourceHit
from lore_core.storage.entities import Entity, entity_order, normalize_name

#: How long the cached table is trusted without a write through the book.
TABLE_TTL_SECONDS = 30.0
#: Entities one query is expanded for (each adds one full-text search per source).
MAX_EXPANDED_ENTITIES = 3
#: Other names searched for one entity (the canonical name first, then aliases in order).
MAX_EXPANSION_NAMES = 6
#: Field weights of the entity full-text score: names are what a query names.
NAME_WEIGHT, KIND_WEIGHT, RELATION_WEIGHT = 6.0, 2.0, 1.0
_K1, _B = 1.2, 0.75
_SPACE = re.compile(r"\s+")


def query_form(text: str) -> str:
    """A query in the form names are matched in (NFKC, case-folded, whitespace collapsed)."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


@attrs.define
class _View:
    """What one project sees, ready to match: the entities, and one pattern of all their
    names (longest first, so "Jane Doe" wins over "Jane")."""

    entities: list[Entity]
    by_name: dict[str, list[Entity]]
    pattern: re.Pattern[str] | None


class EntityIndex:
    """The alive, not restricted entities of the store, cached (see the module docstring),
    with each project's view of them."""

    def __init__(self, store: Store, book: EntityBook | None = None, ttl: float = TABLE_TTL_SECONDS) -> None:
        self.store = store
        self.book = book
        self.ttl = ttl
        #: ``None``: a store without the entity tier (nothing to match).
        self.entity_store = tier_of(store, EntityStore)
        self._loaded_at: float | None = None
        self._generation = -1
        self._all: list[Entity] = []
        self._by_id: dict[str, Entity] = {}
        self._views: dict[str | None, _View] = {}

    async def entities(self) -> list[Entity]:
        generation = self.book.generation if self.book is not None else 0
        now = time.monotonic()
        fresh = self._loaded_at is not None and now - self._loaded_at < self.ttl
        if fresh and generation == self._generation:
            return self._all
        if self.entity_store is None:
            return []
        found = await self.entity_store.list_entities(None)
        self._all = [e for e in found if e.sensitivity != "restricted"]
        self._by_id = {e.id: e for e in self._all}
        self._views.clear()
        self._loaded_at, self._generation = now, generation
        return self._all

    def name_of(self, entity_id: str) -> str | None:
        found = self._by_id.get(entity_id)
        return found.name if found is not None else None

    async def view(self, project: str | None) -> _View:
        everything = await self.entities()
        cached = self._views.get(project)
        if cached is not None:
            return cached
        seen = [e for e in everything if project is None or e.project in (project, "")]
        by_name: dict[str, list[Entity]] = defaultdict(list)
        for entity in seen:
            for name in entity.names:
                key = normalize_name(name)
                if key and entity not in by_name[key]:
                    by_name[key].append(entity)
        pattern = None
        if by_name:
            names = sorted(by_name, key=lambda n: (-len(n), n))
            pattern = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(n) for n in names) + r")(?!\w)")
        if len(self._views) > 256:
            self._views.clear()
        view = self._views[project] = _View(seen, dict(by_name), pattern)
        return view

    async def expand(self, query: str, project: str | None) -> list[AliasExpansion]:
        """The entities ``query`` names that have other names, with those names. ``[]`` (at
        once) when none is named."""
        view = await self.view(project)
        if view.pattern is None:
            return []
        text = query_form(query)
        out: list[AliasExpansion] = []
        done: set[str] = set()
        for match in view.pattern.finditer(text):
            matched = match.group(0)
            for entity in view.by_name.get(matched, []):
                if entity.id in done or len(done) >= MAX_EXPANDED_ENTITIES:
                    continue
                others = [n for n in entity.names if normalize_name(n) != matched][:MAX_EXPANSION_NAMES]
                if not others:
                    continue
                done.add(entity.id)
                out.append(AliasExpansion(entity.ref, matched, others))
        return out


def entity_line(entity: Entity, name_of: Any = None) -> str:
    """An entity in one line, as search results show it."""
    line = f"[{entity.ref}] {entity.kind}: {entity.name}"
    if entity.aliases:
        line += f" (also: {', '.join(entity.aliases)})"
    if entity.relations:
        shown = []
        for r in entity.relations:
            target = name_of(r.target) if name_of is not None else None
            shown.append(f"{r.predicate} {target or 'e:' + r.target}")
        line += "; " + "; ".join(shown)
    return line


def _meta(entity: Entity) -> dict[str, Any]:
    return {
        "title": entity.name,
        "kind": entity.kind,
        "project": entity.project,
        "created_at": entity.updated_at,
        "role": "entity",
    }


class EntitySource:
    """Text source and opener of :attr:`Kind.ENTITY`."""

    name = "entities"

    def __init__(self, index: EntityIndex) -> None:
        self.index = index

    async def search(self, query: str, where: SearchFilter, limit: int) -> list[SourceHit]:
        view = await self.index.view(where.project)
        words = set(tokens(query))
        if not words or not view.entities:
            return []
        bags: list[dict[str, float]] = []
        for entity in view.entities:
            bag: dict[str, float] = defaultdict(float)
            related = [f"{r.predicate} {self.index.name_of(r.target) or ''}" for r in entity.relations]
            for weight, texts in (
                (NAME_WEIGHT, entity.names),
                (KIND_WEIGHT, [entity.kind]),
                (RELATION_WEIGHT, related),
            ):
                for text in texts:
                    for word in tokens(text.replace("_", " ")):
                        bag[word] += weight
            bags.append(bag)
        scored = _bm25(words, view.entities, bags)
        return [
            SourceHit(e.id, score, entity_line(e, self.index.name_of), _meta(e), Kind.ENTITY)
            for score, e in scored[:limit]
        ]

    async def open(self, key: str) -> SourceHit | None:
        entity_store = self.index.entity_store
        if entity_store is None:
            return None
        book = self.index.book or EntityBook(self.index.store)
        asked = await entity_store.get_entity(key)
        entity = await book.get(key)
        if entity is None:
            return None
        if entity.sensitivity == "restricted":
            text = f"[{entity.ref}] restricted: not shown to the model (`lore entity show` shows it)"
            return SourceHit(entity.id, 0.0, text, {"role": "entity"}, Kind.ENTITY)
        everything = await self.index.entities()
        lines = [entity_line(entity, self.index.name_of)]
        if asked is not None and asked.id != entity.id:
            lines.append(f"(e:{asked.id}, {asked.name!r}, was merged into this entity)")
        incoming = [
            f"{other.name} ({other.ref}) {r.predicate} {entity.name}"
            for other in sorted(everything, key=entity_order)
            for r in other.relations
            if r.target == entity.id and other.id != entity.id
        ]
        if incoming:
            lines.append("Related: " + "; ".join(incoming))
        where = entity.project or "all projects"
        lines.append(f"(project: {where}; updated by {entity.updated_by})")
        return SourceHit(entity.id, 0.0, "\n".join(lines), _meta(entity), Kind.ENTITY)


def _bm25(
    words: set[str], entities: Sequence[Entity], bags: Sequence[dict[str, float]]
) -> list[tuple[float, Entity]]:
    lengths = [sum(b.values()) for b in bags]
    average = (sum(lengths) / len(lengths)) or 1.0
    df = Counter(word for bag in bags for word in words if word in bag)
    n = len(entities)
    scored = []
    for entity, bag, length in zip(entities, bags, lengths, strict=True):
        score = 0.0
        for word in words:
            tf = bag.get(word, 0.0)
            if tf:
                idf = math.log(1 + (n - df[word] + 0.5) / (df[word] + 0.5))
                score += idf * tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / average))
        if score > 0:
            scored.append((score, entity))
    scored.sort(key=lambda pair: (-pair[0], entity_order(pair[1])))
    return scored
