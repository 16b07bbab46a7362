"""OpenAI Responses API (``/v1/responses``, and Codex's ``/v1/codex/responses``)."""

from __future__ import annotations

import json
import time
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
from lore_core.wire.openai_responses.editor import ResponsesBufferedEditor, ResponsesStreamEditor
from lore_core.wire.openai_responses.recall import ResponsesRecall
from lore_core.wire.providers import OPENAI
from lore_core.wire.sse import TRUNCATED_NOTE, AnswerParts, SSEParser, sse_event

_TEXT_PARTS = ("input_text", "output_text", "text", "refusal")


def _content_blocks(content: Any) -> list[Block]:
    if isinstance(content, str):
        return [Block(TEXT, text=content, wire_type="input_text")]
    blocks = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
            blocks.append(
                Block(
                    TEXT,
                    text=str(part.get("text", part.get("refusal", ""))),
                    wire_type=part["type"],
                    raw=part,
                )
            )
        elif isinstance(part, dict) and part.get("type") in ("input_image", "input_file", "input_audio"):
            blocks.append(Block(IMAGE, wire_type=part["type"], raw=part))
        else:
            blocks.append(
                Block(OTHER, wire_type=part.get("type") if isinstance(part, dict) else None, raw=part)
            )
    return blocks


def parse_item(raw: Any) -> Message:
    """One input or output item. Items that are not messages become single-block messages
    whose role says who produced them (``assistant`` for calls, ``tool`` for outputs)."""
    if not isinstance(raw, dict):
        return Message(role="", raw=raw)
    kind = raw.get("type", "message" if "role" in raw else None)
    if kind == "message":
        return Message(role=str(raw.get("role", "")), blocks=_content_blocks(raw.get("content")), raw=raw)
    if kind in ("function_call", "custom_tool_call", "local_shell_call", "mcp_call"):
        args = raw.get("arguments", raw.get("input", raw.get("action")))
        block = Block(
            TOOL_CALL,
            tool_name=as_str(raw.get("name", kind)),
            tool_call_id=as_str(raw.get("call_id", raw.get("id"))),
            tool_input=loads_or(args, {}),
            wire_type=kind,
            raw=raw,
        )
        return Message(role="assistant", blocks=[block], raw=raw)
    if isinstance(kind, str) and kind.endswith("_output"):
        output = raw.get("output")
        if isinstance(output, list):
            text = "\n".join(b.text for b in _content_blocks(output))
        else:
            text = output if isinstance(output, str) else json.dumps(output)
        block = Block(
            TOOL_RESULT, text=text, tool_call_id=as_str(raw.get("call_id")), wire_type=kind, raw=raw
        )
        return Message(role="tool", blocks=[block], raw=raw)
    if kind == "reasoning":
        summary = "\n".join(str(s.get("text", "")) for s in raw.get("summary") or [] if isinstance(s, dict))
        return Message(
            role="assistant", blocks=[Block(THINKING, text=summary, wire_type=kind, raw=raw)], raw=raw
        )
    return Message(
        role=str(raw.get("role", "")), blocks=[Block(OTHER, wire_type=as_str(kind), raw=raw)], raw=raw
    )


def render_item(msg: Message) -> Any:
    if msg.raw is not None and not msg.synthetic:
        return msg.raw
    block = msg.blocks[0] if msg.blocks else Block(TEXT)
    if block.type == TOOL_CALL:
        return {
            "type": "function_call",
            "call_id": block.tool_call_id,
            "name": block.tool_name,
            "arguments": json.dumps(block.tool_input),
        }
    if block.type == TOOL_RESULT:
        return {"type": "function_call_output", "call_id": block.tool_call_id, "output": block.text}
    part = "output_text" if msg.role == "assistant" else "input_text"
    return {"type": "message", "role": msg.role, "content": [{"type": part, "text": msg.text}]}


def parse_usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    cached = as_int((raw.get("input_tokens_details") or {}).get("cached_tokens"))
    return Usage(
        input_tokens=max(as_int(raw.get("input_tokens")) - cached, 0),
        output_tokens=as_int(raw.get("output_tokens")),
        cache_read_tokens=cached,
    )


def _output_blocks(items: list[Any]) -> list[Block]:
    blocks: list[Block] = []
    for item in items:
        blocks.extend(parse_item(item).blocks)
    return blocks


class OpenAIResponsesCodec(Codec):
    api = "openai-responses"
    provider = OPENAI.name
    paths = ("/responses",)
    request_path = "/v1/responses"

    def __init__(self) -> None:
        self.recall = ResponsesRecall(self)

    def stream_editor(self, policy: EditPolicy) -> ResponsesStreamEditor:
        return ResponsesStreamEditor(policy)

    def buffered_editor(self, policy: EditPolicy) -> ResponsesBufferedEditor:
        return ResponsesBufferedEditor(policy)

    def add_system_text(self, view: RequestView, text: str) -> None:
        view.system = [*view.system, Block(TEXT, text=text, raw=text)]

    opening_events = frozenset({"", "response.created", "response.in_progress", "response.queued"})

    def stream_error(self, name: str, data: str) -> tuple[str, str] | None:
        if name != "response.failed":
            return None
        try:
            payload = json.loads(data)
        except ValueError:
            return "", ""
        error = as_dict(as_dict(payload).get("response")).get("error")
        if not isinstance(error, dict):
            return "", ""
        return str(error.get("message") or ""), str(error.get("code") or "")

    def continues_server_state(self, view: RequestView) -> bool:
        return bool(view.raw.get("previous_response_id"))

    def may_fail_after_start(self, view: RequestView) -> bool:
        # OpenAI fails an input past the context window after the stream opened (HTTP 200,
        # response.created, then response.failed). A request continuing server-side state
        # cannot be made shorter here.
        return not self.continues_server_state(view)

    def worker_request(self, model: str, system: str, prompt: str, max_tokens: int) -> dict[str, Any]:
        # Background calls must not leave conversations stored at the provider.
        raw = {"model": model, "max_output_tokens": max_tokens, "store": False}
        view = RequestView(api=self.api, raw=raw, body=b"", model=model)
        view.system = [Block(TEXT, text=system)] if system else []
        view.messages = [Message(role="user", blocks=[Block(TEXT, text=prompt)], synthetic=True)]
        return self.render(view)

    def parse(self, raw: dict[str, Any], body: bytes) -> RequestView:
        items = raw.get("input")
        if isinstance(items, str):
            messages = [
                Message(role="user", blocks=[Block(TEXT, text=items, wire_type="input_text")], raw=None)
            ]
        else:
            messages = [parse_item(item) for item in as_list(items)]
        instructions = raw.get("instructions")
        tools = raw.get("tools")
        return RequestView(
            api=self.api,
            raw=raw,
            body=body,
            model=raw.get("model") if isinstance(raw.get("model"), str) else None,
            stream=raw.get("stream") is True,
            system=[Block(TEXT, text=instructions, raw=instructions)]
            if isinstance(instructions, str)
            else [],
            messages=messages,
            tools=list(tools) if isinstance(tools, list) else [],
        )

    def render(self, view: RequestView) -> dict[str, Any]:
        out = dict(view.raw)
        if (
            isinstance(view.raw.get("input"), str)
            and len(view.messages) == 1
            and view.messages[0].raw is None
        ):
            if view.messages[0].text != view.raw["input"]:
                out["input"] = view.messages[0].text
        elif view.messages or "input" in view.raw:
            # ``input`` is optional (a request may continue previous_response_id or run a
            # stored prompt): a body without it and without messages keeps it absent.
            out["input"] = [render_item(m) for m in view.messages]
        instructions = "\n\n".join(b.text for b in view.system)
        if instructions != (view.raw.get("instructions") or ""):
            out["instructions"] = instructions
        if view.tools != (view.raw.get("tools") or []):
            out["tools"] = view.tools
        return out

    def parse_response(self, raw: dict[str, Any]) -> AssistantMessage:
        status = raw.get("status")
        error = raw.get("error")
        return well_formed(
            AssistantMessage(
                blocks=_output_blocks(raw.get("output") or []),
                usage=parse_usage(raw.get("usage")),
                stop_reason=status if isinstance(status, str) else None,
                model=as_str(raw.get("model")),
                response_id=as_str(raw.get("id")),
                complete=status in (None, "completed", "incomplete") and not error,
                error=(error or {}).get("message") if isinstance(error, dict) else None,
            )
        )

    def render_response(self, text: str, model: str | None, stream: bool) -> tuple[bytes, str]:
        """A complete text answer made by the gateway itself (JSON or ``response.*`` events)."""
        item = {
            "id": new_id("msg_lore"),
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        response = {
            "id": new_id("resp_lore"),
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model or "lore",
            "output": [item],
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        }
        if not stream:
            return json.dumps(response).encode(), "application/json"
        pending = {**response, "status": "in_progress", "output": []}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"response": pending}),
            (
                "response.output_item.added",
                {"output_index": 0, "item": {**item, "status": "in_progress", "content": []}},
            ),
            (
                "response.output_text.delta",
                {"item_id": item["id"], "output_index": 0, "content_index": 0, "delta": text},
            ),
            (
                "response.output_text.done",
                {"item_id": item["id"], "output_index": 0, "content_index": 0, "text": text},
            ),
            ("response.output_item.done", {"output_index": 0, "item": item}),
            ("response.completed", {"response": response}),
        ]
        body = b"".join(
            sse_event(name, {"type": name, "sequence_number": i, **data})
            for i, (name, data) in enumerate(events)
        )
        return body, "text/event-stream"

    def assembler(self) -> OpenAIResponsesAssembler:
        return OpenAIResponsesAssembler(self)

    def error_body(self, status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
        kind = error_type or ("server_error" if status >= 500 else status_error_kind(status))
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class OpenAIResponsesAssembler:
    """Rebuilds a response from ``response.*`` events; the terminal event carries it whole."""

    def __init__(self, codec: OpenAIResponsesCodec) -> None:
        self._codec = codec
        self._sse = SSEParser()
        self._final: AssistantMessage | None = None
        self._items: dict[int, dict[str, Any]] = {}
        # Text and function-call argument deltas by (output index, kind): joined once, in
        # result(), within the answer's cap.
        self._deltas = AnswerParts()
        self._meta: dict[str, Any] = {}
        self._error: str | None = None

    @property
    def done(self) -> bool:
        return self._final is not None

    def feed(self, chunk: bytes) -> None:
        for _event, data in self._sse.feed(chunk):
            try:
                payload = json.loads(data)
            except ValueError:
                continue
            if isinstance(payload, dict):
                self._apply(payload)

    def _apply(self, ev: dict[str, Any]) -> None:
        kind = ev.get("type", "")
        index = as_int(ev.get("output_index"))
        if kind in ("response.created", "response.in_progress"):
            self._meta = as_dict(ev.get("response"))
        elif kind == "response.output_item.added":
            self._items[index] = dict(as_dict(ev.get("item")))
        elif kind == "response.output_text.delta":
            self._deltas.add((index, "text"), str(ev.get("delta", "")))
        elif kind == "response.function_call_arguments.delta":
            self._deltas.add((index, "arguments"), str(ev.get("delta", "")))
        elif kind == "response.output_item.done":
            self._items[index] = dict(as_dict(ev.get("item")))
            self._deltas.pop((index, "text"))
            self._deltas.pop((index, "arguments"))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            final = self._codec.parse_response(as_dict(ev.get("response")))
            final.complete = kind != "response.failed"
            self._final = final
        elif kind == "error":
            self._error = str(ev.get("message") or as_dict(ev.get("error")).get("message", "stream error"))

    def result(self) -> AssistantMessage:
        if self._final is not None:
            return self._final
        items = []
        for index in sorted(self._items):
            item = dict(self._items[index])
            if (index, "text") in self._deltas:
                item["content"] = [{"type": "output_text", "text": self._deltas.get((index, "text"))}]
            if (index, "arguments") in self._deltas:
                item["arguments"] = self._deltas.get((index, "arguments"))
            items.append(item)
        blocks = _output_blocks(items)
        if self._deltas.truncated or self._sse.dropped:
            blocks.append(Block(TEXT, text=TRUNCATED_NOTE, wire_type="output_text"))
        meta = self._meta
        return well_formed(
            AssistantMessage(
                blocks=blocks,
                model=as_str(meta.get("model")),
                response_id=as_str(meta.get("id")),
                complete=False,
                error=self._error,
            )
        )
