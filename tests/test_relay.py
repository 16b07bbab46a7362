"""The relay finishes an exchange (records it, journals it) before the client has the
answer's terminal event, and not before it must: a short answer that arrives in one read
still has its first events relayed before the exchange is finished."""

from __future__ import annotations

import asyncio
import json

import httpx

from lore_core.pipeline.relay import Relay
from lore_core.testing.builders import exchange
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec


def _event(name: str, data: dict[str, object]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


STREAM = b"".join(
    [
        _event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-test",
                    "content": [],
                    "usage": {"input_tokens": 3, "output_tokens": 0},
                },
            },
        ),
        _event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        _event(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "pong"}},
        ),
        _event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _event(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
        ),
        _event("message_stop", {"type": "message_stop"}),
    ]
)


def _relay(chunks: list[bytes], sent: list[bytes], finished_at: list[int]) -> tuple[Relay, httpx.Response]:
    relay = Relay(
        codec=AnthropicMessagesCodec(),
        exchange=exchange([]),
        finished=lambda ex: finished_at.append(len(b"".join(sent))),
        broke=lambda upstream, message: None,
    )
    upstream = httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Chunks(chunks))
    return relay, upstream


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self):  # type: ignore[override]
        for chunk in self.chunks:
            yield chunk


def _run(chunks: list[bytes]) -> tuple[bytes, list[int], Relay]:
    sent: list[bytes] = []
    finished_at: list[int] = []
    relay, upstream = _relay(chunks, sent, finished_at)

    async def main() -> None:
        async for piece in relay.stream(upstream, None):
            sent.append(piece)

    asyncio.run(main())
    return b"".join(sent), finished_at, relay


def test_a_whole_answer_in_one_read_goes_out_before_its_terminal_event_is_held():
    relayed, finished_at, relay = _run([STREAM])
    assert relayed == STREAM  # the upstream's bytes, unchanged
    terminal = STREAM.index(b"event: message_stop")
    # Finished once, when everything but the terminal event had gone out.
    assert finished_at == [terminal]
    assert relay.exchange.response is not None and relay.exchange.response.text == "pong"


def test_an_answer_in_many_reads_is_finished_before_the_read_that_ends_it_goes_out():
    events = STREAM.split(b"\n\n")[:-1]
    chunks = [e + b"\n\n" for e in events]
    relayed, finished_at, _ = _run(chunks)
    assert relayed == STREAM
    assert finished_at == [len(STREAM) - len(chunks[-1])]


def test_a_first_read_that_does_not_end_the_answer_is_relayed_whole():
    cut = STREAM.index(b"event: content_block_stop")
    relayed, finished_at, _ = _run([STREAM[:cut], STREAM[cut:]])
    assert relayed == STREAM and finished_at == [cut]
