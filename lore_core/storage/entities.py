"""Records of entities (docs/knowledge.md): the people, services, tools, repositories and
files a project talks about, with one canonical name, the other names they go by (aliases)
and how they relate, beside long-term knowledge as a small knowledge graph.

An entity is one mutable row (unlike a knowledge entry it has no versions: what changes is
a name list, and the row says who changed it last and when). Merging two entities keeps one
(the *survivor*, which takes over the other's names and relations) and leaves the other as a
redirect (``merged_into``), so an ``e:`` id that a model or a person holds still opens.

Names are compared in :func:`normalize_name` form (NFKC, case-folded, whitespace collapsed,
edge punctuation dropped), the form knowledge titles are compared in. Within what one project
sees (its own entities and the global ones) a name names one entity: an alias that another
entity already has is refused (:mod:`lore_core.knowledge.entities` enforces it).

The rules every writer shares live in :mod:`lore_core.knowledge.entities`; backends only
store and read these records.
"""

from __future__ import annotations

import secrets
from typing import Any

import attrs

from lore_core.storage.knowledge import AUTHOR_CURATOR, AUTHOR_IMPORT, AUTHOR_USER, normalize_title

#: What an entity is. ``other`` takes what fits none of the rest (a company, a concept).
ENTITY_KINDS = ("person", "service", "tool", "repository", "file", "other")
#: Who created or last changed an entity.
ENTITY_AUTHORS = (AUTHOR_CURATOR, AUTHOR_USER, AUTHOR_IMPORT)
#: The prefix of an entity's recall id.
ENTITY_PREFIX = "e:"


@attrs.define(frozen=True)
class Relation:
    """``<entity> <predicate> <target>``: "billing-api depends_on PostgreSQL"."""

    predicate: str
    #: The target's entity id (without ``e:``).
    target: str


@attrs.define
class Entity:
    """One entity as stored."""

    id: str
    kind: str
    #: The canonical name: how the entity is shown.
    name: str
    #: The other names it goes by, in the order they were added.
    aliases: list[str] = attrs.field(factory=list)
    relations: list[Relation] = attrs.field(factory=list)
    #: The project (directory) it belongs to; ``""``: global (every project sees it).
    project: str = ""
    #: As for knowledge: ``restricted`` entities never reach a prompt or a recall result.
    sensitivity: str = "normal"
    created_at: float = 0.0
    updated_at: float = 0.0
    created_by: str = AUTHOR_USER
    updated_by: str = AUTHOR_USER
    #: Set when this entity was merged into another: its id, which opens instead.
    merged_into: str | None = None

    @property
    def ref(self) -> str:
        """The id recall and people use: ``e:<id>``."""
        return f"{ENTITY_PREFIX}{self.id}"

    @property
    def names(self) -> list[str]:
        """The canonical name, then the aliases."""
        return [self.name, *self.aliases]

    @property
    def alive(self) -> bool:
        return self.merged_into is None


def new_entity_id() -> str:
    """A new entity's id: 16 hex digits, random (as knowledge ids are)."""
    return secrets.token_hex(8)


def normalize_name(name: str) -> str:
    """The form names are matched in (see :func:`~lore_core.storage.knowledge.normalize_title`)."""
    return normalize_title(name)


def entity_order(entity: Entity) -> tuple[str, str]:
    """The one order of entities everywhere (listings, the prompt block): normalised
    canonical name, then id."""
    return (normalize_name(entity.name), entity.id)


def relations_json(relations: list[Relation]) -> list[dict[str, str]]:
    return [{"predicate": r.predicate, "target": r.target} for r in relations]


def relations_from_json(raw: Any) -> list[Relation]:
    """Relations as stored (a JSON list of objects); anything malformed is left out."""
    if not isinstance(raw, list):
        return []
    return [
        Relation(item["predicate"], item["target"])
        for item in raw
        if isinstance(item, dict)
        and isinstance(item.get("predicate"), str)
        and isinstance(item.get("target"), str)
    ]


def aliases_from_json(raw: Any) -> list[str]:
    return [a for a in raw if isinstance(a, str)] if isinstance(raw, list) else []
