"""The fault campaign, kernel part: what a client gets, what the gateway keeps and what
``/health`` says when the upstream, the embedder or the worker misbehaves.

Each test's docstring names the fault and the expected behaviour; ``benchmarks/faults.py``
runs these with the rest of the campaign (store faults with the DuckDB store, in
``plugins/store_duckdb/tests/test_gateway_duckdb.py``; faults covered where their feature
is tested) and prints the table. The misbehaving upstream is
:class:`~lore_core.testing.raw_upstream.RawUpstream`: it sends bytes no server library
would (a reset, a cut header, garbage events). Nothing asserts a wall-clock limit.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import pytest

from lore_core import hookimpl
from lore_core.distill.prompts import OBSERVER_MARKER
from lore_core.plugins import Factory
from lore_core.testing.fake_upstream import FakeUpstream, RecordedRequest, Reply
from lore_core.testing.fake_worker import request_texts
from lore_core.testing.net import api_headers
from lore_core.testing.poll import poll
from lore_core.testing.raw_upstream import RawUpstream, http_head
from lore_core.testing.server import ThreadedServer
from tests.test_distill_scheduler import DISTILL, Conversation, distillations, worker_requests
from tests.test_vectors import TopicEmbedder

# Seconds per test (see the slow marker in lore_core.testing.fixtures).
pytestmark = pytest.mark.slow

# (path, request body, error shape) per wire API.
APIS = {
    "anthropic": (
        "/v1/messages",
        {"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "chat": ("/v1/chat/completions", {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/v1/responses", {"model": "gpt-x", "input": "hi"}),
}
FAST = {"upstream": {"retryBackoffSeconds": 0.01, "maxRetries": 2, "readTimeoutSeconds": 0.5}}


def upstream_headers(server: ThreadedServer, upstream: str) -> dict[str, str]:
    """Send the request to ``upstream`` as the gateway's owner would: with the token, the
    pipeline treats it as a memory request (without, it is relayed untouched)."""
    return {"x-lore-upstream-url": upstream, "x-lore-token": server.gateway.tokens.current()}


def send(
    server: ThreadedServer, api: str, upstream: str | None = None, stream: bool = False
) -> httpx.Response:
    path, body = APIS[api]
    headers = upstream_headers(server, upstream) if upstream else {}
    return httpx.post(server.url + path, json={**body, "stream": stream}, headers=headers, timeout=30)


def assert_error_shape(api: str, response: httpx.Response, status: int, fragment: str) -> None:
    assert response.status_code == status, response.text
    payload = response.json()
    assert fragment in payload["error"]["message"]
    if api == "anthropic":
        assert payload["type"] == "error" and payload["error"]["type"] == "api_error"
    else:
        assert payload["error"]["type"] == "server_error"


def health(server: ThreadedServer) -> dict[str, Any]:
    return httpx.get(server.url + "/health", timeout=10).json()


def still_serving(server: ThreadedServer) -> None:
    for api in APIS:
        assert send(server, api).status_code == 200


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info]


# -- the upstream ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", list(APIS))
def test_upstream_reset_before_answering(
    start_gateway: Callable[..., ThreadedServer], api: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream resets the connection (or cuts it inside the status line) before answering:
    retried, then a 502 in the API's error shape; /health names the upstream until it
    answers again; the gateway keeps serving."""
    server = start_gateway(config=FAST)
    with RawUpstream() as raw:
        raw.script = ["reset"] if api != "chat" else [b"HTTP/1.1 200 OK\r\ncontent-ty", "reset"]
        response = send(server, api, raw.url, stream)
        assert_error_shape(api, response, 502, raw.url)
        assert len(raw.requests) == 3  # the first try and two retries
        assert any(line.startswith(f"upstream {raw.url}:") for line in health(server)["degraded"])
        still_serving(server)
        # It answers again: no longer degraded.
        answer = json.dumps({"id": "x", "type": "message", "role": "assistant", "content": []}).encode()
        raw.script = [http_head(200, "application/json", len(answer)), answer, "close"]
        assert send(server, api, raw.url).status_code == 200
        assert health(server)["degraded"] == []
    assert tracebacks(caplog) == []


@pytest.mark.parametrize("api", list(APIS))
def test_upstream_body_stops_arriving(
    start_gateway: Callable[..., ThreadedServer], api: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream sends its headers, then part of the body, then nothing (slow body): a JSON
    answer becomes a 502 in the API's shape after ``upstream.readTimeoutSeconds``; a stream
    is cut for the client too (never ended as if complete); the gateway keeps serving."""
    server = start_gateway(config=FAST)
    with RawUpstream() as raw:
        raw.script = [http_head(200, "application/json", length=500), b'{"id": "msg_', 30.0]
        assert_error_shape(api, send(server, api, raw.url), 502, "broke off its response")
        raw.script = [http_head(200, "text/event-stream"), b"event: ping\ndata: {}\n\n", 30.0]
        with pytest.raises(httpx.RemoteProtocolError):
            send(server, api, raw.url, stream=True)
        assert any("broke off" in line for line in health(server)["degraded"])
    still_serving(server)
    assert tracebacks(caplog) == []


GARBAGE_EVENTS = (
    b"event: \x00???\ndata: {not json\n\n"
    b"data: \xff\xfe not even utf-8\n\n"
    b': a comment\nevent: message_delta\ndata: {"type": "message_delta", "delta": 7}\n\n'
    b'data: {"choices": "nope"}\n\n'
    b"data: [DONE]\n\n"
)


# A tool in each API's shape: a request offering tools goes through the recall loop.
TOOLS = {
    "anthropic": {"name": "Bash", "input_schema": {"type": "object"}},
    "chat": {"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}},
    "responses": {"type": "function", "name": "Bash", "parameters": {"type": "object"}},
}


@pytest.mark.parametrize("tools", [False, True], ids=["relay", "recall-loop"])
@pytest.mark.parametrize("api", list(APIS))
def test_malformed_event_stream_is_relayed_as_it_came(
    start_gateway: Callable[..., ThreadedServer], api: str, tools: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream streams malformed SSE (bad JSON, invalid UTF-8, events of the wrong shape),
    to a plain relay or to the recall loop (the request offers tools): the client gets the
    upstream's events as they came (the recall loop holds the closing ones to the end); the
    exchange is still recorded; no traceback; the gateway keeps serving."""
    server = start_gateway(config=FAST)
    path, body = APIS[api]
    if tools:
        body = {**body, "tools": [TOOLS[api]]}
    with RawUpstream() as raw:
        raw.script = [http_head(200, "text/event-stream"), GARBAGE_EVENTS, "close"]
        response = httpx.post(
            server.url + path,
            json={**body, "stream": True},
            headers=upstream_headers(server, raw.url),
            timeout=30,
        )
    assert response.status_code == 200
    if tools:
        # The recall loop holds a stream's closing events (message_delta, ...) to its end.
        assert sorted(response.content.split(b"\n\n")) == sorted(GARBAGE_EVENTS.split(b"\n\n"))
    else:
        assert response.content == GARBAGE_EVENTS
    poll(lambda: health(server)["stats"].get("exchanges", 0) >= 1, "the exchange to be recorded")
    still_serving(server)
    assert tracebacks(caplog) == []
    assert health(server)["status"] == "ok"


@pytest.mark.parametrize("status", [500, 502, 429])
def test_non_json_error_body_reaches_the_client_as_sent(
    start_gateway: Callable[..., ThreadedServer], status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream answers an error with an HTML page (a load balancer's): the client gets the
    upstream's own status and bytes (a 502 after its retries); the gateway keeps serving."""
    server = start_gateway(config=FAST)
    page = b"<html><body><h1>Bad gateway</h1></body></html>\n"
    with RawUpstream() as raw:
        raw.script = [http_head(status, "text/html", len(page)), page, "close"]
        for api in APIS:
            response = send(server, api, raw.url)
            assert response.status_code == status and response.content == page
            assert response.headers["content-type"] == "text/html"
    still_serving(server)
    assert tracebacks(caplog) == []


WRONG_SHAPES = [
    b"not json!",
    b'["a", "list"]',
    b'{"content": 7, "choices": "x", "output": 5, "usage": [], "model": 5, "id": {}, "type": 3}',
    b'{"content": [{"type": "tool_use", "id": 5, "name": ["recall"], "input": 3}], "choices": [7]}',
    b'{"output": [{"type": "function_call", "name": {}, "arguments": 5}, 3], "status": []}',
]


@pytest.mark.parametrize("tools", [False, True], ids=["relay", "recall-loop"])
def test_a_200_of_the_wrong_shape_is_relayed_as_is(
    start_gateway: Callable[..., ThreadedServer], tools: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream answers 200 with a body that is not JSON, or JSON of the wrong shape: the
    client gets it byte for byte, to a plain relay or through the recall loop; no
    traceback; the gateway keeps serving."""
    server = start_gateway(config=FAST)
    with RawUpstream() as raw:
        for body in WRONG_SHAPES:
            raw.script = [http_head(200, "application/json", len(body)), body, "close"]
            for api, (path, request) in APIS.items():
                if tools:
                    request = {**request, "tools": [TOOLS[api]]}
                response = httpx.post(
                    server.url + path, json=request, headers=upstream_headers(server, raw.url), timeout=30
                )
                assert response.status_code == 200 and response.content == body, (api, body)
    still_serving(server)
    assert tracebacks(caplog) == []


# -- the embedder ----------------------------------------------------------------------------


class CrashingEmbedder(TopicEmbedder):
    name = "crashing"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise RuntimeError("the inference session crashed")


class HangingEmbedder(TopicEmbedder):
    name = "hanging"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        await asyncio.Event().wait()  # never answers
        raise AssertionError("unreachable")


class EmbeddersPlugin:
    @hookimpl
    def lore_register_embedders(self, register: Callable[[Any], None]) -> None:
        register(Factory("crashing", lambda config: CrashingEmbedder()))
        register(Factory("hanging", lambda config: HangingEmbedder()))


@pytest.mark.parametrize(
    ("provider", "problem"),
    [("crashing", "the inference session crashed"), ("hanging", "did not answer a batch")],
)
def test_embedder_crash_or_hang(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, provider: str, problem: str
) -> None:
    """The embedder raises on every call, or never answers: traffic flows, the message is
    stored, recall answers from full-text search, /health says the vector index fails and
    why (a hang after ``embedding.batchTimeoutSeconds``)."""
    config = {"embedding": {"provider": provider, "batchTimeoutSeconds": 0.5}}
    server = start_gateway(config=config, extra_plugins=(EmbeddersPlugin(),))
    chat = Conversation(server.url, "embedder-fault")
    assert chat.turn("the flamingo migration broke the build") == "pong"
    degraded = poll(
        lambda: [line for line in health(server)["degraded"] if line.startswith("vector index:")],
        "the vector index to be reported",
    )
    assert problem in degraded[0]
    found = httpx.get(
        server.url + "/lore/api/recall",
        params={"q": "flamingo migration", "scope": "all"},
        headers=api_headers(),
        timeout=60,
    ).json()
    assert any("flamingo migration" in r["text"] for r in found["results"]), found
    assert chat.turn("and now?") == "pong"


# -- the worker ------------------------------------------------------------------------------


def _observer_calls_answer(reply: Callable[[], Reply]) -> Callable[[RecordedRequest], Reply | None]:
    def respond(req: RecordedRequest) -> Reply | None:
        try:
            system, _ = request_texts(req.json)
        except ValueError:
            return None
        return reply() if OBSERVER_MARKER in system else None

    return respond


@pytest.mark.parametrize(
    ("fault", "reply", "worker"),
    [
        (
            "429 storm",
            lambda: Reply(status=429, headers={"retry-after": "0"}),
            {"maxRetries": 2, "retryBackoffSeconds": 0.01, "circuitBreakerThreshold": 1},
        ),
        (
            "hung",
            lambda: Reply(delay_headers=600),
            {"maxRetries": 0, "timeoutSeconds": 0.5, "circuitBreakerThreshold": 1},
        ),
    ],
    ids=["429-storm", "hung"],
)
def test_worker_429_storm_or_hung(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    fault: str,
    reply: Callable[[], Reply],
    worker: dict[str, Any],
) -> None:
    """Every worker call gets a 429, or hangs: the session's requests are answered all the
    while; the worker makes a bounded number of calls (retries, then its circuit breaker
    opens); /health says so; the session is still distilled, by the extractive observer."""
    fake_upstream.responder = _observer_calls_answer(reply)
    server = start_gateway({"distill": DISTILL, "worker": {"model": "claude-test", **worker}})
    chat = Conversation(server.url, "worker-fault")
    chat.turn("osprey: the deploy fails in deploy/osprey.sh", "osprey: exit 3", "fix it")
    rows = poll(lambda: distillations(server, "worker-fault"), "the session to be distilled")
    assert [d.method for d in rows] == ["extractive"]
    degraded = [line for line in health(server)["degraded"] if line.startswith("worker:")]
    assert degraded and "consecutive failures" in degraded[0]
    calls = len(worker_requests(fake_upstream, OBSERVER_MARKER))
    assert 1 <= calls <= (worker["maxRetries"] + 1) * worker["circuitBreakerThreshold"]
    for i in range(3):
        assert chat.turn(f"next {i}") == "pong"
    # The breaker holds: no new calls while it is open.
    assert len(worker_requests(fake_upstream, OBSERVER_MARKER)) == calls
