"""A real HTTP server on loopback that answers like the providers do.

It speaks Anthropic Messages, OpenAI Chat Completions and OpenAI Responses, JSON and SSE,
records every request exactly as it arrived (method, path, query, headers in wire order and
case, body bytes), and can be scripted: queue :class:`Reply` objects to answer with text or
tool calls, errors, delays, compression, or a connection that drops mid-stream. The default
answer is the text ``pong``.

Run it in a thread (``FakeUpstream().start()``) or as a process
(``python -m lore_core.testing.fake_upstream --port N``) for benchmarks; ``--echo`` answers
every request with its own last user text (:func:`echo_responder`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import brotli
import zstandard
from aiohttp import web

from lore_core.testing.net import free_port, wait_for_http
from lore_core.wire.encoding import decode_body


@attrs.define
class ToolCall:
    name: str
    input: dict[str, Any] = attrs.field(factory=dict)
    id: str = attrs.field(factory=lambda: "call_" + uuid.uuid4().hex[:16])
    # Responses only: the tool namespace the call belongs to (Codex groups each MCP server's
    # tools under one, e.g. ``mcp__lore``, and names the call by the bare tool name).
    namespace: str | None = None


@attrs.define
class Reply:
    """One scripted answer. Unset fields give a plain ``pong``."""

    text: str = "pong"
    tool_calls: list[ToolCall] = attrs.field(factory=list)
    status: int = 200
    # Body to send with a non-200 status; the default is the API's own error shape.
    error_body: Any = None
    headers: dict[str, str] = attrs.field(factory=dict)
    delay_headers: float = 0.0  # seconds before the response headers
    # Held until the test sets this event (at most a minute), then answered: a worker call
    # kept open while the test does something else (another gateway, a kill).
    hold: threading.Event | None = None
    chunk_delay: float = 0.0  # seconds between SSE events
    compress: str | None = None  # "gzip" | "br" | "zstd"
    drop_after_events: int | None = None  # close the connection after this many events
    # A JSON answer: declare the whole body's length, send this many bytes, close.
    drop_after_bytes: int | None = None
    input_tokens: int = 12
    output_tokens: int = 3
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # Split the text into this many deltas when streaming.
    text_chunks: int = 2
    # Responses API, streamed: fail the started stream with this error object
    # (``{"code": ..., "message": ...}``) in a ``response.failed`` event.
    stream_failure: dict[str, Any] | None = None
    # A non-streamed answer sent exactly as given (JSON), instead of one built from the
    # fields above: e.g. a recorded turn of a real model, replayed.
    body: dict[str, Any] | None = None


@attrs.define
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def json(self) -> Any:
        body = decode_body(self.body, self.header("content-encoding"))
        return json.loads(body) if body else None

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


class FakeUpstream:
    """The loopback provider. ``requests`` holds every request received, in order."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}"
        self.requests: list[RecordedRequest] = []
        # Bodies as sent, in order (a stream's entry grows as it is written).
        self.responses_sent: list[bytes | bytearray] = []
        self._replies: deque[Reply] = deque()
        self.responder: Callable[[RecordedRequest], Reply | None] | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._stopped = threading.Event()
        self.disconnects = 0  # streams the client abandoned
        # False keeps nothing: a long benchmark run would otherwise hold every body it saw.
        self.keep_records = True

    # -- scripting ---------------------------------------------------------------------------

    def enqueue(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    def reset(self) -> None:
        """Nothing queued, recorded or counted: as new."""
        self.requests.clear()
        self.responses_sent.clear()
        self._replies.clear()
        self.responder = None
        self.disconnects = 0

    def api_requests(self) -> list[RecordedRequest]:
        """Requests to the model endpoints (not ``HEAD /``, model lists, ...)."""
        return [
            r
            for r in self.requests
            if r.method == "POST" and r.path.endswith(("messages", "completions", "responses"))
        ]

    def _next_reply(self, req: RecordedRequest) -> Reply:
        if self.responder is not None:
            reply = self.responder(req)
            if reply is not None:
                return reply
        return self._replies.popleft() if self._replies else Reply()

    # -- server ------------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    def start(self) -> FakeUpstream:
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            # Record request bodies exactly as sent, still compressed when they were.
            self._runner = web.AppRunner(
                self.make_app(), access_log=None, handle_signals=False, auto_decompress=False
            )
            loop.run_until_complete(self._runner.setup())
            loop.run_until_complete(web.TCPSite(self._runner, self.host, self.port).start())
            started.set()
            loop.run_forever()
            # Answers still in progress (a scripted hang, say) end with the server.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(self._runner.cleanup())
            loop.close()
            self._stopped.set()

        self._thread = threading.Thread(target=run, name="fake-upstream", daemon=True)
        self._thread.start()
        started.wait(10)
        wait_for_http(self.url + "/__health")
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._stopped.wait(10)

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- answering ---------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/__health":
            return web.Response(text="ok")
        body = await request.read()
        rec = RecordedRequest(
            method=request.method,
            path=request.path,
            query=request.query_string,
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers],
            body=body,
        )
        if self.keep_records:
            self.requests.append(rec)
        path = request.path
        if request.method == "HEAD":
            return web.Response(status=200)
        if request.method == "GET" and path.endswith("/models"):
            return web.json_response({"data": [{"id": "fake-model", "type": "model"}], "object": "list"})
        if path.endswith("/count_tokens"):
            return web.json_response({"input_tokens": max(1, len(body) // 4)})
        api = _api_for(path)
        if api is None:
            return web.json_response({"echo": path, "method": request.method}, status=200)
        reply = self._next_reply(rec)
        if reply.delay_headers:
            await asyncio.sleep(reply.delay_headers)
        if reply.hold is not None:
            await asyncio.to_thread(reply.hold.wait, 60.0)
        try:
            payload = rec.json or {}
        except ValueError:
            payload = {}
        if reply.status != 200:
            error = reply.error_body if reply.error_body is not None else _error_body(api, reply.status)
            return web.json_response(error, status=reply.status, headers=reply.headers)
        model = payload.get("model", "fake-model") if isinstance(payload, dict) else "fake-model"
        if isinstance(payload, dict) and payload.get("stream") is True:
            return await self._stream(request, api, reply, model, payload)
        answer = reply.body if reply.body is not None else _json_answer(api, reply, model)
        data = json.dumps(answer).encode()
        headers = {"content-type": "application/json", **reply.headers}
        if reply.compress:
            data = _compress_all(reply.compress, data)
            headers["content-encoding"] = reply.compress
        if self.keep_records:
            self.responses_sent.append(data)
        if reply.drop_after_bytes is not None:
            response = web.StreamResponse(status=200, headers=headers)
            response.content_length = len(data)
            await response.prepare(request)
            await response.write(data[: reply.drop_after_bytes])
            if request.transport is not None:
                request.transport.close()
            return response
        return web.Response(body=data, status=200, headers=headers)

    async def _stream(
        self, request: web.Request, api: str, reply: Reply, model: str, payload: dict[str, Any]
    ) -> web.StreamResponse:
        headers = {"content-type": "text/event-stream", "cache-control": "no-cache", **reply.headers}
        compressor = _StreamCompressor(reply.compress) if reply.compress else None
        if compressor:
            headers["content-encoding"] = reply.compress or ""
        response = web.StreamResponse(status=200, headers=headers)
        await response.prepare(request)
        # Recorded before each write: by the time a client has read the end of the stream,
        # the record already holds every byte of it.
        sent = bytearray()
        if self.keep_records:
            self.responses_sent.append(sent)
        include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        try:
            for count, event in enumerate(_sse_events(api, reply, model, include_usage)):
                if reply.drop_after_events is not None and count >= reply.drop_after_events:
                    if request.transport is not None:
                        request.transport.close()
                    return response
                data = compressor.feed(event) if compressor else event
                sent += data
                await response.write(data)
                if reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
            if compressor:
                tail = compressor.finish()
                sent += tail
                await response.write(tail)
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnects += 1
            raise
        return response


# ---------------------------------------------------------------------------------------------
# Wire shapes
# ---------------------------------------------------------------------------------------------


def _api_for(path: str) -> str | None:
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    return None


def _error_body(api: str, status: int) -> dict[str, Any]:
    message = f"fake upstream error {status}"
    if api == "anthropic":
        kind = {400: "invalid_request_error", 429: "rate_limit_error", 529: "overloaded_error"}.get(
            status, "api_error"
        )
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {
        "error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error"}
    }


def _json_answer(api: str, reply: Reply, model: str) -> dict[str, Any]:
    if api == "anthropic":
        content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        content += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in reply.tool_calls
        ]
        return {
            "id": "msg_" + uuid.uuid4().hex[:20],
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": _anthropic_usage(reply),
        }
    if api == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.input)},
                }
                for c in reply.tool_calls
            ]
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex[:20],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": _chat_usage(reply),
        }
    return _responses_object(reply, model, "completed")


def _anthropic_usage(reply: Reply) -> dict[str, int]:
    return {
        "input_tokens": reply.input_tokens,
        "output_tokens": reply.output_tokens,
        "cache_read_input_tokens": reply.cache_read_tokens,
        "cache_creation_input_tokens": reply.cache_write_tokens,
    }


def _chat_usage(reply: Reply) -> dict[str, Any]:
    prompt = reply.input_tokens + reply.cache_read_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": reply.output_tokens,
        "total_tokens": prompt + reply.output_tokens,
        "prompt_tokens_details": {"cached_tokens": reply.cache_read_tokens},
    }


def _responses_items(reply: Reply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.text:
        items.append(
            {
                "id": "msg_" + uuid.uuid4().hex[:16],
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for c in reply.tool_calls:
        call = {
            "id": "fc_" + uuid.uuid4().hex[:16],
            "type": "function_call",
            "status": "completed",
            "call_id": c.id,
            "name": c.name,
            "arguments": json.dumps(c.input),
        }
        if c.namespace is not None:
            call["namespace"] = c.namespace
        items.append(call)
    return items


def _responses_object(
    reply: Reply, model: str, status: str, items: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    prompt = reply.input_tokens + reply.cache_read_tokens
    return {
        "id": "resp_" + uuid.uuid4().hex[:20],
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": _responses_items(reply) if items is None else items,
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": reply.cache_read_tokens},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + reply.output_tokens,
        },
    }


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, parts)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(event: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def _sse_events(api: str, reply: Reply, model: str, include_usage: bool) -> Iterator[bytes]:
    if api == "anthropic":
        usage = _anthropic_usage(reply)
        start = _json_answer(api, reply, model)
        start.update(content=[], stop_reason=None, usage={**usage, "output_tokens": 1})
        yield _sse("message_start", {"type": "message_start", "message": start})
        yield _sse("ping", {"type": "ping"})
        index = 0
        if reply.text:
            yield _sse(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            )
            for piece in _split(reply.text, reply.text_chunks):
                delta = {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": piece},
                }
                yield _sse("content_block_delta", delta)
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
            index = 1
        for c in reply.tool_calls:
            block = {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}
            yield _sse(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            )
            for piece in _split(json.dumps(c.input), 2):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield _sse(
                    "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
                )
            yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
            index += 1
        stop = "tool_use" if reply.tool_calls else "end_turn"
        yield _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": reply.output_tokens},
            },
        )
        yield _sse("message_stop", {"type": "message_stop"})
    elif api == "chat":
        ident, created = "chatcmpl-" + uuid.uuid4().hex[:20], int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return _sse(
                None,
                {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                },
            )

        yield chunk({"role": "assistant", "content": ""})
        for piece in _split(reply.text, reply.text_chunks):
            yield chunk({"content": piece})
        for i, c in enumerate(reply.tool_calls):
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": ""},
                        }
                    ]
                }
            )
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": json.dumps(c.input)}}]})
        yield chunk({}, "tool_calls" if reply.tool_calls else "stop")
        if include_usage:
            yield _sse(
                None,
                {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": _chat_usage(reply),
                },
            )
        yield _sse(None, "[DONE]")
    else:
        seq = iter(range(1_000_000))
        pending = _responses_object(reply, model, "in_progress", items=[])
        yield _sse(
            "response.created",
            {"type": "response.created", "sequence_number": next(seq), "response": pending},
        )
        yield _sse(
            "response.in_progress",
            {"type": "response.in_progress", "sequence_number": next(seq), "response": pending},
        )
        if reply.stream_failure is not None:
            # How OpenAI reports some errors on a stream that has started, e.g. an input
            # past the context window: HTTP 200, then response.failed.
            failed = {**pending, "status": "failed", "error": reply.stream_failure}
            yield _sse(
                "response.failed",
                {"type": "response.failed", "sequence_number": next(seq), "response": failed},
            )
            return
        items = _responses_items(reply)
        for index, item in enumerate(items):
            added = dict(item, status="in_progress")
            if item["type"] == "message":
                added["content"] = []
            else:
                added["arguments"] = ""
            yield _sse(
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "sequence_number": next(seq),
                    "output_index": index,
                    "item": added,
                },
            )
            if item["type"] == "message":
                part = {"type": "output_text", "text": "", "annotations": []}
                yield _sse(
                    "response.content_part.added",
                    {
                        "type": "response.content_part.added",
                        "sequence_number": next(seq),
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "part": part,
                    },
                )
                for piece in _split(reply.text, reply.text_chunks):
                    yield _sse(
                        "response.output_text.delta",
                        {
                            "type": "response.output_text.delta",
                            "sequence_number": next(seq),
                            "item_id": item["id"],
                            "output_index": index,
                            "content_index": 0,
                            "delta": piece,
                        },
                    )
                yield _sse(
                    "response.output_text.done",
                    {
                        "type": "response.output_text.done",
                        "sequence_number": next(seq),
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "text": reply.text,
                    },
                )
                yield _sse(
                    "response.content_part.done",
                    {
                        "type": "response.content_part.done",
                        "sequence_number": next(seq),
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "part": item["content"][0],
                    },
                )
            else:
                yield _sse(
                    "response.function_call_arguments.delta",
                    {
                        "type": "response.function_call_arguments.delta",
                        "sequence_number": next(seq),
                        "item_id": item["id"],
                        "output_index": index,
                        "delta": item["arguments"],
                    },
                )
                yield _sse(
                    "response.function_call_arguments.done",
                    {
                        "type": "response.function_call_arguments.done",
                        "sequence_number": next(seq),
                        "item_id": item["id"],
                        "output_index": index,
                        "arguments": item["arguments"],
                    },
                )
            yield _sse(
                "response.output_item.done",
                {
                    "type": "response.output_item.done",
                    "sequence_number": next(seq),
                    "output_index": index,
                    "item": item,
                },
            )
        done = _responses_object(reply, model, "completed", items=items)
        done["id"] = pending["id"]
        yield _sse(
            "response.completed",
            {"type": "response.completed", "sequence_number": next(seq), "response": done},
        )


# ---------------------------------------------------------------------------------------------
# Compression
# ---------------------------------------------------------------------------------------------


def _compress_all(kind: str, data: bytes) -> bytes:
    stream = _StreamCompressor(kind)
    return stream.feed(data) + stream.finish()


class _StreamCompressor:
    """Compresses event by event, flushing each so the client can decode as it arrives."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        # Three libraries' compressor objects, each with its own methods (chosen by kind).
        self._c: Any
        if kind == "gzip":
            self._c = zlib.compressobj(wbits=31)
        elif kind == "br":
            self._c = brotli.Compressor()
        elif kind == "zstd":
            self._c = zstandard.ZstdCompressor().compressobj()
        else:
            raise ValueError(kind)

    def feed(self, data: bytes) -> bytes:
        if self.kind == "gzip":
            return self._c.compress(data) + self._c.flush(zlib.Z_SYNC_FLUSH)
        if self.kind == "br":
            return self._c.process(data) + self._c.flush()
        return self._c.compress(data) + self._c.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)

    def finish(self) -> bytes:
        if self.kind == "gzip":
            return self._c.flush()
        if self.kind == "br":
            return self._c.finish()
        return self._c.flush()


# ---------------------------------------------------------------------------------------------
# Echo: answers that name their question
# ---------------------------------------------------------------------------------------------

ECHO_PREFIX = "answer to "


def last_user_text(payload: Any) -> str:
    """The text of the last user message of a Messages, Chat Completions or Responses body."""
    if not isinstance(payload, dict):
        return ""
    items = payload.get("messages")
    if items is None:
        items = payload.get("input")
    if isinstance(items, str):
        return items
    for item in reversed(items if isinstance(items, list) else []):
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            return content
        parts = content if isinstance(content, list) else []
        return "".join(p.get("text", "") for p in parts if isinstance(p, dict))
    return ""


def echo_responder(text_chunks: int = 2, chunk_delay: float = 0.0) -> Callable[[RecordedRequest], Reply]:
    """Answer every request with ``answer to <its last user text>``: each answer is as unique
    as its question, so a client (or a store) can tell which request it belongs to."""

    def respond(req: RecordedRequest) -> Reply:
        try:
            words = last_user_text(req.json)
        except ValueError:
            words = ""
        return Reply(text=ECHO_PREFIX + words, text_chunks=text_chunks, chunk_delay=chunk_delay)

    return respond


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the loopback fake upstream.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--echo", action="store_true", help="answer 'answer to <last user text>'")
    parser.add_argument("--text-chunks", type=int, default=2, help="text deltas per streamed answer")
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between SSE events")
    args = parser.parse_args()
    fake = FakeUpstream(args.host, args.port)
    fake.keep_records = False  # nobody can read them from another process
    if args.echo:
        fake.responder = echo_responder(args.text_chunks, args.chunk_delay)
    print(f"fake upstream on {fake.url}", flush=True)
    web.run_app(fake.make_app(), host=args.host, port=fake.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
