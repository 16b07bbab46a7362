"""lore-dashboard's hooks: the ``/ui`` mount and the ``lore dashboard`` command.

Nothing heavy is imported here: every gateway and ``lore`` command loads this module.
"""

from __future__ import annotations

from collections.abc import Callable

from lore_core import hookimpl
from lore_core.interfaces import Command, Mount


@hookimpl
def lore_register_commands(register: Callable[[Command], None]) -> None:
    from lore_dashboard.command import DashboardCommand

    register(DashboardCommand())


@hookimpl
def lore_register_mounts(register: Callable[[Mount], None]) -> None:
    from lore_dashboard.app import Dashboard

    register(Dashboard())
