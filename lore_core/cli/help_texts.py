"""What ``lore <command> --help`` says beyond the one-line summary: a description and
examples for every built-in command, in one table so they read alike (a test checks that
every command, plugins' included, has both).

A command that sets its own ``description`` / ``epilog`` where it is built (``lore setup``,
``lore doctor``, ...) keeps them; this table fills in the rest.
"""

from __future__ import annotations

import argparse

#: command path -> (description, examples). Examples are command lines, optionally followed
#: by "  # what it does".
HELP: dict[str, tuple[str, list[str]]] = {
    "serve": (
        "Run the gateway in the foreground until Ctrl+C: the proxy for your clients, the local\n"
        "API, and the background work (indexing, distillation, curation). It says at start which\n"
        "configuration, upstreams, data directory, worker model and plugins it uses.",
        ["lore serve", "lore serve --port 9000        # another port (or LORE_PORT)"],
    ),
    "run": (
        "Start a gateway in the background (or reuse the one on the configured port) and run a\n"
        "coding agent wired to it, with its own arguments. The gateway keeps running after the\n"
        "agent exits, shared by every agent on the machine; `lore stop` stops it.",
        ["lore run claude", "lore run codex exec 'fix the failing test'", "lore run opencode"],
    ),
    "plugins": (
        "List the plugins that loaded (with the hooks each implements), those the configuration\n"
        "blocks, and those that failed to import, with the reason.",
        ["lore plugins", "lore plugins --json"],
    ),
    "sessions": (
        "List stored sessions, newest first, of every project or of one (--project: a\n"
        "directory, relative paths and subdirectories resolve to their repository).",
        ["lore sessions", "lore sessions --project . --limit 0   # all of this repository's"],
    ),
    "show": (
        "Print a stored session as a transcript: who said what, tool calls and their output\n"
        "shortened. Without an id: the latest session. An id prefix is enough when it is\n"
        "unique; `d:<id>` shows a distillation.",
        [
            "lore show",
            "lore show 3f2a                 # the session whose id starts with 3f2a",
            "lore show d:9c1e --json",
        ],
    ),
    "forget": (
        "Remove a session and everything derived from it (passages, vectors, distillations,\n"
        "index rows) for good; a client resending that history does not store it again.",
        ["lore forget 3f2a", "lore forget 3f2a --yes --json"],
    ),
    "search": (
        "Full-text (BM25) search over the stored messages' passages: the plain keyword search,\n"
        "without the recall engine's fusion and reading of the query.",
        ["lore search 'connection refused'", "lore search flaky --session 3f2a --json"],
    ),
    "recall": (
        "Search everything remembered the way the model's recall tool does (messages,\n"
        "distillations, knowledge, entities), in the current project unless --project; or open\n"
        "one result by its id.",
        [
            "lore recall 'why did we pin duckdb'",
            "lore recall t:3f2a...:12     # open one result",
            "lore recall retry --scope session --session 3f2a",
        ],
    ),
    "distill": (
        "Distil stored sessions now (the gateway does it on idle): observation logs from the\n"
        "conversations, with the worker model. Progress on stderr.",
        ["lore distill", "lore distill --session 3f2a --json"],
    ),
    "distillations": (
        "List the observation logs and meta-distillations, of one session or all.",
        ["lore distillations", "lore distillations --session 3f2a --current"],
    ),
    "reindex": (
        "Embed every stored message and distillation not yet embedded for the embedding model\n"
        "(resumable; the gateway does this in the background while it runs). --full rebuilds.",
        ["lore reindex", "lore reindex --full --json"],
    ),
    "token": (
        "Print the gateway token that the local API, /mcp, /v1/events and remote clients need\n"
        "(X-Lore-Token or Authorization: Bearer); --rotate makes a new one.",
        ["lore token", 'curl -H "Authorization: Bearer $(lore token)" http://127.0.0.1:8377/lore/api/status'],
    ),
    "knowledge": (
        "Long-term knowledge of the project (decisions, patterns, preferences, architecture,\n"
        "gotchas): list, show, add, edit, delete and restore entries, settle contradictions,\n"
        "approve what a team shares. Ids (k:...) may be shortened to a unique prefix.",
        [
            "lore knowledge list",
            "lore knowledge add --category decision --title 'Pin DuckDB 1.1' --content 'because ...'",
        ],
    ),
    "knowledge list": (
        "The project's current entries and the global ones (--all: every project's).",
        ["lore knowledge list", "lore knowledge list --all --json"],
    ),
    "knowledge show": (
        "One entry with its text, every version and where each came from.",
        ["lore knowledge show k:76dc"],
    ),
    "knowledge add": (
        "Add an entry (one with the same title is edited instead). The text from --content, or\n"
        "from stdin. --global (or --scope global) files it for every project.",
        [
            "lore knowledge add --category gotcha --title 'CI needs TZ=UTC' --content 'dates are local'",
            "git log -1 --format=%B | lore knowledge add --category decision --title 'Move to httpx'",
        ],
    ),
    "knowledge edit": (
        "Append a version with the fields given; the others stay as they are.",
        ["lore knowledge edit k:76dc --content 'because the WAL ...'", "lore knowledge edit k:76dc --global"],
    ),
    "knowledge delete": (
        "Append a death certificate: the entry is no longer injected or exported, its history is\n"
        "kept, and it never comes back unless restored.",
        ["lore knowledge delete k:76dc"],
    ),
    "knowledge contradictions": (
        "Pairs of entries the worker judged contradictory (open) or not; --scan judges the\n"
        "project's candidate pairs now.",
        ["lore knowledge contradictions", "lore knowledge contradictions --scan"],
    ),
    "knowledge resolve": (
        "Settle a contradiction: keep one entry (the other is deleted) or keep both.",
        [
            "lore knowledge resolve k:76dc k:a1b2 --keep k:76dc",
            "lore knowledge resolve k:76dc k:a1b2 --keep-both",
        ],
    ),
    "knowledge pending": (
        "For a project bound to a team: entries whose current text waits for approval, and the\n"
        "rejected ones.",
        ["lore knowledge pending"],
    ),
    "knowledge approve": (
        "Approve the entry's current text: the team shares it (a decision record is kept).",
        ["lore knowledge approve k:76dc"],
    ),
    "knowledge reject": (
        "Reject the entry's current text: it stays out of what the team shares.",
        ["lore knowledge reject k:76dc --by alice"],
    ),
    "team": (
        "Bind the project to a team: only entries its policy lets through are exported to the\n"
        "repository's .lore.md (auto: all but sensitive; manual: only approved ones).",
        ["lore team", "lore team bind platform --policy manual", "lore team unbind"],
    ),
    "team show": (
        "The project's team and policy, and where the policy comes from.",
        ["lore team show --json"],
    ),
    "team bind": (
        "Bind the project to a team. With the manual policy nothing is shared until approved:\n"
        "the command says how many entries that leaves out of .lore.md.",
        ["lore team bind platform", "lore team bind platform --policy manual"],
    ),
    "team unbind": ("Share everything exportable again (decision records are kept).", ["lore team unbind"]),
    "team policy": (
        "Set the project's policy (auto or manual), or the team-wide default with --team-wide.",
        ["lore team policy manual", "lore team policy auto --team-wide"],
    ),
    "entity": (
        "The people, services, tools, repositories and files the project knows by name, with\n"
        "aliases and relations; recall joins questions to them. Refs: an e:... id (a unique\n"
        "prefix is enough), a name or an alias.",
        ["lore entity list", "lore entity add payments-api --kind service --alias payments"],
    ),
    "entity list": (
        "The project's entities and the global ones (--all: every project's).",
        ["lore entity list --json"],
    ),
    "entity show": ("One entity with its aliases and relations.", ["lore entity show payments-api"]),
    "entity add": (
        "Add an entity (a known name gets the new aliases instead); --global for every project.",
        ["lore entity add payments-api --kind service --alias payments --alias pay-svc"],
    ),
    "entity alias": (
        "Add an alias (or --remove one); an alias another entity has is refused.",
        ["lore entity alias payments-api billing", "lore entity alias payments-api billing --remove"],
    ),
    "entity relate": (
        "Add a relation <ref> <predicate> <target> (or --remove it).",
        ["lore entity relate payments-api depends_on postgres"],
    ),
    "entity rename": (
        "Give the entity another canonical name (the old one stays an alias).",
        ["lore entity rename pay-svc payments-api"],
    ),
    "entity merge": (
        "Merge <other> into <keep>: its names and relations move over, its id points at <keep>.",
        ["lore entity merge payments-api pay-svc"],
    ),
    "export": (
        "Write the project's shareable knowledge as .lore.md in the repository root (the\n"
        "gateway does it on idle), or as JSON. Sensitive entries stay out unless asked;\n"
        "restricted ones never leave.",
        ["lore export", "lore export --format json -o knowledge.json", "lore export -o - | less"],
    ),
    "import": (
        "Read knowledge into the store: a .lore.md, a mem0 export, a JSON list of entries, or a\n"
        "CLAUDE.md / AGENTS.md (its preferences wait for adoption). With --from, a coding\n"
        "agent's own session history instead (idempotent, resumable).",
        [
            "lore import .lore.md",
            "lore import CLAUDE.md --format agents",
            "lore import --from claude-code --since 30d --dry-run",
        ],
    ),
    "store": (
        "Operations on a whole store: apply its pending schema migrations, or copy an existing\n"
        "memory into another store (a DuckDB file into a team's PostgreSQL database).",
        ["lore store migrate", "lore store copy --to postgresql://lore@db.internal/lore"],
    ),
    "store migrate": (
        "Open the configured store, which applies its pending schema migrations, and report the\n"
        "schema version it had and has now. A gateway applies them at its start as well; a\n"
        "DuckDB file held by a running gateway cannot be opened (stop it first).",
        ["lore store migrate", "lore store migrate --json"],
    ),
    "store copy": (
        "Copy every tier of one store into another through the store interface of both (any\n"
        "pair of backends): messages with their sessions and projects, session state and spend,\n"
        "distillations, knowledge with every version and death certificate and its metrics,\n"
        "contradictions, entities, team bindings and policies, decisions, and the event log.\n"
        "The destination cuts its own full-text passages; vectors are embedded again by its\n"
        "indexer. Counts every tier on both sides at the end (exit 1 on a mismatch). Refuses a\n"
        "destination that holds data unless --merge; a second copy adds nothing, so a copy cut\n"
        "short goes on when run again with --merge. A store is a DSN, BACKEND:LOCATION, a\n"
        "backend name, a .json configuration file or a DuckDB file (docs/storage.md).",
        [
            "lore store copy --from ~/.local/share/lore/lore.duckdb --to postgresql://lore@db.internal/lore",
            "lore store copy --to postgres            # the configured store into store-postgres's DSN",
            "lore store copy --from duckdb --to duckdb:/backup/lore.duckdb --json",
            "lore store copy --from old.duckdb --to postgresql://lore@db/lore --merge  # go on after Ctrl-C",
        ],
    ),
    "status": (
        "Is the gateway up; the store's path, size and counts; worker, spend and throttling.",
        ["lore status", "lore status --json"],
    ),
}


def example_lines(block: str) -> tuple[str, ...]:
    """The command lines of an ``examples:`` block (what :func:`examples` makes of them)."""
    return tuple(line.strip() for line in block.splitlines()[1:] if line.strip())


def examples(lines: list[str]) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def apply(parser: argparse.ArgumentParser, path: str = "") -> None:
    """Give every subcommand of ``parser`` its description and examples from :data:`HELP`
    (where it has none of its own)."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, sub in action.choices.items():
            key = f"{path} {name}".strip()
            if key in HELP:
                description, lines = HELP[key]
                if not sub.description:
                    sub.description = description
                if not sub.epilog:
                    sub.epilog = examples(lines)
                sub.formatter_class = argparse.RawDescriptionHelpFormatter
            apply(sub, key)
