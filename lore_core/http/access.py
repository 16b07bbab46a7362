"""Who may talk to the gateway: the gateway token, and the Host, Origin and peer checks.

The gateway holds every prompt and answer of a developer's sessions, and can spend money
through the worker model with their keys. A web page the developer visits can reach a
loopback port (DNS rebinding: a host name of its own that resolves to 127.0.0.1; a
cross-origin ``text/plain`` POST needs no preflight), and so can any local process. So,
before any route runs (:func:`check`):

* a request whose ``Host`` is not a loopback name or address (or a configured
  ``server.allowedHosts`` entry) is refused with 421: a rebinding page's requests carry its
  own host name;
* a browser's request (one with an ``Origin`` header) is refused with 403 unless it comes
  from the gateway's own origin (``http://127.0.0.1:<port>`` and the like): no coding client
  sends one, and no CORS header is ever sent;
* a peer that is not on loopback is refused with 403 unless ``server.allowRemote`` is set;
  then every request needs the token, the model routes too;
* everything under ``/lore/api`` and ``/mcp`` (reads too: conversations are the sensitive
  part), and every path a plugin mounts (:class:`lore_core.interfaces.Mount`), needs the
  **gateway token**: ``Authorization: Bearer <token>``, compared in constant time. On the
  model routes, where ``Authorization`` carries the provider's key, the token travels in
  ``X-Lore-Token`` (never forwarded upstream: ``x-lore-*`` headers are the gateway's).

The token is ``server.token`` (or ``LORE_TOKEN``) when configured, else the contents of
``gateway.token`` in the data directory, made at first start (32 random bytes, URL-safe
base64, file mode 0600) and re-read when the file changes, so ``lore token --rotate``
takes effect on a running gateway at once.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
import tempfile
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from lore_core.config import LoreConfig, default_data_dir
from lore_core.http.token import configured_token, token_path
from lore_core.pipeline.upstream import UPSTREAM_URL_HEADER, BadUpstreamURL, validate_base_url

log = logging.getLogger("lore.access")

#: The header the token travels in on the model routes.
TOKEN_HEADER = "x-lore-token"
#: Paths that read or change memory: always behind the token. ``/mcp`` is the MCP server's
#: (the lore-mcp plugin): guarded even when no plugin serves it, so it answers alike.
PROTECTED_PREFIXES = ("/lore/api", "/mcp", "/v1/events", "/v1/pack")
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


class TokenError(RuntimeError):
    """The token file cannot be read or written; the message says which and why."""


def new_token() -> str:
    return secrets.token_urlsafe(32)


def _write_private(path: Path, token: str) -> None:
    """Write ``token`` to ``path`` readable by its owner only, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".gateway-token-", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(token + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_or_create_token(path: Path) -> str:
    """The token in ``path``, made first when there is none (or it is empty)."""
    try:
        token = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        token = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenError(f"cannot read the gateway token {path}: {exc}") from None
    if token:
        return token
    token = new_token()
    try:
        _write_private(path, token)
    except OSError as exc:
        raise TokenError(f"cannot write the gateway token {path}: {exc.strerror or exc}") from None
    return token


def rotate_token(path: Path) -> str:
    """Replace the token in ``path`` by a new one (a running gateway picks it up)."""
    token = new_token()
    try:
        _write_private(path, token)
    except OSError as exc:
        raise TokenError(f"cannot write the gateway token {path}: {exc.strerror or exc}") from None
    return token


class TokenKeeper:
    """The gateway's token: the configured one, or the file's (re-read when it changes)."""

    def __init__(self, config: LoreConfig, path: Path | None = None) -> None:
        self._fixed = configured_token(config)
        self.path = path or token_path()
        self._token = ""
        self._stamp: tuple[int, int] | None = None
        if self._fixed is None:
            self._token = load_or_create_token(self.path)
            self._stamp = self._file_stamp()

    @property
    def source(self) -> str:
        return "server.token" if self._fixed is not None else str(self.path)

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def current(self) -> str:
        if self._fixed is not None:
            return self._fixed
        stamp = self._file_stamp()
        if stamp != self._stamp:
            # Rotated (or removed: made again) since it was read.
            self._token = load_or_create_token(self.path)
            self._stamp = self._file_stamp()
        return self._token

    def matches(self, offered: str | None) -> bool:
        if not offered:
            return False
        return hmac.compare_digest(offered.encode(), self.current().encode())


@attrs.frozen
class Refusal:
    status: int
    message: str


@attrs.frozen
class MemoryAccess:
    """Whether a model request may reach memory, and why not (for the log and ``/health``):
    decided once per request by :func:`lore_core.pipeline.ownership.decide`."""

    allowed: bool
    why_not: str = ""

    ALLOWED: ClassVar[MemoryAccess]


MemoryAccess.ALLOWED = MemoryAccess(True)


def _hostname(host_header: str) -> str:
    """``"127.0.0.1:8377"`` -> ``"127.0.0.1"``, ``"[::1]:8377"`` -> ``"::1"``."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    # A fully qualified name may end in a dot ("localhost.:8377"): the same host.
    return host.rstrip(".")


@functools.lru_cache(maxsize=1024)
def is_loopback_address(value: str) -> bool:
    # Cached: every request asks it of its peer and its Host (the same few values).
    try:
        address = ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def is_loopback_host(name: str) -> bool:
    return name in _LOOPBACK_NAMES or name.endswith(".localhost") or is_loopback_address(name)


def _allowed_hosts(config: LoreConfig) -> set[str]:
    hosts = {h.strip().lower() for h in config.server.allowed_hosts if h.strip()}
    bound = config.server.host.strip().lower()
    if bound and bound not in ("0.0.0.0", "::", ""):
        hosts.add(bound)
    return hosts


def host_allowed(host_header: str | None, config: LoreConfig) -> bool:
    if not host_header:
        return True  # no browser sends a request without one
    name = _hostname(host_header)
    return is_loopback_host(name) or name in _allowed_hosts(config)


def origin_allowed(origin: str | None, host_header: str | None, config: LoreConfig) -> bool:
    """A request without ``Origin`` is not a browser's; a browser's must come from a page
    the gateway served itself (the dashboard later): its origin is the address the request
    was sent to (``http://`` and the ``Host``), and that address is one the gateway answers."""
    if origin is None:
        return True
    if not host_header or not host_allowed(host_header, config):
        return False
    return origin.strip().lower().rstrip("/") == f"http://{host_header.strip().lower()}"


def allowed_upstreams(config: LoreConfig) -> tuple[str, ...]:
    """Base URLs a client may name and keep its memory: the configured ones."""
    urls = [
        *config.upstream.urls.values(),
        *config.upstream.by_model_prefix.values(),
        *config.upstream.allowed_urls,
        config.worker.upstream,
    ]
    out = []
    for url in urls:
        try:
            out.append(validate_base_url(url))
        except BadUpstreamURL:
            continue  # empty (no worker upstream) or malformed: names nothing
    return tuple(out)


def upstream_allowed(named: str | None, allowed: tuple[str, ...]) -> bool:
    """Whether ``X-Lore-Upstream-URL`` (absent: the configured routing) is one of ``allowed``
    or under one of them (``http://host:1234`` allows ``http://host:1234/v1``)."""
    if not named:
        return True
    try:
        url = validate_base_url(named)
    except BadUpstreamURL:
        return False
    return any(url == base or url.startswith(base + "/") for base in allowed)


def bearer(headers: Mapping[str, str]) -> str | None:
    value = headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def check(
    path: str,
    headers: Mapping[str, str],
    remote: str | None,
    config: LoreConfig,
    tokens: TokenKeeper,
    *,
    protected: bool = False,
) -> Refusal | None:
    """Why a request is refused before routing, or ``None`` to let it through.
    ``headers`` are lower-cased; ``protected``: the path needs the token whatever its prefix
    (a plugin's mount)."""
    if not host_allowed(headers.get("host"), config):
        return Refusal(421, "this gateway answers requests for localhost only (see server.allowedHosts)")
    if not origin_allowed(headers.get("origin"), headers.get("host"), config):
        return Refusal(403, "requests from web pages are refused by this gateway")
    protected = protected or path.startswith(PROTECTED_PREFIXES)
    local = remote is None or remote == "<local>" or is_loopback_address(remote)
    if not local and not config.server.allow_remote:
        return Refusal(403, "this gateway answers loopback clients only (see server.allowRemote)")
    if protected:
        if not tokens.matches(bearer(headers)):
            return Refusal(
                401, "the gateway token is missing or wrong: send Authorization: Bearer <token> (lore token)"
            )
    elif not local and path != "/health" and not tokens.matches(headers.get(TOKEN_HEADER)):
        return Refusal(401, f"remote clients must send the gateway token in {TOKEN_HEADER}")
    if not local and not upstream_allowed(headers.get(UPSTREAM_URL_HEADER), allowed_upstreams(config)):
        # Not an open relay into the gateway's network for whoever holds a team token.
        return Refusal(403, "remote clients may name only a configured upstream in X-Lore-Upstream-URL")
    return None


# ---------------------------------------------------------------------------------------------
# A session belongs to the credentials that opened it
# ---------------------------------------------------------------------------------------------

#: Request headers that carry a client's provider credentials.
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "api-key", "x-goog-api-key")
#: Sessions whose owner is kept in memory at most (the least recently used are forgotten
#: first; the store keeps every one).
MAX_CACHED_OWNERS = 100_000
#: The per-session state key the owner is stored under, and the file of the key its
#: credentials are hashed with (beside the gateway token, owner-only).
OWNER_STATE_KEY = "owner"
OWNER_KEY_FILE = "owners.key"


class SessionOwners:
    """Which credentials each session belongs to: those of its first request.

    Any local process can put a session id of its choosing on a request, so memory,
    ``/lore:`` commands and background work act for a session only on a request with its
    owner's credentials (a keyed BLAKE2 hash of the provider key or bearer token, never the
    key itself). The owner is kept in the store's per-session state, so it survives a
    restart, and cached in memory. Credentials that change inside a session (an OAuth
    token refreshed) take it over only with a request that carries an answer the gateway
    relayed to that session (see :meth:`claim`): a stranger who knows the id, or even the
    session's first message, does not have one.
    """

    def __init__(self, store: Any, key: bytes) -> None:
        self.store = store
        self._key = key
        self._owners: OrderedDict[str, bytes] = OrderedDict()

    def credential(self, headers: Mapping[str, str]) -> bytes:
        # Keyed BLAKE2 (a MAC), not OpenSSL's HMAC: the latter releases the GIL on every
        # call, and on a gateway with busy background threads each release could cost the
        # request ~0.1 ms waiting to get it back (measured; BLAKE2 keeps it for short inputs).
        text = "\0".join(headers.get(name, "") for name in CREDENTIAL_HEADERS)
        return hashlib.blake2b(text.encode(), key=self._key, digest_size=32).digest()

    def _cache(self, session_id: str, credential: bytes) -> None:
        self._owners[session_id] = credential
        self._owners.move_to_end(session_id)
        while len(self._owners) > MAX_CACHED_OWNERS:
            self._owners.popitem(last=False)

    async def owner(self, session_id: str) -> bytes | None:
        """The session's owner, from memory or the store (``None``: not seen yet)."""
        cached = self._owners.get(session_id)
        if cached is not None:
            self._owners.move_to_end(session_id)
            return cached
        raw = await self.store.get_state(session_id, OWNER_STATE_KEY)
        try:
            credential = bytes.fromhex(raw["credential"]) if isinstance(raw, dict) else None
        except (KeyError, TypeError, ValueError):
            credential = None
        if credential is not None:
            self._cache(session_id, credential)
        return credential

    async def _bind(self, session_id: str, credential: bytes) -> None:
        self._cache(session_id, credential)
        try:
            await self.store.set_state(session_id, OWNER_STATE_KEY, {"credential": credential.hex()})
        except Exception as exc:
            # Kept in memory: the session stays its owner's until a restart.
            log.warning("could not store the owner of session %s: %s", session_id, exc)

    async def claim(
        self,
        session_id: str,
        headers: Mapping[str, str],
        carries_its_answers: Callable[[], Awaitable[bool]],
    ) -> bool:
        """Whether a request with these headers acts for the session. A session seen for
        the first time becomes the sender's. Other credentials take it over when
        ``carries_its_answers()`` says the request holds an answer the gateway relayed in
        this session (asked only then: it reads the store)."""
        credential = self.credential(headers)
        try:
            owner = await self.owner(session_id)
        except Exception as exc:
            log.warning("could not read the owner of session %s: %s", session_id, exc)
            owner = self._owners.get(session_id)
        if owner is None:
            # Another first request of the session may have bound it while this one read the
            # store: binding caches before it awaits, so the cache says (no await between).
            owner = self._owners.get(session_id)
        if owner is None:
            await self._bind(session_id, credential)
            return True
        if hmac.compare_digest(owner, credential):
            return True
        try:
            handed_over = await carries_its_answers()
        except Exception as exc:
            log.warning("could not check the history of session %s: %s", session_id, exc)
            handed_over = False
        if handed_over:
            await self._bind(session_id, credential)
        return handed_over


def owner_key(data_dir: Path | None = None) -> bytes:
    """The key session owners' credentials are hashed with: ``owners.key`` in the data
    directory (made like the token, owner-only), so stored owners stay valid across
    restarts and a copied store alone does not confirm a guessed key."""
    return load_or_create_token((data_dir or default_data_dir()) / OWNER_KEY_FILE).encode()
