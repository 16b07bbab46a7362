"""Every write of an entity goes through :class:`EntityBook`: people (CLI, the local API) and
the curator. One place checks what an entity may hold and keeps its names unambiguous.

Rules, whoever writes:

* **Validated**: a known kind and sensitivity; a name and each alias one line of 1-120
  characters; at most :data:`MAX_ALIASES` aliases and :data:`MAX_RELATIONS` relations; a
  relation's predicate a short word (``depends_on``, ``owned by``: lower-cased, spaces become
  ``_``) and its target another entity that exists.
* **No secrets**: a name or alias that looks like a key or token (the store's masking
  rules) is refused: entity names are injected into every later prompt.
* **A name names one entity**: within what a project sees (its own entities and the global
  ones; a global entity: every project's), a name or alias that another entity already has
  is refused with the reason, naming that entity. Creating an entity under a name that is
  already known is the same subject again: its new aliases are added to that entity.
* **Merging** keeps one entity: the other's names, aliases and relations move to it, the
  relations of third entities that pointed at the other point at it, and the other stays as
  a redirect (``merged_into``), so its ``e:`` id still opens. All in one store write.
* **Renaming** keeps the old name as an alias, so what was written under it still matches.
* **Deleting** removes the entity for good, with the redirects merged into it (their ids
  opened it) and every relation to it, in one store write. Its names are free again; a later
  curation that finds the name again makes a new entity (a delete is not a block list).

Writes are serialised (one lock): each one reads, checks and writes the rows it changes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from lore_core.interfaces import EntityStore, Store, Tier, has_tier, require_tier
from lore_core.knowledge.shared import mark_changed
from lore_core.storage.entities import (
    ENTITY_KINDS,
    ENTITY_PREFIX,
    Entity,
    Relation,
    new_entity_id,
    normalize_name,
    relations_json,
)
from lore_core.storage.knowledge import AUTHOR_USER, SENSITIVITIES
from lore_core.storage.masking import mask_secrets

log = logging.getLogger("lore.knowledge")

MAX_NAME_CHARS = 120
MAX_ALIASES = 20
MAX_RELATIONS = 50
MAX_PREDICATE_CHARS = 40
#: Redirects followed when opening a merged id (a chain longer than this is a loop).
MAX_REDIRECTS = 16

CREATED, UPDATED, MERGED, UNCHANGED, REFUSED = "created", "updated", "merged", "unchanged", "refused"
DELETED = "deleted"

_PREDICATE = re.compile(r"^[a-z][a-z0-9_]*$")


class EntityInputError(ValueError):
    """An entity write that cannot be done as given (the message says which field and why)."""


@attrs.define
class EntityResult:
    """What one write did: ``status`` one of created, updated, merged, unchanged, refused;
    the entity as it stands after it; why it was refused."""

    status: str
    entity: Entity | None = None
    reason: str = ""
    #: Refused because an entity it names does not exist (the API answers 404).
    missing: bool = False

    @property
    def changed(self) -> bool:
        return self.status in (CREATED, UPDATED, MERGED, DELETED)


def check_name(value: object, field: str = "name") -> str:
    """The name stripped, or :class:`EntityInputError` naming ``field``."""
    if not isinstance(value, str):
        raise EntityInputError(f"{field} must be a string")
    name = " ".join(value.split()) if "\n" not in value.strip() else ""
    if not name or len(name) > MAX_NAME_CHARS or not normalize_name(name):
        raise EntityInputError(f"{field} must be one line of 1-{MAX_NAME_CHARS} characters")
    if mask_secrets(name) != name:
        raise EntityInputError(f"{field} looks like a secret (a key or token): not stored")
    return name


def check_kind(value: object) -> str:
    if value not in ENTITY_KINDS:
        raise EntityInputError(f"kind must be one of {', '.join(ENTITY_KINDS)}, got {value!r}")
    return str(value)


def check_predicate(value: object) -> str:
    if not isinstance(value, str):
        raise EntityInputError("predicate must be a string")
    predicate = "_".join(value.strip().lower().replace("-", "_").split())
    if not predicate or len(predicate) > MAX_PREDICATE_CHARS or not _PREDICATE.match(predicate):
        raise EntityInputError(
            f"predicate must be a word of 1-{MAX_PREDICATE_CHARS} letters, digits and _ "
            f"(such as depends_on), got {value!r}"
        )
    return predicate


def _check_sensitivity(value: object) -> str:
    if value not in SENSITIVITIES:
        raise EntityInputError(f"sensitivity must be one of {', '.join(SENSITIVITIES)}, got {value!r}")
    return str(value)


def _sensitivity_rank(value: str) -> int:
    return SENSITIVITIES.index(value) if value in SENSITIVITIES else len(SENSITIVITIES)


def _sees(entity: Entity, project: str) -> bool:
    """Whether a name of ``entity`` can clash with one of an entity of ``project`` (a global
    entity's names clash with every project's)."""
    return project == "" or entity.project == "" or entity.project == project


class EntityBook:
    """Writes entities to a store under the rules above."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock
        self._lock = asyncio.Lock()
        #: Counts writes: readers that cache entities (recall's alias table, the prompt
        #: block) compare it with the value they cached at.
        self.generation = 0
        #: Called with the entities each write changed.
        self.listeners: list[Callable[[Sequence[Entity]], Any]] = []

    @property
    def available(self) -> bool:
        """The store has the entity tier (without it every read and write here raises
        :class:`~lore_core.interfaces.TierUnavailable`)."""
        return has_tier(self.store, Tier.ENTITIES)

    @property
    def entity_store(self) -> EntityStore:
        return require_tier(self.store, EntityStore)

    # -- reads ---------------------------------------------------------------------------------

    async def entities(
        self, project: str | None, *, include_global: bool = True, include_merged: bool = False
    ) -> list[Entity]:
        return await self.entity_store.list_entities(
            project, include_global=include_global, include_merged=include_merged
        )

    async def get(self, ident: str) -> Entity | None:
        """The entity an ``e:`` id (or a bare id) names, following merge redirects to the
        survivor; ``None`` when there is none."""
        entity = await self.entity_store.get_entity(ident.strip().removeprefix(ENTITY_PREFIX))
        for _ in range(MAX_REDIRECTS):
            if entity is None or entity.merged_into is None:
                return entity
            entity = await self.entity_store.get_entity(entity.merged_into)
        return None

    async def named(self, project: str, name: str) -> Entity | None:
        """The alive entity one of whose names is ``name`` among what ``project`` sees (its
        own entities before global ones)."""
        wanted = normalize_name(name)
        if not wanted:
            return None
        found = [
            e for e in await self.entities(project or None) if wanted in {normalize_name(n) for n in e.names}
        ]
        found.sort(key=lambda e: e.project != project)
        return found[0] if found else None

    async def resolve(self, project: str, ref: str) -> Entity | None:
        """An entity by ``e:<id>`` (redirects followed) or by one of its names among what
        ``project`` sees (``""``: any project's)."""
        text = ref.strip() if isinstance(ref, str) else ""
        if text.startswith(ENTITY_PREFIX):
            return await self.get(text)
        return await self.named(project, text) if text else None

    # -- writes --------------------------------------------------------------------------------

    async def create(
        self,
        *,
        project: str,
        name: str,
        kind: str = "other",
        aliases: Sequence[str] = (),
        sensitivity: str = "normal",
        author: str = AUTHOR_USER,
    ) -> EntityResult:
        """A new entity, or (its name being known already) the new aliases added to the
        entity that has it, or a refusal."""
        try:
            name = check_name(name)
            kind = check_kind(kind)
            sensitivity = _check_sensitivity(sensitivity)
            wanted = [check_name(a, "alias") for a in aliases]
        except EntityInputError as exc:
            return self._refused(name, str(exc))
        async with self._lock:
            same = await self._owner(project, name)
            if same is not None and same.project != project:
                # One project's writes never change a global entity by name (nor a project's
                # entity a global write): they may only find it.
                if _unique_aliases(same, wanted) != same.aliases:
                    where = "a global entity" if not same.project else f"an entity of {same.project}"
                    return self._refused(
                        name, f"{name!r} is {where} ({same.ref}): add aliases to it by its id", same
                    )
                return EntityResult(UNCHANGED, same)
            if same is not None:
                return await self._add_aliases(same, wanted, author)
            new = Entity(
                id=new_entity_id(),
                kind=kind,
                name=name,
                project=project,
                sensitivity=sensitivity,
                created_at=self._clock(),
                updated_at=self._clock(),
                created_by=author,
                updated_by=author,
            )
            problem = await self._alias_problem(new, wanted)
            if problem:
                return self._refused(name, problem)
            new.aliases = _unique_aliases(new, wanted)
            return await self._write(CREATED, [new])

    async def add_alias(
        self, ident: str, alias: str, *, project: str = "", author: str = AUTHOR_USER
    ) -> EntityResult:
        """``ident``: an ``e:`` id, or a name ``project`` knows (as for every method below)."""
        try:
            alias = check_name(alias, "alias")
        except EntityInputError as exc:
            return self._refused(ident, str(exc))
        async with self._lock:
            entity = await self.resolve(project, ident)
            if entity is None:
                return self._refused(ident, f"no entity {ident}", missing=True)
            return await self._add_aliases(entity, [alias], author)

    async def remove_alias(
        self, ident: str, alias: str, *, project: str = "", author: str = AUTHOR_USER
    ) -> EntityResult:
        async with self._lock:
            entity = await self.resolve(project, ident)
            if entity is None:
                return self._refused(ident, f"no entity {ident}", missing=True)
            wanted = normalize_name(alias) if isinstance(alias, str) else ""
            if wanted == normalize_name(entity.name):
                return self._refused(
                    entity.name, "that is the canonical name: rename the entity instead", entity
                )
            kept = [a for a in entity.aliases if normalize_name(a) != wanted]
            if len(kept) == len(entity.aliases):
                return self._refused(entity.name, f"{entity.ref} has no alias {alias!r}", entity)
            return await self._write(UPDATED, [self._touched(entity, author, aliases=kept)])

    async def rename(
        self, ident: str, name: str, *, project: str = "", author: str = AUTHOR_USER
    ) -> EntityResult:
        """Give the entity another canonical name; the old one stays as an alias."""
        try:
            name = check_name(name)
        except EntityInputError as exc:
            return self._refused(ident, str(exc))
        async with self._lock:
            entity = await self.resolve(project, ident)
            if entity is None:
                return self._refused(ident, f"no entity {ident}", missing=True)
            if name == entity.name:
                return EntityResult(UNCHANGED, entity)
            owner = await self._owner(entity.project, name)
            if owner is not None and owner.id != entity.id:
                return self._refused(name, f"{owner.ref} ({owner.name}) is called {name!r} already", entity)
            wanted = normalize_name(name)
            aliases = [a for a in entity.aliases if normalize_name(a) != wanted]
            if normalize_name(entity.name) != wanted:
                aliases.append(entity.name)  # what was written under the old name still matches
            if len(aliases) > MAX_ALIASES:
                return self._refused(entity.name, f"an entity has at most {MAX_ALIASES} aliases", entity)
            return await self._write(UPDATED, [self._touched(entity, author, name=name, aliases=aliases)])

    async def set_kind(
        self, ident: str, kind: str, *, project: str = "", author: str = AUTHOR_USER
    ) -> EntityResult:
        try:
            kind = check_kind(kind)
        except EntityInputError as exc:
            return self._refused(ident, str(exc))
        async with self._lock:
            entity = await self.resolve(project, ident)
            if entity is None:
                return self._refused(ident, f"no entity {ident}", missing=True)
            if entity.kind == kind:
                return EntityResult(UNCHANGED, entity)
            return await self._write(UPDATED, [self._touched(entity, author, kind=kind)])

    async def relate(
        self,
        ident: str,
        predicate: str,
        target: str,
        *,
        project: str = "",
        author: str = AUTHOR_USER,
        remove: bool = False,
    ) -> EntityResult:
        """Add (or with ``remove``, drop) the relation ``<ident> <predicate> <target>``;
        ``target`` is an ``e:`` id or a name the entity's project knows."""
        try:
            predicate = check_predicate(predicate)
        except EntityInputError as exc:
            return self._refused(ident, str(exc))
        async with self._lock:
            entity = await self.resolve(project, ident)
            if entity is None:
                return self._refused(ident, f"no entity {ident}", missing=True)
            other = await self.resolve(entity.project, target)
            if other is None:
                return self._refused(entity.name, f"no entity {target!r} to relate to", entity, missing=True)
            if other.id == entity.id:
                return self._refused(entity.name, "an entity cannot relate to itself", entity)
            relation = Relation(predicate, other.id)
            if remove:
                if relation not in entity.relations:
                    return self._refused(entity.name, f"no relation {predicate} {other.ref}", entity)
                kept = [r for r in entity.relations if r != relation]
                return await self._write(UPDATED, [self._touched(entity, author, relations=kept)])
            if relation in entity.relations:
                return EntityResult(UNCHANGED, entity)
            if len(entity.relations) >= MAX_RELATIONS:
                return self._refused(entity.name, f"an entity has at most {MAX_RELATIONS} relations", entity)
            relations = [*entity.relations, relation]
            return await self._write(UPDATED, [self._touched(entity, author, relations=relations)])

    async def merge(
        self, keep: str, other: str, *, project: str = "", author: str = AUTHOR_USER
    ) -> EntityResult:
        """Merge ``other`` into ``keep`` (each an ``e:`` id or a name ``project`` knows)."""
        async with self._lock:
            survivor = await self.resolve(project, keep)
            if survivor is None:
                return self._refused(keep, f"no entity {keep}", missing=True)
            gone = await self.resolve(project or survivor.project, other)
            if gone is None:
                return self._refused(other, f"no entity {other}", survivor, missing=True)
            if gone.id == survivor.id:
                return self._refused(survivor.name, f"{other} is {survivor.ref} already", survivor)
            if survivor.project and gone.project != survivor.project:
                # A global entity merged into one project's would vanish for every other.
                where = "is global" if not gone.project else f"belongs to another project ({gone.project})"
                return self._refused(survivor.name, f"{gone.ref} {where}: merge it the other way", survivor)
            problem = await self._alias_problem(survivor, gone.names, exclude={gone.id})
            if problem:
                return self._refused(survivor.name, problem, survivor)
            aliases = list(survivor.aliases)
            taken = {normalize_name(n) for n in survivor.names}
            for name in gone.names:
                if normalize_name(name) not in taken:
                    taken.add(normalize_name(name))
                    aliases.append(name)
            relations = list(survivor.relations)
            for r in gone.relations:
                if r.target != survivor.id and r not in relations:
                    relations.append(r)
            relations = [r for r in relations if r.target != gone.id]
            changes: list[Entity] = [
                self._touched(
                    survivor,
                    author,
                    aliases=aliases,
                    relations=relations[:MAX_RELATIONS],
                    # Never lowered by a merge: what either side hid stays hidden.
                    sensitivity=max(survivor.sensitivity, gone.sensitivity, key=_sensitivity_rank),
                ),
                self._touched(gone, author, merged_into=survivor.id),
            ]
            # Third entities' relations to the merged one now point at the survivor.
            for third in await self.entities(None):
                if third.id in (survivor.id, gone.id):
                    continue
                if any(r.target == gone.id for r in third.relations):
                    moved: list[Relation] = []
                    for r in third.relations:
                        r = Relation(r.predicate, survivor.id) if r.target == gone.id else r
                        if r not in moved:
                            moved.append(r)
                    changes.append(self._touched(third, author, relations=moved))
            return await self._write(MERGED, changes)

    async def delete(self, ident: str, *, project: str = "", author: str = AUTHOR_USER) -> EntityResult:
        """Remove the entity ``ident`` names (an ``e:`` id, a merged one's opens its survivor,
        or a name ``project`` knows), the redirects merged into it, and the relations of other
        entities to any of them, in one store write. The result carries the entity as it was."""
        async with self._lock:
            entity = await self.resolve(project, ident)
            if entity is None:
                return self._refused(ident, f"no entity {ident}", missing=True)
            everything = await self.entities(None, include_merged=True)
            gone = {entity.id}
            grew = True
            while grew:  # redirects to redirects: a chain of merges
                found = {e.id for e in everything if e.merged_into in gone} - gone
                gone |= found
                grew = bool(found)
            updated = [
                self._touched(e, author, relations=[r for r in e.relations if r.target not in gone])
                for e in everything
                if e.id not in gone and any(r.target in gone for r in e.relations)
            ]
            await self.entity_store.delete_entities(sorted(gone), updated)
            self.generation += 1
            await mark_changed(self.store)
            log.info(
                "entity deleted: %s %r (%s), %d redirects", entity.ref, entity.name, author, len(gone) - 1
            )
            for listener in self.listeners:
                try:
                    listener([entity, *updated])
                except Exception:
                    log.exception("an entity listener failed")
            return EntityResult(DELETED, entity)

    # -- helpers -------------------------------------------------------------------------------

    async def _owner(self, project: str, name: str, exclude: set[str] | None = None) -> Entity | None:
        """The alive entity that ``project`` (``""``: every project) sees under ``name``."""
        wanted = normalize_name(name)
        for e in await self.entities(project or None):
            if exclude and e.id in exclude:
                continue
            if _sees(e, project) and wanted in {normalize_name(n) for n in e.names}:
                return e
        return None

    async def _alias_problem(
        self, entity: Entity, aliases: Sequence[str], exclude: set[str] | None = None
    ) -> str:
        """Why ``aliases`` cannot be added to ``entity`` (``""``: they can)."""
        if len(_unique_aliases(entity, aliases)) > MAX_ALIASES:
            return f"an entity has at most {MAX_ALIASES} aliases"
        for alias in aliases:
            owner = await self._owner(entity.project, alias, exclude={entity.id, *(exclude or ())})
            if owner is not None:
                return f"the alias {alias!r} belongs to {owner.ref} ({owner.name}) already"
        return ""

    async def _add_aliases(self, entity: Entity, aliases: Sequence[str], author: str) -> EntityResult:
        problem = await self._alias_problem(entity, aliases)
        if problem:
            return self._refused(entity.name, problem, entity)
        merged = _unique_aliases(entity, aliases)
        if merged == entity.aliases:
            return EntityResult(UNCHANGED, entity)
        return await self._write(UPDATED, [self._touched(entity, author, aliases=merged)])

    def _touched(self, entity: Entity, author: str, **changes: Any) -> Entity:
        return attrs.evolve(entity, updated_at=self._clock(), updated_by=author, **changes)

    async def _write(self, status: str, entities: list[Entity]) -> EntityResult:
        await self.entity_store.write_entities(entities)
        self.generation += 1
        await mark_changed(self.store)
        first = entities[0]
        log.info("entity %s: %s %r (%s)", status, first.ref, first.name, first.updated_by)
        for listener in self.listeners:
            try:
                listener(entities)
            except Exception:
                log.exception("an entity listener failed")
        return EntityResult(status, first)

    def _refused(
        self, name: str, reason: str, standing: Entity | None = None, missing: bool = False
    ) -> EntityResult:
        # The name masked: a refusal for a secret must not write that secret to the log.
        log.info("entity refused: %r: %s", mask_secrets(str(name))[:200], reason)
        return EntityResult(REFUSED, standing, reason, missing)


def _unique_aliases(entity: Entity, aliases: Sequence[str]) -> list[str]:
    """The entity's aliases with ``aliases`` appended, without repeats (of each other or of
    the canonical name) under :func:`normalize_name`."""
    out = list(entity.aliases)
    seen = {normalize_name(n) for n in entity.names}
    for alias in aliases:
        key = normalize_name(alias)
        if key not in seen:
            seen.add(key)
            out.append(alias)
    return out


def entity_json(entity: Entity, names: dict[str, str] | None = None) -> dict[str, Any]:
    """An entity as the local API and ``lore entity --json`` show it; ``names`` (id ->
    canonical name) adds the name of each relation's target."""
    out = attrs.asdict(entity)
    out["id"] = entity.ref
    out["relations"] = relations_json(entity.relations)
    for relation in out["relations"]:
        relation["target"] = ENTITY_PREFIX + relation["target"]
        if names is not None and relation["target"][2:] in names:
            relation["target_name"] = names[relation["target"][2:]]
    if entity.merged_into is not None:
        out["merged_into"] = ENTITY_PREFIX + entity.merged_into
    return out


# -- one entry point for people's edits (the local API and the CLI without a gateway) ----------

#: What people do to entities, and the fields each takes (``project`` resolves names and, for
#: ``add``, is where the entity goes; ``global`` makes it global instead).
ACTIONS: dict[str, tuple[str, ...]] = {
    "add": ("project", "name", "kind", "aliases", "sensitivity", "global"),
    "alias": ("project", "ref", "alias", "remove"),
    "relate": ("project", "ref", "predicate", "target", "remove"),
    "merge": ("project", "keep", "other"),
    "edit": ("project", "ref", "name", "kind"),
    "delete": ("project", "ref"),
}


def _field(body: Mapping[str, Any], name: str, expected: type, required: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        if required:
            raise EntityInputError(f"missing {name}")
        return None
    if not isinstance(value, expected):
        kind = {str: "a string", bool: "true or false", list: "a list of strings"}[expected]
        raise EntityInputError(f"{name} must be {kind}")
    if required and isinstance(value, str) and not value.strip():
        raise EntityInputError(f"missing {name}")
    return value


def _project(body: Mapping[str, Any], required: bool) -> str:
    project = _field(body, "project", str, required=required) or ""
    if project and not os.path.isabs(project):
        raise EntityInputError("project must be the project's absolute directory")
    return str(project)


async def run_action(
    book: EntityBook, action: str, body: Mapping[str, Any], author: str = AUTHOR_USER
) -> EntityResult:
    """Do one of :data:`ACTIONS` with the fields of ``body`` (a JSON object). Raises
    :class:`EntityInputError` naming the field when the input is malformed; what the book's
    rules refuse is a ``refused`` result."""
    if action not in ACTIONS:
        raise EntityInputError(f"action must be one of {', '.join(ACTIONS)}")
    unknown = sorted(k for k in body if k not in ACTIONS[action])
    if unknown:
        raise EntityInputError(f"unknown field {unknown[0]!r} (expected {', '.join(ACTIONS[action])})")
    if action == "add":
        is_global = bool(_field(body, "global", bool))
        project = "" if is_global else _project(body, required=True)
        aliases = _field(body, "aliases", list) or []
        if not all(isinstance(a, str) for a in aliases):
            raise EntityInputError("aliases must be a list of strings")
        # Checked here too, so malformed input is told apart from what the rules refuse.
        name = check_name(_field(body, "name", str, required=True))
        kind = check_kind(_field(body, "kind", str) or "other")
        sensitivity = _check_sensitivity(_field(body, "sensitivity", str) or "normal")
        for alias in aliases:
            check_name(alias, "alias")
        return await book.create(
            project=project, name=name, kind=kind, aliases=aliases, sensitivity=sensitivity, author=author
        )
    project = _project(body, required=False)
    if action == "merge":
        keep, other = _field(body, "keep", str, required=True), _field(body, "other", str, required=True)
        return await book.merge(keep, other, project=project, author=author)
    ref = _field(body, "ref", str, required=True)
    if action == "delete":
        return await book.delete(ref, project=project, author=author)
    remove = bool(_field(body, "remove", bool))
    if action == "alias":
        alias = check_name(_field(body, "alias", str, required=True), "alias")
        if remove:
            return await book.remove_alias(ref, alias, project=project, author=author)
        return await book.add_alias(ref, alias, project=project, author=author)
    if action == "relate":
        predicate = check_predicate(_field(body, "predicate", str, required=True))
        target = _field(body, "target", str, required=True)
        return await book.relate(ref, predicate, target, project=project, author=author, remove=remove)
    name, kind = _field(body, "name", str), _field(body, "kind", str)
    if name is None and kind is None:
        raise EntityInputError("nothing to change: give name or kind")
    if name is not None:
        check_name(name)
    if kind is not None:
        check_kind(kind)
    result = EntityResult(UNCHANGED)
    if kind is not None:
        result = await book.set_kind(ref, kind, project=project, author=author)
        if result.status == REFUSED:
            return result
    if name is not None:
        renamed = await book.rename(ref, name, project=project, author=author)
        if renamed.status != UNCHANGED or result.status == UNCHANGED:
            result = renamed
    return result


async def describe(book: EntityBook, project: str, ref: str) -> dict[str, Any] | None:
    """An entity as ``lore entity show`` shows it: its fields, the names of its relations'
    targets, the relations of other entities to it, and the ids merged into it."""
    entity = await book.resolve(project, ref)
    if entity is None:
        return None
    everything = await book.entities(None, include_merged=True)
    names = {e.id: e.name for e in everything}
    incoming = [
        {"source": e.ref, "source_name": e.name, "predicate": r.predicate}
        for e in everything
        if e.merged_into is None
        for r in e.relations
        if r.target == entity.id
    ]
    merged = [e.ref for e in everything if e.merged_into == entity.id]
    return {"entity": entity_json(entity, names), "related": incoming, "merged": merged}
