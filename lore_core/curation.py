"""What curators consume and produce (the records :mod:`lore_core.interfaces`' curator kinds
name), independent of the store's record types.

The store's records are adapted to :class:`DistillInput` (a message) and
:class:`ObservationInput` (a stored distillation); an observer or a reflector returns a
:class:`Distillation` whose :class:`Provenance` says where it came from; a knowledge curator
returns a :class:`Curation` (operations on entries, and entities it named).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from lore_core.model import OTHER, Block, Usage


@attrs.define
class DistillInput:
    """One message to distil: its stable id, role, wall-clock time (epoch seconds, UTC) and
    wire-neutral content blocks."""

    id: str
    role: str
    timestamp: float
    blocks: list[Block] = attrs.field(factory=list)

    @classmethod
    def from_block_dicts(
        cls, id: str, role: str, timestamp: float, blocks: Iterable[Mapping[str, Any]]
    ) -> DistillInput:
        """Build from blocks stored as dicts (``type``, ``text``, ``tool_name``,
        ``tool_call_id``, ``tool_input``, ``is_error``), the shape the store keeps."""
        return cls(
            id=id,
            role=role,
            timestamp=timestamp,
            blocks=[
                Block(
                    type=str(b.get("type", OTHER)),
                    text=str(b.get("text") or ""),
                    tool_name=b.get("tool_name"),
                    tool_call_id=b.get("tool_call_id"),
                    tool_input=b.get("tool_input"),
                    is_error=bool(b.get("is_error")),
                )
                for b in blocks
            ],
        )

    @property
    def raw_text(self) -> str:
        """The content as the client sent it (texts, tool inputs, full tool outputs), for
        measuring what a distillation saves."""
        parts: list[str] = []
        for block in self.blocks:
            if block.text:
                parts.append(block.text)
            if block.tool_input is not None:
                parts.append(str(block.tool_input))
        return "\n".join(parts)


@attrs.define
class ObservationInput:
    """One stored distillation handed to the reflector."""

    id: str
    text: str
    # Time range of the messages it was distilled from (epoch seconds, UTC).
    start: float = 0.0
    end: float = 0.0
    generation: int = 0


@attrs.define
class Provenance:
    """Where a distillation came from and what it cost."""

    # Message ids (gen-0) or distillation ids (gen-1) it was made from, in order.
    source_ids: list[str]
    generation: int
    # "llm" or "extractive".
    method: str
    start: float = 0.0
    end: float = 0.0
    # Estimated tokens of the source as sent (full tool outputs), of the rendered input the
    # observer saw, and of the output.
    source_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    # source_tokens / output_tokens: how much prompt space the distillation saves.
    compression_ratio: float = 0.0
    worker_provider: str | None = None
    worker_model: str | None = None
    worker_api: str | None = None
    # Usage and cost as the worker reported them (zeros for the extractive observer).
    usage: Usage = attrs.field(factory=Usage)
    cost: float = 0.0
    # Why the extractive observer was used instead of the worker, when it was a fallback.
    fallback_reason: str | None = None
    warnings: list[str] = attrs.field(factory=list)


@attrs.define
class Distillation:
    text: str
    provenance: Provenance


@attrs.define
class Operation:
    op: str
    logical_id: str | None = None
    category: str | None = None
    title: str | None = None
    content: str | None = None
    rejected: str | None = None
    reason: str | None = None
    source: str | None = None


@attrs.define
class ProposedRelation:
    predicate: str
    #: The target entity's name, as the curator gave it.
    target: str


@attrs.define
class ProposedEntity:
    """An entity the curator named (validated field by field; written by the caller)."""

    name: str
    kind: str = "other"
    aliases: list[str] = attrs.field(factory=list)
    relations: list[ProposedRelation] = attrs.field(factory=list)


@attrs.define
class Curation:
    """The operations of one call, what was dropped, and which worker answered."""

    operations: list[Operation]
    warnings: list[str]
    worker_provider: str | None = None
    worker_model: str | None = None
    #: The entities of the answer, and how many of its entity items (or their aliases and
    #: relations) were not usable.
    entities: list[ProposedEntity] = attrs.field(factory=list)
    entities_skipped: int = 0
    #: The ids of the entries the worker was shown; None: every entry it was given.
    shown_ids: frozenset[str] | None = None
