"""``lore run <agent> [args...]``: start or reuse a shared gateway, then run the client wired to it.

The gateway is started once, detached, and keeps running after the client exits so that
every agent on the machine shares one gateway (one store, one prompt cache strategy). Its log
and pid file live in the user's data directory, one pair per port:
``gateway-<port>.log`` and ``gateway-<port>.pid``.

The client runs in the foreground in Lore's own process group, so the terminal (and its
Ctrl+C) belongs to it as usual. Signals sent to ``lore`` itself (``kill``, a supervisor, a
closing terminal) are forwarded to the client; a Ctrl+C the terminal already delivered to
the whole process group is not sent a second time (Claude Code exits on a second Ctrl+C).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from lore_core.config import default_data_dir
from lore_core.install import DEFAULT_PLUGINS, plugin_hint
from lore_core.interfaces import Harness, LaunchPlan
from lore_core.storage.private import users_umask

# How long a freshly started gateway may take to answer /health (imports, store open).
START_TIMEOUT_SECONDS = 60.0
# A /health probe: a Lore gateway answers at once; something that does not is not Lore.
PROBE_TIMEOUT_SECONDS = 3.0
FORWARDED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
# Linux's si_code for signals the kernel generated itself (the terminal's Ctrl+C, a hangup).
_SI_KERNEL = 0x80
_PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


class LaunchError(Exception):
    """Something the user has to fix before the agent can start; the message says how."""


class UnknownAgent(LaunchError):
    """No installed harness has that name."""


def run_agent(agent: str, args: list[str]) -> int:
    """Run ``lore run <agent> args...`` and return the client's exit code (128+N if a
    signal N killed it; 1 or 2 when Lore could not start it)."""
    config, registry = _load_settings()
    host, port = config.server.host, config.server.port
    try:
        harness = find_harness(registry.harnesses, agent)
        url = gateway_url(host, port)
        if not harness.launches:
            raise LaunchError(f"the {agent!r} harness does not know how to launch a client")
        plan = harness.launch(url, list(args))
        env = client_env(plan, url)
        exe = resolve_executable(harness, plan, env)
        status = ensure_gateway(host, port)
    except UnknownAgent as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 2
    except LaunchError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the data directory is not writable
        print(f"lore: cannot start the gateway: {exc}", file=sys.stderr)
        return 1
    print(f"lore: {status.describe()}", file=sys.stderr, flush=True)
    if config.server.require_token_for_memory:
        # Not passed on: a client's environment reaches every tool it runs, and the token
        # opens the whole local API (docs/security.md).
        print(
            "lore: server.requireTokenForMemory is on: this client gets memory only if it sends "
            "the gateway token in X-Lore-Token (docs/security.md says how to configure it)",
            file=sys.stderr,
            flush=True,
        )
    try:
        return run_client([exe, *plan.argv[1:]], env, plan.files)
    except OSError as exc:  # e.g. a script whose interpreter (node) is missing
        print(f"lore: cannot start {exe}: {exc.strerror or exc}", file=sys.stderr)
        return 127


# ---------------------------------------------------------------------------------------------
# Choosing the harness and the executable
# ---------------------------------------------------------------------------------------------


def _load_settings() -> tuple[Any, Any]:
    """The configuration and the installed plugins. Not a whole gateway: building one starts
    native threads (store, embedder, ...) whose signal masks ``run_client`` cannot block, and
    a SIGTERM delivered to one of them would kill ``lore run`` instead of being forwarded."""
    from lore_core.plugins import bootstrap

    lore_log = logging.getLogger("lore")
    previous = lore_log.level
    lore_log.setLevel(logging.WARNING)  # warnings (a plugin that fails to load) still show
    try:
        boot = bootstrap()
        return boot.config, boot.registry
    finally:
        lore_log.setLevel(previous)


def launchable_names(harnesses: Mapping[str, Harness]) -> list[str]:
    """Harness names ``lore run`` accepts: those that launch a client (the kernel's generic
    fallback launches nothing)."""
    return sorted(name for name, harness in harnesses.items() if harness.launches)


def find_harness(harnesses: Mapping[str, Harness], agent: str) -> Harness:
    harness = harnesses.get(agent)
    if harness is None or agent == "generic":
        names = launchable_names(harnesses)
        installed = ", ".join(names) if names else f"none (add the default ones with: {_harness_hint()})"
        raise UnknownAgent(f"no harness named {agent!r} is installed; installed harnesses: {installed}")
    return harness


def _harness_hint() -> str:
    return plugin_hint(*(name for name in DEFAULT_PLUGINS if name.startswith("lore-harness-")))


def client_env(plan: LaunchPlan, url: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The client's environment: ours, the plan's on top, and the gateway exempted from any
    HTTP proxy the user has set (a corporate proxy cannot reach our loopback gateway)."""
    env = dict(os.environ if base is None else base)
    env.update(plan.env)
    if any(env.get(name) for name in _PROXY_VARIABLES):
        host = url.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
        for name in ("NO_PROXY", "no_proxy"):
            entries = [e for e in env.get(name, "").split(",") if e.strip()]
            if host not in entries:
                env[name] = ",".join([*entries, host])
    return env


def resolve_executable(harness: Harness, plan: LaunchPlan, env: Mapping[str, str]) -> str:
    """The client's executable as a path, found on the client's own ``PATH``."""
    if not plan.argv:
        raise LaunchError(f"the {harness.name!r} harness returned an empty command line")
    command = plan.argv[0]
    found = shutil.which(command, path=env.get("PATH")) if os.sep not in command else None
    if found is None and os.sep in command and os.access(command, os.X_OK):
        found = command
    if found is None:
        label, package = harness.display_name, harness.npm_package
        hint = f"; install it with: npm install -g {package}" if package else ""
        raise LaunchError(f"cannot find the {label} executable {command!r} on PATH{hint}")
    return found


# ---------------------------------------------------------------------------------------------
# The shared gateway
# ---------------------------------------------------------------------------------------------


def connect_host(host: str) -> str:
    """Where a client reaches a gateway bound to ``host`` (a wildcard bind means loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def gateway_url(host: str, port: int) -> str:
    target = connect_host(host)
    return f"http://[{target}]:{port}" if ":" in target else f"http://{target}:{port}"


def gateway_files(port: int, data_dir: Path | None = None) -> tuple[Path, Path]:
    """(pid file, log file) of the background gateway on ``port``."""
    base = data_dir or default_data_dir()
    return base / f"gateway-{port}.pid", base / f"gateway-{port}.log"


class GatewayStatus:
    """The gateway ``lore run`` uses: already running, or just started by it."""

    def __init__(self, url: str, started: bool, pid: int | None, log: Path | None, version: str) -> None:
        self.url = url
        self.started = started
        self.pid = pid
        self.log = log
        self.version = version

    def describe(self) -> str:
        if self.started:
            return (
                f"started a gateway at {self.url} (pid {self.pid}, log {self.log}); "
                "it keeps running for other agents"
            )
        return f"using the gateway at {self.url} (Lore {self.version})"


def probe(host: str, port: int, timeout: float = PROBE_TIMEOUT_SECONDS) -> tuple[str, Any]:
    """Who answers on ``host:port``: ``("absent", None)``, ``("lore", health)`` or
    ``("foreign", reason)``. Talks HTTP directly so no proxy variable can get in the way."""
    conn = http.client.HTTPConnection(connect_host(host), port, timeout=timeout)
    try:
        conn.request("GET", "/health", headers={"Accept": "application/json"})
        response = conn.getresponse()
        body = response.read(1 << 20)
    except ConnectionRefusedError:
        return "absent", None
    except (OSError, http.client.HTTPException) as exc:
        return "foreign", f"it does not answer HTTP on /health ({type(exc).__name__})"
    finally:
        conn.close()
    try:
        health = json.loads(body)
    except ValueError:
        health = None
    if response.status == 200 and isinstance(health, dict) and "status" in health and "version" in health:
        return "lore", health
    return "foreign", f"GET /health answered HTTP {response.status} without Lore's health report"


def ensure_gateway(
    host: str, port: int, data_dir: Path | None = None, timeout: float = START_TIMEOUT_SECONDS
) -> GatewayStatus:
    """Reuse the Lore gateway on ``host:port``, or start one in the background."""
    url = gateway_url(host, port)
    pid_path, log_path = gateway_files(port, data_dir)
    kind, detail = probe(host, port)
    if kind == "lore":
        return GatewayStatus(url, False, _read_pid(pid_path), None, str(detail.get("version")))
    if kind == "foreign":
        raise LaunchError(_foreign_message(host, port, detail))
    pid_path.parent.mkdir(parents=True, exist_ok=True)
    # Two `lore run` started at once must not both spawn a gateway.
    with _exclusive(pid_path.with_suffix(".lock")):
        kind, detail = probe(host, port)
        if kind == "lore":
            return GatewayStatus(url, False, _read_pid(pid_path), None, str(detail.get("version")))
        if kind == "foreign":
            raise LaunchError(_foreign_message(host, port, detail))
        proc = _spawn_gateway(host, port, log_path)
        pid_path.write_text(f"{proc.pid}\n")
        health = _wait_until_healthy(host, port, proc, log_path, timeout)
    return GatewayStatus(url, True, proc.pid, log_path, str(health.get("version")))


def _foreign_message(host: str, port: int, reason: str) -> str:
    return (
        f"port {port} on {host} is taken by something that is not a Lore gateway: {reason}. "
        "Stop it, or choose another port (LORE_PORT=... or server.port in .lore.json)"
    )


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# Finding and stopping a gateway (lore serve, lore stop)
# ---------------------------------------------------------------------------------------------


def record_serving(port: int, data_dir: Path | None = None) -> None:
    """``lore serve`` names itself in ``gateway-<port>.pid`` once it listens, so ``lore stop``
    finds a gateway started in a terminal too (``lore run`` wrote the same pid for the one it
    started). Written only after the bind: a ``lore serve`` that cannot listen leaves the
    running gateway's file alone."""
    pid_path, _ = gateway_files(port, data_dir)
    try:
        pid_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        pid_path.write_text(f"{os.getpid()}\n")
    except OSError as exc:  # serving matters more; lore stop then says it finds no pid file
        logging.getLogger("lore").warning("cannot write %s: %s", pid_path, exc.strerror or exc)


def forget_serving(port: int, data_dir: Path | None = None) -> None:
    """Remove ``gateway-<port>.pid`` at exit, when it still names this process."""
    pid_path, _ = gateway_files(port, data_dir)
    if _read_pid(pid_path) == os.getpid():
        with contextlib.suppress(OSError):
            pid_path.unlink()


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: alive is all we know
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _command_line(pid: int) -> list[str] | None:
    """The process's arguments, or ``None`` when this system cannot tell."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    except OSError:
        pass
    try:
        out = subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.split() if out.returncode == 0 else None


def is_gateway_process(pid: int) -> bool:
    """Whether ``pid`` is a running ``lore serve``: a pid file outlives a gateway killed with
    ``kill -9``, and its number may have gone to any other process since."""
    if not process_alive(pid):
        return False
    args = _command_line(pid)
    if args is None:
        return True
    return "serve" in args and any("lore" in arg for arg in args)


def running_gateways(data_dir: Path | None = None) -> dict[int, int]:
    """Port -> pid of every gateway a pid file in the data directory names and that runs."""
    base = data_dir or default_data_dir()
    found = {}
    for path in sorted(base.glob("gateway-*.pid")):
        port = path.stem.removeprefix("gateway-")
        pid = _read_pid(path)
        if port.isdigit() and pid is not None and is_gateway_process(pid):
            found[int(port)] = pid
    return found


class StopResult:
    """What :func:`stop_gateway` did: ``"absent"`` (no pid file), ``"stale"`` (its process is
    gone or is not a gateway: the file was removed), ``"stopped"``, or ``"running"`` (it did
    not exit in time)."""

    def __init__(self, outcome: str, pid: int | None, pid_path: Path) -> None:
        self.outcome = outcome
        self.pid = pid
        self.pid_path = pid_path


def stop_gateway(
    port: int, data_dir: Path | None = None, timeout: float = 80.0, force: bool = False
) -> StopResult:
    """Stop the gateway ``gateway-<port>.pid`` names as Ctrl+C would (SIGTERM: in-flight
    answers finish, queued writes are flushed), waiting up to ``timeout`` seconds; with
    ``force``, kill it (SIGKILL) when it has not gone by then (the journal keeps what was not
    written)."""
    pid_path, _ = gateway_files(port, data_dir)
    pid = _read_pid(pid_path)
    if pid is None:
        return StopResult("absent", None, pid_path)
    if not is_gateway_process(pid):
        with contextlib.suppress(OSError):
            pid_path.unlink()
        return StopResult("stale", pid, pid_path)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, timeout) and force:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 10.0)
    if process_alive(pid):
        return StopResult("running", pid, pid_path)
    # The gateway removes its own file on a clean exit; not after SIGKILL.
    if _read_pid(pid_path) == pid:
        with contextlib.suppress(OSError):
            pid_path.unlink()
    return StopResult("stopped", pid, pid_path)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock; a second gateway fails to bind and says so
        yield
        return
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def gateway_command(host: str, port: int) -> list[str]:
    """``lore serve`` with the same interpreter (so the same installed plugins)."""
    return [sys.executable, "-m", "lore_core.cli", "serve", "--host", host, "--port", str(port)]


def _spawn_gateway(host: str, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """The gateway as a detached process (its own session: no terminal signal reaches it,
    and it outlives this one), in our working directory and environment, so it reads the
    same configuration."""
    cmd = gateway_command(host, port)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    kwargs: dict[str, Any] = {}
    if os.name == "posix":
        kwargs["start_new_session"] = True
    else:  # pragma: no cover - Windows
        # Windows-only constants: absent from the POSIX typeshed stubs mypy checks against.
        kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.DETACHED_PROCESS  # type: ignore[attr-defined]
    with open(log_path, "ab") as log:
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} lore run: starting {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, **kwargs
        )
    return proc


def _wait_until_healthy(
    host: str, port: int, proc: subprocess.Popen[bytes], log_path: Path, timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        code = proc.poll()
        if code is not None:
            raise LaunchError(
                f"the gateway exited (code {code}) before answering; its log {log_path} ends with:\n"
                + _tail(log_path)
            )
        kind, detail = probe(host, port, timeout=1.0)
        if kind == "lore":
            # Running detached on purpose: it must not be reaped (or warned about) as ours.
            proc.returncode = 0
            return detail
        if time.monotonic() > deadline:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            raise LaunchError(
                f"the gateway did not answer {gateway_url(host, port)}/health within {timeout:g}s; "
                f"see its log: {log_path}"
            )
        time.sleep(0.1)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join("  " + line for line in text.rstrip().splitlines()[-lines:])


# ---------------------------------------------------------------------------------------------
# Running the client
# ---------------------------------------------------------------------------------------------


def run_client(argv: list[str], env: Mapping[str, str], files: Mapping[str, str] | None = None) -> int:
    """Run the client in the foreground with the plan's temporary files in place; forward
    SIGINT/SIGTERM/SIGHUP; return its exit code (128+N when signal N killed it)."""
    with temporary_files(files or {}):
        if sys.platform.startswith("linux"):
            return _run_with_siginfo(argv, env)
        return _run_with_handlers(argv, env)


def exit_code(status: int) -> int:
    """A ``waitpid`` status as a shell would report it."""
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _run_with_siginfo(argv: list[str], env: Mapping[str, str]) -> int:
    """Linux: wait for the signals synchronously, which tells who sent each one.

    Signals are blocked before the client starts (none is lost), the client gets the mask
    we had before, and ``sigtimedwait`` reports each signal with its origin: one the kernel
    generated (the terminal's Ctrl+C or hangup) already reached the client, which shares our
    process group, so only signals sent by a process are forwarded.
    """
    waited = {*FORWARDED_SIGNALS, signal.SIGCHLD}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    try:
        with users_umask():  # the client's files are as the user's shell would make them
            pid = os.posix_spawn(argv[0], argv, dict(env), setsigmask=previous)
        while True:
            info = signal.sigtimedwait(waited, 1.0)
            if info is None or info.si_signo == signal.SIGCHLD:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done == pid:
                    return exit_code(status)
                continue
            if info.si_code != _SI_KERNEL:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, info.si_signo)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _run_with_handlers(argv: list[str], env: Mapping[str, str]) -> int:
    """Elsewhere (no ``sigtimedwait``): handlers forward every signal except a Ctrl+C that
    the terminal delivered to our whole foreground process group, client included."""
    with users_umask():
        child = subprocess.Popen(argv, env=dict(env))

    def forward(signum: int, _frame: object) -> None:
        if signum == getattr(signal, "SIGINT", None) and _terminal_delivers_to_us():
            return
        with contextlib.suppress(ProcessLookupError, OSError):
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code


def _terminal_delivers_to_us() -> bool:
    """Whether our process group is its terminal's foreground group (then the terminal
    sends Ctrl+C to the client itself)."""
    if not hasattr(os, "tcgetpgrp"):
        return True  # Windows consoles deliver Ctrl+C to every attached process
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
    return False


@contextlib.contextmanager
def temporary_files(files: Mapping[str, str]) -> Iterator[None]:
    """Write the plan's files (private: they may hold keys) and afterwards put back whatever
    was there before, or remove them."""
    saved: list[tuple[Path, bytes | None]] = []
    try:
        for name, content in files.items():
            path = Path(name).expanduser()
            saved.append((path, path.read_bytes() if path.exists() else None))
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(content)
        yield
    finally:
        for path, before in reversed(saved):
            with contextlib.suppress(OSError):
                if before is None:
                    path.unlink()
                else:
                    path.write_bytes(before)
