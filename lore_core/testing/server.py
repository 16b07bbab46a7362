"""A real gateway on a real socket, in a background thread, for tests and benchmarks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import TypeVar

from lore_core.gateway import Gateway
from lore_core.http.serve import _bind_address, serve_until
from lore_core.testing.net import free_port, wait_for_http

T = TypeVar("T")


class ThreadedServer:
    """A real gateway on a real socket, in a background thread (tests and benchmarks)."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0) -> None:
        self.gateway = gateway
        self.host = host
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self) -> ThreadedServer:
        ready = threading.Event()

        def run() -> None:
            async def main() -> None:
                self._loop = asyncio.get_running_loop()
                self._stop = asyncio.Event()
                ready.set()
                await serve_until(self.gateway, _bind_address(self.host, self.port), self._stop)

            try:
                asyncio.run(main())
            except BaseException as exc:  # surfaced by start()/stop()
                self._error = exc
                ready.set()

        self._thread = threading.Thread(target=run, name="lore-gateway", daemon=True)
        self._thread.start()
        ready.wait(10)
        wait_for_http(self.url + "/health", timeout=20, error=lambda: self._error)
        return self

    def call(self, coro: Awaitable[T], timeout: float = 30.0) -> T:
        """Run a coroutine on the gateway's event loop and wait for its result (tests)."""
        assert self._loop is not None, "the server is not running"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)  # type: ignore[arg-type]

    def stop(self) -> None:
        """Stop serving and wait for the thread; calling it again is a no-op."""
        loop, self._loop = self._loop, None
        if loop is not None and self._stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def __enter__(self) -> ThreadedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
