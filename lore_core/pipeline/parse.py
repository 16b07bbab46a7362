"""Parse: read the request body (bounded, decoded), parse it with the API's codec, and
identify the harness, session and project. Everything after works on the :class:`Turn`."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from quart import request
from werkzeug.exceptions import RequestEntityTooLarge

from lore_core.builtin.harness_support import fingerprint_session
from lore_core.interfaces import Codec, Harness, RequestContext
from lore_core.pipeline.answers import ClientError
from lore_core.pipeline.turn import Spans, Turn
from lore_core.projects import project_root
from lore_core.wire.encoding import BodyTooLarge, decode_body
from lore_core.wire.jsonbody import loads_object, may_hold_lone_surrogates, replace_lone_surrogates

if TYPE_CHECKING:
    from lore_core.gateway import Gateway

log = logging.getLogger("lore.pipeline")


class Unparsed(Exception):
    """The codec could not model a valid JSON body: it is passed through untouched."""

    def __init__(self, body: bytes) -> None:
        super().__init__("unparsed request body")
        self.body = body


async def parse(gateway: Gateway, codec: Codec, path: str) -> Turn:
    """The request as a :class:`Turn`, identified. Raises :class:`ClientError` (a 4xx) or
    :class:`Unparsed`."""
    body, decoded, raw, spans = await read_json_body(gateway)
    try:
        view = codec.parse(raw, decoded)
    except Exception:
        # A body we cannot model is still a valid request: pass it through untouched.
        log.exception("%s codec could not parse a request; passing it through", codec.api)
        raise Unparsed(body) from None
    headers = {k.lower(): v for k, v in request.headers.items()}
    turn = Turn(
        codec=codec,
        path=path,
        method=request.method,
        query=request.query_string.decode("latin-1"),
        headers=headers,
        client_headers=client_headers(),
        body=body,
        raw=raw,
        spans=spans,
        view=view,
    )
    turn.ctx = RequestContext(path=path, headers=headers, view=view, gateway_cwd=gateway.cwd)
    turn.harness, turn.session_id, turn.project = identify(gateway, turn.ctx)
    await gateway.amnesia.load(turn.session_id)  # cached after the session's first request
    return turn


def identify(gateway: Gateway, ctx: RequestContext) -> tuple[Harness, str, str]:
    """Which client sent this (the harness that recognises it best), which session and
    which project it belongs to."""
    score, harness = max(((_safe_score(h, ctx), h) for h in gateway.harnesses), key=lambda pair: pair[0])
    if score[0] <= 0:
        # Nobody recognised it: the generic harness, not whichever name sorts last.
        harness = gateway.registry.harnesses.get("generic", harness)
    session = _safe_call(harness.session_id, ctx) or fingerprint_session(ctx.view)
    project = _safe_call(harness.project, ctx) or gateway.cwd
    # Every harness's project is stored normalised (no ".." survives, review F16) and as its
    # repository root, so a subdirectory is not a project of its own.
    return harness, session, project_root(project)


def _safe_score(harness: Harness, ctx: RequestContext) -> tuple[int, str]:
    try:
        return (int(harness.recognise(ctx)), harness.name)
    except Exception:
        log.exception("harness %s failed to recognise a request", harness.name)
        return (-1, harness.name)


def _safe_call(fn: Callable[[RequestContext], str | None], ctx: RequestContext) -> str | None:
    try:
        return fn(ctx)
    except Exception:
        log.exception("harness hook %s failed", getattr(fn, "__qualname__", fn))
        return None


async def read_body(gateway: Gateway) -> bytes:
    """The request's body as sent, or a :class:`ClientError`: 413 past ``server.maxBodyBytes``,
    408 when it has not all arrived within ``server.bodyTimeoutSeconds`` (a client trickling
    a body would otherwise hold its connection and buffer for ever)."""
    server = gateway.config.server
    limit = server.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ClientError(
            413, f"request body of {declared} bytes exceeds the gateway's limit of {limit} bytes"
        )
    chunks, size = [], 0
    try:
        async with asyncio.timeout(server.body_timeout_seconds):
            async for chunk in request.body:
                size += len(chunk)
                if size > limit:
                    raise ClientError(413, f"request body exceeds the gateway's limit of {limit} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise ClientError(
            408, f"the request body did not arrive within {server.body_timeout_seconds:g} s"
        ) from None
    except RequestEntityTooLarge:  # Quart's own limit, where one applies
        raise ClientError(413, f"request body exceeds the gateway's limit of {limit} bytes") from None
    return b"".join(chunks)


def decode_request_body(body: bytes, limit: int) -> bytes:
    """``body`` decoded as its ``Content-Encoding`` says, never past ``limit`` bytes: 413
    beyond (a few KiB of gzip expand to gigabytes), 400 when it is not valid."""
    encoding = request.headers.get("content-encoding")
    try:
        return decode_body(body, encoding, limit)
    except BodyTooLarge:
        raise ClientError(
            413, f"request body exceeds the gateway's limit of {limit} bytes once decoded ({encoding})"
        ) from None
    except ValueError as exc:
        raise ClientError(400, f"cannot decode the request body: {exc}") from None


def check_decoded_size(body: bytes, limit: int) -> None:
    """413 when ``body`` (forwarded as sent, still encoded) expands past ``limit`` bytes: the
    limit means the same on every route. A body that does not decode is the upstream's to
    judge."""
    try:
        decode_request_body(body, limit)
    except ClientError as exc:
        if exc.status == 413:
            raise


#: Python's JSON parser gives up past its recursion limit (about 1,000 levels); no API
#: request nests anywhere near that.
TOO_DEEP = "the request body nests too deeply to be a model request"

#: Stack frames the parser runs below the request handler. The encoders that later copy,
#: plan and store the body recurse once per level from a deeper stack than the parser; a
#: body the parser accepts with this much less headroom is one every later stage can handle
#: (without it, bodies of ~965-975 levels were forwarded but not stored).
PARSER_HEADROOM = 64


#: A body with fewer brackets than this cannot nest anywhere near the limit: it is parsed
#: at once (the headroom's 64 calls are for the rare deep one).
_SHALLOW_BRACKETS = 200


def _parse_with_headroom(parse: Callable[[Any], Any], arg: str | bytes) -> Any:
    brackets = arg.count("[") + arg.count("{") if isinstance(arg, str) else arg.count(b"[") + arg.count(b"{")
    if brackets < _SHALLOW_BRACKETS:
        return parse(arg)
    return _parse_deeper(parse, arg, PARSER_HEADROOM)


def _parse_deeper(parse: Callable[[Any], Any], arg: str | bytes, frames: int) -> Any:
    if frames:
        return _parse_deeper(parse, arg, frames - 1)
    return parse(arg)


async def read_json_body(gateway: Gateway) -> tuple[bytes, bytes, dict[str, Any], Spans | None]:
    """(bytes as sent, decoded bytes, parsed object, (the decoded text, where each member's
    value lies in it) or ``None``), or a :class:`ClientError`."""
    body = await read_body(gateway)
    content_type = request.headers.get("content-type", "")
    mime = content_type.split(";")[0].strip().lower()
    if mime and mime != "application/json" and not mime.endswith("+json"):
        raise ClientError(415, f"expected a JSON body (Content-Type: application/json), got {content_type!r}")
    decoded = decode_request_body(body, gateway.config.server.max_body_bytes)
    if not decoded.strip():
        raise ClientError(400, "the request body is empty; expected a JSON object")
    try:
        # Decoded as json.loads decodes bytes.
        encoding = json.detect_encoding(decoded)
        text = decoded.decode(encoding, "surrogatepass")
        raw, spans = _parse_with_headroom(loads_object, text)
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
        raw = _parse_with_headroom(json.loads, decoded)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ClientError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ClientError(400, TOO_DEEP) from None
    if not isinstance(raw, dict):
        raise ClientError(400, f"the request body must be a JSON object, got {type(raw).__name__}")
    return body, decoded, replace_lone_surrogates(raw), None


def client_headers() -> list[tuple[str, str]]:
    """The headers exactly as the client sent them (the raw ASGI list). Quart's
    ``request.headers`` also holds headers it adds itself, such as ``Remote-Addr``, which
    must not travel upstream."""
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in request.scope["headers"]]
