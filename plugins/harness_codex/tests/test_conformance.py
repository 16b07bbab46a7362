"""The Codex harness passes the kernel's harness conformance suite on its captures."""

from __future__ import annotations

from pathlib import Path

import pytest
from lore_harness_codex.plugin import CodexHarness

from lore_core.testing.captured import Captures
from lore_core.testing.conformance.harness import HarnessConformance

FIXTURES = Path(__file__).parent / "fixtures"
# The sibling plugins' captures, when this is a checkout of the whole repository (checked
# only while their harness is installed too).
PLUGINS = Path(__file__).resolve().parents[2]
CWD = "/home/dev/clients/proj"


class TestCodexHarness(HarnessConformance):
    captures = Captures(FIXTURES / "codex_requests.json")
    # Two runs of `codex exec`: two sessions (session-id, thread-id and prompt_cache_key).
    sessions = [["codex-builtin"], ["codex-provider"]]
    projects = {"codex-builtin": CWD, "codex-provider": CWD}
    foreign_captures = [
        ("claude", PLUGINS / "harness_claude" / "tests" / "fixtures" / "claude_code_requests.json"),
        ("opencode", PLUGINS / "harness_opencode" / "tests" / "fixtures" / "opencode_requests.json"),
    ]

    # Found by the suite: the project is the X-Lore-Project header as sent, even when it is
    # not an absolute directory (lore_core.builtin.harness_support.header_project).
    @pytest.fixture
    def harness(self) -> CodexHarness:
        return CodexHarness()
