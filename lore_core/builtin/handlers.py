"""The built-in request handlers: requests the gateway answers itself. They are the kernel's
own features (session owners, amnesia, the distiller), so the gateway builds them with what
they use (:func:`builtin_handlers`) and runs them with the handlers plugins register through
:func:`lore_core.hookspecs.lore_register_request_handlers`, in one priority order:

* ``/lore:`` commands in the last user message (the model never sees them), acted on only
  for a request that may reach the session's memory (:mod:`lore_core.pipeline.ownership`);
* a harness's own "summarise the conversation" request, answered from the session's
  distillations without an upstream call, so the client's summary is Lore's memory.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from lore_core.context.commands import SlashCommand, find_command, help_text, status_text
from lore_core.interfaces import (
    DistillationStore,
    HandlerAnswer,
    LoreApp,
    RequestHandler,
    RequestInfo,
    tier_of,
)
from lore_core.model import RequestView
from lore_core.storage.identity import logical_messages

if TYPE_CHECKING:
    from lore_core.gateway import Gateway

log = logging.getLogger("lore.handlers")

COMMAND_REFUSED = (
    "Lore did not run this command: this request may not reach this session's memory (the "
    "session was started with other credentials, or the client runs as another user or names "
    "its own upstream). Nothing was changed."
)


class SlashCommands(RequestHandler):
    # It sees every request, to refuse the commands of one that may not reach memory (they
    # would go upstream to the model otherwise).
    name, priority, answers_strangers = "slash-commands", 100, True

    def __init__(
        self, answer: Callable[[SlashCommand, str, RequestView], Awaitable[str]], stats: Counter[str]
    ):
        self._answer = answer
        self._stats = stats

    async def answer(self, request: RequestInfo, app: LoreApp) -> HandlerAnswer | None:
        command = find_command(request.view)
        if command is None:
            return None
        # Only the session's owner may change or read it (any process can name a session).
        if command.name == "help" or request.may_reach_memory:
            self._stats["commands_answered"] += 1
            text = await self._answer(command, request.session_id, request.view)
        else:
            self._stats["commands_refused"] += 1
            text = COMMAND_REFUSED
        return HandlerAnswer(text, store=False)


async def answer_command(gateway: Gateway, command: SlashCommand, session_id: str, view: RequestView) -> str:
    """The text answer to a ``/lore:`` command in the last user message."""
    # The command is the last message; the gateway's answer will be the next one.
    position = len(logical_messages(view.messages)) - 1
    if command.name == "status":
        return status_text(await session_status(gateway, session_id))
    if command.name == "amnesia":
        arg = command.args[0].lower() if command.args else ""
        if arg == "on":
            changed = await gateway.amnesia.turn_on(session_id, position)
            return (
                "Lore amnesia is ON: from this message on, this session is not stored "
                "(no history, distillation or recall). Send /lore:amnesia off to resume."
                if changed
                else "Lore amnesia was already on for this session."
            )
        if arg == "off":
            changed = await gateway.amnesia.turn_off(session_id, position + 2)
            return (
                "Lore amnesia is OFF: this session is stored again from the next message. "
                "What was said while it was on is never stored."
                if changed
                else "Lore amnesia was not on for this session; nothing changed."
            )
        if arg == "":
            state = "ON" if gateway.amnesia.is_on(session_id) else "OFF"
            return f"Lore amnesia is {state} for this session. Use /lore:amnesia on|off."
        return help_text(f"/lore:amnesia takes 'on' or 'off', not {command.args[0]!r}.")
    if command.name == "help":
        return help_text()
    return help_text(f"Unknown Lore command /lore:{command.name}.")


async def session_status(gateway: Gateway, session_id: str) -> dict[str, Any]:
    """What ``/lore:status`` reports about one session."""
    try:
        await gateway.spend.load_session(session_id)
    except Exception as exc:
        log.warning("could not read the saved spend of session %s: %s", session_id, exc)
    now = time.time()
    costs = gateway.costs
    pressure = costs.pressure(now)
    status: dict[str, Any] = {
        "session_id": session_id,
        "amnesia": gateway.amnesia.is_on(session_id),
        "spend": {
            "session_usd": costs.session_cost(session_id),
            "today_usd": costs.day_cost(now),
            "projected_today_usd": pressure.projected,
            "daily_budget_usd": costs.daily_budget_usd,
        },
        "throttle": gateway.throttle.counters(),
    }
    try:
        status["context"] = gateway.context.session_status(session_id)
    except Exception:
        log.exception("the context manager could not report on a session")
    # The session's last exchanges may still wait in the writer's queue (a write starts at
    # most every store.flushIntervalMs): count them too.
    await gateway.settle_writes(timeout=1.0)
    try:
        session = await gateway.store.get_session(session_id)
        status["stored_messages"] = session.message_count if session else 0
        distillations = tier_of(gateway.store, DistillationStore)
        if distillations is not None:
            status["distillations"] = len(await distillations.list_distillations(session_id))
    except Exception as exc:
        log.warning("could not read the store for /lore:status: %s", exc)
    return status


class CompactionAnswers(RequestHandler):
    name, priority = "compaction-answers", 200

    def __init__(self, summary: Callable[[str], Awaitable[str | None]], stats: Counter[str]):
        self._summary = summary
        self._stats = stats

    async def answer(self, request: RequestInfo, app: LoreApp) -> HandlerAnswer | None:
        if request.harness is None or request.context is None:
            return None
        try:
            compaction = request.harness.compaction_request(request.context)
        except Exception:
            log.exception("harness %s failed to check for a compaction request", request.harness.name)
            return None
        if not compaction:
            return None
        summary = await self._summary(request.session_id)
        if summary is None:
            return None  # nothing distilled yet: the upstream summarises
        self._stats["compactions_answered"] += 1
        # Stored like any exchange: the request's messages and the summary it got.
        return HandlerAnswer(f"<summary>\n{summary}\n</summary>", store=True)


def builtin_handlers(gateway: Gateway) -> list[RequestHandler]:
    """The kernel's own request handlers, bound to the gateway's parts they use."""
    return [
        SlashCommands(
            lambda command, session_id, view: answer_command(gateway, command, session_id, view),
            gateway.stats,
        ),
        CompactionAnswers(gateway.distiller.compaction_summary, gateway.stats),
    ]
