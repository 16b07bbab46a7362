"""Waiting for a background effect in tests (the store writer, the distiller, the indexer)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: How long a poll may wait: far beyond what a working gateway needs, so that only a broken
#: one fails, however busy the machine.
DEADLINE_SECONDS = 120.0


def poll(
    probe: Callable[[], Any], what: str, deadline: float = DEADLINE_SECONDS, interval: float = 0.1
) -> Any:
    """``probe()`` until it returns something truthy, which is returned; fail the test after
    ``deadline`` seconds, naming ``what`` was awaited."""
    end = time.monotonic() + deadline
    while True:
        result = probe()
        if result:
            return result
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(interval)
