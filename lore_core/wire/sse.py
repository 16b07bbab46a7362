"""An incremental Server-Sent Events parser: bytes in, in any chunking; events out."""

from __future__ import annotations

from collections.abc import Iterator


class SSEParser:
    """Feed bytes as they arrive; get back complete ``(event, data)`` pairs.

    Follows the SSE framing rules that matter for LLM APIs: events end at a blank line,
    ``data:`` lines are joined with newlines, lines may end in ``\\n``, ``\\r\\n`` or ``\\r``,
    comments (``:``) are ignored. An event split across chunks is held until complete.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> Iterator[tuple[str, str]]:
        buffer = self._buffer + chunk
        if b"\r" in buffer:
            # Keep a trailing \r: it may be the first half of a \r\n split across chunks.
            keep_cr = buffer.endswith(b"\r")
            buffer = buffer.replace(b"\r\n", b"\n")
            buffer = buffer[:-1].replace(b"\r", b"\n") + b"\r" if keep_cr else buffer.replace(b"\r", b"\n")
        *lines, self._buffer = buffer.split(b"\n")
        for line in lines:
            if not line:
                if self._data or self._event:
                    yield self._event, "\n".join(self._data)
                self._event, self._data = "", []
                continue
            text = line.decode("utf-8", errors="replace")
            if text.startswith(":"):
                continue
            name, _, value = text.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
