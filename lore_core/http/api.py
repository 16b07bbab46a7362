"""The gateway's local API (``/lore/api/...``) used by ``lore sessions/show/search/status``,
``lore distill/distillations`` and ``lore knowledge``.

DuckDB lets one process hold the database file, so while the gateway runs every other
process reads the store through here. Read-only except ``POST /distill`` (which only runs
what the scheduler would run on idle) and the knowledge routes (every write goes through the
gateway's :class:`~lore_core.knowledge.book.KnowledgeBook`, under its rules). Every route
needs the gateway token, and answers loopback clients only unless ``server.allowRemote`` is
set: :mod:`lore_core.http.access` checks both (and Host and Origin) before any route runs.
"""

from __future__ import annotations

import json
import os
from typing import Any

import attrs
from quart import Blueprint, Response, current_app, request

from lore_core.knowledge.book import entry_json
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


# -- long-term knowledge ------------------------------------------------------------------------


async def _json_body() -> dict[str, Any] | Response:
    """The request's JSON object, or a 400 saying what is wrong with it."""
    raw = await request.get_data()
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        return _json(400, {"error": f"the body is not JSON: {exc}"})
    if not isinstance(body, dict):
        return _json(400, {"error": "the body must be a JSON object"})
    return body


def _fields(body: dict[str, Any], names: tuple[str, ...]) -> dict[str, str] | Response:
    found = {}
    for name in names:
        if name in body and body[name] is not None:
            if not isinstance(body[name], str):
                return _json(400, {"error": f"{name} must be a string"})
            found[name] = body[name]
    return found


def _result(result: Any, created: bool = False) -> Response:
    from lore_core.knowledge.book import REFUSED

    if result.status == REFUSED:
        standing = entry_json(result.version) if result.version is not None else None
        return _json(409, {"status": result.status, "error": result.reason, "entry": standing})
    return _json(
        201 if created and result.status == "created" else 200,
        {
            "status": result.status,
            "entry": entry_json(result.version),
        },
    )


@api.get("/knowledge")
async def knowledge_list() -> Response:
    """Current entries: ``?project=`` (with the global ones unless ``global=0``), or every
    project's without it."""
    book = _gateway().knowledge
    project = request.args.get("project") or None
    entries = await book.entries(project, include_global=request.args.get("global") != "0")
    metrics = await book.store.knowledge_metrics([e.logical_id for e in entries]) if entries else {}
    return _json(200, [entry_json(e, metrics.get(e.logical_id)) for e in entries])


@api.post("/knowledge")
async def knowledge_add() -> Response:
    from lore_core.knowledge.book import Provenance

    body = await _json_body()
    if isinstance(body, Response):
        return body
    fields = _fields(body, ("project", "category", "title", "content", "scope", "sensitivity"))
    if isinstance(fields, Response):
        return fields
    missing = [n for n in ("project", "category", "title", "content") if not fields.get(n)]
    if missing:
        return _json(400, {"error": f"missing {', '.join(missing)}"})
    if not os.path.isabs(fields["project"]):
        return _json(400, {"error": "project must be the project's absolute directory"})
    result = await _gateway().knowledge.create(
        project=fields["project"],
        category=fields["category"],
        title=fields["title"],
        content=fields["content"],
        scope=fields.get("scope", "project"),
        sensitivity=fields.get("sensitivity", "normal"),
        provenance=Provenance(source_ref="api"),
    )
    return _result(result, created=True)


@api.get("/knowledge/file")
async def knowledge_file() -> Response:
    """The export of ``?project=``: ``.lore.md`` text, or with ``format=json`` the JSON list
    ``lore import --format json`` reads (restricted entries never; ``sensitive=1``: sensitive
    entries too); nothing is written (``lore export`` writes it where it is asked to)."""
    from lore_core.knowledge.imports import EXPORT_FORMATS, LORE_MD, export_text

    project = request.args.get("project") or ""
    if not os.path.isabs(project):
        return _json(400, {"error": "project must be the project's absolute directory: ?project=<directory>"})
    fmt = request.args.get("format") or LORE_MD
    if fmt not in EXPORT_FORMATS:
        return _json(400, {"error": f"format must be one of {', '.join(EXPORT_FORMATS)}"})
    text, report = await export_text(
        _gateway().knowledge, project, fmt, include_sensitive=request.args.get("sensitive") == "1"
    )
    return _json(
        200,
        {
            "text": text,
            "written": report.written,
            "skipped_sensitive": report.skipped_sensitive,
            "skipped_restricted": report.skipped_restricted,
        },
    )


@api.post("/knowledge/import")
async def knowledge_import() -> Response:
    """Import the body into ``?project=`` through one of the import lanes: ``format=`` one of
    ``lore-md`` (a ``.lore.md``, as the file watcher does), ``mem0``, ``json``, ``agents``;
    without it, guessed from ``path=`` (the file's name) and the body."""
    from pathlib import Path

    from lore_core.knowledge.imports import FORMATS, LORE_MD, ImportFormatError, guess_format, import_text
    from lore_core.knowledge.lorefile import FILE_NAME

    project = request.args.get("project") or ""
    if not os.path.isabs(project):
        return _json(400, {"error": "project must be the project's absolute directory: ?project=<directory>"})
    fmt = request.args.get("format") or None
    if fmt is not None and fmt not in FORMATS:
        return _json(400, {"error": f"format must be one of {', '.join(FORMATS)}"})
    raw = await request.get_data()
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        return _json(400, {"error": f"the body is not UTF-8 text (bad byte at offset {exc.start})"})
    name = request.args.get("path") or ""
    fmt = fmt or guess_format(name, text)
    try:
        report = await import_text(
            _gateway().knowledge, project, text, fmt, Path(name or (FILE_NAME if fmt == LORE_MD else fmt))
        )
    except ImportFormatError as exc:
        return _json(400, {"error": str(exc)})
    return _json(200, report.as_json())


@api.get("/knowledge/contradictions")
async def knowledge_contradictions() -> Response:
    """Judged pairs of entries: ``?project=`` (every project's without it), ``status=`` one
    or more of open, cleared, kept, resolved (comma-separated; all without it)."""
    from lore_core.knowledge.contradictions import list_contradictions
    from lore_core.storage.knowledge import CONTRADICTION_STATUSES

    statuses = [s for s in (request.args.get("status") or "").split(",") if s] or None
    unknown = [s for s in statuses or [] if s not in CONTRADICTION_STATUSES]
    if unknown:
        return _json(
            400, {"error": f"status must be among {', '.join(CONTRADICTION_STATUSES)}, got {unknown[0]!r}"}
        )
    project = request.args.get("project") or None
    return _json(200, await list_contradictions(_gateway().knowledge, project, statuses))


@api.post("/knowledge/contradictions/scan")
async def knowledge_contradictions_scan() -> Response:
    """Judge ``?project=``'s candidate pairs now (what the idle job does), with the worker."""
    from lore_core.knowledge.contradictions import scan_json
    from lore_core.worker.client import WorkerUnavailable

    project = request.args.get("project") or ""
    if not os.path.isabs(project):
        return _json(400, {"error": "project must be the project's absolute directory: ?project=<directory>"})
    finder = _gateway().contradictions
    if finder.judge is None:
        return _json(
            409, {"error": "no contradiction judge: it needs the LLM observer (distill.observer: llm)"}
        )
    try:
        report = await finder.scan(project)
    except WorkerUnavailable as exc:
        return _json(503, {"error": f"no usable worker: {exc}"})
    return _json(200, scan_json(report))


@api.post("/knowledge/contradictions/resolve")
async def knowledge_contradictions_resolve() -> Response:
    """``{"first": "k:..", "second": "k:..", "keep": "k:.."}`` keeps one (the other gets a
    death certificate); ``"keep_both": true`` instead keeps both."""
    from lore_core.knowledge.book import KnowledgeInputError
    from lore_core.knowledge.contradictions import describe

    body = await _json_body()
    if isinstance(body, Response):
        return body
    fields = _fields(body, ("first", "second", "keep"))
    if isinstance(fields, Response):
        return fields
    keep_both = body.get("keep_both", False)
    if not isinstance(keep_both, bool):
        return _json(400, {"error": "keep_both must be true or false"})
    if not fields.get("first") or not fields.get("second"):
        return _json(400, {"error": "missing first or second (the two entries' ids)"})
    if keep_both == bool(fields.get("keep")):
        return _json(400, {"error": "give exactly one of keep (an id) and keep_both"})
    try:
        record = await _gateway().contradictions.resolve(
            fields["first"], fields["second"], keep=None if keep_both else fields["keep"]
        )
    except KnowledgeInputError as exc:
        return _json(404 if str(exc).startswith("no knowledge entry") else 400, {"error": str(exc)})
    return _json(200, await describe(_gateway().knowledge, record))


@api.get("/knowledge/<path:logical_id>")
async def knowledge_show(logical_id: str) -> Response:
    store = _gateway().store
    versions = await store.knowledge_versions(logical_id.removeprefix("k:"))
    if not versions:
        return _json(404, {"error": f"no knowledge entry {logical_id!r}"})
    metric = (await store.knowledge_metrics([versions[-1].logical_id])).get(versions[-1].logical_id)
    return _json(
        200,
        {"entry": entry_json(versions[-1], metric), "versions": [entry_json(v) for v in versions]},
    )


@api.patch("/knowledge/<path:logical_id>")
async def knowledge_edit(logical_id: str) -> Response:
    from lore_core.knowledge.book import Provenance

    book = _gateway().knowledge
    if await book.get(logical_id) is None:
        return _json(404, {"error": f"no knowledge entry {logical_id!r}"})
    body = await _json_body()
    if isinstance(body, Response):
        return body
    fields = _fields(body, ("category", "title", "content", "scope", "sensitivity"))
    if isinstance(fields, Response):
        return fields
    if not fields:
        return _json(400, {"error": "nothing to change: give category, title, content, scope or sensitivity"})
    result = await book.update(logical_id, provenance=Provenance(source_ref="api"), **fields)
    return _result(result)


@api.delete("/knowledge/<path:logical_id>")
async def knowledge_delete(logical_id: str) -> Response:
    from lore_core.knowledge.book import Provenance

    book = _gateway().knowledge
    if await book.get(logical_id) is None:
        return _json(404, {"error": f"no knowledge entry {logical_id!r}"})
    return _result(await book.delete(logical_id, provenance=Provenance(source_ref="api")))


@api.errorhandler(Exception)
async def _store_error(exc: Exception) -> Response:
    # A failing store must not turn into an HTML 500: say what failed, as JSON.
    return _json(503, {"error": f"the store failed: {' '.join(str(exc).split())}"})
