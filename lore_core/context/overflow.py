"""Overflow recovery: recognise an upstream's "the prompt is too long" answer and pick the
layer the session must start from next (docs/context.md, ``forceMinLayer``).

Anthropic says ``prompt is too long: 208310 tokens > 200000 maximum`` (400,
``invalid_request_error``), or 413 ``request_too_large`` for a body past its byte limit;
OpenAI says ``context_length_exceeded`` (Chat Completions and Responses), usually with
"maximum context length is N tokens ... resulted in M tokens".
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

#: Overshoot (actual / limit - 1) from which layer 2 is not expected to be enough.
LAYER3_OVERSHOOT = 0.25
MAX_LAYER = 4
#: The statuses an overflow comes with.
OVERFLOW_STATUSES = frozenset({400, 413, 422})

_ANTHROPIC = re.compile(r"prompt is too long:\s*(\d+)\s*tokens\s*>\s*(\d+)", re.I)
_OPENAI = re.compile(
    r"maximum context length is\s*(\d+)\s*tokens.*?resulted in\s*(\d+)\s*tokens", re.I | re.S
)
_OVERFLOW_WORDS = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|exceeds the context window|"
    r"maximum context length|input is too long|too many (input )?tokens",
    re.I,
)


@attrs.frozen
class Overflow:
    """An upstream refused a prompt as too long. ``tokens``/``limit`` when it said them."""

    message: str
    tokens: int | None = None
    limit: int | None = None

    @property
    def overshoot(self) -> float | None:
        if self.tokens and self.limit:
            return max(self.tokens / self.limit - 1.0, 0.0)
        return None


def _error_message(payload: Any) -> tuple[str, str]:
    """(message, code/type) of an Anthropic or OpenAI error body."""
    if not isinstance(payload, dict):
        return "", ""
    error = payload.get("error")
    if isinstance(error, dict):
        code = str(error.get("code") or error.get("type") or "")
        return str(error.get("message") or ""), code
    if isinstance(error, str):
        return error, ""
    return str(payload.get("message") or ""), str(payload.get("code") or payload.get("type") or "")


def parse_overflow(status: int, body: bytes) -> Overflow | None:
    """The overflow an error response reports, or ``None`` for any other answer."""
    if status not in OVERFLOW_STATUSES:
        return None
    try:
        message, code = _error_message(json.loads(body))
    except (ValueError, UnicodeDecodeError):
        message, code = body[:2000].decode("utf-8", "replace"), ""
    if status == 413 and code == "request_too_large":
        return Overflow(message or "request too large")
    return overflow_in_error(message, code)


def overflow_in_stream_error(message: str | None) -> Overflow | None:
    """The overflow a failed stream reports in its error message (OpenAI's Responses API
    answers an input past the context window with HTTP 200, then ``response.failed``)."""
    if not message or not _OVERFLOW_WORDS.search(message):
        return None
    if match := _ANTHROPIC.search(message):
        return Overflow(message, tokens=int(match.group(1)), limit=int(match.group(2)))
    if match := _OPENAI.search(message):
        return Overflow(message, tokens=int(match.group(2)), limit=int(match.group(1)))
    return Overflow(message)


def overflow_in_failed_response(data: str) -> Overflow | None:
    """The overflow a Responses ``response.failed`` event reports (``data`` is the event's
    JSON; the error is its ``response.error``), or ``None`` for any other failure."""
    try:
        payload = json.loads(data)
    except ValueError:
        return None
    response = payload.get("response") if isinstance(payload, dict) else None
    error = response.get("error") if isinstance(response, dict) else None
    if not isinstance(error, dict):
        return None
    return overflow_in_error(str(error.get("message") or ""), str(error.get("code") or ""))


def overflow_in_error(message: str, code: str) -> Overflow | None:
    """An error's message and code as an overflow: OpenAI's code says so whatever the
    message; otherwise the message must (with the numbers when it gives them)."""
    if code == "context_length_exceeded":
        return overflow_in_stream_error(message) or Overflow(message or code)
    return overflow_in_stream_error(message)


def next_min_layer(current: int, overflow: Overflow) -> int:
    """Layer 2 for a small overshoot, 3 for a large (or unknown-but-repeated) one; a session
    that overflows again at or above that level goes one layer further, up to 4."""
    overshoot = overflow.overshoot
    level = 3 if overshoot is not None and overshoot >= LAYER3_OVERSHOOT else 2
    if current >= level:
        level = current + 1
    return min(level, MAX_LAYER)
