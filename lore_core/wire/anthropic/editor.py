"""Anthropic Messages turn editors: what the client sees of an answer the gateway changes
(recall rounds spliced into one answer, the usage it reports scaled).

The relay hands a :class:`AnthropicStreamEditor` each SSE event; events it need not change
go out as the upstream's own bytes. A :class:`AnthropicBufferedEditor` builds one JSON
answer from the JSON responses of the turn's rounds.
"""

from __future__ import annotations

import json
from typing import Any

from lore_core.interfaces import EditPolicy, RecallCall, RoundResult
from lore_core.wire.fields import as_dict, as_int, loads_or
from lore_core.wire.sse import AnswerParts
from lore_core.wire.turns import BufferedTurn, Editor, scale_factor, scaled, sse

#: The input side of a usage object: all of it is the prompt.
PROMPT_FIELDS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def prompt_tokens(usage: dict[str, Any]) -> int:
    return sum(as_int(usage.get(k)) for k in PROMPT_FIELDS)


def scale_usage(usage: Any, context_limit: int, share: float, factor: float | None = None) -> bool:
    """Scale the input-side numbers of a usage object in place (never the output side).
    ``factor`` forces one (a stream's later events use the first event's factor). Returns
    whether anything changed."""
    if not isinstance(usage, dict):
        return False
    if factor is None:
        factor = scale_factor(prompt_tokens(usage), context_limit, share)
    if factor is None:
        return False
    for key in PROMPT_FIELDS:
        if key in usage:
            usage[key] = scaled(usage[key], factor)
    return True


class AnthropicBufferedEditor(BufferedTurn):
    """Builds one Messages response from the rounds' responses."""

    def __init__(self, policy: EditPolicy) -> None:
        super().__init__(policy)
        self.visible: list[Any] = []  # content blocks

    def prompt_tokens(self, usage: dict[str, Any]) -> int:
        return prompt_tokens(usage)

    def add_round(self, payload: dict[str, Any]) -> RoundResult:
        self._begin_round(payload)
        result = RoundResult()
        content = [b for b in payload.get("content") or [] if isinstance(b, dict)]
        for block in content:
            if block.get("type") == "tool_use":
                result.order.append(block.get("id"))
                if self._held(block.get("name")):
                    result.recall_calls.append(RecallCall(block.get("id"), block.get("input")))
                    continue
                result.client_calls.append(block.get("id"))
            if block.get("type") == "text":
                self.texts.append(str(block.get("text", "")))
            self.visible.append(block)
        result.assistant = [{"role": "assistant", "content": content}]
        return result

    def add_markers(self, markers: list[str]) -> None:
        self.visible.extend({"type": "text", "text": marker} for marker in markers)

    def result(self) -> dict[str, Any]:
        out, usage = self._answer()
        if usage is not None:
            usage["output_tokens"] = self.output_tokens
            if "total_tokens" in usage:
                usage["total_tokens"] = as_int(usage.get("input_tokens")) + self.output_tokens
            scale_usage(usage, self.policy.context_limit, self.policy.usage_share)
            out["usage"] = usage
        out["content"] = self.visible
        has_calls = any(b.get("type") == "tool_use" for b in self.visible)
        if not has_calls and out.get("stop_reason") == "tool_use":
            out["stop_reason"] = "end_turn"
        return out


#: The member of each ``content_block_delta`` kind that carries its piece of the block.
DELTA_FIELDS = {
    "text_delta": "text",
    "input_json_delta": "partial_json",
    "thinking_delta": "thinking",
    "signature_delta": "signature",
}


class AnthropicStreamEditor(Editor):
    """Rewrites a streamed Messages answer: recall calls held back, content block indexes
    renumbered past them, markers as text blocks, one message_delta/message_stop at the end."""

    def __init__(self, policy: EditPolicy) -> None:
        super().__init__(policy)
        self.round = 0
        self.next_index = 0
        self.index_map: dict[int, int | None] = {}
        self.identity = True
        self.open_recall: int | None = None
        self.blocks: dict[int, dict[str, Any]] = {}  # upstream index -> block being built
        # The round's deltas, by (index, field), and on the fast path the undecoded delta
        # events ("fast"): joined once, at the end of the round, within the answer's cap
        # (appending to strings in a dict copied them whole on every delta).
        self.deltas = AnswerParts()
        self.result = RoundResult()
        self.held: list[bytes] = []
        self.stop_reason: str | None = None
        self.delta_usage: dict[str, Any] = {}
        self.output_tokens = 0
        self.factor: float | None = None
        self.client_calls_shown = False
        self.texts: list[str] = []
        self.terminal = False
        self.held_raw: list[bytes] = []

    def event(self, name: str, data: str, raw: bytes) -> bytes:
        if not name:
            return raw
        if name == "content_block_delta" and self.identity and self.open_recall is None:
            self._track_delta_fast(data)
            return raw
        if name == "ping":
            return raw if self.round == 0 else b""
        try:
            ev = json.loads(data)
        except ValueError:
            return raw
        if not isinstance(ev, dict):
            return raw
        kind = ev.get("type", name)
        if kind == "message_start":
            message = as_dict(ev.get("message"))
            usage = message.get("usage")
            if self.round > 0:
                return b""
            if isinstance(usage, dict):
                self.factor = scale_factor(
                    prompt_tokens(usage), self.policy.context_limit, self.policy.usage_share
                )
                if scale_usage(usage, 0, 0, self.factor):
                    return sse(name, ev)
            return raw
        if kind == "content_block_start":
            index = as_int(ev.get("index"))
            block = dict(as_dict(ev.get("content_block")))
            self.blocks[index] = block
            if block.get("type") == "tool_use":
                self.result.order.append(block.get("id"))
                if self._held(block.get("name")):
                    self.index_map[index] = None
                    self.open_recall = index
                    self.identity = False
                    return b""
                self.result.client_calls.append(block.get("id"))
                self.client_calls_shown = True
            client = self.next_index
            self.next_index += 1
            self.index_map[index] = client
            if client != index:
                self.identity = False
            return self._rewrite(name, ev, index, raw)
        if kind == "content_block_delta":
            index = as_int(ev.get("index"))
            self._track_delta(index, as_dict(ev.get("delta")))
            return self._rewrite(name, ev, index, raw)
        if kind == "content_block_stop":
            index = as_int(ev.get("index"))
            if self.open_recall == index:
                self.open_recall = None
            return self._rewrite(name, ev, index, raw)
        if kind == "message_delta":
            delta = as_dict(ev.get("delta"))
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
            usage = as_dict(ev.get("usage"))
            self.output_tokens += as_int(usage.get("output_tokens"))
            self.delta_usage = dict(usage)
            self.held_raw.append(raw)
            return b""
        if kind == "message_stop":
            self.terminal = True
            self.held_raw.append(raw)
            return b""
        return raw

    def _track_delta_fast(self, data: str) -> None:
        # Only text is tracked on the fast path (for the restore fingerprint), and only
        # cheaply: the last text block's deltas are decoded lazily at the end of the round.
        self.deltas.add("fast", data + "\n")

    def _track_delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        dtype = delta.get("type")
        field = DELTA_FIELDS.get(str(dtype))
        if field is not None:
            self.deltas.add((index, field), str(delta.get(field, "")))
        elif dtype == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))

    def _rewrite(self, name: str, ev: dict[str, Any], index: int, raw: bytes) -> bytes:
        client = self.index_map.get(index, index)
        if client is None:
            return b""
        if client == index:
            return raw
        ev["index"] = client
        return sse(name, ev)

    def _replay_fast_deltas(self) -> None:
        lines = self.deltas.get("fast")
        self.deltas.pop("fast")
        for line in lines.split("\n"):
            if not line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict):
                self._track_delta(as_int(ev.get("index")), as_dict(ev.get("delta")))

    def end_round(self) -> RoundResult:
        if self.round > 0 or any(v is None for v in self.index_map.values()):
            # Text relayed on the fast path is only decoded when a follow-up needs it.
            self._replay_fast_deltas()
        result = self.result
        content = []
        self.texts = []
        for index in sorted(self.blocks):
            block = dict(self.blocks[index])
            for field in ("text", "thinking", "signature"):
                if (index, field) in self.deltas:
                    block[field] = str(block.get(field, "")) + self.deltas.get((index, field))
            if block.get("type") == "tool_use":
                arguments = loads_or(self.deltas.get((index, "partial_json")), {})
                # A call cut off mid-arguments (max_tokens) still goes back as an object.
                block["input"] = arguments if isinstance(arguments, dict) else {}
                if self.index_map.get(index) is None:
                    result.recall_calls.append(RecallCall(block.get("id"), arguments))
            elif block.get("type") == "text":
                self.texts.append(str(block.get("text", "")))
            content.append(block)
        result.assistant = [{"role": "assistant", "content": content}]
        result.ok = self.terminal
        return result

    def next_round(self) -> None:
        self.round += 1
        self.index_map = {}
        self.identity = False  # continuation indexes always shift
        self.open_recall = None
        self.blocks = {}
        self.deltas = AnswerParts()
        self.result = RoundResult()
        self.terminal = False

    def markers(self, markers: list[str]) -> bytes:
        out = []
        for marker in markers:
            index = self.next_index
            self.next_index += 1
            out.append(
                sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            out.append(
                sse(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": marker},
                    },
                )
            )
            out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        return b"".join(out)

    def finish(self) -> bytes:
        stop = self.stop_reason
        if stop == "tool_use" and not self.client_calls_shown:
            stop = "end_turn"
        if self.round == 0 and stop == self.stop_reason and self.factor is None:
            return b"".join(self.held_raw)  # nothing to change: the upstream's own bytes
        usage = dict(self.delta_usage)
        usage["output_tokens"] = self.output_tokens
        if self.round > 0:
            # The input side of the last round is the whole prompt the answer came from.
            scale_usage(usage, self.policy.context_limit, self.policy.usage_share)
        elif self.factor is not None:
            scale_usage(usage, 0, 0, self.factor)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": usage,
        }
        out = sse("message_delta", delta)
        if self.terminal or self.round > 0 or self.stop_reason:
            out += sse("message_stop", {"type": "message_stop"})
        return out

    def final_text(self) -> str:
        return "\n".join(self.texts)
