"""Send: one attempt upstream (throttled while spend runs past the daily budget)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import httpx
from quart import Response

from lore_core.pipeline.answers import error_response
from lore_core.pipeline.turn import Turn
from lore_core.pipeline.upstream import UpstreamError

if TYPE_CHECKING:
    from lore_core.gateway import Gateway


async def send(gateway: Gateway, turn: Turn) -> httpx.Response | Response:
    """The upstream's response (headers read, body not), or a 502 in the API's shape."""
    assert turn.sent is not None
    exchange = turn.exchange = turn.new_exchange(turn.base)
    await gateway.throttle_upstream(turn.session_id, turn.sent.model)
    try:
        upstream = await gateway.upstream.send(turn.method, turn.url, turn.out_headers, turn.out_body)
    except UpstreamError as exc:
        return upstream_failed(
            gateway, turn, f"Lore could not reach the upstream {exc.upstream}: {exc.reason}"
        )
    except asyncio.CancelledError:
        exchange.client_disconnected = True
        gateway.exchange_finished(exchange)
        raise
    exchange.status = upstream.status_code
    return upstream


def upstream_failed(gateway: Gateway, turn: Turn, message: str) -> Response:
    """The upstream could not be reached or broke off: a 502 in the API's error shape."""
    assert turn.exchange is not None
    gateway.stats["upstream_errors"] += 1
    turn.exchange.status = 502
    gateway.exchange_finished(turn.exchange)
    return error_response(turn.codec, 502, message)
