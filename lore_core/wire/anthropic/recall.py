"""The recall tool in Anthropic Messages: a ``tool_use`` block, results as ``tool_result``
blocks of one user message, and a recall put back where the client kept its marker text."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from lore_core.interfaces import RecallWire, RoundResult
from lore_core.model import Message
from lore_core.wire.turns import call_ids, restore_in_message


class AnthropicRecall(RecallWire):
    def tool(self, name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "description": description, "input_schema": schema}

    def result_items(self, results: Mapping[str, str]) -> list[dict[str, Any]]:
        content = [
            {"type": "tool_result", "tool_use_id": cid, "content": text} for cid, text in results.items()
        ]
        return [{"role": "user", "content": content}]

    def messages(self, items: list[Any]) -> list[Message]:
        return self.codec.parse({"messages": copy.deepcopy(items)}, b"").messages

    def mixed_record(self, result: RoundResult, results: Mapping[str, str]) -> dict[str, Any]:
        blocks = self.result_items(results)[0]["content"]
        return {"assistant": result.assistant[0], "results": {b["tool_use_id"]: b for b in blocks}}

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
        j = i + 1
        if j < len(new) and new[j].role == "user" and isinstance(new[j].raw, dict):
            content = new[j].raw.get("content")
            blocks = list(content) if isinstance(content, list) else []
            by_id = {
                b.get("tool_use_id"): b
                for b in blocks
                if isinstance(b, dict) and b.get("type") == "tool_result"
            }
            for rid in results:
                by_id.setdefault(rid, results[rid])
            others = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "tool_result")]
            ordered = [by_id.pop(cid) for cid in order if cid in by_id] + list(by_id.values())
            user = dict(new[j].raw, content=ordered + others)
            new[j] = self.messages([user])[0]
        else:
            new.insert(j, self.messages([{"role": "user", "content": list(results.values())}])[0])
        return new, j + 1


def _continuation(msg: Message, marker: str) -> dict[str, Any] | None:
    """The client's assistant message after the last marker, as wire JSON."""
    raw = msg.raw if isinstance(msg.raw, dict) else None
    if raw is None:
        return None
    content = raw.get("content")
    if isinstance(content, str):
        rest = content[content.rfind(marker) + len(marker) :].strip()
        return {"role": "assistant", "content": [{"type": "text", "text": rest or marker}]}
    blocks = list(content or [])
    index = max(
        k
        for k, b in enumerate(blocks)
        if isinstance(b, dict) and b.get("type") == "text" and marker in str(b.get("text", ""))
    )
    marked = str(blocks[index].get("text", ""))
    rest = marked[marked.rfind(marker) + len(marker) :].strip()
    after = ([{"type": "text", "text": rest}] if rest else []) + blocks[index + 1 :]
    return {"role": "assistant", "content": after or [{"type": "text", "text": marker}]}
