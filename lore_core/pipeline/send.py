"""Send: one attempt upstream (paced while spend runs past the daily budget), and the
outcomes an attempt can have."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import attrs
from quart import Response

from lore_core.context.economics import CostTracker, Throttle
from lore_core.context.pricing import PriceTable
from lore_core.pipeline.answers import error_response
from lore_core.pipeline.finish import finish
from lore_core.pipeline.turn import Turn
from lore_core.pipeline.upstream import UpstreamAnswer, UpstreamError

if TYPE_CHECKING:
    from lore_core.gateway import Gateway

#: Sessions whose last upstream call the pacer remembers (most recent ones).
MAX_PACED_SESSIONS = 10_000


@attrs.frozen
class Relayed:
    """The upstream answered: relay ``upstream`` (headers read, body not, or partly read)."""

    upstream: UpstreamAnswer


@attrs.frozen
class Answered:
    """The attempt is over and the client's answer made (an error in the API's shape); the
    exchange is finished."""

    response: Response


@attrs.frozen
class Retry:
    """The upstream refused the prompt as too long and the session's layer rose: the refused
    exchange is finished; compose and send again."""


#: What an attempt comes to: :func:`send` gives the first two, the overflow check all three.
Attempt = Relayed | Answered | Retry


class Pacer:
    """Waits before an upstream call while spend is projected past the daily budget, never so
    long that the session's prompt cache expires (:class:`~lore_core.context.economics.Throttle`)."""

    def __init__(self, costs: CostTracker, throttle: Throttle, prices: PriceTable) -> None:
        self.costs = costs
        self.throttle = throttle
        self.prices = prices
        self._last_call_at: dict[str, float] = {}

    async def wait(self, session_id: str, model: str | None) -> float:
        """Wait as long as spend requires; the seconds waited."""
        last = self._last_call_at.get(session_id)
        now = time.time()
        delay = 0.0
        if self.costs.daily_budget_usd > 0:
            delay = self.throttle.delay(
                self.costs.pressure(now),
                ttl_seconds=self.prices.lookup(model).cache_ttl_seconds,
                idle_seconds=None if last is None else now - last,
            )
            if delay > 0:
                await asyncio.sleep(delay)
        self._last_call_at.pop(session_id, None)  # most recent last
        self._last_call_at[session_id] = time.time()
        if len(self._last_call_at) > MAX_PACED_SESSIONS:
            # The least recently called session: at worst its next call waits as a new one's.
            del self._last_call_at[next(iter(self._last_call_at))]
        return delay


async def send(gateway: Gateway, turn: Turn) -> Relayed | Answered:
    """The upstream's response (headers read, body not), or a 502 in the API's shape."""
    assert turn.sent is not None
    exchange = turn.exchange = turn.new_exchange(turn.base)
    await gateway.pacer.wait(turn.session_id, turn.sent.model)
    try:
        upstream = await gateway.upstream.send(turn.method, turn.url, turn.out_headers, turn.out_body)
    except UpstreamError as exc:
        return Answered(
            upstream_failed(gateway, turn, f"Lore could not reach the upstream {exc.upstream}: {exc.reason}")
        )
    except asyncio.CancelledError:
        exchange.client_disconnected = True
        finish(gateway, exchange)
        raise
    exchange.status = upstream.status_code
    return Relayed(upstream)


def upstream_failed(gateway: Gateway, turn: Turn, message: str) -> Response:
    """The upstream could not be reached or broke off: a 502 in the API's error shape."""
    assert turn.exchange is not None
    gateway.stats["upstream_errors"] += 1
    turn.exchange.status = 502
    finish(gateway, turn.exchange)
    return error_response(turn.codec, 502, message)


def upstream_broke(gateway: Gateway, upstream: str, message: str) -> None:
    """An upstream broke off an answer mid-way (``/health`` reports it degraded)."""
    gateway.stats["upstream_errors"] += 1
    gateway.upstream.note_failure(upstream, message)
