"""Small networking helpers for tests and benchmarks (loopback only)."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(
    url: str, timeout: float = 20.0, error: Callable[[], BaseException | None] | None = None
) -> None:
    """Poll ``url`` until it answers (any status) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        failure = error() if error else None
        if failure is not None:
            raise RuntimeError(f"server failed to start: {failure!r}") from failure
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer within {timeout}s") from None
            time.sleep(0.05)
