"""The upstream side: where a request goes, one shared pooled client, bounded retries."""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from lore_core.config import UpstreamConfig, upstream_env_var

log = logging.getLogger("lore.proxy")

# Headers that describe one connection, not the message (RFC 9110 section 7.6.1), plus the
# ones the HTTP layers recompute.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# The gateway's own request headers; they configure Lore and are not sent upstream.
LORE_HEADER_PREFIX = "x-lore-"
UPSTREAM_URL_HEADER = "x-lore-upstream-url"
RETRY_STATUSES = frozenset({502, 503, 504})
MAX_FAILING_ORIGINS = 32


class UpstreamAnswer(Protocol):
    """An upstream's answer, headers read and the body not yet (or partly: the overflow check
    may have read a stream's opening events, which :meth:`aiter_raw` yields again)."""

    status_code: int
    headers: httpx.Headers

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class UpstreamError(Exception):
    """The upstream could not be reached (after retries) or sent no response headers in time."""

    def __init__(self, upstream: str, reason: str) -> None:
        super().__init__(f"upstream {upstream} failed: {reason}")
        self.upstream = upstream
        self.reason = reason


class BadUpstreamURL(ValueError):
    pass


class NoUpstream(LookupError):
    """Nothing says where a request goes: its provider has no upstream configured (or no
    plugin declares it), and neither a model prefix nor ``X-Lore-Upstream-URL`` names one."""

    def __init__(self, provider: str | None) -> None:
        if provider:
            reason = (
                f"Lore has no upstream for the provider {provider!r}: set upstream.{provider} in "
                f".lore.json or {upstream_env_var(provider)} (or send X-Lore-Upstream-URL)"
            )
        else:
            reason = "Lore cannot tell which provider this request is for: send X-Lore-Upstream-URL"
        super().__init__(reason)
        self.provider = provider
        self.reason = reason


def forward_headers(
    headers: list[tuple[str, str]], drop: frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    """Request headers to send upstream: all of them, in order and case, except hop-by-hop
    headers (and those the ``Connection`` header names) and Lore's own."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
    }
    return [
        (name, value)
        for name, value in headers
        if (low := name.lower()) not in HOP_BY_HOP
        and low not in named
        and low not in drop
        and not low.startswith(LORE_HEADER_PREFIX)
    ]


def response_headers(headers: httpx.Headers) -> list[tuple[str, str]]:
    """Upstream response headers to relay to the client."""
    return [(k, v) for k, v in headers.multi_items() if k.lower() not in HOP_BY_HOP]


def validate_base_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BadUpstreamURL(f"not an http(s) URL: {url!r}")
    return url.rstrip("/")


def upstream_path(path: str) -> str:
    """The provider path for a gateway path: a base-URL prefix before ``/v1/`` is the
    gateway's (``/anthropic/v1/messages`` -> ``/v1/messages``) and bare OpenAI paths gain
    their ``/v1`` (``/chat/completions`` -> ``/v1/chat/completions``)."""
    index = path.find("/v1/")
    if index >= 0:
        return path[index:]
    return "/v1" + path if not path.startswith("/v1") else path


def join_url(base: str, path: str, query: str) -> str:
    base = base.rstrip("/")
    # A base URL that already ends in /v1 (a common way to write it) must not double it.
    if base.endswith("/v1") and path.startswith("/v1/"):
        path = path[3:]
    return base + path + (f"?{query}" if query else "")


class _NoCookies(httpx.Cookies):
    """A cookie jar that keeps nothing."""

    def extract_cookies(self, response: httpx.Response) -> None:
        pass


_NO_COOKIES = _NoCookies()


class _CookielessClient(httpx.AsyncClient):
    """httpx's client files the ``Set-Cookie`` headers of every response in a jar of its own
    (as aiohttp's, below it, would): shared by all clients, never sent (requests are built
    here and redirects are not followed), it only grew, and filing each response into it
    cost ~15 us of the request path."""

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, value: Any) -> None:
        pass


@functools.lru_cache(maxsize=256)
def _parsed_url(url: str) -> tuple[httpx.URL, str]:
    """The URL as httpx parses it, and its origin. httpx would parse and validate the string
    again for every request (~30 us of a ~2 ms request path), and a gateway sends to a
    handful of URLs; ``httpx.URL`` is immutable, so one instance serves every request."""
    parts = urlsplit(url)
    return httpx.URL(url), f"{parts.scheme}://{parts.netloc}"


class UpstreamClient:
    """One shared, pooled HTTP client for every upstream call."""

    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        self._client: httpx.AsyncClient | None = None
        self.by_model_prefix = sorted(
            ((prefix, validate_base_url(url)) for prefix, url in config.by_model_prefix.items()),
            key=lambda item: -len(item[0]),
        )
        # Provider name -> its upstream (declared defaults and configured ones: load_config).
        self.urls = {name: validate_base_url(url) for name, url in config.urls.items()}
        # Origin -> why its last request failed, until one succeeds again (for /health).
        self.failing: dict[str, str] = {}

    def note_failure(self, url: str, reason: str) -> None:
        """Remember that ``url``'s origin failed (bounded: clients may name any upstream)."""
        origin = _parsed_url(url)[1]
        self.failing.pop(origin, None)
        self.failing[origin] = reason
        while len(self.failing) > MAX_FAILING_ORIGINS:
            del self.failing[next(iter(self.failing))]

    async def start(self) -> None:
        cfg = self.config

        def session_factory() -> aiohttp.ClientSession:
            # No automatic headers: what the client sent is what the upstream sees.
            return aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=cfg.max_connections, limit_per_host=0, ttl_dns_cache=300
                ),
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
                auto_decompress=False,
                # No cookie jar either: a shared jar would keep cookies the upstream set for
                # one client (e.g. load-balancer cookies) and send them with every later
                # request of every client, and it costs a jar lookup and update per request.
                cookie_jar=aiohttp.DummyCookieJar(),
            )

        # httpx's own pool was the bottleneck under concurrency (see docs/dependencies.md).
        transport = AiohttpTransport(client=session_factory)
        timeout = httpx.Timeout(
            connect=cfg.connect_timeout_seconds, read=cfg.read_timeout_seconds, write=60.0, pool=60.0
        )
        self._client = _CookielessClient(transport=transport, timeout=timeout, follow_redirects=False)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def resolve(self, provider: str | None, model: str | None, headers: Mapping[str, str]) -> str:
        """The base URL: the request's ``X-Lore-Upstream-URL``, else the longest matching
        model prefix, else the provider's upstream; :class:`NoUpstream` when there is none
        (:class:`BadUpstreamURL` for a malformed header)."""
        override = headers.get(UPSTREAM_URL_HEADER)
        if override:
            return validate_base_url(override)
        if model:
            for prefix, url in self.by_model_prefix:
                if model.startswith(prefix):
                    return url
        found = self.urls.get(provider) if provider else None
        if found is None:
            raise NoUpstream(provider)
        return found

    async def send(
        self, method: str, url: str, headers: list[tuple[str, str]], body: bytes | None
    ) -> httpx.Response:
        """Send and return the response with its body unread (``aiter_raw`` it, then close).

        Connect errors, header timeouts and 502/503/504 are retried with exponential
        backoff and jitter; everything else (4xx, 429, 500) is returned as it came.
        """
        assert self._client is not None, "UpstreamClient.start() was not awaited"
        cfg = self.config
        parsed, origin = _parsed_url(url)
        attempts = cfg.max_retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            request = httpx.Request(method, parsed, headers=headers, content=body)
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for runs the send in a
                # task of its own, one more task and two more loop turns per request.
                async with asyncio.timeout(cfg.header_timeout_seconds):
                    response = await self._client.send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError) as exc:
                reason = f"cannot connect ({exc.__class__.__name__}: {exc or 'no detail'})"
            except (TimeoutError, httpx.ReadTimeout, httpx.PoolTimeout):
                reason = f"no response headers within {cfg.header_timeout_seconds:g}s"
            except httpx.HTTPError as exc:
                self.note_failure(url, f"{exc.__class__.__name__}: {exc}")
                raise UpstreamError(origin, f"{exc.__class__.__name__}: {exc}") from exc
            else:
                if response.status_code not in RETRY_STATUSES or last:
                    if response.status_code < 500:
                        self.failing.pop(origin, None)
                    else:
                        self.failing[origin] = f"answered HTTP {response.status_code}"
                    return response
                reason = f"HTTP {response.status_code}"
                await response.aclose()
            if last:
                self.note_failure(url, reason)
                raise UpstreamError(origin, reason)
            delay = cfg.retry_backoff_seconds * (2**attempt) * (0.5 + random.random())
            log.warning(
                "upstream %s: %s; retry %d/%d in %.2fs", origin, reason, attempt + 1, cfg.max_retries, delay
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")
