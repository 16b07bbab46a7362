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
import os
import secrets
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from lore_core.config import LoreConfig, default_data_dir

TOKEN_FILE = "gateway.token"
#: The header the token travels in on the model routes.
TOKEN_HEADER = "x-lore-token"
#: Paths that read or change memory: always behind the token. ``/mcp`` is the MCP server's
#: (the lore-mcp plugin): guarded even when no plugin serves it, so it answers alike.
PROTECTED_PREFIXES = ("/lore/api", "/mcp", "/v1/events", "/v1/pack")
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


class TokenError(RuntimeError):
    """The token file cannot be read or written; the message says which and why."""


def token_path(data_dir: Path | None = None) -> Path:
    return (data_dir or default_data_dir()) / TOKEN_FILE


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


def configured_token(config: LoreConfig) -> str | None:
    return config.server.token or None


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


def _hostname(host_header: str) -> str:
    """``"127.0.0.1:8377"`` -> ``"127.0.0.1"``, ``"[::1]:8377"`` -> ``"::1"``."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        return host.split(":", 1)[0]
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
    return None


def cli_token(config: LoreConfig, data_dirs: Iterable[Path] = ()) -> str | None:
    """The token the CLI sends: the configured one, else the data directory's file (the
    CLI never makes one: the gateway does at its first start)."""
    fixed = configured_token(config)
    if fixed is not None:
        return fixed
    for path in [token_path(d) for d in data_dirs] or [token_path()]:
        try:
            token = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if token:
            return token
    return None


# ---------------------------------------------------------------------------------------------
# Session commands belong to the session's owner
# ---------------------------------------------------------------------------------------------

#: Request headers that carry a client's provider credentials.
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "api-key", "x-goog-api-key")
#: Sessions whose owner is remembered at most (the oldest are forgotten first).
MAX_OWNED_SESSIONS = 100_000


@attrs.define
class _Owner:
    credential: bytes
    # The session's first message (a digest): a request that carries it carries the
    # session's own history.
    first_message: bytes | None


class SessionOwners:
    """Who may send a session its ``/lore:`` commands: the credentials of its first request.

    Any local process can put a session id of its choosing on a request, so a command is
    only obeyed from the credentials (a keyed hash of the provider key or bearer token, kept
    in memory, never stored) the session was first seen with. Credentials that change inside
    a session (an OAuth token refreshed) take it over only with a request that carries the
    session's own first message, which a stranger guessing the id does not have. After a
    restart the first request seen binds the session again.
    """

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._owners: dict[str, _Owner] = {}

    def _digest(self, text: str) -> bytes:
        # Keyed BLAKE2 (a MAC), not OpenSSL's HMAC: the latter releases the GIL on every
        # call, and on a gateway with busy background threads each release could cost the
        # request ~0.1 ms waiting to get it back (measured; BLAKE2 keeps it for short inputs).
        return hashlib.blake2b(text.encode(), key=self._key, digest_size=32).digest()

    def _credential(self, headers: Mapping[str, str]) -> bytes:
        return self._digest("\0".join(headers.get(name, "") for name in CREDENTIAL_HEADERS))

    def _first_message(self, first: str | None) -> bytes | None:
        if first is None:
            return None
        return self._digest(first)

    def _bind(self, session_id: str, credential: bytes, first: bytes | None) -> None:
        self._owners[session_id] = _Owner(credential, first)
        if len(self._owners) > MAX_OWNED_SESSIONS:
            del self._owners[next(iter(self._owners))]

    def _claim(self, session_id: str, headers: Mapping[str, str], first_message: str | None) -> bool:
        credential = self._credential(headers)
        owner = self._owners.get(session_id)
        if owner is None:
            self._bind(session_id, credential, self._first_message(first_message))
            return True
        if hmac.compare_digest(owner.credential, credential):
            if owner.first_message is None:
                owner.first_message = self._first_message(first_message)
            return True
        first = self._first_message(first_message)
        if owner.first_message is not None and first is not None:
            if hmac.compare_digest(owner.first_message, first):
                owner.credential = credential
                return True
        return False

    def request_seen(self, session_id: str, headers: Mapping[str, str], first_message: str | None) -> None:
        """A model request of the session (not a command): binds a session seen for the
        first time to its credentials; hands it over to new credentials that carry its
        first message. ``first_message``: the text of the request's first message."""
        self._claim(session_id, headers, first_message)

    def may_command(self, session_id: str, headers: Mapping[str, str], first_message: str | None) -> bool:
        """Whether a command sent with these headers may act on the session. A session seen
        for the first time becomes the sender's. ``first_message``: the text of the
        request's first message, ``None`` when the command is the only message (then it
        proves nothing about the history)."""
        return self._claim(session_id, headers, first_message)
