"""The OpenCode harness passes the kernel's harness conformance suite on its captures."""

from __future__ import annotations

from pathlib import Path

import pytest
from lore_harness_opencode.plugin import OpenCodeHarness

from lore_core.testing.captured import Captures
from lore_core.testing.conformance.harness import HarnessConformance

FIXTURES = Path(__file__).parent / "fixtures"
# The sibling plugins' captures, when this is a checkout of the whole repository (checked
# only while their harness is installed too).
PLUGINS = Path(__file__).resolve().parents[2]
CWD = "/home/dev/clients/proj-opencode"


class TestOpenCodeHarness(HarnessConformance):
    captures = Captures(FIXTURES / "opencode_requests.json")
    # The title request and the main request of one Anthropic session; one session each
    # through the Responses and Chat Completions APIs.
    sessions = [["opencode-anthropic", "opencode-anthropic#1"], ["opencode-openai#1"], ["opencode-chat#1"]]
    projects = {
        "opencode-anthropic": None,  # the title request carries no environment block
        "opencode-anthropic#1": CWD,
        "opencode-openai#1": CWD,
        "opencode-chat#1": CWD,
    }
    foreign_captures = [
        ("claude", PLUGINS / "harness_claude" / "tests" / "fixtures" / "claude_code_requests.json"),
        ("codex", PLUGINS / "harness_codex" / "tests" / "fixtures" / "codex_requests.json"),
    ]

    # Found by the suite: the project is the X-Lore-Project header as sent, even when it is
    # not an absolute directory (lore_core.builtin.harness_support.header_project).
    @pytest.fixture
    def harness(self) -> OpenCodeHarness:
        return OpenCodeHarness()
