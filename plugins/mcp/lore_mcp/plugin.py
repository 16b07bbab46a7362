"""lore-mcp's hooks: the ``lore mcp`` command (stdio) and the ``/mcp`` mount (streamable HTTP).

Nothing of the MCP SDK is imported here: every gateway and ``lore`` command loads this
module, and the SDK (pydantic, starlette) is imported only when MCP is used.
"""

from __future__ import annotations

from collections.abc import Callable

from lore_core import hookimpl
from lore_core.interfaces import Command, Mount
from lore_mcp.mount import McpMount
from lore_mcp.stdio import McpCommand


@hookimpl
def lore_register_commands(register: Callable[[Command], None]) -> None:
    register(McpCommand())


@hookimpl
def lore_register_mounts(register: Callable[[Mount], None]) -> None:
    register(McpMount())
