"""``lore export`` and ``lore import``: a project's knowledge to and from a file (through the
local API), and with ``--from`` a client's own session history into the store."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lore_core.cli.api_client import ApiClient, CommandError, GatewayClient, gateway_url, with_client
from lore_core.cli.common import cli_bootstrap, described, print_json, project_filter, project_of
from lore_core.interfaces import Command

# lore_core.knowledge.imports FORMATS and EXPORT_FORMATS, spelled out so that building the
# parser does not import the knowledge package (a test keeps them equal).
FORMATS = ("lore-md", "mem0", "json", "agents")
EXPORT_FORMATS = ("lore-md", "json")


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    def action(client: ApiClient) -> int:
        project = project_of(args)
        sensitive = "1" if args.include_sensitive else None
        found = client.get("/knowledge/file", project=project, sensitive=sensitive, format=args.format)
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
            print_json({"path": str(path), "changed": changed, **report})
            return 0
        print(f"{path}: {found['written']} entries{'' if changed else ', unchanged'}{note}")
        return 0

    return with_client(args, action)


def cmd_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.history_from is not None or args.path or args.since or args.dry_run:
        return cmd_import_history(args)

    from lore_core.knowledge.imports import guess_format
    from lore_core.knowledge.lorefile import FILE_NAME

    project = project_of(args)
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

    def action(client: ApiClient) -> int:
        report = client.call(
            "POST",
            "/knowledge/import",
            body=text.encode("utf-8"),
            project=project,
            path=str(path),
            format=fmt,
            allowGlobal="true" if args.allow_global else "false",
        )
        if args.json:
            print_json(report)
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

    return with_client(args, action)


def cmd_import_history(args: argparse.Namespace) -> int:
    """``lore import --from <client>``: the client's own transcripts into the store
    (:mod:`lore_core.storage.history_import`): written directly, or, while a gateway runs
    and holds the store (DuckDB: one process), by that gateway
    (:mod:`lore_core.http.imports`)."""
    import asyncio
    from pathlib import Path

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
        boot = cli_bootstrap(args)
        harness = history.harness_for(boot.registry.harnesses, args.history_from)
    except (ValueError, history.HistoryImportError) as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 2
    root = Path(args.path).expanduser() if args.path else None
    project = project_filter(args)
    store = None
    if not args.dry_run:
        url = gateway_url(boot.config.server.host, boot.config.server.port)
        if url is not None:
            # The gateway holds the store: it runs the import (POST /lore/api/import/history).
            from lore_core.http.token import cli_token

            client = GatewayClient(url, cli_token(boot.config))
            # Where this command's environment says the client keeps its history.
            where = root if root is not None else harness.history_root()
            request = {"from": args.history_from, "since": args.since, "project": project,
                       "path": str(where.resolve()) if where is not None else None}  # fmt: skip
            return _import_through_gateway(client, request, args.json)
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
        print_json(report.as_json())
    else:
        print(history.summary(report))
        for failure in report.failed[:10]:
            print(f"  could not read {failure}")
    return 1 if report.failed else 0


#: How often ``lore import`` asks a gateway how far its import is.
IMPORT_POLL_SECONDS = 0.25


def _import_through_gateway(client: GatewayClient, request: dict[str, Any], as_json: bool) -> int:
    """Run the import in the running gateway and follow it with the progress bar; Ctrl-C
    stops it there (after the write under way: the next import goes on from where it was)."""
    import time

    from lore_core.storage import history_import as history

    print(f"lore: {client.where}: the gateway imports, indexes and distils", file=sys.stderr)
    body = {k: v for k, v in request.items() if v is not None}
    try:
        job = client.call("POST", "/import/history", body=body)
    except CommandError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 2 if exc.code == 1 else exc.code
    bar = history.ProgressBar()
    try:
        while job["state"] == "running":
            bar(history.ImportReport.from_json(job["report"], finished=False))
            time.sleep(IMPORT_POLL_SECONDS)
            job = client.get(f"/import/history/{job['job']}")
    except KeyboardInterrupt:
        client.call("DELETE", f"/import/history/{job['job']}")
        print("\nlore: import stopped; run it again to go on from where it stopped", file=sys.stderr)
        return 130
    except CommandError as exc:
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
        print_json(report.as_json())
    else:
        print(history.summary(report))
        for failure in report.failed[:10]:
            print(f"  could not read {failure}")
    return 1 if report.failed else 0


class Export(Command):
    name = "export"
    help = "write the project's knowledge as .lore.md (the gateway does it on idle)"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--project", default=None, help="the project directory (default: the current one)"
        )
        parser.add_argument("--output", "-o", default=None, help="another file, or - for stdout")
        parser.add_argument("--include-sensitive", action="store_true", help="also entries marked sensitive")
        parser.add_argument(
            "--format",
            default="lore-md",
            choices=EXPORT_FORMATS,
            help="lore-md (default) or json (a list lore import reads back; printed unless --output)",
        )
        parser.add_argument(
            "--json", action="store_true", help="print what was written as JSON (not the file)"
        )

    def run(self, args: argparse.Namespace) -> int:
        return cmd_export(args)


class Import(Command):
    name = "import"
    help = (
        "read a .lore.md, a mem0 export, a JSON list of entries or a CLAUDE.md/AGENTS.md into the "
        "store (deleted entries are not brought back); with --from, a client's own session history"
    )
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("file", nargs="?", default=None, help="the file (default: <project>/.lore.md)")
        parser.add_argument(
            "--format", default=None, choices=FORMATS, help="the file's format (default: guessed)"
        )
        parser.add_argument(
            "--project", default=None, help="the project directory (default: the current one)"
        )
        parser.add_argument(
            "--global",
            dest="allow_global",
            action="store_true",
            help='let entries marked "scope": "global" reach every project (without it they are imported '
            "into this project only)",
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        # History import (lore_core.storage.history_import): --project is then a filter.
        parser.add_argument(
            "--from",
            dest="history_from",
            metavar="CLIENT",
            default=None,
            help="import this client's own transcripts instead (claude-code, codex, opencode): each session "
            "filed under its project and session id as if it had gone through the gateway; a second run adds "
            "nothing; --project then keeps only that directory's sessions (and its subdirectories')",
        )
        parser.add_argument(
            "--path", default=None, help="with --from: read this folder or file instead of the client's own"
        )
        parser.add_argument(
            "--since",
            default=None,
            help="with --from: only sessions active since this date, time or age (2026-01-31, 30d, 12h)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="with --from: read and count only, write nothing"
        )

    def run(self, args: argparse.Namespace) -> int:
        return cmd_import(args)
