"""``lore knowledge`` and ``lore team``: long-term knowledge entries, their contradictions
and a team's approvals, through the local API (the book's rules apply in the route)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lore_core.cli.api_client import ApiClient, CommandError, with_client
from lore_core.cli.common import described, knowledge_ref, plural, print_json, project_of, quoted, when
from lore_core.interfaces import Command


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
        f"          {why} ({row['judged_by']}, {when(row['judged_at'])}{kept})",
    ]


def cmd_knowledge(args: argparse.Namespace) -> int:
    def action(client: ApiClient) -> int:
        for name in ("id", "first", "second", "keep"):  # unique prefixes, with or without k:
            if getattr(args, name, None):
                setattr(args, name, knowledge_ref(client, getattr(args, name)))
        if args.knowledge_command == "pending":
            found = client.get("/knowledge/pending", project=project_of(args))
            if args.json:
                print_json(found)
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
            found = client.call(
                "POST",
                "/knowledge/decisions",
                body={
                    "id": args.id,
                    "decision": decision,
                    "by": args.by or _reviewer(),
                    "project": project_of(args),
                },
            )
            if args.json:
                print_json(found)
                return 0
            print(_approval_line(found))
            return 0
        if args.knowledge_command == "contradictions":
            if args.scan:
                if client.url is None:
                    raise CommandError(
                        "judging needs the worker: start the gateway (lore serve) and run this again", 1
                    )
                # Worker calls, one per pair: give them time.
                report = client.call(
                    "POST", "/knowledge/contradictions/scan", timeout=600, project=project_of(args)
                )
                if not args.json:
                    print(
                        f"judged {report['judged']} of {report['candidates']} pairs: "
                        f"{len(report['opened'])} open, {len(report['cleared'])} cleared"
                        + (f" (stopped: {report['stopped']})" if report.get("stopped") else "")
                    )
            rows = client.get(
                "/knowledge/contradictions",
                project=None if args.all else project_of(args),
                status=",".join(args.status) if args.status else None,
            )
            if args.json:
                print_json(rows)
                return 0
            if not rows:
                print("no contradictions judged yet" if not args.status else "none")
            for row in rows:
                print("\n".join(_contradiction_lines(row)))
            return 0
        if args.knowledge_command == "resolve":
            found = client.call(
                "POST",
                "/knowledge/contradictions/resolve",
                body={"first": args.first, "second": args.second}
                | ({"keep_both": True} if args.keep_both else {"keep": args.keep}),
            )
            if args.json:
                print_json(found)
                return 0
            print("\n".join(_contradiction_lines(found)))
            return 0
        if args.knowledge_command == "list":
            rows = client.get("/knowledge", project=None if args.all else project_of(args))
            if args.json:
                print_json(rows)
            elif not rows:
                print("no knowledge yet")
            for row in [] if args.json else rows:
                print(_entry_line(row))
            return 0
        if args.knowledge_command == "show":
            found = client.get(f"/knowledge/{quoted(args.id, safe=':')}")
            if args.json:
                print_json(found)
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
                    f"  {what:<8} {when(v['created_at'])}  by {v['updated_by']}"
                    + (f" ({source})" if source else "")
                )
            return 0
        if args.knowledge_command == "restore":
            result = client.call("POST", f"/knowledge/{quoted(args.id, safe=':')}/restore")
            if args.json:
                print_json(result)
            else:
                print(f"{result['status']}: {_entry_line(result['entry'])}")
            return 0
        if args.knowledge_command == "delete":
            result = client.call("DELETE", f"/knowledge/{quoted(args.id, safe=':')}")
            if args.json:
                print_json(result)
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
            result = client.call("POST", "/knowledge", body={"project": project_of(args), **fields})
        else:
            if not fields:
                raise CommandError(
                    "nothing to change: give --category, --title, --content, --scope or --sensitivity", 2
                )
            result = client.call("PATCH", f"/knowledge/{quoted(args.id, safe=':')}", body=fields)
        if args.json:
            print_json(result)
            return 0
        print(f"{result['status']}: {_entry_line(result['entry'])}")
        return 0

    return with_client(args, action)


def _reviewer() -> str:
    """Who decides when ``--by`` is not given: ``LORE_REVIEWER``, else the login name."""
    import getpass
    import os

    return os.environ.get("LORE_REVIEWER") or getpass.getuser()


def _approval_line(row: dict[str, Any]) -> str:
    decision = row["decision"]
    by = f" by {decision['decided_by']} {when(decision['decided_at'])}" if decision else ""
    note = " (the team sees the approved earlier text)" if row["changed_since_approval"] else ""
    return f"{row['id']}  {row['state']:<8}  [{row['category']}] {row['title']}{by}{note}"


def cmd_team(args: argparse.Namespace) -> int:
    def action(client: ApiClient) -> int:
        project = project_of(args)
        command = args.team_command or "show"
        shared_before = None if command == "show" else _shared(client, project)
        if command == "show":
            found = client.get("/team", project=project)
        elif command == "bind":
            found = _team_change(client, project, "bind", team=args.team, policy=args.policy)
        elif command == "unbind":
            found = _team_change(client, project, "unbind")
        else:
            found = _team_change(client, project, "policy", policy=args.policy, team_wide=args.team_wide)
        if shared_before is not None:
            # What the repository's .lore.md shares follows the team and policy: say when it
            # changes (binding with the manual policy shares nothing until approved).
            shared_after = _shared(client, project)
            found = {**found, "shared_before": shared_before, "shared_after": shared_after}
            if shared_after != shared_before and not args.json:
                hint = " (approve entries: lore knowledge pending)" if shared_after < shared_before else ""
                # Said before the gateway's next export rewrites the file (on idle).
                print(
                    f"lore: note: .lore.md will share {plural(shared_after, 'entry', 'entries')} of "
                    f"this project from its next export ({shared_before} until now){hint}",
                    file=sys.stderr,
                )
        if args.json:
            print_json(found)
        elif found["bound"]:
            print(f"{project}: team {found['team']}, policy {found['policy']} ({found['policy_from']})")
        else:
            print(f"{project}: not bound to a team")
        return 0

    return with_client(args, action)


def _shared(client: ApiClient, project: str) -> int:
    """How many entries the project's .lore.md shares now."""
    return int(client.get("/knowledge/file", project=project)["written"])


def _team_change(client: ApiClient, project: str, action: str, **fields: Any) -> Any:
    return client.call("POST", "/team", body={"project": project, "action": action, **fields})


class Knowledge(Command):
    name = "knowledge"
    help = "list, show, add, edit or delete long-term knowledge entries (k:<id>); contradictions"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        from lore_core.storage.knowledge import CATEGORIES, CONTRADICTION_STATUSES, SCOPES, SENSITIVITIES

        ksub = parser.add_subparsers(dest="knowledge_command", metavar="ACTION")
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
            p.add_argument(
                "--global", dest="scope", action="store_const", const="global", help="--scope global"
            )
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
            "contradictions",
            help="pairs of entries the worker judged (open: they give opposite instructions)",
        )
        kcontra.add_argument(
            "--project", default=None, help="the project directory (default: the current one)"
        )
        kcontra.add_argument("--all", action="store_true", help="every project's pairs")
        kcontra.add_argument(
            "--status", action="append", choices=CONTRADICTION_STATUSES, help="only these (repeatable)"
        )
        kcontra.add_argument(
            "--scan", action="store_true", help="judge the project's new pairs first (gateway)"
        )
        kcontra.add_argument("--json", action="store_true", help="print JSON")
        kresolve = ksub.add_parser(
            "resolve", help="settle a pair: keep one entry (the other is deleted) or both"
        )
        kresolve.add_argument("first", help="k:<id>")
        kresolve.add_argument("second", help="k:<id>")
        settle = kresolve.add_mutually_exclusive_group(required=True)
        settle.add_argument(
            "--keep", help="the entry that stays (k:<id>); the other gets a death certificate"
        )
        settle.add_argument(
            "--keep-both", action="store_true", help="both stand (not judged again unless edited)"
        )
        kresolve.add_argument("--json", action="store_true", help="print the result as JSON")
        kpending = ksub.add_parser(
            "pending",
            help="entries of a team-bound project whose text waits for approval (and rejected ones)",
        )
        kpending.add_argument(
            "--project", default=None, help="the project directory (default: the current one)"
        )
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

    def run(self, args: argparse.Namespace) -> int:
        return cmd_knowledge(args)


class Team(Command):
    name = "team"
    help = "bind the project to a team: only entries the team's policy lets through are shared"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        from lore_core.storage.knowledge import POLICIES

        tsub = parser.add_subparsers(dest="team_command", metavar="ACTION")
        tshow = tsub.add_parser("show", help="the project's team and policy (the default action)")
        tbind = tsub.add_parser("bind", help="bind the project to a team")
        tbind.add_argument("team", help="the team's name")
        tbind.add_argument(
            "--policy", choices=POLICIES, default=None, help="this project's policy (default: the team's)"
        )
        tunbind = tsub.add_parser(
            "unbind", help="share everything exportable again (decision records are kept)"
        )
        tpolicy = tsub.add_parser(
            "policy", help="auto: share what nobody rejected; manual: only what was approved"
        )
        tpolicy.add_argument("policy", choices=POLICIES)
        tpolicy.add_argument(
            "--team-wide", action="store_true", help="for the whole team, not just this project"
        )
        for p in (tshow, tbind, tunbind, tpolicy):
            p.add_argument("--project", default=None, help="the project directory (default: the current one)")
            p.add_argument("--json", action="store_true", help="print JSON")
        parser.set_defaults(team_command=None, project=None, json=False)

    def run(self, args: argparse.Namespace) -> int:
        return cmd_team(args)
