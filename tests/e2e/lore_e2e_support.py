"""Helpers for driving real coding clients through the gateway.

* :class:`RecordingTap`: a TCP forwarder between a client and the gateway that records every
  byte the client sent, so a test can compare what the client sent with what the upstream
  received (method, path, query, headers in order and case, body bytes).
* :func:`find_client`: the pinned client installed by ``scripts/install-clients.sh``.
* :func:`run_client`: run a client offline with a timeout; a hung client fails the test
  instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs
import h11
import pytest

from lore_core.testing.fake_upstream import RecordedRequest

REPO = Path(__file__).resolve().parents[2]
E2E_BIN = REPO / ".e2e" / "node_modules" / ".bin"
CLIENT_TIMEOUT_SECONDS = 120.0
#: ``codex exec`` outside a git repository, without the ~5 s metrics flush at exit.
CODEX_EXEC = ["exec", "--skip-git-repo-check", "-c", "analytics.enabled=false"]
# Headers that describe one connection, which a proxy must not (or cannot) pass on as sent.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}
)


# ---------------------------------------------------------------------------------------------
# Finding and running the clients
# ---------------------------------------------------------------------------------------------


def find_client(name: str) -> str:
    """The client's executable: ``.e2e/node_modules/.bin`` first, then ``PATH``. Missing
    means skip, unless ``LORE_REQUIRE_E2E=1`` (CI), where it is a failure."""
    candidate = E2E_BIN / name
    if candidate.exists() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    message = f"{name} is not installed (run scripts/install-clients.sh)"
    if os.environ.get("LORE_REQUIRE_E2E") == "1":
        pytest.fail(message)
    pytest.skip(message)


def client_env(home: Path, extra: Mapping[str, str] = ()) -> dict[str, str]:
    """A clean, offline environment: nothing of the developer's own configuration, keys or
    proxies leaks into the client."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        # OpenCode (a Bun binary) unpacks a 5.5 MB native library into the temporary
        # directory on every start and never deletes it: keep those inside the test's files.
        "TMPDIR": str(home / "tmp"),
    }
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    env.update(extra)
    return env


def codex_provider_env(tmp_path: Path, base_url: str, api_key: str = "sk-test") -> dict[str, str]:
    """:func:`client_env` for Codex with a custom provider at ``base_url`` (``.../v1``): the
    standard Responses body over HTTP, no WebSocket attempt (see the captures' README)."""
    home = tmp_path / "codex-home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        'model = "gpt-5-codex"\nmodel_provider = "lore"\n\n[model_providers.lore]\nname = "lore"\n'
        f'base_url = "{base_url}"\nenv_key = "OPENAI_API_KEY"\nwire_api = "responses"\n'
    )
    return client_env(tmp_path / "home", {"CODEX_HOME": str(home), "OPENAI_API_KEY": api_key})


@attrs.define
class ClientResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"$ {' '.join(self.argv)}\nexit {self.returncode}\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"
        )


def run_client(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float = CLIENT_TIMEOUT_SECONDS
) -> ClientResult:
    """Run a client to completion in its own process group; past ``timeout`` the whole group
    is killed and the test fails with what the client printed."""
    proc = subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        result = ClientResult(list(argv), -9, stdout, stderr)
        pytest.fail(f"client did not finish within {timeout:g}s\n{result.describe()}")
    return ClientResult(list(argv), proc.returncode, stdout, stderr)


def stop_background_gateway(pid_file: Path) -> None:
    """Stop a gateway ``lore run`` left running, through its pid file, as a user would
    (SIGTERM for a clean shutdown, SIGKILL if it does not go)."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------
# The recording tap
# ---------------------------------------------------------------------------------------------


@attrs.define
class SentRequest:
    """One HTTP request as the client put it on the wire."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes = b""

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.target.split("?", 1)[1] if "?" in self.target else ""

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    @property
    def is_upgrade(self) -> bool:
        return self.header("upgrade") is not None


class RecordingTap:
    """A loopback TCP forwarder to ``host:port`` that records the client's bytes, one buffer
    per connection. Run it in a background thread with :meth:`start`."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.connections: list[bytearray] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RecordingTap:
        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="recording-tap", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the recording tap did not start")
        return self

    def stop(self) -> None:
        """Stop accepting, let open connections drain (briefly), then stop the loop."""
        loop = self._loop
        if loop is None:
            return

        async def shutdown() -> None:
            assert self._server is not None
            self._server.close()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=5)
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(15)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    def requests(self) -> list[SentRequest]:
        """Every request the client sent, connection by connection."""
        found: list[SentRequest] = []
        for data in list(self.connections):
            found.extend(parse_requests(bytes(data)))
        return found

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        record = bytearray()
        self.connections.append(record)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            self._tasks.discard(task)  # type: ignore[arg-type]
            return
        pumps = {
            asyncio.ensure_future(_pump(reader, up_writer, record)),
            asyncio.ensure_future(_pump(up_reader, writer, None)),
        }
        try:
            # HTTP peers do not half-close: once either side is done, the connection is.
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (writer, up_writer):
                w.close()
            self._tasks.discard(task)  # type: ignore[arg-type]


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, record: bytearray | None) -> None:
    try:
        while data := await src.read(65536):
            if record is not None:
                record += data
            dst.write(data)
            await dst.drain()
    except (ConnectionError, OSError):
        pass


def parse_requests(data: bytes) -> list[SentRequest]:
    """The HTTP/1.1 requests in one connection's client bytes (keep-alive and chunked bodies
    included), parsed with h11 as a server would. A refused WebSocket upgrade (the gateway
    answers 426) leaves the connection in HTTP, as it does on the wire."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=1 << 20)
    conn.receive_data(data)
    conn.receive_data(b"")
    found: list[SentRequest] = []
    current: SentRequest | None = None
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError:
            break
        if isinstance(event, h11.Request):
            current = SentRequest(
                method=event.method.decode(),
                target=event.target.decode("latin-1"),
                headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers.raw_items()],
            )
        elif isinstance(event, h11.Data) and current is not None:
            current.body += bytes(event.data)
        elif isinstance(event, h11.EndOfMessage) and current is not None:
            found.append(current)
            current = None
            # Play the server's part so h11 reads the next request on this connection (a
            # non-101 answer also refuses an upgrade, as the gateway's 426 did).
            conn.send(h11.Response(status_code=204, headers=[]))
            conn.send(h11.EndOfMessage())
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                break
            conn.start_next_cycle()
        else:  # NEED_DATA at EOF, ConnectionClosed
            break
    return found


# ---------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------


# One known deviation, tolerated by default so the other checks keep running and pinned by a
# strict xfail test (test_clients.py) that fails once it is gone: hypercorn hands the app
# lower-cased header names, so the case the client sent is lost (HTTP header names are
# case-insensitive). The gateway adds no header of its own.
GATEWAY_ADDED_HEADERS: frozenset[str] = frozenset()


def comparable_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers in wire order and case, without the ones a proxy may not pass on as sent."""
    return [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP and not k.lower().startswith("proxy-")]


def upstream_path(path: str) -> str:
    """The path the upstream should see: a base-URL prefix before ``/v1/`` is the gateway's."""
    index = path.find("/v1/")
    return path[index:] if index >= 0 else path


def forwarded_requests(sent: Iterable[SentRequest]) -> list[SentRequest]:
    """What the gateway passes upstream: not its own ``HEAD`` probes answers nor the
    WebSocket upgrades it refuses."""
    return [r for r in sent if r.method != "HEAD" and not r.is_upgrade and r.path != "/health"]


def assert_forwarded_unchanged(
    sent: list[SentRequest],
    received: list[RecordedRequest],
    exact_case: bool = False,
    tolerate_added: frozenset[str] = GATEWAY_ADDED_HEADERS,
) -> None:
    """Every request the upstream received is one the client sent, unchanged, and every
    request the client sent for the upstream arrived: same method, path (less a base-URL
    prefix), query, body bytes, and headers in the same order with the same values.
    Concurrent requests (OpenCode's title request) may arrive in any order, so they are
    matched by content. ``exact_case`` and ``tolerate_added`` select how strictly the known
    deviations (see ``GATEWAY_ADDED_HEADERS``) are judged."""
    expected = forwarded_requests(sent)
    assert expected, "the client sent no request for the upstream"
    assert len(received) == len(expected), (
        f"client sent {[(r.method, r.target) for r in expected]}, "
        f"upstream received {[(r.method, r.path, r.query) for r in received]}"
    )
    unmatched = list(expected)
    for got in received:
        match = next(
            (
                s
                for s in unmatched
                if (s.method, upstream_path(s.path), s.query, s.body)
                == (got.method, got.path, got.query, got.body)
            ),
            None,
        )
        assert match is not None, (
            f"upstream received {got.method} {got.path}?{got.query} ({len(got.body)} bytes) "
            "that no client request matches byte for byte"
        )
        unmatched.remove(match)
        want = comparable_headers(match.headers)
        have = [(k, v) for k, v in comparable_headers(got.headers) if k.lower() not in tolerate_added]
        if not exact_case:
            want = [(k.lower(), v) for k, v in want]
            have = [(k.lower(), v) for k, v in have]
        assert have == want, (
            f"headers of {got.method} {got.path} changed on the way:\n"
            f"  client sent:       {want}\n"
            f"  upstream received: {have}"
        )
