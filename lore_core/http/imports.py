"""``/lore/api/import/history``: ``lore import --from <client>`` while a gateway runs.

The gateway holds the store (DuckDB: one process), so the import runs inside it, as a job
beside the proxy: the transcripts are read and converted in a thread
(:mod:`lore_core.storage.history_import`), the records written through the same store, and
the indexer picks them up like any new messages. One job at a time.

- ``POST /lore/api/import/history`` ``{"from": "claude-code", "path"?, "since"?, "project"?}``
  starts one: ``202 {"job": id, "state": "running", "report": {...}}``; ``409`` names the
  job already running; ``400`` for a client, path, date or project it cannot use.
- ``GET /lore/api/import/history/<job>``: its state (``running``, ``done``, ``failed``,
  ``cancelled``), the report so far (as ``lore import --json`` prints it) and any error.
- ``DELETE /lore/api/import/history/<job>``: stops it after the write under way; a later
  import goes on from there (sources are marked done only once their records are stored).

Behind the gateway token like every ``/lore/api`` route (:mod:`lore_core.http.access`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from pathlib import Path
from typing import Any

import attrs
from quart import Blueprint, Response, current_app, request

from lore_core.storage import history_import as history
from lore_core.storage.records import normal_project

log = logging.getLogger("lore.import")

imports_api = Blueprint("lore_history_import", __name__, url_prefix="/lore/api/import/history")

#: How many finished jobs the gateway remembers for a late ``GET``.
KEPT_JOBS = 20


@attrs.define
class ImportJob:
    id: str
    report: history.ImportReport
    task: asyncio.Task[history.ImportReport] | None = None
    state: str = "running"
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"job": self.id, "state": self.state, "report": self.report.as_json(), "error": self.error}


@attrs.define
class ImportJobs:
    """The gateway's history imports, newest last."""

    jobs: dict[str, ImportJob] = attrs.field(factory=dict)

    def running(self) -> ImportJob | None:
        return next((job for job in self.jobs.values() if job.state == "running"), None)

    def add(self, job: ImportJob) -> None:
        self.jobs[job.id] = job
        for old in [j for j in self.jobs.values() if j.state != "running"][:-KEPT_JOBS]:
            del self.jobs[old.id]


async def stop_imports(app: Any) -> None:
    """Stop the import under way (at shutdown, before the store closes)."""
    jobs: ImportJobs | None = app.extensions.get("lore-history-imports")
    job = jobs.running() if jobs is not None else None
    if job is not None and job.task is not None:
        job.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await job.task
        job.state = "cancelled"


def _json(status: int, payload: Any) -> Response:
    return Response(json.dumps(payload, default=str), status=status, content_type="application/json")


def _jobs() -> ImportJobs:
    return current_app.extensions.setdefault("lore-history-imports", ImportJobs())  # type: ignore[no-any-return]


@imports_api.post("")
async def start_import() -> Response:
    gateway = current_app.extensions["lore"]
    try:
        body = json.loads(await request.get_data(as_text=True) or "{}")
    except ValueError:
        return _json(400, {"error": "the body must be JSON"})
    if not isinstance(body, dict) or not isinstance(body.get("from"), str):
        return _json(400, {"error": 'give the client to import from: {"from": "claude-code"}'})
    path, since, project = body.get("path"), body.get("since"), body.get("project")
    if path is not None and not (isinstance(path, str) and Path(path).is_absolute()):
        return _json(400, {"error": "path must be an absolute path"})
    if project is not None and (not isinstance(project, str) or normal_project(project) is None):
        return _json(400, {"error": "project must be the project's absolute directory"})
    try:
        when = history.parse_since(since) if isinstance(since, str) and since else None
        harness = history.harness_for(gateway.registry.harnesses, body["from"])
    except (ValueError, history.HistoryImportError) as exc:
        return _json(400, {"error": str(exc)})
    if gateway.store.journal_dir is None:
        kept = f"the {gateway.store.name} store keeps nothing across a restart"
        return _json(409, {"error": f"{kept}: configure a persistent store (store.backend) to import into"})
    jobs = _jobs()
    busy = jobs.running()
    if busy is not None:
        return _json(409, {"error": "an import is running already", "job": busy.id})
    root = Path(path) if path else None
    where = root if root is not None else harness.history_root()
    if where is None or not where.exists():
        shown = where or f"{harness.display_name}'s history"
        return _json(
            400, {"error": f"{shown} does not exist (is {harness.display_name} used on this machine?)"}
        )
    job = ImportJob(secrets.token_hex(8), history.ImportReport(harness=harness.name, root=str(where)))

    def progress(report: history.ImportReport) -> None:
        job.report = report

    async def run() -> history.ImportReport:
        try:
            report = await history.import_history(
                harness, gateway.registry.codecs, gateway.store, root=root, since=when,
                project=project, progress=progress,
            )  # fmt: skip
        except asyncio.CancelledError:
            job.state = "cancelled"
            raise
        except Exception as exc:  # reported to the client that polls, and logged
            log.exception("history import %s failed", job.id)
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
            raise
        job.report, job.state = report, "done"
        log.info("history import %s: %s", job.id, history.summary(report).replace("\n ", ";"))
        return report

    job.task = asyncio.get_running_loop().create_task(run())
    job.task.add_done_callback(lambda task: task.cancelled() or task.exception())  # retrieved: no warning
    jobs.add(job)
    return _json(202, job.as_json())


@imports_api.get("/<job_id>")
async def import_state(job_id: str) -> Response:
    job = _jobs().jobs.get(job_id)
    if job is None:
        return _json(404, {"error": f"no import {job_id!r}"})
    return _json(200, job.as_json())


@imports_api.delete("/<job_id>")
async def stop_import(job_id: str) -> Response:
    job = _jobs().jobs.get(job_id)
    if job is None:
        return _json(404, {"error": f"no import {job_id!r}"})
    if job.task is not None and job.state == "running":
        job.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await job.task
        job.state = "cancelled"
    return _json(200, job.as_json())
