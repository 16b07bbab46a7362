"""Overflow retry: an upstream that refuses the prompt as too long raises the session's
layer; seen before anything reached the client (an error answer, or a stream failing right
after it opened), the request is composed again at that layer and sent once more, and the
client sees the answer, not the error."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import httpx

from lore_core.context.overflow import OVERFLOW_STATUSES, Overflow, overflow_in_error, parse_overflow
from lore_core.pipeline.finish import context_overflowed, finish
from lore_core.pipeline.relay import MAX_READ_ANSWER_BYTES
from lore_core.pipeline.send import Answered, Relayed, Retry, upstream_failed
from lore_core.pipeline.turn import Turn
from lore_core.pipeline.upstream import UpstreamAnswer
from lore_core.wire.encoding import UnsupportedEncoding, decode_body
from lore_core.wire.turns import EventSplitter

if TYPE_CHECKING:
    from lore_core.gateway import Gateway

log = logging.getLogger("lore.pipeline")

#: A stream whose opening is longer than this is relayed without waiting further.
PEEK_MAX_BYTES = 65_536


async def check(
    gateway: Gateway, turn: Turn, upstream: UpstreamAnswer, retry_above: int | None
) -> Relayed | Answered | Retry:
    """The upstream response to relay (possibly with what was read of it already),
    :class:`Retry`, or :class:`Answered` (the upstream broke off while it was read).

    ``retry_above``: the layer the attempt was composed at; ``None`` for the last attempt
    (an overflow then only raises the layer of the session's next turns)."""
    is_sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
    assert turn.sent is not None and turn.exchange is not None
    if (
        retry_above is not None
        and is_sse
        and upstream.status_code == 200
        and turn.codec.may_fail_after_start(turn.sent)
    ):
        try:
            peeked, overflow = await _peek_stream(turn, upstream)
        except asyncio.CancelledError:
            await asyncio.shield(upstream.aclose())
            turn.exchange.client_disconnected = True
            finish(gateway, turn.exchange)
            raise
        if overflow is not None and await _refused_as_too_long(gateway, turn, overflow, retry_above):
            await upstream.aclose()
            return Retry()
        return Relayed(peeked)
    if is_sse or upstream.status_code not in OVERFLOW_STATUSES:
        return Relayed(upstream)
    # An error answer: read it whole to see whether it is an overflow.
    try:
        raw = b"".join([chunk async for chunk in upstream.aiter_raw()])
    except httpx.HTTPError as exc:
        gateway.upstream.note_failure(turn.exchange.upstream, f"a response broke off: {exc}")
        return Answered(
            upstream_failed(
                gateway, turn, f"the upstream {turn.exchange.upstream} broke off its response: {exc}"
            )
        )
    except asyncio.CancelledError:
        turn.exchange.client_disconnected = True
        finish(gateway, turn.exchange)
        raise
    finally:
        await upstream.aclose()
    try:
        overflow = parse_overflow(
            upstream.status_code,
            decode_body(raw, upstream.headers.get("content-encoding"), MAX_READ_ANSWER_BYTES),
        )
    except (ValueError, UnsupportedEncoding):
        overflow = None
    if overflow is not None and await _refused_as_too_long(gateway, turn, overflow, retry_above):
        return Retry()
    return Relayed(_Peeked(upstream, [raw], _nothing()))


async def _refused_as_too_long(
    gateway: Gateway, turn: Turn, overflow: Overflow, retry_above: int | None
) -> bool:
    """The session's next turns start at a higher layer. True (and the refused exchange
    finished) when that layer is above ``retry_above``: compose and send once more."""
    assert turn.exchange is not None
    layer = await context_overflowed(gateway, turn.session_id, overflow, turn.exchange)
    if retry_above is None or layer <= retry_above:
        return False
    finish(gateway, turn.exchange)
    gateway.stats["overflow_retries"] += 1
    return True


class _Peeked:
    """An upstream response whose first raw chunks were read already: :meth:`aiter_raw`
    yields them again, then the rest (and raises what reading them raised)."""

    def __init__(self, upstream: UpstreamAnswer, held: list[bytes], rest: AsyncIterator[bytes]) -> None:
        self._upstream = upstream
        self.held = held
        self._rest = rest
        self.error: httpx.HTTPError | None = None
        self.status_code = upstream.status_code
        self.headers = upstream.headers

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for chunk in self.held:
            yield chunk
        if self.error is not None:
            raise self.error
        async for chunk in self._rest:
            yield chunk

    async def aclose(self) -> None:
        await self._upstream.aclose()


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


async def _peek_stream(turn: Turn, upstream: UpstreamAnswer) -> tuple[_Peeked, Overflow | None]:
    """Read a started stream up to its first event past the opening ones: an upstream that
    fails an input past the context window does so right there, and seen before anything
    was relayed, the request can still be composed again. Otherwise the events read are
    relayed first, unchanged."""
    rest = upstream.aiter_raw()
    peeked = _Peeked(upstream, [], rest)
    if upstream.headers.get("content-encoding", "identity") != "identity":
        return peeked, None  # a compressed stream is rare and relayed as it comes
    codec = turn.codec
    splitter = EventSplitter()
    size = 0
    try:
        async for chunk in rest:
            peeked.held.append(chunk)
            size += len(chunk)
            for name, data, _ in splitter.feed(chunk):
                error = codec.stream_error(name, data)
                if error is not None:
                    return peeked, overflow_in_error(*error)
                if name not in codec.opening_events:
                    return peeked, None
            if size > PEEK_MAX_BYTES:
                break
    except httpx.HTTPError as exc:
        peeked.error = exc  # raised to the relay, after what was read
    return peeked, None
