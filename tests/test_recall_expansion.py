"""LLM query expansion against the real loopback fake upstream as the worker: rephrasings,
lenient parsing, the timeout, no worker, and errors that never reach recall."""

from __future__ import annotations

import asyncio

import pytest

from lore_core.config import WorkerConfig
from lore_core.recall.expansion import Expansion, expand_query, parse_rephrasings
from lore_core.recall.prompts import EXPAND_MARKER, load_prompt
from lore_core.testing.fake_upstream import FakeUpstream, Reply
from lore_core.worker.client import WorkerClient

QUERY = "flaky websocket reconnect test"


def worker_for(fake: FakeUpstream, **overrides) -> WorkerClient:
    settings = {
        "upstream": fake.url,
        "model": "worker-model",
        "api_key": "test-key",
        "api": "anthropic-messages",
        "retry_backoff_seconds": 0.01,
        "max_retries": 0,
        **overrides,
    }
    return WorkerClient(WorkerConfig(**settings))


def expand(worker: WorkerClient | None, query: str = QUERY, **kwargs) -> Expansion:
    async def go() -> Expansion:
        try:
            return await expand_query(query, worker, **kwargs)
        finally:
            if worker is not None:
                await worker.close()

    return asyncio.run(go())


@pytest.mark.parametrize("api", ["anthropic-messages", "openai-chat", "openai-responses"])
def test_rephrasings_from_the_worker(fake_upstream, api):
    fake_upstream.enqueue(
        Reply(text='["websocket reconnect retries failing", "intermittent ws reconnection test", "x"]')
    )
    result = expand(worker_for(fake_upstream, api=api))
    assert result.skipped is None
    assert result.rephrasings == [
        "websocket reconnect retries failing",
        "intermittent ws reconnection test",
        "x",
    ]
    [request] = fake_upstream.api_requests()
    body = request.json
    text = str(body)
    assert EXPAND_MARKER in text and QUERY in text
    assert body.get("stream") is not True


def test_prompt_file_has_its_marker_and_asks_for_json():
    prompt = load_prompt("expand")
    assert prompt.startswith(f"<!-- {EXPAND_MARKER}")
    assert "JSON array" in prompt


def test_slow_worker_hits_the_timeout(fake_upstream):
    # The fake holds the response headers far longer than the (test-sized) timeout.
    fake_upstream.enqueue(Reply(text='["never seen"]', delay_headers=1.5))
    result = expand(worker_for(fake_upstream), timeout=0.1)
    assert result.rephrasings == []
    assert result.skipped == "timed out after 0.1s"


def test_no_worker_is_skipped_without_a_request(fake_upstream):
    worker = WorkerClient(WorkerConfig())  # nothing configured, no session credentials known
    result = expand(worker)
    assert result.rephrasings == []
    assert result.skipped is not None and result.skipped.startswith("no worker:")
    assert fake_upstream.api_requests() == []
    assert worker.skipped_by_purpose == {"recall-expansion": 1}


def test_no_worker_object_and_empty_query_are_skipped():
    assert expand(None).skipped == "no worker configured"
    assert expand(None, "   ").skipped == "no worker configured"


def test_empty_query_makes_no_call(fake_upstream):
    result = expand(worker_for(fake_upstream), "  ")
    assert result.skipped == "empty query" and fake_upstream.api_requests() == []


def test_worker_error_is_a_skip_not_an_exception(fake_upstream):
    fake_upstream.enqueue(Reply(status=400))
    result = expand(worker_for(fake_upstream))
    assert result.rephrasings == []
    assert result.skipped is not None and result.skipped.startswith("failed: HTTP 400")


def test_answer_without_usable_rephrasings(fake_upstream):
    fake_upstream.enqueue(Reply(text=QUERY.upper()))
    assert expand(worker_for(fake_upstream)).skipped == "the worker's answer held no usable rephrasing"


def test_long_query_is_cut_in_the_prompt(fake_upstream):
    fake_upstream.enqueue(Reply(text='["short"]'))
    expand(worker_for(fake_upstream), "word " * 20_000)
    [request] = fake_upstream.api_requests()
    assert len(request.body) < 10_000


class Broken:
    async def complete(self, *args, **kwargs):
        raise RuntimeError("worker object broke")


def test_any_exception_is_contained():
    result = asyncio.run(expand_query(QUERY, Broken()))
    assert result.skipped == "failed: worker object broke"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('["a b", "c d"]', ["a b", "c d"]),
        ('```json\n["a b", "c d"]\n```', ["a b", "c d"]),
        ('Here you go:\n["a b", "c d"]', ["a b", "c d"]),
        ('{"queries": ["a b", "c d"]}', ["a b", "c d"]),
        ("Here are some rephrasings:\n- a b\n* c d\n1. e f\n2) g h", ["a b", "c d", "e f"]),
        ('"a b"\n"c d"', ["a b", "c d"]),
        ('["a b", "A  B", "c d", 3, null]', ["a b", "c d"]),  # duplicates and non-strings dropped
        (f'["{QUERY}", "other words"]', ["other words"]),  # the query itself is not a rephrasing
        ('["' + "x" * 500 + '", "ok"]', ["ok"]),  # an answer, not a query
        ("", []),
        ("[]", []),
        ("\n\n  \n", []),
    ],
)
def test_parse_rephrasings(answer, expected):
    assert parse_rephrasings(answer, QUERY) == expected


def test_parse_caps_the_count():
    assert len(parse_rephrasings('["a", "b", "c", "d", "e"]', "", limit=3)) == 3
    assert parse_rephrasings(None, "") == []  # type: ignore[arg-type]


# -- through the gateway --------------------------------------------------------------------

EXPAND_HEADERS = {
    "x-api-key": "sk-ant-test",
    "anthropic-version": "2023-06-01",
    "x-claude-code-session-id": "s-exp",
}
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]


def _recall_through_gateway(start_gateway, fake_upstream, config: dict) -> tuple[str, list]:
    """Store one fact, then a model turn that recalls it with words the fact does not use;
    returns the tool result the gateway continued with and the expansion requests made."""
    import httpx

    from lore_core.recall.tool import TOOL_NAME
    from lore_core.testing.fake_upstream import ToolCall

    server = start_gateway(config={"store": {"backend": "memory"}, "embedding": {"index": False}, **config})
    fact = "the flaky suite was fixed by mocking the clock in tests/test_sleepy.py"

    def responder(req):
        if EXPAND_MARKER in str(req.json):
            return Reply(text='["flaky suite mocking the clock"]')
        return None

    fake_upstream.responder = responder
    base = {"model": "claude-test", "max_tokens": 100, "tools": TOOLS}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = {**base, "messages": [{"role": "user", "content": fact}]}
        assert client.post("/v1/messages", json=first, headers=EXPAND_HEADERS).status_code == 200
        fake_upstream.enqueue(
            Reply(text="", tool_calls=[ToolCall(TOOL_NAME, {"query": "intermittent timer failures"})]),
            Reply(text="done"),
        )
        ask = {**base, "messages": [{"role": "user", "content": "what was the timing problem?"}]}
        assert client.post("/v1/messages", json=ask, headers=EXPAND_HEADERS).status_code == 200
    requests = fake_upstream.api_requests()
    expansions = [r for r in requests if EXPAND_MARKER in str(r.json)]
    follow_up = [r for r in requests if "tool_result" in str(r.json) and EXPAND_MARKER not in str(r.json)][-1]
    result = next(
        b["content"] for m in follow_up.json["messages"] for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    )  # fmt: skip
    return result, expansions


def test_gateway_expands_recall_queries_when_asked(start_gateway, fake_upstream):
    result, expansions = _recall_through_gateway(
        start_gateway, fake_upstream, {"recall": {"expand": "always"}}
    )
    assert len(expansions) == 1  # the worker, with the session's own credentials
    assert "mocking the clock" in result  # found through the rephrasing only


def test_gateway_does_not_expand_by_default_without_a_configured_worker(start_gateway, fake_upstream):
    result, expansions = _recall_through_gateway(start_gateway, fake_upstream, {})
    assert expansions == []
    assert "mocking the clock" not in result
