"""The ``lore`` command: the parser and every subcommand (:mod:`~lore_core.cli.commands`), the
readers that reach a running gateway's local API or the store file, and ``lore run``
(:mod:`~lore_core.cli.launcher`)."""

from lore_core.cli.commands import main

__all__ = ["main"]
