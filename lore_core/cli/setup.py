"""``lore setup <agent>`` and ``lore setup undo <agent>``: point a client at the gateway in its
own configuration files, for clients started without ``lore run`` (from an IDE, a script, a
desktop launcher), and take that back exactly.

The harness says what to write (:meth:`~lore_core.interfaces.Harness.setup_settings`: a file,
a key path, a value); this module writes it and keeps a ledger in the data directory
(``setup.json``) of what each key held before. ``undo`` puts back the earlier value (or
removes the key, and a file or object it created) only where the key still holds what setup
wrote: a value the user changed since is theirs and is left alone, with a word. Before a file
is first changed, a copy is kept under ``setup-backups/`` in the data directory.

Files are read and written whole: JSON objects (``settings.json``, ``opencode.json``; a file
that does not parse is refused, untouched) and TOML top-level keys (Codex's ``config.toml``,
edited as text so comments and tables stay as they are, and parsed again before it is
written).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from lore_core.cli.help_texts import example_lines
from lore_core.config import default_data_dir
from lore_core.interfaces import ClientSetting, Command, Harness
from lore_core.storage.private import users_umask

LEDGER_NAME = "setup.json"
BACKUP_DIR_NAME = "setup-backups"
_MISSING = object()


class SetupError(Exception):
    """A file setup cannot change safely; the message names it and says why."""


@attrs.define
class Change:
    """One key set (or, for undo, put back) in a client's file."""

    path: str
    key: list[str]
    value: Any
    had: bool = False
    previous: Any = None
    #: How many of ``key``'s leading objects existed before setup (the rest it created).
    existing_depth: int = 0
    created_file: bool = False
    #: For undo: put back / kept (the user changed it since) / gone (nothing to put back).
    outcome: str = ""

    def shown_key(self) -> str:
        return ".".join(self.key)


# ---------------------------------------------------------------------------------------------
# The ledger: what setup changed, per agent
# ---------------------------------------------------------------------------------------------


def ledger_path(data_dir: Path | None = None) -> Path:
    return (data_dir or default_data_dir()) / LEDGER_NAME


def read_ledger(data_dir: Path | None = None) -> dict[str, Any]:
    path = ledger_path(data_dir)
    try:
        ledger = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise SetupError(f"{path} is not valid JSON ({exc}); move it away to start over") from None
    return ledger if isinstance(ledger, dict) else {}


def _write_ledger(ledger: dict[str, Any], data_dir: Path | None = None) -> None:
    path = ledger_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not ledger:
        path.unlink(missing_ok=True)
        return
    _replace(path, json.dumps(ledger, indent=2) + "\n", mode=0o600)


# ---------------------------------------------------------------------------------------------
# Reading and writing one client file
# ---------------------------------------------------------------------------------------------


def _is_toml(path: Path) -> bool:
    return path.suffix == ".toml"


def _load(path: Path) -> tuple[dict[str, Any], str | None]:
    """The file's values and its text (``None``: no such file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise SetupError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        doc = tomllib.loads(text) if _is_toml(path) else (json.loads(text) if text.strip() else {})
    except ValueError as exc:
        raise SetupError(f"{path} does not parse ({exc}); fix it, or set the values by hand") from None
    if not isinstance(doc, dict):
        raise SetupError(f"{path} does not hold an object; fix it, or set the values by hand")
    return doc, text


def _lookup(doc: dict[str, Any], key: list[str]) -> tuple[Any, int]:
    """The value at ``key`` (``_MISSING`` when absent) and how many leading objects exist."""
    node: Any = doc
    for depth, part in enumerate(key[:-1]):
        child = node.get(part) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            if child is not None:
                raise SetupError(f"{'.'.join(key[: depth + 1])} is not an object")
            return _MISSING, depth
        node = child
    return node.get(key[-1], _MISSING), len(key) - 1


def current_value(path: str, key: list[str]) -> Any:
    """What the client's file holds at ``key`` now (``None`` when nothing: ``lore doctor``)."""
    doc, _ = _load(Path(path))
    value, _ = _lookup(doc, key)
    return None if value is _MISSING else value


def _assign(doc: dict[str, Any], key: list[str], value: Any) -> None:
    node = doc
    for part in key[:-1]:
        node = node.setdefault(part, {})
    node[key[-1]] = value


def _remove(doc: dict[str, Any], key: list[str], existing_depth: int) -> None:
    """Remove the key, then the objects setup created on its way that are now empty."""
    nodes = [doc]
    for part in key[:-1]:
        nodes.append(nodes[-1][part])
    nodes[-1].pop(key[-1], None)
    for depth in range(len(key) - 1, existing_depth, -1):
        if nodes[depth]:
            break
        nodes[depth - 1].pop(key[depth - 1], None)


_TABLE_LINE = re.compile(r"^\s*\[")


def _toml_text(text: str, name: str, value: Any) -> str:
    """``text`` with the top-level ``name = value`` line set (``_MISSING``: removed). Top-level
    keys come before the first table, so that is where a new one goes."""
    pattern = re.compile(rf"^\s*{re.escape(name)}\s*=")
    lines = text.splitlines(keepends=True)
    first_table = next((i for i, line in enumerate(lines) if _TABLE_LINE.match(line)), len(lines))
    at = next((i for i in range(first_table) if pattern.match(lines[i])), None)
    if value is _MISSING:
        if at is not None:
            del lines[at]
        return "".join(lines)
    line = f"{name} = {json.dumps(value)}\n"  # a JSON string, number or boolean is valid TOML
    if at is not None:
        lines[at] = line
    else:
        # After the last top-level line, not after the blank lines that set the tables apart.
        at = first_table
        while at and not lines[at - 1].strip():
            at -= 1
        if at and not lines[at - 1].endswith("\n"):
            lines[at - 1] += "\n"
        lines.insert(at, line)
    return "".join(lines)


def _replace(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (never half a file),
    keeping the file's mode."""
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644 & ~_current_umask()
    tmp = path.with_name(f".{path.name}.lore-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _render(path: Path, doc: dict[str, Any], old_text: str | None, key: list[str], value: Any) -> str:
    if _is_toml(path):
        text = _toml_text(old_text or "", key[0], value)
        tomllib.loads(text)  # never write a file the client could not read
        return text
    return json.dumps(doc, indent=2) + "\n"


# ---------------------------------------------------------------------------------------------
# Setup and undo
# ---------------------------------------------------------------------------------------------


def plan_setup(settings: list[ClientSetting], recorded: list[dict[str, Any]]) -> list[Change]:
    """The changes ``settings`` make, each with what its key held before (for a key an
    earlier setup already changed: what it held before that setup)."""
    earlier = {(r["path"], tuple(r["key"])): r for r in recorded}
    changes = []
    for setting in settings:
        if _is_toml(setting.path) and len(setting.key) != 1:
            raise SetupError(f"{setting.path}: only top-level TOML keys can be set ({'.'.join(setting.key)})")
        doc, text = _load(setting.path)
        current, depth = _lookup(doc, list(setting.key))
        change = Change(
            str(setting.path),
            list(setting.key),
            setting.value,
            had=current is not _MISSING,
            previous=None if current is _MISSING else current,
            existing_depth=depth,
            created_file=text is None,
        )
        before = earlier.get((change.path, tuple(change.key)))
        if before is not None:
            change.had, change.previous = before["had"], before["previous"]
            change.existing_depth, change.created_file = before["existing_depth"], before["created_file"]
        changes.append(change)
    return changes


def apply_setup(agent: str, changes: list[Change], data_dir: Path | None = None) -> list[Path]:
    """Write the changes (file by file) and the ledger; returns the backups made."""
    backups = []
    for path, group in _by_file(changes):
        doc, text = _load(path)
        if text is not None:
            backups.append(_backup(agent, path, text, data_dir))
        for change in group:
            _assign(doc, change.key, change.value)
            text = _render(path, doc, text, change.key, change.value)
        with users_umask():  # the client's own folder, as the client would create it
            path.parent.mkdir(parents=True, exist_ok=True)
        _replace(path, text or "")
    ledger = read_ledger(data_dir)
    ledger[agent] = {
        "setAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": [attrs.asdict(c, filter=lambda a, _: a.name != "outcome") for c in changes],
    }
    _write_ledger(ledger, data_dir)
    return backups


def undo_setup(agent: str, data_dir: Path | None = None, dry_run: bool = False) -> list[Change]:
    """Put back what setup changed for ``agent`` where the user has not changed it since."""
    ledger = read_ledger(data_dir)
    entry = ledger.get(agent)
    if entry is None:
        raise SetupError(f"{agent} was not set up by lore setup (nothing to undo)")
    changes = [Change(**{**r, "outcome": ""}) for r in entry["settings"]]
    for path, group in _by_file(changes):
        doc, text = _load(path)
        for change in group:
            current, _ = _lookup(doc, change.key)
            if current is _MISSING and text is None:
                change.outcome = "gone"
                continue
            if current != change.value:
                change.outcome = "kept"
                continue
            change.outcome = "put back"
            value = change.previous if change.had else _MISSING
            if change.had:
                _assign(doc, change.key, change.previous)
            else:
                _remove(doc, change.key, change.existing_depth)
            text = _render(path, doc, text, change.key, value)
        if dry_run or text is None or not any(c.outcome == "put back" for c in group):
            continue
        created = all(c.created_file for c in group)
        if created and not doc and not (_is_toml(path) and text.strip()):
            path.unlink(missing_ok=True)
        else:
            _replace(path, text)
    if not dry_run:
        del ledger[agent]
        _write_ledger(ledger, data_dir)
    return changes


def _by_file(changes: list[Change]) -> Iterator[tuple[Path, list[Change]]]:
    order: dict[str, list[Change]] = {}
    for change in changes:
        order.setdefault(change.path, []).append(change)
    for path, group in order.items():
        yield Path(path), group


def _backup(agent: str, path: Path, text: str, data_dir: Path | None) -> Path:
    folder = (data_dir or default_data_dir()) / BACKUP_DIR_NAME / agent
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{path.name}.{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    target.write_text(text, encoding="utf-8")
    return target


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------

DESCRIPTION = """\
Point a coding agent at the gateway in the agent's own configuration files, so it goes
through Lore however it is started (not only with `lore run`). `lore setup undo <agent>` puts
back what was there; a value you changed since is left as you set it. Without an agent: which
agents are set up."""

EXAMPLES = """\
examples:
  lore setup claude            # ~/.claude/settings.json: ANTHROPIC_BASE_URL and friends
  lore setup codex --dry-run   # show what would change in ~/.codex/config.toml
  lore setup opencode          # ~/.config/opencode/opencode.json
  lore setup                   # which agents are set up
  lore setup undo claude       # put the earlier values back"""


class SetupCommand(Command):
    """``lore setup [undo] <agent>``."""

    name = "setup"
    help = "point an agent at the gateway in its own configuration (setup undo: take it back)"
    description = DESCRIPTION
    examples = example_lines(EXAMPLES)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("agent", nargs="?", help="claude, codex, opencode (or 'undo')")
        parser.add_argument("undo_agent", nargs="?", metavar="AGENT", help="with undo: the agent")
        parser.add_argument("--dry-run", action="store_true", help="say what would change; write nothing")
        parser.add_argument(
            "--no-start", action="store_true", help="do not start a gateway in the background if none runs"
        )
        parser.add_argument("--json", action="store_true", help="print what changed as JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_setup(args)


def cmd_setup(args: argparse.Namespace) -> int:
    from lore_core.cli.launcher import LaunchError, _load_settings, ensure_gateway, find_harness, gateway_url

    try:
        if args.agent is None:
            return _show_setups(args.json)
        if args.agent == "undo":
            if not args.undo_agent:
                print("lore: setup undo needs the agent: lore setup undo claude", file=sys.stderr)
                return 2
            return _undo(args.undo_agent, args.dry_run, args.json)
        if args.undo_agent:
            print(f"lore: unexpected argument {args.undo_agent!r}", file=sys.stderr)
            return 2
        config, registry = _load_settings()
        harness: Harness = find_harness(registry.harnesses, args.agent)
        url = gateway_url(config.server.host, config.server.port)
        settings = harness.setup_settings(url)
        if not settings:
            print(
                f"lore: {args.agent} cannot be set up in its own files; use `lore run {args.agent}`",
                file=sys.stderr,
            )
            return 1
        changes = plan_setup(settings, read_ledger().get(args.agent, {}).get("settings", []))
        backups = [] if args.dry_run else apply_setup(args.agent, changes)
        gateway = None
        if not args.dry_run and not args.no_start:
            gateway = ensure_gateway(config.server.host, config.server.port).describe()
    except SetupError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 1
    except LaunchError as exc:  # no such harness, or the gateway did not start
        print(f"lore: {exc}", file=sys.stderr)
        return 2
    if args.json:
        payload = {
            "agent": args.agent,
            "gateway": url,
            "dryRun": args.dry_run,
            "changes": [_change_json(c) for c in changes],
            "backups": [str(b) for b in backups],
            "gatewayStatus": gateway,
        }
        print(json.dumps(payload, indent=2))
        return 0
    verb = "would set" if args.dry_run else "set"
    for change in changes:
        was = f"was {json.dumps(change.previous)}" if change.had else "was unset"
        print(f"{verb} {change.path}: {change.shown_key()} = {json.dumps(change.value)} ({was})")
    for backup in backups:
        print(f"kept a copy of the earlier file: {backup}")
    if not args.dry_run:
        name = harness.display_name
        print(
            f"{name} now talks to the gateway at {url} however it is started; "
            f"`lore setup undo {args.agent}` takes it back."
        )
        if gateway:
            print(f"gateway: {gateway}")
        print("After a restart, start the gateway again with `lore serve` (or any `lore run`).")
        if config.server.require_token_for_memory:
            print(
                "server.requireTokenForMemory is on: the agent gets memory only with the token "
                "in X-Lore-Token."
            )
    return 0


def _undo(agent: str, dry_run: bool, as_json: bool) -> int:
    changes = undo_setup(agent, dry_run=dry_run)
    if as_json:
        print(
            json.dumps(
                {"agent": agent, "dryRun": dry_run, "changes": [_change_json(c) for c in changes]}, indent=2
            )
        )
        return 0
    for change in changes:
        where = f"{change.path}: {change.shown_key()}"
        if change.outcome == "kept":
            print(f"left {where} as it is: it was changed after setup")
        elif change.outcome == "gone":
            print(f"nothing to put back in {change.path}: the file is gone")
        elif change.had:
            verb = "would put back" if dry_run else "put back"
            print(f"{verb} {where} = {json.dumps(change.previous)}")
        else:
            print(f"{'would remove' if dry_run else 'removed'} {where}")
    return 0


def _show_setups(as_json: bool) -> int:
    ledger = read_ledger()
    if as_json:
        print(json.dumps(ledger, indent=2))
        return 0
    if not ledger:
        print("no agent is set up (lore setup claude|codex|opencode)")
    for agent, entry in sorted(ledger.items()):
        files = sorted({s["path"] for s in entry["settings"]})
        print(f"{agent}: set up {entry.get('setAt', '?')} in {', '.join(files)}")
    return 0


def _change_json(change: Change) -> dict[str, Any]:
    data = {"path": change.path, "key": change.key, "value": change.value, "had": change.had}
    if change.had:
        data["previous"] = change.previous
    if change.outcome:
        data["outcome"] = change.outcome
    return data


def undo_every_setup(data_dir: Path | None = None, dry_run: bool = False) -> dict[str, list[Change]]:
    """Undo every agent's setup (``lore uninstall``)."""
    return {agent: undo_setup(agent, data_dir, dry_run) for agent in sorted(read_ledger(data_dir))}
