"""Reading streamed answers in linear time and bounded memory: an incremental Server-Sent
Events parser (bytes in, in any chunking; events out) and :class:`AnswerParts`, where an
assembler collects an answer's deltas.

Both have caps (module constants, read when an object is made): past them the relay still
sends the client every byte unchanged; only what the gateway parses and keeps for storage
stops, and the stored answer says it was cut.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Hashable, Iterator
from typing import Any

log = logging.getLogger("lore.wire")

#: Largest SSE event (its lines together) buffered for parsing; a larger one is dropped
#: from what the gateway reads (the client still gets it). The largest legitimate event is
#: a Responses API terminal event carrying the whole answer.
MAX_EVENT_BYTES = 16 * 1024 * 1024

#: Characters of one answer (text, tool-call arguments, thinking, together) an assembler
#: keeps for storage; the rest is relayed but not kept.
MAX_ANSWER_CHARS = 16 * 1024 * 1024

#: Ends a stored answer that was cut at a cap.
TRUNCATED_NOTE = "\n[lore: the answer was longer than the gateway keeps; the rest was relayed, not stored]"


def sse_event(event: str | None, data: Any, *, ensure_ascii: bool = True) -> bytes:
    """One Server-Sent Event (``event:`` line optional), JSON-encoding ``data`` (a string is
    sent as it is). The turn editors keep non-ASCII as is (``ensure_ascii=False``), as the
    providers whose events they rewrite do."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=ensure_ascii)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


class SSEParser:
    """Feed bytes as they arrive; get back complete ``(event, data)`` pairs.

    Follows the SSE framing rules that matter for LLM APIs: events end at a blank line,
    ``data:`` lines are joined with newlines, lines may end in ``\\n``, ``\\r\\n`` or ``\\r``,
    comments (``:``) are ignored. An event split across chunks is held until complete.

    Each byte is scanned once (``scanned`` counts them): a line split over many chunks is
    kept as its pieces and joined once, when it ends. An event past ``max_event_bytes`` is
    dropped (``dropped`` counts them) without being buffered further.
    """

    def __init__(self, max_event_bytes: int | None = None) -> None:
        self.max_event_bytes = MAX_EVENT_BYTES if max_event_bytes is None else max_event_bytes
        self.scanned = 0
        self.dropped = 0
        self._line: list[bytes] = []  # the pieces of the unfinished line
        self._line_bytes = 0
        self._in_line = False  # the unfinished line has bytes (kept or dropped)
        self._after_cr = False  # the last chunk ended in \r: a \n next is the same line end
        self._event = ""
        self._data: list[str] = []
        self._event_bytes = 0  # of the event being read, its lines so far
        self._skipping = False  # the event being read went past the cap

    @property
    def buffered(self) -> int:
        """Bytes held for the event being read."""
        return self._event_bytes + self._line_bytes

    def feed(self, chunk: bytes) -> Iterator[tuple[str, str]]:
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the second half of a \r\n split across chunks
        self._after_cr = chunk.endswith(b"\r")
        self.scanned += len(chunk)
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *ended, rest = chunk.split(b"\n")
        for piece in ended:
            line = self._end_line(piece)
            if line is None:
                continue  # a line of an event being dropped
            if line:
                self._read_line(line)
                continue
            event = self._end_event()
            if event is not None:
                yield event
        self._hold(rest)

    def _hold(self, piece: bytes) -> None:
        """Keep ``piece`` of the unfinished line, unless that takes its event past the cap."""
        if not piece:
            return
        self._in_line = True
        if self._skipping:
            return
        if self.buffered + len(piece) > self.max_event_bytes:
            self._skip()
            return
        self._line.append(piece)
        self._line_bytes += len(piece)

    def _end_line(self, piece: bytes) -> bytes | None:
        """The line ``piece`` ends: ``b""`` for a blank line (the end of an event), ``None``
        when its event is being dropped."""
        if not self._in_line and not piece:
            return b""
        self._hold(piece)
        self._in_line = False
        if self._skipping:
            return None
        line = b"".join(self._line)  # one piece: the same object, no copy
        self._line, self._line_bytes = [], 0
        return line

    def _skip(self) -> None:
        self._skipping = True
        self.dropped += 1
        log.warning(
            "an upstream event went past %d bytes: relayed, not read (sse.MAX_EVENT_BYTES)",
            self.max_event_bytes,
        )
        self._line, self._line_bytes = [], 0
        self._event, self._data, self._event_bytes = "", [], 0

    def _read_line(self, line: bytes) -> None:
        self._event_bytes += len(line)
        text = line.decode("utf-8", errors="replace")
        if text.startswith(":"):
            return
        name, _, value = text.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value

    def _end_event(self) -> tuple[str, str] | None:
        event = None
        if not self._skipping and (self._data or self._event):
            event = self._event, "\n".join(self._data)
        self._event, self._data, self._event_bytes = "", [], 0
        self._skipping = False
        return event


class AnswerParts:
    """The pieces of one answer's texts (each text block, tool-call arguments, thinking...,
    by key), each joined once when read, within one budget of characters: past it, pieces
    are dropped and ``truncated`` is set. Appending to a string held in a dict copies it
    whole each time (quadratic over many small deltas); a list does not."""

    def __init__(self, max_chars: int | None = None) -> None:
        self.max_chars = MAX_ANSWER_CHARS if max_chars is None else max_chars
        self.size = 0
        self.truncated = False
        self._parts: dict[Hashable, list[str]] = {}

    def add(self, key: Hashable, piece: str) -> None:
        parts = self._parts.setdefault(key, [])
        room = self.max_chars - self.size
        if len(piece) > room:
            if not self.truncated:
                log.warning(
                    "an answer went past %d characters: the rest is relayed, not stored", self.max_chars
                )
            piece, self.truncated = piece[:room], True
        if piece:
            parts.append(piece)
            self.size += len(piece)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._parts

    def get(self, key: Hashable) -> str:
        parts = self._parts.get(key)
        if not parts:
            return ""
        if len(parts) > 1:
            parts[:] = ["".join(parts)]  # read again (a result asked for twice): joined once
        return parts[0]

    def pop(self, key: Hashable) -> None:
        """Forget ``key``'s pieces (their characters stay spent: the budget bounds work done)."""
        self._parts.pop(key, None)
