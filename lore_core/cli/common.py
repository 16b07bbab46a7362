"""What the ``lore`` commands share: printing, ``--limit`` and ``--project``, id prefixes,
and the bootstrap a command runs with the plugins ``lore_core.cli.main`` was given."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from lore_core.cli.api_client import ApiClient, CommandError, extra_plugins
from lore_core.cli.help_texts import HELP


def configure_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request URL at INFO: noise on a proxy, and a URL can carry credentials.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def cli_bootstrap(args: argparse.Namespace) -> Any:
    """:func:`lore_core.plugins.bootstrap` with the plugins the command line was given."""
    from lore_core.plugins import bootstrap

    return bootstrap(extra_plugins=extra_plugins(args))


def described(name: str) -> tuple[str, tuple[str, ...]]:
    """A built-in command's description and examples (:data:`lore_core.cli.help_texts.HELP`)."""
    description, examples = HELP[name]
    return description, tuple(examples)


def when(ts: float | None) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def print_json(payload: Any) -> None:
    import json

    print(json.dumps(payload, indent=2, ensure_ascii=False, default=str))


def clip(line: str, limit: int) -> str:
    line = line.rstrip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def confirmed(question: str) -> bool:
    """Ask on stderr (stdout stays the command's output), answer on stdin: yes or not."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


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


# -- projects -------------------------------------------------------------------------------


def project_of(args: argparse.Namespace) -> str:
    """``--project``, else the current directory: the project a harness started here has
    (its repository root, :func:`lore_core.projects.cli_project`)."""
    from lore_core.projects import cli_project

    return cli_project(args.project)


def project_filter(args: argparse.Namespace) -> str | None:
    """An optional ``--project`` (``.``, a subdirectory, a trailing slash: its repository
    root), or ``None`` for every project."""
    return project_of(args) if args.project else None


def search_project(args: argparse.Namespace) -> str | None:
    """What ``lore search`` and ``lore recall`` search, as the knowledge and entity commands
    do: the current project (or --project), every project with --all; a session names its
    own."""
    return None if args.all or args.session else project_of(args)


def where_searched(project: str | None) -> str:
    return f" in project {project} (--all searches every project)" if project else ""


# -- ids given by a unique prefix -------------------------------------------------------------


def unique_prefix(value: str, candidates: Sequence[str], what: str) -> str:
    """The candidate ``value`` names: itself when it is one, else the only candidate it
    begins; ``value`` unchanged when none does (the command's own "not found" then says
    so). Two or more: an error listing them."""
    if value in candidates:
        return value
    found = [c for c in candidates if c.startswith(value)]
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise CommandError(f"{value!r} begins more than one {what}: {shown}; give more of the id", 2)
    return found[0] if found else value


def session_ids(client: ApiClient) -> list[str]:
    return [s["id"] for s in client.get("/sessions", limit=LIMIT_ALL)]


def session_ref(client: ApiClient, value: str) -> str:
    return unique_prefix(value, session_ids(client), "session")


def distillation_ref(client: ApiClient, value: str) -> str:
    ids = [f"d:{d['id']}" for d in client.get("/distillations")]
    return unique_prefix(value, ids, "distillation")


def knowledge_ref(client: ApiClient, value: str) -> str:
    """A knowledge id, with or without its ``k:``."""
    ids = [e["id"] for e in client.get("/knowledge")]
    return unique_prefix(value if value.startswith("k:") else f"k:{value}", ids, "knowledge entry")


def entity_ref(client: ApiClient, value: str) -> str:
    """An ``e:`` id prefix to the whole id; a name or an alias as given."""
    if not value.startswith("e:"):
        return value
    return unique_prefix(value, [e["id"] for e in client.get("/entities")], "entity")


def quoted(value: str, safe: str = "") -> str:
    """``value`` as one segment of a route's path."""
    from urllib.parse import quote

    return quote(value, safe=safe)


class ProgressBar:
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
