"""The Quart app: the routes, and the guard in front of them.

A model request of a wire API the gateway models goes to :func:`lore_core.pipeline.request.handle`
(read it top to bottom to follow a request); other provider paths pass through
(:mod:`lore_core.pipeline.passthrough`); ``/lore/api`` is the local API.
"""

from __future__ import annotations

import logging
from typing import Any

from quart import Quart, Request, Response, has_request_context, request, websocket
from werkzeug.exceptions import HTTPException

from lore_core.gateway import Gateway
from lore_core.http import access
from lore_core.http.api import api as lore_api
from lore_core.http.events import events_api
from lore_core.http.imports import imports_api, stop_imports
from lore_core.http.mounts import MountDispatcher
from lore_core.pipeline.answers import error_response, json_response
from lore_core.pipeline.passthrough import passthrough
from lore_core.pipeline.relay import UpstreamStreamBroken
from lore_core.pipeline.request import handle

__all__ = ["UpstreamStreamBroken", "create_app"]

log = logging.getLogger("lore.app")

ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _request_class(api_body_limit: int) -> type[Request]:
    """Quart's request with the local API's body limit on the local API's paths. The limit
    is Quart's (``max_content_length``: it bounds chunked bodies too, as they arrive); the
    model routes count their own (:func:`lore_core.pipeline.parse.read_body`, with a 413 in
    the wire API's shape)."""

    class BoundedRequest(Request):
        def __init__(self, method: str, scheme: str, path: str, *args: Any, **kwargs: Any) -> None:
            if path.startswith(access.PROTECTED_PREFIXES):
                kwargs["max_content_length"] = api_body_limit
            super().__init__(method, scheme, path, *args, **kwargs)

    return BoundedRequest


def create_app(gateway: Gateway) -> Quart:
    app = Quart("lore")
    server = gateway.config.server
    # Streams may legitimately run for many minutes. BODY_TIMEOUT bounds the local API's
    # reads (get_data); the model routes apply the same one themselves.
    app.config.update(
        MAX_CONTENT_LENGTH=None, RESPONSE_TIMEOUT=None, BODY_TIMEOUT=server.body_timeout_seconds
    )
    app.request_class = _request_class(server.max_api_body_bytes)
    # No automatic OPTIONS answers (an empty text/html 200): an OPTIONS request goes to the
    # routes below like any other method, and is answered in JSON.
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    app.extensions["lore"] = gateway
    app.register_blueprint(lore_api)  # /lore/api: the local read API for the CLI
    app.register_blueprint(events_api)  # /v1/events, /v1/pack, /openapi.json: the memory API
    app.register_blueprint(imports_api)  # /lore/api/import/history: lore import --from, gateway running

    @app.before_request
    async def _guard() -> Response | None:
        # Host, Origin, peer and token, before any route reads or changes anything.
        refusal = access.check(
            request.path,
            {k.lower(): v for k, v in request.headers.items()},
            request.remote_addr,
            gateway.config,
            gateway.tokens,
        )
        if refusal is None:
            return None
        gateway.stats["requests_refused"] += 1
        if request.path.startswith(access.PROTECTED_PREFIXES):
            refused = json_response(refusal.status, {"error": refusal.message})
        else:
            codec = gateway.registry.codec_for_path(request.path) if request.method == "POST" else None
            refused = error_response(codec, refusal.status, refusal.message)
        # The body is never read: the connection cannot carry another request after it.
        refused.headers["Connection"] = "close"
        return refused

    @app.before_websocket
    async def _guard_websocket() -> Response | None:
        refusal = access.check(
            websocket.path,
            {k.lower(): v for k, v in websocket.headers.items()},
            websocket.remote_addr,
            gateway.config,
            gateway.tokens,
        )
        return None if refusal is None else json_response(refusal.status, {"error": refusal.message})

    # Plugins' applications under paths of their own (/mcp), dispatched before Quart.
    mounts = (
        MountDispatcher(app.asgi_app, gateway, list(gateway.registry.mounts.values()))
        if gateway.registry.mounts
        else None
    )

    @app.before_serving
    async def _start() -> None:
        await gateway.start()
        if mounts is not None:
            await mounts.start()

    @app.after_serving
    async def _stop() -> None:
        if mounts is not None:
            await mounts.stop()
        # A history import under way stops after its write (the next import goes on from there).
        await stop_imports(app)
        await gateway.stop()

    @app.get("/health")
    async def health() -> Response:
        return json_response(200, gateway.health())

    @app.route("/", methods=["HEAD"])
    @app.route("/<path:path>", methods=["HEAD"])
    async def head(path: str = "") -> Response:
        # Clients probe the base URL before their first request: answer at once.
        return Response(b"", status=200)

    @app.websocket("/")
    @app.websocket("/<path:path>")
    async def no_websockets(path: str = "") -> Response:
        # Codex tries a WebSocket first; 426 makes it fall back to HTTP at once (404 costs
        # it seconds of retries).
        codec = gateway.registry.codec_for_path("/" + path)
        message = "this gateway speaks HTTP only: send the same request as an HTTP POST"
        return error_response(codec, 426, message)

    @app.route("/<path:path>", methods=ALL_METHODS)
    async def proxy(path: str) -> Response:
        path = "/" + path
        if path.startswith(access.PROTECTED_PREFIXES):
            # The local API's namespace is never a provider's path: /lore/api/v1/models was
            # forwarded upstream, with the gateway token in its Authorization header.
            return json_response(404, {"error": f"no route for {request.method} {path}"})
        codec = gateway.registry.codec_for_path(path) if request.method == "POST" else None
        if codec is not None:
            return await handle(gateway, codec, path)
        if path.startswith("/v1/") or "/v1/" in path:
            return await passthrough(gateway, path)
        return error_response(None, 404, f"no route for {request.method} {path}")

    @app.errorhandler(HTTPException)
    async def _httperror_response(exc: HTTPException) -> Response:
        # What Quart refuses itself (a method no route takes: TRACE, made-up ones) is JSON
        # too, not its HTML page. A WebSocket handshake has no request context.
        status = exc.code or 400
        method, path = (request.method, request.path) if has_request_context() else ("GET", websocket.path)
        message = f"{exc.name}: {method} {path}"
        if path.startswith(access.PROTECTED_PREFIXES):
            return json_response(status, {"error": message})
        return error_response(None, status, message)

    # Registered by status: these win over the blueprints' catch-all handlers (a store
    # failure is a 503 there), so a body too large or too slow is said as such, in JSON.
    @app.errorhandler(413)
    async def _too_large(exc: HTTPException) -> Response:
        limit = server.max_api_body_bytes
        message = f"request body exceeds the local API's limit of {limit} bytes (server.maxApiBodyBytes)"
        return _body_refused(413, message)

    @app.errorhandler(408)
    async def _too_slow(exc: HTTPException) -> Response:
        seconds = server.body_timeout_seconds
        return _body_refused(408, f"the request body did not arrive within {seconds:g} s")

    def _body_refused(status: int, message: str) -> Response:
        if request.path.startswith(access.PROTECTED_PREFIXES):
            answer = json_response(status, {"error": message})
        else:
            answer = error_response(None, status, message)
        # The rest of the body is never read: the connection cannot carry another request.
        answer.headers["Connection"] = "close"
        return answer

    if mounts is not None:
        # Quart's documented middleware seam (the app stays a Quart instance); its ASGI
        # types are TypedDicts, the dispatcher's plain dicts.
        app.asgi_app = mounts  # type: ignore[method-assign,assignment]
    return app
