"""Transparency and robustness of the proxy: headers, bodies, encodings, retries, errors.

The tests that only send requests with the default configuration share one gateway
(``shared_gateway``); those that configure it, count finished exchanges or cut streams have
their own."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Iterator

import brotli
import httpx
import pytest
import zstandard

from lore_core import hookimpl
from lore_core.testing.fake_upstream import FakeUpstream, Reply
from lore_core.testing.net import refusing_url

MESSAGES_BODY = {"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


class Recorder:
    """A test plugin collecting every finished exchange."""

    def __init__(self) -> None:
        self.exchanges = []
        self.done = threading.Event()

    @hookimpl
    def lore_exchange_complete(self, app, exchange):
        self.exchanges.append(exchange)
        self.done.set()

    def wait(self, count: int = 1, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while len(self.exchanges) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.exchanges) >= count, f"only {len(self.exchanges)} exchanges finished"


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def recorded_gateway(start_gateway, recorder):
    return start_gateway(extra_plugins=(recorder,))


def post(url: str, **kwargs) -> httpx.Response:
    with httpx.Client(timeout=30) as client:
        return client.post(url, **kwargs)


def test_headers_forwarded_in_order_except_hop_by_hop_and_lore_headers(shared_gateway, shared_upstream):
    body = json.dumps(MESSAGES_BODY).encode()
    headers = [
        ("X-Custom-Header", "one"),
        ("anthropic-beta", "claude-code-20250219"),
        ("x-api-key", "sk-ant-secret"),
        ("X-Claude-Code-Session-Id", "abc-123"),
        ("Keep-Alive", "timeout=5"),
        ("X-Lore-Project", "/home/dev/p"),
        ("content-type", "application/json"),
    ]
    response = post(shared_gateway.url + "/v1/messages?beta=true", content=body, headers=headers)
    assert response.status_code == 200
    seen = shared_upstream.api_requests()[-1]
    assert seen.query == "beta=true"
    assert seen.body == body
    # Header names are case-insensitive and ASGI servers lower-case them; order is kept.
    names = [k.lower() for k, _ in seen.headers]
    expected_order = [
        "x-custom-header",
        "anthropic-beta",
        "x-api-key",
        "x-claude-code-session-id",
        "content-type",
    ]
    assert [n for n in names if n in expected_order] == expected_order
    assert seen.header("x-api-key") == "sk-ant-secret"
    assert seen.header("keep-alive") is None
    assert seen.header("x-lore-project") is None
    # Nothing the client did not send is added (e.g. a framework's Remote-Addr).
    sent = {k.lower() for k in response.request.headers} - {"keep-alive", "x-lore-project", "connection"}
    assert {k.lower() for k, _ in seen.headers} - {"host", "content-length"} == sent - {
        "host",
        "content-length",
    }


def test_bearer_auth_is_forwarded(shared_gateway, shared_upstream):
    response = post(
        shared_gateway.url + "/v1/messages", json=MESSAGES_BODY, headers={"Authorization": "Bearer tok-123"}
    )
    assert response.status_code == 200
    assert shared_upstream.api_requests()[-1].header("authorization") == "Bearer tok-123"


def test_body_forwarded_byte_for_byte_with_unknown_fields(shared_gateway, shared_upstream):
    # Odd spacing, key order, unknown roles, fields and block types must all survive.
    body = (
        b'{ "model":"claude-x",  "max_tokens":5, "future_field": {"x": [1,2]},\n'
        b'"messages":[{"role":"system","content":"be brief"},'
        b'{"role":"user","content":[{"type":"mystery_block","payload":"\\u00e9"}]}] }'
    )
    headers = {"content-type": "application/json"}
    response = post(shared_gateway.url + "/v1/messages", content=body, headers=headers)
    assert response.status_code == 200
    assert shared_upstream.api_requests()[-1].body == body


def test_base_url_prefix_is_stripped(shared_gateway, shared_upstream):
    response = post(shared_gateway.url + "/anthropic/v1/messages?beta=true", json=MESSAGES_BODY)
    assert response.status_code == 200
    assert shared_upstream.api_requests()[-1].path == "/v1/messages"
    with httpx.Client() as client:
        assert client.head(shared_gateway.url + "/anthropic/").status_code == 200
        assert client.head(shared_gateway.url + "/").status_code == 200


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
def test_compressed_request_bodies_are_read_and_forwarded_unchanged(
    recorded_gateway, fake_upstream, recorder, encoding
):
    raw = json.dumps(MESSAGES_BODY).encode()
    packed = {
        "gzip": gzip.compress,
        "br": brotli.compress,
        "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    }[encoding](raw)
    response = post(
        recorded_gateway.url + "/v1/messages",
        content=packed,
        headers={"content-type": "application/json", "content-encoding": encoding},
    )
    assert response.status_code == 200
    seen = fake_upstream.api_requests()[-1]
    assert seen.body == packed and seen.header("content-encoding") == encoding
    recorder.wait()
    assert recorder.exchanges[-1].request.messages[0].text == "hi"


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
@pytest.mark.parametrize("stream", [False, True])
def test_compressed_responses_are_relayed_raw_and_assembled(
    recorded_gateway, fake_upstream, recorder, encoding, stream
):
    fake_upstream.enqueue(Reply(text="squeezed answer", compress=encoding))
    with httpx.Client(timeout=30) as client:
        with client.stream(
            "POST",
            recorded_gateway.url + "/v1/messages",
            json={**MESSAGES_BODY, "stream": stream},
            headers={"accept-encoding": encoding},
        ) as response:
            raw = b"".join(response.iter_raw())
    assert response.headers["content-encoding"] == encoding
    assert raw == fake_upstream.responses_sent[-1]
    recorder.wait()
    assert recorder.exchanges[-1].response.text == "squeezed answer"
    assert recorder.exchanges[-1].response.complete


def test_retries_503_then_succeeds(shared_gateway, shared_upstream):
    shared_upstream.enqueue(Reply(status=503), Reply(status=502), Reply(text="third time"))
    response = post(shared_gateway.url + "/v1/messages", json=MESSAGES_BODY)
    assert response.status_code == 200 and response.json()["content"][0]["text"] == "third time"
    assert len(shared_upstream.api_requests()) == 3


@pytest.mark.parametrize("status", [400, 401, 429, 500])
def test_client_errors_and_rate_limits_are_not_retried_and_arrive_verbatim(
    shared_gateway, shared_upstream, status
):
    error = {"type": "error", "error": {"type": "custom", "message": f"upstream says {status}"}}
    shared_upstream.enqueue(Reply(status=status, error_body=error, headers={"retry-after": "7"}))
    response = post(shared_gateway.url + "/v1/messages", json=MESSAGES_BODY)
    assert response.status_code == status
    assert response.json() == error
    assert response.headers.get("retry-after") == "7"
    assert len(shared_upstream.api_requests()) == 1


def test_persistent_503_reaches_the_client_after_bounded_retries(start_gateway, fake_upstream):
    server = start_gateway(config={"upstream": {"maxRetries": 2, "retryBackoffSeconds": 0.01}})
    fake_upstream.enqueue(*[Reply(status=503)] * 5)
    response = post(server.url + "/v1/messages", json=MESSAGES_BODY)
    assert response.status_code == 503
    assert len(fake_upstream.api_requests()) == 3


@pytest.fixture
def dead_url() -> Iterator[str]:
    # Held for the whole test: the gateway it starts could otherwise be given that port.
    with refusing_url() as url:
        yield url


@pytest.mark.parametrize(
    ("path", "body", "shape"),
    [
        ("/v1/messages", MESSAGES_BODY, "anthropic"),
        ("/v1/chat/completions", {"model": "gpt-x", "messages": []}, "openai"),
        ("/v1/responses", {"model": "gpt-x", "input": "hi"}, "openai"),
    ],
)
def test_unreachable_upstream_gives_502_in_the_api_shape(start_gateway, dead_url, path, body, shape):
    dead = dead_url
    server = start_gateway(config={"upstream": {"retryBackoffSeconds": 0.01}})
    response = post(server.url + path, json=body, headers={"x-lore-upstream-url": dead})
    assert response.status_code == 502
    payload = response.json()
    if shape == "anthropic":
        assert payload["type"] == "error" and dead in payload["error"]["message"]
    else:
        assert dead in payload["error"]["message"] and payload["error"]["type"] == "server_error"


def test_header_timeout_is_retried_then_reported(start_gateway, fake_upstream):
    server = start_gateway(
        config={"upstream": {"headerTimeoutSeconds": 0.3, "maxRetries": 1, "retryBackoffSeconds": 0.01}}
    )
    fake_upstream.enqueue(Reply(delay_headers=2), Reply(delay_headers=2))
    response = post(server.url + "/v1/messages", json=MESSAGES_BODY)
    assert response.status_code == 502
    assert "no response headers within 0.3s" in response.json()["error"]["message"]
    assert len(fake_upstream.api_requests()) == 2


def test_upstream_header_and_model_prefix_route_requests(start_gateway, fake_upstream):
    with FakeUpstream() as other, FakeUpstream() as by_prefix:
        server = start_gateway(config={"upstream": {"byModelPrefix": {"local-": by_prefix.url}}})
        post(server.url + "/v1/messages", json=MESSAGES_BODY, headers={"x-lore-upstream-url": other.url})
        post(server.url + "/v1/chat/completions", json={"model": "local-llama", "messages": []})
        post(server.url + "/v1/messages", json=MESSAGES_BODY)
        assert (
            len(other.api_requests()) == 1 and other.api_requests()[0].header("x-lore-upstream-url") is None
        )
        assert len(by_prefix.api_requests()) == 1
        assert len(fake_upstream.api_requests()) == 1


def test_bad_upstream_url_header_is_a_client_error(shared_gateway):
    response = post(
        shared_gateway.url + "/v1/messages", json=MESSAGES_BODY, headers={"x-lore-upstream-url": "ftp://x"}
    )
    assert response.status_code == 400
    assert response.json()["type"] == "error"


def test_websocket_upgrade_on_responses_is_answered_426(shared_gateway):
    port = int(shared_gateway.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        status_line = sock.recv(4096).split(b"\r\n", 1)[0]
    assert b" 426 " in status_line


@pytest.mark.parametrize(
    ("path", "content", "headers", "status", "fragment"),
    [
        ("/v1/messages", b"{not json", {"content-type": "application/json"}, 400, "not valid JSON"),
        ("/v1/messages", b"[1, 2]", {"content-type": "application/json"}, 400, "must be a JSON object"),
        ("/v1/messages", b"", {"content-type": "application/json"}, 400, "empty"),
        (
            "/v1/messages",
            b"model=x",
            {"content-type": "application/x-www-form-urlencoded"},
            415,
            "expected a JSON body",
        ),
        (
            "/v1/messages",
            b"\x00garbage",
            {"content-type": "application/json", "content-encoding": "gzip"},
            400,
            "decode",
        ),
        (
            "/v1/messages",
            b"{}",
            {"content-type": "application/json", "content-encoding": "lzma"},
            400,
            "lzma",
        ),
        ("/v1/chat/completions", b"{oops", {"content-type": "application/json"}, 400, "not valid JSON"),
        ("/v1/responses", b'"a string"', {"content-type": "application/json"}, 400, "must be a JSON object"),
        # 20,000 levels of nesting: past the JSON parser's recursion limit (was a 500).
        (
            "/v1/messages",
            b'{"model": "x", "messages": ' + b"[" * 20_000 + b"]" * 20_000 + b"}",
            {"content-type": "application/json"},
            400,
            "nests too deeply",
        ),
        (
            "/v1/responses",
            b"[" * 20_000 + b"]" * 20_000,
            {"content-type": "application/json"},
            400,
            "too deeply",
        ),
    ],
)
def test_bad_input_gets_a_4xx_in_the_api_shape_and_the_gateway_keeps_serving(
    shared_gateway, shared_upstream, path, content, headers, status, fragment
):
    response = post(shared_gateway.url + path, content=content, headers=headers)
    assert response.status_code == status
    payload = response.json()
    message = payload["error"]["message"]
    assert fragment in message
    if path == "/v1/messages":
        assert payload["type"] == "error"
    assert shared_upstream.api_requests() == []
    assert post(shared_gateway.url + "/v1/messages", json=MESSAGES_BODY).status_code == 200


def test_oversized_body_gets_413(start_gateway, fake_upstream):
    server = start_gateway(config={"server": {"maxBodyBytes": 2000}})
    big = {**MESSAGES_BODY, "messages": [{"role": "user", "content": "x" * 5000}]}
    response = post(server.url + "/v1/messages", json=big)
    assert response.status_code == 413
    assert "limit of 2000 bytes" in response.json()["error"]["message"]
    # Chunked uploads (no Content-Length) are limited too.
    chunked = post(server.url + "/v1/chat/completions", content=iter([b"x" * 1500, b"y" * 1500]))
    assert chunked.status_code == 413
    assert fake_upstream.api_requests() == []


def test_client_disconnect_mid_stream_cancels_upstream_and_keeps_partial(
    recorded_gateway, fake_upstream, recorder
):
    fake_upstream.enqueue(
        Reply(text="one two three four five six seven eight", text_chunks=8, chunk_delay=0.3)
    )
    body = {**MESSAGES_BODY, "stream": True}
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", recorded_gateway.url + "/v1/messages", json=body) as r,
    ):
        received = b""
        for chunk in r.iter_raw():
            received += chunk
            if b"text_delta" in received:
                break  # leave mid-stream
    recorder.wait()
    exchange = recorder.exchanges[-1]
    assert exchange.client_disconnected
    assert exchange.response is not None and not exchange.response.complete
    assert exchange.response.text.startswith("one")
    assert exchange.response.text != "one two three four five six seven eight"
    deadline = time.monotonic() + 10
    while fake_upstream.disconnects == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake_upstream.disconnects == 1, "the upstream request was not cancelled"


def test_other_v1_paths_are_forwarded_and_unknown_paths_404(shared_gateway, shared_upstream):
    with httpx.Client() as client:
        files = client.get(shared_gateway.url + "/v1/files?limit=3", headers={"authorization": "Bearer t"})
        assert files.status_code == 200 and files.json() == {"echo": "/v1/files", "method": "GET"}
        assert shared_upstream.requests[-1].query == "limit=3"
        upload = client.post(
            shared_gateway.url + "/v1/uploads", content=b"raw bytes", headers={"content-type": "text/plain"}
        )
        assert upload.status_code == 200 and shared_upstream.requests[-1].body == b"raw bytes"
        missing = client.get(shared_gateway.url + "/nope")
        assert missing.status_code == 404 and "no route" in missing.json()["error"]["message"]


def test_health_reports_plugins_and_upstreams(shared_gateway, shared_upstream):
    with httpx.Client() as client:
        health = client.get(shared_gateway.url + "/health").json()
    assert health["status"] == "ok"
    assert health["upstreams"]["anthropic"] == shared_upstream.url
    assert "lore_core.builtin.codecs" in health["plugins"]


def test_an_upstream_stream_cut_off_is_cut_off_for_the_client_too(recorded_gateway, fake_upstream, recorder):
    fake_upstream.enqueue(Reply(text="partial answer here", text_chunks=3, drop_after_events=4))
    body = {**MESSAGES_BODY, "stream": True}
    received = b""
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.Client(timeout=30) as client:
            with client.stream("POST", recorded_gateway.url + "/v1/messages", json=body) as r:
                for chunk in r.iter_raw():
                    received += chunk
    assert b"message_start" in received and b"message_stop" not in received
    recorder.wait()
    assert recorder.exchanges[-1].response is not None
    assert not recorder.exchanges[-1].response.complete


def test_responses_carry_one_date_header(shared_gateway, shared_upstream):
    response = post(shared_gateway.url + "/v1/messages", json=MESSAGES_BODY)
    assert len(response.headers.get_list("date")) == 1


@pytest.mark.parametrize("encoding", [None, "gzip"])
def test_the_recall_tool_is_spliced_into_the_clients_own_bytes(shared_gateway, shared_upstream, encoding):
    from lore_core.recall.tool import recall_tool
    from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

    # Odd spacing and non-ASCII text: every byte but the added tool stays as the client sent it.
    body = (
        b'{ "model":"claude-x",  "max_tokens":5,\n"tools": [ {"name": "Read", "input_schema": {}} ],'
        b'"messages":[{"role":"user","content":"caf\xc3\xa9 \\u00e9"}] }'
    )
    headers = {"content-type": "application/json"}
    if encoding:
        headers["content-encoding"] = encoding
    content = gzip.compress(body) if encoding else body
    response = post(shared_gateway.url + "/v1/messages", content=content, headers=headers)
    assert response.status_code == 200
    seen = shared_upstream.api_requests()[-1]
    assert seen.header("content-encoding") is None
    expected = {
        **json.loads(body),
        "tools": [{"name": "Read", "input_schema": {}}, recall_tool(AnthropicMessagesCodec())],
    }
    assert json.loads(seen.body) == expected
    cut = body.index(b"]")
    assert seen.body[:cut] == body[:cut] and seen.body.endswith(body[cut:])


def test_upstream_cookies_are_relayed_but_never_kept(shared_gateway, shared_upstream):
    shared_upstream.enqueue(Reply(headers={"set-cookie": "lb=node-3; Path=/"}))
    response = post(shared_gateway.url + "/v1/messages", json=MESSAGES_BODY)
    assert response.status_code == 200 and response.headers["set-cookie"] == "lb=node-3; Path=/"
    # The upstream client's jar would send it with every later request, of every client.
    assert len(shared_gateway.gateway.upstream._client.cookies.jar) == 0


def test_a_whole_answer_that_decodes_past_the_limit_is_relayed_unread(
    recorded_gateway, fake_upstream, recorder, monkeypatch
):
    """A few KiB of gzip can decode to gigabytes: a whole answer is decoded (to be recorded
    and edited) only up to a limit, while decoding; past it the client still gets the
    upstream's bytes, and nothing of it is read."""
    from lore_core.pipeline import relay

    monkeypatch.setattr(relay, "MAX_READ_ANSWER_BYTES", 100_000)
    fake_upstream.enqueue(Reply(text="z" * 300_000, compress="gzip"))
    with httpx.Client(timeout=30) as client:
        response = client.post(
            recorded_gateway.url + "/v1/messages", json=MESSAGES_BODY, headers={"accept-encoding": "gzip"}
        )
    assert response.status_code == 200
    assert response.json()["content"][0]["text"] == "z" * 300_000  # the client's answer is whole
    sent = fake_upstream.responses_sent[-1]
    assert len(sent) < 5_000  # it was a small compressed body
    recorder.wait()
    assert recorder.exchanges[-1].response is None or not recorder.exchanges[-1].response.text


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
def test_a_stream_that_decodes_past_the_limit_is_relayed_whole_and_its_record_stops(
    recorded_gateway, fake_upstream, recorder, monkeypatch, encoding
):
    """The relay reads a decoded copy of a compressed stream beside the bytes it relays:
    that copy is bounded while decoding (a bomb's output is never built), the relay is not."""
    from lore_core.pipeline import relay

    monkeypatch.setattr(relay, "MAX_READ_ANSWER_BYTES", 100_000)
    fake_upstream.enqueue(Reply(text="w" * 400_000, compress=encoding, text_chunks=8))
    with httpx.Client(timeout=30) as client:
        with client.stream(
            "POST",
            recorded_gateway.url + "/v1/messages",
            json={**MESSAGES_BODY, "stream": True},
            headers={"accept-encoding": encoding},
        ) as response:
            raw = b"".join(response.iter_raw())
    assert response.status_code == 200
    assert raw == fake_upstream.responses_sent[-1]
    recorder.wait()
    answer = recorder.exchanges[-1].response
    assert answer is None or len(answer.text) < 400_000
