"""The built-in request handlers: requests the gateway answers itself, registered through
the same hook as a plugin's (:func:`lore_core.hookspecs.lore_register_request_handlers`).

* ``/lore:`` commands in the last user message (the model never sees them), acted on only
  for a request that may reach the session's memory (:mod:`lore_core.pipeline.ownership`);
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
            text = await gateway.answer_command(command, turn.session_id, turn.view)
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
