"""The ``lore`` command's own subcommands, registered through the door plugins use
(``lore_register_commands``): each is a :class:`~lore_core.interfaces.Command` in the module
of its family under :mod:`lore_core.cli`.

Importing this module imports those modules, which import only what building the parser
needs: a command imports what it runs with when it runs.
"""

from __future__ import annotations

from collections.abc import Callable

from lore_core.hookspecs import hookimpl
from lore_core.interfaces import Command


def builtin_commands() -> list[Command]:
    """Every built-in command, in the order ``lore --help`` lists them."""
    from lore_core.cli import distill, entities, knowledge, reindex, serving, sessions, status, transfer
    from lore_core.cli.completion import CompletionCommand
    from lore_core.cli.lifecycle import ConfigCommand, DoctorCommand, StopCommand
    from lore_core.cli.setup import SetupCommand
    from lore_core.cli.spend import SpendCommand
    from lore_core.cli.store import StoreCommand
    from lore_core.cli.uninstall import UninstallCommand

    return [
        serving.Serve(),
        serving.Run(),
        serving.Plugins(),
        sessions.Sessions(),
        sessions.Show(),
        sessions.Forget(),
        sessions.Search(),
        sessions.Recall(),
        distill.Distill(),
        distill.Distillations(),
        reindex.Reindex(),
        serving.Token(),
        knowledge.Knowledge(),
        knowledge.Team(),
        entities.Entity(),
        transfer.Export(),
        transfer.Import(),
        status.Status(),
        StopCommand(),
        DoctorCommand(),
        ConfigCommand(),
        SetupCommand(),
        CompletionCommand(),
        UninstallCommand(),
        SpendCommand(),
        StoreCommand(),
    ]


@hookimpl
def lore_register_commands(register: Callable[[Command], None]) -> None:
    for command in builtin_commands():
        register(command)
