"""OpenAI Responses turn editors: what the client sees of an answer the gateway changes
(recall rounds spliced into one answer, the usage it reports scaled)."""

from __future__ import annotations

import copy
import json
from typing import Any

from lore_core.interfaces import EditPolicy, RecallCall, RoundResult
from lore_core.wire.fields import as_dict, as_int, new_id
from lore_core.wire.turns import BufferedTurn, Editor, scale_factor, scale_split_usage, sse


def prompt_tokens(usage: dict[str, Any]) -> int:
    return as_int(usage.get("input_tokens"))


def scale_usage(usage: Any, context_limit: int, share: float, factor: float | None = None) -> bool:
    """Scale the input-side numbers of a usage object in place (never the output side).
    Returns whether anything changed."""
    if not isinstance(usage, dict):
        return False
    if factor is None:
        factor = scale_factor(prompt_tokens(usage), context_limit, share)
    if factor is None:
        return False
    scale_split_usage(usage, factor, "input_tokens", "input_tokens_details", "output_tokens")
    return True


def input_item(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as it goes back as input: the call or message itself, without the
    server's item id and status (reasoning items keep theirs: they are needed)."""
    kind = item.get("type")
    if kind == "function_call":
        call = {
            "type": "function_call",
            "call_id": item.get("call_id"),
            "name": item.get("name"),
            "arguments": item.get("arguments", ""),
        }
        if item.get("namespace") is not None:
            call["namespace"] = item["namespace"]
        return call
    if kind == "message":
        content = [
            {"type": "output_text", "text": str(p.get("text", ""))}
            for p in item.get("content") or []
            if isinstance(p, dict) and p.get("type") == "output_text"
        ]
        return {"type": "message", "role": "assistant", "content": content}
    return item


def marker_item(marker: str, item_id: str | None = None) -> dict[str, Any]:
    return {
        "id": item_id or new_id("msg_lore"),
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": marker, "annotations": []}],
    }


class ResponsesBufferedEditor(BufferedTurn):
    """Builds one Responses response from the rounds' responses."""

    def __init__(self, policy: EditPolicy) -> None:
        super().__init__(policy)
        self.visible: list[Any] = []  # output items

    def prompt_tokens(self, usage: dict[str, Any]) -> int:
        return prompt_tokens(usage)

    def add_round(self, payload: dict[str, Any]) -> RoundResult:
        self._begin_round(payload)
        result = RoundResult()
        for item in payload.get("output") or []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call":
                result.order.append(item.get("call_id"))
                if self._held(item.get("name"), item.get("namespace")):
                    result.recall_calls.append(RecallCall(item.get("call_id"), item.get("arguments")))
                    result.assistant.append(input_item(item))
                    continue
                result.client_calls.append(item.get("call_id"))
            if item.get("type") == "message":
                self.texts.extend(
                    str(p.get("text", "")) for p in item.get("content") or [] if isinstance(p, dict)
                )
            result.assistant.append(input_item(item))
            self.visible.append(item)
            result.visible += 1
        return result

    def add_markers(self, markers: list[str]) -> None:
        self.visible.extend(marker_item(marker) for marker in markers)

    def result(self) -> dict[str, Any]:
        out, usage = self._answer()
        if usage is not None:
            usage["output_tokens"] = self.output_tokens
            if "total_tokens" in usage:
                usage["total_tokens"] = as_int(usage.get("input_tokens")) + self.output_tokens
            scale_usage(usage, self.policy.context_limit, self.policy.usage_share)
            out["usage"] = usage
        out["output"] = self.visible
        return out


_RESPONSES_FAST = (
    "response.output_text.delta",
    "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta",
)


class ResponsesStreamEditor(Editor):
    """Rewrites a streamed Responses answer: recall calls held back, output indexes and
    sequence numbers renumbered, markers as message items, one terminal event at the end."""

    def __init__(self, policy: EditPolicy) -> None:
        super().__init__(policy)
        self.round = 0
        self.out_map: dict[int, int | None] = {}
        self.next_out = 0
        self.identity = True
        self.seq = -1  # the last sequence number the client saw (decoded events only)
        self.items: dict[int, dict[str, Any]] = {}  # upstream index -> finished item
        self.visible_items: list[dict[str, Any]] = []
        self.result = RoundResult()
        self.terminal: dict[str, Any] | None = None
        self.terminal_name = ""
        self.terminal_raw = b""
        self.first_response: dict[str, Any] | None = None
        self.output_tokens = 0
        self.final_texts: list[str] = []

    def _seq(self, ev: dict[str, Any]) -> None:
        if self.round == 0 and self.identity:
            self.seq = max(self.seq, as_int(ev.get("sequence_number")))
        else:
            self.seq += 1
            ev["sequence_number"] = self.seq

    def event(self, name: str, data: str, raw: bytes) -> bytes:
        if name in _RESPONSES_FAST and self.round == 0 and self.identity:
            return raw
        try:
            ev = json.loads(data)
        except ValueError:
            return raw
        if not isinstance(ev, dict):
            return raw
        kind = ev.get("type", name)
        if kind in ("response.created", "response.in_progress"):
            if self.round > 0:
                return b""
            self.first_response = self.first_response or dict(as_dict(ev.get("response")))
            self._seq(ev)
            return raw
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            self.terminal = ev
            self.terminal_raw = raw
            self.terminal_name = name or kind
            usage = as_dict(ev.get("response")).get("usage")
            if isinstance(usage, dict):
                self.output_tokens += as_int(usage.get("output_tokens"))
            return b""
        if "output_index" not in ev:
            self._seq(ev)
            return raw if self.round == 0 and self.identity else sse(name, ev)
        index = as_int(ev.get("output_index"))
        if kind == "response.output_item.added":
            item = as_dict(ev.get("item"))
            if item.get("type") in ("function_call", "custom_tool_call", "local_shell_call"):
                self.result.order.append(item.get("call_id"))
                if item.get("type") == "function_call" and self._held(
                    item.get("name"), item.get("namespace")
                ):
                    self.out_map[index] = None
                    self.identity = False
                    return b""
                self.result.client_calls.append(item.get("call_id"))
            client = self.next_out
            self.next_out += 1
            self.out_map[index] = client
            if client != index:
                self.identity = False
        if kind == "response.output_item.done":
            self.items[index] = as_dict(ev.get("item"))
        shown = self.out_map.get(index, index)
        if shown is None:
            return b""
        if kind == "response.output_item.done":
            self.visible_items.append(as_dict(ev.get("item")))
        if self.round == 0 and self.identity:
            self._seq(ev)
            return raw
        ev["output_index"] = shown
        self._seq(ev)
        return sse(name, ev)

    def end_round(self) -> RoundResult:
        result = self.result
        texts: list[str] = []
        for index in sorted(self.items):
            item = self.items[index]
            if item.get("type") == "function_call" and self.out_map.get(index) is None:
                result.recall_calls.append(RecallCall(item.get("call_id"), item.get("arguments")))
            elif self.out_map.get(index) is not None:
                result.visible += 1
            if item.get("type") == "message":
                texts.extend(str(p.get("text", "")) for p in item.get("content") or [] if isinstance(p, dict))
            result.assistant.append(input_item(item))
        self.final_texts = texts
        result.ok = self.terminal is not None and self.terminal_name == "response.completed"
        return result

    def next_round(self) -> None:
        self.round += 1
        self.out_map = {}
        self.identity = False
        self.items = {}
        self.result = RoundResult()
        self.terminal = None

    def markers(self, markers: list[str]) -> bytes:
        if self.terminal is not None and self.round == 0:
            self.seq = max(self.seq, as_int(self.terminal.get("sequence_number")) - 1)
        out = []
        for marker in markers:
            item = marker_item(marker)
            index = self.next_out
            self.next_out += 1
            pending = dict(item, status="in_progress", content=[])
            part = item["content"][0]
            events = [
                ("response.output_item.added", {"output_index": index, "item": pending}),
                (
                    "response.content_part.added",
                    {
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "part": dict(part, text=""),
                    },
                ),
                (
                    "response.output_text.delta",
                    {"item_id": item["id"], "output_index": index, "content_index": 0, "delta": marker},
                ),
                (
                    "response.output_text.done",
                    {"item_id": item["id"], "output_index": index, "content_index": 0, "text": marker},
                ),
                (
                    "response.content_part.done",
                    {"item_id": item["id"], "output_index": index, "content_index": 0, "part": part},
                ),
                ("response.output_item.done", {"output_index": index, "item": item}),
            ]
            for name, data in events:
                self.seq += 1
                out.append(sse(name, {"type": name, "sequence_number": self.seq, **data}))
            self.visible_items.append(item)
        return b"".join(out)

    def finish(self) -> bytes:
        if self.terminal is None:
            return b""
        ev = copy.deepcopy(self.terminal)
        response = as_dict(ev.get("response"))
        if self.first_response and self.first_response.get("id"):
            response["id"] = self.first_response["id"]
        changed = self.round > 0 or not self.identity
        if changed:
            response["output"] = self.visible_items
        usage = response.get("usage")
        if isinstance(usage, dict):
            if self.round > 0:
                usage["output_tokens"] = self.output_tokens
                usage["total_tokens"] = as_int(usage.get("input_tokens")) + self.output_tokens
                changed = True
            if scale_usage(usage, self.policy.context_limit, self.policy.usage_share):
                changed = True
        if not changed:
            return self.terminal_raw
        ev["response"] = response
        self.seq += 1
        ev["sequence_number"] = max(self.seq, as_int(ev.get("sequence_number")))
        return sse(self.terminal_name, ev)

    def final_text(self) -> str:
        return "".join(self.final_texts)
