"""Relay: the one place that reads an upstream answer, feeds the codec's assembler, closes
the upstream response and finishes the exchange.

Without an editor the upstream's bytes go to the client unchanged (still in their
content-encoding) while the assembler reads a decoded copy beside them. With one (the
codec's :meth:`~lore_core.interfaces.Codec.stream_editor` / ``buffered_editor``: recall
rounds, usage scaling) the relay decodes the answer, hands the editor each SSE event, and,
when a round ends with only recall calls, runs them (:class:`~lore_core.recall.rounds.RecallRounds`)
and relays the follow-up's answer into the same client response.

An exchange finishes before the client has the API's terminal event, so an answer the
client received in full is journaled whenever the gateway dies; when a whole answer comes
in one read, the events before its terminal one are relayed first, so finishing does not
delay the first byte.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from lore_core.interfaces import (
    BufferedEditor,
    Codec,
    RoundResult,
    StreamAssembler,
    StreamEditor,
)
from lore_core.model import AssistantMessage, Exchange
from lore_core.pipeline.upstream import UpstreamAnswer
from lore_core.recall.rounds import RecallRounds
from lore_core.wire.encoding import BodyTooLarge, Decoder, UnsupportedEncoding, decode_body, decoder_for
from lore_core.wire.turns import EventSplitter

log = logging.getLogger("lore.relay")

#: What an editor or assembler raises on an upstream's JSON of the wrong shape.
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)
#: A whole (not streamed) answer is read (recorded, edited) when it decodes to at most this
#: many bytes; a larger one is relayed as it came, unread. No model's answer comes near it
#: (128K output tokens are about 0.5 MB), and a few KiB of gzip or zstd can decode to
#: gigabytes: the limit applies while decoding.
MAX_READ_ANSWER_BYTES = 64 * 1024 * 1024


class UpstreamStreamBroken(Exception):
    """The upstream cut a stream off: the client's connection is aborted too (ending the
    response cleanly would make a cut stream look complete)."""


#: (status, body, headers or ``None`` to keep the upstream's).
Buffered = tuple[int, bytes, list[tuple[str, str]] | None]


def _last_event_start(data: bytes) -> int:
    """Where the last SSE event of ``data`` starts (after the blank line before it); 0 when
    ``data`` holds at most one event."""
    end = len(data.rstrip(b"\r\n"))
    lf, crlf = data.rfind(b"\n\n", 0, end), data.rfind(b"\n\r\n", 0, end)
    if lf < 0 and crlf < 0:
        return 0
    return lf + 2 if lf > crlf else crlf + 3


class Relay:
    """Relays one request's answer. ``broke(upstream, message)`` counts an upstream that
    broke off its answer (for ``/health``)."""

    def __init__(
        self,
        *,
        codec: Codec,
        exchange: Exchange,
        finished: Callable[[Exchange], None],
        broke: Callable[[str, str], None],
        rounds: RecallRounds | None = None,
        settle: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.codec = codec
        self.exchange = exchange
        self.finished = finished
        self.broke = broke
        self.rounds = rounds
        #: Awaited after the exchange finished and before a stream's terminal event goes
        #: out: a gateway on a shared store commits the exchange there
        #: (:func:`lore_core.pipeline.finish.settled`).
        self.settle = settle

    # -- streamed ----------------------------------------------------------------------------

    async def stream(self, upstream: UpstreamAnswer, editor: StreamEditor | None) -> AsyncIterator[bytes]:
        if editor is None:
            async for chunk in self._stream_bytes(upstream):
                yield chunk
        else:
            async for chunk in self._stream_edited(upstream, editor):
                yield chunk

    async def _stream_bytes(self, upstream: UpstreamAnswer) -> AsyncIterator[bytes]:
        """The upstream's own bytes; the assembler reads a decoded copy beside them."""
        exchange = self.exchange
        assembler = self.codec.assembler()
        decoder: Decoder | None
        try:
            decoder = decoder_for(upstream.headers.get("content-encoding"), MAX_READ_ANSWER_BYTES)
        except UnsupportedEncoding:
            decoder = None  # relayed, not read
        finished = False

        def finish() -> None:
            nonlocal finished
            if not finished:
                finished = True
                exchange.response = self._result(assembler)
                self.finished(exchange)

        # A short answer often comes whole in the first read: relayed as two writes (its
        # events before the last, then the last), the exchange is finished (records,
        # journal) before the terminal event goes out, not before the first byte.
        first = upstream.headers.get("content-encoding", "identity").strip().lower() in ("", "identity")
        try:
            async for chunk in upstream.aiter_raw():
                cut = _last_event_start(chunk) if first else 0
                first = False
                for piece in (chunk[:cut], chunk[cut:]) if cut else (chunk,):
                    # Read before it is relayed (see the module docstring).
                    if decoder is not None:
                        decoded = self._decode(decoder, piece)
                        if decoded is None or not self._feed(assembler, decoded):
                            decoder = None  # the record of it stops; the relay goes on
                        elif assembler.done:
                            finish()
                            if self.settle is not None:
                                await self.settle()
                    yield piece
        except asyncio.CancelledError:
            exchange.client_disconnected = True
            raise
        except httpx.HTTPError as exc:
            self._broken(exc)
        finally:
            # Closing the upstream response also cancels the upstream request when the
            # client went away mid-stream.
            await asyncio.shield(upstream.aclose())
            finish()

    async def _stream_edited(self, upstream: UpstreamAnswer, editor: StreamEditor) -> AsyncIterator[bytes]:
        """The answer through the editor, over as many upstream rounds as recall needs."""
        exchange = self.exchange
        response = upstream
        round_no = 0
        try:
            while True:
                assembler: StreamAssembler = self.codec.assembler()
                decoder: Decoder | None
                try:
                    decoder = decoder_for(response.headers.get("content-encoding"), MAX_READ_ANSWER_BYTES)
                except UnsupportedEncoding:
                    decoder = None
                splitter = EventSplitter()
                try:
                    async for chunk in response.aiter_raw():
                        data = decoder.decompress(chunk) if decoder is not None else chunk
                        if not self._feed(assembler, data):
                            assembler = _Stopped(assembler)
                        out = b"".join(_edited(editor, n, t, r) for n, t, r in splitter.feed(data))
                        if out:
                            yield out
                    if decoder is not None:
                        tail = decoder.flush()
                        if tail:
                            if not self._feed(assembler, tail):
                                assembler = _Stopped(assembler)
                            out = b"".join(_edited(editor, n, t, r) for n, t, r in splitter.feed(tail))
                            if out:
                                yield out
                except asyncio.CancelledError:
                    exchange.client_disconnected = True
                    raise
                except httpx.HTTPError as exc:
                    self._broken(exc)
                finally:
                    exchange.response = self._result(assembler)
                    await asyncio.shield(response.aclose())
                    self.finished(exchange)
                try:
                    result = editor.end_round()
                except SHAPE_ERRORS as exc:
                    # A round of the wrong shape: no recall continues it.
                    log.warning(
                        "%s: the upstream's stream could not be read (%s); no recall round",
                        self.codec.api,
                        exc,
                    )
                    result = RoundResult(ok=False)
                if self.rounds is None or not result.recall_calls or not result.ok:
                    break
                step = await self.rounds.next_round(result, round_no)
                if step is None:
                    break
                markers, exchange, body = step
                yield editor.markers(markers)
                try:
                    response = await self.rounds.send(body)
                except Exception as exc:
                    log.warning("the recall follow-up could not be sent: %s", exc)
                    break
                exchange.status = response.status_code
                if response.status_code != 200 or not response.headers.get("content-type", "").startswith(
                    "text/event-stream"
                ):
                    raw = await self._read_all(response, exchange)
                    log.warning("the recall follow-up got HTTP %s: %s", response.status_code, raw[:300])
                    break
                round_no += 1
                editor.next_round()
            try:
                closing = editor.finish()
            except SHAPE_ERRORS as exc:
                # The stream ends as the upstream's did, without the events the editor held.
                log.warning("%s: the upstream's stream could not be closed (%s)", self.codec.api, exc)
                closing = b""
            if self.settle is not None:
                await self.settle()
            yield closing
            if self.rounds is not None:
                await self.rounds.remember(editor.final_text())
        except asyncio.CancelledError:
            exchange.client_disconnected = True
            raise

    # -- buffered ----------------------------------------------------------------------------

    async def buffered(self, upstream: UpstreamAnswer, editor: BufferedEditor | None) -> Buffered:
        """The whole answer: the upstream's bytes, or the editor's answer over the rounds.
        Raises :class:`httpx.HTTPError` when the first answer broke off."""
        exchange = self.exchange
        response = upstream
        for round_no in range((self.rounds.max_rounds if self.rounds else 0) + 1):
            try:
                raw = b"".join([chunk async for chunk in response.aiter_raw()])
            except httpx.HTTPError as exc:
                if round_no == 0:
                    raise
                # A follow-up cut off: answer with what the model said so far.
                log.warning("the recall follow-up from %s broke off: %s", exchange.upstream, exc)
                exchange.status = 502
                self.finished(exchange)
                break
            except asyncio.CancelledError:
                exchange.client_disconnected = True
                self.finished(exchange)
                raise
            finally:
                await response.aclose()
            exchange.status = response.status_code
            payload = self._payload(response, raw)
            result = None
            try:
                if payload is not None and response.status_code == 200:
                    exchange.response = self.codec.parse_response(payload)
                    if editor is not None:
                        result = editor.add_round(payload)
            except SHAPE_ERRORS as exc:
                # JSON of the wrong shape: the upstream's bytes are the answer (a follow-up's
                # are dropped: the client gets what the model said before it).
                log.warning("%s: an answer could not be read (%s); relayed as is", self.codec.api, exc)
                result = None
            self.finished(exchange)
            if result is None or editor is None:
                if round_no == 0:
                    return response.status_code, raw, None
                break
            if self.rounds is None or not result.recall_calls:
                if round_no == 0 and not editor.rewrites(payload or {}):
                    return response.status_code, raw, None  # nothing to change
                break
            step = await self.rounds.next_round(result, round_no)
            if step is None:
                break
            markers, exchange, body = step
            editor.add_markers(markers)
            try:
                response = await self.rounds.send(body)
            except Exception as exc:
                log.warning("the recall follow-up could not be sent: %s", exc)
                break
        assert editor is not None  # only the editor's rounds leave the loop without returning
        if self.rounds is not None:
            await self.rounds.remember(editor.final_text())
        body_out = json.dumps(editor.result(), ensure_ascii=False).encode()
        return 200, body_out, [("content-type", "application/json")]

    # -- shared --------------------------------------------------------------------------------

    def _payload(self, response: UpstreamAnswer, raw: bytes) -> dict[str, Any] | None:
        try:
            payload = json.loads(
                decode_body(raw, response.headers.get("content-encoding"), MAX_READ_ANSWER_BYTES)
            )
        except BodyTooLarge:
            log.warning(
                "%s: an answer decodes to more than %d bytes; relayed as is",
                self.codec.api,
                MAX_READ_ANSWER_BYTES,
            )
            return None
        except (ValueError, UnsupportedEncoding):
            if response.status_code == 200:
                log.warning("%s: a 200 response was not JSON; relayed as is", self.codec.api)
            return None
        return payload if isinstance(payload, dict) else None

    async def _read_all(self, response: UpstreamAnswer, exchange: Exchange) -> bytes:
        try:
            return b"".join([c async for c in response.aiter_raw()])
        except httpx.HTTPError:
            return b""
        finally:
            await asyncio.shield(response.aclose())
            self.finished(exchange)

    def _broken(self, exc: httpx.HTTPError) -> None:
        log.warning("upstream stream from %s broke off: %s", self.exchange.upstream, exc)
        self.broke(self.exchange.upstream, f"a stream broke off: {exc}")
        raise UpstreamStreamBroken(str(exc)) from None

    def _decode(self, decoder: Decoder, data: bytes) -> bytes | None:
        """``data`` decoded; ``None`` when the stream cannot be (corrupt, or decoding past
        :data:`MAX_READ_ANSWER_BYTES`): it is still relayed, only the record of it stops."""
        try:
            return decoder.decompress(data)
        except Exception as exc:  # zlib's, brotli's and zstandard's errors, BodyTooLarge
            log.warning(
                "%s: the upstream's stream could not be decoded (%s); relayed as is", self.codec.api, exc
            )
            return None

    def _feed(self, assembler: StreamAssembler, data: bytes) -> bool:
        """Feed the assembler (it records the answer); ``False`` when it cannot read the
        stream: the stream is still relayed, only the record of it stops."""
        try:
            assembler.feed(data)
        except Exception as exc:
            log.warning(
                "%s: the upstream's stream could not be read (%s: %s); relayed as is",
                self.codec.api,
                type(exc).__name__,
                exc,
            )
            return False
        return True

    def _result(self, assembler: StreamAssembler) -> AssistantMessage:
        """What the assembler read; an empty answer when it cannot say (a stream of the
        wrong shape: relayed as it came, recorded without its answer)."""
        try:
            return assembler.result()
        except Exception as exc:
            log.warning(
                "%s: the upstream's stream could not be read (%s: %s)",
                self.codec.api,
                type(exc).__name__,
                exc,
            )
            return AssistantMessage()


class _Stopped:
    """A failed assembler, fed nothing more: its result is what it had read."""

    def __init__(self, failed: StreamAssembler) -> None:
        self._failed = failed

    def feed(self, chunk: bytes) -> None:
        pass

    def result(self) -> AssistantMessage:
        return self._failed.result()

    @property
    def done(self) -> bool:
        return False


def _edited(editor: StreamEditor, name: str, text: str, raw: bytes) -> bytes:
    """What the client gets for one upstream event: the editor's rewrite, or, for an event
    it cannot read (an upstream's malformed JSON of the wrong shape), the event as it came:
    the stream is the upstream's to get wrong, never the gateway's to break."""
    try:
        return editor.event(name, text, raw)
    except SHAPE_ERRORS as exc:
        log.warning("an upstream stream event could not be read (%s); relayed as it came", exc)
        return raw
