"""The kernel's generic (fallback) harness passes the harness conformance suite on plain SDK
traffic, and claims none of the shipped clients' captured requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from lore_core.builtin.generic_harness import GenericHarness
from lore_core.testing.conformance.harness import SDK_REQUESTS, HarnessConformance

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


class TestGenericHarness(HarnessConformance):
    fallback = True
    launches = False
    captures = SDK_REQUESTS
    sessions = [
        ["anthropic-python-sdk", "anthropic-python-sdk#1"],  # x-lore-session
        ["openai-python-sdk-chat"],  # fingerprints of the first user message
        ["openai-python-sdk-responses"],
        ["curl"],
    ]
    projects = {
        "anthropic-python-sdk": "/home/dev/sdk-app",  # "Working directory:" in the system prompt
        "anthropic-python-sdk#1": "/home/dev/sdk-app",
        "openai-python-sdk-chat": "/home/dev/chat-app",  # ... in a developer message
        "openai-python-sdk-responses": "/home/dev/responses-app",  # X-Lore-Project
        "curl": None,
    }
    foreign_captures = [
        ("claude", PLUGINS / "harness_claude" / "tests" / "fixtures" / "claude_code_requests.json"),
        ("codex", PLUGINS / "harness_codex" / "tests" / "fixtures" / "codex_requests.json"),
        ("opencode", PLUGINS / "harness_opencode" / "tests" / "fixtures" / "opencode_requests.json"),
    ]

    # Found by the suite: the project is the X-Lore-Project header as sent, even when it is
    # not an absolute directory (lore_core.builtin.harness_support.header_project).
    @pytest.fixture
    def harness(self) -> GenericHarness:
        return GenericHarness()
