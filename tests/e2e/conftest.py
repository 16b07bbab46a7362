"""End-to-end tests: real clients (``scripts/install-clients.sh``) and real ``lore run``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The helpers live beside this file; with --import-mode=importlib test modules are not on
# sys.path by themselves.
sys.path.insert(0, str(Path(__file__).parent))

from lore_e2e_support import RecordingTap

from lore_core.testing.server import ThreadedServer


@pytest.fixture
def gateway(start_gateway: Callable[..., ThreadedServer]) -> ThreadedServer:
    """A gateway that rewrites no request body, so the transparency checks (the upstream
    receives the client's bytes) hold: without the recall tool, which the gateway otherwise
    adds to every request that offers tools (``tests/e2e/test_recall_claude.py`` covers it)."""
    return start_gateway({"recall": {"tool": False}})


@pytest.fixture
def tap(gateway: ThreadedServer) -> Iterator[RecordingTap]:
    """A recording TCP tap in front of a real gateway (which forwards to the fake upstream)."""
    recorder = RecordingTap(gateway.host, gateway.port).start()
    yield recorder
    recorder.stop()
