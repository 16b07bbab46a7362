"""Who may see the dashboard: one-time login links, and the sessions they open.

* ``lore dashboard`` asks the running gateway (with the gateway token) for a login link:
  a random secret, kept here only as its SHA-256, good for :data:`LINK_TTL_SECONDS` and
  for one use.
* Opening the link starts a session: a random id in an ``HttpOnly; SameSite=Strict;
  Path=/ui`` cookie, and a CSRF token every form posts back.
* Links and sessions are bound to the gateway token: they remember a fingerprint of the key
  the kernel derives from it (:class:`~lore_core.interfaces.MountAuth`), so ``lore token
  --rotate`` ends them all. They live in the gateway's memory: a restart ends them too (run
  ``lore dashboard`` again).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable

import attrs

#: How long a login link may wait to be opened.
LINK_TTL_SECONDS = 120.0
#: How long a session lasts after its login.
SESSION_TTL_SECONDS = 12 * 3600.0
#: Bounds on what is kept (the oldest go first): links not yet used, sessions open.
MAX_PENDING_LINKS = 32
MAX_SESSIONS = 64
#: The session cookie's name.
COOKIE_NAME = "lore_dashboard"


def _digest(value: str | bytes) -> bytes:
    return hashlib.sha256(value.encode() if isinstance(value, str) else value).digest()


@attrs.define
class Session:
    csrf: str
    expires: float
    key_print: bytes = attrs.field(repr=False)


class Gatekeeper:
    """The pending login links and the open sessions, keyed by the SHA-256 of their secret
    (a lookup never compares a secret itself)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._links: dict[bytes, tuple[float, bytes]] = {}
        self._sessions: dict[bytes, Session] = {}

    def _prune(self) -> None:
        now = self._clock()
        self._links = {h: v for h, v in self._links.items() if v[0] > now}
        self._sessions = {h: s for h, s in self._sessions.items() if s.expires > now}

    def mint(self, key: bytes) -> str:
        """A new one-time login secret, bound to the current token's ``key``."""
        self._prune()
        while len(self._links) >= MAX_PENDING_LINKS:
            self._links.pop(next(iter(self._links)))
        secret = secrets.token_urlsafe(32)
        self._links[_digest(secret)] = (self._clock() + LINK_TTL_SECONDS, _digest(key))
        return secret

    def redeem(self, secret: str, key: bytes) -> tuple[str, Session] | None:
        """Use the login secret (once: it is gone afterwards, good or not): a new session's
        cookie value and the session; ``None`` for an unknown, used, expired secret or one
        minted under another token."""
        self._prune()
        found = self._links.pop(_digest(secret), None) if secret else None
        if found is None or not hmac.compare_digest(found[1], _digest(key)):
            return None
        while len(self._sessions) >= MAX_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        cookie = secrets.token_urlsafe(32)
        session = Session(
            csrf=secrets.token_urlsafe(24),
            expires=self._clock() + SESSION_TTL_SECONDS,
            key_print=_digest(key),
        )
        self._sessions[_digest(cookie)] = session
        return cookie, session

    def session(self, cookie: str | None, key: bytes) -> Session | None:
        """The session the cookie opened, if it is still open under the current token."""
        if not cookie:
            return None
        session = self._sessions.get(_digest(cookie))
        if session is None:
            return None
        if session.expires <= self._clock() or not hmac.compare_digest(session.key_print, _digest(key)):
            self._sessions.pop(_digest(cookie), None)
            return None
        return session

    def end(self, cookie: str | None) -> None:
        if cookie:
            self._sessions.pop(_digest(cookie), None)


def csrf_ok(session: Session, offered: str | None) -> bool:
    return bool(offered) and hmac.compare_digest(session.csrf.encode(), (offered or "").encode())


def session_cookie(value: str) -> str:
    return f"{COOKIE_NAME}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={int(SESSION_TTL_SECONDS)}"


def cleared_cookie() -> str:
    return f"{COOKIE_NAME}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"
