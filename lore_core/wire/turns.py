"""What the wire packages' turn editors and recall shapes share: usage scaling arithmetic,
SSE events with their raw bytes, and the text helpers a recall restore matches by.

Nothing here knows an API: each ``lore_core.wire.<api>`` package brings the shapes.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

from lore_core.interfaces import EditPolicy, RecallWire
from lore_core.model import TEXT, TOOL_CALL, Message
from lore_core.wire import sse as streams  # (``sse`` is this module's event writer)
from lore_core.wire.fields import as_int

log = logging.getLogger("lore.wire")

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


def scaled(value: Any, factor: float) -> Any:
    return int(value * factor) if isinstance(value, int) and not isinstance(value, bool) else value


def scale_split_usage(
    usage: dict[str, Any], factor: float, prompt_key: str, details_key: str, output_key: str
) -> None:
    """Scale an OpenAI-style usage object's input side in place: the prompt count, its
    cached part (kept within the prompt), and the total following (never the output side)."""
    if prompt_key in usage:
        usage[prompt_key] = scaled(usage[prompt_key], factor)
    details = usage.get(details_key)
    if isinstance(details, dict) and "cached_tokens" in details:
        details["cached_tokens"] = min(
            scaled(details["cached_tokens"], factor), as_int(usage.get(prompt_key))
        )
    if "total_tokens" in usage:
        usage["total_tokens"] = as_int(usage.get(prompt_key)) + as_int(usage.get(output_key))


class Editor:
    """What every turn editor shares: its policy, and which tool's calls it holds back."""

    def __init__(self, policy: EditPolicy) -> None:
        self.policy = policy

    def _held(self, name: Any, namespace: Any = None) -> bool:
        # A call in a tool namespace (Codex puts each MCP server's tools in one) belongs to
        # the client even when its bare name is Lore's tool's: Lore's MCP server has ``recall``.
        return self.policy.hold_tool is not None and namespace is None and name == self.policy.hold_tool


class BufferedTurn(Editor):
    """The bookkeeping of a buffered editor over a turn's rounds: the first and last JSON
    answers, the output tokens of all rounds, the visible text of the last one. An API's
    editor says how its usage counts (:meth:`prompt_tokens`, :attr:`output_field`) and
    builds its rounds and answer on top."""

    #: The usage field of the tokens a round produced.
    output_field = "output_tokens"

    def __init__(self, policy: EditPolicy) -> None:
        super().__init__(policy)
        self.first: dict[str, Any] | None = None
        self.last: dict[str, Any] = {}
        self.output_tokens = 0
        self.texts: list[str] = []  # visible text after the last marker

    def prompt_tokens(self, usage: dict[str, Any]) -> int:
        raise NotImplementedError

    def rewrites(self, payload: dict[str, Any]) -> bool:
        usage = payload.get("usage")
        return isinstance(usage, dict) and (
            scale_factor(self.prompt_tokens(usage), self.policy.context_limit, self.policy.usage_share)
            is not None
        )

    def _begin_round(self, payload: dict[str, Any]) -> None:
        self.first = self.first or payload
        self.last = payload
        usage = payload.get("usage")
        self.output_tokens += as_int(usage.get(self.output_field)) if isinstance(usage, dict) else 0
        self.texts = []

    def _answer(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The last answer with the first one's id, and a copy of its usage (``None`` when
        it has none) for the editor to complete and scale."""
        out = dict(self.last)
        first = self.first or {}
        if "id" in first:
            out["id"] = first["id"]
        usage = copy.deepcopy(self.last.get("usage"))
        return out, usage if isinstance(usage, dict) else None

    def final_text(self) -> str:
        return "\n".join(self.texts)  # blocks and parts, as a client joins them


def sse(event: str | None, data: Any) -> bytes:
    """One SSE event as an editor writes it (non-ASCII kept as is, like the providers)."""
    return streams.sse_event(event, data, ensure_ascii=False)


class EventSplitter:
    """Bytes in, ``(event name, data, raw bytes)`` out: the raw bytes are relayed unchanged
    when an event needs no rewriting.

    Each byte is scanned once (an event split over many chunks is kept as its pieces and
    joined once). An event past ``max_event_bytes`` (:data:`lore_core.wire.sse.MAX_EVENT_BYTES`)
    is not held whole: what was held, then the rest of it as it arrives, comes out as
    ``("", "", raw)``, which every editor relays unchanged (it cannot rewrite that event).
    """

    def __init__(self, max_event_bytes: int | None = None) -> None:
        self.max_event_bytes = streams.MAX_EVENT_BYTES if max_event_bytes is None else max_event_bytes
        self._pending: list[bytes] = []  # the pieces of the unfinished event
        self._pending_bytes = 0
        self._cr = False  # a \r ended the last chunk: held back, it may start a \r\n
        self._ends_nl = False  # the unfinished event ends in \n: a \n next ends it
        self._passing = False  # the unfinished event went past the cap: relayed as it comes

    @property
    def held(self) -> int:
        """Bytes held for the unfinished event."""
        return self._pending_bytes

    def feed(self, chunk: bytes) -> list[tuple[str, str, bytes]]:
        if self._cr:
            chunk, self._cr = b"\r" + chunk, False
        if chunk.endswith(b"\r"):
            chunk, self._cr = chunk[:-1], True
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        events: list[tuple[str, str, bytes]] = []
        start = 0
        while start < len(chunk):
            if self._ends_nl and chunk.startswith(b"\n", start):
                end = start + 1
            else:
                found = chunk.find(b"\n\n", start)
                end = found + 2 if found >= 0 else -1
            if end < 0:
                self._hold(chunk[start:], events)
                break
            piece = chunk[start:end]
            if self._passing:
                events.append(("", "", piece))
                self._passing = False
            else:
                events.append(_split_event(b"".join([*self._pending, piece])))
                self._pending, self._pending_bytes = [], 0
            self._ends_nl = False
            start = end
        return events

    def _hold(self, rest: bytes, events: list[tuple[str, str, bytes]]) -> None:
        self._ends_nl = rest.endswith(b"\n")
        if self._passing:
            events.append(("", "", rest))
            return
        self._pending.append(rest)
        self._pending_bytes += len(rest)
        if self._pending_bytes > self.max_event_bytes:
            log.warning(
                "an upstream event went past %d bytes: relayed as it came (sse.MAX_EVENT_BYTES)",
                self.max_event_bytes,
            )
            events.append(("", "", b"".join(self._pending)))
            self._pending, self._pending_bytes, self._passing = [], 0, True


def _split_event(raw: bytes) -> tuple[str, str, bytes]:
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
    return name, "\n".join(data), raw


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


def restore_in_message(
    recall: RecallWire,
    out: list[Message],
    i: int,
    record: dict[str, Any],
    continuation: Callable[[Message, str], dict[str, Any] | None],
) -> tuple[list[Message], int] | None:
    """A ``loop`` record put back for an API whose client keeps the marker lines inside one
    assistant message (``out[i]``): the rounds as they went upstream, then ``continuation``,
    the client's message from after the last marker on, as wire JSON."""
    markers: list[str] = record.get("markers") or []
    if not markers or not markers_end(out[i], record):
        return None
    rest = continuation(out[i], markers[-1])
    if rest is None:
        return None
    restored = recall.messages(record.get("items") or [])
    new = out[:i] + restored + recall.messages([rest]) + out[i + 1 :]
    return new, i + len(restored) + 1
