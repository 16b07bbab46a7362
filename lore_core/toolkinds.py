"""The one tool-kind table: what a coding client's tool does, by the tool's name.

Clients name the same thing differently (Claude Code's ``Read``, Codex's ``read_file``,
OpenCode's ``read``); the rules that read tool calls ask for a *kind* instead of a name:
passages tag a file edit or a subagent by it (:mod:`lore_core.storage.tags`), the
extractive observer writes a read or a search its own way (:mod:`lore_core.distill.extractive`).
A kind says what a tool does, finely enough that each rule takes the kinds it needs.

The kernel's defaults are :data:`DEFAULT_TOOL_KINDS`, here and nowhere else. A plugin adds
its client's tools through the ``lore_tool_kinds`` hook (``{"my_edit": "edit"}``);
``Registry.collect`` merges them (:func:`merge`) and ``bootstrap`` installs the result
(:func:`install`) before anything is cut or distilled: the stores cut passages where no
registry reaches, so the table is the process's. Names are matched lower-cased.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class ToolKind(enum.StrEnum):
    """What a tool does."""

    #: Changes a file in place.
    EDIT = "edit"
    #: Creates or overwrites a whole file.
    WRITE = "write"
    #: Applies a patch given as text (its input is the patch).
    PATCH = "patch"
    #: Rewrites a to-do list, resent whole at every change.
    TODO = "todo"
    #: Makes a plan or a task (not a to-do list).
    PLAN = "plan"
    #: Starts a subagent.
    AGENT = "agent"
    #: Waits for a subagent or closes it: its output is the subagent's report.
    AGENT_RESULT = "agent-result"
    #: Searches or fetches from the web.
    WEB = "web"
    #: Searches the code (contents or names of files).
    SEARCH = "search"
    #: Shows a file's contents.
    READ = "read"
    #: Polls, or types into, a command still running.
    POLL = "poll"
    #: Runs a shell command.
    SHELL = "shell"


def _kinds(**names: tuple[str, ...]) -> dict[str, ToolKind]:
    return {name: ToolKind[kind] for kind, tools in names.items() for name in tools}


#: The kernel's table: lower-cased tool name -> kind (the tools of Claude Code, Codex,
#: OpenCode and the clients most alike them).
DEFAULT_TOOL_KINDS: Mapping[str, ToolKind] = MappingProxyType(
    _kinds(
        EDIT=("edit", "multiedit", "str_replace", "str_replace_editor", "edit_file", "notebookedit"),
        WRITE=("write", "create_file", "write_file"),
        PATCH=("apply_patch",),
        TODO=("todowrite", "update_plan", "todo_write"),
        PLAN=("exitplanmode", "taskcreate"),
        AGENT=("task", "agent", "spawn_agent", "dispatch_agent"),
        AGENT_RESULT=("wait_agent", "close_agent"),
        WEB=("websearch", "webfetch", "web_search", "web_fetch", "fetch"),
        SEARCH=("grep", "glob", "search", "find", "codebase_search", "grep_search", "ls"),
        READ=("read", "read_file", "view", "notebookread", "cat"),
        POLL=("write_stdin",),
        SHELL=("bash", "shell", "exec_command", "local_shell", "local_shell_call", "run_terminal_cmd"),
    )
)

_table: dict[str, ToolKind] = dict(DEFAULT_TOOL_KINDS)
_KIND_NAMES = tuple(kind.value for kind in ToolKind)


class ToolKindError(ValueError):
    """A declared tool kind is unknown, or contradicts the table."""


def tool_kind(tool: str | None) -> ToolKind | None:
    """The kind of the tool named ``tool`` (any case), ``None`` when the table has none."""
    return _table.get(tool.lower()) if tool else None


def installed() -> Mapping[str, ToolKind]:
    """The table as it is: the defaults and what the plugins declared."""
    return MappingProxyType(_table)


def merge(declared: Mapping[str, Mapping[str, str]]) -> dict[str, ToolKind]:
    """The table with each plugin's declarations (plugin name -> tool name -> kind) added.
    A kind that is not a :class:`ToolKind`, or a tool given another kind than the kernel's
    or another plugin's, is a :class:`ToolKindError` naming the plugins."""
    table = dict(DEFAULT_TOOL_KINDS)
    owners = dict.fromkeys(table, "the kernel")
    for plugin, kinds in declared.items():
        for name, kind in kinds.items():
            if kind not in _KIND_NAMES:
                known = ", ".join(_KIND_NAMES)
                raise ToolKindError(
                    f"plugin {plugin} declares the tool {name!r} as {kind!r}: not one of {known}"
                )
            key = name.lower()
            if key in table and table[key] != kind:
                was = f"{table[key].value!r} by {owners[key]}"
                raise ToolKindError(f"the tool {name!r} is declared {was} and {kind!r} by {plugin}")
            table[key] = ToolKind(kind)
            owners.setdefault(key, plugin)
    return table


def install(table: Mapping[str, ToolKind]) -> None:
    """Make ``table`` (:func:`merge`'s) the one this process reads: what every later cut and
    distillation asks. Called by ``bootstrap``; installing again replaces the table."""
    global _table
    _table = dict(table)
