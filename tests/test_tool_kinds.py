"""The one tool-kind table (lore_core/toolkinds.py): the kernel's defaults, extended by plugins
through ``lore_tool_kinds``, read by the passage tags and the extractive observer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lore_core import hookimpl
from lore_core.distill.extractive import call_gist
from lore_core.plugins import Bootstrapped, PluginError, bootstrap
from lore_core.storage.passages import FULLTEXT_RULES, cut, fulltext_rules
from lore_core.storage.tags import CODE_SEARCH, FILE_EDITED, SUBAGENT
from lore_core.toolkinds import DEFAULT_TOOL_KINDS, ToolKind, install, installed, tool_kind


class Declares:
    """A harness plugin naming its client's tools."""

    def __init__(self, kinds: dict[str, str], name: str = "declares") -> None:
        self.kinds = kinds
        self.__name__ = name

    @hookimpl
    def lore_tool_kinds(self) -> dict[str, str]:
        return self.kinds


@pytest.fixture(autouse=True)
def default_table() -> Iterator[None]:
    yield
    install(DEFAULT_TOOL_KINDS)  # what a bootstrap here installed goes with the test


def boot(tmp_path: Path, *plugins: object) -> Bootstrapped:
    path = tmp_path / ".lore.json"
    path.write_text(json.dumps({}), encoding="utf-8")
    env = {"LORE_CONFIG": str(path), "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    return bootstrap(env=env, cwd=tmp_path, load_entrypoints=False, extra_plugins=plugins)


def call(name: str, tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_call", "tool_name": name, "tool_call_id": "c1", "tool_input": tool_input}


def tags(name: str, tool_input: Any) -> tuple[str, ...]:
    return cut("assistant", [call(name, tool_input)])[0].tags


def test_the_defaults_name_the_known_clients_tools_in_any_case():
    assert tool_kind("Read") is tool_kind("read_file") is ToolKind.READ
    assert tool_kind("MultiEdit") is ToolKind.EDIT and tool_kind("apply_patch") is ToolKind.PATCH
    assert tool_kind("TodoWrite") is ToolKind.TODO and tool_kind("ExitPlanMode") is ToolKind.PLAN
    assert tool_kind("wait_agent") is ToolKind.AGENT_RESULT and tool_kind("Task") is ToolKind.AGENT
    assert tool_kind("Bash") is ToolKind.SHELL and tool_kind("write_stdin") is ToolKind.POLL
    assert tool_kind("mcp__linear__create_issue") is None and tool_kind(None) is None
    assert all(name == name.lower() for name in DEFAULT_TOOL_KINDS)


def test_a_plugin_declares_its_clients_tools_and_every_rule_reads_them(tmp_path):
    assert tags("replace_in_file", {"path": "a.py"}) == ()
    assert call_gist("open_file", {"path": "src/app.py"}) == "open_file: src/app.py"

    booted = boot(
        tmp_path,
        Declares({"replace_in_file": "edit", "Open_File": "read", "ripgrep": "search", "Delegate": "agent"}),
    )
    assert booted.registry.tool_kinds["replace_in_file"] is ToolKind.EDIT
    assert installed() == booted.registry.tool_kinds
    # The passage tags ...
    assert tags("replace_in_file", {"path": "a.py"}) == (FILE_EDITED,)
    assert tags("ripgrep", {"pattern": "x"}) == (CODE_SEARCH,)
    assert tags("delegate", {"prompt": "look"}) == (SUBAGENT,)
    # ... and the extractive observer's gists.
    assert call_gist("open_file", {"path": "src/app.py"}) == "Read src/app.py"

    # A bootstrap without the plugin has the kernel's table again.
    boot(tmp_path)
    assert tool_kind("replace_in_file") is None


def test_a_plugin_may_repeat_the_kernels_kind_but_not_contradict_it(tmp_path):
    boot(tmp_path, Declares({"Read": "read"}))
    with pytest.raises(
        PluginError, match=r"the tool 'Read' is declared 'read' by the kernel and 'search' by odd"
    ):
        boot(tmp_path, Declares({"Read": "search"}, name="odd"))
    with pytest.raises(PluginError, match=r"declared 'edit' by one and 'read' by two"):
        boot(tmp_path, Declares({"fix": "edit"}, name="one"), Declares({"FIX": "read"}, name="two"))


def test_an_unknown_kind_or_a_wrong_shape_is_a_plugin_error(tmp_path):
    with pytest.raises(
        PluginError, match=r"plugin odd declares the tool 'deploy' as 'ship': not one of edit, "
    ):
        boot(tmp_path, Declares({"deploy": "ship"}, name="odd"))
    with pytest.raises(PluginError, match="lore_tool_kinds must return tool name -> kind"):
        boot(tmp_path, Declares({"deploy": 3}, name="odd"))  # type: ignore[dict-item]


def test_the_tools_a_plugin_adds_are_part_of_the_full_text_rules(tmp_path):
    """A full-text index holds the tags: one cut before a plugin added its tools is rebuilt."""
    boot(tmp_path, Declares({"read": "read"}))  # only what the kernel says already
    assert fulltext_rules() == FULLTEXT_RULES
    boot(tmp_path, Declares({"replace_in_file": "edit"}))
    added = fulltext_rules()
    assert added.startswith(FULLTEXT_RULES + ".k") and added != FULLTEXT_RULES
    boot(tmp_path, Declares({"replace_in_file": "edit", "ripgrep": "search"}))
    assert fulltext_rules() not in (added, FULLTEXT_RULES)
    boot(tmp_path)
    assert fulltext_rules() == FULLTEXT_RULES
