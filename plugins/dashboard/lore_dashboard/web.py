"""The little of HTTP the dashboard needs, over raw ASGI: a parsed request (query, form,
cookies), and responses with the security headers every page carries.

No framework: the mount is one ASGI callable the kernel dispatches ``/ui`` to, and the
pages are GETs and urlencoded form POSTs; the standard library parses both.
"""

from __future__ import annotations

import http.cookies
import urllib.parse
from collections.abc import Mapping
from typing import Any

from lore_core.interfaces import ASGIReceive, ASGIScope, ASGISend

#: A form body larger than this is refused (413): knowledge entries are the largest thing
#: a page posts, and the book bounds them far below it.
MAX_FORM_BYTES = 256 * 1024

#: Every answer's security headers. The policy allows the package's own files only: no
#: inline script or style, no frame, forms posting only back here. ``Referrer-Policy:
#: same-origin`` and not ``no-referrer``: under ``no-referrer`` a browser sends ``Origin:
#: null`` with the page's own form posts, which the gateway's Origin check refuses (rightly:
#: a sandboxed or cross-site page sends that too); ``same-origin`` sends no referrer to any
#: other site, and the pages link to no other site.
SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("cache-control", "no-store"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
)


class BadRequest(Exception):
    """The client's mistake: answered with ``status`` and the message, never a 500."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Request:
    """One HTTP request to the mount."""

    def __init__(self, scope: ASGIScope, receive: ASGIReceive) -> None:
        self.scope = scope
        self._receive = receive
        self.method: str = scope.get("method", "GET").upper()
        self.path: str = scope.get("path", "")
        self.headers: dict[str, str] = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }
        raw_query = scope.get("query_string", b"").decode("latin-1")
        self.query: dict[str, str] = _first_values(raw_query)
        self.cookies: dict[str, str] = _cookies(self.headers.get("cookie", ""))
        self._form: dict[str, str] | None = None

    def arg(self, name: str, default: str = "") -> str:
        return self.query.get(name, default).strip()

    async def body(self, limit: int = MAX_FORM_BYTES) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise BadRequest("the client went away", 400)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BadRequest(f"the form is larger than {limit} bytes", 413)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def form(self) -> dict[str, str]:
        """The urlencoded form (the only kind the pages post)."""
        if self._form is None:
            kind = self.headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if kind != "application/x-www-form-urlencoded":
                raise BadRequest("a form post must be application/x-www-form-urlencoded", 415)
            raw = await self.body()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest("the form is not UTF-8") from None
            self._form = _first_values(text)
        return self._form


def _first_values(raw: str) -> dict[str, str]:
    try:
        pairs = urllib.parse.parse_qsl(raw, keep_blank_values=True, errors="strict", max_num_fields=200)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"malformed query or form: {exc}") from None
    out: dict[str, str] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def _cookies(header: str) -> dict[str, str]:
    jar = http.cookies.SimpleCookie()
    try:
        jar.load(header)
    except http.cookies.CookieError:
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


class Response:
    def __init__(
        self,
        body: bytes | str = b"",
        status: int = 200,
        content_type: str = "text/html; charset=utf-8",
        headers: Mapping[str, str] | None = None,
        cookies: tuple[str, ...] = (),
    ) -> None:
        self.body = body.encode() if isinstance(body, str) else body
        self.status = status
        self.content_type = content_type
        self.headers = dict(headers or {})
        self.cookies = cookies

    async def send(self, send: ASGISend) -> None:
        headers: list[tuple[bytes, bytes]] = [
            (b"content-type", self.content_type.encode()),
            (b"content-length", str(len(self.body)).encode()),
        ]
        headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS]
        headers += [(k.lower().encode(), v.encode("latin-1")) for k, v in self.headers.items()]
        headers += [(b"set-cookie", c.encode("latin-1")) for c in self.cookies]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


def redirect(location: str, cookies: tuple[str, ...] = ()) -> Response:
    """A 303 (See Other): after a POST, the browser GETs ``location``."""
    return Response(b"", 303, headers={"location": location}, cookies=cookies)


def json_response(payload: Any, status: int = 200) -> Response:
    import json

    return Response(json.dumps(payload), status, "application/json")
