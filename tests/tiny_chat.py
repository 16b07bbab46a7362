"""A third-party codec for a small JSON chat API the kernel does not know ("tiny-chat"),
registered through ``lore_register_codecs`` from a test plugin. It implements the codec
contract and its optional members (turn editors, recall shapes) and nothing else: what
the gateway then does for it, it does for any API.

The API: ``POST /tiny/v1/chat`` with ``{"model", "messages": [{"role", "content", "calls"?,
"call_id"?}], "tools": [{"name", "description", "schema"}], "stream"?}``; the answer is
``{"id", "model", "message": {"role": "assistant", "content", "calls"}, "usage": {"input",
"output"}}``, or streamed as SSE ``data:`` events ``{"text"}``, ``{"call"}`` and a last
``{"end": true, "usage"}``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from lore_core import hookimpl
from lore_core.interfaces import Codec, EditPolicy, Provider, RecallCall, RecallWire, RoundResult
from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT, AssistantMessage, Block, Message, RequestView, Usage
from lore_core.wire.turns import call_ids, markers_end, scale_factor, sse

API = "tiny-chat"


def _message(raw: Any) -> Message:
    if not isinstance(raw, dict):
        return Message(role="", raw=raw)
    role = str(raw.get("role", ""))
    blocks = []
    if role == "tool":
        blocks.append(Block(TOOL_RESULT, text=str(raw.get("content", "")), tool_call_id=raw.get("call_id")))
    elif raw.get("content"):
        blocks.append(Block(TEXT, text=str(raw["content"])))
    for call in raw.get("calls") or []:
        blocks.append(
            Block(
                TOOL_CALL,
                tool_name=call.get("name"),
                tool_call_id=call.get("id"),
                tool_input=call.get("args"),
            )
        )
    return Message(role=role, blocks=blocks, raw=raw)


def _render_message(msg: Message) -> Any:
    if not msg.synthetic and msg.raw is not None:
        return msg.raw
    return {"role": msg.role, "content": msg.text}


class TinyAssembler:
    def __init__(self) -> None:
        self._buffer = b""
        self._text: list[str] = []
        self._calls: list[Block] = []
        self._usage = Usage()
        self.done = False

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            data = event.decode().removeprefix("data: ")
            ev = json.loads(data)
            if "text" in ev:
                self._text.append(ev["text"])
            elif "call" in ev:
                call = ev["call"]
                self._calls.append(
                    Block(TOOL_CALL, tool_name=call["name"], tool_call_id=call["id"], tool_input=call["args"])
                )
            elif ev.get("end"):
                self._usage = Usage(input_tokens=ev["usage"]["input"], output_tokens=ev["usage"]["output"])
                self.done = True

    def result(self) -> AssistantMessage:
        blocks = ([Block(TEXT, text="".join(self._text))] if self._text else []) + self._calls
        return AssistantMessage(blocks=blocks, usage=self._usage, complete=self.done)


def _scaled_usage(usage: dict[str, Any], policy: EditPolicy) -> dict[str, Any]:
    factor = scale_factor(usage.get("input", 0), policy.context_limit, policy.usage_share)
    return usage if factor is None else {**usage, "input": int(usage["input"] * factor)}


class TinyStreamEditor:
    """Text goes through as it comes; recall calls and the end event are held."""

    def __init__(self, policy: EditPolicy) -> None:
        self.policy = policy
        self.round: RoundResult = RoundResult()
        self.text: list[str] = []
        self.end: dict[str, Any] | None = None
        self.output = 0

    def event(self, name: str, data: str, raw: bytes) -> bytes:
        ev = json.loads(data)
        if "call" in ev:
            call = ev["call"]
            self.round.order.append(call["id"])
            if call["name"] == self.policy.hold_tool:
                self.round.recall_calls.append(RecallCall(call["id"], call["args"]))
                self.round.assistant = [{"role": "assistant", "content": "".join(self.text), "calls": [call]}]
                return b""
            self.round.client_calls.append(call["id"])
            return raw
        if ev.get("end"):
            self.end = ev
            self.output += ev["usage"]["output"]
            return b""
        self.text.append(ev.get("text", ""))
        return raw

    def end_round(self) -> RoundResult:
        self.round.ok = self.end is not None
        return self.round

    def next_round(self) -> None:
        self.round, self.text, self.end = RoundResult(), [], None

    def markers(self, markers: list[str]) -> bytes:
        return b"".join(sse(None, {"text": marker + "\n"}) for marker in markers)

    def finish(self) -> bytes:
        if self.end is None:
            return b""
        usage = dict(_scaled_usage(self.end["usage"], self.policy), output=self.output)
        return sse(None, {**self.end, "usage": usage})

    def final_text(self) -> str:
        return "".join(self.text)


class TinyBufferedEditor:
    def __init__(self, policy: EditPolicy) -> None:
        self.policy = policy
        self.last: dict[str, Any] = {}
        self.texts: list[str] = []
        self.output = 0

    def rewrites(self, payload: dict[str, Any]) -> bool:
        return _scaled_usage(payload["usage"], self.policy) != payload["usage"]

    def add_round(self, payload: dict[str, Any]) -> RoundResult:
        self.last = payload
        self.output += payload["usage"]["output"]
        message = payload["message"]
        result = RoundResult(assistant=[copy.deepcopy(message)])
        for call in message.get("calls") or []:
            result.order.append(call["id"])
            if call["name"] == self.policy.hold_tool:
                result.recall_calls.append(RecallCall(call["id"], call["args"]))
            else:
                result.client_calls.append(call["id"])
        if message.get("content"):
            self.texts.append(message["content"])
        return result

    def add_markers(self, markers: list[str]) -> None:
        self.texts.extend(markers)

    def result(self) -> dict[str, Any]:
        usage = dict(_scaled_usage(self.last["usage"], self.policy), output=self.output)
        message = {"role": "assistant", "content": "\n".join(self.texts), "calls": []}
        return {**self.last, "message": message, "usage": usage}

    def final_text(self) -> str:
        return self.texts[-1] if self.texts else ""


class TinyRecall(RecallWire):
    def tool(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "description": description, "schema": schema}

    def result_items(self, results: Mapping[str, str]) -> list[dict[str, Any]]:
        return [{"role": "tool", "call_id": cid, "content": text} for cid, text in results.items()]

    def messages(self, items: list[Any]) -> list[Message]:
        return self.codec.parse({"messages": copy.deepcopy(items)}, b"").messages

    def mixed_record(self, result: RoundResult, results: Mapping[str, str]) -> dict[str, Any]:
        return {
            "assistant": result.assistant[0],
            "results": {m["call_id"]: m for m in self.result_items(results)},
        }

    def restore_loop(
        self, out: list[Message], i: int, record: dict[str, Any]
    ) -> tuple[list[Message], int] | None:
        if not record.get("markers") or not markers_end(out[i], record):
            return None
        restored = self.messages(record.get("items") or [])
        after = out[i].text.rsplit(record["markers"][-1], 1)[-1].strip()
        tail = self.messages([{"role": "assistant", "content": after or record["markers"][-1]}])
        return out[:i] + restored + tail + out[i + 1 :], i + len(restored) + 1

    def restore_mixed(
        self, out: list[Message], i: int, record: dict[str, Any]
    ) -> tuple[list[Message], int] | None:
        if record.get("anchor") not in call_ids(out[i]):
            return None
        results = self.messages(list(record["results"].values()))
        return out[:i] + self.messages([record["assistant"]]) + results + out[i + 1 :], i + 1 + len(results)


class TinyChatCodec(Codec):
    api = API
    provider = "openai"
    paths = ("/tiny/v1/chat",)

    def __init__(self) -> None:
        self.recall = TinyRecall(self)

    def parse(self, raw: dict[str, Any], body: bytes) -> RequestView:
        return RequestView(
            api=self.api,
            raw=raw,
            body=body,
            model=raw.get("model"),
            stream=bool(raw.get("stream")),
            messages=[_message(m) for m in raw.get("messages") or []],
            tools=list(raw.get("tools") or []),
        )

    def render(self, view: RequestView) -> dict[str, Any]:
        out = dict(view.raw, messages=[_render_message(m) for m in view.messages])
        if view.tools:
            out["tools"] = view.tools
        return out

    def parse_response(self, raw: dict[str, Any]) -> AssistantMessage:
        message = _message(raw["message"])
        usage = raw.get("usage") or {}
        return AssistantMessage(
            blocks=message.blocks,
            usage=Usage(input_tokens=usage.get("input", 0), output_tokens=usage.get("output", 0)),
            model=raw.get("model"),
            complete=True,
        )

    def assembler(self) -> TinyAssembler:
        return TinyAssembler()

    def render_response(self, text: str, model: str | None, stream: bool) -> tuple[bytes, str]:
        if stream:
            end = {"end": True, "usage": {"input": 0, "output": 0}}
            return sse(None, {"text": text}) + sse(None, end), "text/event-stream"
        body = {
            "id": "tiny-lore",
            "model": model,
            "message": {"role": "assistant", "content": text},
            "usage": {"input": 0, "output": 0},
        }
        return json.dumps(body).encode(), "application/json"

    def error_body(self, status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
        return {"error": message, "status": status}

    def stream_editor(self, policy: EditPolicy) -> TinyStreamEditor:
        return TinyStreamEditor(policy)

    def buffered_editor(self, policy: EditPolicy) -> TinyBufferedEditor:
        return TinyBufferedEditor(policy)


class TinyChatPlugin:
    @hookimpl
    def lore_register_codecs(self, register: Any) -> None:
        register(TinyChatCodec())


class TinyGeminiCodec(TinyChatCodec):
    """The same API for a provider the kernel has never heard of ("gemini"), under a path of
    its own."""

    api = "tiny-gemini"
    provider = "gemini"
    paths = ("/tiny/v1/gemini",)


class TinyGeminiPlugin:
    """A codec and the provider it speaks, declared by the plugin alone. The provider has no
    default upstream: ``upstream.gemini`` or ``LORE_UPSTREAM_GEMINI`` must name one."""

    @hookimpl
    def lore_register_codecs(self, register: Any) -> None:
        register(TinyGeminiCodec())

    @hookimpl
    def lore_register_providers(self, register: Any) -> None:
        register(Provider("gemini", request_headers=("x-tiny-key",)))


class UndeclaredProviderPlugin:
    """A codec naming a provider that no plugin declares."""

    @hookimpl
    def lore_register_codecs(self, register: Any) -> None:
        codec = TinyGeminiCodec()
        codec.api, codec.provider, codec.paths = "tiny-nowhere", "nowhere", ("/tiny/v1/nowhere",)
        register(codec)
