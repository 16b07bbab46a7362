"""The ``lore`` command line: its parser and :func:`main`.

Every subcommand is a :class:`~lore_core.interfaces.Command` registered through
``lore_register_commands``: the built-in ones by the built-in plugin
:mod:`lore_core.builtin.commands` (their code is in :mod:`lore_core.cli`, one module per
family), the others by installed plugins. A command that reads or changes the store does
so through the local API's routes (:mod:`lore_core.cli.api_client`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence

from lore_core.config import ConfigError
from lore_core.interfaces import Command
from lore_core.plugins import COMMANDS_PLUGIN, PluginError, Registry, make_plugin_manager


def build_parser(
    argv: Sequence[str] | None = None, extra_plugins: Iterable[object] = ()
) -> argparse.ArgumentParser:
    """The ``lore`` parser: the built-in commands; with the command line ``argv``, also the
    plugins' (and ``extra_plugins``') commands when it names no built-in one, since loading
    the plugins costs most of a second that ``lore serve`` or ``lore status`` need not pay to
    parse their arguments."""
    from lore_core import __version__

    parser = argparse.ArgumentParser(prog="lore", description="Lore: a memory layer for AI coding agents.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"lore-core {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    if argv is not None and "--version" in argv:
        return parser  # answered while parsing: no command is needed
    # The built-in commands' plugin alone (the kernel's other built-ins are not needed here).
    builtins = Registry.collect(make_plugin_manager(load_entrypoints=False, builtins=(COMMANDS_PLUGIN,)))
    for command in builtins.commands.values():
        _add_command(sub, command)
    named = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    if argv is not None and named not in sub.choices:
        registry = Registry.collect(make_plugin_manager(extra=extra_plugins))
        for command in registry.commands.values():
            if command.name not in sub.choices:
                _add_command(sub, command)
    # Descriptions and examples of the built-in commands' actions (lore_core/cli/help_texts.py).
    from lore_core.cli import help_texts

    help_texts.apply(parser)
    return parser


def _add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], command: Command) -> None:
    from lore_core.cli import help_texts

    parser = sub.add_parser(
        command.name,
        help=command.help,
        description=command.description or command.help,
        epilog=help_texts.examples(list(command.examples)) if command.examples else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.configure(parser)
    parser.set_defaults(func=command.run)


def main(argv: Sequence[str] | None = None, extra_plugins: Iterable[object] = ()) -> int:
    """Run ``lore`` with ``argv`` (default: the process's arguments); ``extra_plugins`` are
    plugin objects loaded beside the installed ones, for this run (tests pass theirs here)."""
    from lore_core.storage.private import restrict_umask

    # Everything any lore command creates is its user's only (the store, its WAL and indexes,
    # the journal, the token, logs, exports), whatever the shell's umask: a umask because
    # DuckDB and LanceDB create files of their own. See lore_core/storage/private.py.
    restrict_umask()
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = tuple(extra_plugins)
    try:
        parser = build_parser(argv, extra)
    except PluginError as exc:
        print(f"lore: plugin error: {exc}", file=sys.stderr)
        return 2
    # What each command's bootstrap loads beside the installed plugins
    # (lore_core.cli.api_client.extra_plugins).
    parser.set_defaults(extra_plugins=extra)
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
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
