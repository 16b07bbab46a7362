"""Finish: the one place an exchange is finished, whichever phase ends it (the relay at the
answer's last byte, a refused or broken attempt, an answer the gateway gave itself).

What makes the exchange durable runs before the client has the last byte: the context
manager puts the client's own request back in place of the composed one, and the writer
journals the records. The bookkeeping nothing acknowledged depends on (counters, spend,
distillation, knowledge upkeep, the plugins' ``lore_exchange_complete``) runs right after,
off the request path."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from lore_core.context.overflow import Overflow, overflow_in_stream_error
from lore_core.model import Exchange

if TYPE_CHECKING:
    from lore_core.gateway import Gateway

log = logging.getLogger("lore.pipeline")

#: How long an answer on a shared store waits at most for its exchange's commit.
SETTLE_SECONDS = 2.0


def finish(gateway: Gateway, exchange: Exchange) -> None:
    """Hand a finished exchange to the context manager, the writer and (soon after) the rest.
    Each exchange is finished once: by the phase that ends it."""
    exchange.finished_at = time.time()
    try:
        # First: it also puts the client's own request back in place of the composed one.
        gateway.context.exchange_finished(exchange)
    except Exception:
        log.exception("could not tell the context manager about an exchange")
    exchange.forget_positions = list(gateway.amnesia.ranges(exchange.session_id))
    try:
        gateway.writer.submit(exchange)
    except Exception:
        log.exception("could not queue an exchange for the store")
    try:
        # Not on the request path: at c=1 this is a tenth of the gateway's added latency.
        asyncio.get_running_loop().call_soon(_after, gateway, exchange)
    except RuntimeError:  # no running loop (a synchronous caller): now
        _after(gateway, exchange)


def _after(gateway: Gateway, exchange: Exchange) -> None:
    """The rest of finishing an exchange: counters, spend, distillation, knowledge upkeep,
    the plugins' ``lore_exchange_complete``."""
    gateway.stats["exchanges"] += 1
    if exchange.client_disconnected:
        gateway.stats["client_disconnects"] += 1
    response = exchange.response
    if response is not None and response.error and not response.complete:
        overflow = overflow_in_stream_error(response.error)
        if overflow is not None:
            # The stream failed as too long after it was relayed (the overflow phase catches
            # it before that when it comes right after the opening events): too late to send
            # it again, but the next turn starts at the raised layer.
            gateway.spawn(context_overflowed(gateway, exchange.session_id, overflow))
    if response is not None and exchange.status == 200:
        try:
            model = response.model or exchange.request.model
            usd = gateway.costs.record(exchange.session_id, model, response.usage)
            # By model for /lore/api/metrics, by day, model and session for `lore spend`.
            gateway.metrics.exchange(model, response.usage, usd)
            gateway.spend.note(exchange.session_id, model, response.usage, usd)
        except Exception:
            log.exception("could not price an exchange's usage")
    try:
        gateway.distiller.exchange_finished(exchange)
    except Exception:
        log.exception("could not tell the distillation scheduler about an exchange")
    gateway.knowledge_upkeep.note_turn(exchange.session_id, exchange.project)
    try:
        gateway.pm.hook.lore_exchange_complete(app=gateway.app, exchange=exchange)
    except Exception:
        log.exception("an exchange_complete hook failed")


async def context_overflowed(
    gateway: Gateway, session_id: str, overflow: Overflow, refused: Exchange | None = None
) -> int:
    """The upstream refused a prompt of the session as too long: counted, and the session's
    turns start at a higher layer (the new one is returned). The one place both happen, for
    a refusal seen before relaying (the overflow phase) or after (a stream's error)."""
    gateway.stats["context_overflows"] += 1
    return await gateway.context.refused_as_too_long(session_id, overflow, refused)


async def settled(gateway: Gateway, timeout: float = SETTLE_SECONDS) -> None:
    """On a shared store (``Store.shared``), wait until the exchanges finished so far are
    committed, so a reader on another gateway reads them once the client has its answer; at
    most ``timeout`` seconds, and not at all while the store fails (the journal keeps what
    was acknowledged either way)."""
    if not gateway.store.shared or gateway.writer.degraded:
        return
    try:
        await gateway.writer.wait_idle(timeout)
    except TimeoutError:
        log.warning("store: an answered exchange was not committed within %.0f s; answered anyway", timeout)
