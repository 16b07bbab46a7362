"""``lore uninstall [--purge] [--dry-run]``: take Lore off this machine in the right order.

1. stop every gateway ``lore run`` or ``lore serve`` started (their queued writes are flushed);
2. undo every ``lore setup`` (the clients' own files get their earlier values back);
3. with ``--purge``: remove the data directory (the store, its indexes and journal, the
   token, logs) and the user configuration folder; a store placed elsewhere with
   ``store.path``, and the projects' own ``.lore.md`` / ``.lore.json``, are named and left;
4. remove the program itself when it was installed with ``uv tool`` or ``pipx`` (the command
   is run, and printed when the installer is not on PATH); otherwise say how.

Without ``--purge`` the memory stays where it is, so installing again finds it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from lore_core.cli.help_texts import example_lines
from lore_core.config import ConfigError, default_data_dir, load_config, user_config_path
from lore_core.interfaces import Command

DESCRIPTION = """\
Stop every gateway, undo every `lore setup`, and remove the program (when installed with
`uv tool install` or `pipx`). The memory (store, token, logs) is kept unless --purge."""

EXAMPLES = """\
examples:
  lore uninstall --dry-run     # say what would be done
  lore uninstall               # keep the memory for a later install
  lore uninstall --purge       # remove the memory and the configuration too"""


class UninstallCommand(Command):
    """``lore uninstall``."""

    name = "uninstall"
    help = "stop the gateways, undo every setup, remove the program (--purge: the memory too)"
    description = DESCRIPTION
    examples = example_lines(EXAMPLES)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--purge", action="store_true", help="also remove the data directory and the user configuration"
        )
        parser.add_argument("--dry-run", action="store_true", help="say what would be done; change nothing")
        parser.add_argument(
            "--keep-program", action="store_true", help="leave the installed program (only stop, undo, purge)"
        )
        parser.add_argument("--json", action="store_true", help="print what was done as JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_uninstall(args)


def program_removal() -> tuple[list[str] | None, str]:
    """The command that removes this installation, and how it was installed."""
    prefix = Path(sys.prefix)
    if (prefix / "uv-receipt.toml").is_file():
        return ["uv", "tool", "uninstall", prefix.name], "uv tool"
    if (prefix / "pipx_metadata.json").is_file():
        return ["pipx", "uninstall", prefix.name], "pipx"
    return None, "a Python environment of its own"


def cmd_uninstall(args: argparse.Namespace) -> int:
    from lore_core.cli.launcher import running_gateways, stop_gateway
    from lore_core.cli.setup import SetupError, undo_every_setup

    dry = args.dry_run
    report: dict[str, Any] = {"dryRun": dry, "gateways": [], "setups": {}, "removed": [], "left": []}
    lines: list[str] = []
    code = 0

    for port, pid in sorted(running_gateways().items()):
        if dry:
            outcome = "running"
        else:
            outcome = stop_gateway(port).outcome
        report["gateways"].append({"port": port, "pid": pid, "outcome": outcome})
        if dry:
            lines.append(f"would stop the gateway on port {port} (pid {pid})")
        elif outcome in ("stopped", "stale", "absent"):
            lines.append(f"stopped the gateway on port {port} (pid {pid})")
        else:
            lines.append(
                f"the gateway on port {port} (pid {pid}) did not stop: lore stop --force --port {port}"
            )
            code = 1

    try:
        undone = undo_every_setup(dry_run=dry)
    except SetupError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 1
    for agent, changes in undone.items():
        report["setups"][agent] = [{"path": c.path, "key": c.key, "outcome": c.outcome} for c in changes]
        kept = [c for c in changes if c.outcome == "kept"]
        lines.append(f"{'would undo' if dry else 'undid'} lore setup {agent}")
        lines.extend(f"  left {c.path}: {'.'.join(c.key)}: changed after setup" for c in kept)

    if args.purge:
        for path in (default_data_dir(), user_config_path().parent):
            if path.exists():
                if not dry:
                    shutil.rmtree(path)
                report["removed"].append(str(path))
                lines.append(f"{'would remove' if dry else 'removed'} {path}")
        outside = _store_outside(default_data_dir())
        if outside:
            report["left"].append(outside)
            lines.append(f"left the store at {outside} (store.path): remove it yourself if you want it gone")
        lines.append("left the projects' own .lore.md and .lore.json files (they are the repositories')")
    else:
        lines.append(f"kept the memory in {default_data_dir()} (lore uninstall --purge removes it)")

    command, how = program_removal()
    report["program"] = {"installedWith": how, "command": command}
    if args.keep_program:
        lines.append("left the program installed (--keep-program)")
    elif command is None:
        lines.append(
            f"the program runs from {how} ({sys.prefix}): remove that environment, or "
            f"`{Path(sys.executable).name} -m pip uninstall lore lore-core` in it"
        )
    elif dry:
        lines.append(f"would run: {' '.join(command)}")
    else:
        runner = shutil.which(command[0])
        if runner is None:
            lines.append(f"{command[0]} is not on PATH: run `{' '.join(command)}` to remove the program")
        else:
            # Last: the running interpreter's files may go; nothing of it is needed after this.
            done = subprocess.run([runner, *command[1:]], capture_output=True, text=True)
            report["program"]["exitCode"] = done.returncode
            if done.returncode == 0:
                lines.append(f"removed the program ({' '.join(command)})")
            else:
                lines.append(f"`{' '.join(command)}` failed: {done.stderr.strip() or done.stdout.strip()}")
                code = 1

    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(lines))
    return code


def _store_outside(data_dir: Path) -> str | None:
    """``store.path`` when it names a place outside the data directory."""
    try:
        raw = load_config().store.path
    except ConfigError:  # a broken configuration must not stop an uninstall
        return None
    if not raw:
        return None
    path = Path(raw).expanduser()
    try:
        path.resolve().relative_to(data_dir.resolve())
    except ValueError:
        return str(path)
    return None
