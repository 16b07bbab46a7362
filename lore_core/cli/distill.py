"""``lore distill`` and ``lore distillations``: distil stored sessions now, list what
distillation wrote; through the local API."""

from __future__ import annotations

import argparse

from lore_core.cli.api_client import ApiClient, with_client
from lore_core.cli.common import ProgressBar, described, print_json, session_ids, session_ref, when
from lore_core.interfaces import Command


def cmd_distill(args: argparse.Namespace) -> int:
    def action(client: ApiClient) -> int:
        sessions = [session_ref(client, args.session)] if args.session else session_ids(client)
        bar = ProgressBar("distilling")
        bar(0, len(sessions))
        reports = []
        for index, sid in enumerate(sessions):
            # Long: the route answers when the session is distilled (worker calls included).
            answer = client.call("POST", "/distill", timeout=3600, session=sid)
            reports.append(answer["reports"][0])
            bar(index + 1, len(sessions))
        bar.finish()
        if args.json:
            print_json(reports)
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

    return with_client(args, action)


def cmd_distillations(args: argparse.Namespace) -> int:
    def action(client: ApiClient) -> int:
        if args.session:
            args.session = session_ref(client, args.session)
        rows = client.get("/distillations", session=args.session, archived="0" if args.current else None)
        if args.json:
            keys = ("id", "session", "generation", "archived", "source_ids", "text")
            print_json(
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
                f"{when(d['created_at'])}  {d['ref']}  gen {d['generation']}{flags}  {d['session_id']}  "
                f"{d['method']}  {len(d['source_ids'])} sources"
            )
            print(f"    {first[:160]}")
        return 0

    return with_client(args, action)


class Distill(Command):
    name = "distill"
    help = "distil stored sessions now (progress on stderr)"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--session", default=None, help="only this session (default: every session)")
        parser.add_argument("--json", action="store_true", help="print the reports as JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_distill(args)


class Distillations(Command):
    name = "distillations"
    help = "list observation logs and meta-distillations"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--session", default=None, help="only this session")
        parser.add_argument("--current", action="store_true", help="leave out archived ones")
        parser.add_argument(
            "--json",
            action="store_true",
            help="print a JSON array: id, session, generation, archived, source_ids, text",
        )

    def run(self, args: argparse.Namespace) -> int:
        return cmd_distillations(args)
