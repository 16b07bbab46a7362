"""Builders for tests: wire-neutral messages, exchanges and write batches, built the way the
gateway builds them (records come from :func:`lore_core.storage.convert.records_from_exchange`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lore_core.interfaces import Embedder
from lore_core.model import (
    TEXT,
    TOOL_CALL,
    TOOL_RESULT,
    AssistantMessage,
    Block,
    Exchange,
    Message,
    RequestView,
    Usage,
)
from lore_core.storage.convert import records_from_exchange
from lore_core.storage.records import WriteBatch

# -- building exchanges ----------------------------------------------------------------------


def text(role: str, content: str) -> Message:
    return Message(role, [Block(TEXT, text=content)])


def tool_call(name: str, call_id: str, args: dict[str, Any], say: str = "") -> Message:
    blocks = [Block(TEXT, text=say)] if say else []
    return Message(
        "assistant", [*blocks, Block(TOOL_CALL, tool_name=name, tool_call_id=call_id, tool_input=args)]
    )


def tool_result(call_id: str, output: str, is_error: bool = False) -> Message:
    return Message("user", [Block(TOOL_RESULT, text=output, tool_call_id=call_id, is_error=is_error)])


def answer(
    content: str, complete: bool = True, input_tokens: int = 10, output_tokens: int = 5
) -> AssistantMessage:
    return AssistantMessage(
        blocks=[Block(TEXT, text=content)],
        usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens),
        stop_reason="end_turn" if complete else None,
        model="test-model-1",
        complete=complete,
    )


def exchange(
    messages: list[Message],
    response: AssistantMessage | None = None,
    session: str = "s-1",
    project: str = "/work/alpha",
    harness: str = "claude",
    at: float = 1_700_000_000.0,
) -> Exchange:
    view = RequestView(api="anthropic-messages", raw={}, body=b"", model="test-model", messages=messages)
    ex = Exchange(
        api="anthropic-messages",
        path="/v1/messages",
        request=view,
        harness=harness,
        session_id=session,
        project=project,
        upstream="http://upstream.invalid",
        status=200,
        response=response,
        started_at=at,
    )
    ex.finished_at = at + 1
    return ex


class TopicEmbedder(Embedder):
    """A deterministic embedding model for tests: one axis per topic, synonyms on the same
    axis (so a vector search finds a text that shares no word with the query), plus a small
    constant component so no vector is zero."""

    name = "topics"
    model_id = "topics-v1"
    TOPICS = (
        frozenset({"deploy", "deployment", "release", "rollout", "ship"}),
        frozenset({"failure", "crashed", "error", "broken"}),
        frozenset({"database", "postgres", "sql", "migration"}),
    )
    dimensions = len(TOPICS) + 1

    def vector(self, text: str) -> list[float]:
        words = {w.strip(".,:;!?()'\"").lower() for w in text.split()}
        v = [float(len(words & topic)) for topic in self.TOPICS] + [0.05]
        norm = sum(x * x for x in v) ** 0.5
        return [x / norm for x in v]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vector(t) for t in texts]

    def health(self) -> dict[str, Any]:
        return {"ok": True, "detail": "topics"}


def batch_of(*exchanges: Exchange) -> WriteBatch:
    out = WriteBatch()
    for ex in exchanges:
        out.extend(records_from_exchange(ex))
    return out


class CallCount:
    """Counts the calls of one async method of ``obj`` (replaced on the instance), for tests
    that pin how often a path reads the store."""

    def __init__(self, obj: Any, method: str) -> None:
        self.calls = 0
        original = getattr(obj, method)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return await original(*args, **kwargs)

        setattr(obj, method, counted)
