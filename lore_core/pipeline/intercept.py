"""Intercept: requests the gateway answers itself, by the registered request handlers
(:class:`lore_core.interfaces.RequestHandler`), before anything goes upstream."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from quart import Response

from lore_core.interfaces import RequestInfo
from lore_core.model import TEXT, AssistantMessage, Block, Exchange
from lore_core.pipeline.finish import finish
from lore_core.pipeline.turn import Turn

if TYPE_CHECKING:
    from lore_core.gateway import Gateway

log = logging.getLogger("lore.pipeline")


async def intercept(gateway: Gateway, turn: Turn) -> Response | None:
    """The first handler's answer in the API's shape, or ``None``: the request goes on."""
    info = RequestInfo(
        api=turn.codec.api,
        path=turn.path,
        headers=turn.headers,
        view=turn.view,
        harness=turn.harness,
        context=turn.ctx,
        session_id=turn.session_id,
        project=turn.project,
        may_reach_memory=turn.access.allowed,
    )
    for handler in gateway.request_handlers:
        if not (turn.access.allowed or handler.answers_strangers):
            continue  # a request that may not reach memory goes upstream untouched
        answer = await handler.answer(info, gateway.app)
        if answer is None:
            continue
        view = turn.view
        body, content_type = turn.codec.render_response(answer.text, view.model, view.stream)
        if answer.store:
            finish(
                gateway,
                Exchange(
                    api=turn.codec.api,
                    path=turn.path,
                    request=view,
                    harness=turn.harness_name,
                    session_id=turn.session_id,
                    project=turn.project,
                    upstream="lore",
                    status=200,
                    response=AssistantMessage(
                        blocks=[Block(TEXT, text=answer.text)], model=view.model, complete=True
                    ),
                ),
            )
        return Response(body, status=200, content_type=content_type)
    return None
