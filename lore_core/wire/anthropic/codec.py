"""Anthropic Messages API (``/v1/messages``)."""

from __future__ import annotations

import json
from typing import Any

from lore_core.interfaces import Codec, EditPolicy
from lore_core.model import (
    IMAGE,
    OTHER,
    TEXT,
    THINKING,
    TOOL_CALL,
    TOOL_RESULT,
    AssistantMessage,
    Block,
    Message,
    RequestView,
    Usage,
)
from lore_core.wire.anthropic.cache import place_breakpoints
from lore_core.wire.anthropic.editor import DELTA_FIELDS, AnthropicBufferedEditor, AnthropicStreamEditor
from lore_core.wire.anthropic.recall import AnthropicRecall
from lore_core.wire.fields import (
    as_dict,
    as_int,
    as_list,
    as_str,
    loads_or,
    new_id,
    status_error_kind,
    well_formed,
)
from lore_core.wire.providers import ANTHROPIC
from lore_core.wire.sse import TRUNCATED_NOTE, AnswerParts, SSEParser, sse_event


def parse_block(raw: Any) -> Block:
    if isinstance(raw, str):
        return Block(TEXT, text=raw, wire_type="text", raw=raw)
    if not isinstance(raw, dict):
        return Block(OTHER, raw=raw)
    kind = raw.get("type")
    if kind == "text":
        return Block(TEXT, text=str(raw.get("text", "")), wire_type=kind, raw=raw)
    if kind in ("thinking", "redacted_thinking"):
        return Block(THINKING, text=str(raw.get("thinking", "")), wire_type=kind, raw=raw)
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        return Block(
            TOOL_CALL,
            tool_name=as_str(raw.get("name")),
            tool_call_id=as_str(raw.get("id")),
            tool_input=raw.get("input"),
            wire_type=kind,
            raw=raw,
        )
    if kind == "tool_result" or (isinstance(kind, str) and kind.endswith("_tool_result")):
        content = raw.get("content")
        if isinstance(content, list):
            text = "\n".join(
                str(part.get("text", ""))
                for part in content
                if isinstance(part, dict) and part.get("type") == "text"
            )
        else:
            text = str(content) if content is not None else ""
        return Block(
            TOOL_RESULT,
            text=text,
            tool_call_id=as_str(raw.get("tool_use_id")),
            is_error=raw.get("is_error") is True,
            wire_type=kind,
            raw=raw,
        )
    if kind in ("image", "document"):
        return Block(IMAGE, wire_type=kind, raw=raw)
    return Block(OTHER, wire_type=kind if isinstance(kind, str) else None, raw=raw)


def parse_content(content: Any) -> list[Block]:
    if isinstance(content, str):
        return [Block(TEXT, text=content, wire_type="text", raw=content)]
    if isinstance(content, list):
        return [parse_block(part) for part in content]
    return []


def render_block(block: Block) -> Any:
    if block.raw is not None:
        return block.raw
    if block.type == TOOL_CALL:
        return {
            "type": "tool_use",
            "id": block.tool_call_id,
            "name": block.tool_name,
            "input": block.tool_input,
        }
    if block.type == TOOL_RESULT:
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": block.tool_call_id,
            "content": block.text,
        }
        if block.is_error:
            out["is_error"] = True
        return out
    return {"type": "text", "text": block.text}


def parse_usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    return Usage(
        input_tokens=as_int(raw.get("input_tokens")),
        output_tokens=as_int(raw.get("output_tokens")),
        cache_read_tokens=as_int(raw.get("cache_read_input_tokens")),
        cache_write_tokens=as_int(raw.get("cache_creation_input_tokens")),
    )


class AnthropicMessagesCodec(Codec):
    api = "anthropic-messages"
    provider = ANTHROPIC.name
    paths = ("/v1/messages",)
    worker_default = True
    worker_headers = (("anthropic-version", "2023-06-01"),)
    starts_with_user = True

    def __init__(self) -> None:
        self.recall = AnthropicRecall(self)

    def stream_editor(self, policy: EditPolicy) -> AnthropicStreamEditor:
        return AnthropicStreamEditor(policy)

    def buffered_editor(self, policy: EditPolicy) -> AnthropicBufferedEditor:
        return AnthropicBufferedEditor(policy)

    def add_system_text(self, view: RequestView, text: str) -> None:
        view.system = [*view.system, Block(TEXT, text=text, raw={"type": "text", "text": text})]

    def place_cache_breakpoints(self, view: RequestView, plan: Any) -> None:
        place_breakpoints(view, plan)

    def worker_request(self, model: str, system: str, prompt: str, max_tokens: int) -> dict[str, Any]:
        view = RequestView(
            api=self.api, raw={"model": model, "max_tokens": max_tokens}, body=b"", model=model
        )
        view.system = [Block(TEXT, text=system)] if system else []
        view.messages = [Message(role="user", blocks=[Block(TEXT, text=prompt)], synthetic=True)]
        return self.render(view)

    def parse(self, raw: dict[str, Any], body: bytes) -> RequestView:
        messages = []
        for item in as_list(raw.get("messages")):
            if isinstance(item, dict):
                messages.append(
                    Message(
                        role=str(item.get("role", "")), blocks=parse_content(item.get("content")), raw=item
                    )
                )
            else:
                messages.append(Message(role="", raw=item))
        tools = raw.get("tools")
        return RequestView(
            api=self.api,
            raw=raw,
            body=body,
            model=raw.get("model") if isinstance(raw.get("model"), str) else None,
            stream=raw.get("stream") is True,
            system=parse_content(raw.get("system")),
            messages=messages,
            tools=list(tools) if isinstance(tools, list) else [],
        )

    def render(self, view: RequestView) -> dict[str, Any]:
        out = dict(view.raw)
        out["messages"] = [
            m.raw
            if m.raw is not None and not m.synthetic
            else {"role": m.role, "content": [render_block(b) for b in m.blocks]}
            for m in view.messages
        ]
        # Only touch ``system`` / ``tools`` when a layer changed them, so a plain-string
        # system prompt stays a string.
        if [b.raw for b in view.system] != [b.raw for b in parse_content(view.raw.get("system"))]:
            out["system"] = [
                {"type": "text", "text": b.raw} if isinstance(b.raw, str) else render_block(b)
                for b in view.system
            ]
        if view.tools != (view.raw.get("tools") or []):
            out["tools"] = view.tools
        return out

    def parse_response(self, raw: dict[str, Any]) -> AssistantMessage:
        return well_formed(
            AssistantMessage(
                blocks=parse_content(raw.get("content")),
                usage=parse_usage(raw.get("usage")),
                stop_reason=raw.get("stop_reason"),
                model=as_str(raw.get("model")),
                response_id=as_str(raw.get("id")),
                complete=raw.get("type") != "error",
                error=(raw.get("error") or {}).get("message") if raw.get("type") == "error" else None,
            )
        )

    def render_response(self, text: str, model: str | None, stream: bool) -> tuple[bytes, str]:
        """A complete text answer made by the gateway itself, as JSON or as the SSE events
        the API would stream. Returns (body, content type)."""
        message = {
            "id": new_id("msg_lore"),
            "type": "message",
            "role": "assistant",
            "model": model or "lore",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        if not stream:
            return json.dumps(message).encode(), "application/json"
        start = {**message, "content": [], "stop_reason": None}
        events = [
            sse_event("message_start", {"type": "message_start", "message": start}),
            sse_event(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            ),
            sse_event(
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
            ),
            sse_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
            sse_event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 0},
                },
            ),
            sse_event("message_stop", {"type": "message_stop"}),
        ]
        return b"".join(events), "text/event-stream"

    def assembler(self) -> AnthropicAssembler:
        return AnthropicAssembler()

    def error_body(self, status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": error_type or status_error_kind(status), "message": message},
        }


class AnthropicAssembler:
    """Rebuilds a Messages response from ``message_start`` ... ``message_stop`` events."""

    def __init__(self) -> None:
        self._sse = SSEParser()
        self._message = AssistantMessage()
        self._blocks: dict[int, dict[str, Any]] = {}
        # The blocks' text, thinking, signature and tool input deltas, by (index, field):
        # joined once, in result(), within the answer's cap.
        self._deltas = AnswerParts()
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, chunk: bytes) -> None:
        for _event, data in self._sse.feed(chunk):
            try:
                payload = json.loads(data)
            except ValueError:
                continue
            if isinstance(payload, dict):
                self._apply(payload)

    def _apply(self, ev: dict[str, Any]) -> None:
        if self._done:
            return  # nothing after the terminal event changes the answer
        kind = ev.get("type")
        msg = self._message
        if kind == "message_start":
            start = as_dict(ev.get("message"))
            msg.model = as_str(start.get("model"))
            msg.response_id = as_str(start.get("id"))
            msg.usage = parse_usage(start.get("usage"))
        elif kind == "content_block_start":
            self._blocks[as_int(ev.get("index"))] = dict(as_dict(ev.get("content_block")))
        elif kind == "content_block_delta":
            index = as_int(ev.get("index"))
            self._blocks.setdefault(index, {"type": "text", "text": ""})
            delta = as_dict(ev.get("delta"))
            field = DELTA_FIELDS.get(str(delta.get("type")))
            if field is not None:
                self._deltas.add((index, field), str(delta.get(field, "")))
        elif kind == "message_delta":
            delta = as_dict(ev.get("delta"))
            if delta.get("stop_reason"):
                msg.stop_reason = delta["stop_reason"]
            usage = as_dict(ev.get("usage"))
            for key, attr in (
                ("output_tokens", "output_tokens"),
                ("input_tokens", "input_tokens"),
                ("cache_read_input_tokens", "cache_read_tokens"),
                ("cache_creation_input_tokens", "cache_write_tokens"),
            ):
                if isinstance(usage.get(key), int):
                    setattr(msg.usage, attr, usage[key])
        elif kind == "message_stop":
            msg.complete = True
            self._done = True
        elif kind == "error":
            msg.error = str(as_dict(ev.get("error")).get("message", "stream error"))
            self._done = True

    def result(self) -> AssistantMessage:
        blocks = []
        for index in sorted(self._blocks):
            raw = dict(self._blocks[index])
            for field in ("text", "thinking", "signature"):
                if (index, field) in self._deltas:
                    raw[field] = str(raw.get(field, "")) + self._deltas.get((index, field))
            if (index, "partial_json") in self._deltas:
                raw["input"] = loads_or(self._deltas.get((index, "partial_json")), {})
            blocks.append(parse_block(raw))
        if self._deltas.truncated or self._sse.dropped:
            blocks.append(
                Block(
                    TEXT, text=TRUNCATED_NOTE, wire_type="text", raw={"type": "text", "text": TRUNCATED_NOTE}
                )
            )
        self._message.blocks = blocks
        return well_formed(self._message)
