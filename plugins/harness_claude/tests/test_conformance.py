"""The Claude Code harness passes the kernel's harness conformance suite on its captures."""

from __future__ import annotations

from pathlib import Path

import pytest
from lore_harness_claude.plugin import ClaudeCodeHarness

from lore_core.testing.captured import Captures
from lore_core.testing.conformance.harness import HarnessConformance

FIXTURES = Path(__file__).parent / "fixtures"
# The sibling plugins' captures, when this is a checkout of the whole repository (checked
# only while their harness is installed too).
PLUGINS = Path(__file__).resolve().parents[2]
CWD = "/home/dev/clients/proj"


class TestClaudeCodeHarness(HarnessConformance):
    captures = Captures(FIXTURES / "claude_code_requests.json")
    # Each capture is a session of its own (its x-claude-code-session-id differs).
    sessions = [
        ["claude-code-print"],
        ["claude-code-tool#1"],
        ["claude-code-authtoken"],
        ["claude-code-prefix"],
    ]
    projects = {tag: CWD for tag in captures.tags}
    foreign_captures = [
        ("codex", PLUGINS / "harness_codex" / "tests" / "fixtures" / "codex_requests.json"),
        ("opencode", PLUGINS / "harness_opencode" / "tests" / "fixtures" / "opencode_requests.json"),
    ]

    # Found by the suite: the project is the X-Lore-Project header as sent, even when it is
    # not an absolute directory (lore_core.builtin.harness_support.header_project).
    @pytest.fixture
    def harness(self) -> ClaudeCodeHarness:
        return ClaudeCodeHarness()
