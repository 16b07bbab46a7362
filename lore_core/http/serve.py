"""Serving the app with hypercorn, in the foreground (``lore serve``) or in a thread (tests)."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig

from lore_core.gateway import Gateway
from lore_core.http.app import UpstreamStreamBroken, create_app

T = TypeVar("T")

#: Largest request line plus headers accepted (hypercorn's default too; said here because
#: it is one of the gateway's bounds).
MAX_HEADER_BYTES = 16 * 1024


class _QuietExpectedAborts(logging.Filter):
    """A stream the upstream cut off is aborted on purpose (and logged once by the app);
    hypercorn would add a traceback for it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], UpstreamStreamBroken))


def hypercorn_config(gateway: Gateway, bind: str) -> HypercornConfig:
    cfg = HypercornConfig()
    cfg.bind = [bind]
    cfg.accesslog = None
    # Through our logging configuration, so each line is printed once, in our format.
    cfg.errorlog = logging.getLogger("hypercorn.error")
    if not any(isinstance(f, _QuietExpectedAborts) for f in cfg.errorlog.filters):
        cfg.errorlog.addFilter(_QuietExpectedAborts())
    cfg.include_server_header = False
    # The upstream's Date header is relayed; hypercorn would add a second one.
    cfg.include_date_header = False
    server = gateway.config.server
    # hypercorn's one timer for a connection without a request in progress: it starts when
    # the connection opens (and again after each response) and stops once a request's
    # headers are complete. So it is the header timeout (a client trickling a header line
    # every few seconds is closed after it) and the keep-alive idle timeout. hypercorn's
    # read_timeout is not used: it bounds the silence between two reads from the client,
    # which a trickle defeats and which would cut long streams (a client sends nothing
    # while it reads an answer).
    cfg.keep_alive_timeout = server.header_timeout_seconds
    # A request line and headers larger than this are refused (431) before any route.
    cfg.h11_max_incomplete_size = MAX_HEADER_BYTES
    cfg.graceful_timeout = gateway.config.server.shutdown_grace_seconds
    # The lifespan shutdown runs Gateway.stop (flush the writer, close the store). hypercorn
    # gives it 60 s by default and then raises, which abandoned the store's close after long
    # saturated runs: give it the gateway's own budget.
    cfg.shutdown_timeout = gateway.stop_budget_seconds()
    return cfg


def _bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve_until(
    gateway: Gateway,
    bind: str,
    stop: asyncio.Event,
    on_started: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve ``bind`` (``host:port`` or ``fd://N``) until ``stop`` is set; ``on_started`` runs
    once the gateway has started, before the first request."""
    app = create_app(gateway)
    if on_started is not None:
        # Registered after create_app's own startup hook, so it runs after gateway.start().
        app.before_serving(on_started)
    await hypercorn_serve(app, hypercorn_config(gateway, bind), shutdown_trigger=stop.wait)


# Collect the youngest generation every this many net allocations of container objects,
# instead of Python's default 700. At 700 a gateway under load ran a young collection about
# every other request, which promoted the objects of the requests still in flight into the
# older generations, so those were collected often too: the full collections came every
# ~250 requests and paused the event loop for 50-150 ms each (2-core machine, benchmarks/
# proxy_overhead.py). At 10,000 collections of every generation are 15-20x rarer, a young
# one stays short, and most request objects are freed by reference counting first.
GC_GEN0_THRESHOLD = 10_000


def tune_gc_for_serving() -> None:
    """Make garbage collection cheap for a long-running gateway process (``lore serve``
    only: tests and embedders keep their own settings)."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


async def freeze_startup_heap() -> None:
    """Move everything alive after startup (modules, plugins, config: ~70,000 objects) out
    of the collector's sight: it lives as long as the process, and every full collection
    would otherwise walk all of it again."""
    gc.collect()
    gc.freeze()


def listen_socket(host: str, port: int) -> socket.socket:
    """Bind before serving, so a busy port fails at once with a clear error and the URL we
    print is one that already accepts connections."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it. Without it, a response written as headers and then a
    # body (or one SSE event after another) waits for the client's delayed ACK of the first
    # write (Nagle's algorithm): ~40 ms added to every non-streamed answer for curl or
    # Python's http.client. hypercorn sets it only on sockets it binds itself, not on the
    # descriptor handed to it here.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


class CannotListen(OSError):
    """The gateway's address could not be bound (port in use, bad host, ...)."""


#: glibc's malloc arenas a gateway process may use (``M_ARENA_MAX``).
MALLOC_ARENAS = 2
#: Allocations from this size up get pages of their own, given back when freed
#: (``M_MMAP_THRESHOLD``; fixing it also stops glibc from raising it as large blocks come
#: and go, which left them in the heap, where they fragment it).
MALLOC_MMAP_THRESHOLD = 128 * 1024
#: How often the gateway hands glibc's free-but-kept heap pages back (``malloc_trim``).
MALLOC_TRIM_SECONDS = 30.0
_M_ARENA_MAX = -8  # mallopt's parameter numbers in glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has ``mallopt`` and ``malloc_trim``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim  # noqa: B018 (both exist only in glibc)
    except (OSError, AttributeError):
        return None  # musl: no arenas to cap, nothing to trim
    return libc


def tune_malloc() -> None:
    """Bound what glibc's malloc keeps. glibc gives threads that allocate (the store's, the
    index's, the executor's) arenas of their own, up to 8 per core, and keeps what is freed
    in each: under a soak that was +168 MiB of free-but-kept memory in 140 s, which two
    arenas all but remove (benchmarks/soak.py). ``MALLOC_ARENA_MAX`` in the environment,
    when set, is left to win. Large blocks are mmapped (see MALLOC_MMAP_THRESHOLD). Elsewhere
    than glibc this does nothing."""
    libc = _glibc()
    if libc is None:
        return
    if "MALLOC_ARENA_MAX" not in os.environ:
        libc.mallopt(_M_ARENA_MAX, MALLOC_ARENAS)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        libc.mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)


def start_malloc_trimmer(
    stop: threading.Event, every: float = MALLOC_TRIM_SECONDS
) -> threading.Thread | None:
    """A thread that gives glibc's free heap pages back every ``every`` seconds until
    ``stop`` is set. In a saturated soak the free-but-kept part otherwise grew from ~60 to
    ~160 MiB in five minutes; with this and the fixed mmap threshold the gateway ended 125
    MiB smaller at the same throughput. A trim takes ~10 ms (up to ~60 ms under that load)
    in this thread; only allocations in the arena it holds wait (benchmarks/README.md)."""
    libc = _glibc()
    if libc is None:
        return None

    def run() -> None:
        while not stop.wait(every):
            libc.malloc_trim(0)

    thread = threading.Thread(target=run, name="lore-malloc-trim", daemon=True)
    thread.start()
    return thread


#: Descriptors ``lore serve`` asks for: its soft ``RLIMIT_NOFILE`` is raised to this (or the
#: hard limit, when lower).
OPEN_FILES_WANTED = 65_536


def raise_open_files_limit() -> int | None:
    """Raise the soft limit on open descriptors toward the hard one; the limit now in force
    (None where there is none to raise). hypercorn 0.18 has no cap on concurrent connections
    (no hook between its accept and its connection handler), and each connection costs a
    descriptor: under the usual soft limit of 1,024, about 1,000 idle connections left the
    gateway unable to open its store's files or an upstream connection. The header timeout
    closes such connections; this makes holding enough of them open at once far harder."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):  # macOS caps it below the hard limit
            return soft
        return want
    return soft


def serve_forever(gateway: Gateway, host: str, port: int, on_listening: Callable[[str], None]) -> None:
    """Run until SIGINT/SIGTERM, then shut down cleanly (in-flight work is flushed)."""
    try:
        sock = listen_socket(host, port)
    except OSError as exc:
        raise CannotListen(exc.errno, exc.strerror or str(exc)) from exc
    bound_port = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host

    # hypercorn takes ownership of the descriptor and closes it at shutdown.
    fd = sock.detach()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        on_listening(f"http://{shown_host}:{bound_port}")
        await serve_until(gateway, f"fd://{fd}", stop, on_started=freeze_startup_heap)

    tune_gc_for_serving()
    raise_open_files_limit()
    trimmer_stop = threading.Event()
    start_malloc_trimmer(trimmer_stop)
    try:
        try:
            import uvloop  # optional: a faster event loop when installed
        except ImportError:
            asyncio.run(main())
        else:
            uvloop.run(main())
    finally:
        trimmer_stop.set()
