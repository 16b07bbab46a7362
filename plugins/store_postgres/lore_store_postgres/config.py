"""The ``store-postgres`` section of ``.lore.json``."""

from __future__ import annotations

import attrs

from lore_core.config import setting

SECTION = "store-postgres"

#: libpq's ``sslmode`` values (https://www.postgresql.org/docs/current/libpq-ssl.html).
TLS_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def _tls_mode(instance: object, attribute: attrs.Attribute, value: str) -> None:  # type: ignore[type-arg]
    if value not in TLS_MODES:
        raise ValueError(f"store-postgres.tlsMode: one of {', '.join(TLS_MODES)}, got {value!r}")


@attrs.define
class PostgresConfig:
    """Settings of the PostgreSQL store. The password is never part of the file: it is read
    from the environment variable ``password_env`` names (a DSN that carries one is refused
    when the store opens, so it never lands in a config file someone commits)."""

    # libpq connection string or URL without the password, e.g.
    # "postgresql://lore@db.internal:5432/lore" or "host=db.internal dbname=lore user=lore".
    dsn: str = ""
    # The environment variable holding the password ("" or unset: none, e.g. peer or
    # certificate authentication, or a ~/.pgpass file libpq reads itself).
    password_env: str = "LORE_PG_PASSWORD"
    # libpq's sslmode. "prefer" is libpq's default; a server across a network wants
    # "verify-full" (with the CA in ~/.postgresql/root.crt or PGSSLROOTCERT).
    tls_mode: str = attrs.field(default="prefer", validator=_tls_mode)
    # Connections the gateway keeps at most. Store calls run in threads (one connection
    # each while they run): the writer, the indexer, recall and the API's reads.
    pool_size: int = setting(8, low=1, high=256)
    # Seconds one connection attempt may take before it counts as failed.
    connect_timeout: int = setting(5, low=1, high=600)
    # Attempts at open before the store reports the server unavailable (1 s, 2 s, 4 s ...
    # apart): a server restarting with the gateway is waited for, a server that is down
    # is reported within about connect_timeout * attempts + 2 ** attempts seconds.
    connect_attempts: int = setting(4, low=1, high=20)
    # The text search configuration of the full-text index (PostgreSQL's own: "english"
    # stems, "simple" only lower-cases). A change rebuilds the index at the next open.
    text_search_config: str = "english"
    # Use pgvector (HNSW, approximate) when the server has the extension. false: store
    # vectors as real[] and search them exactly whatever the server has (what a server
    # without pgvector gets anyway). A model's index keeps the kind it was made with until
    # `lore reindex --full` drops it.
    pgvector: bool = True
    # Vectors a model's table holds before its HNSW index is built, once, by the indexer's
    # upkeep (optimize_vectors: when it is idle, and after `lore reindex`). Below that an
    # exact search is about as fast, and a backfill writes its rows without growing the
    # graph one row at a time (pgvector's bulk build is many times faster). 0: the index is
    # made with the table and every write maintains it.
    hnsw_min_vectors: int = setting(10_000, low=0)
    # maintenance_work_mem (MB) of that build: the graph is built in memory when it fits
    # (about 2 KB per 384-dimensional vector), else much slower on disk.
    hnsw_build_memory: int = setting(1024, low=64, high=65_536)
    # Also an HNSW index per project holding hnswMinVectors or more (and at most half the
    # table), built by the same upkeep: recall's usual scope is one project, and a filter
    # on the shared index makes pgvector walk ~1/share as much of its graph, each row read
    # from the table to test the filter. Costs: the index space twice over, and each
    # later write grows two graphs instead of one.
    hnsw_per_project: bool = True
    # After a forget, rewrite the tables that held the session (VACUUM FULL) so that no data
    # file keeps the deleted rows' bytes. It locks those tables while it runs (seconds per
    # 100K messages): a team that forgets often on a large store may turn it off and run
    # VACUUM FULL in a maintenance window (the WAL and backups keep the bytes regardless).
    forget_rewrite: bool = True
