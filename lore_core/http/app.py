"""The Quart app: routes, and the path of one API request from client to upstream and back.

Read ``proxy_api`` top to bottom to follow a request: read and decode the body, parse it
with the API's codec, identify harness/session/project, run the prompt layers, forward
upstream, relay the answer (streamed chunk by chunk) while the codec's assembler rebuilds
the assistant message, then hand the finished exchange to the plugins.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
from quart import Quart, Response, request, websocket
from werkzeug.exceptions import HTTPException

from lore_core.context.commands import find_command
from lore_core.context.overflow import (
    OVERFLOW_STATUSES,
    Overflow,
    overflow_in_failed_response,
    parse_overflow,
)
from lore_core.gateway import Gateway
from lore_core.http import access
from lore_core.http.api import api as lore_api
from lore_core.interfaces import Codec, CompositionContext, RequestContext
from lore_core.model import TEXT, AssistantMessage, Block, Exchange, RequestView
from lore_core.pipeline.upstream import (
    BadUpstreamURL,
    UpstreamError,
    forward_headers,
    join_url,
    response_headers,
    upstream_path,
)
from lore_core.recall import proxy_loop
from lore_core.recall.proxy_loop import UpstreamStreamBroken
from lore_core.wire.encoding import UnsupportedEncoding, decode_body, decoder_for
from lore_core.wire.jsonbody import (
    append_to_array,
    loads_object,
    may_hold_lone_surrogates,
    replace_lone_surrogates,
)

log = logging.getLogger("lore.app")

ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


class ClientError(Exception):
    """A client mistake, answered with a 4xx in the API's own error shape."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def create_app(gateway: Gateway) -> Quart:
    app = Quart("lore")
    # The gateway enforces its own body limit (with an API-shaped 413) and streams may
    # legitimately run for many minutes.
    app.config.update(MAX_CONTENT_LENGTH=None, RESPONSE_TIMEOUT=None, BODY_TIMEOUT=300)
    # No automatic OPTIONS answers (an empty text/html 200): an OPTIONS request goes to the
    # routes below like any other method, and is answered in JSON.
    app.config["PROVIDE_AUTOMATIC_OPTIONS"] = False
    app.extensions["lore"] = gateway
    app.register_blueprint(lore_api)  # /lore/api: the local read API for the CLI

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
            refused = _json(refusal.status, {"error": refusal.message})
        else:
            codec = gateway.registry.codec_for_path(request.path) if request.method == "POST" else None
            refused = _error(codec, refusal.status, refusal.message)
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
        return None if refusal is None else _json(refusal.status, {"error": refusal.message})

    @app.before_serving
    async def _start() -> None:
        await gateway.start()

    @app.after_serving
    async def _stop() -> None:
        await gateway.stop()

    @app.get("/health")
    async def health() -> Response:
        return _json(200, gateway.health())

    @app.route("/", methods=["HEAD"])
    @app.route("/<path:path>", methods=["HEAD"])
    async def head(path: str = "") -> Response:
        # Clients probe the base URL before their first request: answer at once.
        return Response(b"", status=200)

    @app.websocket("/<path:path>")
    async def no_websockets(path: str) -> Response:
        # Codex tries a WebSocket first; 426 makes it fall back to HTTP at once (404 costs
        # it seconds of retries).
        codec = gateway.registry.codec_for_path("/" + path)
        message = "this gateway speaks HTTP only: send the same request as an HTTP POST"
        return _error(codec, 426, message)

    @app.route("/<path:path>", methods=ALL_METHODS)
    async def proxy(path: str) -> Response:
        path = "/" + path
        if path.startswith(access.PROTECTED_PREFIXES):
            # The local API's namespace is never a provider's path: /lore/api/v1/models was
            # forwarded upstream, with the gateway token in its Authorization header.
            return _json(404, {"error": f"no route for {request.method} {path}"})
        codec = gateway.registry.codec_for_path(path) if request.method == "POST" else None
        if codec is not None:
            return await proxy_api(gateway, codec, path)
        if path.startswith("/v1/") or "/v1/" in path:
            return await proxy_passthrough(gateway, path)
        return _error(None, 404, f"no route for {request.method} {path}")

    @app.errorhandler(HTTPException)
    async def _http_error(exc: HTTPException) -> Response:
        # What Quart refuses itself (a method no route takes: TRACE, made-up ones) is JSON
        # too, not its HTML page.
        status = exc.code or 400
        message = f"{exc.name}: {request.method} {request.path}"
        if request.path.startswith(access.PROTECTED_PREFIXES):
            return _json(status, {"error": message})
        return _error(None, status, message)

    return app


# ---------------------------------------------------------------------------------------------
# One API request, end to end
# ---------------------------------------------------------------------------------------------


COMMAND_REFUSED = (
    "Lore did not run this command: this session was started with other credentials (API key "
    "or login), and only those may change or read its memory settings. Nothing was changed."
)


async def proxy_api(gateway: Gateway, codec: Codec, path: str) -> Response:
    try:
        body, decoded, raw, spans = await _read_json_body(gateway)
    except ClientError as exc:
        return _error(codec, exc.status, exc.message)

    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        view = codec.parse(raw, decoded)
    except Exception:
        # A body we cannot model is still a valid request: pass it through untouched.
        log.exception("%s codec could not parse a request; passing it through", codec.api)
        return await proxy_passthrough(gateway, path, body=body)

    ctx = RequestContext(path=path, headers=headers, view=view, gateway_cwd=gateway.cwd)
    harness, session_id, project = gateway.identify(ctx)
    await gateway.amnesia.load(session_id)  # cached after the session's first request
    command = find_command(view)
    # The request's first message: carrying it shows a request has the session's history
    # (a command sent alone shows nothing).
    with_history = bool(view.messages) and (command is None or len(view.messages) > 1)
    first_message = view.messages[0].text if with_history else None
    if command is not None:
        # A /lore: command is answered by the gateway; the model never sees it. Only the
        # session's own credentials may change or read it (any process can name a session).
        if command.name == "help" or gateway.owners.may_command(session_id, headers, first_message):
            gateway.stats["commands_answered"] += 1
            answer = await gateway.answer_command(command, session_id, view)
        else:
            gateway.stats["commands_refused"] += 1
            answer = COMMAND_REFUSED
        body, content_type = codec.render_response(answer, view.model, view.stream)
        return Response(body, status=200, content_type=content_type)
    gateway.owners.request_seen(session_id, headers, first_message)
    if _is_compaction(harness, ctx):
        answer = await gateway.distiller.compaction_summary(session_id)
        if answer is not None:
            # The client's own summary becomes Lore's memory: no upstream call.
            gateway.stats["compactions_answered"] += 1
            summary = f"<summary>\n{answer}\n</summary>"
            body, content_type = codec.render_response(summary, view.model, view.stream)
            # Stored like any exchange: the request's messages and the summary it got.
            gateway.exchange_finished(
                Exchange(
                    api=codec.api,
                    path=path,
                    request=view,
                    harness=harness.name,
                    session_id=session_id,
                    project=project,
                    upstream="lore",
                    status=200,
                    response=AssistantMessage(
                        blocks=[Block(TEXT, text=summary)], model=view.model, complete=True
                    ),
                )
            )
            return Response(body, status=200, content_type=content_type)
    # Markers of earlier recalls become the real tool call + result again (cache-stable).
    client_view = await gateway.recall_memory.restore(codec, view, session_id)
    try:
        base = gateway.upstream.resolve(codec.provider, client_view.model, headers)
    except BadUpstreamURL as exc:
        return _error(codec, 400, f"X-Lore-Upstream-URL: {exc}")
    url = join_url(base, upstream_path(path), request.query_string.decode("latin-1"))
    gateway.session_seen(session_id, codec.api, codec.provider, base, headers, client_view.model)

    # A prompt the upstream refuses as too long is composed again, once, at the layer the
    # overflow raised the session to: the client sees the answer, not the error.
    for attempt in (1, 2):
        composing = CompositionContext(session_id, project, harness.name, codec)
        view = await gateway.compose(client_view, composing)
        composed = view.modified
        recall_on = proxy_loop.inject_tool(view, gateway.config.recall.tool)

        out_headers = forward_headers(_client_headers())
        if view.modified:
            try:
                spliced = None if composed else _with_added_tools(spans, raw, view)
                out_body = spliced or json.dumps(codec.render(view), ensure_ascii=False).encode()
                out_headers = [(k, v) for k, v in out_headers if k.lower() != "content-encoding"]
            except Exception:
                log.exception("%s codec could not render a composed request; sending the original", codec.api)
                out_body = body
        else:
            out_body = body  # byte for byte, still in the client's content-encoding

        exchange = Exchange(
            api=codec.api,
            path=path,
            request=view,
            harness=harness.name,
            session_id=session_id,
            project=project,
            upstream=base,
        )
        await gateway.throttle_upstream(session_id, view.model)
        try:
            upstream = await gateway.upstream.send(request.method, url, out_headers, out_body)
        except UpstreamError as exc:
            return _upstream_failed(
                gateway, codec, exchange, f"Lore could not reach the upstream {exc.upstream}: {exc.reason}"
            )
        except asyncio.CancelledError:
            _client_gone(gateway, exchange)
            raise

        exchange.status = upstream.status_code
        is_sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
        # A refusal as too long seen before anything reached the client is composed again,
        # once: an error answer, or a Responses stream failing right after it opened.
        retry_above = None
        if attempt == 1:
            retry_above = composing.composition.layer if composing.composition is not None else 0
        if (
            retry_above is not None
            and is_sse
            and upstream.status_code == 200
            and _may_fail_started(codec, view)
        ):
            try:
                upstream, overflow = await _peek_responses_stream(upstream)
            except asyncio.CancelledError:
                await asyncio.shield(upstream.aclose())
                _client_gone(gateway, exchange)
                raise
            if overflow is not None and await _refused_as_too_long(gateway, exchange, overflow, retry_above):
                await upstream.aclose()
                continue
        if retry_above is not None and not is_sse and upstream.status_code in OVERFLOW_STATUSES:
            refused = await _buffered_response(gateway, codec, upstream, exchange, retry_above=retry_above)
            if refused is None:
                continue
            return refused
        break

    limit = _context_limit(gateway, view.model)
    share = gateway.config.budget.client_usage_share
    if (
        upstream.status_code == 200
        and codec.api in proxy_loop.APIS
        and (recall_on or _may_scale(len(out_body), limit, share, view))
    ):
        loop = proxy_loop.RecallLoop(
            codec=codec,
            view=view,
            body=out_body,
            exchange=exchange,
            # Bound now: the stream runs after the request context is gone.
            send=lambda follow_up, method=request.method: gateway.upstream.send(
                method, url, out_headers, follow_up
            ),
            finished=gateway.exchange_finished,
            run=proxy_loop.run_for(gateway, session_id, project),
            memory=gateway.recall_memory,
            recall_active=recall_on,
            max_rounds=gateway.config.recall.max_rounds,
            context_limit=limit,
            usage_share=share,
        )
        return await _loop_response(gateway, loop, upstream, is_sse)
    if is_sse:
        return _stream_response(gateway, codec, upstream, exchange)
    return await _buffered_response(gateway, codec, upstream, exchange)


async def _loop_response(
    gateway: Gateway, loop: proxy_loop.RecallLoop, upstream: httpx.Response, is_sse: bool
) -> Response:
    """The answer through the recall loop (which also scales the usage the client sees)."""
    # The loop relays decoded bytes, rewritten where it must: no content-encoding or length.
    headers = [
        (k, v)
        for k, v in response_headers(upstream.headers)
        if k.lower() not in ("content-encoding", "content-length")
    ]
    if is_sse:
        response = Response(loop.stream(upstream), status=upstream.status_code, headers=headers)
        response.timeout = None  # Quart would cut streams after 60 s while still reporting 200
        return response
    try:
        status, body, new_headers = await loop.buffered(upstream)
    except httpx.HTTPError as exc:
        gateway.upstream.note_failure(loop.exchange.upstream, f"a response broke off: {exc}")
        loop.exchange.status = 502
        loop.finished(loop.exchange)
        return _error(loop.codec, 502, f"the upstream {loop.exchange.upstream} broke off its response: {exc}")
    if new_headers is None:
        return Response(body, status=status, headers=response_headers(upstream.headers))
    kept = [(k, v) for k, v in headers if k.lower() != "content-type"]
    return Response(body, status=status, headers=kept + new_headers)


def _with_added_tools(
    spans: tuple[str, dict[str, tuple[int, int]]] | None, raw: dict[str, Any], view: RequestView
) -> bytes | None:
    """The client's body with the tools the view appended to its own (the recall tool), when
    that is all that changed: the same request as rendering the view, without serialising the
    whole body again. ``None`` when the view differs from the body in any other way."""
    own = raw.get("tools")
    if spans is None or "tools" not in spans[1] or not isinstance(own, list) or not own:
        return None
    if len(view.tools) <= len(own) or any(a is not b for a, b in zip(own, view.tools, strict=False)):
        return None
    text, members = spans
    # surrogatepass: the client's own bytes again, also where they encode a lone surrogate.
    return append_to_array(text, members["tools"], view.tools[len(own) :]).encode("utf-8", "surrogatepass")


def _context_limit(gateway: Gateway, model: str | None) -> int:
    try:
        return gateway.price_table.lookup(model).context_window
    except Exception:
        return 0


#: The events a Responses stream opens with: nothing a client shows.
_OPENING_EVENTS = frozenset({"", "response.created", "response.in_progress", "response.queued"})
#: A stream whose opening is longer than this is relayed without waiting further.
_PEEK_MAX_BYTES = 65_536


def _may_fail_started(codec: Codec, view: RequestView) -> bool:
    """Whether the upstream may fail this request as too long after starting its stream:
    OpenAI's Responses API does (HTTP 200, ``response.created``, then ``response.failed``).
    A request continuing server-side state cannot be made shorter here."""
    return codec.api == proxy_loop.RESPONSES and not view.raw.get("previous_response_id")


class _Peeked:
    """An upstream response whose first raw chunks were read already: :meth:`aiter_raw`
    yields them again, then the rest (and raises what reading them raised)."""

    def __init__(self, upstream: httpx.Response, held: list[bytes], rest: AsyncIterator[bytes]) -> None:
        self._upstream = upstream
        self.held = held
        self._rest = rest
        self.error: httpx.HTTPError | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._upstream, name)

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for chunk in self.held:
            yield chunk
        if self.error is not None:
            raise self.error
        async for chunk in self._rest:
            yield chunk


async def _peek_responses_stream(upstream: httpx.Response) -> tuple[Any, Overflow | None]:
    """Read a started Responses stream up to its first event past the opening ones. OpenAI
    fails an input past the context window right there; seen before anything was relayed,
    the request can still be composed again. Otherwise the events read are relayed first,
    unchanged: only the opening lifecycle events wait, for the first event after them."""
    rest = upstream.aiter_raw()
    peeked = _Peeked(upstream, [], rest)
    if upstream.headers.get("content-encoding", "identity") != "identity":
        return peeked, None  # a compressed stream is rare and relayed as it comes
    splitter = proxy_loop.EventSplitter()
    size = 0
    try:
        async for chunk in rest:
            peeked.held.append(chunk)
            size += len(chunk)
            for name, data, _ in splitter.feed(chunk):
                if name == "response.failed":
                    return peeked, overflow_in_failed_response(data)
                if name not in _OPENING_EVENTS:
                    return peeked, None
            if size > _PEEK_MAX_BYTES:
                break
    except httpx.HTTPError as exc:
        peeked.error = exc  # raised to the relay, after what was read
    return peeked, None


def _may_scale(body_bytes: int, limit: int, share: float, view: RequestView) -> bool:
    """Could the prompt be past the share of the context the client may see? A request
    without the recall tool only goes through the (rewriting) loop then; about 4 bytes make
    a token, so 2 bytes per token is a generous upper bound. A Responses request continuing
    server-side state (``previous_response_id``) carries only the new items: its prompt can
    be any size."""
    if not (0 < share < 1 and limit > 0):
        return False
    return body_bytes / 2 > limit * share or bool(view.raw.get("previous_response_id"))


def _stream_response(
    gateway: Gateway, codec: Codec, upstream: httpx.Response, exchange: Exchange
) -> Response:
    """Relay SSE chunk by chunk; the assembler reads a decoded copy beside the relay."""
    assembler = codec.assembler()
    try:
        decoder = decoder_for(upstream.headers.get("content-encoding"))
    except UnsupportedEncoding:
        decoder = None

    finished = False

    def finish() -> None:
        nonlocal finished
        if not finished:
            finished = True
            try:
                exchange.response = assembler.result()
            except Exception as exc:
                # A stream of the wrong shape: relayed as it came, recorded without its answer.
                log.warning(
                    "%s: the upstream's stream could not be read (%s: %s)", codec.api, type(exc).__name__, exc
                )
            gateway.exchange_finished(exchange)

    async def relay() -> AsyncIterator[bytes]:
        nonlocal decoder
        try:
            async for chunk in upstream.aiter_raw():
                # Read before it is relayed: the exchange finishes (and is journaled) before
                # the client has the terminal event, so an answer the client has in full is
                # never lost, whenever the gateway dies.
                if decoder is not None:
                    try:
                        assembler.feed(decoder.decompress(chunk))
                    except Exception as exc:
                        # The upstream's events are of a shape the assembler cannot read:
                        # the stream is still relayed, only its record is lost.
                        log.warning(
                            "%s: the upstream's stream could not be read (%s: %s); relayed as is",
                            codec.api,
                            type(exc).__name__,
                            exc,
                        )
                        decoder = None
                    if decoder is not None and assembler.done:
                        finish()
                yield chunk
        except asyncio.CancelledError:
            exchange.client_disconnected = True
            raise
        except httpx.HTTPError as exc:
            log.warning("upstream stream from %s broke off: %s", exchange.upstream, exc)
            gateway.stats["upstream_errors"] += 1
            gateway.upstream.note_failure(exchange.upstream, f"a stream broke off: {exc}")
            # Abort the client's connection too: ending the response cleanly would make a
            # cut stream look complete.
            raise UpstreamStreamBroken(str(exc)) from None
        finally:
            # Closing the upstream response also cancels the upstream request when the
            # client went away mid-stream.
            await asyncio.shield(upstream.aclose())
            finish()

    response = Response(relay(), status=upstream.status_code, headers=response_headers(upstream.headers))
    response.timeout = None  # Quart would cut streams after 60 s while still reporting 200
    return response


def _client_gone(gateway: Gateway, exchange: Exchange) -> None:
    """The client disconnected before its answer was complete."""
    exchange.client_disconnected = True
    gateway.exchange_finished(exchange)


def _upstream_failed(gateway: Gateway, codec: Codec, exchange: Exchange, message: str) -> Response:
    """The upstream could not be reached or broke off: a 502 in the API's error shape."""
    gateway.stats["upstream_errors"] += 1
    exchange.status = 502
    gateway.exchange_finished(exchange)
    return _error(codec, 502, message)


async def _refused_as_too_long(
    gateway: Gateway, exchange: Exchange, overflow: Overflow, retry_above: int | None
) -> bool:
    """The upstream refused the request as too long: the session's next turns start at a
    higher layer. True (and the refused exchange finished) when that layer is above
    ``retry_above``, the layer the request was composed at: the caller composes it again
    and sends it once more. ``None``: no retry (it was the retry)."""
    layer = await gateway.context_overflow(exchange.session_id, overflow, exchange.request)
    if retry_above is None or layer <= retry_above:
        return False
    gateway.exchange_finished(exchange)
    gateway.stats["overflow_retries"] += 1
    return True


async def _buffered_response(
    gateway: Gateway,
    codec: Codec,
    upstream: httpx.Response,
    exchange: Exchange,
    retry_above: int | None = None,
) -> Response | None:
    """The upstream's whole answer, relayed as it came. An error saying the prompt is too
    long raises the session's layer; with ``retry_above`` (the layer the request was composed
    at), ``None`` instead when that raised it higher: the caller composes and sends again."""
    try:
        raw = b"".join([chunk async for chunk in upstream.aiter_raw()])
    except httpx.HTTPError as exc:
        gateway.upstream.note_failure(exchange.upstream, f"a response broke off: {exc}")
        return _upstream_failed(
            gateway, codec, exchange, f"the upstream {exchange.upstream} broke off its response: {exc}"
        )
    except asyncio.CancelledError:
        _client_gone(gateway, exchange)
        raise
    finally:
        await upstream.aclose()
    if upstream.status_code == 200:
        try:
            payload = json.loads(decode_body(raw, upstream.headers.get("content-encoding")))
            if isinstance(payload, dict):
                exchange.response = codec.parse_response(payload)
        except (ValueError, UnsupportedEncoding):
            log.warning("%s: a 200 response was not JSON; relayed as is", codec.api)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            # The upstream's JSON is of the wrong shape: its bytes are still the answer.
            log.warning("%s: a 200 response could not be read (%s); relayed as is", codec.api, exc)
    elif upstream.status_code in OVERFLOW_STATUSES:
        try:
            error_body = decode_body(raw, upstream.headers.get("content-encoding"))
            overflow = parse_overflow(upstream.status_code, error_body)
        except (ValueError, UnsupportedEncoding):
            overflow = None
        if overflow is not None and await _refused_as_too_long(gateway, exchange, overflow, retry_above):
            return None
    gateway.exchange_finished(exchange)
    return Response(raw, status=upstream.status_code, headers=response_headers(upstream.headers))


async def proxy_passthrough(gateway: Gateway, path: str, body: bytes | None = None) -> Response:
    """Forward anything the pipeline does not model (models list, count_tokens, files, ...)."""
    if body is None:
        try:
            body = await _read_body(gateway)
        except ClientError as exc:
            return _error(None, exc.status, exc.message)
    headers = {k.lower(): v for k, v in request.headers.items()}
    provider = _guess_provider(path, headers)
    try:
        base = gateway.upstream.resolve(provider, None, headers)
    except BadUpstreamURL as exc:
        return _error(None, 400, f"X-Lore-Upstream-URL: {exc}")
    url = join_url(base, upstream_path(path), request.query_string.decode("latin-1"))
    try:
        upstream = await gateway.upstream.send(
            request.method, url, forward_headers(_client_headers()), body or None
        )
    except UpstreamError as exc:
        gateway.stats["upstream_errors"] += 1
        return _error(None, 502, f"Lore could not reach the upstream {exc.upstream}: {exc.reason}", provider)

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            log.warning("upstream %s broke off: %s", base, exc)
        finally:
            await asyncio.shield(upstream.aclose())

    response = Response(relay(), status=upstream.status_code, headers=response_headers(upstream.headers))
    response.timeout = None
    return response


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


async def _read_body(gateway: Gateway) -> bytes:
    limit = gateway.config.server.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ClientError(
            413, f"request body of {declared} bytes exceeds the gateway's limit of {limit} bytes"
        )
    chunks, size = [], 0
    async for chunk in request.body:
        size += len(chunk)
        if size > limit:
            raise ClientError(413, f"request body exceeds the gateway's limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


#: Python's JSON parser gives up past its recursion limit (about 1,000 levels); no API
#: request nests anywhere near that.
TOO_DEEP = "the request body nests too deeply to be a model request"


async def _read_json_body(
    gateway: Gateway,
) -> tuple[bytes, bytes, dict[str, Any], tuple[str, dict[str, tuple[int, int]]] | None]:
    """(bytes as sent, decoded bytes, parsed object, (the decoded text, where each member's
    value lies in it) or ``None``), or a :class:`ClientError`."""
    body = await _read_body(gateway)
    content_type = request.headers.get("content-type", "")
    mime = content_type.split(";")[0].strip().lower()
    if mime and mime != "application/json" and not mime.endswith("+json"):
        raise ClientError(415, f"expected a JSON body (Content-Type: application/json), got {content_type!r}")
    try:
        decoded = decode_body(body, request.headers.get("content-encoding"))
    except ValueError as exc:
        raise ClientError(400, f"cannot decode the request body: {exc}") from None
    if not decoded.strip():
        raise ClientError(400, "the request body is empty; expected a JSON object")
    try:
        # Decoded as json.loads decodes bytes.
        encoding = json.detect_encoding(decoded)
        text = decoded.decode(encoding, "surrogatepass")
        raw, spans = loads_object(text)
        if may_hold_lone_surrogates(text, decoded, encoding):
            # What the gateway reads, stores and hashes must be valid Unicode; the bytes
            # forwarded stay the client's (the provider judges them).
            raw = replace_lone_surrogates(raw)
        return body, decoded, raw, (text, spans)
    except ValueError:
        pass  # json.loads says what is wrong, or parses what loads_object does not cover
    except RecursionError:
        raise ClientError(400, TOO_DEEP) from None
    try:
        raw = json.loads(decoded)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ClientError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ClientError(400, TOO_DEEP) from None
    if not isinstance(raw, dict):
        raise ClientError(400, f"the request body must be a JSON object, got {type(raw).__name__}")
    return body, decoded, replace_lone_surrogates(raw), None


def _is_compaction(harness: object, ctx: RequestContext) -> bool:
    check = getattr(harness, "compaction_request", None)
    try:
        return bool(check(ctx)) if check is not None else False
    except Exception:
        log.exception("harness %s failed to check for a compaction request", getattr(harness, "name", "?"))
        return False


def _client_headers() -> list[tuple[str, str]]:
    """The headers exactly as the client sent them (the raw ASGI list). Quart's
    ``request.headers`` also holds headers it adds itself, such as ``Remote-Addr``, which
    must not travel upstream."""
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in request.scope["headers"]]


def _guess_provider(path: str, headers: dict[str, str]) -> str:
    if "/messages" in path or "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    return "openai"


def _json(status: int, payload: Any) -> Response:
    return Response(json.dumps(payload), status=status, content_type="application/json")


def _error(codec: Codec | None, status: int, message: str, provider: str | None = None) -> Response:
    """An error in the wire API's own shape (OpenAI's shape when the API is unknown)."""
    if codec is not None:
        return _json(status, codec.error_body(status, message))
    if provider == "anthropic":
        return _json(status, {"type": "error", "error": {"type": "api_error", "message": message}})
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return _json(status, {"error": {"message": message, "type": kind, "param": None, "code": None}})
