"""The recall tool in Chat Completions: a function tool, results as ``tool`` messages, and a
recall put back where the client kept its marker text."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from lore_core.interfaces import RecallWire, RoundResult
from lore_core.model import Message
from lore_core.wire.turns import call_ids, restore_in_message


class ChatRecall(RecallWire):
    def tool(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": name, "description": description, "parameters": schema},
        }

    def result_items(self, results: Mapping[str, str]) -> list[dict[str, Any]]:
        return [{"role": "tool", "tool_call_id": cid, "content": text} for cid, text in results.items()]

    def messages(self, items: list[Any]) -> list[Message]:
        return self.codec.parse({"messages": copy.deepcopy(items)}, b"").messages

    def mixed_record(self, result: RoundResult, results: Mapping[str, str]) -> dict[str, Any]:
        items = self.result_items(results)
        return {"assistant": result.assistant[0], "results": {m["tool_call_id"]: m for m in items}}

    def restore_loop(
        self, out: list[Message], i: int, record: dict[str, Any]
    ) -> tuple[list[Message], int] | None:
        return restore_in_message(self, out, i, record, _continuation)

    def restore_mixed(
        self, out: list[Message], i: int, record: dict[str, Any]
    ) -> tuple[list[Message], int] | None:
        order: list[str] = record.get("order") or []
        results: dict[str, Any] = record.get("results") or {}
        if record.get("anchor") not in call_ids(out[i]):
            return None
        new = out[:i] + self.messages([record["assistant"]]) + out[i + 1 :]
        # The tool messages follow the assistant, one per call.
        j = k = i + 1
        tool_msgs: dict[str, Message] = {}
        while k < len(new) and new[k].role == "tool":
            ids = [b.tool_call_id for b in new[k].blocks if b.tool_call_id]
            tool_msgs[ids[0] if ids else f"?{k}"] = new[k]
            k += 1
        for rid in results:
            tool_msgs.setdefault(rid, self.messages([results[rid]])[0])
        ordered = [tool_msgs.pop(cid) for cid in order if cid in tool_msgs] + list(tool_msgs.values())
        new = new[:j] + ordered + new[k:]
        return new, j + len(ordered)


def _continuation(msg: Message, marker: str) -> dict[str, Any] | None:
    """The client's assistant message after the last marker: one content string (or parts)
    plus the client's tool calls, as wire JSON."""
    raw = msg.raw if isinstance(msg.raw, dict) else None
    if raw is None:
        return None
    content = raw.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    content = content if isinstance(content, str) else ""
    rest = content[content.rfind(marker) + len(marker) :].strip() if marker in content else content
    out: dict[str, Any] = {"role": "assistant", "content": rest or None}
    if raw.get("tool_calls"):
        out["tool_calls"] = raw["tool_calls"]
    elif not rest:
        out["content"] = marker
    return out
