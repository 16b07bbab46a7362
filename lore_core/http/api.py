"""The gateway's local API (``/lore/api/...``) used by ``lore sessions/show/search/status``
and ``lore distill/distillations``.

DuckDB lets one process hold the database file, so while the gateway runs every other
process reads the store through here. Read-only except ``POST /distill`` (which only runs
what the scheduler would run on idle). Every route needs the gateway token, and answers
loopback clients only unless ``server.allowRemote`` is set: :mod:`lore_core.http.access` checks
both (and Host and Origin) before any route runs.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
from quart import Blueprint, Response, current_app, request

from lore_core.storage.records import main_branch
from lore_core.worker.client import WorkerError

api = Blueprint("lore_api", __name__, url_prefix="/lore/api")


def _json(status: int, payload: Any) -> Response:
    return Response(json.dumps(payload, default=str), status=status, content_type="application/json")


def _gateway() -> Any:
    return current_app.extensions["lore"]


def _int_arg(name: str, default: int, low: int = 1, high: int = 10_000) -> int:
    try:
        return max(low, min(high, int(request.args.get(name, default))))
    except ValueError:
        return default


async def _settled() -> None:
    """Let exchanges that already finished reach the store first (read-your-writes)."""
    try:
        await _gateway().writer.wait_idle(timeout=2.0)
    except TimeoutError:
        pass


@api.get("/status")
async def status() -> Response:
    await _settled()
    gateway = _gateway()
    payload: dict[str, Any] = {"gateway": "running", "health": gateway.health()}
    try:
        payload["store"] = await gateway.store.stats()
    except Exception as exc:
        payload["store"] = {"error": str(exc)}
    return _json(200, payload)


@api.get("/sessions")
async def sessions() -> Response:
    await _settled()
    rows = await _gateway().store.list_sessions(
        project=request.args.get("project") or None, limit=_int_arg("limit", 50)
    )
    return _json(200, [attrs.asdict(s) for s in rows])


@api.get("/sessions/<path:session_id>")
async def session(session_id: str) -> Response:
    await _settled()
    store = _gateway().store
    found = await store.get_session(session_id)
    if found is None:
        return _json(404, {"error": f"no session {session_id!r}"})
    messages = await store.session_messages(session_id)
    if request.args.get("branches") != "all":
        messages = main_branch(messages)
    return _json(
        200,
        {
            "session": attrs.asdict(found),
            "state": await store.session_state(session_id),
            "messages": [attrs.asdict(m) for m in messages],
        },
    )


@api.get("/search")
async def search() -> Response:
    query = request.args.get("q", "")
    if not query.strip():
        return _json(400, {"error": "missing query: /lore/api/search?q=..."})
    await _settled()
    hits = await _gateway().store.search(
        query,
        session_id=request.args.get("session") or None,
        project=request.args.get("project") or None,
        limit=_int_arg("limit", 10, high=1000),
    )
    return _json(200, [h.as_json() for h in hits])


@api.get("/recall")
async def recall() -> Response:
    """The recall engine the model's tool uses: ``?q=`` (a query or one result id),
    ``scope``, ``session``, ``project``, ``limit``. Bad input is answered in ``error``."""
    from lore_core.recall.store_engine import recall as run_recall
    from lore_core.recall.store_engine import response_json

    await _settled()
    answer = await run_recall(
        _gateway().recall,
        request.args.get("q", ""),
        request.args.get("scope") or None,
        request.args.get("session") or None,
        request.args.get("project") or None,
        _int_arg("limit", 10, high=200),
    )
    return _json(200, response_json(answer))


@api.get("/distillations")
async def distillations() -> Response:
    await _settled()
    rows = await _gateway().store.list_distillations(
        request.args.get("session") or None, include_archived=request.args.get("archived") != "0"
    )
    return _json(200, [d.as_json() for d in rows])


@api.get("/distillations/<path:distillation_id>")
async def distillation(distillation_id: str) -> Response:
    found = await _gateway().store.get_distillation(distillation_id)
    if found is None:
        return _json(404, {"error": f"no distillation {distillation_id!r}"})
    return _json(200, found.as_json())


@api.post("/distill")
async def distill() -> Response:
    """Distil one session now (``?session=``), or every stored session. Answers when done."""
    await _settled()
    gateway = _gateway()
    session_id = request.args.get("session") or None
    if session_id is not None and await gateway.store.get_session(session_id) is None:
        return _json(404, {"error": f"no session {session_id!r}"})
    try:
        reports = await gateway.distiller.distill_all([session_id] if session_id else None)
    except WorkerError as exc:
        # What was distilled before the failed call stays stored; the scheduler retries.
        return _json(502, {"error": f"the worker call failed: {exc.reason}"})
    return _json(200, {"reports": [r.as_json() for r in reports], "worker": gateway.worker.status()})


@api.errorhandler(Exception)
async def _store_error(exc: Exception) -> Response:
    # A failing store must not turn into an HTML 500: say what failed, as JSON.
    return _json(503, {"error": f"the store failed: {' '.join(str(exc).split())}"})
