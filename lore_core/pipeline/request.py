"""The path of one model request, top to bottom: parse, intercept, compose, send, overflow
retry, relay. Each phase is a module of this package and works on the request's
:class:`~lore_core.pipeline.turn.Turn`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import httpx
from quart import Response
from werkzeug.datastructures import Headers

from lore_core.http.metrics import CLIENT_CLOSED, RequestWatch
from lore_core.interfaces import Codec, EditPolicy
from lore_core.model import Exchange
from lore_core.pipeline import overflow, ownership
from lore_core.pipeline.answers import ClientError, error_response
from lore_core.pipeline.compose import compose, prepare
from lore_core.pipeline.finish import finish, settled
from lore_core.pipeline.intercept import intercept
from lore_core.pipeline.parse import Unparsed, parse
from lore_core.pipeline.passthrough import passthrough
from lore_core.pipeline.relay import Relay
from lore_core.pipeline.send import Answered, Relayed, Retry, send, upstream_broke, upstream_failed
from lore_core.pipeline.turn import Turn
from lore_core.pipeline.upstream import UpstreamAnswer, response_headers
from lore_core.recall.rounds import RecallRounds, run_for

if TYPE_CHECKING:
    from lore_core.gateway import Gateway

log = logging.getLogger("lore.pipeline")


async def handle(gateway: Gateway, codec: Codec, path: str) -> Response:
    """One request of a wire API the gateway models, from client to upstream and back;
    timed and counted on the way (:mod:`lore_core.http.metrics`: the log line, /metrics)."""
    watch = gateway.metrics.watch(codec.api)
    try:
        response = await _handle(gateway, codec, path, watch)
    except asyncio.CancelledError:
        gateway.metrics.finish(watch, CLIENT_CLOSED)
        raise
    except Exception:
        gateway.metrics.finish(watch, 500)  # what Quart answers for it
        raise
    gateway.metrics.finish(watch, response.status_code)
    return response


async def _handle(gateway: Gateway, codec: Codec, path: str, watch: RequestWatch) -> Response:
    clock = time.perf_counter
    try:
        turn = await parse(gateway, codec, path)
    except ClientError as exc:
        return error_response(codec, exc.status, exc.message)
    except Unparsed as unparsed:
        began = clock()
        relayed = await passthrough(gateway, path, body=unparsed.body, provider=codec.provider)
        watch.waited(began)
        return relayed

    watch.turn = turn
    turn.access = await ownership.decide(gateway, turn)
    answer = await intercept(gateway, turn)
    watch.parsed()
    if answer is not None:
        return answer
    if not turn.access.allowed:
        # Not the memory's owner: the provider gets the request as it came, and nothing of
        # it is stored, distilled or learned from.
        ownership.note_stranger(gateway, turn.access)
        model = turn.view.model
        began = clock()
        relayed = await passthrough(gateway, path, body=turn.body, provider=codec.provider, model=model)
        watch.waited(began)
        return relayed

    began = clock()
    try:
        await prepare(gateway, turn)
    except ClientError as exc:
        return error_response(codec, exc.status, exc.message)
    watch.composed(began)

    # A prompt the upstream refuses as too long is composed again, once, at the layer the
    # overflow raised the session to.
    for attempt in (1, 2):
        began = clock()
        await compose(gateway, turn)
        watch.composed(began)
        began = clock()
        sent = await send(gateway, turn)
        watch.waited(began)
        if isinstance(sent, Answered):
            return sent.response
        retry_above = None
        if attempt == 1:
            plan = turn.composing.composition if turn.composing is not None else None
            retry_above = plan.layer if plan is not None else 0
        began = clock()
        checked = await overflow.check(gateway, turn, sent.upstream, retry_above)
        watch.waited(began)  # it reads an error answer, or the stream's opening events
        match checked:
            case Answered(response):
                return response
            case Relayed(upstream):
                watch.relaying()
                return await relay(gateway, turn, upstream, watch)
            case Retry():
                continue
    raise AssertionError("the second attempt is never retried")


async def relay(gateway: Gateway, turn: Turn, upstream: UpstreamAnswer, watch: RequestWatch) -> Response:
    """The answer, through the one relay; the codec's editor rewrites it when the gateway
    owns a recall tool in the request or the usage the client sees must be scaled."""
    assert turn.sent is not None and turn.exchange is not None and turn.client_view is not None
    codec, view = turn.codec, turn.sent
    is_sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
    limit = _context_limit(gateway, view.model)
    share = gateway.config.budget.client_usage_share
    policy = None
    server_state = turn.exchange.server_state  # the codec said so when the exchange began
    if upstream.status_code == 200 and (
        turn.recall_on or _may_scale(len(turn.out_body), limit, share, server_state)
    ):
        policy = EditPolicy(
            hold_tool=gateway.recall_tool_name if turn.recall_on else None,
            context_limit=limit,
            usage_share=share,
        )
    method, url, out_headers = turn.method, turn.url, turn.out_headers

    async def send_follow_up(follow_up: bytes) -> httpx.Response:
        # Bound now: the stream runs after the request context is gone.
        return await gateway.upstream.send(method, url, out_headers, follow_up)

    rounds = None
    if policy is not None and turn.recall_on and codec.recall is not None:
        rounds = RecallRounds(
            codec=codec,
            recall=codec.recall,
            view=view,
            client_view=turn.client_view,
            exchange=turn.exchange,
            send=send_follow_up,
            run=_counted(gateway, run_for(gateway, turn.session_id, turn.project)),
            memory=gateway.recall_memory,
            max_rounds=gateway.config.recall.max_rounds,
        )
    first = turn.exchange

    def finished(exchange: Exchange) -> None:
        finish(gateway, exchange)
        if exchange is first:  # recall follow-ups are exchanges of the same request
            gateway.metrics.finish(watch, exchange.status, exchange)

    the_relay = Relay(
        codec=codec,
        exchange=turn.exchange,
        finished=finished,
        broke=lambda upstream, message: upstream_broke(gateway, upstream, message),
        rounds=rounds,
        settle=(lambda: settled(gateway)) if gateway.store.shared else None,
    )
    headers = response_headers(upstream.headers)
    if is_sse:
        # The request is over when the streamed answer is (its exchange finishes).
        watch.waits_for_exchange = True
        editor = codec.stream_editor(policy) if policy is not None else None
        if editor is not None:
            # Decoded bytes, rewritten where they must be: no content-encoding or length.
            headers = [(k, v) for k, v in headers if k.lower() not in ("content-encoding", "content-length")]
        response = Response(
            the_relay.stream(upstream, editor), status=upstream.status_code, headers=Headers(headers)
        )
        response.timeout = None  # Quart would cut streams after 60 s while still reporting 200
        return response
    buffered = codec.buffered_editor(policy) if policy is not None else None
    try:
        status, body, new_headers = await the_relay.buffered(upstream, buffered)
    except httpx.HTTPError as exc:
        gateway.upstream.note_failure(turn.exchange.upstream, f"a response broke off: {exc}")
        return upstream_failed(
            gateway, turn, f"the upstream {turn.exchange.upstream} broke off its response: {exc}"
        )
    if gateway.store.shared:
        await settled(gateway)
    if new_headers is None:
        return Response(body, status=status, headers=Headers(headers))
    kept = [
        (k, v) for k, v in headers if k.lower() not in ("content-encoding", "content-length", "content-type")
    ]
    return Response(body, status=status, headers=Headers(kept + new_headers))


def _context_limit(gateway: Gateway, model: str | None) -> int:
    """The model's context window in tokens (0 when unknown)."""
    try:
        return gateway.price_table.lookup(model).context_window
    except Exception:
        return 0


def _counted(gateway: Gateway, run: Callable[[Any], Awaitable[str]]) -> Callable[[Any], Awaitable[str]]:
    """The recall runner, each call counted (``lore_recall_calls_total``)."""

    async def counted(arguments: Any) -> str:
        gateway.metrics.recall_calls += 1
        return await run(arguments)

    return counted


def _may_scale(body_bytes: int, limit: int, share: float, server_state: bool) -> bool:
    """Could the prompt be past the share of the context the client may see? A request
    without the recall tool only goes through the (rewriting) editor then; about 4 bytes make
    a token, so 2 bytes per token is a generous upper bound. A request continuing
    server-side state carries only the new items: its prompt can be any size."""
    if not (0 < share < 1 and limit > 0):
        return False
    return body_bytes / 2 > limit * share or server_state
