"""The built-in request handlers: requests the gateway answers itself, registered through
the same hook as a plugin's (:func:`lore_core.hookspecs.lore_register_request_handlers`).

* ``/lore:`` commands in the last user message (the model never sees them), acted on only
  for the session's own credentials;
* a harness's own "summarise the conversation" request, answered from the session's
  distillations without an upstream call, so the client's summary is Lore's memory.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from lore_core.context.commands import find_command
from lore_core.hookspecs import hookimpl
from lore_core.interfaces import HandlerAnswer, LoreApp, RequestHandler

if TYPE_CHECKING:
    from lore_core.gateway import Gateway, GatewayApp
    from lore_core.pipeline.turn import Turn

log = logging.getLogger("lore.handlers")

COMMAND_REFUSED = (
    "Lore did not run this command: this session was started with other credentials (API key "
    "or login), and only those may change or read its memory settings. Nothing was changed."
)


def _kernel(app: LoreApp) -> Gateway:
    """The gateway behind ``app``: these handlers are the kernel's own features (session
    owners, amnesia, the distiller), which a plugin's handler never reaches."""
    return cast("GatewayApp", app).gateway


class SlashCommands(RequestHandler):
    name, priority = "slash-commands", 100

    async def answer(self, turn: Turn, app: LoreApp) -> HandlerAnswer | None:
        gateway = _kernel(app)
        view = turn.view
        command = find_command(view)
        # The request's first message: carrying it shows a request has the session's history
        # (a command sent alone shows nothing).
        with_history = bool(view.messages) and (command is None or len(view.messages) > 1)
        first_message = view.messages[0].text if with_history else None
        if command is None:
            # Any request may be a session's first: its credentials own the session.
            gateway.owners.request_seen(turn.session_id, turn.headers, first_message)
            return None
        # Only the session's own credentials may change or read it (any process can name a
        # session).
        if command.name == "help" or gateway.owners.may_command(turn.session_id, turn.headers, first_message):
            gateway.stats["commands_answered"] += 1
            text = await gateway.answer_command(command, turn.session_id, view)
        else:
            gateway.stats["commands_refused"] += 1
            text = COMMAND_REFUSED
        return HandlerAnswer(text, store=False)


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
