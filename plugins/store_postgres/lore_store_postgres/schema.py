"""The PostgreSQL schema and its migrations.

``lore_meta.schema_version`` records the applied version. Migrations are append-only: each
entry upgrades from the version before it inside one transaction (PostgreSQL's DDL is
transactional), under an advisory lock, so two gateways starting together on a new database
migrate it once and a crash mid-migration leaves the previous version intact. Never edit a
released migration; add the next one.

Version 1 is the DuckDB store's version 7 in PostgreSQL's types, plus the full-text index
(``passages``, a weighted tsvector with a GIN index, filled in the write's transaction) and
the registry of vector indexes (``vector_models``; one table per model, made when its first
vectors are written, because a pgvector column and its HNSW index have a fixed dimension).
JSON stays ``text`` (blocks must come back with their keys in the order written; ``jsonb``
reorders them).
"""

from __future__ import annotations

from typing import Any

import psycopg

V1 = [
    """CREATE TABLE projects (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL DEFAULT '',
        created_at DOUBLE PRECISION NOT NULL,
        last_seen_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        project TEXT NOT NULL DEFAULT '',
        harness TEXT NOT NULL DEFAULT '',
        model TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        title TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX sessions_project ON sessions (project, updated_at DESC)",
    """CREATE TABLE session_state (
        session_id TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (session_id, key)
    )""",
    # Messages and distillations draw from one sequence: the vector indexer's watermark
    # covers both. Writes that draw from it hold an advisory lock to their commit, so seq
    # order is commit order even with several gateways (a watermark never skips a row).
    "CREATE SEQUENCE item_seq",
    """CREATE TABLE messages (
        seq BIGINT NOT NULL DEFAULT nextval('item_seq'),
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        parent_id TEXT,
        position INTEGER NOT NULL,
        role TEXT NOT NULL,
        blocks TEXT NOT NULL,
        text TEXT NOT NULL,
        model TEXT,
        usage TEXT,
        harness TEXT NOT NULL DEFAULT '',
        project TEXT NOT NULL DEFAULT '',
        api TEXT NOT NULL DEFAULT '',
        created_at DOUBLE PRECISION NOT NULL,
        complete BOOLEAN NOT NULL,
        origin TEXT NOT NULL,
        stop_reason TEXT,
        error TEXT
    )""",
    "CREATE INDEX messages_session ON messages (session_id, position)",
    "CREATE INDEX messages_parent ON messages (session_id, parent_id)",
    "CREATE UNIQUE INDEX messages_seq ON messages (seq)",
    """CREATE TABLE distillations (
        seq BIGINT NOT NULL DEFAULT nextval('item_seq'),
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        project TEXT NOT NULL DEFAULT '',
        generation INTEGER NOT NULL DEFAULT 0,
        content TEXT NOT NULL,
        source_ids TEXT NOT NULL DEFAULT '[]',
        start_at DOUBLE PRECISION NOT NULL DEFAULT 0,
        end_at DOUBLE PRECISION NOT NULL DEFAULT 0,
        method TEXT NOT NULL DEFAULT 'llm',
        source_tokens INTEGER NOT NULL DEFAULT 0,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        compression_ratio DOUBLE PRECISION NOT NULL DEFAULT 0,
        archived BOOLEAN NOT NULL DEFAULT false,
        worker_provider TEXT,
        worker_model TEXT,
        created_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX distillations_session ON distillations (session_id)",
    "CREATE UNIQUE INDEX distillations_seq ON distillations (seq)",
    # The full-text index: one row per passage (lore_core.storage.passages) of a message or
    # distillation (item_id "d:<id>"), with what a hit shows. tsv: the header line (role,
    # tool, command) at weight B, the body at weight A.
    """CREATE TABLE passages (
        item_id TEXT NOT NULL,
        passage INTEGER NOT NULL,
        session_id TEXT NOT NULL,
        project TEXT NOT NULL DEFAULT '',
        role TEXT NOT NULL,
        tool TEXT,
        source TEXT,
        position INTEGER NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL,
        start_at INTEGER NOT NULL,
        end_at INTEGER NOT NULL,
        text TEXT NOT NULL,
        tsv TSVECTOR NOT NULL,
        PRIMARY KEY (item_id, passage)
    )""",
    "CREATE INDEX passages_tsv ON passages USING gin (tsv)",
    "CREATE INDEX passages_session ON passages (session_id)",
    "CREATE INDEX passages_project ON passages (project)",
    """CREATE TABLE vector_models (
        model TEXT PRIMARY KEY,
        table_name TEXT NOT NULL UNIQUE,
        dimensions INTEGER NOT NULL,
        storage TEXT NOT NULL,
        watermark BIGINT NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE knowledge_versions (
        version_id TEXT PRIMARY KEY,
        logical_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        is_current BOOLEAN NOT NULL,
        is_deleted BOOLEAN NOT NULL DEFAULT false,
        category TEXT NOT NULL,
        title TEXT NOT NULL,
        content TEXT NOT NULL,
        scope TEXT NOT NULL DEFAULT 'project',
        project TEXT,
        sensitivity TEXT NOT NULL DEFAULT 'normal',
        created_by TEXT,
        updated_by TEXT,
        source_session TEXT,
        source_ref TEXT,
        worker_provider TEXT,
        worker_model TEXT,
        approval TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        UNIQUE (logical_id, version)
    )""",
    "CREATE INDEX knowledge_current ON knowledge_versions (logical_id) WHERE is_current",
    """CREATE TABLE knowledge_metrics (
        logical_id TEXT PRIMARY KEY,
        confidence DOUBLE PRECISION NOT NULL,
        last_reinforced_at DOUBLE PRECISION
    )""",
    """CREATE TABLE knowledge_contradictions (
        first_id TEXT NOT NULL,
        second_id TEXT NOT NULL,
        project TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL,
        first_fingerprint TEXT NOT NULL,
        second_fingerprint TEXT NOT NULL,
        judged_at DOUBLE PRECISION NOT NULL,
        judged_by TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        kept_id TEXT,
        PRIMARY KEY (first_id, second_id)
    )""",
    """CREATE TABLE team_bindings (
        project TEXT PRIMARY KEY,
        team TEXT NOT NULL,
        policy TEXT,
        bound_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE team_policies (
        team TEXT PRIMARY KEY,
        policy TEXT NOT NULL
    )""",
    """CREATE TABLE knowledge_decisions (
        decision_id TEXT PRIMARY KEY,
        logical_id TEXT NOT NULL,
        project TEXT NOT NULL DEFAULT '',
        fingerprint TEXT NOT NULL,
        decision TEXT NOT NULL,
        decided_by TEXT NOT NULL,
        decided_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE entities (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        canonical_name TEXT NOT NULL,
        aliases TEXT NOT NULL DEFAULT '[]',
        relations TEXT NOT NULL DEFAULT '[]',
        project TEXT,
        sensitivity TEXT DEFAULT 'normal',
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        created_by TEXT,
        updated_by TEXT,
        merged_into TEXT
    )""",
    """CREATE TABLE events (
        project TEXT NOT NULL,
        run TEXT NOT NULL,
        seq BIGINT NOT NULL,
        kind TEXT NOT NULL,
        content TEXT NOT NULL,
        working BOOLEAN NOT NULL DEFAULT false,
        key TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (project, run, seq)
    )""",
    """CREATE TABLE event_runs (
        project TEXT NOT NULL,
        run TEXT NOT NULL,
        last_seq BIGINT NOT NULL,
        covered_seq BIGINT NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (project, run)
    )""",
    """CREATE TABLE event_working (
        project TEXT NOT NULL,
        run TEXT NOT NULL,
        as_of_seq BIGINT NOT NULL,
        facts TEXT NOT NULL,
        taken_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (project, run)
    )""",
]

# Version 2: leases (Store.claim_lease): which gateway distils and curates a session now.
# A row per lease with its holder and expiry (the server's clock, seconds since the epoch),
# so a lease outlives a crashed holder until it expires.
V2 = [
    """CREATE TABLE leases (
        key TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
]

# Version 3: the vector indexers' claims. Each gateway's indexer claims the next pending
# items of a model (a range of item seqs, with its holder and an expiry on the server's
# clock) before it embeds them, so two gateways embed different items; a range is marked
# done when its vectors are written, and the model's watermark advances over the done
# ranges that follow it with nothing pending between (vector_models.watermark keeps its
# meaning: every item at or below it is embedded).
V3 = [
    """CREATE TABLE vector_claims (
        model TEXT NOT NULL,
        first_seq BIGINT NOT NULL,
        last_seq BIGINT NOT NULL,
        holder TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        done BOOLEAN NOT NULL DEFAULT false,
        PRIMARY KEY (model, first_seq)
    )""",
]

# Version 4: an answer keeps the context layer (0-4) its request was sent at, for the session
# reader. Answers stored before it have none (NULL: not known).
V4 = [
    "ALTER TABLE messages ADD COLUMN context_layer SMALLINT",
]

# Version 5: BM25 for the full-text index. ``ts_rank`` knows nothing of the corpus (no IDF);
# BM25 needs each passage's length and each word's document frequency. A passage's length is
# its count of word occurrences (``terms``, derived from its tsvector). ``passage_terms``
# holds, per lexeme, how many passages hold it and how often it occurs in all; the row of the
# empty lexeme (no real lexeme is empty) counts every passage and every occurrence (the
# corpus size and total length). Written in the transaction that writes or deletes passages,
# which holds the item-seq lock (SEQ_LOCK), so its rows are never updated by two writers
# at once. Filled here for the passages already stored.
V5 = [
    """CREATE FUNCTION lore_tsv_terms(tsvector) RETURNS integer
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
        AS $$ SELECT coalesce(sum(coalesce(cardinality(positions), 1)), 0)::integer FROM unnest($1) $$""",
    "ALTER TABLE passages ADD COLUMN terms INTEGER GENERATED ALWAYS AS (lore_tsv_terms(tsv)) STORED",
    """CREATE TABLE passage_terms (
        lexeme TEXT PRIMARY KEY,
        docs BIGINT NOT NULL,
        terms BIGINT NOT NULL
    ) WITH (fillfactor = 70)""",
    """INSERT INTO passage_terms (lexeme, docs, terms)
        SELECT word, ndoc, nentry FROM ts_stat('SELECT tsv FROM passages')
        UNION ALL SELECT '', count(*), coalesce(sum(terms), 0) FROM passages""",
]

#: Index i upgrades the schema from version i to version i + 1.
MIGRATIONS: list[list[str]] = [V1, V2, V3, V4, V5]
SCHEMA_VERSION = len(MIGRATIONS)
#: pg_advisory_xact_lock keys: the migration, and writes that draw from item_seq.
MIGRATION_LOCK = 0x4C4F5245_0001
SEQ_LOCK = 0x4C4F5245_0002


class SchemaTooNew(Exception):
    pass


def migrate(con: psycopg.Connection[Any]) -> int:
    """Bring the database to :data:`SCHEMA_VERSION`; return the version found before.
    ``con`` is in autocommit mode; each version is applied in a transaction of its own."""
    found = -1
    while True:
        with con.transaction():
            con.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            con.execute("CREATE TABLE IF NOT EXISTS lore_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = con.execute("SELECT value FROM lore_meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if found < 0:
                found = version
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"the database has schema version {version}, newer than this lore-store-postgres "
                    f"({SCHEMA_VERSION}): upgrade the plugin"
                )
            if version == SCHEMA_VERSION:
                return found
            for statement in MIGRATIONS[version]:
                con.execute(statement)  # type: ignore[arg-type]  # literal SQL of this module
            con.execute(
                """INSERT INTO lore_meta (key, value) VALUES ('schema_version', %s)
                ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
                (str(version + 1),),
            )
