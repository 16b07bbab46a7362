"""Wire-neutral views of an exchange: requests, messages, content blocks, usage.

The views are deliberately lossless: every message and block keeps the JSON it was parsed
from (``raw``), so a codec can render a view back to the wire without dropping fields, roles
or item types it has never seen. Parse leniently on the wire; anything unrecognised becomes a
block of type ``"other"`` that still carries its raw JSON.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

# Block types every codec maps onto. Anything else keeps its wire type in ``wire_type``.
TEXT = "text"
THINKING = "thinking"
TOOL_CALL = "tool_call"
TOOL_RESULT = "tool_result"
IMAGE = "image"
OTHER = "other"


@attrs.define
class Block:
    """One piece of message content: text, a tool call, a tool result, ..."""

    type: str
    text: str = ""
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_input: Any = None
    is_error: bool = False
    wire_type: str | None = None
    raw: Any = None


@attrs.define
class Message:
    """One message (or Responses input item) of a conversation, in wire order."""

    role: str
    blocks: list[Block] = attrs.field(factory=list)
    raw: Any = None
    # Set on messages a prompt layer made up (distilled prefix, recall restores, ...): they
    # have no raw JSON and the codec renders them from ``blocks``.
    synthetic: bool = False

    @property
    def text(self) -> str:
        return "\n".join(b.text for b in self.blocks if b.text)


@attrs.define
class Usage:
    """Token usage as the upstream reported it (zeros when it reported nothing)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        # Written out: ``attrs.asdict`` cost 6 us per stored answer on the request path.
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


@attrs.define
class RequestView:
    """A parsed request of one wire API.

    ``raw`` is the parsed JSON body and stays the source of truth for every field the
    pipeline does not own; ``body`` is the exact bytes the client sent (decoded from any
    content-encoding). While ``modified`` is false the proxy forwards ``body`` untouched.
    """

    api: str
    raw: dict[str, Any]
    body: bytes
    model: str | None = None
    stream: bool = False
    system: list[Block] = attrs.field(factory=list)
    messages: list[Message] = attrs.field(factory=list)
    tools: list[Any] = attrs.field(factory=list)
    modified: bool = False


@attrs.define
class AssistantMessage:
    """The assistant's answer, assembled from a JSON response or from a stream's events."""

    blocks: list[Block] = attrs.field(factory=list)
    usage: Usage = attrs.field(factory=Usage)
    stop_reason: str | None = None
    model: str | None = None
    response_id: str | None = None
    # False when the stream ended before the API's terminal event (client disconnect,
    # upstream cut, error event).
    complete: bool = False
    error: str | None = None

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.blocks if b.type == TEXT)


@attrs.define
class Exchange:
    """Everything the later stages need about one proxied request/response pair."""

    api: str
    path: str
    request: RequestView
    harness: str
    session_id: str
    project: str
    upstream: str
    status: int = 0
    response: AssistantMessage | None = None
    started_at: float = attrs.field(factory=time.time)
    finished_at: float | None = None
    # True when the client went away before the response finished.
    client_disconnected: bool = False
    # Conversation positions the store must not keep (``/lore:amnesia``): ``(start, end)``
    # ranges, ``end`` exclusive or ``None`` for open-ended.
    forget_positions: list[tuple[int, int | None]] = attrs.field(factory=list)
    #: How ``request`` was composed: its :class:`~lore_core.interfaces.CompositionContext`
    #: (``None``: not composed by the gateway, e.g. a recall follow-up).
    composed: Any = None
    #: The context layer (0-4, docs/context.md) the request went upstream at, taken from its
    #: composition when it finishes (``None``: not composed by the gateway).
    context_layer: int | None = None
    #: The request continues a conversation the provider keeps: it carries only new items.
    server_state: bool = False
