"""``/mcp`` on the gateway: the tools over the SDK's streamable HTTP transport.

The gateway hands requests for ``/mcp`` here only after its guard (Host, Origin, peer and
the gateway token, :mod:`lore_core.http.access`). The tools call the gateway in-process
(the :class:`~lore_core.interfaces.LocalApi` the kernel gives :meth:`McpMount.start`).

The SDK is imported, and its session manager started, on the first request rather than at
gateway startup: importing it takes more than a second, which a gateway whose clients never
use MCP (and every test gateway) should not pay.

The transport runs stateless with JSON answers: every tool call is one request and one
answer, there is nothing to push to the client, so no session is kept between requests
(a restarted gateway never strands a client's session id). A ``GET`` (the stream a client
may open for server-initiated messages) is answered 405, as the spec allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from lore_core.interfaces import ASGIReceive, ASGIScope, ASGISend, LocalApi, Mount

#: How long shutdown waits for the transport's task group to finish.
STOP_TIMEOUT_SECONDS = 5.0


class McpMount(Mount):
    name = "mcp"
    path = "/mcp"

    def __init__(self) -> None:
        self._api: LocalApi | None = None
        self._app: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()

    async def start(self, api: LocalApi) -> None:
        self._api = api

    async def _running_app(self) -> Any:
        """The SDK's ASGI app, its session manager running (started on first use)."""
        async with self._lock:
            if self._app is not None:
                return self._app
            assert self._api is not None, "the gateway calls start() before any request"
            from mcp.server.transport_security import TransportSecuritySettings

            from lore_mcp.tools import build_server, header_project

            server = build_server(self._api, header_project)
            app = server.streamable_http_app(
                streamable_http_path=self.path,
                stateless_http=True,
                json_response=True,
                # The gateway's guard has applied its Host and Origin rules (with its own
                # server.allowedHosts) before this app sees the request; the SDK's own check
                # would only refuse hosts the gateway was configured to answer.
                transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            )
            manager = server.session_manager
            ready, stop = asyncio.Event(), asyncio.Event()

            async def run() -> None:
                async with manager.run():
                    ready.set()
                    await stop.wait()

            task = asyncio.create_task(run(), name="lore-mcp-sessions")
            waiter = asyncio.create_task(ready.wait())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if task.done():
                task.result()  # it failed to start: raise why
            self._app, self._task, self._stop = app, task, stop
            return app

    async def stop(self) -> None:
        task, stop = self._task, self._stop
        self._app = self._task = self._stop = None
        if task is None or stop is None:
            return
        stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), STOP_TIMEOUT_SECONDS)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        if scope.get("method") == "GET":
            # The spec's answer when the server offers no stream of its own: stateless, it has
            # nothing to push, and the SDK would hold the GET open until shutdown.
            await _answer(send, 405, {"error": "this MCP server answers POST only"}, allow=b"POST")
            return
        app = await self._running_app()
        await app(scope, receive, send)


async def _answer(send: ASGISend, status: int, payload: dict[str, str], allow: bytes) -> None:
    body = json.dumps(payload).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"allow", allow),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
