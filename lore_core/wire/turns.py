"""What the wire packages' turn editors and recall shapes share: usage scaling arithmetic,
SSE events with their raw bytes, and the text helpers a recall restore matches by.

Nothing here knows an API: each ``lore_core.wire.<api>`` package brings the shapes.
"""

from __future__ import annotations

import json
from typing import Any

from lore_core.model import TEXT, TOOL_CALL, Message

#: How every marker line begins (see :func:`lore_core.recall.tool.marker_text`).
MARKER_PREFIXES = ("Searching memory for ", "Opening memory ")


def scale_factor(prompt_tokens: int, context_limit: int, share: float) -> float | None:
    """How much to scale the input side of the usage the client sees, or ``None`` to leave
    it: a harness compacts its conversation itself past a threshold of its context window,
    which the gateway's composed prompt would reach long before the client's does."""
    if share <= 0 or share >= 1 or context_limit <= 0:
        return None
    cap = int(context_limit * share)
    if prompt_tokens <= cap or prompt_tokens <= 0:
        return None
    return cap / prompt_tokens


def as_count(value: Any) -> int:
    """A token count field; anything that is not an integer reads as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def scaled(value: Any, factor: float) -> Any:
    return int(value * factor) if isinstance(value, int) and not isinstance(value, bool) else value


def sse(event: str | None, data: Any) -> bytes:
    """One SSE event as an editor writes it (non-ASCII kept as is, like the providers)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


class EventSplitter:
    """Bytes in, ``(event name, data, raw bytes)`` out: the raw bytes are relayed unchanged
    when an event needs no rewriting."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[str, str, bytes]]:
        buffer = self._buffer + chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        events = []
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            raw, buffer = buffer[: end + 2], buffer[end + 2 :]
            name, data = "", []
            for line in raw.decode("utf-8", errors="replace").split("\n"):
                if not line or line.startswith(":"):
                    continue
                key, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if key == "event":
                    name = value
                elif key == "data":
                    data.append(value)
            # A comment-only block (a keep-alive) is relayed as it came.
            events.append((name, "\n".join(data), raw))
        self._buffer = buffer
        return events


def norm(text: str) -> str:
    return " ".join(text.split())


def text_of(msg: Message) -> str:
    return "\n".join(b.text for b in msg.blocks if b.type == TEXT)


def call_ids(msg: Message) -> list[str]:
    return [b.tool_call_id for b in msg.blocks if b.type == TOOL_CALL and b.tool_call_id]


def markers_end(msg: Message, record: dict[str, Any]) -> bool:
    """Whether ``msg``'s text holds a loop record's markers in order, followed by the text
    the client saw after them (the record's ``tail``)."""
    text = text_of(msg)
    position = 0
    for marker in record.get("markers") or []:
        found = text.find(marker, position)
        if found < 0:
            return False
        position = found + len(marker)
    tail = record.get("tail") or ""
    return not tail or norm(text[position:]).startswith(tail[:60])
