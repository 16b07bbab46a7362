"""The built-in request handlers: requests the gateway answers itself, registered through
the same hook as a plugin's (:func:`lore_core.hookspecs.lore_register_request_handlers`).

* ``/lore:`` commands in the last user message (the model never sees them), acted on only
  for a request that may reach the session's memory (:mod:`lore_core.pipeline.ownership`);
* a harness's own "summarise the conversation" request, answered from the session's
  distillations without an upstream call, so the client's summary is Lore's memory.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, cast

from lore_core.context.commands import SlashCommand, find_command, help_text, status_text
from lore_core.hookspecs import hookimpl
from lore_core.interfaces import HandlerAnswer, LoreApp, RequestHandler
from lore_core.model import RequestView
from lore_core.storage.records import logical_messages

if TYPE_CHECKING:
    from lore_core.gateway import Gateway, GatewayApp
    from lore_core.pipeline.turn import Turn

log = logging.getLogger("lore.handlers")

COMMAND_REFUSED = (
    "Lore did not run this command: this request may not reach this session's memory (the "
    "session was started with other credentials, or the client runs as another user or names "
    "its own upstream). Nothing was changed."
)


def _kernel(app: LoreApp) -> Gateway:
    """The gateway behind ``app``: these handlers are the kernel's own features (session
    owners, amnesia, the distiller), which a plugin's handler never reaches."""
    return cast("GatewayApp", app).gateway


class SlashCommands(RequestHandler):
    # It sees every request, to refuse the commands of one that may not reach memory (they
    # would go upstream to the model otherwise).
    name, priority, answers_strangers = "slash-commands", 100, True

    async def answer(self, turn: Turn, app: LoreApp) -> HandlerAnswer | None:
        gateway = _kernel(app)
        command = find_command(turn.view)
        if command is None:
            return None
        # Only the session's owner may change or read it (any process can name a session):
        # turn.access says whether this request is the owner's.
        if command.name == "help" or turn.access.allowed:
            gateway.stats["commands_answered"] += 1
            text = await answer_command(gateway, command, turn.session_id, turn.view)
        else:
            gateway.stats["commands_refused"] += 1
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
        status["distillations"] = len(await gateway.store.list_distillations(session_id))
    except Exception as exc:
        log.warning("could not read the store for /lore:status: %s", exc)
    return status


class CompactionAnswers(RequestHandler):
    name, priority = "compaction-answers", 200

    async def answer(self, turn: Turn, app: LoreApp) -> HandlerAnswer | None:
        gateway = _kernel(app)
        if turn.harness is None or turn.ctx is None:
            return None
        try:
            compaction = turn.harness.compaction_request(turn.ctx)
        except Exception:
            log.exception("harness %s failed to check for a compaction request", turn.harness.name)
            return None
        if not compaction:
            return None
        summary = await gateway.distiller.compaction_summary(turn.session_id)
        if summary is None:
            return None  # nothing distilled yet: the upstream summarises
        gateway.stats["compactions_answered"] += 1
        # Stored like any exchange: the request's messages and the summary it got.
        return HandlerAnswer(f"<summary>\n{summary}\n</summary>", store=True)


HANDLERS = (SlashCommands(), CompactionAnswers())


@hookimpl
def lore_register_request_handlers(register: Any) -> None:
    for handler in HANDLERS:
        register(handler)
