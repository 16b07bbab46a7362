"""OpenAI Chat Completions API (``/v1/chat/completions`` and bare ``/chat/completions``)."""

from __future__ import annotations

import json
import time
from typing import Any

from lore_core.interfaces import Codec, EditPolicy
from lore_core.model import (
    IMAGE,
    OTHER,
    TEXT,
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
from lore_core.wire.openai_chat.editor import ChatBufferedEditor, ChatStreamEditor
from lore_core.wire.openai_chat.recall import ChatRecall
from lore_core.wire.providers import OPENAI
from lore_core.wire.sse import TRUNCATED_NOTE, AnswerParts, SSEParser, sse_event


def _content_blocks(content: Any, as_tool_result_of: str | None = None) -> list[Block]:
    if isinstance(content, str):
        if as_tool_result_of is not None:
            return [Block(TOOL_RESULT, text=content, tool_call_id=as_tool_result_of)]
        return [Block(TEXT, text=content, wire_type="text")]
    blocks = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            blocks.append(Block(OTHER, raw=part))
        elif part.get("type") in ("text", "input_text", "refusal"):
            text = str(part.get("text", part.get("refusal", "")))
            if as_tool_result_of is not None:
                blocks.append(Block(TOOL_RESULT, text=text, tool_call_id=as_tool_result_of, raw=part))
            else:
                blocks.append(Block(TEXT, text=text, wire_type=as_str(part.get("type")), raw=part))
        elif part.get("type") in ("image_url", "input_image", "input_audio", "file"):
            blocks.append(Block(IMAGE, wire_type=as_str(part.get("type")), raw=part))
        else:
            blocks.append(Block(OTHER, wire_type=as_str(part.get("type")), raw=part))
    return blocks


def _tool_call_blocks(calls: Any) -> list[Block]:
    blocks = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        fn = as_dict(call.get("function"))
        blocks.append(
            Block(
                TOOL_CALL,
                tool_name=as_str(fn.get("name")),
                tool_call_id=as_str(call.get("id")),
                tool_input=loads_or(fn.get("arguments"), {}),
                wire_type=as_str(call.get("type", "function")),
                raw=call,
            )
        )
    return blocks


def parse_message(raw: dict[str, Any]) -> Message:
    role = str(raw.get("role", ""))
    if role == "tool":
        blocks = _content_blocks(raw.get("content"), as_tool_result_of=as_str(raw.get("tool_call_id")))
    else:
        blocks = _content_blocks(raw.get("content")) + _tool_call_blocks(raw.get("tool_calls"))
    return Message(role=role, blocks=blocks, raw=raw)


def render_message(msg: Message) -> dict[str, Any]:
    if msg.raw is not None and not msg.synthetic:
        return msg.raw
    if msg.role == "tool" or any(b.type == TOOL_RESULT for b in msg.blocks):
        result = next(b for b in msg.blocks if b.type == TOOL_RESULT)
        return {"role": "tool", "tool_call_id": result.tool_call_id, "content": result.text}
    out: dict[str, Any] = {"role": msg.role, "content": msg.text}
    calls = [b for b in msg.blocks if b.type == TOOL_CALL]
    if calls:
        out["tool_calls"] = [
            {
                "id": b.tool_call_id,
                "type": "function",
                "function": {"name": b.tool_name, "arguments": json.dumps(b.tool_input)},
            }
            for b in calls
        ]
    return out


def parse_usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    cached = as_int((raw.get("prompt_tokens_details") or {}).get("cached_tokens"))
    return Usage(
        input_tokens=max(as_int(raw.get("prompt_tokens")) - cached, 0),
        output_tokens=as_int(raw.get("completion_tokens")),
        cache_read_tokens=cached,
    )


class OpenAIChatCodec(Codec):
    api = "openai-chat"
    provider = OPENAI.name
    paths = ("/chat/completions",)
    worker_default = True
    request_path = "/v1/chat/completions"

    def __init__(self) -> None:
        self.recall = ChatRecall(self)

    def stream_editor(self, policy: EditPolicy) -> ChatStreamEditor:
        return ChatStreamEditor(policy)

    def buffered_editor(self, policy: EditPolicy) -> ChatBufferedEditor:
        return ChatBufferedEditor(policy)

    def worker_request(self, model: str, system: str, prompt: str, max_tokens: int) -> dict[str, Any]:
        raw = {"model": model, "max_completion_tokens": max_tokens}
        view = RequestView(api=self.api, raw=raw, body=b"", model=model)
        # Chat has no separate system field: the system prompt is a message.
        view.messages = [
            Message(role="system", blocks=[Block(TEXT, text=system)], synthetic=True),
            Message(role="user", blocks=[Block(TEXT, text=prompt)], synthetic=True),
        ]
        return self.render(view)

    def parse(self, raw: dict[str, Any], body: bytes) -> RequestView:
        messages = [
            parse_message(m) if isinstance(m, dict) else Message(role="", raw=m)
            for m in as_list(raw.get("messages"))
        ]
        tools = raw.get("tools")
        return RequestView(
            api=self.api,
            raw=raw,
            body=body,
            model=raw.get("model") if isinstance(raw.get("model"), str) else None,
            stream=raw.get("stream") is True,
            messages=messages,
            tools=list(tools) if isinstance(tools, list) else [],
        )

    def render(self, view: RequestView) -> dict[str, Any]:
        out = dict(view.raw)
        out["messages"] = [render_message(m) for m in view.messages]
        if view.tools != (view.raw.get("tools") or []):
            out["tools"] = view.tools
        return out

    def parse_response(self, raw: dict[str, Any]) -> AssistantMessage:
        choices = raw.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message") or {}
        return well_formed(
            AssistantMessage(
                blocks=_content_blocks(message.get("content")) + _tool_call_blocks(message.get("tool_calls")),
                usage=parse_usage(raw.get("usage")),
                stop_reason=choice.get("finish_reason"),
                model=as_str(raw.get("model")),
                response_id=as_str(raw.get("id")),
                complete="error" not in raw,
            )
        )

    def render_response(self, text: str, model: str | None, stream: bool) -> tuple[bytes, str]:
        """A complete text answer made by the gateway itself (JSON or SSE chunks)."""
        ident, created, model = new_id("chatcmpl-lore"), int(time.time()), model or "lore"
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if not stream:
            body = {
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": usage,
            }
            return json.dumps(body).encode(), "application/json"

        def chunk(delta: dict[str, Any], finish: str | None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            base = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model}
            return sse_event(None, {**base, "choices": [choice]})

        events = [
            chunk({"role": "assistant", "content": text}, None),
            chunk({}, "stop"),
            sse_event(None, "[DONE]"),
        ]
        return b"".join(events), "text/event-stream"

    def assembler(self) -> OpenAIChatAssembler:
        return OpenAIChatAssembler()

    def error_body(self, status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
        kind = error_type or ("server_error" if status >= 500 else status_error_kind(status))
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class OpenAIChatAssembler:
    """Rebuilds a chat completion from ``chat.completion.chunk`` events up to ``[DONE]``."""

    def __init__(self) -> None:
        self._sse = SSEParser()
        self._message = AssistantMessage()
        # The text and each tool call's name and arguments, by key: joined once, in
        # result(), within the answer's cap.
        self._deltas = AnswerParts()
        self._calls: dict[int, str | None] = {}  # tool call index -> its id

    @property
    def done(self) -> bool:
        return self._message.complete

    def feed(self, chunk: bytes) -> None:
        for _event, data in self._sse.feed(chunk):
            if data.strip() == "[DONE]":
                self._message.complete = True
                continue
            try:
                payload = json.loads(data)
            except ValueError:
                continue
            if isinstance(payload, dict):
                self._apply(payload)

    def _apply(self, ev: dict[str, Any]) -> None:
        msg = self._message
        if msg.complete:
            return  # nothing after [DONE] changes the answer
        msg.response_id = msg.response_id or as_str(ev.get("id"))
        msg.model = msg.model or as_str(ev.get("model"))
        if isinstance(ev.get("usage"), dict):
            msg.usage = parse_usage(ev["usage"])
        if "error" in ev:
            msg.error = str(as_dict(ev.get("error")).get("message", "stream error"))
        # Each field read as the type it must have: events of another shape are relayed as
        # they came and read as absent here.
        for choice in as_list(ev.get("choices")):
            if not isinstance(choice, dict) or as_int(choice.get("index")) != 0:
                continue
            delta = as_dict(choice.get("delta"))
            if isinstance(delta.get("content"), str):
                self._deltas.add("text", delta["content"])
            for call in as_list(delta.get("tool_calls")):
                if not isinstance(call, dict):
                    continue
                index = as_int(call.get("index"))
                self._calls[index] = as_str(call.get("id")) or self._calls.get(index)
                fn = as_dict(call.get("function"))
                self._deltas.add((index, "name"), as_str(fn.get("name")) or "")
                self._deltas.add((index, "arguments"), as_str(fn.get("arguments")) or "")
            if as_str(choice.get("finish_reason")):
                msg.stop_reason = choice["finish_reason"]

    def result(self) -> AssistantMessage:
        blocks = (
            [Block(TEXT, text=self._deltas.get("text"), wire_type="text")] if "text" in self._deltas else []
        )
        for index in sorted(self._calls):
            blocks.append(
                Block(
                    TOOL_CALL,
                    tool_name=self._deltas.get((index, "name")),
                    tool_call_id=self._calls[index],
                    tool_input=loads_or(self._deltas.get((index, "arguments")), {}),
                )
            )
        if self._deltas.truncated or self._sse.dropped:
            blocks.append(Block(TEXT, text=TRUNCATED_NOTE, wire_type="text"))
        self._message.blocks = blocks
        return well_formed(self._message)
