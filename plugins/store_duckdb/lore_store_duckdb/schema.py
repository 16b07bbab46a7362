"""The DuckDB schema and its migrations.

``lore_meta.schema_version`` records the applied version. Migrations are append-only: each
entry upgrades from the version before it, inside one transaction, so a crash mid-migration
leaves the previous version intact. Never edit a released migration; add the next one.

Version 1 holds tier 1 (projects, sessions, per-session state, messages) and the tables the
later tiers will fill, shaped after docs/storage.md, docs/knowledge.md and docs/events.md, so
that they arrive as migrations that add columns rather than as a second database.
"""

from __future__ import annotations

import duckdb

V1 = [
    """CREATE TABLE projects (
        id VARCHAR PRIMARY KEY,
        name VARCHAR NOT NULL DEFAULT '',
        created_at DOUBLE NOT NULL,
        last_seen_at DOUBLE NOT NULL
    )""",
    """CREATE TABLE sessions (
        id VARCHAR PRIMARY KEY,
        project VARCHAR NOT NULL DEFAULT '',
        harness VARCHAR NOT NULL DEFAULT '',
        model VARCHAR,
        created_at DOUBLE NOT NULL,
        updated_at DOUBLE NOT NULL,
        title VARCHAR NOT NULL DEFAULT ''
    )""",
    # Per-session key/value state that must survive restarts (forceMinLayer, calibration).
    """CREATE TABLE session_state (
        session_id VARCHAR NOT NULL,
        key VARCHAR NOT NULL,
        value VARCHAR NOT NULL,
        updated_at DOUBLE NOT NULL,
        PRIMARY KEY (session_id, key)
    )""",
    "CREATE SEQUENCE message_seq START 1",
    # seq: commit order, the full-text indexer's watermark. blocks/usage: JSON text.
    """CREATE TABLE messages (
        seq BIGINT NOT NULL DEFAULT nextval('message_seq'),
        id VARCHAR PRIMARY KEY,
        session_id VARCHAR NOT NULL,
        parent_id VARCHAR,
        position INTEGER NOT NULL,
        role VARCHAR NOT NULL,
        blocks VARCHAR NOT NULL,
        text VARCHAR NOT NULL,
        model VARCHAR,
        usage VARCHAR,
        harness VARCHAR NOT NULL DEFAULT '',
        project VARCHAR NOT NULL DEFAULT '',
        api VARCHAR NOT NULL DEFAULT '',
        created_at DOUBLE NOT NULL,
        complete BOOLEAN NOT NULL,
        origin VARCHAR NOT NULL,
        stop_reason VARCHAR,
        error VARCHAR
    )""",
    # Tier 2: observation logs (generation 0) and their consolidations (generation 1+).
    """CREATE TABLE distillations (
        id VARCHAR PRIMARY KEY,
        session_id VARCHAR NOT NULL,
        project VARCHAR NOT NULL DEFAULT '',
        generation INTEGER NOT NULL DEFAULT 0,
        first_message_id VARCHAR,
        last_message_id VARCHAR,
        content VARCHAR NOT NULL,
        token_count INTEGER,
        archived BOOLEAN NOT NULL DEFAULT false,
        worker_provider VARCHAR,
        worker_model VARCHAR,
        created_at DOUBLE NOT NULL
    )""",
    # Tier 3: immutable knowledge versions (one current per logical_id; deletes append a
    # version with is_deleted) and the mutable metric register beside them.
    """CREATE TABLE knowledge_versions (
        version_id VARCHAR PRIMARY KEY,
        logical_id VARCHAR NOT NULL,
        version INTEGER NOT NULL,
        is_current BOOLEAN NOT NULL,
        is_deleted BOOLEAN NOT NULL DEFAULT false,
        category VARCHAR NOT NULL,
        title VARCHAR NOT NULL,
        content VARCHAR NOT NULL,
        scope VARCHAR NOT NULL DEFAULT 'project',
        project VARCHAR,
        sensitivity VARCHAR NOT NULL DEFAULT 'normal',
        created_by VARCHAR,
        source_session VARCHAR,
        source_ref VARCHAR,
        worker_provider VARCHAR,
        worker_model VARCHAR,
        approval VARCHAR,
        created_at DOUBLE NOT NULL
    )""",
    """CREATE TABLE knowledge_metrics (
        logical_id VARCHAR PRIMARY KEY,
        confidence DOUBLE NOT NULL,
        last_reinforced_at DOUBLE
    )""",
    """CREATE TABLE entities (
        id VARCHAR PRIMARY KEY,
        kind VARCHAR NOT NULL,
        canonical_name VARCHAR NOT NULL,
        aliases VARCHAR NOT NULL DEFAULT '[]',
        relations VARCHAR NOT NULL DEFAULT '[]',
        project VARCHAR,
        created_at DOUBLE NOT NULL,
        updated_at DOUBLE NOT NULL
    )""",
    # The multi-agent event log: append-only, seq is monotonic per run.
    """CREATE TABLE events (
        run_id VARCHAR NOT NULL,
        seq BIGINT NOT NULL,
        kind VARCHAR NOT NULL,
        payload VARCHAR NOT NULL,
        created_at DOUBLE NOT NULL,
        PRIMARY KEY (run_id, seq)
    )""",
]

# Version 2: distillations with their provenance (source ids, token counts, method, time
# range) and a ``seq`` drawn from the messages' sequence, so the full-text indexer feeds
# both tables past one watermark. No release ever wrote the version-1 table (nothing
# distilled before this version), so it is replaced rather than altered: DuckDB cannot add
# a column whose default is a sequence.
V2 = [
    "DROP TABLE distillations",
    """CREATE TABLE distillations (
        seq BIGINT NOT NULL DEFAULT nextval('message_seq'),
        id VARCHAR PRIMARY KEY,
        session_id VARCHAR NOT NULL,
        project VARCHAR NOT NULL DEFAULT '',
        generation INTEGER NOT NULL DEFAULT 0,
        content VARCHAR NOT NULL,
        source_ids VARCHAR NOT NULL DEFAULT '[]',
        start_at DOUBLE NOT NULL DEFAULT 0,
        end_at DOUBLE NOT NULL DEFAULT 0,
        method VARCHAR NOT NULL DEFAULT 'llm',
        source_tokens INTEGER NOT NULL DEFAULT 0,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        compression_ratio DOUBLE NOT NULL DEFAULT 0,
        archived BOOLEAN NOT NULL DEFAULT false,
        worker_provider VARCHAR,
        worker_model VARCHAR,
        created_at DOUBLE NOT NULL
    )""",
]

# Version 3: the knowledge tier is written (lore_core.storage.knowledge). A version records
# who wrote it (``updated_by``) beside who created the entry; rows of an earlier version (none
# were ever written) get their creator. No index beside the primary key: the tables hold
# hundreds to thousands of rows, and an ART index on ``logical_id`` measured no gain at 6,000
# rows (a lookup 1.1 ms with it, 1.3 ms without; writes alike) while DuckDB keeps every ART
# index in memory whole.
V3 = [
    "ALTER TABLE knowledge_versions ADD COLUMN updated_by VARCHAR",
    "UPDATE knowledge_versions SET updated_by = created_by WHERE updated_by IS NULL",
]

# Version 4: contradiction judgements, one row per pair of knowledge entries (the latest
# judgement; lore_core.storage.knowledge.KnowledgeContradiction).
V4 = [
    """CREATE TABLE knowledge_contradictions (
        first_id VARCHAR NOT NULL,
        second_id VARCHAR NOT NULL,
        project VARCHAR NOT NULL DEFAULT '',
        status VARCHAR NOT NULL,
        first_fingerprint VARCHAR NOT NULL,
        second_fingerprint VARCHAR NOT NULL,
        judged_at DOUBLE NOT NULL,
        judged_by VARCHAR NOT NULL,
        reason VARCHAR NOT NULL DEFAULT '',
        kept_id VARCHAR,
        PRIMARY KEY (first_id, second_id)
    )""",
]

# Version 5: teams (lore_core.knowledge.teams). A project's binding to a team (its policy
# overriding the team's when set), the team-wide policy, and the approval decision records:
# append-only, keyed by a decision id derived from their content, so records exchanged
# between machines are stored once.
V5 = [
    """CREATE TABLE team_bindings (
        project VARCHAR PRIMARY KEY,
        team VARCHAR NOT NULL,
        policy VARCHAR,
        bound_at DOUBLE NOT NULL
    )""",
    """CREATE TABLE team_policies (
        team VARCHAR PRIMARY KEY,
        policy VARCHAR NOT NULL
    )""",
    """CREATE TABLE knowledge_decisions (
        decision_id VARCHAR PRIMARY KEY,
        logical_id VARCHAR NOT NULL,
        project VARCHAR NOT NULL DEFAULT '',
        fingerprint VARCHAR NOT NULL,
        decision VARCHAR NOT NULL,
        decided_by VARCHAR NOT NULL,
        decided_at DOUBLE NOT NULL
    )""",
]

# Version 6: entities are written (lore_core.storage.entities). The version-1 table gains who
# created and last changed a row, its sensitivity, and the redirect a merge leaves
# (``merged_into``). Names and relations stay JSON text: a project has tens to hundreds of
# entities, read whole (name matching needs the kernel's normalisation, which SQL cannot do).
V6 = [
    "ALTER TABLE entities ADD COLUMN sensitivity VARCHAR DEFAULT 'normal'",
    "ALTER TABLE entities ADD COLUMN created_by VARCHAR",
    "ALTER TABLE entities ADD COLUMN updated_by VARCHAR",
    "ALTER TABLE entities ADD COLUMN merged_into VARCHAR",
]

# Version 7: the event log (lore_core.storage.events). Version 1's ``events`` table (never
# written) had no project and no working flag; runs are named streams within a project, so
# the log is keyed by project and run. ``event_runs`` holds each run's counter and distilled
# checkpoint; ``event_working`` the durable snapshot of its working facts.
V7 = [
    "DROP TABLE events",
    """CREATE TABLE events (
        project VARCHAR NOT NULL,
        run VARCHAR NOT NULL,
        seq BIGINT NOT NULL,
        kind VARCHAR NOT NULL,
        content VARCHAR NOT NULL,
        working BOOLEAN NOT NULL DEFAULT false,
        key VARCHAR,
        created_at DOUBLE NOT NULL,
        PRIMARY KEY (project, run, seq)
    )""",
    """CREATE TABLE event_runs (
        project VARCHAR NOT NULL,
        run VARCHAR NOT NULL,
        last_seq BIGINT NOT NULL,
        covered_seq BIGINT NOT NULL DEFAULT 0,
        created_at DOUBLE NOT NULL,
        updated_at DOUBLE NOT NULL,
        PRIMARY KEY (project, run)
    )""",
    """CREATE TABLE event_working (
        project VARCHAR NOT NULL,
        run VARCHAR NOT NULL,
        as_of_seq BIGINT NOT NULL,
        facts VARCHAR NOT NULL,
        taken_at DOUBLE NOT NULL,
        PRIMARY KEY (project, run)
    )""",
]

# Version 8: a summary row per session, kept by every write in the same transaction as its
# messages (DuckDBStore._summarise), so listing sessions reads no message: before it, every
# list of sessions counted its sessions' messages and leaves over the messages table (a scan
# of every message's session id: ~0.6 s at 1M messages, however few sessions were listed).
# ``heads`` are the session's leaves (messages no message of the session follows; their
# number is ``branch_count``), ``dangling`` the parent ids its messages name that the session
# does not hold (yet): a parent stored after its child is then known not to be a leaf. Both
# are JSON lists of message ids. Filled here from the messages already stored.
V8 = [
    """CREATE TABLE session_summary (
        session_id VARCHAR PRIMARY KEY,
        message_count BIGINT NOT NULL DEFAULT 0,
        branch_count BIGINT NOT NULL DEFAULT 0,
        heads VARCHAR NOT NULL DEFAULT '[]',
        dangling VARCHAR NOT NULL DEFAULT '[]'
    )""",
    """INSERT INTO session_summary (session_id, message_count, branch_count, heads, dangling)
    WITH m AS (
        SELECT id, session_id, parent_id FROM messages
    ), parents AS (
        SELECT DISTINCT session_id, parent_id FROM m WHERE parent_id IS NOT NULL
    ), leaves AS (
        SELECT m.session_id, count(*) AS n,
               coalesce(list(m.id ORDER BY m.id) FILTER (WHERE q.parent_id IS NULL), []::VARCHAR[]) AS heads
        FROM m LEFT JOIN parents q ON q.session_id = m.session_id AND q.parent_id = m.id
        GROUP BY m.session_id
    ), missing AS (
        SELECT p.session_id, list(p.parent_id ORDER BY p.parent_id) AS ids
        FROM parents p LEFT JOIN m ON m.id = p.parent_id AND m.session_id = p.session_id
        WHERE m.id IS NULL
        GROUP BY p.session_id
    )
    SELECT l.session_id, l.n, len(l.heads), to_json(l.heads)::VARCHAR,
           to_json(coalesce(d.ids, []::VARCHAR[]))::VARCHAR
    FROM leaves l LEFT JOIN missing d ON d.session_id = l.session_id""",
]

# Version 9: an answer keeps the context layer (0-4) its request was sent at, for the session
# reader. Answers stored before it have none (NULL: not known).
V9 = [
    "ALTER TABLE messages ADD COLUMN context_layer TINYINT",
]

#: Index i upgrades the schema from version i to version i + 1.
MIGRATIONS: list[list[str]] = [V1, V2, V3, V4, V5, V6, V7, V8, V9]
SCHEMA_VERSION = len(MIGRATIONS)


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    con.execute("CREATE TABLE IF NOT EXISTS lore_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)")
    row = con.execute("SELECT value FROM lore_meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Bring the database to :data:`SCHEMA_VERSION`; return the version found before."""
    found = current_version(con)
    if found > SCHEMA_VERSION:
        raise duckdb.Error(
            f"the database has schema version {found}, newer than this lore-store-duckdb "
            f"({SCHEMA_VERSION}): upgrade the plugin"
        )
    if found == SCHEMA_VERSION:
        return found
    # Each migration's commit checkpoints, so no migration is ever replayed from the WAL:
    # DuckDB (1.5) fails to replay an ALTER TABLE ADD COLUMN on a table with a sequence
    # default (``messages``: "Failure while replaying WAL file ... GetDefaultDatabase"), and a
    # gateway killed before its next checkpoint left a store that no longer opened.
    row = con.execute("SELECT current_setting('checkpoint_threshold')").fetchone()
    threshold = str(row[0]) if row else "16MiB"
    con.execute("SET checkpoint_threshold = '0b'")
    # A new database takes every migration in one transaction, so one checkpoint (~0.05 s
    # against ~0.3 s for one a version): it has no data a step could need committed first,
    # and the schema is the same. An existing one goes a version a transaction.
    steps = (
        [range(0, SCHEMA_VERSION)] if found == 0 else [range(v, v + 1) for v in range(found, SCHEMA_VERSION)]
    )
    try:
        for versions in steps:
            con.execute("BEGIN TRANSACTION")
            try:
                for version in versions:
                    for statement in MIGRATIONS[version]:
                        con.execute(statement)
                con.execute(
                    """INSERT INTO lore_meta (key, value) VALUES ('schema_version', ?)
                    ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
                    (str(versions[-1] + 1),),
                )
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
    finally:
        con.execute(f"SET checkpoint_threshold = '{threshold}'")
    return found
