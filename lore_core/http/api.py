"""The gateway's local API (``/lore/api/...``) used by ``lore sessions/show/search/status``,
``lore distill/distillations`` and ``lore knowledge``.

DuckDB lets one process hold the database file, so while the gateway runs every other
process reads the store through here. Read-only except ``POST /distill`` (which only runs
what the scheduler would run on idle), ``DELETE /sessions/<id>`` (``lore forget``) and the
knowledge and entity routes (every write goes through the gateway's
:class:`~lore_core.knowledge.book.KnowledgeBook` or its entity book, under their rules). Every route
needs the gateway token, and answers loopback clients only unless ``server.allowRemote`` is
set: :mod:`lore_core.http.access` checks both (and Host and Origin) before any route runs.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import attrs
from quart import Blueprint, Response, current_app, request

from lore_core.interfaces import (
    DistillationStore,
    EventLogStore,
    KnowledgeStore,
    TierUnavailable,
    require_tier,
    tier_of,
)
from lore_core.knowledge.book import UNPAIRED_SURROGATE, entry_json, is_text
from lore_core.projects import project_root
from lore_core.storage.identity import main_branch
from lore_core.storage.records import normal_project

api = Blueprint("lore_api", __name__, url_prefix="/lore/api")


def _json(status: int, payload: Any) -> Response:
    return Response(json.dumps(payload, default=str), status=status, content_type="application/json")


def _gateway() -> Any:
    return current_app.extensions["lore"]


#: A project parameter that is not an absolute path (review F16: every project the gateway
#: stores is normalised, :func:`~lore_core.storage.records.normal_project`).
NOT_A_PROJECT = "project must be the project's absolute directory"


def _project_arg(value: Any) -> str | Response:
    """A required project (query parameter or body field) as projects are stored, or a 400."""
    project = normal_project(value) if isinstance(value, str) else None
    if project is None:
        return _json(400, {"error": NOT_A_PROJECT})
    return project_root(project)  # a subdirectory names its repository's project


def _project_filter(value: str | None) -> str | None:
    """An optional project that selects what is read: normalised and mapped to its
    repository root like stored projects (so ``/a/../b`` reads ``/b``); a value that is not
    an absolute path selects nothing, as before."""
    return project_root(value) if value else None


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
    payload: dict[str, Any] = {"gateway": "running", "health": gateway.health(private=True)}
    try:
        payload["store"] = await gateway.store.stats()
    except Exception as exc:
        payload["store"] = {"error": str(exc)}
    return _json(200, payload)


@api.get("/metrics")
async def metrics() -> Response:
    """The gateway's counters in the Prometheus text format (:mod:`lore_core.http.metrics`);
    behind the token like every route here (a scrape job sends it as a bearer token)."""
    from lore_core.http.metrics import CONTENT_TYPE, exposition

    return Response(exposition(_gateway()), status=200, content_type=CONTENT_TYPE)


@api.get("/spend")
async def spend() -> Response:
    """``lore spend``: the last ``days`` local days (default 7, today included) by day, model
    and session, from what the gateway keeps in the store (today's latest figures saved
    first); and what the background worker spent today."""
    from lore_core.context.spend import spend_report

    gateway = _gateway()
    await gateway.spend.save()  # raises nothing: what cannot be saved waits for the next save
    try:
        report = await spend_report(gateway.store, gateway.costs.today(), _int_arg("days", 7, high=3660))
    except Exception as exc:
        return _json(503, {"error": f"the store cannot be read: {exc}"})
    report["daily_budget_usd"] = gateway.costs.daily_budget_usd
    report["worker_today"] = gateway.worker.spend_today()
    return _json(200, report)


def _before_arg(value: str) -> tuple[float, str] | Response | None:
    """``before=<updated_at>~<session id>``: the last row of the previous page (an empty id:
    every session updated before that time)."""
    if not value:
        return None
    stamp, sep, session_id = value.partition("~")
    try:
        number = float(stamp)
    except ValueError:
        number = math.nan
    if not sep or not math.isfinite(number):
        return _json(400, {"error": "before must be <updated_at>~<session id> (the last row of a page)"})
    return number, session_id


@api.get("/sessions")
async def sessions() -> Response:
    """Stored sessions, newest first: ``limit`` (default 50) of them, filtered by
    ``project``, ``harness``, ``model``, ``since`` (seconds since the epoch) and ``q`` (in the
    title, id, model or project); ``before=<updated_at>~<id>`` (the last row of a page) gives
    the next page, unshifted by sessions that arrive meanwhile."""
    await _settled()
    args = request.args
    before = _before_arg(args.get("before", ""))
    if isinstance(before, Response):
        return before
    since: float | None = None
    if args.get("since"):
        try:
            since = float(args["since"])
        except ValueError:
            since = math.nan
        if not math.isfinite(since):
            return _json(400, {"error": "since must be a time in seconds since the epoch"})
    rows = await _gateway().store.list_sessions(
        project=_project_filter(args.get("project")),
        limit=_int_arg("limit", 50),
        before=before,
        since=since,
        harness=args.get("harness") or None,
        model=args.get("model") or None,
        text=args.get("q") or None,
    )
    return _json(200, [attrs.asdict(s) for s in rows])


@api.get("/projects")
async def projects() -> Response:
    """Every project, most recently active first: its sessions and their messages, its
    current knowledge entries, what its sessions spent (all time, at the gateway's prices)
    and its last activity; one query of the store, whatever it holds."""
    from lore_core.context.spend import SESSION_SPEND_KEY

    gateway = _gateway()
    await _settled()
    await gateway.spend.save()  # today's figures first, as /spend does
    found = await gateway.store.project_summaries(SESSION_SPEND_KEY)
    return _json(
        200,
        [
            {
                "project": p.project,
                "sessions": p.sessions,
                "messages": p.messages,
                "knowledge": p.knowledge,
                "spend_usd": round(p.spend_usd, 6),
                "last_activity": p.last_activity,
            }
            for p in found
        ],
    )


def _run_json(state: Any, oldest_pending_at: float | None, now: float) -> dict[str, Any]:
    return {
        "project": state.project,
        "run": state.run,
        "last_seq": state.last_seq,
        "covered_seq": state.covered_seq,
        "behind": max(0, state.last_seq - state.covered_seq),
        # How long the oldest event not distilled yet has waited (0: none waits).
        "lag_ms": max(0, round((now - oldest_pending_at) * 1000)) if oldest_pending_at is not None else 0,
        "created_at": state.created_at,
        "updated_at": state.updated_at,
    }


def _event_log() -> EventLogStore | Response:
    """The store's event log, or the 501 a store without one answers."""
    store = _gateway().store
    events = tier_of(store, EventLogStore)
    if events is None:
        return _json(501, {"error": str(TierUnavailable(store, EventLogStore.tier))})
    return events


async def _oldest_pending(store: EventLogStore, state: Any) -> float | None:
    if state.last_seq <= state.covered_seq:
        return None
    oldest = await store.run_events(state.project, state.run, after_seq=state.covered_seq, limit=1)
    return float(oldest[0].created_at) if oldest else None


@api.get("/runs")
async def runs() -> Response:
    """The event log's runs (``project``'s only when given), most recently updated first,
    at most ``limit`` (default 50): each with ``last_seq``, ``covered_seq`` (what the
    pipeline distilled), ``behind`` (events past it) and ``lag_ms`` (how long the oldest
    of those has waited)."""
    store = _event_log()
    if isinstance(store, Response):
        return store
    project = _project_filter(request.args.get("project"))
    found = await store.list_runs(project, limit=_int_arg("limit", 50, high=1_000))
    now = time.time()
    return _json(200, [_run_json(s, await _oldest_pending(store, s), now) for s in found])


@api.get("/runs/events")
async def run_events() -> Response:
    """One run (``project`` and ``run``) and its newest events, newest first, at most
    ``limit`` (default 50); ``before=<seq>`` gives the ones before that seq (the next page).
    404 for a run never written."""
    store = _event_log()
    if isinstance(store, Response):
        return store
    name = request.args.get("run", "")
    if not name:
        return _json(400, {"error": "run is required"})
    project = project_root(request.args["project"]) if request.args.get("project") else ""
    before = request.args.get("before", "")
    if before and not (before.isascii() and before.isdigit()):
        return _json(400, {"error": "before must be an event's seq"})
    state = await store.run_state(project, name)
    if state is None:
        return _json(404, {"error": f"no run {name!r} in {project or 'no project'}"})
    upto = min(int(before) - 1, state.last_seq) if before else state.last_seq
    events = (
        await store.run_events(project, name, upto_seq=upto, limit=_int_arg("limit", 50), newest=True)
        if upto > 0
        else []
    )
    oldest = await _oldest_pending(store, state)
    return _json(
        200,
        {
            "run": _run_json(state, oldest, time.time()),
            "events": [
                {
                    "seq": e.seq,
                    "kind": e.kind,
                    "content": e.content,
                    "working": e.working,
                    "key": e.key,
                    "created_at": e.created_at,
                    "distilled": e.seq <= state.covered_seq,
                }
                for e in reversed(events)
            ],
        },
    )


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


@api.delete("/sessions/<path:session_id>")
async def session_forget(session_id: str) -> Response:
    """``lore forget``: the session and everything derived from it go, for good; a client
    resending its history does not bring it back (:mod:`lore_core.storage.forget`). Answers
    what was removed and what it cost; 404 when the store has nothing of the session; 503
    when the store cannot take what it was given first (nothing is forgotten then)."""
    from lore_core.gateway import ForgetFailed

    try:
        report = await _gateway().forget_session(session_id)
    except ForgetFailed as exc:
        return _json(503, {"error": str(exc)})
    if report is None:
        return _json(404, {"error": f"no session {session_id!r}"})
    return _json(200, report.as_json())


@api.get("/search")
async def search() -> Response:
    query = request.args.get("q", "")
    if not query.strip():
        return _json(400, {"error": "missing query: /lore/api/search?q=..."})
    await _settled()
    hits = await _gateway().store.search(
        query,
        session_id=request.args.get("session") or None,
        project=_project_filter(request.args.get("project")),
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
        _project_filter(request.args.get("project")),
        _int_arg("limit", 10, high=200),
    )
    return _json(200, response_json(answer))


@api.get("/distillations")
async def distillations() -> Response:
    await _settled()
    rows = await require_tier(_gateway().store, DistillationStore).list_distillations(
        request.args.get("session") or None, include_archived=request.args.get("archived") != "0"
    )
    return _json(200, [d.as_json() for d in rows])


@api.get("/distillations/<path:distillation_id>")
async def distillation(distillation_id: str) -> Response:
    found = await require_tier(_gateway().store, DistillationStore).get_distillation(distillation_id)
    if found is None:
        return _json(404, {"error": f"no distillation {distillation_id!r}"})
    return _json(200, found.as_json())


@api.post("/distill")
async def distill() -> Response:
    """Distil one session now (``?session=``), or every stored session. Answers when done."""
    from lore_core.worker.client import WorkerError

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
    if not is_text(body):
        return _json(400, {"error": UNPAIRED_SURROGATE})
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
    project's without it; ``deleted=1``: the deleted ones instead (each as its death
    certificate, most recently deleted first), which ``POST .../restore`` brings back."""
    book = _gateway().knowledge
    project = _project_filter(request.args.get("project"))
    include_global = request.args.get("global") != "0"
    if request.args.get("deleted") == "1":
        entries = await book.knowledge_store.deleted_knowledge(project, include_global=include_global)
    else:
        entries = await book.entries(project, include_global=include_global)
    metrics = await book.knowledge_store.knowledge_metrics([e.logical_id for e in entries]) if entries else {}
    return _json(200, [entry_json(e, metrics.get(e.logical_id)) for e in entries])


#: What a ``POST /knowledge`` may name as its ``source`` (the versions' ``source_ref``): the
#: API itself, or the MCP server's tool (lore-mcp). A fixed list: provenance must not be
#: able to pose as ``.lore.md``, a distillation or the CLI.
KNOWLEDGE_API_SOURCES = ("api", "mcp")


@api.post("/knowledge")
async def knowledge_add() -> Response:
    """``{"project", "category", "title", "content", "scope"?, "sensitivity"?, "source"?}``;
    ``source`` (one of :data:`KNOWLEDGE_API_SOURCES`, default ``api``) is the provenance."""
    from lore_core.knowledge.book import Provenance

    body = await _json_body()
    if isinstance(body, Response):
        return body
    fields = _fields(body, ("project", "category", "title", "content", "scope", "sensitivity", "source"))
    if isinstance(fields, Response):
        return fields
    missing = [n for n in ("project", "category", "title", "content") if not fields.get(n)]
    if missing:
        return _json(400, {"error": f"missing {', '.join(missing)}"})
    project = _project_arg(fields["project"])
    if isinstance(project, Response):
        return project
    source = fields.get("source", "api")
    if source not in KNOWLEDGE_API_SOURCES:
        return _json(400, {"error": f"source must be one of {', '.join(KNOWLEDGE_API_SOURCES)}"})
    result = await _gateway().knowledge.create(
        project=project,
        category=fields["category"],
        title=fields["title"],
        content=fields["content"],
        scope=fields.get("scope", "project"),
        sensitivity=fields.get("sensitivity", "normal"),
        provenance=Provenance(source_ref=source),
    )
    return _result(result, created=True)


@api.get("/knowledge/file")
async def knowledge_file() -> Response:
    """The export of ``?project=``: ``.lore.md`` text, or with ``format=json`` the JSON list
    ``lore import --format json`` reads (restricted entries never; ``sensitive=1``: sensitive
    entries too); nothing is written (``lore export`` writes it where it is asked to)."""
    from lore_core.knowledge.imports import EXPORT_FORMATS, LORE_MD, export_text

    project = _project_arg(request.args.get("project") or "")
    if isinstance(project, Response):
        return project
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
            "skipped_unapproved": report.skipped_unapproved,
            "team": report.team,
        },
    )


@api.post("/knowledge/import")
async def knowledge_import() -> Response:
    """Import the body into ``?project=`` through one of the import lanes: ``format=`` one of
    ``lore-md`` (a ``.lore.md``, as the file watcher does), ``mem0``, ``json``, ``agents``;
    without it, guessed from ``path=`` (the file's name) and the body. An entry marked
    ``"scope": "global"`` reaches every project: only with ``allowGlobal=true``; without it
    the entry is imported into this project, the report's ``problems`` say so (review F15)."""
    from pathlib import Path

    from lore_core.knowledge.imports import FORMATS, LORE_MD, ImportFormatError, guess_format, import_text
    from lore_core.knowledge.lorefile import FILE_NAME

    project = _project_arg(request.args.get("project") or "")
    if isinstance(project, Response):
        return project
    fmt = request.args.get("format") or None
    if fmt is not None and fmt not in FORMATS:
        return _json(400, {"error": f"format must be one of {', '.join(FORMATS)}"})
    allow_global = request.args.get("allowGlobal", "false").lower()
    if allow_global not in ("true", "1", "false", "0"):
        return _json(400, {"error": "allowGlobal must be true or false"})
    raw = await request.get_data()
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        return _json(400, {"error": f"the body is not UTF-8 text (bad byte at offset {exc.start})"})
    name = request.args.get("path") or ""
    fmt = fmt or guess_format(name, text)
    try:
        report = await import_text(
            _gateway().knowledge,
            project,
            text,
            fmt,
            Path(name or (FILE_NAME if fmt == LORE_MD else fmt)),
            allow_global=allow_global in ("true", "1"),
        )
    except ImportFormatError as exc:
        return _json(400, {"error": str(exc)})
    if report.decisions:
        _gateway().knowledge_upkeep.export_due(project)  # entry writes do so by themselves
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
    project = _project_filter(request.args.get("project"))
    return _json(200, await list_contradictions(_gateway().knowledge, project, statuses))


@api.post("/knowledge/contradictions/scan")
async def knowledge_contradictions_scan() -> Response:
    """Judge ``?project=``'s candidate pairs now (what the idle job does), with the worker."""
    from lore_core.knowledge.contradictions import scan_json
    from lore_core.worker.client import WorkerUnavailable

    project = _project_arg(request.args.get("project") or "")
    if isinstance(project, Response):
        return project
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


# -- teams (lore_core.knowledge.teams) ------------------------------------------------------


@api.get("/team")
async def team_show() -> Response:
    """``?project=``: the team it is bound to and the policy in force."""
    from lore_core.knowledge.teams import team_json

    project = _project_arg(request.args.get("project"))
    if isinstance(project, Response):
        return project
    return _json(200, await team_json(_gateway().store, project))


@api.post("/team")
async def team_change() -> Response:
    """``{"project", "action": "bind", "team", "policy"?}``, ``{"project", "action":
    "unbind"}`` or ``{"project", "action": "policy", "policy", "team_wide"?}``."""
    from lore_core.knowledge.book import KnowledgeInputError
    from lore_core.knowledge.teams import TeamConflict, bind, set_policy, team_json, unbind

    body = await _json_body()
    if isinstance(body, Response):
        return body
    fields = _fields(body, ("project", "action", "team", "policy"))
    if isinstance(fields, Response):
        return fields
    project = _project_arg(fields.get("project"))
    if isinstance(project, Response):
        return project
    team_wide = body.get("team_wide", False)
    if not isinstance(team_wide, bool):
        return _json(400, {"error": "team_wide must be true or false"})
    store, action = _gateway().store, fields.get("action")
    try:
        if action == "bind":
            if not fields.get("team"):
                return _json(400, {"error": "missing team"})
            await bind(store, project, fields["team"], fields.get("policy"))
        elif action == "unbind":
            if await unbind(store, project) is None:
                return _json(409, {"error": "this project is not bound to a team"})
        elif action == "policy":
            if not fields.get("policy"):
                return _json(400, {"error": "missing policy (auto or manual)"})
            await set_policy(store, project, fields["policy"], team_wide=team_wide)
        else:
            return _json(400, {"error": "action must be one of bind, unbind, policy"})
    except KnowledgeInputError as exc:
        return _json(409 if isinstance(exc, TeamConflict) else 400, {"error": str(exc)})
    _gateway().knowledge_upkeep.export_due(project)
    return _json(200, await team_json(store, project))


@api.get("/knowledge/pending")
async def knowledge_pending() -> Response:
    """``?project=``: the entries whose current text waits for a team decision, and the
    rejected ones (409 when the project is not bound to a team)."""
    from lore_core.knowledge.book import KnowledgeInputError
    from lore_core.knowledge.teams import pending_json

    project = _project_arg(request.args.get("project"))
    if isinstance(project, Response):
        return project
    try:
        return _json(200, await pending_json(_gateway().knowledge, project))
    except KnowledgeInputError as exc:
        return _json(409, {"error": str(exc)})


@api.post("/knowledge/decisions")
async def knowledge_decide() -> Response:
    """``{"id": "k:..", "decision": "approved" | "rejected", "by": "<reviewer>"}``: a team
    decision on the entry's current text."""
    from lore_core.knowledge.book import KnowledgeInputError
    from lore_core.knowledge.teams import TeamConflict, decide

    body = await _json_body()
    if isinstance(body, Response):
        return body
    fields = _fields(body, ("id", "decision", "by", "project"))
    if isinstance(fields, Response):
        return fields
    missing = [n for n in ("id", "decision", "by") if not fields.get(n)]
    if missing:
        return _json(400, {"error": f"missing {', '.join(missing)}"})
    try:
        approval = await decide(
            _gateway().knowledge,
            fields["id"],
            fields["decision"],
            fields["by"],
            _project_filter(fields.get("project")),
        )
    except KnowledgeInputError as exc:
        message = str(exc)
        status = 409 if isinstance(exc, TeamConflict) else 400
        return _json(404 if message.startswith("no knowledge entry") else status, {"error": message})
    _gateway().knowledge_upkeep.export_due(approval.entry.project)
    return _json(200, approval.as_json())


@api.get("/knowledge/<path:logical_id>")
async def knowledge_show(logical_id: str) -> Response:
    store = require_tier(_gateway().store, KnowledgeStore)
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


@api.post("/knowledge/<path:logical_id>/adopt")
async def knowledge_adopt(logical_id: str) -> Response:
    """The user approves an entry as it stands (no body): a preference the curator or an
    import wrote becomes one the model is told to follow (security review F9)."""
    from lore_core.knowledge.book import Provenance

    book = _gateway().knowledge
    if await book.get(logical_id) is None:
        return _json(404, {"error": f"no knowledge entry {logical_id!r}"})
    return _result(await book.adopt(logical_id, provenance=Provenance(source_ref="api")))


@api.post("/knowledge/<path:logical_id>/restore")
async def knowledge_restore(logical_id: str) -> Response:
    """A deleted entry back (no body): a new version with its fields before the deletion,
    every version kept. 409 when an alive entry has its title now."""
    from lore_core.knowledge.book import Provenance

    book = _gateway().knowledge
    if await book.get(logical_id) is None:
        return _json(404, {"error": f"no knowledge entry {logical_id!r}"})
    return _result(await book.restore(logical_id, provenance=Provenance(source_ref="api")))


@api.delete("/knowledge/<path:logical_id>")
async def knowledge_delete(logical_id: str) -> Response:
    from lore_core.knowledge.book import Provenance

    book = _gateway().knowledge
    if await book.get(logical_id) is None:
        return _json(404, {"error": f"no knowledge entry {logical_id!r}"})
    return _result(await book.delete(logical_id, provenance=Provenance(source_ref="api")))


# -- entities (lore_core.knowledge.entities) ------------------------------------------------------


@api.get("/entities")
async def entities_list() -> Response:
    """Alive entities: ``?project=`` (with the global ones unless ``global=0``), or every
    project's without it; ``merged=1`` adds the redirects merges left."""
    from lore_core.knowledge.entities import entity_json

    project: str | None = None
    if request.args.get("project"):
        checked = _project_arg(request.args.get("project"))
        if isinstance(checked, Response):
            return checked
        project = checked
    book = _gateway().entities
    found = await book.entities(
        project,
        include_global=request.args.get("global") != "0",
        include_merged=request.args.get("merged") == "1",
    )
    names = {e.id: e.name for e in found}
    return _json(200, [entity_json(e, names) for e in found])


@api.get("/entities/show")
async def entities_show() -> Response:
    """``?ref=`` an ``e:`` id (a merged one opens its survivor) or a name of ``?project=``."""
    from lore_core.knowledge.entities import describe

    ref = request.args.get("ref") or ""
    project = request.args.get("project") or ""
    if not ref.strip():
        return _json(400, {"error": "missing ref: an e:<id> or a name"})
    if project:
        checked = _project_arg(project)
        if isinstance(checked, Response):
            return checked
        project = checked
    found = await describe(_gateway().entities, project, ref)
    if found is None:
        return _json(404, {"error": f"no entity {ref[:200]!r}"})
    return _json(200, found)


@api.post("/entities/<action>")
async def entities_change(action: str) -> Response:
    """One edit by a person, its fields in a JSON object: ``add`` (project or global, name,
    kind, aliases, sensitivity), ``alias`` (ref, alias, remove), ``relate`` (ref, predicate,
    target, remove), ``merge`` (keep, other), ``edit`` (ref, name, kind), ``delete`` (ref:
    the entity, the ids merged into it and every relation to them go); ``project`` also
    says where names are looked up. 400: malformed input (the error names the field); 404: an
    entity it names does not exist; 409: the rules refused it (the reason says why)."""
    from lore_core.knowledge.entities import (
        ACTIONS,
        CREATED,
        REFUSED,
        EntityInputError,
        entity_json,
        run_action,
    )

    if action not in ACTIONS:
        return _json(404, {"error": f"no entity action {action[:40]!r}: one of {', '.join(ACTIONS)}"})
    body = await _json_body()
    if isinstance(body, Response):
        return body
    if isinstance(body.get("project"), str):
        # Stored like every project (review F16); what is not absolute the action refuses.
        body["project"] = project_root(body["project"])
    try:
        result = await run_action(_gateway().entities, action, body)
    except EntityInputError as exc:
        return _json(400, {"error": str(exc)})
    entity = entity_json(result.entity) if result.entity is not None else None
    if result.status == REFUSED:
        return _json(
            404 if result.missing else 409,
            {"status": result.status, "error": result.reason, "entity": entity},
        )
    return _json(201 if result.status == CREATED else 200, {"status": result.status, "entity": entity})


@api.errorhandler(Exception)
async def _store_error(exc: Exception) -> Response:
    if isinstance(exc, TierUnavailable):  # a route that needs a tier the store does not declare
        return _json(503, {"error": str(exc)})
    # A failing store must not turn into an HTML 500: say what failed, as JSON.
    return _json(503, {"error": f"the store failed: {' '.join(str(exc).split())}"})
