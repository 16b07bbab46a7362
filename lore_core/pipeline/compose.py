"""Compose: the prompt that goes upstream. Earlier recalls are put back into the history
(cache-stable), the context manager and the prompt layers compose the view, the recall tool
is added, and the view is rendered to bytes (or the client's own bytes go, when nothing
changed)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from lore_core.interfaces import CompositionContext
from lore_core.model import RequestView
from lore_core.pipeline.answers import ClientError
from lore_core.pipeline.turn import Spans, Turn
from lore_core.pipeline.upstream import BadUpstreamURL, NoUpstream, forward_headers, join_url, upstream_path
from lore_core.recall.memory import inject_tool
from lore_core.wire.jsonbody import append_to_array

if TYPE_CHECKING:
    from lore_core.gateway import Gateway

log = logging.getLogger("lore.pipeline")


async def prepare(gateway: Gateway, turn: Turn) -> None:
    """Once per request: earlier recalls restored, the upstream chosen. Raises
    :class:`ClientError` for a bad ``X-Lore-Upstream-URL`` (400) and a provider without an
    upstream (502)."""
    codec = turn.codec
    # Markers of earlier recalls become the real tool call + result again (cache-stable).
    turn.client_view = await gateway.recall_memory.restore(codec, turn.view, turn.session_id)
    try:
        turn.base = gateway.upstream.resolve(codec.provider, turn.client_view.model, turn.headers)
    except BadUpstreamURL as exc:
        raise ClientError(400, f"X-Lore-Upstream-URL: {exc}") from None
    except NoUpstream as exc:
        log.warning("%s request refused (502): %s", codec.api, exc.reason)
        raise ClientError(502, exc.reason) from None
    turn.url = join_url(turn.base, upstream_path(turn.path), turn.query)
    try:
        # Background work (distillation, curation) borrows the session's credentials, held in
        # memory only.
        gateway.worker.remember_credentials(
            turn.session_id,
            codec.provider,
            turn.base,
            turn.headers,
            model=turn.client_view.model,
            api=codec.api,
        )
    except Exception:
        log.exception("could not remember a session's worker target")


async def compose(gateway: Gateway, turn: Turn) -> None:
    """One attempt's view, body and headers (composed again after an overflow)."""
    codec = turn.codec
    assert turn.client_view is not None
    turn.composing = CompositionContext(turn.session_id, turn.project, turn.harness_name, codec)
    try:
        # The context manager chooses the turn's layer, then the prompt layers run in
        # priority order (a failing layer is skipped inside).
        view = await gateway.context.compose(turn.client_view, turn.composing)
    except Exception:
        gateway.stats["layer_errors"] += 1
        log.exception("prompt composition failed; sending the request unchanged")
        view = turn.client_view
    composed = view.modified
    turn.recall_on = inject_tool(codec, view, gateway.config.recall.tool)
    turn.out_headers = forward_headers(turn.client_headers)
    if view.modified:
        try:
            spliced = None if composed else _with_added_tools(turn.spans, turn.raw, view)
            turn.out_body = spliced or json.dumps(codec.render(view), ensure_ascii=False).encode()
            turn.out_headers = [(k, v) for k, v in turn.out_headers if k.lower() != "content-encoding"]
        except Exception:
            log.exception("%s codec could not render a composed request; sending the original", codec.api)
            turn.out_body = turn.body
    else:
        turn.out_body = turn.body  # byte for byte, still in the client's content-encoding
    turn.sent = view


def _with_added_tools(spans: Spans | None, raw: dict[str, Any], view: RequestView) -> bytes | None:
    """The client's body with the tools the view appended to its own (the recall tool), when
    that is all that changed: the same request as rendering the view, without serialising the
    whole body again. ``None`` when the view differs from the body in any other way."""
    own = raw.get("tools")
    if spans is None or "tools" not in spans[1] or not isinstance(own, list) or not own:
        return None
    if len(view.tools) <= len(own) or any(a is not b for a, b in zip(own, view.tools, strict=False)):
        return None
    text, members = spans
    # surrogatepass: the client's own bytes again, also where they encode a lone surrogate.
    return append_to_array(text, members["tools"], view.tools[len(own) :]).encode("utf-8", "surrogatepass")
