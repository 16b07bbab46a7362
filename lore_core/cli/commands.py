"""The ``lore`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from lore_core.config import ConfigError
from lore_core.interfaces import DistillationStore, KnowledgeStore, TierUnavailable
from lore_core.plugins import PluginError


def _configure_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request URL at INFO: noise on a proxy, and a URL can carry credentials.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def cmd_serve(args: argparse.Namespace) -> int:
    from lore_core.cli.launcher import forget_serving, gateway_url, record_serving
    from lore_core.cli.lifecycle import startup_lines
    from lore_core.gateway import Gateway, StoreHeld, claim_store
    from lore_core.http.serve import CannotListen, serve_forever, tune_malloc

    _configure_logging(args.verbose)
    tune_malloc()  # before the gateway starts its threads
    gateway = Gateway.load()
    host = args.host or gateway.config.server.host
    port = args.port if args.port is not None else gateway.config.server.port
    try:
        # One gateway per store: a second one would store nothing (lore_core/gateway.py).
        claim = claim_store(gateway.store, gateway_url(host, port))
    except StoreHeld as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 1
    for line in startup_lines(gateway):
        print(line, flush=True)

    def listening(url: str) -> None:
        record_serving(port)  # lore stop finds it by its pid file
        print(f"Lore gateway listening on {url}", flush=True)
        print(f"  Anthropic clients: ANTHROPIC_BASE_URL={url}", flush=True)
        print(f"  OpenAI clients:    OPENAI_BASE_URL={url}/v1", flush=True)

    try:
        serve_forever(gateway, host, port, listening)
    except CannotListen as exc:
        print(f"lore: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    finally:
        forget_serving(port)
        if claim is not None:
            claim.release()
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    """What the plugin manager loaded (with its hooks and what it registered), what
    ``LORE_DISABLE_PLUGINS`` blocked and what failed to import."""
    import attrs

    from lore_core.plugins import Registry, bootstrap, make_plugin_manager

    # A broken .lore.json is when one most needs to see what loaded: the plugins are listed
    # without it (registration reads no configuration), then the error is reported.
    config_error: ConfigError | None = None
    try:
        boot = bootstrap()
        pm, registry = boot.pm, boot.registry
    except ConfigError as exc:
        config_error = exc
        pm = make_plugin_manager()
        registry = Registry.collect(pm)
    registered: dict[str, list[str]] = {}
    for label, plugin in registry.owners.items():
        registered.setdefault(plugin, []).append(label)
    groups: dict[str, list[dict[str, Any]]] = {"loaded": [], "blocked": [], "failed": []}
    for row in pm.report():
        entry = attrs.asdict(row)
        entry["registers"] = registered.get(row.name, [])
        groups[row.status].append(entry)
    if args.json:
        _print_json({**groups, "config_error": str(config_error) if config_error else None})
        return 2 if config_error else 0
    headings = {"loaded": "", "blocked": "blocked by LORE_DISABLE_PLUGINS:", "failed": "failed to load:"}
    for status, group in groups.items():
        if group and headings[status]:
            print(headings[status])
        for entry in group:
            print(f"{entry['name']}  {entry['distribution']} {entry['version']}")
            if status == "loaded":
                print(f"    hooks: {', '.join(entry['hooks']) or 'none'}")
            if entry["registers"]:
                print(f"    registers: {', '.join(entry['registers'])}")
            if entry["error"]:
                print(f"    error: {entry['error']}")
    if config_error is not None:
        print(f"lore: configuration error: {config_error}", file=sys.stderr)
        return 2
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from lore_core.cli.launcher import run_agent

    _configure_logging(args.verbose)
    return run_agent(args.agent, list(args.agent_args))


# ---------------------------------------------------------------------------------------------
# Reading the store: through the running gateway's API, or the file directly
# ---------------------------------------------------------------------------------------------
#
# DuckDB lets one process hold the database file (even read-only opens fail while the gateway
# has it), so when a gateway answers on the configured host/port the commands below ask it
# (GET /lore/api/...); otherwise they open the store themselves. stderr says which.


class _ApiReader:
    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        # The gateway token (lore_core/http/access.py): every /lore/api route needs it.
        self.token = token
        self.where = f"via the running gateway at {url}"

    def _get(
        self, path: str, _method: str = "GET", _timeout: float = 30, _body: bytes | None = None, **params: Any
    ) -> Any:
        import json
        import urllib.error
        import urllib.parse
        import urllib.request

        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.url}/lore/api{path}" + (f"?{query}" if query else "")
        data = _body if _body is not None else (b"" if _method in ("POST", "PATCH") else None)
        req = urllib.request.Request(url, method=_method, data=data)
        if _body is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=_timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", str(exc))
            except ValueError:
                message = str(exc)
            raise _CommandError(message, 1 if exc.code in (400, 404, 409) else 3) from None

    def sessions(self, project: str | None, limit: int) -> list[dict[str, Any]]:
        return self._get("/sessions", project=project, limit=limit)

    def show(self, session: str, all_branches: bool) -> dict[str, Any]:
        from urllib.parse import quote

        return self._get(f"/sessions/{quote(session, safe='')}", branches="all" if all_branches else None)

    def search(
        self, query: str, session: str | None, project: str | None, limit: int
    ) -> list[dict[str, Any]]:
        return self._get("/search", q=query, session=session, project=project, limit=limit)

    def forget(self, session: str) -> dict[str, Any]:
        from urllib.parse import quote

        # Long for a large store: its files are rewritten without the session.
        return self._get(f"/sessions/{quote(session, safe='')}", _method="DELETE", _timeout=3600)

    def status(self) -> dict[str, Any]:
        return self._get("/status")

    def recall(
        self, query: str, scope: str | None, session: str | None, project: str | None, limit: int
    ) -> dict[str, Any]:
        return self._get("/recall", q=query, scope=scope, session=session, project=project, limit=limit)

    def session_ids(self) -> list[str]:
        return [s["id"] for s in self._get("/sessions", limit=10_000)]

    def distill(self, session: str) -> dict[str, Any]:
        from urllib.parse import quote

        # Long: the gateway answers when the session is distilled (worker calls included).
        reports = self._get(f"/distill?session={quote(session, safe='')}", _method="POST", _timeout=3600)
        return reports["reports"][0]

    def distillations(self, session: str | None, archived: bool) -> list[dict[str, Any]]:
        return self._get("/distillations", session=session, archived=None if archived else "0")

    def distillation(self, ident: str) -> dict[str, Any]:
        from urllib.parse import quote

        return self._get(f"/distillations/{quote(ident, safe='')}")

    # -- knowledge (the book's rules apply in the gateway) ---------------------------------

    def knowledge_list(self, project: str | None) -> list[dict[str, Any]]:
        return self._get("/knowledge", project=project)

    def knowledge_show(self, ident: str) -> dict[str, Any]:
        from urllib.parse import quote

        return self._get(f"/knowledge/{quote(ident, safe=':')}")

    def knowledge_write(self, method: str, ident: str | None, fields: dict[str, Any]) -> dict[str, Any]:
        import json
        from urllib.parse import quote

        path = "/knowledge" + (f"/{quote(ident, safe=':')}" if ident else "")
        body = json.dumps(fields).encode() if method != "DELETE" else None
        return self._get(path, _method=method, _body=body)

    def knowledge_file(self, project: str, sensitive: bool, fmt: str = "lore-md") -> dict[str, Any]:
        return self._get("/knowledge/file", project=project, sensitive="1" if sensitive else None, format=fmt)

    def knowledge_restore(self, ident: str) -> dict[str, Any]:
        from urllib.parse import quote

        return self._get(f"/knowledge/{quote(ident, safe=':')}/restore", _method="POST")

    def knowledge_import(
        self, project: str, text: str, path: str, fmt: str = "lore-md", allow_global: bool = False
    ) -> dict[str, Any]:
        from urllib.parse import urlencode

        params = {
            "project": project,
            "path": path,
            "format": fmt,
            "allowGlobal": "true" if allow_global else "false",
        }
        query = "/knowledge/import?" + urlencode(params)
        return self._get(query, _method="POST", _body=text.encode("utf-8"))

    # -- entities (the entity book's rules apply in the gateway) ------------------------------

    def entities(self, project: str | None) -> list[dict[str, Any]]:
        return self._get("/entities", project=project)

    def entity(self, ref: str, project: str) -> dict[str, Any]:
        return self._get("/entities/show", ref=ref, project=project)

    def entity_change(self, action: str, fields: dict[str, Any]) -> dict[str, Any]:
        import json
        from urllib.parse import quote

        return self._get(f"/entities/{quote(action)}", _method="POST", _body=json.dumps(fields).encode())

    def contradictions(self, project: str | None, statuses: list[str] | None) -> list[dict[str, Any]]:
        return self._get(
            "/knowledge/contradictions", project=project, status=",".join(statuses) if statuses else None
        )

    def contradictions_scan(self, project: str) -> dict[str, Any]:
        from urllib.parse import quote

        # Worker calls, one per pair: give them time.
        path = f"/knowledge/contradictions/scan?project={quote(project, safe='')}"
        return self._get(path, _method="POST", _timeout=600)

    def resolve(self, first: str, second: str, keep: str | None) -> dict[str, Any]:
        import json

        body = {"first": first, "second": second, **({"keep": keep} if keep else {"keep_both": True})}
        return self._get("/knowledge/contradictions/resolve", _method="POST", _body=json.dumps(body).encode())

    def team(self, project: str) -> dict[str, Any]:
        return self._get("/team", project=project)

    def team_change(self, project: str, action: str, **fields: Any) -> dict[str, Any]:
        import json

        body = {"project": project, "action": action, **fields}
        return self._get("/team", _method="POST", _body=json.dumps(body).encode())

    def pending(self, project: str) -> dict[str, Any]:
        return self._get("/knowledge/pending", project=project)

    def decide(self, ident: str, decision: str, by: str, project: str) -> dict[str, Any]:
        import json

        body = {"id": ident, "decision": decision, "by": by, "project": project}
        return self._get("/knowledge/decisions", _method="POST", _body=json.dumps(body).encode())

    def close(self) -> None:
        pass


class _DirectReader:
    """Opens the configured store in this process (only when no gateway holds it)."""

    def __init__(self, store: Any, boot: Any) -> None:
        import asyncio

        self.store = store
        # The bootstrap the store was chosen from (lore_core.plugins.bootstrap).
        self.config = boot.config
        self.registry = boot.registry
        self._distiller: Any = None
        self._loop = asyncio.new_event_loop()
        self.where = f"gateway not running: reading the {store.name} store directly" + (
            f" at {store.location}" if store.location else ""
        )
        try:
            self._run(store.open())
        except Exception as exc:
            self._loop.close()
            raise _CommandError(f"cannot open the store: {exc}", 3) from None

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def sessions(self, project: str | None, limit: int) -> list[dict[str, Any]]:
        import attrs

        return [attrs.asdict(s) for s in self._run(self.store.list_sessions(project=project, limit=limit))]

    def show(self, session: str, all_branches: bool) -> dict[str, Any]:
        import attrs

        from lore_core.storage.records import main_branch

        found = self._run(self.store.get_session(session))
        if found is None:
            raise _CommandError(f"no session {session!r}", 1)
        messages = self._run(self.store.session_messages(session))
        if not all_branches:
            messages = main_branch(messages)
        return {
            "session": attrs.asdict(found),
            "state": self._run(self.store.session_state(session)),
            "messages": [attrs.asdict(m) for m in messages],
        }

    def forget(self, session: str) -> dict[str, Any]:
        import time

        from lore_core.storage.amnesia import Amnesia
        from lore_core.storage.forget import forget_stored_session, scrub_journal
        from lore_core.storage.journal import JournalError

        # No gateway holds the store: the journal a dead one left, the mark and the store's
        # forget are all there is (a gateway started later reads the mark and drops what a
        # client resends).
        try:
            journaled = scrub_journal(self.store.journal_dir, session)
        except JournalError as exc:
            raise _CommandError(str(exc), 3) from None
        forgetting = forget_stored_session(self.store, Amnesia(self.store), session, time.time(), journaled)
        report = self._run(forgetting)
        if report is None:
            raise _CommandError(f"no session {session!r}", 1)
        return report.as_json()

    def search(
        self, query: str, session: str | None, project: str | None, limit: int
    ) -> list[dict[str, Any]]:
        hits = self._run(self.store.search(query, session_id=session, project=project, limit=limit))
        return [h.as_json() for h in hits]

    def status(self) -> dict[str, Any]:
        return {"gateway": "not running", "store": self._run(self.store.stats())}

    def recall(
        self, query: str, scope: str | None, session: str | None, project: str | None, limit: int
    ) -> dict[str, Any]:
        from lore_core.recall.store_engine import recall, response_json, store_recall_engine

        engine = store_recall_engine(self.store, embedder=self._embedder())
        return response_json(self._run(recall(engine, query, scope, session, project, limit)))

    def _embedder(self) -> Any:
        """The embedder the gateway would use (its vectors are what the store indexed)."""
        from lore_core.gateway import choose_embedder

        return choose_embedder(self.config, self.registry.embedders)

    def session_ids(self) -> list[str]:
        return [s.id for s in self._run(self.store.list_sessions(limit=10_000))]

    def _scheduler(self) -> Any:
        if self._distiller is None:
            from lore_core.distill.scheduler import DistillScheduler, build_curators
            from lore_core.worker.client import WorkerClient

            config = self.config
            # No session credentials outside a gateway: only a configured worker (worker.*)
            # is usable, else the extractive observer writes the logs.
            self._worker = WorkerClient(config.worker, config.upstream)
            observer, reflector = build_curators(config, self.registry.curators, self._worker)
            self._distiller = DistillScheduler(
                self.store, config.distill, self._worker, observer=observer, reflector=reflector
            )
        return self._distiller

    def distill(self, session: str) -> dict[str, Any]:
        from lore_core.worker.client import WorkerError

        if self._run(self.store.get_session(session)) is None:
            raise _CommandError(f"no session {session!r}", 1)
        try:
            return self._run(self._scheduler().distill_session(session)).as_json()
        except WorkerError as exc:
            raise _CommandError(f"the worker call failed: {exc.reason}", 3) from None

    def distillations(self, session: str | None, archived: bool) -> list[dict[str, Any]]:
        rows = self._run(self._tier(DistillationStore).list_distillations(session, include_archived=archived))
        return [d.as_json() for d in rows]

    def distillation(self, ident: str) -> dict[str, Any]:
        found = self._run(self._tier(DistillationStore).get_distillation(ident))
        if found is None:
            raise _CommandError(f"no distillation {ident!r}", 1)
        return found.as_json()

    def _tier(self, interface: Any) -> Any:
        """The store as one tier's interface; a store without the tier is said, not a traceback."""
        from lore_core.interfaces import tier_of

        found = tier_of(self.store, interface)
        if found is None:
            raise _CommandError(f"the {self.store.name} store has no {interface.tier.label}", 3)
        return found

    # -- knowledge -------------------------------------------------------------------------

    def _book(self) -> Any:
        from lore_core.knowledge.book import KnowledgeBook

        return KnowledgeBook(self.store)

    def knowledge_list(self, project: str | None) -> list[dict[str, Any]]:
        from lore_core.knowledge.book import entry_json

        book = self._book()
        entries = self._run(book.entries(project))
        ids = [e.logical_id for e in entries]
        metrics = self._run(book.knowledge_store.knowledge_metrics(ids)) if entries else {}
        return [entry_json(e, metrics.get(e.logical_id)) for e in entries]

    def knowledge_show(self, ident: str) -> dict[str, Any]:
        from lore_core.knowledge.book import entry_json

        knowledge = self._tier(KnowledgeStore)
        versions = self._run(knowledge.knowledge_versions(ident.removeprefix("k:")))
        if not versions:
            raise _CommandError(f"no knowledge entry {ident!r}", 1)
        metric = self._run(knowledge.knowledge_metrics([versions[-1].logical_id])).get(
            versions[-1].logical_id
        )
        return {"entry": entry_json(versions[-1], metric), "versions": [entry_json(v) for v in versions]}

    def knowledge_write(self, method: str, ident: str | None, fields: dict[str, Any]) -> dict[str, Any]:
        from lore_core.knowledge.book import REFUSED, Provenance, entry_json

        book, provenance = self._book(), Provenance(source_ref="cli")
        if method == "POST":
            result = self._run(book.create(provenance=provenance, **fields))
        elif self._run(book.get(ident or "")) is None:
            raise _CommandError(f"no knowledge entry {ident!r}", 1)
        elif method == "PATCH":
            result = self._run(book.update(ident or "", provenance=provenance, **fields))
        else:
            result = self._run(book.delete(ident or "", provenance=provenance))
        if result.status == REFUSED:
            raise _CommandError(result.reason, 1)
        return {"status": result.status, "entry": entry_json(result.version)}

    def knowledge_restore(self, ident: str) -> dict[str, Any]:
        from lore_core.knowledge.book import REFUSED, Provenance, entry_json

        book = self._book()
        if self._run(book.get(ident)) is None:
            raise _CommandError(f"no knowledge entry {ident!r}", 1)
        result = self._run(book.restore(ident, provenance=Provenance(source_ref="cli")))
        if result.status == REFUSED:
            raise _CommandError(result.reason, 1)
        return {"status": result.status, "entry": entry_json(result.version)}

    def knowledge_file(self, project: str, sensitive: bool, fmt: str = "lore-md") -> dict[str, Any]:
        from lore_core.knowledge.imports import ImportFormatError, export_text

        try:
            text, report = self._run(export_text(self._book(), project, fmt, include_sensitive=sensitive))
        except ImportFormatError as exc:
            raise _CommandError(str(exc), 2) from None
        return {
            "text": text,
            "written": report.written,
            "skipped_sensitive": report.skipped_sensitive,
            "skipped_restricted": report.skipped_restricted,
            "skipped_unapproved": report.skipped_unapproved,
            "team": report.team,
        }

    def knowledge_import(
        self, project: str, text: str, path: str, fmt: str = "lore-md", allow_global: bool = False
    ) -> dict[str, Any]:
        from pathlib import Path

        from lore_core.knowledge.imports import ImportFormatError, import_text

        try:
            imported = import_text(self._book(), project, text, fmt, Path(path), allow_global=allow_global)
            return self._run(imported).as_json()
        except ImportFormatError as exc:
            raise _CommandError(str(exc), 1) from None

    # -- entities ----------------------------------------------------------------------------

    def _entity_book(self) -> Any:
        from lore_core.knowledge.entities import EntityBook

        return EntityBook(self.store)

    def entities(self, project: str | None) -> list[dict[str, Any]]:
        from lore_core.knowledge.entities import entity_json

        found = self._run(self._entity_book().entities(project))
        names = {e.id: e.name for e in found}
        return [entity_json(e, names) for e in found]

    def entity(self, ref: str, project: str) -> dict[str, Any]:
        from lore_core.knowledge.entities import describe

        found = self._run(describe(self._entity_book(), project, ref))
        if found is None:
            raise _CommandError(f"no entity {ref!r}", 1)
        return dict(found)

    def entity_change(self, action: str, fields: dict[str, Any]) -> dict[str, Any]:
        from lore_core.knowledge.entities import REFUSED, EntityInputError, entity_json, run_action

        try:
            result = self._run(run_action(self._entity_book(), action, fields))
        except EntityInputError as exc:
            raise _CommandError(str(exc), 2) from None
        if result.status == REFUSED:
            raise _CommandError(result.reason, 1)
        return {"status": result.status, "entity": entity_json(result.entity) if result.entity else None}

    def contradictions(self, project: str | None, statuses: list[str] | None) -> list[dict[str, Any]]:
        from lore_core.knowledge.contradictions import list_contradictions

        return self._run(list_contradictions(self._book(), project, statuses))

    def contradictions_scan(self, project: str) -> dict[str, Any]:
        raise _CommandError("judging needs the worker: start the gateway (lore serve) and run this again", 1)

    def resolve(self, first: str, second: str, keep: str | None) -> dict[str, Any]:
        from lore_core.knowledge.book import KnowledgeInputError
        from lore_core.knowledge.contradictions import ContradictionFinder, describe

        book = self._book()
        try:
            record = self._run(ContradictionFinder(book, None).resolve(first, second, keep=keep))
        except KnowledgeInputError as exc:
            raise _CommandError(str(exc), 1) from None
        return self._run(describe(book, record))

    # -- teams (no gateway: the .lore.md is written by the next export or gateway start) --

    def team(self, project: str) -> dict[str, Any]:
        from lore_core.knowledge.teams import team_json

        return self._run(team_json(self.store, project))

    def team_change(self, project: str, action: str, **fields: Any) -> dict[str, Any]:
        from lore_core.knowledge.book import KnowledgeInputError
        from lore_core.knowledge.teams import bind, set_policy, team_json, unbind

        try:
            if action == "bind":
                self._run(bind(self.store, project, fields["team"], fields.get("policy")))
            elif action == "unbind":
                if self._run(unbind(self.store, project)) is None:
                    raise _CommandError("this project is not bound to a team", 1)
            else:
                team_wide = fields.get("team_wide", False)
                self._run(set_policy(self.store, project, fields["policy"], team_wide=team_wide))
        except KnowledgeInputError as exc:
            raise _CommandError(str(exc), 1) from None
        return self._run(team_json(self.store, project))

    def pending(self, project: str) -> dict[str, Any]:
        from lore_core.knowledge.book import KnowledgeInputError
        from lore_core.knowledge.teams import pending_json

        try:
            return self._run(pending_json(self._book(), project))
        except KnowledgeInputError as exc:
            raise _CommandError(str(exc), 1) from None

    def decide(self, ident: str, decision: str, by: str, project: str) -> dict[str, Any]:
        from lore_core.knowledge.book import KnowledgeInputError
        from lore_core.knowledge.teams import decide

        try:
            return self._run(decide(self._book(), ident, decision, by, project)).as_json()
        except KnowledgeInputError as exc:
            raise _CommandError(str(exc), 1) from None

    def close(self) -> None:
        try:
            if self._distiller is not None:
                self._run(self._worker.close())
            self._run(self.store.close())
        finally:
            self._loop.close()


class _CommandError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def unique_prefix(value: str, candidates: Sequence[str], what: str) -> str:
    """The candidate ``value`` names: itself when it is one, else the only candidate it
    begins; ``value`` unchanged when none does (the command's own "not found" then says
    so). Two or more: an error listing them."""
    if value in candidates:
        return value
    found = [c for c in candidates if c.startswith(value)]
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise _CommandError(f"{value!r} begins more than one {what}: {shown}; give more of the id", 2)
    return found[0] if found else value


def _session_ref(reader: Any, value: str) -> str:
    return unique_prefix(value, reader.session_ids(), "session")


def _distillation_ref(reader: Any, value: str) -> str:
    ids = [f"d:{d['id']}" for d in reader.distillations(None, True)]
    return unique_prefix(value, ids, "distillation")


def _knowledge_ref(reader: Any, value: str) -> str:
    """A knowledge id, with or without its ``k:``."""
    ids = [e["id"] for e in reader.knowledge_list(None)]
    return unique_prefix(value if value.startswith("k:") else f"k:{value}", ids, "knowledge entry")


def _entity_ref(reader: Any, value: str) -> str:
    """An ``e:`` id prefix to the whole id; a name or an alias as given."""
    if not value.startswith("e:"):
        return value
    return unique_prefix(value, [e["id"] for e in reader.entities(None)], "entity")


def _gateway_url(host: str, port: int) -> str | None:
    """The URL of a Lore gateway answering on host:port, or None."""
    import json
    import urllib.request

    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    try:
        with urllib.request.urlopen(url + "/health", timeout=1.0) as resp:
            health = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    return url if isinstance(health, dict) and "store" in health else None


def _open_reader() -> _ApiReader | _DirectReader:
    from lore_core.config import load_config
    from lore_core.http.token import cli_token

    # A running gateway answers for its store: asking it needs the core configuration
    # only (where it listens, its token), not the plugins, which take most of a second
    # to load.
    config = load_config(core_only=True)
    url = _gateway_url(config.server.host, config.server.port)
    if url is not None:
        return _ApiReader(url, cli_token(config))

    from lore_core.plugins import bootstrap
    from lore_core.storage.writer import choose_store

    # The same plugins and configuration the gateway would load, without starting one.
    boot = bootstrap()
    return _DirectReader(choose_store(boot.config, boot.registry.stores), boot)


def _with_reader(args: argparse.Namespace, action: Any) -> int:
    try:
        reader = _open_reader()
    except _CommandError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return exc.code
    print(f"lore: {reader.where}", file=sys.stderr)
    try:
        return action(reader)
    except _CommandError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return exc.code
    except TierUnavailable as exc:  # read directly from a store without the tier a command needs
        print(f"lore: {exc}", file=sys.stderr)
        return 3
    finally:
        reader.close()


def _when(ts: float | None) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _print_json(payload: Any) -> None:
    import json

    print(json.dumps(payload, indent=2, ensure_ascii=False, default=str))


#: What ``--limit 0`` asks for: everything, as far as the local API answers at once.
LIMIT_ALL = 10_000
LIMIT_HELP = "at most this many (0: all)"


def limit_arg(value: str) -> int:
    """``--limit``: 0 means all; a negative or non-number value is refused (it used to show
    one row without a word)."""
    try:
        limit = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if limit < 0:
        raise argparse.ArgumentTypeError(f"{limit}: give 0 (all) or a positive number")
    return limit or LIMIT_ALL


def cmd_sessions(args: argparse.Namespace) -> int:
    def action(reader: Any) -> int:
        project = None if args.all else _project_filter(args)
        rows = reader.sessions(project, args.limit)
        if args.json:
            _print_json(rows)
            return 0
        if not rows:
            print("no sessions stored" + (f" for project {project}" if project else ""))
            return 0
        for s in rows:
            branches = f", {s['branch_count']} branches" if s["branch_count"] > 1 else ""
            print(
                f"{_when(s['updated_at'])}  {s['id']}  {s['harness'] or '-'}  "
                f"{s['message_count']} messages{branches}  {s['model'] or '-'}"
            )
            print(f"    {s['project'] or '-'}  {s['title']}")
        return 0

    return _with_reader(args, action)


#: Lines of a tool's output ``lore show`` prints before "... N more lines" (``--full``: all).
SHOWN_OUTPUT_LINES = 12
#: Characters of a tool call's arguments shown on its line.
SHOWN_CALL_CHARS = 160
# The argument that says what a call does, in the order they are looked for.
_CALL_SUBJECT_KEYS = ("command", "cmd", "file_path", "path", "pattern", "query", "url", "description")


def _call_summary(tool_input: Any) -> str:
    """One line for a tool call's arguments: the one that says what it does (the command,
    the path, the pattern), else the arguments as JSON, shortened."""
    import json

    if isinstance(tool_input, dict):
        for key in _CALL_SUBJECT_KEYS:
            value = tool_input.get(key)
            if isinstance(value, str) and value.strip():
                return _clip(" ".join(value.split()), SHOWN_CALL_CHARS)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return _clip(" ".join(value), SHOWN_CALL_CHARS)
    return _clip(json.dumps(tool_input, ensure_ascii=False), SHOWN_CALL_CHARS)


def _render_message(m: dict[str, Any], full: bool = False, names: dict[str, str] | None = None) -> list[str]:
    """One message as a transcript: a rule naming who spoke and when, the text, tool calls
    on one line each, tool output indented and (unless ``full``) shortened. ``names``: the
    tool of each call id seen so far in the session (an output follows its call's message)."""
    facts = [m["role"]]
    if m.get("model") and m["role"] == "assistant":
        facts.append(m["model"])
    facts.append(_when(m.get("created_at")))
    usage = m.get("usage") or {}
    if usage:
        facts.append(f"in {usage.get('input_tokens', 0)} / out {usage.get('output_tokens', 0)} tokens")
    if not m.get("complete", True):
        facts.append("INCOMPLETE")
    lines = [f"--- [{m['position']}] {' · '.join(facts)}  ({m['id']})"]
    names = {} if names is None else names
    for b in m.get("blocks") or []:
        kind = b.get("type")
        if kind == "tool_call":
            names[b.get("tool_call_id") or ""] = b.get("tool_name") or "tool"
            lines.append(f"  -> {b.get('tool_name')}: {_call_summary(b.get('tool_input'))}")
        elif kind == "tool_result":
            flag = " (error)" if b.get("is_error") else ""
            name = names.get(b.get("tool_call_id") or "", "tool")
            output = (b.get("text") or "").splitlines()
            shown = output if full else output[:SHOWN_OUTPUT_LINES]
            lines.append(f"  <- {name} output{flag}" + (":" if output else ": (empty)"))
            lines.extend("     " + line for line in shown)
            if len(output) > len(shown):
                lines.append(f"     ... {len(output) - len(shown)} more lines (--full shows them)")
        elif b.get("text"):
            if kind == "thinking":
                lines.append("  (thinking)")
                lines.extend("  " + line for line in b["text"].splitlines())
            elif m["role"] in ("system", "developer") and not full:
                # The client's instructions: long and the same in every session.
                text = b["text"].splitlines()
                lines.extend(text[:SHOWN_OUTPUT_LINES])
                if len(text) > SHOWN_OUTPUT_LINES:
                    lines.append(f"  ... {len(text) - SHOWN_OUTPUT_LINES} more lines (--full shows them)")
            else:
                lines.extend(b["text"].splitlines())
        else:
            lines.append(f"  [{b.get('wire_type') or kind}]")
    if m.get("error"):
        lines.append(f"  error: {m['error']}")
    return lines


def _print_distillation(d: dict[str, Any]) -> None:
    kind = "meta-distillation (gen 1)" if d["generation"] else "observation log (gen 0)"
    flags = ", ARCHIVED" if d["archived"] else ""
    print(f"{d['ref']}  {kind}{flags}  session {d['session_id']}")
    worker = f"{d['worker_provider']}/{d['worker_model']}" if d.get("worker_model") else "-"
    print(
        f"{d['method']}, worker {worker}; {_when(d['start'])} .. {_when(d['end'])}; "
        f"created {_when(d['created_at'])}"
    )
    print(
        f"tokens: source {d['source_tokens']}, input {d['input_tokens']}, output {d['output_tokens']} "
        f"(compression {d['compression_ratio']}x); {len(d['source_ids'])} sources"
    )
    print()
    print(d["text"])


def cmd_show(args: argparse.Namespace) -> int:
    def action(reader: Any) -> int:
        if args.session is None:
            latest = reader.sessions(None, 1)
            if not latest:
                print("no sessions stored")
                return 0
            args.session = latest[0]["id"]
        elif args.session.startswith("d:"):
            args.session = _distillation_ref(reader, args.session)
        else:
            args.session = _session_ref(reader, args.session)
        if args.session.startswith("d:"):
            found = reader.distillation(args.session)
            if args.json:
                _print_json(found)
            else:
                _print_distillation(found)
            return 0
        data = reader.show(args.session, args.all_branches)
        if args.json:
            _print_json(data)
            return 0
        s = data["session"]
        print(f"session {s['id']}  ({s['harness'] or '-'}, {s['model'] or '-'})")
        print(f"project {s['project'] or '-'}")
        print(
            f"{s['message_count']} messages stored, {s['branch_count']} branch(es); "
            f"{_when(s['created_at'])} .. {_when(s['updated_at'])}"
        )
        if data.get("state"):
            # Names only: the values (spend, owner, amnesia ranges) are for --json.
            print(f"state: {', '.join(sorted(data['state']))} (--json shows them)")
        if s["branch_count"] > 1 and not args.all_branches:
            print("(showing the current branch; --all-branches shows every stored message)")
        print()
        names: dict[str, str] = {}
        for m in data["messages"]:
            print("\n".join(_render_message(m, args.full, names)))
            print()
        return 0

    return _with_reader(args, action)


def _confirmed(question: str) -> bool:
    """Ask on stderr (stdout stays the command's output), answer on stdin: yes or not."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def cmd_forget(args: argparse.Namespace) -> int:
    def action(reader: Any) -> int:
        args.session = _session_ref(reader, args.session)
        if not args.yes:
            session = reader.show(args.session, True)["session"]  # a 404 says there is none
            what = (
                f"session {session['id']} ({session['message_count']} messages, "
                f"project {session['project'] or '-'})"
            )
            if not sys.stdin.isatty():
                raise _CommandError(f"this removes {what} for good; run it again with --yes", 2)
            question = (
                f"Forget {what}? Its messages, distillations and index entries are removed for good, "
                "and a client resending its history does not store it again."
            )
            if not _confirmed(question):
                print("lore: nothing was forgotten", file=sys.stderr)
                return 1
        report = reader.forget(args.session)
        if args.json:
            _print_json(report)
            return 0
        print(
            f"forgot session {report['session_id']}: {report['messages']} messages, "
            f"{report['distillations']} distillations, {report['passages']} index passages, "
            f"{report['vectors']} vectors ({report['seconds']:.2f} s)"
        )
        if report["bytes_before"]:
            print(
                f"the store's files were rewritten without them: {_mib(report['bytes_before'])} -> "
                f"{_mib(report['bytes_after'])}"
            )
        print("a client resending this session's history does not store it again; its new turns are stored")
        if report["knowledge"]:
            print(
                f"kept: {len(report['knowledge'])} knowledge entries curated from it "
                f"({', '.join(report['knowledge'])}); `lore knowledge delete <id>` removes one"
            )
        return 0

    return _with_reader(args, action)


def cmd_search(args: argparse.Namespace) -> int:
    def action(reader: Any) -> int:
        if args.session:
            args.session = _session_ref(reader, args.session)
        project = _search_project(args)
        hits = reader.search(args.query, args.session, project, args.limit)
        if args.json:
            _print_json(
                [
                    {k: h.get(k) for k in ("id", "passage", "session", "role", "score", "text", "project")}
                    for h in hits
                ]
            )
            return 0
        if not hits:
            print("no matches" + _where_searched(project))
            return 0
        for h in hits:
            snippet = " ".join(h["text"].split())
            snippet = snippet[:200] + ("..." if len(snippet) > 200 else "")
            print(f"{h['score']:7.3f}  {h['session']}  [{h['role']}]  {h['id']}")
            print(f"         {snippet}")
        return 0

    return _with_reader(args, action)


#: What ``lore recall`` prints of a passage (the rest: open it by its id).
RECALL_CHARS = 600
RECALL_LINES = 24


def _clip(line: str, limit: int) -> str:
    line = line.rstrip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


def cmd_recall(args: argparse.Namespace) -> int:
    from lore_core.recall.tool import CLOSEST_RESULTS, nothing_relevant, snippet

    def action(reader: Any) -> int:
        if args.session:
            args.session = _session_ref(reader, args.session)
        project = None if args.scope == "all" else _search_project(args)
        answer = reader.recall(args.query, args.scope, args.session, project, args.limit)
        results = answer.get("results") or []
        matched = bool(answer.get("matched", True))
        if args.json:
            fields = (
                "id", "source", "relevance", "score", "created_at", "session", "role",
                "tool", "tool_source", "span", "text",
            )  # fmt: skip
            _print_json([{k: r.get(k) for k in fields} for r in results])
        else:
            if results and not matched:
                print(nothing_relevant(args.query, answer.get("scope") or args.scope or "project"))
                results = results[:CLOSEST_RESULTS]
            for r in results:
                relevance = float(r.get("relevance") or 0.0)
                print(f"{relevance:5.2f}  {r['id']}  [{r['source']}]  {_when(r.get('created_at'))}")
                head, _, body = str(r.get("text", "")).partition("\n")
                # The passage's header, then its lines where the query matched.
                shown = snippet(body, args.query, RECALL_CHARS).splitlines()
                for line in [head, *shown[:RECALL_LINES]]:
                    print(f"    {_clip(line, 150)}")
            if not results and not answer.get("error"):
                print("no matches" + _where_searched(project))
        for note in answer.get("notes") or []:
            print(f"note: {note}", file=sys.stderr)
        if answer.get("error"):
            print(f"lore: {answer['error']}", file=sys.stderr)
            return 1
        return 0

    return _with_reader(args, action)


def _project(args: argparse.Namespace) -> str:
    """``--project``, else the current directory: the project a harness started here has
    (its repository root, :func:`lore_core.projects.cli_project`)."""
    from lore_core.projects import cli_project

    return cli_project(args.project)


def _project_filter(args: argparse.Namespace) -> str | None:
    """An optional ``--project`` (``.``, a subdirectory, a trailing slash: its repository
    root), or ``None`` for every project."""
    return _project(args) if args.project else None


def _search_project(args: argparse.Namespace) -> str | None:
    """What ``lore search`` and ``lore recall`` search, as the knowledge and entity commands
    do: the current project (or --project), every project with --all; a session names its
    own."""
    return None if args.all or args.session else _project(args)


def _where_searched(project: str | None) -> str:
    return f" in project {project} (--all searches every project)" if project else ""


def _entry_line(e: dict[str, Any]) -> str:
    flags = "".join(
        f" [{flag}]"
        for flag, on in (("global", e["scope"] == "global"), (e["sensitivity"], e["sensitivity"] != "normal"))
        if on
    )
    confidence = f"  {e['confidence']:.2f}" if "confidence" in e else ""
    return f"{e['id']}  {e['category']:<12} {e['title']}{flags}{confidence}"


def _contradiction_lines(row: dict[str, Any]) -> list[str]:
    first, second = row["first"], row["second"]
    kept = f", kept {row['kept']}" if row.get("kept") else ""
    why = row["reason"] or "(no reason given)"
    return [
        f"{row['status']:<9} {first['id']} {first.get('title', '?')!r}  <->  {second['id']} "
        f"{second.get('title', '?')!r}",
        f"          {why} ({row['judged_by']}, {_when(row['judged_at'])}{kept})",
    ]


def cmd_knowledge(args: argparse.Namespace) -> int:
    def action(reader: Any) -> int:
        for name in ("id", "first", "second", "keep"):  # unique prefixes, with or without k:
            if getattr(args, name, None):
                setattr(args, name, _knowledge_ref(reader, getattr(args, name)))
        if args.knowledge_command == "pending":
            found = reader.pending(_project(args))
            if args.json:
                _print_json(found)
                return 0
            team = found["team"]
            print(f"team {team['team']}, policy {team['policy']} ({team['policy_from']})")
            if not found["pending"] and not found["rejected"]:
                print("nothing waits for a decision")
            for row in found["pending"]:
                print(_approval_line(row))
            for row in found["rejected"]:
                print(_approval_line(row))
            return 0
        if args.knowledge_command in ("approve", "reject"):
            decision = "approved" if args.knowledge_command == "approve" else "rejected"
            found = reader.decide(args.id, decision, args.by or _reviewer(), _project(args))
            if args.json:
                _print_json(found)
                return 0
            print(_approval_line(found))
            return 0
        if args.knowledge_command == "contradictions":
            if args.scan:
                report = reader.contradictions_scan(_project(args))
                if not args.json:
                    print(
                        f"judged {report['judged']} of {report['candidates']} pairs: "
                        f"{len(report['opened'])} open, {len(report['cleared'])} cleared"
                        + (f" (stopped: {report['stopped']})" if report.get("stopped") else "")
                    )
            rows = reader.contradictions(None if args.all else _project(args), args.status)
            if args.json:
                _print_json(rows)
                return 0
            if not rows:
                print("no contradictions judged yet" if not args.status else "none")
            for row in rows:
                print("\n".join(_contradiction_lines(row)))
            return 0
        if args.knowledge_command == "resolve":
            found = reader.resolve(args.first, args.second, None if args.keep_both else args.keep)
            if args.json:
                _print_json(found)
                return 0
            print("\n".join(_contradiction_lines(found)))
            return 0
        if args.knowledge_command == "list":
            rows = reader.knowledge_list(None if args.all else _project(args))
            if args.json:
                _print_json(rows)
            elif not rows:
                print("no knowledge yet")
            for row in [] if args.json else rows:
                print(_entry_line(row))
            return 0
        if args.knowledge_command == "show":
            found = reader.knowledge_show(args.id)
            if args.json:
                _print_json(found)
                return 0
            entry = found["entry"]
            print(_entry_line(entry))
            print(entry["content"] if not entry["is_deleted"] else "(deleted)")
            for v in found["versions"]:
                what = "deleted" if v["is_deleted"] else f"v{v['version']}"
                source = ", ".join(
                    str(x) for x in (v["source_session"], v["source_ref"], v["worker_model"]) if x
                )
                print(
                    f"  {what:<8} {_when(v['created_at'])}  by {v['updated_by']}"
                    + (f" ({source})" if source else "")
                )
            return 0
        if args.knowledge_command == "restore":
            result = reader.knowledge_restore(args.id)
            if args.json:
                _print_json(result)
            else:
                print(f"{result['status']}: {_entry_line(result['entry'])}")
            return 0
        if args.knowledge_command == "delete":
            result = reader.knowledge_write("DELETE", args.id, {})
            if args.json:
                _print_json(result)
                return 0
            print(f"{result['status']}: {result['entry']['id']} {result['entry']['title']}")
            return 0
        fields = {
            key: value
            for key in ("category", "title", "content", "scope", "sensitivity")
            if (value := getattr(args, key, None)) is not None
        }
        if args.knowledge_command == "add":
            if fields.get("content") in (None, "-"):
                fields["content"] = sys.stdin.read()
            result = reader.knowledge_write("POST", None, {"project": _project(args), **fields})
        else:
            if not fields:
                raise _CommandError(
                    "nothing to change: give --category, --title, --content, --scope or --sensitivity", 2
                )
            result = reader.knowledge_write("PATCH", args.id, fields)
        if args.json:
            _print_json(result)
            return 0
        print(f"{result['status']}: {_entry_line(result['entry'])}")
        return 0

    return _with_reader(args, action)


def _reviewer() -> str:
    """Who decides when ``--by`` is not given: ``LORE_REVIEWER``, else the login name."""
    import getpass
    import os

    return os.environ.get("LORE_REVIEWER") or getpass.getuser()


def _approval_line(row: dict[str, Any]) -> str:
    decision = row["decision"]
    by = f" by {decision['decided_by']} {_when(decision['decided_at'])}" if decision else ""
    note = " (the team sees the approved earlier text)" if row["changed_since_approval"] else ""
    return f"{row['id']}  {row['state']:<8}  [{row['category']}] {row['title']}{by}{note}"


def cmd_team(args: argparse.Namespace) -> int:
    def action(reader: Any) -> int:
        project = _project(args)
        command = args.team_command or "show"
        shared_before = None if command == "show" else reader.knowledge_file(project, False)["written"]
        if command == "show":
            found = reader.team(project)
        elif command == "bind":
            found = reader.team_change(project, "bind", team=args.team, policy=args.policy)
        elif command == "unbind":
            found = reader.team_change(project, "unbind")
        else:
            found = reader.team_change(project, "policy", policy=args.policy, team_wide=args.team_wide)
        if shared_before is not None:
            # What the repository's .lore.md shares follows the team and policy: say when it
            # changes (binding with the manual policy shares nothing until approved).
            shared_after = reader.knowledge_file(project, False)["written"]
            found = {**found, "shared_before": shared_before, "shared_after": shared_after}
            if shared_after != shared_before and not args.json:
                hint = " (approve entries: lore knowledge pending)" if shared_after < shared_before else ""
                # Said before the gateway's next export rewrites the file (on idle).
                print(
                    f"lore: note: .lore.md will share {_plural(shared_after, 'entry', 'entries')} of "
                    f"this project from its next export ({shared_before} until now){hint}",
                    file=sys.stderr,
                )
        if args.json:
            _print_json(found)
        elif found["bound"]:
            print(f"{project}: team {found['team']}, policy {found['policy']} ({found['policy_from']})")
        else:
            print(f"{project}: not bound to a team")
        return 0

    return _with_reader(args, action)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _entity_line(e: dict[str, Any]) -> str:
    aliases = f"  aka {', '.join(e['aliases'])}" if e["aliases"] else ""
    where = "  [global]" if not e["project"] else ""
    flag = f"  [{e['sensitivity']}]" if e["sensitivity"] != "normal" else ""
    return f"{e['id']}  {e['kind']:<10} {e['name']}{aliases}{where}{flag}"


def cmd_entity(args: argparse.Namespace) -> int:
    def action(reader: Any) -> int:
        command = args.entity_command
        for name in ("ref", "target", "keep", "other"):  # e: id prefixes
            if getattr(args, name, None):
                setattr(args, name, _entity_ref(reader, getattr(args, name)))
        if command == "list":
            rows = reader.entities(None if args.all else _project(args))
            if args.json:
                _print_json(rows)
            elif not rows:
                print("no entities yet")
            for row in [] if args.json else rows:
                print(_entity_line(row))
            return 0
        if command == "show":
            found = reader.entity(args.ref, _project(args))
            if args.json:
                _print_json(found)
                return 0
            entity = found["entity"]
            print(_entity_line(entity))
            for r in entity["relations"]:
                print(f"  {r['predicate']} {r['target']} {r.get('target_name', '')}".rstrip())
            for r in found["related"]:
                print(f"  {r['source']} {r['source_name']} {r['predicate']} this")
            if found["merged"]:
                print(f"  merged into it: {', '.join(found['merged'])}")
            print(f"  created {_when(entity['created_at'])} by {entity['created_by']}, "
                  f"updated {_when(entity['updated_at'])} by {entity['updated_by']}")  # fmt: skip
            return 0
        project = {"project": _project(args)}
        if command == "add":
            fields: dict[str, Any] = {"name": args.name, "kind": args.kind, "aliases": args.alias or []}
            if args.sensitivity:
                fields["sensitivity"] = args.sensitivity
            fields |= {"global": True} if args.is_global or args.scope == "global" else project
            result = reader.entity_change("add", fields)
        elif command == "alias":
            fields = {"ref": args.ref, "alias": args.alias, "remove": args.remove}
            result = reader.entity_change("alias", fields | project)
        elif command == "relate":
            fields = {
                "ref": args.ref,
                "predicate": args.predicate,
                "target": args.target,
                "remove": args.remove,
            }
            result = reader.entity_change("relate", fields | project)
        elif command == "rename":
            result = reader.entity_change("edit", {"ref": args.ref, "name": args.name} | project)
        elif command == "delete":
            result = reader.entity_change("delete", {"ref": args.ref} | project)
            if args.json:
                _print_json(result)
                return 0
        else:
            result = reader.entity_change("merge", {"keep": args.keep, "other": args.other} | project)
        if args.json:
            _print_json(result)
            return 0
        print(f"{result['status']}: {_entity_line(result['entity'])}")
        return 0

    return _with_reader(args, action)


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    def action(reader: Any) -> int:
        project = _project(args)
        found = reader.knowledge_file(project, args.include_sensitive, args.format)
        # JSON goes to stdout unless --output says where: its place is not the repository.
        if args.output == "-" or (args.output is None and args.format != "lore-md"):
            sys.stdout.write(found["text"])
            return 0
        from lore_core.knowledge.lorefile import FILE_NAME, write_if_changed

        path = Path(args.output) if args.output else Path(project) / FILE_NAME
        changed = write_if_changed(path, found["text"].encode("utf-8"))
        skipped = found.get("skipped_sensitive", 0)
        note = f"; {skipped} sensitive left out (--include-sensitive)" if skipped else ""
        if found.get("skipped_restricted"):
            note += f"; {found['skipped_restricted']} restricted never exported"
        if found.get("skipped_unapproved"):
            unapproved = found["skipped_unapproved"]
            note += f"; {unapproved} not let through by team {found['team']} (lore knowledge pending)"
        if args.json:
            report = {k: v for k, v in found.items() if k != "text"}
            _print_json({"path": str(path), "changed": changed, **report})
            return 0
        print(f"{path}: {found['written']} entries{'' if changed else ', unchanged'}{note}")
        return 0

    return _with_reader(args, action)


def cmd_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.history_from is not None or args.path or args.since or args.dry_run:
        return cmd_import_history(args)

    from lore_core.knowledge.imports import guess_format
    from lore_core.knowledge.lorefile import FILE_NAME

    project = _project(args)
    path = Path(args.file) if args.file else Path(project) / FILE_NAME
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        print(f"lore: no {path} to import", file=sys.stderr)
        return 1
    except (OSError, UnicodeDecodeError) as exc:
        print(f"lore: cannot read {path}: {exc}", file=sys.stderr)
        return 1

    fmt = args.format or guess_format(path.name, text)

    def action(reader: Any) -> int:
        report = reader.knowledge_import(project, text, str(path), fmt, allow_global=args.allow_global)
        if args.json:
            _print_json(report)
        else:
            print(
                f"{path} ({fmt}): {len(report['created'])} created, {len(report['updated'])} updated, "
                f"{report['unchanged']} unchanged, {len(report['refused'])} refused"
            )
            for refusal in report["refused"]:
                print(f"  refused {refusal['title']!r}: {refusal['reason']}")
            for problem in report["problems"]:
                print(f"  {problem}")
        return 1 if report["refused"] else 0

    return _with_reader(args, action)


def cmd_import_history(args: argparse.Namespace) -> int:
    """``lore import --from <client>``: the client's own transcripts into the store
    (:mod:`lore_core.storage.history_import`): written directly, or, while a gateway runs
    and holds the store (DuckDB: one process), by that gateway
    (:mod:`lore_core.http.imports`)."""
    import asyncio
    from pathlib import Path

    from lore_core.plugins import bootstrap
    from lore_core.storage import history_import as history
    from lore_core.storage.records import StoreUnavailable
    from lore_core.storage.writer import choose_store

    if args.history_from is None:
        print("lore: --path, --since and --dry-run go with --from <client>", file=sys.stderr)
        return 2
    if args.file or args.format or args.allow_global:
        print("lore: --from imports a client's history: no file, --format or --global", file=sys.stderr)
        return 2
    try:
        since = history.parse_since(args.since) if args.since else None
        boot = bootstrap()
        harness = history.harness_for(boot.registry.harnesses, args.history_from)
    except (ValueError, history.HistoryImportError) as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 2
    root = Path(args.path).expanduser() if args.path else None
    project = _project_filter(args)
    store = None
    if not args.dry_run:
        url = _gateway_url(boot.config.server.host, boot.config.server.port)
        if url is not None:
            # The gateway holds the store: it runs the import (POST /lore/api/import/history).
            from lore_core.http.token import cli_token

            reader = _ApiReader(url, cli_token(boot.config))
            # Where this command's environment says the client keeps its history.
            where = root if root is not None else harness.history_root()
            request = {"from": args.history_from, "since": args.since, "project": project,
                       "path": str(where.resolve()) if where is not None else None}  # fmt: skip
            return _import_through_gateway(reader, request, args.json)
        store = choose_store(boot.config, boot.registry.stores)
        if store.journal_dir is None:
            print(
                f"lore: the {store.name} store keeps nothing once this command ends: configure a persistent "
                "store (store.backend) to import into",
                file=sys.stderr,
            )
            return 3
    bar = history.ProgressBar()

    async def run() -> history.ImportReport:
        if store is not None:
            await store.open()
        try:
            return await history.import_history(
                harness, boot.registry.codecs, store, root=root, since=since, project=project, progress=bar
            )
        finally:
            if store is not None:
                await store.close()

    try:
        report = asyncio.run(run())
    except history.HistoryImportError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 1
    except StoreUnavailable as exc:
        print(f"lore: cannot open the store: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("\nlore: import stopped; run it again to go on from where it stopped", file=sys.stderr)
        return 130
    bar.finish(report)
    if args.json:
        _print_json(report.as_json())
    else:
        print(history.summary(report))
        for failure in report.failed[:10]:
            print(f"  could not read {failure}")
    return 1 if report.failed else 0


#: How often ``lore import`` asks a gateway how far its import is.
IMPORT_POLL_SECONDS = 0.25


def _import_through_gateway(reader: _ApiReader, request: dict[str, Any], as_json: bool) -> int:
    """Run the import in the running gateway and follow it with the progress bar; Ctrl-C
    stops it there (after the write under way: the next import goes on from where it was)."""
    import json
    import time

    from lore_core.storage import history_import as history

    print(f"lore: {reader.where}: the gateway imports, indexes and distils", file=sys.stderr)
    body = {k: v for k, v in request.items() if v is not None}
    try:
        job = reader._get("/import/history", _method="POST", _body=json.dumps(body).encode())
    except _CommandError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 2 if exc.code == 1 else exc.code
    bar = history.ProgressBar()
    try:
        while job["state"] == "running":
            bar(history.ImportReport.from_json(job["report"], finished=False))
            time.sleep(IMPORT_POLL_SECONDS)
            job = reader._get(f"/import/history/{job['job']}")
    except KeyboardInterrupt:
        reader._get(f"/import/history/{job['job']}", _method="DELETE")
        print("\nlore: import stopped; run it again to go on from where it stopped", file=sys.stderr)
        return 130
    except _CommandError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return exc.code
    report = history.ImportReport.from_json(job["report"], finished=True)
    bar.finish(report)
    if job["state"] != "done":
        print(
            f"lore: the import {job['state']}: {job.get('error') or 'the gateway stopped it'}",
            file=sys.stderr,
        )
        return 1
    if as_json:
        _print_json(report.as_json())
    else:
        print(history.summary(report))
        for failure in report.failed[:10]:
            print(f"  could not read {failure}")
    return 1 if report.failed else 0


def cmd_status(args: argparse.Namespace) -> int:
    def action(reader: Any) -> int:
        data = reader.status()
        if args.json:
            _print_json(data)
            return 0
        store = data.get("store") or {}
        if isinstance(reader, _ApiReader):
            health = data["health"]
            print(f"gateway: running at {reader.url} ({health['status']}, up {health['uptime_seconds']} s)")
            for problem in health.get("degraded") or []:
                print(f"DEGRADED {problem}")
            worker = health.get("worker") or {}
            target = worker.get("target") or {}
            where = (
                f" ({target.get('model')} at {target.get('upstream')}, {target.get('source')})"
                if target
                else ""
            )
            reason = f": {worker['reason']}" if worker.get("reason") else ""
            print(f"worker:  {worker.get('state', 'unknown')}{where}{reason}")
            distill = health.get("distill") or {}
            if distill:
                counts = distill.get("counts") or {}
                print(
                    f"distill: {counts.get('gen0_llm', 0)} LLM and "
                    f"{counts.get('gen0_extractive', 0)} extractive observation logs, "
                    f"{counts.get('gen1', 0)} meta-distillations since start; "
                    f"{len(distill.get('running') or [])} running"
                    + (f"; last error: {distill['last_error']}" if distill.get("last_error") else "")
                )
            spend = health.get("spend") or {}
            throttle = health.get("throttle") or {}
            if spend:
                budget = spend.get("daily_budget_usd") or 0
                print(
                    f"spend:   ${spend.get('today_usd', 0):.4f} today"
                    + (f" of a ${budget:g} daily budget" if budget else " (no daily budget)")
                    + f"; throttle.events {throttle.get('throttle.events', 0)},"
                    f" throttle.totalDelayMs {throttle.get('throttle.totalDelayMs', 0)}"
                )
        else:
            print("gateway: not running")
        if "error" in store:
            print(f"store:   unavailable: {store['error']}")
            return 3
        size = store.get("size_bytes") or 0
        print(f"store:   {store.get('backend')} at {store.get('path') or '(memory)'} ({size / 1e6:.1f} MB)")
        print(
            f"         {store.get('projects', 0)} projects, {store.get('sessions', 0)} sessions, "
            f"{store.get('messages', 0)} messages, {store.get('distillations', 0)} distillations "
            f"(schema v{store.get('schema_version')})"
        )
        for advice in store.get("advice") or []:
            print(f"         note: {advice}")
        for model, v in sorted((store.get("vectors") or {}).items()):
            print(f"vectors: {model}: {v.get('vectors', 0)} vectors, {v.get('pending', 0)} items pending")
        indexer = (data.get("health") or {}).get("indexer") or {}
        if isinstance(reader, _ApiReader) and indexer:
            error = f": {indexer['error']}" if indexer.get("error") else ""
            print(f"indexer: {indexer.get('state')}{error}")
        return 0

    return _with_reader(args, action)


class _ProgressBar:
    """A one-line progress bar on stderr (redrawn in place on a terminal)."""

    def __init__(self, label: str, width: int = 30) -> None:
        self.label = label
        self.width = width
        self.tty = sys.stderr.isatty()

    def __call__(self, done: int, total: int) -> None:
        filled = self.width * done // total if total else self.width
        line = f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}"
        print(("\r" if self.tty else "") + line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def cmd_distill(args: argparse.Namespace) -> int:
    def action(reader: Any) -> int:
        sessions = [_session_ref(reader, args.session)] if args.session else reader.session_ids()
        bar = _ProgressBar("distilling")
        bar(0, len(sessions))
        reports = []
        for index, sid in enumerate(sessions):
            reports.append(reader.distill(sid))
            bar(index + 1, len(sessions))
        bar.finish()
        if args.json:
            _print_json(reports)
            return 0
        for r in reports:
            observed = ", ".join(f"{n} {m}" for m, n in sorted(r["observed"].items())) or "none"
            print(
                f"{r['session_id']}: observation logs written: {observed}; meta-distillations: "
                f"{r['reflected']} (archived {r['archived']}); {r['remaining_messages']} messages left"
            )
            for note in r["notes"]:
                print(f"    {note}")
        return 0

    return _with_reader(args, action)


def cmd_distillations(args: argparse.Namespace) -> int:
    def action(reader: Any) -> int:
        if args.session:
            args.session = _session_ref(reader, args.session)
        rows = reader.distillations(args.session, not args.current)
        if args.json:
            keys = ("id", "session", "generation", "archived", "source_ids", "text")
            _print_json(
                [
                    dict(zip(keys, (d["ref"], d["session_id"], *(d[k] for k in keys[2:])), strict=True))
                    for d in rows
                ]
            )
            return 0
        if not rows:
            print("no distillations stored" + (f" for session {args.session}" if args.session else ""))
            return 0
        for d in rows:
            flags = " ARCHIVED" if d["archived"] else ""
            first = next((line for line in d["text"].splitlines() if line.strip()), "")
            print(
                f"{_when(d['created_at'])}  {d['ref']}  gen {d['generation']}{flags}  {d['session_id']}  "
                f"{d['method']}  {len(d['source_ids'])} sources"
            )
            print(f"    {first[:160]}")
        return 0

    return _with_reader(args, action)


def cmd_token(args: argparse.Namespace) -> int:
    """Print the gateway token (made when there is none yet), or replace it."""
    import json

    from lore_core.http import access
    from lore_core.http.token import configured_token, token_path
    from lore_core.plugins import bootstrap

    config = bootstrap().config
    fixed = configured_token(config)
    if fixed is not None:
        if args.rotate:
            print(
                "lore: the token is configured (server.token or LORE_TOKEN): change it there", file=sys.stderr
            )
            return 2
        print(
            json.dumps({"token": fixed, "rotated": False, "source": "configuration"}) if args.json else fixed
        )
        return 0
    path = token_path()
    try:
        token = access.rotate_token(path) if args.rotate else access.load_or_create_token(path)
    except access.TokenError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps({"token": token, "rotated": args.rotate, "source": str(path)}))
    else:
        print(token)
    if args.rotate:
        print(
            f"lore: a new token is in {path}; clients using the old one are refused from now on",
            file=sys.stderr,
        )
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    """Embed what is stored and not yet embedded for the embedding model (resumable)."""
    import asyncio
    import time

    from lore_core.gateway import choose_embedder
    from lore_core.interfaces import EmbedderUnavailable, VectorStore, tier_of
    from lore_core.plugins import bootstrap
    from lore_core.recall.indexer import VectorIndexer
    from lore_core.recall.sources import vector_index_name
    from lore_core.storage.writer import choose_store

    boot = bootstrap()
    config, registry = boot.config, boot.registry
    url = _gateway_url(config.server.host, config.server.port)
    if url is not None:
        # The gateway holds the store (DuckDB allows one process) and already embeds in
        # the background: its /health shows the indexer's progress.
        print(
            f"lore: a gateway is running at {url}: it embeds new and pending items itself "
            "(see 'lore status'); stop it to reindex directly",
            file=sys.stderr,
        )
        return 3
    if args.provider:
        config.embedding.provider = args.provider
    embedder = choose_embedder(config, registry.embedders)
    if embedder is None:
        from lore_core.install import plugin_hint

        hint = plugin_hint("lore-embed-local")
        print(f"lore: no embedding provider is installed; add lore-embed-local with: {hint}", file=sys.stderr)
        return 3
    store = choose_store(config, registry.stores)
    model = vector_index_name(embedder)
    bar = _ProgressBar(f"embedding for {model}")
    last_drawn = [0.0]

    def progress(done: int, total: int) -> None:
        # A redraw per batch would be thousands of lines when stderr is not a terminal.
        now = time.monotonic()
        if done == 0 or done >= total or now - last_drawn[0] >= (0.2 if bar.tty else 2.0):
            last_drawn[0] = now
            bar(done, total)

    async def main() -> int:
        try:
            await store.open()
        except Exception as exc:
            print(f"lore: cannot open the store: {exc}", file=sys.stderr)
            return 3
        indexer = VectorIndexer(
            store,
            embedder,
            batch_size=config.embedding.batch_size,
            max_chunks=config.embedding.max_chunks_per_item,
        )
        try:
            await embedder.load()
            # The full-text index first: after an upgrade of the passage rules it is rebuilt.
            search_bar = _ProgressBar("search index")
            drawn = [0.0]

            def search_progress(done: int, total: int) -> None:
                now = time.monotonic()
                if done == 0 or done >= total or now - drawn[0] >= (0.2 if search_bar.tty else 2.0):
                    drawn[0] = now
                    search_bar(done, total)

            indexed = await store.sync_search_index(search_progress)
            search_bar.finish()
            if indexed:
                print(f"lore: {indexed} items cut into passages for full-text search", file=sys.stderr)
            vectors = tier_of(store, VectorStore)
            if vectors is None:
                print(f"lore: the {store.name} store has no vector index", file=sys.stderr)
                return 3
            if args.full:
                await vectors.reset_vectors(model)
            print(f"lore: embedding the {store.name} store's items for {model}", file=sys.stderr)
            done = await indexer.run_until_idle(progress)
            bar.finish()
            stats = (await vectors.vector_stats(model)).get(model, {})
            summary = {"model": model, "embedded": done, **stats}
            if args.json:
                _print_json(summary)
            else:
                print(
                    f"{done} items embedded; the {model} index holds {stats.get('vectors', 0)} vectors, "
                    f"{stats.get('pending', 0)} items pending"
                )
            return 0
        except EmbedderUnavailable as exc:
            print(f"lore: the embedding model cannot be used: {exc.reason}", file=sys.stderr)
            return 3
        except asyncio.CancelledError:
            bar.finish()
            print(
                f"lore: interrupted after {indexer.items_indexed} items; what was embedded is kept, "
                "run 'lore reindex' again to continue",
                file=sys.stderr,
            )
            raise
        finally:
            await store.close()
            await embedder.close()

    return asyncio.run(main())


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``lore`` parser; with the command line ``argv``, plus the plugins' commands when
    it names no built-in one (:func:`_add_plugin_commands`)."""
    from lore_core import __version__
    from lore_core.storage.knowledge import (
        CATEGORIES,
        CONTRADICTION_STATUSES,
        POLICIES,
        SCOPES,
        SENSITIVITIES,
    )

    # lore_core.knowledge.imports FORMATS and EXPORT_FORMATS, spelled out so that building the
    # parser does not import the knowledge package (a test keeps them equal).
    FORMATS = ("lore-md", "mem0", "json", "agents")
    EXPORT_FORMATS = ("lore-md", "json")

    parser = argparse.ArgumentParser(prog="lore", description="Lore: a memory layer for AI coding agents.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"lore-core {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    serve = sub.add_parser("serve", help="run the gateway in the foreground")
    serve.add_argument("--host", default=None, help="address to bind (default 127.0.0.1, env LORE_HOST)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8377, env LORE_PORT)")
    serve.set_defaults(func=cmd_serve)

    run = sub.add_parser("run", help="start (or reuse) a gateway and launch a coding agent wired to it")
    run.add_argument("agent", help="claude, codex, opencode, or any installed harness")
    run.add_argument("agent_args", nargs=argparse.REMAINDER, help="arguments passed to the agent")
    run.set_defaults(func=cmd_run)

    plugins = sub.add_parser(
        "plugins", help="list the plugins loaded (with their hooks), blocked and failed to import"
    )
    plugins.add_argument("--json", action="store_true", help="print JSON: loaded, blocked, failed")
    plugins.set_defaults(func=cmd_plugins)

    # Store readers: through the running gateway's API, else the store file directly.
    sessions = sub.add_parser("sessions", help="list stored sessions, newest first")
    sessions.add_argument("--project", default=None, help="only this project (its directory)")
    sessions.add_argument(
        "--all", action="store_true", help="every project: the default here (a listing), as --all elsewhere"
    )
    sessions.add_argument("--limit", type=limit_arg, default=50, help=LIMIT_HELP)
    sessions.add_argument("--json", action="store_true", help="print JSON")
    sessions.set_defaults(func=cmd_sessions)

    show = sub.add_parser("show", help="print a stored session's conversation, or a distillation (d:<id>)")
    show.add_argument(
        "session",
        nargs="?",
        default=None,
        help="session id (see lore sessions) or d:<id> (see lore distillations); default: the latest session",
    )
    show.add_argument(
        "--all-branches", action="store_true", help="every stored message, not only the current branch"
    )
    show.add_argument("--full", action="store_true", help="tool outputs whole (default: their first lines)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=cmd_show)

    forget = sub.add_parser(
        "forget",
        help="remove a session and everything derived from it, for good",
        description=(
            "Remove a stored session for good: its messages, distillations, full-text and vector "
            "index entries and state, and their bytes in the store's files. A client that resends "
            "the session's history does not store it again; new turns of the session are stored. "
            "Asks before it does (--yes does not)."
        ),
        epilog="example: lore forget 3f9c2a7e-1b44-4c55-9d0e-2f6a8b1c0d13 --yes",
    )
    forget.add_argument("session", help="the session id (see lore sessions)")
    forget.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    forget.add_argument("--json", action="store_true", help="print what was removed as JSON")
    forget.set_defaults(func=cmd_forget)

    search = sub.add_parser("search", help="full-text (BM25) search over stored messages")
    search.add_argument("query")
    search.add_argument("--session", default=None, help="only this session")
    search.add_argument("--project", default=None, help="this project (default: the current one)")
    search.add_argument("--all", action="store_true", help="every project")
    search.add_argument("--limit", type=limit_arg, default=10, help=LIMIT_HELP)
    search.add_argument(
        "--json", action="store_true", help="print a JSON array: id, session, role, score, text"
    )
    search.set_defaults(func=cmd_search)

    recall = sub.add_parser(
        "recall", help="search everything remembered, as the model's recall tool does (or open one id)"
    )
    recall.add_argument("query", help="a question or keywords, or one result id (t:..., d:...) to open")
    recall.add_argument(
        "--scope",
        default=None,
        help="session | project (default) | knowledge | all (every project, as --all)",
    )
    recall.add_argument("--session", default=None, help="the session (needed for --scope session)")
    recall.add_argument("--project", default=None, help="this project (default: the current one)")
    recall.add_argument("--all", action="store_true", help="every project")
    recall.add_argument("--limit", type=limit_arg, default=10, help=LIMIT_HELP)
    recall.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array: id, source, score, created_at, session, role, tool, span, text, ...",
    )
    recall.set_defaults(func=cmd_recall)

    distill = sub.add_parser("distill", help="distil stored sessions now (progress on stderr)")
    distill.add_argument("--session", default=None, help="only this session (default: every session)")
    distill.add_argument("--json", action="store_true", help="print the reports as JSON")
    distill.set_defaults(func=cmd_distill)

    distillations = sub.add_parser("distillations", help="list observation logs and meta-distillations")
    distillations.add_argument("--session", default=None, help="only this session")
    distillations.add_argument("--current", action="store_true", help="leave out archived ones")
    distillations.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array: id, session, generation, archived, source_ids, text",
    )
    distillations.set_defaults(func=cmd_distillations)

    reindex = sub.add_parser(
        "reindex",
        help="embed every stored message and distillation not yet embedded for the embedding model "
        "(resumable, progress on stderr; the gateway does this in the background while it runs)",
    )
    reindex.add_argument(
        "--provider",
        "--model",
        dest="provider",
        default=None,
        help="the embedding provider to index for (default: embedding.provider, else the on-device one)",
    )
    reindex.add_argument(
        "--full", action="store_true", help="drop this model's vectors first and embed everything again"
    )
    reindex.add_argument("--json", action="store_true", help="print the summary as JSON")
    reindex.set_defaults(func=cmd_reindex)

    token = sub.add_parser("token", help="print the gateway token the local API and remote clients need")
    token.add_argument(
        "--rotate", action="store_true", help="replace it by a new one (a running gateway takes it at once)"
    )
    token.add_argument("--json", action="store_true", help='print {"token": ..., "rotated": ...}')
    token.set_defaults(func=cmd_token)

    knowledge = sub.add_parser(
        "knowledge",
        help="list, show, add, edit or delete long-term knowledge entries (k:<id>); contradictions",
    )
    ksub = knowledge.add_subparsers(dest="knowledge_command", metavar="ACTION")
    ksub.required = True
    klist = ksub.add_parser("list", help="current entries of the project (and global ones)")
    klist.add_argument("--project", default=None, help="the project directory (default: the current one)")
    klist.add_argument("--all", action="store_true", help="every project's entries")
    klist.add_argument("--json", action="store_true", help="print JSON")
    kshow = ksub.add_parser("show", help="one entry with its versions and provenance")
    kshow.add_argument("id", help="k:<id>")
    kshow.add_argument("--json", action="store_true", help="print JSON")
    kadd = ksub.add_parser("add", help="add an entry (an entry with the same title is edited instead)")
    kedit = ksub.add_parser("edit", help="append a version with the fields given")
    kedit.add_argument("id", help="k:<id>")
    for p, required in ((kadd, True), (kedit, False)):
        p.add_argument("--category", required=required, choices=CATEGORIES)
        p.add_argument("--title", required=required)
        p.add_argument("--content", default=None, help="the text ('-' or nothing with add: read stdin)")
        p.add_argument("--scope", default=None, choices=SCOPES, help="project (default) or global")
        p.add_argument("--global", dest="scope", action="store_const", const="global", help="--scope global")
        p.add_argument("--sensitivity", default=None, choices=SENSITIVITIES)
        p.add_argument("--project", default=None, help="the project directory (default: the current one)")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
    kdelete = ksub.add_parser(
        "delete",
        help="append a death certificate (nothing is erased; it never comes back unless restored)",
    )
    kdelete.add_argument("id", help="k:<id>")
    kdelete.add_argument("--json", action="store_true", help="print the result as JSON")
    krestore = ksub.add_parser(
        "restore",
        help="bring a deleted entry back: a new version with its text before the deletion",
        description=(
            "Bring a deleted entry back: a new version of the same entry with its fields before "
            "the deletion; every version, the deletion included, stays in its history. Refused "
            "when an alive entry has its title now."
        ),
        epilog="example: lore knowledge restore k:3f2a9c0d1e4b5a67",
    )
    krestore.add_argument("id", help="k:<id> of a deleted entry (lore knowledge show lists its versions)")
    krestore.add_argument("--json", action="store_true", help="print JSON")
    kcontra = ksub.add_parser(
        "contradictions", help="pairs of entries the worker judged (open: they give opposite instructions)"
    )
    kcontra.add_argument("--project", default=None, help="the project directory (default: the current one)")
    kcontra.add_argument("--all", action="store_true", help="every project's pairs")
    kcontra.add_argument(
        "--status", action="append", choices=CONTRADICTION_STATUSES, help="only these (repeatable)"
    )
    kcontra.add_argument("--scan", action="store_true", help="judge the project's new pairs first (gateway)")
    kcontra.add_argument("--json", action="store_true", help="print JSON")
    kresolve = ksub.add_parser("resolve", help="settle a pair: keep one entry (the other is deleted) or both")
    kresolve.add_argument("first", help="k:<id>")
    kresolve.add_argument("second", help="k:<id>")
    settle = kresolve.add_mutually_exclusive_group(required=True)
    settle.add_argument("--keep", help="the entry that stays (k:<id>); the other gets a death certificate")
    settle.add_argument(
        "--keep-both", action="store_true", help="both stand (not judged again unless edited)"
    )
    kresolve.add_argument("--json", action="store_true", help="print the result as JSON")
    kpending = ksub.add_parser(
        "pending", help="entries of a team-bound project whose text waits for approval (and rejected ones)"
    )
    kpending.add_argument("--project", default=None, help="the project directory (default: the current one)")
    kpending.add_argument("--json", action="store_true", help="print JSON")
    for name, verb in (("approve", "share"), ("reject", "keep out of the team")):
        kdecide = ksub.add_parser(
            name, help=f"{name} the entry's current text ({verb}); a team decision record"
        )
        kdecide.add_argument("id", help="k:<id>")
        kdecide.add_argument(
            "--by", default=None, help="who decides (default: $LORE_REVIEWER or the login name)"
        )
        kdecide.add_argument(
            "--project", default=None, help="the project directory (default: the current one)"
        )
        kdecide.add_argument("--json", action="store_true", help="print the result as JSON")
    knowledge.set_defaults(func=cmd_knowledge)

    team = sub.add_parser(
        "team", help="bind the project to a team: only entries the team's policy lets through are shared"
    )
    tsub = team.add_subparsers(dest="team_command", metavar="ACTION")
    tshow = tsub.add_parser("show", help="the project's team and policy (the default action)")
    tbind = tsub.add_parser("bind", help="bind the project to a team")
    tbind.add_argument("team", help="the team's name")
    tbind.add_argument(
        "--policy", choices=POLICIES, default=None, help="this project's policy (default: the team's)"
    )
    tunbind = tsub.add_parser("unbind", help="share everything exportable again (decision records are kept)")
    tpolicy = tsub.add_parser(
        "policy", help="auto: share what nobody rejected; manual: only what was approved"
    )
    tpolicy.add_argument("policy", choices=POLICIES)
    tpolicy.add_argument("--team-wide", action="store_true", help="for the whole team, not just this project")
    for p in (tshow, tbind, tunbind, tpolicy):
        p.add_argument("--project", default=None, help="the project directory (default: the current one)")
        p.add_argument("--json", action="store_true", help="print JSON")
    team.set_defaults(func=cmd_team, team_command=None, project=None, json=False)

    entity = sub.add_parser(
        "entity",
        help="list, show, add, alias, relate, rename, merge or delete entities (e:<id>): the people, "
        "services, tools, repositories and files the project knows by name",
    )
    esub = entity.add_subparsers(dest="entity_command", metavar="ACTION")
    esub.required = True
    ENTITY_KINDS = ("person", "service", "tool", "repository", "file", "other")  # storage.entities
    elist = esub.add_parser("list", help="the project's entities (and global ones)")
    elist.add_argument("--all", action="store_true", help="every project's entities")
    elist.add_argument("--json", action="store_true", help="print JSON")
    eshow = esub.add_parser("show", help="one entity with its aliases and relations")
    eshow.add_argument("ref", help="e:<id> (a merged id shows its survivor) or one of its names")
    eshow.add_argument("--json", action="store_true", help="print JSON")
    eadd = esub.add_parser("add", help="add an entity (a known name gets the new aliases instead)")
    eadd.add_argument("name", help="the canonical name")
    eadd.add_argument("--kind", required=True, choices=ENTITY_KINDS)
    eadd.add_argument("--alias", action="append", help="another name it goes by (repeatable)")
    eadd.add_argument("--sensitivity", default=None, choices=SENSITIVITIES)
    eadd.add_argument("--global", dest="is_global", action="store_true", help="for every project")
    eadd.add_argument(
        "--scope", choices=SCOPES, default=None, help="project (default) or global: the same as --global"
    )
    ealias = esub.add_parser("alias", help="add (or --remove) an alias; one another entity has is refused")
    ealias.add_argument("ref", help="e:<id> or a name")
    ealias.add_argument("alias")
    ealias.add_argument("--remove", action="store_true", help="remove this alias instead")
    erelate = esub.add_parser("relate", help="add (or --remove) a relation: <ref> <predicate> <target>")
    erelate.add_argument("ref", help="e:<id> or a name")
    erelate.add_argument("predicate", help="a word such as depends_on, owns, uses")
    erelate.add_argument("target", help="e:<id> or a name")
    erelate.add_argument("--remove", action="store_true", help="remove this relation instead")
    erename = esub.add_parser("rename", help="another canonical name (the old one stays an alias)")
    erename.add_argument("ref", help="e:<id> or a name")
    erename.add_argument("name")
    emerge = esub.add_parser("merge", help="merge <other> into <keep>: its names and relations move over")
    emerge.add_argument("keep", help="e:<id> or a name: the entity that stays")
    emerge.add_argument("other", help="e:<id> or a name: its id then opens <keep>")
    edelete = esub.add_parser(
        "delete",
        help="remove an entity for good, with the ids merged into it and every relation to it",
        description=(
            "Remove an entity for good: its row, the entities merged into it (their ids opened "
            "it) and every other entity's relations to them. Its names are free again."
        ),
        epilog="example: lore entity delete e:3f2a9c0d1e4b5a67",
    )
    edelete.add_argument("ref", help="e:<id> or a name")
    edelete.add_argument("--json", action="store_true", help="print JSON")
    for p in (elist, eshow, eadd, ealias, erelate, erename, emerge, edelete):
        p.add_argument("--project", default=None, help="the project directory (default: the current one)")
    for p in (eadd, ealias, erelate, erename, emerge):
        p.add_argument("--json", action="store_true", help="print the result as JSON")
    entity.set_defaults(func=cmd_entity)

    export = sub.add_parser(
        "export", help="write the project's knowledge as .lore.md (the gateway does it on idle)"
    )
    export.add_argument("--project", default=None, help="the project directory (default: the current one)")
    export.add_argument("--output", "-o", default=None, help="another file, or - for stdout")
    export.add_argument("--include-sensitive", action="store_true", help="also entries marked sensitive")
    export.add_argument(
        "--format",
        default="lore-md",
        choices=EXPORT_FORMATS,
        help="lore-md (default) or json (a list lore import reads back; printed unless --output)",
    )
    export.add_argument("--json", action="store_true", help="print what was written as JSON (not the file)")
    export.set_defaults(func=cmd_export)

    import_ = sub.add_parser(
        "import",
        help="read a .lore.md, a mem0 export, a JSON list of entries or a CLAUDE.md/AGENTS.md into the "
        "store (deleted entries are not brought back); with --from, a client's own session history",
    )
    import_.add_argument("file", nargs="?", default=None, help="the file (default: <project>/.lore.md)")
    import_.add_argument(
        "--format", default=None, choices=FORMATS, help="the file's format (default: guessed)"
    )
    import_.add_argument("--project", default=None, help="the project directory (default: the current one)")
    import_.add_argument(
        "--global",
        dest="allow_global",
        action="store_true",
        help='let entries marked "scope": "global" reach every project (without it they are imported '
        "into this project only)",
    )
    import_.add_argument("--json", action="store_true", help="print the report as JSON")
    # History import (lore_core.storage.history_import): --project is then a filter.
    import_.add_argument(
        "--from",
        dest="history_from",
        metavar="CLIENT",
        default=None,
        help="import this client's own transcripts instead (claude-code, codex, opencode): each session "
        "filed under its project and session id as if it had gone through the gateway; a second run adds "
        "nothing; --project then keeps only that directory's sessions (and its subdirectories')",
    )
    import_.add_argument(
        "--path", default=None, help="with --from: read this folder or file instead of the client's own"
    )
    import_.add_argument(
        "--since",
        default=None,
        help="with --from: only sessions active since this date, time or age (2026-01-31, 30d, 12h)",
    )
    import_.add_argument(
        "--dry-run", action="store_true", help="with --from: read and count only, write nothing"
    )
    import_.set_defaults(func=cmd_import)

    status = sub.add_parser("status", help="is the gateway up; store path, size and counts")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=cmd_status)

    # lore stop, lore doctor, lore config (lore_core/cli/lifecycle.py).
    from lore_core.cli.lifecycle import add_commands as add_lifecycle_commands

    add_lifecycle_commands(sub)
    # lore setup [undo] <agent> (lore_core/cli/setup.py).
    from lore_core.cli.setup import add_command as add_setup_command

    add_setup_command(sub)
    # lore completion bash|zsh|fish (lore_core/cli/completion.py).
    from lore_core.cli.completion import add_command as add_completion_command

    add_completion_command(sub)
    # lore uninstall (lore_core/cli/uninstall.py).
    from lore_core.cli.uninstall import add_command as add_uninstall_command

    add_uninstall_command(sub)
    # lore spend (lore_core/cli/spend.py).
    from lore_core.cli.spend import add_commands as add_spend_commands

    add_spend_commands(sub)
    # lore store migrate|copy (lore_core/cli/store.py).
    from lore_core.cli.store import add_commands as add_store_commands

    add_store_commands(sub)
    named = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    # `lore --version` needs no plugin (loading them costs most of a second).
    if argv is not None and named not in sub.choices and "--version" not in argv:
        _add_plugin_commands(sub)
    # Descriptions and examples (lore_core/cli/help_texts.py).
    from lore_core.cli import help_texts

    help_texts.apply(parser)
    return parser


def _add_plugin_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The plugins' subcommands (``lore_register_commands``). Asked for only when the command
    line names no built-in command: loading the plugins costs most of a second, which
    ``lore serve`` and the other built-ins need not pay to parse their arguments."""
    from lore_core.cli import help_texts
    from lore_core.plugins import Registry, make_plugin_manager

    registry = Registry.collect(make_plugin_manager())
    for command in registry.commands.values():
        if command.name in sub.choices:
            owner = registry.owners.get(f"command {command.name!r}", "?")
            raise PluginError(f"plugin {owner} registered the command {command.name!r}, a built-in command")
        parser = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description or command.help,
            epilog=help_texts.examples(list(command.examples)) if command.examples else None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.configure(parser)
        parser.set_defaults(func=command.run)


def main(argv: Sequence[str] | None = None) -> int:
    from lore_core.storage.private import restrict_umask

    # Everything any lore command creates is its user's only (the store, its WAL and indexes,
    # the journal, the token, logs, exports), whatever the shell's umask: a umask because
    # DuckDB and LanceDB create files of their own. See lore_core/storage/private.py.
    restrict_umask()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(argv)
    except PluginError as exc:
        print(f"lore: plugin error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"lore: configuration error: {exc}", file=sys.stderr)
        return 2
    except PluginError as exc:
        print(f"lore: plugin error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`lore sessions | head`): not an error of ours. Point stdout
        # at /dev/null so the interpreter's own flush at exit does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
