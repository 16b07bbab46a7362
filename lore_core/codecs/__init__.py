"""The built-in wire codecs: Anthropic Messages, OpenAI Chat Completions, OpenAI Responses.

Each module is self-contained and implements :class:`lore_core.interfaces.Codec`; they are
registered through the same hook as third-party codecs (see ``lore_core.builtin.codecs``).
"""

from __future__ import annotations

import json
from typing import Any


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


def sse_event(event: str | None, data: Any) -> bytes:
    """One Server-Sent Event (``event:`` line optional), JSON-encoding ``data``."""
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def new_id(prefix: str) -> str:
    import uuid

    return prefix + uuid.uuid4().hex[:24]
