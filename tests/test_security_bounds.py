"""Bounded work for every input (security review F8, F11, F12, F17), through real sockets
against a real gateway: a compressed body is bounded by what it expands to, an upstream's
answer is read in linear time and kept up to a cap, slow clients are cut off, the local
API's bodies are bounded, and malformed input gets a 4xx, never a 5xx or a traceback.

Each test's docstring names the finding. Nothing asserts a wall-clock limit: a deadline is
only how long a test waits before it fails.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import brotli
import httpx
import pytest
import zstandard

from lore_core import hookimpl
from lore_core.context.tokens import load_encoding
from lore_core.http.serve import OPEN_FILES_WANTED, raise_open_files_limit
from lore_core.model import Exchange
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.net import api_headers
from lore_core.testing.raw_upstream import RawUpstream, http_head
from lore_core.testing.server import ThreadedServer
from lore_core.wire import sse
from lore_core.wire.anthropic.codec import AnthropicAssembler
from lore_core.wire.turns import EventSplitter

MESSAGES = {"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
ANTHROPIC = {"content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": "sk-ant-t"}
MIB = 1024 * 1024
T = TypeVar("T")


class Recorder:
    """A test plugin collecting every finished exchange."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []

    @hookimpl
    def lore_exchange_complete(self, app: Any, exchange: Exchange) -> None:
        self.exchanges.append(exchange)

    def wait(self, count: int = 1, deadline: float = 60) -> Exchange:
        end = time.monotonic() + deadline
        while len(self.exchanges) < count and time.monotonic() < end:
            time.sleep(0.02)
        assert len(self.exchanges) >= count, f"only {len(self.exchanges)} exchanges finished"
        return self.exchanges[count - 1]


def port_of(server: ThreadedServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


# -- F8: a compressed request body is bounded by what it expands to ----------------------------


def bomb(encoding: str, size: int) -> bytes:
    """A model request of about ``size`` bytes, compressed to a few KiB."""
    raw = b'{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"' + b"a" * size + b'"}]}'
    if encoding == "gzip":
        return gzip.compress(raw, 9)
    if encoding == "deflate":
        return zlib.compress(raw, 9)
    if encoding == "br":
        return brotli.compress(raw, quality=5)
    if encoding == "zstd":
        return zstandard.ZstdCompressor(level=3).compress(raw)
    if encoding == "gzip, br":  # gzip applied first, then br
        return brotli.compress(gzip.compress(raw, 9), quality=5)
    raise AssertionError(encoding)


def traced_peak(call: Callable[[], T]) -> tuple[T, int]:
    """``call()``'s answer and the most memory Python held at once while it ran (the
    gateway runs in this process)."""
    load_encoding()  # loaded once per process, at the first token count: ~25 MB
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        answer = call()
        return answer, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd", "gzip, br"])
def test_a_compressed_body_past_the_limit_once_expanded_gets_413_and_is_never_forwarded(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, encoding: str
) -> None:
    """F8: ``server.maxBodyBytes`` bounds the decompressed size of a body: 20 MiB packed into
    a few KiB get 413 in the API's error shape under a 1 MiB limit, nothing goes upstream,
    and the gateway never holds the expanded body."""
    server = start_gateway(config={"server": {"maxBodyBytes": MIB}})
    body = bomb(encoding, 20 * MIB)
    assert len(body) < MIB
    headers = {**ANTHROPIC, "content-encoding": encoding}
    answer, peak = traced_peak(
        lambda: httpx.post(server.url + "/v1/messages", content=body, headers=headers, timeout=60)
    )
    assert answer.status_code == 413, answer.text
    error = answer.json()
    assert error["type"] == "error" and error["error"]["type"] == "request_too_large"
    assert f"limit of {MIB} bytes" in error["error"]["message"]
    assert fake_upstream.api_requests() == []
    assert peak < 8 * MIB, f"the gateway held {peak} bytes at once"
    # A body that expands to less than the limit still goes through.
    small = gzip.compress(json.dumps(MESSAGES).encode())
    ok = httpx.post(
        server.url + "/v1/messages", content=small, headers={**ANTHROPIC, "content-encoding": "gzip"}
    )
    assert ok.status_code == 200, ok.text


def test_a_compressed_passthrough_body_is_bounded_too(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    """F8: the passthrough routes (count_tokens, ...) bound what a body expands to as well."""
    server = start_gateway(config={"server": {"maxBodyBytes": MIB}})
    headers = {**ANTHROPIC, "content-encoding": "gzip"}
    url = server.url + "/v1/messages/count_tokens"
    answer = httpx.post(url, content=bomb("gzip", 20 * MIB), headers=headers, timeout=60)
    assert answer.status_code == 413, answer.text
    assert f"limit of {MIB} bytes once decoded" in answer.json()["error"]["message"]
    assert fake_upstream.requests == []
    # Within the limit it is forwarded as the client sent it, still compressed.
    small = gzip.compress(json.dumps(MESSAGES).encode())
    assert httpx.post(url, content=small, headers=headers).status_code == 200
    assert fake_upstream.requests[-1].body == small


# -- F11: an upstream's answer is read in linear time and kept up to a cap ---------------------


def anthropic_event(payload: dict[str, Any]) -> bytes:
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()


START = anthropic_event(
    {"type": "message_start", "message": {"id": "m1", "model": "claude-x", "usage": {"input_tokens": 1}}}
) + anthropic_event(
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
)
STOP = anthropic_event(
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}
) + anthropic_event({"type": "message_stop"})


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def gateway_to(
    start_gateway: Callable[..., ThreadedServer], upstream: RawUpstream, recorder: Recorder
) -> ThreadedServer:
    """A gateway whose configured upstreams are ``upstream`` (its answers are recorded)."""
    env = {"LORE_UPSTREAM_ANTHROPIC": upstream.url, "LORE_UPSTREAM_OPENAI": upstream.url}
    return start_gateway(env=env, extra_plugins=(recorder,))


def relayed(server: ThreadedServer, path: str, body: dict[str, Any]) -> tuple[int, str]:
    """Stream one answer through the gateway: (bytes the client got, their sha256), read
    without keeping them."""
    digest, size = hashlib.sha256(), 0
    headers = ANTHROPIC
    with httpx.stream(
        "POST", server.url + path, json={**body, "stream": True}, headers=headers, timeout=120
    ) as r:
        assert r.status_code == 200
        for chunk in r.iter_raw():
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def sent_by(script: list[bytes]) -> tuple[int, str]:
    body = b"".join(script[1:])  # after the head
    return len(body), hashlib.sha256(body).hexdigest()


#: A client tool: the gateway adds its recall tool, and the answer goes through the codec's
#: stream editor (lore_core/wire/turns.py's EventSplitter) as well as its assembler.
TOOLS = {"tools": [{"name": "run", "description": "run a command", "input_schema": {"type": "object"}}]}


@pytest.mark.parametrize("extra", [{}, TOOLS], ids=["relayed", "edited"])
def test_one_huge_sse_line_in_small_chunks_is_relayed_whole_and_not_buffered_past_the_cap(
    start_gateway: Callable[..., ThreadedServer], monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any]
) -> None:
    """F11: an 8 MiB SSE data line arriving in 4 KiB pieces reaches the client byte for byte;
    the gateway buffers it for parsing only up to ``sse.MAX_EVENT_BYTES`` and records the
    answer as cut, instead of rescanning an ever longer buffer."""
    monkeypatch.setattr(sse, "MAX_EVENT_BYTES", MIB)
    recorder = Recorder()
    huge = anthropic_event(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a" * (8 * MIB)}}
    )
    after = anthropic_event(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "end"}}
    )
    script: list[bytes] = [http_head(200, "text/event-stream"), START, *pieces(huge, 4096), after, STOP]
    with RawUpstream() as upstream:
        upstream.script = script
        server = gateway_to(start_gateway, upstream, recorder)
        got, peak = traced_peak(lambda: relayed(server, "/v1/messages", {**MESSAGES, **extra}))
        assert got == sent_by(script)
        assert (b'"name": "recall"' in upstream.requests[0]) == bool(extra)
    assert peak < 6 * MIB, f"the gateway held {peak} bytes at once"
    answer = recorder.wait().response
    assert answer is not None and answer.complete
    text = answer.text
    assert text.startswith("end") and sse.TRUNCATED_NOTE in text and len(text) < MIB


def chat_delta(text: str) -> bytes:
    return (
        b"data: "
        + json.dumps({"id": "c1", "choices": [{"index": 0, "delta": {"content": text}}]}).encode()
        + b"\n\n"
    )


def responses_delta(text: str) -> bytes:
    payload = {"type": "response.output_text.delta", "output_index": 0, "delta": text}
    return b"event: response.output_text.delta\ndata: " + json.dumps(payload).encode() + b"\n\n"


def many_deltas(api: str, count: int, text: str) -> tuple[str, dict[str, Any], list[bytes]]:
    if api == "anthropic":
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
        return "/v1/messages", MESSAGES, [START, *[anthropic_event(delta)] * count, STOP]
    if api == "chat":
        body = {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}
        return "/v1/chat/completions", body, [*[chat_delta(text)] * count, b"data: [DONE]\n\n"]
    item = {"type": "message", "role": "assistant", "content": []}
    added = {"type": "response.output_item.added", "output_index": 0, "item": item}
    start = b"event: response.output_item.added\ndata: " + json.dumps(added).encode() + b"\n\n"
    return "/v1/responses", {"model": "gpt-x", "input": "hi"}, [start, *[responses_delta(text)] * count]


@pytest.mark.parametrize("extra", [{}, TOOLS], ids=["relayed", "edited"])
@pytest.mark.parametrize("api", ["anthropic", "chat", "responses"])
def test_many_small_deltas_are_relayed_whole_and_the_answer_kept_up_to_the_cap(
    start_gateway: Callable[..., ThreadedServer],
    monkeypatch: pytest.MonkeyPatch,
    api: str,
    extra: dict[str, Any],
) -> None:
    """F11: 20,000 small text deltas all reach the client; the answer recorded for storage
    stops at ``sse.MAX_ANSWER_CHARS`` and says it was cut (deltas are collected and joined
    once, not copied again on each one)."""
    monkeypatch.setattr(sse, "MAX_ANSWER_CHARS", 100_000)
    recorder = Recorder()
    path, body, events = many_deltas(api, 20_000, "0123456789" * 5)
    script = [
        http_head(200, "text/event-stream"),
        *[b"".join(events[i : i + 50]) for i in range(0, len(events), 50)],
    ]
    with RawUpstream() as upstream:
        upstream.script = script
        server = gateway_to(start_gateway, upstream, recorder)
        assert relayed(server, path, {**body, **extra}) == sent_by(script)
    answer = recorder.wait().response
    assert answer is not None
    text = answer.text
    assert text.startswith("0123456789" * 5) and text.endswith(sse.TRUNCATED_NOTE)
    assert len(text) == 100_000 + len(sse.TRUNCATED_NOTE)


def test_the_sse_parser_scans_each_byte_once_however_the_line_is_cut() -> None:
    """F11: feeding one long line in 10,000 pieces scans each byte once (the parser used to
    rejoin and rescan everything buffered on every piece: quadratic)."""
    parser = sse.SSEParser(max_event_bytes=10 * MIB)
    line = b"data: " + b"x" * 999_994
    events = []
    for piece in pieces(line, 100):
        events += list(parser.feed(piece))
    assert events == []
    assert parser.scanned == len(line)
    events = list(parser.feed(b"\r\n\r\n"))
    assert events == [("", "x" * 999_994)]
    assert parser.scanned == len(line) + 4


def test_the_sse_parser_drops_an_event_past_its_cap_and_goes_on() -> None:
    """F11: an event larger than the cap is dropped (counted) without being buffered, with
    every line ending (``\\n``, ``\\r\\n``, ``\\r``, split across pieces) still read right."""
    parser = sse.SSEParser(max_event_bytes=1000)
    stream = (
        b"event: big\r\ndata: " + b"y" * 5000 + b"\r\n\r\n"
        b"event: ok\rdata: one\rdata: two\r\r"
        b": comment\n"
        b"data: three\n\n"
    )
    events = []
    for piece in pieces(stream, 7):
        events += list(parser.feed(piece))
        assert parser.buffered <= 1000
    assert events == [("ok", "one\ntwo"), ("", "three")]
    assert parser.dropped == 1


def test_the_editors_event_splitter_passes_an_event_past_its_cap_through_as_it_comes() -> None:
    """F11: the stream editors' splitter does not hold an event past the cap: what it held,
    then the rest as it arrives, comes out unchanged (as ``("", "", raw)``, which every
    editor relays as is); the events around it are split as before."""
    splitter = EventSplitter(max_event_bytes=1000)
    big = b"event: big\r\ndata: " + b"y" * 5000 + b"\r\n\r\n"
    stream = b"event: a\ndata: 1\n\n" + big + b"data: 2\r\n\r\n"
    out = []
    for piece in pieces(stream, 300):
        out += splitter.feed(piece)
        assert splitter.held <= 1000
    assert out[0] == ("a", "1", b"event: a\ndata: 1\n\n")
    assert out[-1] == ("", "2", b"data: 2\n\n")
    passed = out[1:-1]
    assert all(name == "" and data == "" for name, data, _ in passed)
    assert b"".join(raw for _, _, raw in passed) == big.replace(b"\r\n", b"\n")


def test_an_assembler_joins_deltas_once_and_marks_a_cut_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """F11: the Anthropic assembler keeps text, tool input and thinking deltas in a shared
    budget; past it, the rest is dropped and the answer says so."""
    monkeypatch.setattr(sse, "MAX_ANSWER_CHARS", 1000)
    assembler = AnthropicAssembler()
    assembler.feed(START)
    for _ in range(300):
        assembler.feed(
            anthropic_event(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "abcd"}}
            )
        )
    assembler.feed(STOP)
    answer = assembler.result()
    assert answer.text == "abcd" * 250 + sse.TRUNCATED_NOTE
    assert answer.complete


# -- F12: slow clients are cut off -------------------------------------------------------------


def until_closed(sock: socket.socket, trickle: bytes, every: float, deadline: float) -> bytes | None:
    """Send ``trickle`` every ``every`` seconds until the peer closes the connection: what it
    sent before closing, or ``None`` when ``deadline`` seconds passed first."""
    sock.settimeout(every)
    received = b""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            data = None
        except ConnectionError:
            return received
        if data == b"":
            return received
        received += data or b""
        try:
            sock.sendall(trickle)
        except (BrokenPipeError, ConnectionError):
            return received
    return None


def test_a_client_trickling_its_headers_is_cut_off_while_others_are_served(
    start_gateway: Callable[..., ThreadedServer],
) -> None:
    """F12: a connection sending a header line every 0.3 s never completes its request and
    is closed after ``server.headerTimeoutSeconds``; a normal request on another connection
    is answered meanwhile."""
    server = start_gateway(config={"server": {"headerTimeoutSeconds": 1}})
    answered: list[int] = []

    def normal_request() -> None:
        time.sleep(0.5)
        answered.append(httpx.post(server.url + "/v1/messages", json=MESSAGES, headers=ANTHROPIC).status_code)

    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=10) as slow:
        slow.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        other = threading.Thread(target=normal_request)
        other.start()
        assert until_closed(slow, b"x-a: b\r\n", every=0.3, deadline=30) is not None
        other.join(30)
    assert answered == [200]


def test_a_client_trickling_its_body_gets_408(start_gateway: Callable[..., ThreadedServer]) -> None:
    """F12: a model request whose body trickles in is answered 408 (in the API's shape) after
    ``server.bodyTimeoutSeconds``, and its connection closed."""
    server = start_gateway(config={"server": {"bodyTimeoutSeconds": 1}})
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=10) as slow:
        slow.sendall(
            b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"anthropic-version: 2023-06-01\r\ncontent-length: 100000\r\n\r\n{"
        )
        received = until_closed(slow, b" ", every=0.3, deadline=30)
    assert received is not None and received.startswith(b"HTTP/1.1 408 "), received
    error = json.loads(received.split(b"\r\n\r\n", 1)[1])
    assert error["type"] == "error" and "1 s" in error["error"]["message"]


def test_lore_serve_raises_its_open_files_limit() -> None:
    """F12: hypercorn has no cap on concurrent connections, so ``lore serve`` raises its soft
    descriptor limit toward the hard one: ~1,000 idle connections no longer exhaust it."""
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    expected = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, expected), hard))  # the usual default
        assert raise_open_files_limit() == expected
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (expected, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- F17: the local API's bodies are bounded; bad input is a 4xx -------------------------------


def chunked(data: bytes) -> Iterator[bytes]:
    yield from pieces(data, 16 * 1024)


EVENT = {"kind": "note", "content": "z" * 1000}
#: A valid request of each local API route, of about 100 KiB.
BIG_API_BODIES = {
    "/v1/events": {"run": "r1", "events": [EVENT] * 100},
    "/v1/pack": {"run": "r1", "query": "z " * 50_000},
    "/lore/api/knowledge/import?project=/work/shop&format=json": [
        {"category": "decision", "title": f"decision {i}", "content": "z" * 1000} for i in range(100)
    ],
}


@pytest.mark.parametrize("path", list(BIG_API_BODIES))
def test_local_api_bodies_past_their_limit_get_413_as_json(
    start_gateway: Callable[..., ThreadedServer], path: str
) -> None:
    """F17: ``server.maxApiBodyBytes`` bounds every body of the local API (with or without a
    Content-Length): 413 as JSON, where a 70 MiB import or 20 MB of events were accepted."""
    server = start_gateway(config={"server": {"maxApiBodyBytes": 64 * 1024}})
    big = json.dumps(BIG_API_BODIES[path]).encode()
    headers = {**api_headers(), "content-type": "application/json"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        for content in (big, chunked(big)):
            answer = client.post(path, content=content)
            assert answer.status_code == 413, answer.text
            assert "limit of 65536 bytes" in answer.json()["error"]
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        small = client.post("/v1/events", json={"run": "r1", "events": [EVENT]})
        assert small.status_code == 200, small.text


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b'{"run":"r1","events":[{"kind":"note","content":"bad \\ud800 text"}]}', "surrogate"),
        (b'{"run":"r1","events":[{"kind":"note","content":"bad \xed\xa0\x80 text"}]}', "surrogate"),
        (b"[" * 100_000, "nests too deeply"),
    ],
    ids=["escaped-surrogate", "encoded-surrogate", "deep"],
)
def test_malformed_events_get_400_not_a_store_failure(
    start_gateway: Callable[..., ThreadedServer], content: bytes, fragment: str
) -> None:
    """F17: a lone surrogate in an event, and ``[`` x 100,000, are the client's mistakes: 400
    with a JSON error (they were 503 "the store failed")."""
    server = start_gateway()
    headers = {**api_headers(), "content-type": "application/json"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        answer = client.post("/v1/events", content=content)
        assert answer.status_code == 400, answer.text
        assert fragment in answer.json()["error"]
        ok = client.post("/v1/events", json={"run": "r1", "events": [{"kind": "note", "content": "fine"}]})
        assert ok.status_code == 200, ok.text


def test_a_websocket_upgrade_to_the_root_is_refused_cleanly(
    gateway: ThreadedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """F17: a WebSocket upgrade to ``/`` gets a 4xx with nothing logged as an error (it was a
    500 with two tracebacks)."""
    caplog.set_level(logging.INFO)
    with socket.create_connection(("127.0.0.1", port_of(gateway)), timeout=10) as sock:
        sock.sendall(
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        status_line = sock.recv(4096).split(b"\r\n", 1)[0]
    assert b" 426 " in status_line, status_line
    assert httpx.get(gateway.url + "/health").status_code == 200
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []
