"""The knowledge curator (docs/knowledge.md, curation): recent observation logs and the
project's entries in, create / update / delete / reconfirm operations out (prompt:
``prompts/curator.md``), through the worker model.

The answer is validated before anything is written: one JSON object with an
``operations`` list; each operation must name a known kind and carry its fields; a decision
must name the alternative it rejected; ``update``, ``delete`` and ``reconfirm`` must name an
entry that was shown to the model. What fails a check is dropped with a warning, the rest
goes on. Without a worker nothing is invented: :class:`~lore_core.worker.client.
WorkerUnavailable` propagates and the caller skips the run.

Applying the operations is :mod:`lore_core.knowledge.curation`'s job (through the book).

The answer may also hold an ``entities`` list (name, kind, aliases, relations by name),
parsed leniently: an item that is not usable is skipped and counted, never an error; what
is kept is written through :class:`~lore_core.knowledge.entities.EntityBook` by the caller.
The known entities of the project (never restricted ones) are listed in the prompt by name,
so the curator names them as they are known.

The worker is often a hosted model: of the entries it is given, only those
:func:`shown_to_worker` keeps reach its prompt (never a restricted one; a sensitive one only
with ``knowledge.workerSeesSensitive``), and only those can be named by its operations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from lore_core.context.framing import worker_data
from lore_core.curation import Curation, Operation, ProposedEntity, ProposedRelation
from lore_core.interfaces import KnowledgeCurator
from lore_core.knowledge.entities import EntityInputError, check_name, check_predicate
from lore_core.knowledge.prompts import load_prompt
from lore_core.storage.entities import ENTITY_KINDS, Entity
from lore_core.storage.knowledge import CATEGORIES, KnowledgeVersion
from lore_core.storage.records import StoredDistillation
from lore_core.worker.client import WorkerClient, WorkerError

OPS = ("create", "update", "delete", "reconfirm")
#: Observations shown per call, newest kept (a long backlog is curated over several runs).
MAX_OBSERVATION_CHARS = 60_000
#: Entities one answer may propose (the rest are skipped and counted), and known entities
#: listed in the prompt (in name order).
MAX_PROPOSED_ENTITIES = 50
MAX_PROMPT_ENTITIES = 200
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n```\s*$", re.S)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts > 0 else ""


def shown_to_worker(
    entries: Sequence[KnowledgeVersion], *, include_sensitive: bool = False
) -> list[KnowledgeVersion]:
    """The entries a worker model may see: ``normal`` ones, and ``sensitive`` ones when
    ``include_sensitive`` (``knowledge.workerSeesSensitive``); never ``restricted`` ones (nor a
    sensitivity this code does not know)."""
    allowed = ("normal", "sensitive") if include_sensitive else ("normal",)
    return [e for e in entries if e.sensitivity in allowed]


def curator_prompt(
    observations: Sequence[StoredDistillation],
    entries: Sequence[KnowledgeVersion],
    entities: Sequence[Entity] = (),
) -> str:
    """The user turn: the existing entries (with ids), the known entities (when there are
    any), then the observation logs, oldest first."""
    parts = ["<existing_entries>"]
    for entry in entries:
        parts.append(f'<entry id="{entry.ref}" category="{entry.category}" title={json.dumps(entry.title)}>')
        parts.append(worker_data(entry.content.strip()))
        parts.append("</entry>")
    if not entries:
        parts.append("(none yet)")
    parts.append("</existing_entries>\n")
    shown = [e for e in entities if e.sensitivity != "restricted" and e.merged_into is None]
    if shown:
        parts.append("<known_entities>")
        for entity in shown[:MAX_PROMPT_ENTITIES]:
            aliases = f" (aliases: {', '.join(entity.aliases)})" if entity.aliases else ""
            parts.append(worker_data(f"- {entity.name} [{entity.kind}]{aliases}"))
        parts.append("</known_entities>\n")
    parts.append("<observations>")
    chosen: list[StoredDistillation] = []
    used = 0
    for obs in sorted(observations, key=lambda o: o.end or o.created_at, reverse=True):
        used += len(obs.text)
        if chosen and used > MAX_OBSERVATION_CHARS:
            break
        chosen.append(obs)
    for obs in reversed(chosen):
        parts.append(f'<observation id="d:{obs.id}" to="{_iso(obs.end or obs.created_at)}">')
        parts.append(worker_data(obs.text.strip()))
        parts.append("</observation>")
    parts.append("</observations>")
    return "\n".join(parts)


def answer_json(text: str) -> Any:
    """The JSON a worker answered with: the whole text, a fenced block, or the outermost
    ``{...}`` in prose around it; ``None`` when there is none."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        return json.loads(body)
    except ValueError:
        start, end = body.find("{"), body.rfind("}")
        try:
            return json.loads(body[start : end + 1]) if start >= 0 < end else None
        except ValueError:
            return None


def parse_operations(text: str, known_ids: set[str]) -> tuple[list[Operation], list[str]]:
    """The valid operations of an answer, and a warning for each one dropped."""
    raw = answer_json(text)
    if not isinstance(raw, dict) or not isinstance(raw.get("operations"), list):
        raise WorkerError('the answer is not a JSON object with an "operations" list', 200)
    ops: list[Operation] = []
    warnings: list[str] = []
    for index, item in enumerate(raw["operations"]):
        problem, op = _operation(item, known_ids)
        if problem:
            warnings.append(f"operation {index}: {problem}")
        elif op is not None:
            ops.append(op)
    return ops, warnings


def _text(item: dict[str, Any], key: str) -> str | None:
    value = item.get(key)
    return value.strip() if isinstance(value, str) and value.strip() else None


def _operation(item: Any, known_ids: set[str]) -> tuple[str, Operation | None]:
    if not isinstance(item, dict):
        return "not an object", None
    kind = item.get("op")
    if kind not in OPS:
        return f"unknown op {kind!r}", None
    op = Operation(
        op=kind,
        logical_id=(_text(item, "id") or "").removeprefix("k:") or None,
        category=_text(item, "category"),
        title=_text(item, "title"),
        content=_text(item, "content"),
        rejected=_text(item, "rejected"),
        reason=_text(item, "reason"),
        source=_text(item, "source"),
    )
    if op.category is not None and op.category not in CATEGORIES:
        return f"unknown category {op.category!r}", None
    if kind == "create":
        if not (op.category and op.title and op.content):
            return "create needs category, title and content", None
        if op.category == "decision":
            if not op.rejected:
                return f"decision {op.title!r} names no rejected alternative", None
            if op.rejected.casefold() not in op.content.casefold():
                op.content = f"{op.content}\nRejected: {op.rejected}"
        return "", op
    if op.logical_id is None or op.logical_id not in known_ids:
        return f"{kind} of an entry that was not shown ({item.get('id')!r})", None
    if kind == "update" and not (op.title or op.content or op.category):
        return "update changes nothing", None
    return "", op


def parse_entities(raw: Any) -> tuple[list[ProposedEntity], int, list[str]]:
    """The usable entities of an answer's ``entities`` value (absent: none), how many items,
    aliases and relations were skipped, and a warning for each. Never raises: a bad item
    costs that item only."""
    if raw is None:
        return [], 0, []
    if not isinstance(raw, list):
        return [], 1, ["entities is not a list"]
    out: list[ProposedEntity] = []
    skipped = 0
    warnings: list[str] = []
    for index, item in enumerate(raw):
        if len(out) >= MAX_PROPOSED_ENTITIES:
            skipped += len(raw) - index
            warnings.append(f"more than {MAX_PROPOSED_ENTITIES} entities: the rest skipped")
            break
        if not isinstance(item, dict):
            skipped += 1
            warnings.append(f"entity {index}: not an object")
            continue
        try:
            name = check_name(item.get("name"))
        except EntityInputError as exc:
            skipped += 1
            warnings.append(f"entity {index}: {exc}")
            continue
        kind = item.get("kind")
        entity = ProposedEntity(name, kind if kind in ENTITY_KINDS else "other")
        aliases = item.get("aliases")
        for alias in aliases if isinstance(aliases, list) else []:
            try:
                entity.aliases.append(check_name(alias, "alias"))
            except EntityInputError as exc:
                skipped += 1
                warnings.append(f"entity {name!r}: {exc}")
        relations = item.get("relations")
        for relation in relations if isinstance(relations, list) else []:
            try:
                if not isinstance(relation, dict):
                    raise EntityInputError("a relation must be an object")
                predicate = check_predicate(relation.get("predicate"))
                target = check_name(relation.get("target"), "relation target")
            except EntityInputError as exc:
                skipped += 1
                warnings.append(f"entity {name!r}: {exc}")
                continue
            entity.relations.append(ProposedRelation(predicate, target))
        out.append(entity)
    return out, skipped, warnings


class LLMKnowledgeCurator(KnowledgeCurator):
    name = "knowledge"
    kind = "knowledge"

    def __init__(self, worker: WorkerClient, *, include_sensitive: bool = False) -> None:
        self.worker = worker
        #: ``knowledge.workerSeesSensitive``: show sensitive entries to the worker.
        self.include_sensitive = include_sensitive

    async def curate(
        self,
        observations: Sequence[StoredDistillation],
        entries: Sequence[KnowledgeVersion],
        *,
        session_id: str | None = None,
        entities: Sequence[Entity] = (),
    ) -> Curation:
        shown = shown_to_worker(entries, include_sensitive=self.include_sensitive)
        # The same rule as for entries: what a hosted worker may read of the names.
        allowed = ("normal", "sensitive") if self.include_sensitive else ("normal",)
        known = [e for e in entities if e.sensitivity in allowed]
        prompt = curator_prompt(observations, shown, known)
        result = await self.worker.complete(
            load_prompt("curator"), prompt, session_id=session_id, purpose="curator"
        )
        ops, warnings = parse_operations(result.text, {e.logical_id for e in shown})
        raw = answer_json(result.text)
        proposed, skipped, entity_warnings = parse_entities(
            raw.get("entities") if isinstance(raw, dict) else None
        )
        return Curation(
            ops,
            warnings + entity_warnings,
            result.provider,
            result.model,
            entities=proposed,
            entities_skipped=skipped,
            shown_ids=frozenset(e.logical_id for e in shown),
        )
