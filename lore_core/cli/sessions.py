"""``lore sessions``, ``lore show``, ``lore forget``, ``lore search`` and ``lore recall``: the
stored conversations, read through the local API (:mod:`lore_core.cli.api_client`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lore_core.cli.api_client import ApiClient, CommandError, with_client
from lore_core.cli.common import (
    LIMIT_HELP,
    clip,
    confirmed,
    described,
    distillation_ref,
    limit_arg,
    mib,
    print_json,
    project_filter,
    quoted,
    search_project,
    session_ref,
    when,
    where_searched,
)
from lore_core.interfaces import Command


def cmd_sessions(args: argparse.Namespace) -> int:
    def action(client: ApiClient) -> int:
        project = None if args.all else project_filter(args)
        rows = client.get("/sessions", project=project, limit=args.limit)
        if args.json:
            print_json(rows)
            return 0
        if not rows:
            print("no sessions stored" + (f" for project {project}" if project else ""))
            return 0
        for s in rows:
            branches = f", {s['branch_count']} branches" if s["branch_count"] > 1 else ""
            print(
                f"{when(s['updated_at'])}  {s['id']}  {s['harness'] or '-'}  "
                f"{s['message_count']} messages{branches}  {s['model'] or '-'}"
            )
            print(f"    {s['project'] or '-'}  {s['title']}")
        return 0

    return with_client(args, action)


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
                return clip(" ".join(value.split()), SHOWN_CALL_CHARS)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return clip(" ".join(value), SHOWN_CALL_CHARS)
    return clip(json.dumps(tool_input, ensure_ascii=False), SHOWN_CALL_CHARS)


def render_message(m: dict[str, Any], full: bool = False, names: dict[str, str] | None = None) -> list[str]:
    """One message as a transcript: a rule naming who spoke and when, the text, tool calls
    on one line each, tool output indented and (unless ``full``) shortened. ``names``: the
    tool of each call id seen so far in the session (an output follows its call's message)."""
    facts = [m["role"]]
    if m.get("model") and m["role"] == "assistant":
        facts.append(m["model"])
    facts.append(when(m.get("created_at")))
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
        f"{d['method']}, worker {worker}; {when(d['start'])} .. {when(d['end'])}; "
        f"created {when(d['created_at'])}"
    )
    print(
        f"tokens: source {d['source_tokens']}, input {d['input_tokens']}, output {d['output_tokens']} "
        f"(compression {d['compression_ratio']}x); {len(d['source_ids'])} sources"
    )
    print()
    print(d["text"])


def cmd_show(args: argparse.Namespace) -> int:
    def action(client: ApiClient) -> int:
        if args.session is None:
            latest = client.get("/sessions", limit=1)
            if not latest:
                print("no sessions stored")
                return 0
            args.session = latest[0]["id"]
        elif args.session.startswith("d:"):
            args.session = distillation_ref(client, args.session)
        else:
            args.session = session_ref(client, args.session)
        if args.session.startswith("d:"):
            found = client.get(f"/distillations/{quoted(args.session)}")
            if args.json:
                print_json(found)
            else:
                _print_distillation(found)
            return 0
        data = client.get(f"/sessions/{quoted(args.session)}", branches="all" if args.all_branches else None)
        if args.json:
            print_json(data)
            return 0
        s = data["session"]
        print(f"session {s['id']}  ({s['harness'] or '-'}, {s['model'] or '-'})")
        print(f"project {s['project'] or '-'}")
        print(
            f"{s['message_count']} messages stored, {s['branch_count']} branch(es); "
            f"{when(s['created_at'])} .. {when(s['updated_at'])}"
        )
        if data.get("state"):
            # Names only: the values (spend, owner, amnesia ranges) are for --json.
            print(f"state: {', '.join(sorted(data['state']))} (--json shows them)")
        if s["branch_count"] > 1 and not args.all_branches:
            print("(showing the current branch; --all-branches shows every stored message)")
        print()
        names: dict[str, str] = {}
        for m in data["messages"]:
            print("\n".join(render_message(m, args.full, names)))
            print()
        return 0

    return with_client(args, action)


def cmd_forget(args: argparse.Namespace) -> int:
    def action(client: ApiClient) -> int:
        args.session = session_ref(client, args.session)
        if not args.yes:
            session = client.get(f"/sessions/{quoted(args.session)}", branches="all")[
                "session"
            ]  # a 404 says there is none
            what = (
                f"session {session['id']} ({session['message_count']} messages, "
                f"project {session['project'] or '-'})"
            )
            if not sys.stdin.isatty():
                raise CommandError(f"this removes {what} for good; run it again with --yes", 2)
            question = (
                f"Forget {what}? Its messages, distillations and index entries are removed for good, "
                "and a client resending its history does not store it again."
            )
            if not confirmed(question):
                print("lore: nothing was forgotten", file=sys.stderr)
                return 1
        # Long for a large store: its files are rewritten without the session.
        report = client.call("DELETE", f"/sessions/{quoted(args.session)}", timeout=3600)
        if args.json:
            print_json(report)
            return 0
        print(
            f"forgot session {report['session_id']}: {report['messages']} messages, "
            f"{report['distillations']} distillations, {report['passages']} index passages, "
            f"{report['vectors']} vectors ({report['seconds']:.2f} s)"
        )
        if report["bytes_before"]:
            print(
                f"the store's files were rewritten without them: {mib(report['bytes_before'])} -> "
                f"{mib(report['bytes_after'])}"
            )
        print("a client resending this session's history does not store it again; its new turns are stored")
        if report["knowledge"]:
            print(
                f"kept: {len(report['knowledge'])} knowledge entries curated from it "
                f"({', '.join(report['knowledge'])}); `lore knowledge delete <id>` removes one"
            )
        return 0

    return with_client(args, action)


def cmd_search(args: argparse.Namespace) -> int:
    def action(client: ApiClient) -> int:
        if args.session:
            args.session = session_ref(client, args.session)
        project = search_project(args)
        hits = client.get("/search", q=args.query, session=args.session, project=project, limit=args.limit)
        if args.json:
            print_json(
                [
                    {k: h.get(k) for k in ("id", "passage", "session", "role", "score", "text", "project")}
                    for h in hits
                ]
            )
            return 0
        if not hits:
            print("no matches" + where_searched(project))
            return 0
        for h in hits:
            snippet = " ".join(h["text"].split())
            snippet = snippet[:200] + ("..." if len(snippet) > 200 else "")
            print(f"{h['score']:7.3f}  {h['session']}  [{h['role']}]  {h['id']}")
            print(f"         {snippet}")
        return 0

    return with_client(args, action)


#: What ``lore recall`` prints of a passage (the rest: open it by its id).
RECALL_CHARS = 600
RECALL_LINES = 24


def cmd_recall(args: argparse.Namespace) -> int:
    from lore_core.recall.tool import CLOSEST_RESULTS, nothing_relevant, snippet

    def action(client: ApiClient) -> int:
        if args.session:
            args.session = session_ref(client, args.session)
        project = None if args.scope == "all" else search_project(args)
        answer = client.get(
            "/recall", q=args.query, scope=args.scope, session=args.session, project=project, limit=args.limit
        )
        results = answer.get("results") or []
        matched = bool(answer.get("matched", True))
        if args.json:
            fields = (
                "id", "source", "relevance", "score", "created_at", "session", "role",
                "tool", "tool_source", "span", "text",
            )  # fmt: skip
            print_json([{k: r.get(k) for k in fields} for r in results])
        else:
            if results and not matched:
                print(nothing_relevant(args.query, answer.get("scope") or args.scope or "project"))
                results = results[:CLOSEST_RESULTS]
            for r in results:
                relevance = float(r.get("relevance") or 0.0)
                print(f"{relevance:5.2f}  {r['id']}  [{r['source']}]  {when(r.get('created_at'))}")
                head, _, body = str(r.get("text", "")).partition("\n")
                # The passage's header, then its lines where the query matched.
                shown = snippet(body, args.query, RECALL_CHARS).splitlines()
                for line in [head, *shown[:RECALL_LINES]]:
                    print(f"    {clip(line, 150)}")
            if not results and not answer.get("error"):
                print("no matches" + where_searched(project))
        for note in answer.get("notes") or []:
            print(f"note: {note}", file=sys.stderr)
        if answer.get("error"):
            print(f"lore: {answer['error']}", file=sys.stderr)
            return 1
        return 0

    return with_client(args, action)


class Sessions(Command):
    name = "sessions"
    help = "list stored sessions, newest first"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--project", default=None, help="only this project (its directory)")
        parser.add_argument(
            "--all",
            action="store_true",
            help="every project: the default here (a listing), as --all elsewhere",
        )
        parser.add_argument("--limit", type=limit_arg, default=50, help=LIMIT_HELP)
        parser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_sessions(args)


class Show(Command):
    name = "show"
    help = "print a stored session's conversation, or a distillation (d:<id>)"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "session",
            nargs="?",
            default=None,
            help="session id (see lore sessions) or d:<id> (see lore distillations); "
            "default: the latest session",
        )
        parser.add_argument(
            "--all-branches", action="store_true", help="every stored message, not only the current branch"
        )
        parser.add_argument(
            "--full", action="store_true", help="tool outputs whole (default: their first lines)"
        )
        parser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_show(args)


class Forget(Command):
    name = "forget"
    help = "remove a session and everything derived from it, for good"
    description = (
        "Remove a stored session for good: its messages, distillations, full-text and vector "
        "index entries and state, and their bytes in the store's files. A client that resends "
        "the session's history does not store it again; new turns of the session are stored. "
        "Asks before it does (--yes does not)."
    )
    examples = ("lore forget 3f9c2a7e-1b44-4c55-9d0e-2f6a8b1c0d13 --yes",)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("session", help="the session id (see lore sessions)")
        parser.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
        parser.add_argument("--json", action="store_true", help="print what was removed as JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_forget(args)


class Search(Command):
    name = "search"
    help = "full-text (BM25) search over stored messages"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("query")
        parser.add_argument("--session", default=None, help="only this session")
        parser.add_argument("--project", default=None, help="this project (default: the current one)")
        parser.add_argument("--all", action="store_true", help="every project")
        parser.add_argument("--limit", type=limit_arg, default=10, help=LIMIT_HELP)
        parser.add_argument(
            "--json", action="store_true", help="print a JSON array: id, session, role, score, text"
        )

    def run(self, args: argparse.Namespace) -> int:
        return cmd_search(args)


class Recall(Command):
    name = "recall"
    help = "search everything remembered, as the model's recall tool does (or open one id)"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("query", help="a question or keywords, or one result id (t:..., d:...) to open")
        parser.add_argument(
            "--scope",
            default=None,
            help="session | project (default) | knowledge | all (every project, as --all)",
        )
        parser.add_argument("--session", default=None, help="the session (needed for --scope session)")
        parser.add_argument("--project", default=None, help="this project (default: the current one)")
        parser.add_argument("--all", action="store_true", help="every project")
        parser.add_argument("--limit", type=limit_arg, default=10, help=LIMIT_HELP)
        parser.add_argument(
            "--json",
            action="store_true",
            help="print a JSON array: id, source, score, created_at, session, role, tool, span, text, ...",
        )

    def run(self, args: argparse.Namespace) -> int:
        return cmd_recall(args)
