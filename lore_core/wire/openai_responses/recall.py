"""The recall tool in Responses: a function tool, results as ``function_call_output``
items, and a recall put back where the client kept its marker items (each its own)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from lore_core.interfaces import RecallWire, RoundResult
from lore_core.model import Message
from lore_core.wire.turns import call_ids, text_of


class ResponsesRecall(RecallWire):
    def tool(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function", "name": name, "description": description, "parameters": schema}

    def result_items(self, results: Mapping[str, str]) -> list[dict[str, Any]]:
        return [
            {"type": "function_call_output", "call_id": cid, "output": text} for cid, text in results.items()
        ]

    def messages(self, items: list[Any]) -> list[Message]:
        return self.codec.parse({"input": copy.deepcopy(items)}, b"").messages

    def mixed_record(self, result: RoundResult, results: Mapping[str, str]) -> dict[str, Any]:
        recall_ids = {c.id for c in result.recall_calls}
        return {
            "calls": [it for it in result.assistant if it.get("call_id") in recall_ids],
            "results": {m["call_id"]: m for m in self.result_items(results)},
        }

    def restore_loop(
        self, out: list[Message], i: int, record: dict[str, Any]
    ) -> tuple[list[Message], int] | None:
        markers: list[str] = record.get("markers") or []
        if not markers:
            return None
        # Each Responses item is its own message; the marker is its own output item.
        first = _find_item(out, i, markers[0])
        if first != i:
            return None
        last = first
        for marker in markers[1:]:
            found = _find_item(out, last + 1, marker)
            if found is None:
                return None
            last = found
        start = first - int(record.get("visible_before") or 0)
        if start < 0 or any(out[k].role not in ("assistant", "") for k in range(start, first)):
            start = first
        restored = self.messages(record.get("items") or [])
        new = out[:start] + restored + out[last + 1 :]
        return new, start + len(restored)

    def restore_mixed(
        self, out: list[Message], i: int, record: dict[str, Any]
    ) -> tuple[list[Message], int] | None:
        order: list[str] = record.get("order") or []
        results: dict[str, Any] = record.get("results") or {}
        if record.get("anchor") not in call_ids(out[i]):
            return None
        calls = self.messages(record.get("calls") or [])
        first_call = next(k for k in range(i, len(out)) if set(call_ids(out[k])) & set(order))
        new = out[:first_call] + calls + out[first_call:]
        outputs = self.messages([results[r] for r in order if r in results])
        for k in range(first_call + len(calls), len(new)):
            ids = {b.tool_call_id for b in new[k].blocks}
            if new[k].role == "tool" and ids & set(order):
                new = new[:k] + outputs + new[k:]
                return new, k + len(outputs)
        return new, first_call + len(calls)


def _find_item(out: list[Message], start: int, marker: str) -> int | None:
    for k in range(start, len(out)):
        if out[k].role == "assistant" and text_of(out[k]).strip() == marker:
            return k
        if out[k].role == "user":
            return None
    return None
