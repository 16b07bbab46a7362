"""The built-in wire codecs: Anthropic Messages, OpenAI Chat Completions, OpenAI Responses.

Each module is self-contained and implements :class:`lore_core.interfaces.Codec`; they are
registered through the same hook as third-party codecs (see ``lore_core.builtin.codecs``).
"""

from __future__ import annotations

import json
from typing import Any

from lore_core.model import AssistantMessage, Block
from lore_core.wire.jsonbody import clean_text, replace_lone_surrogates


def loads_or(value: Any, default: Any = None) -> Any:
    """Parse a JSON string field leniently (tool arguments can be cut off mid-stream)."""
    if not isinstance(value, str):
        return value if value is not None else default
    if not value:
        return default
    try:
        return json.loads(value)
    except ValueError:
        return value


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def as_str(value: Any) -> str | None:
    """A string field of a response, ``None`` when it is anything else (a provider, or a
    proxy in between, may echo the client's ``"model": 5``)."""
    return value if isinstance(value, str) else None


def as_list(value: Any) -> list[Any]:
    """A request's array field; any other JSON value reads as absent, like a missing field:
    the request is the provider's to judge, the gateway only reads what it can."""
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    """An object field of an event or response; anything else reads as empty (an upstream's
    stream is relayed as it came, whatever its shape: only the record of it is lost)."""
    return value if isinstance(value, dict) else {}


def well_formed_block(block: Block) -> Block:
    """``block`` (changed in place) with every field of the type :class:`Block` declares:
    a field the wire gave as another JSON type (a tool call id that is an object, a name
    that is a number) reads as absent, and each lone surrogate in a text becomes U+FFFD.
    Whatever the client or the provider sent, what the gateway records, hashes and composes
    is well-typed; the bytes relayed stay theirs. (A request's JSON had its lone surrogates
    replaced when it was read; an answer's are replaced by :func:`well_formed`.)"""
    text = block.text
    block.text = (text if text.isascii() else clean_text(text)) if isinstance(text, str) else ""
    for name in ("tool_name", "tool_call_id", "wire_type"):
        value = getattr(block, name)
        if value is not None:
            setattr(block, name, clean_text(value) if isinstance(value, str) else None)
    if block.is_error is not False:
        block.is_error = block.is_error is True
    return block


def well_formed(message: AssistantMessage) -> AssistantMessage:
    """``message`` (changed in place) with its blocks :func:`well_formed_block` and its other
    fields strings or ``None``. A model's answer cut mid-emoji arrives as ``"\\ud83d"``;
    UTF-8 cannot hold that, so the journal and the store could not write the exchange, and
    the client resends the answer next turn with the same replacement made
    (:func:`lore_core.pipeline.parse.read_json_body`)."""
    for block in message.blocks:
        well_formed_block(block)
        block.tool_input = replace_lone_surrogates(block.tool_input)
        block.raw = replace_lone_surrogates(block.raw)
    for name in ("stop_reason", "model", "response_id", "error"):
        value = getattr(message, name)
        if value is not None:
            setattr(message, name, clean_text(value) if isinstance(value, str) else None)
    return message


def status_error_kind(status: int) -> str:
    """A short, stable word for an HTTP status, used in error bodies."""
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        415: "invalid_request_error",
        429: "rate_limit_error",
    }.get(status, "invalid_request_error" if status < 500 else "api_error")


def new_id(prefix: str) -> str:
    import uuid

    return prefix + uuid.uuid4().hex[:24]
