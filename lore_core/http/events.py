"""The memory API for agents outside the proxy: ``POST /v1/events``, ``POST /v1/pack`` and
the OpenAPI document at ``/openapi.json`` (:mod:`lore_core.http.openapi`).

Both ``/v1`` routes need the gateway token (:data:`lore_core.http.access.PROTECTED_PREFIXES`)
and are never forwarded to a provider. Bodies are validated against the document first; a
mistake is a 400 naming the field, a failing store a 503, never a 500.
"""

from __future__ import annotations

import json
import os
from typing import Any

from quart import Blueprint, Response, current_app, request
from werkzeug.exceptions import HTTPException

from lore_core.events.log import EventInputError, check_events, check_run
from lore_core.events.pack import PackRequest, build_pack
from lore_core.http.openapi import document, validate
from lore_core.interfaces import Tier, TierUnavailable, has_tier
from lore_core.knowledge.book import UNPAIRED_SURROGATE, is_text
from lore_core.wire.jsonbody import may_hold_lone_surrogates

events_api = Blueprint("lore_events", __name__)


def _json(status: int, payload: Any) -> Response:
    return Response(json.dumps(payload, default=str), status=status, content_type="application/json")


def _gateway() -> Any:
    return current_app.extensions["lore"]


async def _body(schema: str) -> dict[str, Any] | Response:
    # Bounded by server.maxApiBodyBytes and bodyTimeoutSeconds (lore_core/http/app.py).
    raw = await request.get_data(cache=True, as_text=False, parse_form_data=False)
    try:
        encoding = json.detect_encoding(raw)
        text = raw.decode(encoding, "surrogatepass") if raw else "null"
        body = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        return _json(400, {"error": f"the body is not JSON: {exc}"})
    except RecursionError:
        return _json(400, {"error": "the body nests too deeply to be an events or pack request"})
    if may_hold_lone_surrogates(text, raw, encoding) and not is_text(body):
        # Valid JSON, but no store can hold it as text: the client's mistake, not the store's.
        return _json(400, {"error": UNPAIRED_SURROGATE})
    problem = validate(body, schema)
    if problem:
        return _json(400, {"error": problem})
    project = body.get("project", "")
    if project and not os.path.isabs(project):
        return _json(400, {"error": "body.project must be the project's absolute directory"})
    return dict(body)


def _no_event_log() -> Response | None:
    """The 503 a store without the event log answers, else ``None``."""
    store = _gateway().store
    if has_tier(store, Tier.EVENTS):
        return None
    return _json(503, {"error": str(TierUnavailable(store, Tier.EVENTS))})


@events_api.post("/v1/events")
async def write_events() -> Response:
    body = await _body("EventsRequest")
    if isinstance(body, Response):
        return body
    try:
        run = check_run(body["run"], "body.run")
        events = check_events(body["events"])
    except EventInputError as exc:
        return _json(400, {"error": str(exc)})
    project = body.get("project", "")
    unavailable = _no_event_log()
    if unavailable is not None:
        return unavailable
    seqs = await _gateway().events.write(project, run, events)
    return _json(200, {"run": run, "project": project, "seqs": seqs, "last_seq": seqs[-1]})


@events_api.post("/v1/pack")
async def pack() -> Response:
    body = await _body("PackRequest")
    if isinstance(body, Response):
        return body
    gateway = _gateway()
    config = gateway.config.events
    try:
        run = check_run(body["run"], "body.run")
        unavailable = _no_event_log()
        if unavailable is not None:
            return unavailable
        answer = await build_pack(
            gateway.events,
            gateway.pack_engine,
            gateway.context.counter.text,
            PackRequest(
                project=body.get("project", ""),
                run=run,
                query=body["query"],
                min_seq=body.get("min_seq"),
                token_budget=body.get("token_budget"),
                include_knowledge=body.get("include_knowledge", False),
            ),
            distilled_limit=config.distilled_limit,
            raw_tail_recent=config.raw_tail_recent,
            partial_timeout=config.retrieval_partial_timeout_ms / 1000,
        )
    except EventInputError as exc:
        return _json(400, {"error": str(exc)})
    return _json(200, answer)


@events_api.get("/openapi.json")
async def openapi() -> Response:
    return _json(200, document())


@events_api.errorhandler(Exception)
async def _store_error(exc: Exception) -> Response:
    if isinstance(exc, HTTPException):  # what Quart refuses itself (a body too large, ...)
        return _json(exc.code or 400, {"error": f"{exc.name}: {request.method} {request.path}"})
    if isinstance(exc, TierUnavailable):  # a route that needs a tier the store does not declare
        return _json(503, {"error": str(exc)})
    # A failing store must not turn into an HTML 500: say what failed, as JSON.
    return _json(503, {"error": f"the store failed: {' '.join(str(exc).split())}"})
