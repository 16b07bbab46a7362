"""Recall rounds: the model called ``recall``, so the gateway runs the search(es), sends
the follow-up upstream (the request as sent + the assistant turn + the tool results,
rendered by the codec so the bytes are deterministic) and the relay splices the
continuation into the same client response. The follow-up's exchange records the client's
own request + the same turn and results, never the composed prompt (in Chat Completions
the gateway's system text is messages of it). Mixed with the client's own tool calls, the
client gets its calls and the recall result is kept for the next request
(:class:`~lore_core.recall.memory.RecallMemory`)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import httpx

from lore_core.interfaces import Codec, RecallCall, RecallWire, RoundResult
from lore_core.model import Exchange, RequestView
from lore_core.recall.memory import RecallMemory
from lore_core.recall.tool import marker_text, parse_arguments, run_recall
from lore_core.wire.turns import norm

log = logging.getLogger("lore.recall.proxy")

RECALL_TIMEOUT_SECONDS = 60.0

Sender = Callable[[bytes], Awaitable[httpx.Response]]


class RecallRounds:
    """The recall side of one client request: runs the model's recall calls and builds
    each follow-up; the relay (:mod:`lore_core.pipeline.relay`) drives it."""

    def __init__(
        self,
        *,
        codec: Codec,
        recall: RecallWire,
        view: RequestView,
        client_view: RequestView,
        exchange: Exchange,
        send: Sender,
        run: Callable[[Any], Awaitable[str]],
        memory: RecallMemory,
        max_rounds: int,
    ) -> None:
        self.codec = codec
        self.recall = recall
        # The request as it went upstream (composed), and as the client sent it (earlier
        # recalls restored): follow-ups extend the first, their exchanges the second.
        self.view = view
        self.client_view = client_view
        self.exchange = exchange
        self.send = send
        self.run = run
        self.memory = memory
        self.max_rounds = max_rounds
        # Follow-up items appended so far, and the record of the turn.
        self.appended: list[dict[str, Any]] = []
        self.markers: list[str] = []
        self.visible_before = 0

    async def run_calls(self, calls: list[RecallCall]) -> dict[str, str]:
        results = {}
        for call in calls:
            try:
                async with asyncio.timeout(RECALL_TIMEOUT_SECONDS):
                    results[call.id] = await self.run(call.arguments)
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                results[call.id] = f"recall failed: no answer within {RECALL_TIMEOUT_SECONDS:g}s"
            except Exception as exc:
                log.exception("recall failed")
                results[call.id] = (
                    f"recall failed: {exc.__class__.__name__}: {exc}"
                    if str(exc)
                    else (f"recall failed: {exc.__class__.__name__}")
                )
        return results

    def followup(self) -> tuple[Exchange, bytes]:
        """The next follow-up: its exchange, whose request is the client's own view plus the
        recall turns so far (what the store records and the client's next request, restored,
        resends), and the body that goes upstream, the composed view plus the same turns."""
        appended = self.recall.messages(self.appended)
        sent = attrs.evolve(self.view, messages=[*self.view.messages, *appended], modified=True)
        body = json.dumps(self.codec.render(sent), ensure_ascii=False).encode()
        client = attrs.evolve(
            self.client_view, messages=[*self.client_view.messages, *appended], modified=True
        )
        return self.round_exchange(client), body

    def round_exchange(self, request: RequestView) -> Exchange:
        base = self.exchange
        return Exchange(
            api=base.api,
            path=base.path,
            request=request,
            harness=base.harness,
            session_id=base.session_id,
            project=base.project,
            upstream=base.upstream,
            server_state=base.server_state,
            # The follow-up extends the composed request: the same layer.
            context_layer=base.context_layer,
        )

    async def _marker_round(self, result: RoundResult) -> tuple[list[str], dict[str, str]]:
        """Markers for the recall calls of a round, and their results."""
        markers = []
        for call in result.recall_calls:
            args = parse_arguments(call.arguments)
            markers.append(marker_text(args.query, args.id))
        results = await self.run_calls(result.recall_calls)
        return markers, results

    async def _remember_mixed(self, result: RoundResult, results: dict[str, str]) -> None:
        record = self.recall.mixed_record(result, results)
        record.update(kind="mixed", api=self.codec.api, anchor=result.client_calls[0], order=result.order)
        await self.memory.add(self.exchange.session_id, record)

    async def remember(self, tail: str) -> None:
        """Keep what went upstream for the markers the client saw (the turn is over)."""
        if not self.markers:
            return
        record = {
            "kind": "loop",
            "api": self.codec.api,
            "markers": self.markers,
            "items": self.appended,
            "tail": norm(tail)[:200],
            "visible_before": self.visible_before,
        }
        await self.memory.add(self.exchange.session_id, record)

    async def next_round(
        self, result: RoundResult, round_no: int
    ) -> tuple[list[Any], Exchange, bytes] | None:
        """After an upstream round that called recall, streamed or not: ``None`` when the
        turn ends here (recall mixed with the client's own calls, whose results are kept for
        the next request; or the round limit), else the round's markers, and the exchange
        and body of the follow-up to send."""
        if result.client_calls:
            results = await self.run_calls(result.recall_calls)
            await self._remember_mixed(result, results)
            return None
        if round_no >= self.max_rounds:
            return None
        markers, results = await self._marker_round(result)
        if round_no == 0:
            self.visible_before = result.visible
        self.markers.extend(markers)
        self.appended.extend(result.assistant + self.recall.result_items(results))
        exchange, body = self.followup()
        return markers, exchange, body


def run_for(gateway: Any, session: str, project: str) -> Callable[[Any], Awaitable[str]]:
    """The recall runner of one request: the gateway's engine, this session and project."""

    async def run(arguments: Any) -> str:
        # Exchanges that already finished reach the store first (read-your-writes), briefly.
        try:
            await gateway.writer.wait_idle(timeout=1.0)
        except Exception:
            pass
        return await run_recall(gateway.recall, arguments, session=session, project=project)

    return run
