"""Passthrough: what the pipeline does not model (models list, count_tokens, files, ...)
goes upstream and back unchanged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import httpx
from quart import Response, request
from werkzeug.datastructures import Headers

from lore_core.pipeline.answers import ClientError, error_response
from lore_core.pipeline.parse import check_decoded_size, client_headers, read_body
from lore_core.pipeline.upstream import (
    BadUpstreamURL,
    NoUpstream,
    UpstreamError,
    forward_headers,
    join_url,
    response_headers,
    upstream_path,
)

if TYPE_CHECKING:
    from lore_core.gateway import Gateway
    from lore_core.plugins import Registry

log = logging.getLogger("lore.pipeline")


async def passthrough(
    gateway: Gateway,
    path: str,
    body: bytes | None = None,
    provider: str | None = None,
    model: str | None = None,
) -> Response:
    """Forward anything the pipeline does not model (models list, count_tokens, files, ...),
    and model requests that may not reach memory (``provider`` and ``model`` then route
    them as the pipeline would)."""
    if body is None:
        try:
            body = await read_body(gateway)
            check_decoded_size(body, gateway.config.server.max_body_bytes)
        except ClientError as exc:
            return error_response(None, exc.status, exc.message)
    headers = {k.lower(): v for k, v in request.headers.items()}
    provider = provider or _guess_provider(gateway.registry, path, headers)
    codec = gateway.registry.codec_of_provider(provider)  # the shape of its errors
    try:
        base = gateway.upstream.resolve(provider, model, headers)
    except BadUpstreamURL as exc:
        return error_response(codec, 400, f"X-Lore-Upstream-URL: {exc}")
    except NoUpstream as exc:
        log.warning("request for %s refused (502): %s", path, exc.reason)
        return error_response(codec, 502, exc.reason)
    url = join_url(base, upstream_path(path), request.query_string.decode("latin-1"))
    try:
        upstream = await gateway.upstream.send(
            request.method, url, forward_headers(client_headers()), body or None
        )
    except UpstreamError as exc:
        gateway.stats["upstream_errors"] += 1
        return error_response(codec, 502, f"Lore could not reach the upstream {exc.upstream}: {exc.reason}")

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            log.warning("upstream %s broke off: %s", base, exc)
        finally:
            await asyncio.shield(upstream.aclose())

    response = Response(
        relay(), status=upstream.status_code, headers=Headers(response_headers(upstream.headers))
    )
    response.timeout = None
    return response


def _guess_provider(registry: Registry, path: str, headers: dict[str, str]) -> str | None:
    """The provider of a request no codec owns: the first whose paths or headers it has
    (:attr:`Provider.request_paths`, :attr:`~Provider.request_headers`), else the default."""
    for provider in registry.providers.values():
        if any(part in path for part in provider.request_paths) or any(
            name in headers for name in provider.request_headers
        ):
            return provider.name
    default = registry.default_provider()
    return default.name if default else None
