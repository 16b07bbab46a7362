"""How a ``lore`` command reaches the store: through the local API's routes
(:mod:`lore_core.http.api`), always.

DuckDB lets one process hold the database file (even read-only opens fail while a gateway
has it), so when a gateway answers on the configured host and port a command asks it over
HTTP (:class:`GatewayClient`, with the gateway token); otherwise the command opens the store
itself and calls the same routes in this process (:class:`InProcessClient`,
:mod:`lore_core.http.store_api`). stderr says which (``client.where``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

from lore_core.interfaces import TierUnavailable


class CommandError(Exception):
    """What a command says on stderr (``lore: <message>``) before it exits with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _error_code(status: int) -> int:
    # What the caller asked wrong (a bad value, an id not found, a refusal): 1; the store or
    # the gateway failing: 3.
    return 1 if status in (400, 404, 409) else 3


def _with_query(path: str, params: dict[str, Any]) -> str:
    from urllib.parse import urlencode

    query = urlencode({k: v for k, v in params.items() if v is not None})
    return path + (("&" if "?" in path else "?") + query if query else "")


class ApiClient:
    """The local API as a command calls it: ``call`` answers the route's JSON, or raises
    :class:`CommandError` with the route's ``error``."""

    #: Said on stderr before the command's output: where its answers come from.
    where: str = ""
    #: The running gateway's URL; ``None`` when the routes run in this process.
    url: str | None = None

    def call(self, method: str, path: str, /, body: Any = None, timeout: float = 30, **params: Any) -> Any:
        """``method /lore/api<path>`` with ``params`` as its query (``None`` values left out);
        ``body``: bytes as they are, anything else as JSON. ``timeout`` bounds an HTTP call."""
        raise NotImplementedError

    def get(self, path: str, /, **params: Any) -> Any:
        return self.call("GET", path, **params)

    def close(self) -> None:
        """Let go of what the client holds (the store, when it opened it)."""


class GatewayClient(ApiClient):
    """The running gateway's local API, over HTTP with its token."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        # The gateway token (lore_core/http/access.py): every /lore/api route needs it.
        self.token = token
        self.where = f"via the running gateway at {url}"

    def call(self, method: str, path: str, /, body: Any = None, timeout: float = 30, **params: Any) -> Any:
        import urllib.error
        import urllib.request

        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        if data is None and method in ("POST", "PATCH"):
            data = b""
        req = urllib.request.Request(
            f"{self.url}/lore/api" + _with_query(path, params), method=method, data=data
        )
        if body is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", str(exc))
            except ValueError:
                message = str(exc)
            raise CommandError(message, _error_code(exc.code)) from None


class InProcessClient(ApiClient):
    """The local API's routes on the configured store, opened in this process (only when no
    gateway answers: one would hold the store)."""

    def __init__(self, store: Any, boot: Any) -> None:
        import asyncio

        from lore_core.http.store_api import StoreApi, StoreOnlyGateway

        self.store = store
        self.where = f"gateway not running: reading the {store.name} store directly" + (
            f" at {store.location}" if store.location else ""
        )
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(store.open())
        except Exception as exc:
            self._loop.close()
            raise CommandError(_cannot_open(store, exc), 3) from None
        self._gateway = StoreOnlyGateway(store, boot.config, boot.registry)
        self._api = StoreApi(self._gateway)

    def call(self, method: str, path: str, /, body: Any = None, timeout: float = 30, **params: Any) -> Any:
        answer = self._loop.run_until_complete(
            self._api.call(method, "/lore/api" + _with_query(path, params), body=body)
        )
        if answer.status >= 400:
            message = answer.body.get("error") if isinstance(answer.body, dict) else None
            raise CommandError(message or f"HTTP {answer.status}", _error_code(answer.status))
        return answer.body

    def close(self) -> None:
        try:
            self._loop.run_until_complete(self._gateway.close())
            self._loop.run_until_complete(self.store.close())
        finally:
            self._loop.close()


def _cannot_open(store: Any, exc: Exception) -> str:
    """Why the store did not open: a gateway holding it (on another port: none answered on the
    configured one) is named, with what to do; else the store's own error."""
    from lore_core.gateway import held_message, store_holder

    holder = store_holder(store)
    return held_message(store, holder) if holder is not None else f"cannot open the store: {exc}"


def gateway_url(host: str, port: int) -> str | None:
    """The URL of a Lore gateway answering on host:port, or None."""
    import urllib.request

    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    try:
        with urllib.request.urlopen(url + "/health", timeout=1.0) as resp:
            health = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    return url if isinstance(health, dict) and "store" in health else None


def open_client(extra_plugins: Iterable[object] = ()) -> ApiClient:
    """The running gateway's API, else the configured store's routes in this process."""
    from lore_core.config import load_config
    from lore_core.http.token import cli_token

    # A running gateway answers for its store: asking it needs the core configuration only
    # (where it listens, its token), not the plugins, which take most of a second to load.
    config = load_config(core_only=True)
    url = gateway_url(config.server.host, config.server.port)
    if url is not None:
        return GatewayClient(url, cli_token(config))

    from lore_core.plugins import bootstrap
    from lore_core.storage.writer import choose_store

    # The same plugins and configuration the gateway would load, without starting one.
    boot = bootstrap(extra_plugins=extra_plugins)
    return InProcessClient(choose_store(boot.config, boot.registry.stores), boot)


def extra_plugins(args: argparse.Namespace) -> tuple[object, ...]:
    """The plugin objects ``lore_core.cli.main(argv, extra_plugins=...)`` was given (a
    command's bootstrap loads them beside the installed ones)."""
    return tuple(getattr(args, "extra_plugins", ()))


def with_client(args: argparse.Namespace, action: Callable[[ApiClient], int]) -> int:
    """``action(client)``'s exit status; a :class:`CommandError` (or a tier the store lacks)
    is said on stderr and is the exit status."""
    try:
        client = open_client(extra_plugins(args))
    except CommandError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return exc.code
    print(f"lore: {client.where}", file=sys.stderr)
    try:
        return action(client)
    except CommandError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return exc.code
    except TierUnavailable as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 3
    finally:
        client.close()
