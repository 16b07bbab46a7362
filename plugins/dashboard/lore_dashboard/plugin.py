"""lore-dashboard's hooks: the ``/ui`` mount and the ``lore dashboard`` command.

Nothing heavy is imported here: every gateway and ``lore`` command loads this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lore_core import hookimpl
from lore_core.interfaces import Command, Mount

#: The configuration the gateway loaded (``lore_configure`` runs before the mounts register):
#: the reader prices each turn with the same table as the gateway (``models`` overrides too).
_config: Any = None


@hookimpl
def lore_configure(config: Any) -> None:
    global _config
    _config = config


@hookimpl
def lore_register_commands(register: Callable[[Command], None]) -> None:
    from lore_dashboard.command import DashboardCommand

    register(DashboardCommand())


@hookimpl
def lore_register_mounts(register: Callable[[Mount], None]) -> None:
    from lore_core.context.pricing import PriceTable
    from lore_dashboard.app import Dashboard

    register(Dashboard(prices=PriceTable.from_config(_config) if _config is not None else PriceTable()))
