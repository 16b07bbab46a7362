"""OpenAI Chat Completions turn editors: what the client sees of an answer the gateway
changes (recall rounds spliced into one answer, the usage it reports scaled)."""

from __future__ import annotations

import json
import re
from typing import Any

from lore_core.interfaces import EditPolicy, RecallCall, RoundResult
from lore_core.wire.fields import as_dict, as_int, as_list
from lore_core.wire.turns import BufferedTurn, Editor, scale_factor, scale_split_usage, sse


def prompt_tokens(usage: dict[str, Any]) -> int:
    return as_int(usage.get("prompt_tokens"))


def scale_usage(usage: Any, context_limit: int, share: float, factor: float | None = None) -> bool:
    """Scale the input-side numbers of a usage object in place (never the output side).
    Returns whether anything changed."""
    if not isinstance(usage, dict):
        return False
    if factor is None:
        factor = scale_factor(prompt_tokens(usage), context_limit, share)
    if factor is None:
        return False
    scale_split_usage(usage, factor, "prompt_tokens", "prompt_tokens_details", "completion_tokens")
    return True


class ChatBufferedEditor(BufferedTurn):
    """Builds one Chat Completions response from the rounds' responses."""

    output_field = "completion_tokens"

    def __init__(self, policy: EditPolicy) -> None:
        super().__init__(policy)
        self.visible: list[str] = []  # text pieces
        self.calls: list[dict[str, Any]] = []  # the client's tool calls shown

    def prompt_tokens(self, usage: dict[str, Any]) -> int:
        return prompt_tokens(usage)

    def add_round(self, payload: dict[str, Any]) -> RoundResult:
        self._begin_round(payload)
        result = RoundResult()
        choice = (payload.get("choices") or [{}])[0]
        message = choice.get("message") or {} if isinstance(choice, dict) else {}
        text = message.get("content") if isinstance(message.get("content"), str) else None
        wire: dict[str, Any] = {"role": "assistant", "content": text}
        calls = []
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            calls.append(
                {
                    "id": call.get("id"),
                    "type": "function",
                    "function": {"name": fn.get("name"), "arguments": fn.get("arguments", "")},
                }
            )
            result.order.append(call.get("id"))
            if self._held(fn.get("name")):
                result.recall_calls.append(RecallCall(call.get("id"), fn.get("arguments")))
            else:
                result.client_calls.append(call.get("id"))
                self.calls.append(call)
        if calls:
            wire["tool_calls"] = calls
        if text:
            self.visible.append(text)
            self.texts.append(text)
        result.assistant = [wire]
        return result

    def add_markers(self, markers: list[str]) -> None:
        self.visible.extend(markers)

    def result(self) -> dict[str, Any]:
        out, usage = self._answer()
        if usage is not None:
            usage["completion_tokens"] = self.output_tokens
            usage["total_tokens"] = as_int(usage.get("prompt_tokens")) + self.output_tokens
            scale_usage(usage, self.policy.context_limit, self.policy.usage_share)
            out["usage"] = usage
        choices = [dict(c) for c in out.get("choices") or [{}]]
        message = dict(choices[0].get("message") or {"role": "assistant"})
        message["content"] = "\n\n".join(self.visible) if self.visible else None
        if self.calls:
            message["tool_calls"] = self.calls
        else:
            message.pop("tool_calls", None)
            if choices[0].get("finish_reason") == "tool_calls":
                choices[0]["finish_reason"] = "stop"
        choices[0] = {**choices[0], "message": message}
        out["choices"] = choices
        return out


_CHAT_SPECIAL = re.compile(r'"tool_calls"|"finish_reason"\s*:\s*"|"usage"\s*:\s*\{|"error"')


class ChatStreamEditor(Editor):
    """Rewrites a streamed Chat Completions answer: recall calls held back, tool call
    indexes renumbered, markers as content, the finish and usage chunks at the end."""

    def __init__(self, policy: EditPolicy) -> None:
        super().__init__(policy)
        self.round = 0
        self.first: dict[str, Any] | None = None
        self.text_shown = False
        self.tool_map: dict[int, int | None] = {}
        self.next_tool = 0
        self.calls: dict[int, dict[str, Any]] = {}
        self.text: list[str] = []
        self.result = RoundResult()
        self.finish_chunk: dict[str, Any] | None = None
        self.usage_chunk: dict[str, Any] | None = None
        self.done = False
        self.output_tokens = 0
        self.factor: float | None = None
        self.client_calls_shown = False
        self.final_texts: list[str] = []
        self.held_raw: list[bytes] = []
        self.finish_whole = True

    def event(self, name: str, data: str, raw: bytes) -> bytes:
        if data.strip() == "[DONE]":
            self.done = True
            self.held_raw.append(raw)
            return b""
        special = _CHAT_SPECIAL.search(data) is not None
        if self.first is not None and self.round == 0 and not special:
            self._fast_text(data)
            return raw
        try:
            ev = json.loads(data)
        except ValueError:
            return raw
        if not isinstance(ev, dict):
            return raw
        if self.first is None:
            self.first = {k: ev.get(k) for k in ("id", "created", "model")}
        changed = self.round > 0
        if changed:
            ev.update({k: v for k, v in self.first.items() if v is not None})
        if isinstance(ev.get("usage"), dict):
            self.usage_chunk = ev
            self.output_tokens += as_int(ev["usage"].get("completion_tokens"))
            if not ev.get("choices"):
                self.held_raw.append(raw)
                return b""
            ev = dict(ev, usage=None)
            changed = True
        choices = as_list(ev.get("choices"))
        for choice in choices:
            if not isinstance(choice, dict) or as_int(choice.get("index")) != 0:
                continue
            delta = as_dict(choice.get("delta"))
            if isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
                if delta["content"]:
                    self.text_shown = True
            if delta.get("tool_calls"):
                kept = []
                for call in delta["tool_calls"]:
                    index = as_int(call.get("index"))
                    slot = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
                    slot["id"] = call.get("id") or slot["id"]
                    fn = call.get("function") or {}
                    slot["name"] += fn.get("name") or ""
                    slot["arguments"] += fn.get("arguments") or ""
                    if index not in self.tool_map:
                        if self._held(slot["name"]):
                            self.tool_map[index] = None
                        else:
                            self.tool_map[index] = self.next_tool
                            self.next_tool += 1
                            self.client_calls_shown = True
                    client = self.tool_map[index]
                    if client is None:
                        changed = True
                        continue
                    if client != index:
                        call = dict(call, index=client)
                        changed = True
                    kept.append(call)
                delta = dict(delta)
                if kept:
                    delta["tool_calls"] = kept
                else:
                    delta.pop("tool_calls")
                choice["delta"] = delta
            if choice.get("finish_reason"):
                self.finish_chunk = ev
                rest = self._without_finish(ev)
                if rest or changed:
                    self.finish_whole = False
                else:
                    self.held_raw.append(raw)
                return rest
        return sse(None, ev) if changed else raw

    def _without_finish(self, ev: dict[str, Any]) -> bytes:
        # Anything else in the finish chunk is relayed; the finish itself waits for the end.
        choice = dict(ev["choices"][0])
        delta = as_dict(choice.get("delta"))
        if not delta or delta == {"content": ""} or delta == {}:
            return b""
        rest = dict(ev, choices=[dict(choice, finish_reason=None)])
        return sse(None, rest)

    def _fast_text(self, data: str) -> None:
        # Content deltas are kept undecoded; decoded once at the end of the round.
        self.text.append("\0" + data)
        self.text_shown = True

    def _texts(self) -> str:
        out = []
        for piece in self.text:
            if piece.startswith("\0"):
                try:
                    ev = json.loads(piece[1:])
                    for choice in as_list(ev.get("choices")):
                        content = as_dict(choice.get("delta")).get("content")
                        if isinstance(content, str) and as_int(choice.get("index")) == 0:
                            out.append(content)
                except (ValueError, AttributeError):
                    continue
            else:
                out.append(piece)
        return "".join(out)

    def end_round(self) -> RoundResult:
        result = self.result
        needed = self.round > 0 or any(v is None for v in self.tool_map.values())
        text = self._texts() if needed else ""  # decoded only when a follow-up needs it
        self.final_texts = [text]
        wire: dict[str, Any] = {"role": "assistant", "content": text or None}
        calls = []
        for index in sorted(self.calls):
            slot = self.calls[index]
            calls.append(
                {
                    "id": slot["id"],
                    "type": "function",
                    "function": {"name": slot["name"], "arguments": slot["arguments"]},
                }
            )
            result.order.append(slot["id"])
            if self.tool_map.get(index) is None:
                result.recall_calls.append(RecallCall(slot["id"], slot["arguments"]))
            else:
                result.client_calls.append(slot["id"])
        if calls:
            wire["tool_calls"] = calls
        result.assistant = [wire]
        result.ok = self.done or self.finish_chunk is not None
        return result

    def next_round(self) -> None:
        self.round += 1
        self.tool_map = {}
        self.calls = {}
        self.text = []
        self.result = RoundResult()
        self.finish_chunk = None
        self.done = False

    def markers(self, markers: list[str]) -> bytes:
        text = ("\n\n" if self.text_shown else "") + "\n\n".join(markers) + "\n\n"
        self.text_shown = True
        base = dict(self.first or {}, object="chat.completion.chunk")
        chunk = {**base, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        return sse(None, chunk)

    def finish(self) -> bytes:
        out = b""
        base = dict(self.first or {}, object="chat.completion.chunk")
        reason = (self.finish_chunk or {"choices": [{}]})["choices"][0].get("finish_reason")
        unchanged = (
            self.round == 0
            and self.finish_whole
            and not (reason == "tool_calls" and not self.client_calls_shown)
            and (
                self.usage_chunk is None
                or scale_factor(
                    prompt_tokens(self.usage_chunk["usage"]),
                    self.policy.context_limit,
                    self.policy.usage_share,
                )
                is None
            )
        )
        if unchanged:
            return b"".join(self.held_raw)
        if self.finish_chunk is not None:
            reason = self.finish_chunk["choices"][0].get("finish_reason")
            if reason == "tool_calls" and not self.client_calls_shown:
                reason = "stop"
            chunk = dict(self.finish_chunk, **{k: v for k, v in base.items() if v is not None})
            chunk["choices"] = [{"index": 0, "delta": {}, "finish_reason": reason}]
            if "usage" in chunk:
                chunk["usage"] = None
            out += sse(None, chunk)
        if self.usage_chunk is not None:
            chunk = dict(self.usage_chunk, **{k: v for k, v in base.items() if v is not None})
            usage = dict(chunk["usage"])
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                usage["prompt_tokens_details"] = dict(details)
            usage["completion_tokens"] = self.output_tokens
            usage["total_tokens"] = as_int(usage.get("prompt_tokens")) + self.output_tokens
            scale_usage(usage, self.policy.context_limit, self.policy.usage_share)
            chunk["usage"] = usage
            chunk["choices"] = []
            out += sse(None, chunk)
        if self.done or self.round > 0:
            out += sse(None, "[DONE]")
        return out

    def final_text(self) -> str:
        return "".join(self.final_texts)
