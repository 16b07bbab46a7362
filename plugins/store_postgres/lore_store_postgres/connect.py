"""Connecting: the DSN without its password for people, the password from the environment,
bounded retries with a clear message when the server is down."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from lore_core.storage.records import StoreUnavailable
from lore_store_postgres.config import PostgresConfig

log = logging.getLogger("lore.store.postgres")


def shown_dsn(dsn: str) -> str:
    """The DSN as logs, errors and ``/health`` show it: without a password, whatever form
    it was written in (a URL or ``key=value`` pairs)."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<an unreadable DSN>"  # its text may hold a password: never echoed
    params.pop("password", None)
    return make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None}) or "(libpq defaults)"


def connection_kwargs(settings: PostgresConfig, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """What libpq needs beside the DSN: TLS mode, timeout and the password read from the
    environment. Raises StoreUnavailable for a DSN that carries a password itself."""
    env = os.environ if environ is None else environ
    try:
        params = conninfo_to_dict(settings.dsn)
    except psycopg.ProgrammingError as exc:
        raise StoreUnavailable(f"store-postgres.dsn is not a valid connection string: {exc}") from None
    if params.get("password"):
        raise StoreUnavailable(
            "store-postgres.dsn carries a password: remove it and set it in the environment variable "
            f"{settings.password_env or 'LORE_PG_PASSWORD'} instead (a config file is no place for it)"
        )
    kwargs: dict[str, Any] = {
        "sslmode": settings.tls_mode,
        "connect_timeout": settings.connect_timeout,
        "application_name": "lore",
    }
    password = env.get(settings.password_env) if settings.password_env else None
    if password:
        kwargs["password"] = password
    return kwargs


def first_connection(dsn: str, kwargs: dict[str, Any], attempts: int) -> psycopg.Connection[Any]:
    """A first connection, tried ``attempts`` times 1, 2, 4 ... s apart; the error names
    the DSN without its password and what the server (or the network) said last."""
    reason = ""
    for attempt in range(1, attempts + 1):
        try:
            return psycopg.connect(dsn, autocommit=True, **kwargs)
        except psycopg.OperationalError as exc:
            # libpq's messages name host, port and user, never the password.
            reason = " ".join(str(exc).split())
            if "password authentication failed" in reason or "no password supplied" in reason:
                break  # the same answer every time: no point waiting
            if attempt < attempts:
                wait = 2.0 ** (attempt - 1)
                log.info("PostgreSQL at %s: %s; retrying in %.0f s", shown_dsn(dsn), reason, wait)
                time.sleep(wait)
    raise StoreUnavailable(
        f"cannot connect to PostgreSQL at {shown_dsn(dsn)} after {attempt} attempt(s): {reason}"
    )
