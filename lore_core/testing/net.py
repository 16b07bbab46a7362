"""Small networking helpers for tests and benchmarks (loopback only)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def refusing_url() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` where nothing listens, for as long as the block runs: the
    port stays bound (never listening), so no server started meanwhile can be given it, as
    a port from :func:`free_port`, released at once, can be."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{held.getsockname()[1]}"
    finally:
        held.close()


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


def api_headers() -> dict[str, str]:
    """The headers the gateway's local API needs: its token, as the CLI finds it (the
    configured one, else the data directory's file; tests run the gateway in-process with
    the same environment)."""
    from lore_core.config import load_config
    from lore_core.http.token import cli_token

    token = cli_token(load_config())
    return {"Authorization": f"Bearer {token}"} if token else {}


def get_json(url: str, timeout: float = 10.0) -> Any:
    """GET ``url`` of the local API (with its token) and parse the JSON answer."""
    request = urllib.request.Request(url, headers=api_headers())
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.loads(resp.read())


def spawn_logged(
    argv: list[str], env: dict[str, str], log_path: Path, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a server process (benchmarks) with its output in ``log_path``: a file, not a
    pipe, since a pipe nobody reads would block the server."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd
        )


def wait_until_serving(
    proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout: float = 60.0
) -> None:
    """Poll ``url`` until ``proc`` answers; fail with the end of its log if it exits first."""

    def exited() -> BaseException | None:
        if proc.poll() is None:
            return None
        return RuntimeError(f"exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")

    wait_for_http(url, timeout=timeout, error=exited)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int | None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode
