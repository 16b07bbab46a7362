"""``lore run``: the shared background gateway, the client's environment, exit codes, signals.

These run the real ``lore`` command and real processes, with a stand-in client
(``fake_client.py``, installed on PATH as ``claude``) so they need no npm package; the real
clients go through ``lore run`` in ``test_clients.py``.
"""

from __future__ import annotations

import fcntl
import functools
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from lore_e2e_support import ClientResult, run_client, stop_background_gateway

from lore_core.cli import launcher
from lore_core.cli.launcher import (
    LaunchError,
    client_env,
    ensure_gateway,
    gateway_files,
    gateway_url,
    probe,
    run_agent,
    temporary_files,
)
from lore_core.interfaces import LaunchPlan
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.net import free_port

FAKE_CLIENT = Path(__file__).with_name("fake_client.py")


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """A PATH directory whose ``claude`` is the stand-in client."""
    directory = tmp_path / "bin"
    directory.mkdir()
    claude = directory / "claude"
    claude.write_text(
        f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(FAKE_CLIENT)!r}, run_name='__main__')\n"
    )
    claude.chmod(0o755)
    return directory


class LoreRun:
    """``lore run`` as a user types it, on its own port and data directory."""

    def __init__(self, env: dict[str, str], cwd: Path, port: int, data_dir: Path, client: Path) -> None:
        self.env = env
        self.client = client
        self.cwd = cwd
        self.port = port
        self.data_dir = data_dir
        self.pid_file, self.log_file = gateway_files(port, data_dir)

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "lore_core.cli", "run", *args]

    def __call__(self, *args: str) -> ClientResult:
        return run_client(self.command(*args), self.env, self.cwd)


@pytest.fixture
def lore_run(tmp_path: Path, lore_env: dict[str, str], fake_bin: Path) -> Iterator[LoreRun]:
    port = free_port()
    env = {
        **os.environ,
        **lore_env,
        "LORE_PORT": str(port),
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
    }
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(name, None)
    runner = LoreRun(env, tmp_path, port, Path(lore_env["XDG_DATA_HOME"]) / "lore", fake_bin / "claude")
    yield runner
    stop_background_gateway(runner.pid_file)


# ---------------------------------------------------------------------------------------------
# The shared gateway and the client
# ---------------------------------------------------------------------------------------------


def test_starts_a_shared_gateway_runs_the_client_and_returns_its_exit_code(
    lore_run: LoreRun, tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    report = tmp_path / "report.json"
    result = lore_run("claude", "call", str(report), "7")
    assert result.returncode == 7, result.stderr
    url = f"http://127.0.0.1:{lore_run.port}"
    # One short line on stderr says which gateway.
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"lore: started a gateway at {url} (pid ")
    assert str(lore_run.log_file) in line
    # The client got the harness's environment and its arguments, and reached the upstream
    # through the gateway.
    seen = json.loads(report.read_text())
    assert seen["argv"][1:] == ["call", str(report), "7"]
    assert seen["env"]["ANTHROPIC_BASE_URL"] == url
    assert seen["env"]["DISABLE_AUTO_COMPACT"] == "1"
    assert seen["env"]["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert result.stdout.strip() == "pong"
    (api,) = fake_upstream.api_requests()
    assert api.path == "/v1/messages"
    # The gateway outlives the client: it still answers, and its pid file names it.
    kind, health = probe("127.0.0.1", lore_run.port)
    assert kind == "lore" and health["status"] in ("ok", "degraded")
    pid = int(lore_run.pid_file.read_text())
    os.kill(pid, 0)
    assert "listening on" in lore_run.log_file.read_text()

    # The next agent reuses it.
    again = lore_run("claude", "call", str(report), "0")
    assert again.returncode == 0, again.stderr
    assert again.stderr.strip() == f"lore: using the gateway at {url} (Lore {health['version']})"
    assert int(lore_run.pid_file.read_text()) == pid
    assert len(fake_upstream.api_requests()) == 2


def readable_by_others(root: Path) -> list[str]:
    """Every entry under ``root`` (itself included) with a group or other permission bit."""
    return [
        f"{p} {p.lstat().st_mode & 0o777:o}"
        for p in [root, *root.rglob("*")]
        if not p.is_symlink() and p.lstat().st_mode & 0o077
    ]


# Slow: a `lore run` and the gateway it starts, then waits for the journal to be written (the
# fast run keeps test_private_files.py's data-directory checks and the test above).
@pytest.mark.slow
def test_under_a_loose_umask_lores_files_are_the_owners_and_the_clients_are_as_usual(
    lore_run: LoreRun, tmp_path: Path
) -> None:
    """Started from a shell with the usual umask (0o022), ``lore run`` and the gateway it
    starts write nothing another user could read (pid, log and lock files, the token, the
    store, its journal), while the client gets the shell's umask for its own files."""
    report = tmp_path / "report.json"
    shells = os.umask(0o022)
    try:
        result = lore_run("claude", "call", str(report), "0")
    finally:
        os.umask(shells)
    assert result.returncode == 0, result.stderr
    assert json.loads(report.read_text())["umask"] == 0o022
    assert report.stat().st_mode & 0o777 == 0o644
    data = lore_run.data_dir
    expected = {lore_run.pid_file.name, lore_run.log_file.name, "gateway.token", "lore.duckdb"}
    # The store is opened at the gateway's start; the journal beside it holds the exchange.
    wait_for(lambda: expected <= {p.name for p in data.iterdir()}, "the gateway's files")
    wait_for(lambda: any((data / "lore.duckdb.journal").glob("*")), "the journal")
    assert readable_by_others(data) == []


@pytest.mark.slow  # three `lore run` processes racing to start one gateway process
def test_concurrent_runs_start_one_gateway(
    lore_run: LoreRun, tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    with ThreadPoolExecutor(3) as pool:
        results = list(
            pool.map(lambda i: lore_run("claude", "call", str(tmp_path / f"r{i}.json"), "0"), range(3))
        )
    assert [r.returncode for r in results] == [0, 0, 0], [r.describe() for r in results]
    lines = [r.stderr.strip() for r in results]
    assert sum(line.startswith("lore: started a gateway") for line in lines) == 1, lines
    assert sum(line.startswith("lore: using the gateway") for line in lines) == 2, lines
    assert len(fake_upstream.api_requests()) == 3


# ---------------------------------------------------------------------------------------------
# Signals
# ---------------------------------------------------------------------------------------------


# Where there is no sigtimedwait (macOS), the launcher forwards from signal handlers instead;
# run that path here too, directly, on the same stand-in client.
PORTABLE = (
    "import os, sys\n"
    "from lore_core.cli.launcher import _run_with_handlers\n"
    "sys.exit(_run_with_handlers(sys.argv[1:], dict(os.environ)))\n"
)
# Each `lore run` case starts a gateway process before its client (seconds); the fast run
# keeps SIGTERM through `lore run` and every case of the portable path.
SLOW_PATHS = [pytest.param("lore-run", marks=pytest.mark.slow), "portable"]


def finished(proc: subprocess.Popen[bytes]) -> int:
    """The exit code, with what the process printed shown if it is not the expected one."""
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    if err:
        sys.stderr.write(err.decode(errors="replace"))
    return proc.returncode


def start_signal_client(
    lore_run: LoreRun, tmp_path: Path, path: str, *extra: str, **popen: Any
) -> tuple[subprocess.Popen[bytes], Path]:
    record, ready = tmp_path / "signals.txt", tmp_path / "ready"
    args = ["signals", str(record), str(ready), *extra]
    if path == "lore-run":
        command = lore_run.command("claude", *args)
    else:
        command = [sys.executable, "-c", PORTABLE, str(lore_run.client), *args]
    proc = subprocess.Popen(command, env=lore_run.env, cwd=tmp_path, **popen)
    wait_for(ready.exists, "the client to start")
    return proc, record


@pytest.mark.parametrize(
    ("sent", "code", "path"),
    [
        (signal.SIGTERM, 143, "lore-run"),
        (signal.SIGTERM, 143, "portable"),
        pytest.param(signal.SIGHUP, 129, "lore-run", marks=pytest.mark.slow),
        (signal.SIGHUP, 129, "portable"),
    ],
)
def test_terminating_signals_are_forwarded_and_the_exit_code_says_which(
    sent: signal.Signals, code: int, path: str, lore_run: LoreRun, tmp_path: Path
) -> None:
    proc, record = start_signal_client(lore_run, tmp_path, path, stderr=subprocess.PIPE)
    proc.send_signal(sent)
    assert finished(proc) == code, record.read_text()
    assert record.read_text().split() == [sent.name]


@pytest.mark.parametrize("path", SLOW_PATHS)
def test_an_interrupt_sent_to_lore_is_forwarded(path: str, lore_run: LoreRun, tmp_path: Path) -> None:
    proc, record = start_signal_client(lore_run, tmp_path, path, stderr=subprocess.PIPE)
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: record.exists() and "SIGINT" in record.read_text(), "the client to get SIGINT")
    proc.send_signal(signal.SIGTERM)  # the client keeps running after SIGINT
    assert finished(proc) == 143, record.read_text()
    assert record.read_text().split() == ["SIGINT", "SIGTERM"]


@pytest.mark.parametrize("path", SLOW_PATHS)
def test_the_terminals_ctrl_c_is_not_sent_twice(path: str, lore_run: LoreRun, tmp_path: Path) -> None:
    """Ctrl+C on a terminal reaches every process of its foreground group, the client
    included; Lore must not send the client a second one (Claude Code quits on the second).

    To see whether Lore forwards it, the client leaves Lore's process group (leaving a
    sentinel behind that shows when the terminal's SIGINT has been delivered) and then waits
    for a SIGTERM sent to Lore: Lore handles signals in order, so a SIGINT it forwarded
    would be recorded before the SIGTERM."""
    master, slave = os.openpty()

    def controlling_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    sentinel = tmp_path / "sentinel"
    try:
        proc, record = start_signal_client(
            lore_run,
            tmp_path,
            path,
            str(sentinel),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=controlling_terminal,
        )

        def typed_ctrl_c_arrived() -> bool:
            # Typed again until the sentinel sees one: a ^C the line discipline drops (it was
            # seen once on a loaded CI machine) must not fail the test. Extra ones are also
            # the kernel's, so whatever Lore forwarded would still show in the record.
            if not sentinel.exists():
                os.write(master, b"\x03")
                time.sleep(0.5)
            return sentinel.exists()

        wait_for(typed_ctrl_c_arrived, "the terminal's SIGINT to reach the foreground group")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 143
        assert record.read_text().split() == ["SIGTERM"]
    finally:
        os.close(slave)
        os.close(master)


# ---------------------------------------------------------------------------------------------
# Clear errors
# ---------------------------------------------------------------------------------------------


def test_unknown_agent_lists_the_installed_harnesses(
    lore_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_agent("aider", []) == 2
    err = capsys.readouterr().err
    assert "no harness named 'aider' is installed; installed harnesses: " in err
    for name in ("claude", "codex", "opencode"):
        assert name in err
    assert "generic" not in err


def test_missing_client_says_how_to_install_it_and_starts_nothing(
    lore_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = free_port()
    monkeypatch.setenv("LORE_PORT", str(port))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert run_agent("codex", ["exec", "hi"]) == 1
    err = capsys.readouterr().err
    assert (
        "cannot find the Codex CLI executable 'codex' on PATH; install it with: npm install -g @openai/codex"
        in err
    )
    assert probe("127.0.0.1", port)[0] == "absent"
    assert not gateway_files(port)[0].exists()


class NotLore(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.end_headers()
        self.wfile.write(b"nothing here")

    def log_message(self, *args: object) -> None:
        pass


def test_a_port_taken_by_another_http_server_is_a_clear_error(
    lore_env: dict[str, str],
    fake_bin: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), NotLore)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("LORE_PORT", str(server.server_port))
        monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
        assert run_agent("claude", []) == 1
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert f"port {server.server_port} on 127.0.0.1 is taken by something that is not a Lore gateway" in err
    assert "HTTP 404" in err
    assert "LORE_PORT" in err


def test_a_port_taken_by_a_silent_server_is_a_clear_error(
    lore_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The probe gives up on a silent server after its timeout: a short one here (3 s by default).
    monkeypatch.setattr(launcher, "probe", functools.partial(probe, timeout=0.2))
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        with pytest.raises(LaunchError, match="not a Lore gateway: it does not answer HTTP"):
            ensure_gateway("127.0.0.1", port, data_dir=tmp_path)


def test_a_gateway_that_dies_at_start_shows_its_log(
    lore_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    crash = [sys.executable, "-c", "import sys; print('boom: cannot open the store'); sys.exit(3)"]
    monkeypatch.setattr(launcher, "gateway_command", lambda host, port: crash)
    with pytest.raises(LaunchError) as info:
        ensure_gateway("127.0.0.1", port, data_dir=tmp_path)
    message = str(info.value)
    assert "the gateway exited (code 3) before answering" in message
    assert str(gateway_files(port, tmp_path)[1]) in message
    assert "boom: cannot open the store" in message


def test_a_gateway_that_never_answers_is_stopped(
    lore_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    pid_file = tmp_path / "hung.pid"
    hang = [
        sys.executable,
        "-c",
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)",
    ]
    monkeypatch.setattr(launcher, "gateway_command", lambda host, port: hang)
    with pytest.raises(
        LaunchError, match=r"did not answer http://127\.0\.0\.1:\d+/health within 1s; see its log"
    ):
        ensure_gateway("127.0.0.1", port, data_dir=tmp_path, timeout=1.0)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# ---------------------------------------------------------------------------------------------
# Pieces
# ---------------------------------------------------------------------------------------------


def test_gateway_url_for_wildcard_and_ipv6_binds() -> None:
    assert gateway_url("127.0.0.1", 8377) == "http://127.0.0.1:8377"
    assert gateway_url("0.0.0.0", 8377) == "http://127.0.0.1:8377"
    assert gateway_url("::", 9) == "http://[::1]:9"
    assert gateway_url("::1", 9) == "http://[::1]:9"


def test_client_env_exempts_the_gateway_from_the_users_proxy() -> None:
    plan = LaunchPlan(argv=["x"], env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:8377"})
    env = client_env(
        plan,
        "http://127.0.0.1:8377",
        {"PATH": "/bin", "HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "corp"},
    )
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8377"
    assert env["NO_PROXY"] == "corp,127.0.0.1"
    assert env["no_proxy"] == "127.0.0.1"
    assert "NO_PROXY" not in client_env(plan, "http://127.0.0.1:8377", {"PATH": "/bin"})


def test_temporary_files_are_private_and_put_back(tmp_path: Path) -> None:
    existing, new = tmp_path / "settings.json", tmp_path / "sub" / "new.toml"
    existing.write_text("mine")
    with temporary_files({str(existing): "lore's", str(new): "key = 1"}):
        assert existing.read_text() == "lore's"
        assert new.read_text() == "key = 1"
        assert new.stat().st_mode & 0o777 == 0o600
    assert existing.read_text() == "mine"
    assert not new.exists()
