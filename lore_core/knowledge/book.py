"""Every write of long-term knowledge goes through :class:`KnowledgeBook`: people (CLI, the
local API), the curator and every import lane. One place checks what an entry may hold,
refuses what a death certificate covers, and turns a second entry with a known title into
an edit of the first.

Rules, whoever writes:

* **Validated**: a known category, scope and sensitivity; a title of 1-200 characters on one
  line; content of 1-4,000 characters.
* **No secrets**: an entry whose title or content holds something that looks like a key or
  token (the store's masking rules) is refused, never stored masked: knowledge is injected
  into every later prompt and exported into the repository.
* **A memory the user threw away does not come back**: creating an entry whose title
  carries a death certificate in this project (or globally) is refused with the reason; so
  is editing a deleted entry, unless ``revive`` says a person means it. A person brings a
  deleted entry back with :meth:`KnowledgeBook.restore`: a new version of the same entry,
  its history kept (the title is then its own again).
* **Deduplicated by title**: creating an entry whose normalised title an alive entry of the
  same project already has edits that entry (or changes nothing when the content is the
  same).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from lore_core.interfaces import KnowledgeStore, Store, Tier, has_tier, require_tier
from lore_core.knowledge.shared import mark_changed
from lore_core.storage.knowledge import (
    AUTHOR_USER,
    CATEGORIES,
    SCOPES,
    SENSITIVITIES,
    KnowledgeConflict,
    KnowledgeMetric,
    KnowledgeVersion,
    new_logical_id,
    new_version_id,
    next_version,
    normalize_title,
)
from lore_core.storage.masking import mask_secrets

log = logging.getLogger("lore.knowledge")

MAX_TITLE_CHARS = 200
MAX_CONTENT_CHARS = 4_000

CREATED, UPDATED, DELETED, UNCHANGED, REFUSED = "created", "updated", "deleted", "unchanged", "refused"
#: A deleted entry brought back (:meth:`KnowledgeBook.restore`).
RESTORED = "restored"


class KnowledgeInputError(ValueError):
    """An entry that cannot be stored as given (the message says which field and why)."""


#: Why a text with a lone surrogate (a JSON ``"\ud800"`` escape) is refused: UTF-8 cannot
#: hold it, so no store can (DuckDB failed with a 503, review F17).
UNPAIRED_SURROGATE = "the text holds an unpaired surrogate (a \\ud800-\\udfff escape alone): not text"
# Control characters a one-line title must not hold (a tab is let through): a NUL was
# stored and went on to .lore.md and prompts (review F17).
_TITLE_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def is_text(value: Any) -> bool:
    """Whether every string of the JSON ``value`` (keys too) is text UTF-8 can hold."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    except RecursionError:  # nested deeper than the encoder follows: string by string
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return False
            elif isinstance(item, dict):
                stack += [*item.keys(), *item.values()]
            elif isinstance(item, list):
                stack += item
    return True


@attrs.define
class WriteResult:
    """What one write did: ``status`` one of created, updated, deleted, unchanged, refused;
    the version written (or the one that stands); why it was refused."""

    status: str
    version: KnowledgeVersion | None = None
    reason: str = ""

    @property
    def changed(self) -> bool:
        return self.status in (CREATED, UPDATED, DELETED, RESTORED)


@attrs.define
class Provenance:
    """Who writes and from where: copied onto the version written."""

    author: str = AUTHOR_USER
    source_session: str | None = None
    source_ref: str | None = None
    worker_provider: str | None = None
    worker_model: str | None = None


def check_fields(category: str, title: str, content: str, scope: str, sensitivity: str) -> None:
    """Raise :class:`KnowledgeInputError` naming the first field that is not acceptable."""
    if category not in CATEGORIES:
        raise KnowledgeInputError(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
    if scope not in SCOPES:
        raise KnowledgeInputError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if sensitivity not in SENSITIVITIES:
        raise KnowledgeInputError(
            f"sensitivity must be one of {', '.join(SENSITIVITIES)}, got {sensitivity!r}"
        )
    if not title.strip() or "\n" in title.strip() or len(title) > MAX_TITLE_CHARS:
        raise KnowledgeInputError(f"title must be one line of 1-{MAX_TITLE_CHARS} characters")
    if not content.strip() or len(content) > MAX_CONTENT_CHARS:
        raise KnowledgeInputError(f"content must be 1-{MAX_CONTENT_CHARS} characters")
    if _TITLE_CONTROL.search(title):
        raise KnowledgeInputError("title must not hold a control character (NUL, escape, ...)")
    if "\x00" in content:
        raise KnowledgeInputError("content must not hold a NUL control character")
    if not is_text([title, content]):
        raise KnowledgeInputError(UNPAIRED_SURROGATE)
    if mask_secrets(title) != title or mask_secrets(content) != content:
        raise KnowledgeInputError("the entry holds what looks like a secret (a key or token): not stored")


class KnowledgeBook:
    """Writes knowledge versions to a store under the rules above."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        #: The time every version (and team decision) is stamped with.
        self.clock = clock
        #: Called with each version written (the prompt blocks and ``.lore.md`` follow).
        self.listeners: list[Callable[[KnowledgeVersion], Any]] = []

    @property
    def available(self) -> bool:
        """The store has the knowledge tier (without it every read and write here raises
        :class:`~lore_core.interfaces.TierUnavailable`)."""
        return has_tier(self.store, Tier.KNOWLEDGE)

    @property
    def knowledge_store(self) -> KnowledgeStore:
        return require_tier(self.store, KnowledgeStore)

    async def entries(self, project: str | None, *, include_global: bool = True) -> list[KnowledgeVersion]:
        return await self.knowledge_store.current_knowledge(project, include_global=include_global)

    async def get(self, logical_id: str) -> KnowledgeVersion | None:
        """The current version of an entry (a death certificate when deleted)."""
        versions = await self.knowledge_store.knowledge_versions(logical_id.removeprefix("k:"))
        return versions[-1] if versions else None

    async def by_title(self, project: str, title: str, scope: str = "project") -> KnowledgeVersion | None:
        """The alive entry of this scope (of ``project``, or a global one) with this
        normalised title. One project's writes never edit a global entry by title."""
        wanted = normalize_title(title)
        for entry in await self.entries(project):
            if entry.scope == scope and normalize_title(entry.title) == wanted:
                return entry
        return None

    async def create(
        self,
        *,
        project: str,
        category: str,
        title: str,
        content: str,
        scope: str = "project",
        sensitivity: str = "normal",
        provenance: Provenance | None = None,
        logical_id: str | None = None,
        may_edit: Callable[[KnowledgeVersion], bool] | None = None,
    ) -> WriteResult:
        """A new entry, or an edit of the alive entry with the same title, or a refusal.
        ``may_edit`` says whether this writer may edit that entry (the curator may not edit
        one its worker was not shown); without it, any."""
        provenance = provenance or Provenance()
        title, content = title.strip(), content.strip()
        try:
            check_fields(category, title, content, scope, sensitivity)
        except KnowledgeInputError as exc:
            return self._refused(title, str(exc), provenance)
        if logical_id is not None:
            tomb = await self.knowledge_store.knowledge_tombstone(project, logical_id=logical_id)
            if tomb is not None:
                return self._refused(title, f"k:{logical_id} was deleted ({_when(tomb)})", provenance, tomb)
        tomb = await self.knowledge_store.knowledge_tombstone(project, title=title)
        if tomb is not None:
            return self._refused(
                title,
                f"an entry titled {tomb.title!r} was deleted ({_when(tomb)}, k:{tomb.logical_id}); "
                f"a person brings it back with `lore knowledge restore k:{tomb.logical_id}`",
                provenance,
                tomb,
            )
        same = await self.by_title(project, title, scope)
        if same is not None and may_edit is not None and not may_edit(same):
            return self._refused(
                title, f"k:{same.logical_id} has that title and this writer may not edit it", provenance
            )
        if same is not None:
            # The same subject: an edit of that entry (whatever id the writer had in mind);
            # its sensitivity is never lowered this way.
            return await self.update(
                same.logical_id,
                category=category,
                content=content,
                sensitivity=max(sensitivity, same.sensitivity, key=SENSITIVITIES.index),
                provenance=provenance,
            )
        new_id = logical_id or new_logical_id()
        version = KnowledgeVersion(
            version_id=new_version_id(new_id, 1),
            logical_id=new_id,
            version=1,
            category=category,
            title=title,
            content=content,
            scope=scope,
            project="" if scope == "global" else project,
            sensitivity=sensitivity,
            created_at=self.clock(),
            created_by=provenance.author,
            updated_by=provenance.author,
            source_session=provenance.source_session,
            source_ref=provenance.source_ref,
            worker_provider=provenance.worker_provider,
            worker_model=provenance.worker_model,
        )
        return await self._write(CREATED, version)

    async def update(
        self,
        logical_id: str,
        *,
        provenance: Provenance | None = None,
        revive: bool = False,
        category: str | None = None,
        title: str | None = None,
        content: str | None = None,
        scope: str | None = None,
        sensitivity: str | None = None,
    ) -> WriteResult:
        """Append a version with the fields given (``None``: unchanged)."""
        provenance = provenance or Provenance()
        changes = {
            "category": category,
            "title": title,
            "content": content,
            "scope": scope,
            "sensitivity": sensitivity,
        }
        current = await self.get(logical_id)
        if current is None:
            return self._refused(logical_id, f"no entry k:{logical_id.removeprefix('k:')}", provenance)
        if current.is_deleted and not revive:
            return self._refused(
                current.title, f"k:{current.logical_id} was deleted ({_when(current)})", provenance
            )
        fields: dict[str, Any] = {
            k: (v.strip() if isinstance(v, str) else v) for k, v in changes.items() if v is not None
        }
        merged = attrs.evolve(current, **fields)  # type: ignore[arg-type]
        try:
            check_fields(merged.category, merged.title, merged.content, merged.scope, merged.sensitivity)
        except KnowledgeInputError as exc:
            return self._refused(current.title, str(exc), provenance)
        if not current.is_deleted and all(getattr(current, k) == v for k, v in fields.items()):
            return WriteResult(UNCHANGED, current)
        if normalize_title(merged.title) != normalize_title(current.title):
            project = current.project
            tomb = await self.knowledge_store.knowledge_tombstone(project, title=merged.title)
            if tomb is not None and tomb.logical_id != current.logical_id:
                return self._refused(
                    merged.title, f"an entry titled {tomb.title!r} was deleted ({_when(tomb)})", provenance
                )
            other = await self.by_title(project, merged.title, merged.scope)
            if other is not None and other.logical_id != current.logical_id:
                return self._refused(merged.title, f"k:{other.logical_id} has that title already", provenance)
        if "scope" in fields:
            home = current.project
            if merged.scope == "project" and not home:
                # Back to the project it was made global from, if it ever had one.
                history = await self.knowledge_store.knowledge_versions(current.logical_id)
                home = next((v.project for v in reversed(history) if v.project), "")
                if not home:
                    return self._refused(
                        current.title,
                        "this global entry never belonged to a project: add it to the project instead",
                        provenance,
                    )
            fields["project"] = "" if merged.scope == "global" else home
        version = next_version(
            current, updated_by=provenance.author, at=self.clock(), **fields, **_prov(provenance)
        )
        return await self._write(UPDATED, version)

    async def adopt(self, logical_id: str, *, provenance: Provenance | None = None) -> WriteResult:
        """A person approves an entry as it stands: a version with the same fields, written by
        the user. A preference the curator or an import wrote is shown to the model as a
        suggestion, not an instruction, until a person adopts or edits it (security review
        F9). Unchanged when the user wrote the current version already."""
        provenance = attrs.evolve(provenance or Provenance(), author=AUTHOR_USER)
        current = await self.get(logical_id)
        if current is None:
            return self._refused(logical_id, f"no entry k:{logical_id.removeprefix('k:')}", provenance)
        if current.is_deleted:
            return self._refused(
                current.title, f"k:{current.logical_id} was deleted ({_when(current)})", provenance
            )
        if current.updated_by == AUTHOR_USER:
            return WriteResult(UNCHANGED, current)
        version = next_version(current, updated_by=AUTHOR_USER, at=self.clock(), **_prov(provenance))
        return await self._write(UPDATED, version)

    async def delete(self, logical_id: str, *, provenance: Provenance | None = None) -> WriteResult:
        """Append a death certificate."""
        provenance = provenance or Provenance()
        current = await self.get(logical_id)
        if current is None:
            return self._refused(logical_id, f"no entry k:{logical_id.removeprefix('k:')}", provenance)
        if current.is_deleted:
            return WriteResult(UNCHANGED, current)
        version = next_version(
            current, updated_by=provenance.author, at=self.clock(), deleted=True, **_prov(provenance)
        )
        return await self._write(DELETED, version)

    async def restore(self, logical_id: str, *, provenance: Provenance | None = None) -> WriteResult:
        """Bring a deleted entry back: a new version of it with the fields of its last version
        before the death certificate; every version stays in its history, the certificate
        included. Unchanged when the entry is not deleted; refused when an alive entry of the
        same scope has its title now (one title names one entry: edit or delete that one
        first). A person's act: the curator and the imports never restore."""
        provenance = provenance or Provenance()
        versions = await self.knowledge_store.knowledge_versions(logical_id.strip().removeprefix("k:"))
        if not versions:
            return self._refused(logical_id, f"no entry k:{logical_id.removeprefix('k:')}", provenance)
        current = versions[-1]
        if not current.is_deleted:
            return WriteResult(UNCHANGED, current)
        before = next((v for v in reversed(versions) if not v.is_deleted), None)
        if before is None:
            return self._refused(
                current.title, f"k:{current.logical_id} has no version to restore", provenance, current
            )
        other = await self.by_title(before.project, before.title, before.scope)
        if other is not None and other.logical_id != current.logical_id:
            return self._refused(
                before.title,
                f"k:{other.logical_id} has the title {before.title!r} now: edit or delete it first",
                provenance,
                current,
            )
        fields = {name: getattr(before, name) for name in _RESTORED_FIELDS}
        version = next_version(
            current, updated_by=provenance.author, at=self.clock(), **fields, **_prov(provenance)
        )
        return await self._write(RESTORED, version)

    async def reinforce(self, logical_ids: Sequence[str], amount: float) -> None:
        if logical_ids:
            await self.knowledge_store.reinforce_knowledge(list(logical_ids), amount, self.clock())

    async def _write(self, status: str, version: KnowledgeVersion) -> WriteResult:
        try:
            written = await self.knowledge_store.write_knowledge(version)
        except KnowledgeConflict as exc:
            written, reason = False, str(exc)
        else:
            reason = f"k:{version.logical_id} version {version.version} exists already"
        if not written:
            # Another edit of the same version landed first (its version id is this one's).
            return WriteResult(REFUSED, None, f"changed by someone else meanwhile ({reason}); try again")
        version = attrs.evolve(version, is_current=True)
        log.info("knowledge %s: k:%s %r (%s)", status, version.logical_id, version.title, version.updated_by)
        await mark_changed(self.store)
        for listener in self.listeners:
            try:
                listener(version)
            except Exception:
                log.exception("a knowledge listener failed")
        return WriteResult(status, version)

    def _refused(
        self, title: str, reason: str, provenance: Provenance, standing: KnowledgeVersion | None = None
    ) -> WriteResult:
        # The title masked: a refusal for a secret must not write that secret to the log.
        log.warning(
            "knowledge refused (%s): %r: %s",
            provenance.source_ref or provenance.author,
            mask_secrets(title),
            reason,
        )
        return WriteResult(REFUSED, standing, reason)


#: What a restore takes from the last version before the death certificate.
_RESTORED_FIELDS = ("category", "title", "content", "scope", "project", "sensitivity")


def entry_json(version: KnowledgeVersion, metric: KnowledgeMetric | None = None) -> dict[str, Any]:
    """An entry as the local API and ``lore knowledge --json`` show it."""
    out = attrs.asdict(version)
    out["id"] = version.ref
    if metric is not None:
        out["confidence"] = round(metric.confidence, 4)
        out["last_reinforced_at"] = metric.last_reinforced_at
    return out


def _prov(provenance: Provenance) -> dict[str, Any]:
    return {
        "source_session": provenance.source_session,
        "source_ref": provenance.source_ref,
        "worker_provider": provenance.worker_provider,
        "worker_model": provenance.worker_model,
    }


def _when(version: KnowledgeVersion) -> str:
    at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(version.created_at))
    return f"by {version.updated_by} on {at}"
