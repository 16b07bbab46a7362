"""Plugins' ASGI applications served under a path of the gateway (``lore_register_mounts``),
and the in-process API they call.

:class:`MountDispatcher` wraps the Quart app's ``asgi_app`` (Quart's documented middleware
seam): a request for a mounted path (``/mcp`` and below) goes to its
:class:`~lore_core.interfaces.Mount` once it has passed :func:`lore_core.http.access.check`
with the token required (for a mount that ``authenticates_itself``: Host, Origin and peer,
then a :class:`~lore_core.interfaces.MountAuth` in the scope); every other request, and the
lifespan, goes to Quart untouched.
Refusals are JSON, as on ``/lore/api``.

:class:`InProcessApi` is the :class:`~lore_core.interfaces.LocalApi` a mount gets: httpx
over an ASGI transport straight into the Quart app (no socket, no loop back through the
network), with the gateway token, so a mount's calls pass the same guard and routes as any
client's and get the same answers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from lore_core.http import access
from lore_core.interfaces import (
    MOUNT_AUTH_SCOPE_KEY,
    ApiAnswer,
    ASGIReceive,
    ASGIScope,
    ASGISend,
    LocalApi,
    Mount,
    MountAuth,
)

if TYPE_CHECKING:
    from lore_core.gateway import Gateway

log = logging.getLogger("lore.mounts")

#: How long one in-process call may take (a recall embeds its query; a pack may wait for
#: the read-your-writes window): generous, the routes bound their own work.
LOCAL_CALL_TIMEOUT_SECONDS = 120.0


class InProcessApi(LocalApi):
    """The gateway's routes, called through its own ASGI app with its token."""

    def __init__(self, asgi_app: Any, gateway: Gateway) -> None:
        self._gateway = gateway
        self._client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=asgi_app),
            # A loopback Host and peer (the transport's client is 127.0.0.1): what the guard
            # lets through for a local client.
            base_url="http://127.0.0.1",
            timeout=LOCAL_CALL_TIMEOUT_SECONDS,
        )

    async def call(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Any = None
    ) -> ApiAnswer:
        headers = {"Authorization": f"Bearer {self._gateway.tokens.current()}"}
        response = await self._client.request(
            method, path, params=dict(params or {}), json=body, headers=headers
        )
        try:
            payload = response.json() if response.content else None
        except ValueError:
            payload = None
        return ApiAnswer(response.status_code, payload)

    async def aclose(self) -> None:
        await self._client.aclose()


def _too_large(limit: int) -> str:
    return f"the request body is larger than server.maxApiBodyBytes ({limit} bytes)"


class _BoundedBody:
    """A mount's ``receive`` that counts the body: past ``limit`` bytes the application is
    told the client went away (``http.disconnect``) and gets no more of it; the dispatcher
    then answers 413 unless the application has answered already."""

    def __init__(self, receive: ASGIReceive, limit: int) -> None:
        self._receive = receive
        self.limit = limit
        self.received = 0
        self.exceeded = False

    async def __call__(self) -> dict[str, Any]:
        if self.exceeded:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message.get("type") == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                self.exceeded = True
                return {"type": "http.disconnect"}
        return message


async def _send_json(send: ASGISend, status: int, payload: Any, close: bool = False) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        # The body is never read: the connection cannot carry another request after it.
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class MountDispatcher:
    """The ASGI app hypercorn serves when plugins mount applications: mounted paths to their
    mount (after the guard), everything else to Quart."""

    def __init__(self, app: Any, gateway: Gateway, mounts: Sequence[Mount]) -> None:
        self._app = app
        self._gateway = gateway
        self._mounts = list(mounts)
        self._api: InProcessApi | None = None
        self._started: list[Mount] = []

    def match(self, path: str) -> Mount | None:
        for mount in self._mounts:
            if path == mount.path or path.startswith(mount.path + "/"):
                return mount
        return None

    async def start(self) -> None:
        """Start every mount (after ``Gateway.start``): requests reach a mount only after."""
        self._api = InProcessApi(self._app, self._gateway)
        for mount in self._mounts:
            await mount.start(self._api)
            self._started.append(mount)

    async def stop(self) -> None:
        """Stop the started mounts (before ``Gateway.stop``); one that fails is logged."""
        started, self._started = self._started, []
        for mount in reversed(started):
            try:
                await mount.stop()
            except Exception:
                log.exception("the mount %r failed to stop", mount.name)
        if self._api is not None:
            await self._api.aclose()
            self._api = None

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        mount = self.match(scope.get("path", "")) if scope["type"] in ("http", "websocket") else None
        if mount is None:
            await self._app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            # Mounts speak HTTP only. A close before the handshake is accepted is answered
            # 403 by the server; nothing of the mount runs.
            await send({"type": "websocket.close", "code": 1008})
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        client = scope.get("client")
        refusal = access.check(
            scope["path"],
            headers,
            client[0] if client else None,
            self._gateway.config,
            self._gateway.tokens,
            # A mount that authenticates itself gets the Host, Origin and peer checks only.
            protected=not mount.authenticates_itself,
        )
        if refusal is not None:
            self._gateway.stats["requests_refused"] += 1
            await _send_json(send, refusal.status, {"error": refusal.message}, close=True)
            return
        if mount not in self._started:
            await _send_json(send, 503, {"error": f"{mount.path} is not serving yet"})
            return
        if mount.authenticates_itself:
            scope = {**scope, MOUNT_AUTH_SCOPE_KEY: self._auth(mount, headers)}
        # A mounted application reads its body itself: the local API's body limit applies
        # here, whatever the application does (the MCP SDK reads a whole body at once).
        limit = self._gateway.config.server.max_api_body_bytes
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            await _send_json(send, 413, {"error": _too_large(limit)}, close=True)
            return
        await self._serve(mount, scope, _BoundedBody(receive, limit), send)

    def _auth(self, mount: Mount, headers: Mapping[str, str]) -> MountAuth:
        """Whether the request carries the gateway token, and the mount's key derived from it."""
        tokens = self._gateway.tokens
        key = hmac.new(tokens.current().encode(), b"lore mount " + mount.name.encode(), hashlib.sha256)
        return MountAuth(token_valid=tokens.matches(access.bearer(headers)), key=key.digest())

    async def _serve(self, mount: Mount, scope: ASGIScope, receive: _BoundedBody, send: ASGISend) -> None:
        started = False

        async def tracked_send(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message.get("type") == "http.response.start"
            await send(message)

        try:
            await mount(scope, receive, tracked_send)
        except Exception:
            if receive.exceeded:  # the application failed on the cut-off body
                log.info("a body over the limit was cut off on %s %s", scope.get("method"), scope["path"])
            else:
                log.exception("the mount %r failed on %s %s", mount.name, scope.get("method"), scope["path"])
            if not started:
                status, error = (
                    (413, _too_large(receive.limit))
                    if receive.exceeded
                    else (500, f"{mount.path} failed; the gateway's log says why")
                )
                await _send_json(send, status, {"error": error}, close=receive.exceeded)
            return
        if receive.exceeded and not started:
            await _send_json(send, 413, {"error": _too_large(receive.limit)}, close=True)
