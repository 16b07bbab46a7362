"""The PostgreSQL store: every tier of :class:`lore_core.interfaces.Store` in one database.

Full text is PostgreSQL's own: the kernel cuts each message and distillation into passages
(:mod:`lore_core.storage.passages`), and the write that stores an item stores its passages,
with a weighted ``tsvector`` under a GIN index, in the same transaction, and adds their words
to BM25's counts (``passage_terms``): a message is searchable as soon as its write
committed, on every gateway of the database, with no index thread and no watermark, and
ranked by BM25 as the DuckDB store's index ranks it. Vectors live in one table per embedding
model, as pgvector ``vector(n)`` columns under an HNSW index when the server has the ``vector`` extension, and
as ``real[]`` searched exactly (cosine in SQL over every row the filters keep) when not.

Calls run the synchronous psycopg driver in a worker thread (``asyncio.to_thread``), one
pooled connection each, so the event loop never blocks and any event loop (the gateway's, a
command's ``asyncio.run``) may call the store.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from lore_core.interfaces import (
    DistillationStore,
    EntityStore,
    EventLogStore,
    KnowledgeStore,
    Store,
    Tier,
    VectorStore,
)
from lore_core.storage.entities import (
    Entity,
    aliases_from_json,
    entity_order,
    relations_from_json,
    relations_json,
)
from lore_core.storage.events import NewEvent, RunEvent, RunState, WorkingFact, WorkingSnapshot
from lore_core.storage.forget import ForgetReport
from lore_core.storage.knowledge import (
    AUTHOR_USER,
    DEFAULT_CONFIDENCE,
    INITIAL_CONFIDENCE,
    KnowledgeConflict,
    KnowledgeContradiction,
    KnowledgeDecision,
    KnowledgeMetric,
    KnowledgeVersion,
    TeamBinding,
    canonical_order,
    normalize_title,
)
from lore_core.storage.passages import CallMemo, Passage, cut_text, fulltext_rules, message_passages
from lore_core.storage.records import (
    DISTILLATION_PREFIX,
    DISTILLATION_ROLE,
    VECTOR_DISTILLATION,
    VECTOR_MESSAGE,
    EmbeddingItem,
    ItemVectors,
    PassageRef,
    Project,
    ProjectSummary,
    SchemaMigration,
    SearchHit,
    Session,
    StoredDistillation,
    StoredMessage,
    StoreInventory,
    StoreUnavailable,
    VectorDimensionError,
    WriteBatch,
)
from lore_store_postgres.config import PostgresConfig
from lore_store_postgres.connect import connection_kwargs, first_connection, shown_dsn
from lore_store_postgres.schema import SCHEMA_VERSION, SEQ_LOCK, SchemaTooNew, migrate

log = logging.getLogger("lore.store.postgres")

T = TypeVar("T")
Conn = psycopg.Connection[Any]

#: What is not part of a word: PostgreSQL's parser reads ``push_common.go``, a path or a
#: host name as one token, which a query for "common" then misses; the DuckDB store's index
#: splits at every character that is not a letter or digit. Text is split the same way
#: before PostgreSQL parses it, on both sides (passages and queries).
_NOT_WORD = re.compile(r"[\W_]+")
#: The version of that splitting, part of the rules the passages were cut by: a store cut
#: by other rules is rebuilt at open (as when the kernel's passage rules change).
_SPLIT_RULES = "split1"
#: HNSW candidates per search (pgvector's ``hnsw.ef_search``, default 40): at least the
#: limit asked, at most pgvector's maximum.
_EF_SEARCH_MAX = 1000
#: How long a store's claim on pending items runs before another store may take them (a
#: gateway that died with a batch in hand).
_CLAIM_SECONDS = 300.0
#: Passages written per executemany.
_PASSAGE_BATCH = 2000
#: The columns of a passage row (:meth:`PostgresStore._passage_rows`), as _PASSAGE_INSERT names them.
_PASSAGE_FIELDS = (
    "item", "passage", "session", "project", "role", "tool", "source", "position", "created_at",
    "start_at", "end_at", "text", "header", "body",
)  # fmt: skip
#: How long a call waits for a pooled connection before it fails (every one is busy, or
#: the server went away and the pool is reconnecting).
_POOL_WAIT_SECONDS = 30.0

_MESSAGE_COLUMNS = (
    "id",
    "session_id",
    "parent_id",
    "position",
    "role",
    "blocks",
    "text",
    "model",
    "usage",
    "harness",
    "project",
    "api",
    "created_at",
    "complete",
    "origin",
    "stop_reason",
    "error",
    "context_layer",
)
_MESSAGE_TYPES = (
    "text", "text", "text", "int4", "text", "text", "text", "text", "text", "text", "text", "text",
    "float8", "bool", "text", "text", "text", "int2",
)  # fmt: skip
_KNOWLEDGE_COLUMNS = (
    "version_id",
    "logical_id",
    "version",
    "is_current",
    "is_deleted",
    "category",
    "title",
    "content",
    "scope",
    "project",
    "sensitivity",
    "created_by",
    "updated_by",
    "source_session",
    "source_ref",
    "worker_provider",
    "worker_model",
    "created_at",
)
_KNOWLEDGE_SELECT = f"SELECT {', '.join(_KNOWLEDGE_COLUMNS)} FROM knowledge_versions"
_ENTITY_COLUMNS = (
    "id",
    "kind",
    "canonical_name",
    "aliases",
    "relations",
    "project",
    "sensitivity",
    "created_at",
    "updated_at",
    "created_by",
    "updated_by",
    "merged_into",
)
_ENTITY_SELECT = f"SELECT {', '.join(_ENTITY_COLUMNS)} FROM entities"
_ENTITY_UPSERT = f"""INSERT INTO entities ({", ".join(_ENTITY_COLUMNS)})
    VALUES ({", ".join(["%s"] * len(_ENTITY_COLUMNS))})
    ON CONFLICT (id) DO UPDATE SET {", ".join(f"{c} = excluded.{c}" for c in _ENTITY_COLUMNS[1:])}"""
_DISTILLATION_COLUMNS = (
    "id",
    "session_id",
    "project",
    "generation",
    "content",
    "source_ids",
    "start_at",
    "end_at",
    "method",
    "source_tokens",
    "input_tokens",
    "output_tokens",
    "compression_ratio",
    "archived",
    "worker_provider",
    "worker_model",
    "created_at",
)
_ARCHIVE_SQL = "UPDATE distillations SET archived = true WHERE id = ANY(%s) AND NOT archived"
# Every passage's word counts go into passage_terms (BM25's statistics, schema.py) in the
# statement that writes or deletes it: ``counted`` is the rows written or deleted.
_COUNTS_SQL = """SELECT u.lexeme, count(*) AS docs, sum(coalesce(cardinality(u.positions), 1)) AS terms
        FROM counted, unnest(counted.tsv) AS u GROUP BY u.lexeme
        UNION ALL SELECT '', count(*), coalesce(sum(counted.terms), 0) FROM counted HAVING count(*) > 0"""
# One statement a batch: the passages from arrays (unnest), their counts added to BM25's.
# The header line (role, tool, command) at weight B, the body at A.
_PASSAGE_INSERT = f"""WITH rows AS (
        SELECT * FROM unnest(%(item)s::text[], %(passage)s::int4[], %(session)s::text[], %(project)s::text[],
            %(role)s::text[], %(tool)s::text[], %(source)s::text[], %(position)s::int4[],
            %(created_at)s::float8[], %(start_at)s::int4[], %(end_at)s::int4[], %(text)s::text[],
            %(header)s::text[], %(body)s::text[])
            AS r(item_id, passage, session_id, project, role, tool, source, position, created_at,
                 start_at, end_at, text, header, body)
    ), counted AS (
        INSERT INTO passages (item_id, passage, session_id, project, role, tool, source,
            position, created_at, start_at, end_at, text, tsv)
        SELECT item_id, passage, session_id, project, role, tool, source, position, created_at,
            start_at, end_at, text,
            setweight(to_tsvector(%(config)s::regconfig, header), 'B')
              || setweight(to_tsvector(%(config)s::regconfig, body), 'A')
        FROM rows
        ON CONFLICT (item_id, passage) DO NOTHING
        RETURNING tsv, terms
    )
    INSERT INTO passage_terms (lexeme, docs, terms)
    SELECT * FROM ({_COUNTS_SQL}) AS c ORDER BY lexeme
    ON CONFLICT (lexeme) DO UPDATE SET docs = passage_terms.docs + excluded.docs,
        terms = passage_terms.terms + excluded.terms"""
#: The passages of a session deleted, their counts taken out of BM25's.
_PASSAGE_FORGET = f"""WITH counted AS (
        DELETE FROM passages WHERE session_id = %s RETURNING tsv, terms
    ), counts AS ({_COUNTS_SQL}
    ), updated AS (
        UPDATE passage_terms t SET docs = t.docs - c.docs, terms = t.terms - c.terms
        FROM counts c WHERE t.lexeme = c.lexeme RETURNING 1
    )
    SELECT count(*) FROM counted"""
#: BM25's parameters, the usual ones (Robertson's; LanceDB's, so both stores rank alike).
BM25_K1 = 1.2
BM25_B = 0.75
#: A query word held by more than this share of all passages still adds to the score of the
#: passages found, but does not find passages by itself, unless every word of the query is
#: that common or the others find fewer passages than asked for (then a second query lets
#: every word find). A natural question's everyday words ("when", "asked", "working") match
#: a third of a store, and scoring all of those was most of a search's time. Measured on the
#: natural-questions store (REAL, 96 questions, 14,221 passages): search p50 123 -> 40 ms
#: under load, the best 50 identical for 95 questions and the best 10 for all 96 (0.25 kept
#: every list but saved nothing; 0.05 changed ten). Such a word's weight is at most
#: ln(1 + 0.9 / 0.1) = 2.3 (a rare word's is 7 to 9 here).
COMMON_WORD_SHARE = 0.1
#: The passages holding any of the query's words, best first by BM25 (Okapi, with the
#: Lucene form of IDF, never negative): for each query word w in a passage of length dl,
#: idf(w) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)), summed. A word's document
#: frequency, the passage count and the average length come from passage_terms; tf is the
#: word's count in the passage (its positions in the tsvector, header and body alike).
#: Only the query's words are taken out of each passage's tsvector: weight every word D,
#: the query's words C, keep the C ones (three C functions over the tsvector, cheaper than
#: unnesting all of it for each candidate). The candidates are the passages holding one of
#: the query's words that are not common (COMMON_WORD_SHARE).
_BM25_SQL = f"""WITH q AS (
        SELECT websearch_to_tsquery(%(config)s::regconfig, %(terms)s) AS query,
            tsvector_to_array(to_tsvector(%(config)s::regconfig, %(terms)s)) AS words
    ), corpus AS (
        SELECT greatest(docs, 1)::float8 AS n, greatest(terms::float8 / greatest(docs, 1), 1.0) AS avgdl
        FROM (SELECT coalesce(max(docs), 0) AS docs, coalesce(max(terms), 0) AS terms
              FROM passage_terms WHERE lexeme = '') AS t
    ), idf AS MATERIALIZED (
        SELECT w.lexeme, coalesce(t.docs, 0) AS docs,
            ln(1.0 + (c.n - coalesce(t.docs, 0) + 0.5) / (coalesce(t.docs, 0) + 0.5)) AS idf
        FROM q, corpus c, unnest(q.words) AS w(lexeme)
        LEFT JOIN passage_terms t ON t.lexeme = w.lexeme
    ), found AS MATERIALIZED (
        SELECT coalesce(
            (SELECT string_agg(quote_literal(i.lexeme), ' | ')::tsquery FROM idf i, corpus c
             WHERE i.docs <= c.n * %(common)s),
            q.query) AS query
        FROM q
    )
    SELECT p.item_id, p.passage, p.start_at, p.end_at, p.session_id, p.project, p.role, p.tool, p.source,
        p.position, p.created_at, p.text,
        (SELECT coalesce(sum(i.idf * f.tf * ({BM25_K1} + 1)
                / (f.tf + {BM25_K1} * (1 - {BM25_B} + {BM25_B} * p.terms / c.avgdl))), 0)
         FROM unnest(ts_filter(setweight(setweight(p.tsv, 'D'), 'C', q.words), ARRAY['c']::"char"[])) AS u
         JOIN idf i ON i.lexeme = u.lexeme,
         LATERAL (SELECT coalesce(cardinality(u.positions), 1)::float8 AS tf) AS f) AS score
    FROM passages p, q, corpus c, found
    WHERE p.tsv @@ found.query {{filters}}
    ORDER BY score DESC, p.item_id, p.passage LIMIT %(limit)s"""
_SESSION_SQL = """
    SELECT s.id, s.project, s.harness, s.model, s.created_at, s.updated_at, s.title,
           coalesce(c.n, 0), coalesce(c.leaves, 0)
    FROM sessions s
    LEFT JOIN (
        SELECT m.session_id, count(*) AS n,
               count(*) FILTER (WHERE NOT EXISTS (
                   SELECT 1 FROM messages k WHERE k.session_id = m.session_id AND k.parent_id = m.id
               )) AS leaves
        FROM messages m WHERE m.session_id = ANY(%s) GROUP BY m.session_id
    ) c ON c.session_id = s.id
    WHERE s.id = ANY(%s)"""
# Messages and distillations share the seq, so one watermark per model covers both.
_PENDING_SQL = f"""SELECT * FROM (
        SELECT seq, '{VECTOR_MESSAGE}' AS kind, id, text, session_id, project, created_at, role, blocks
        FROM messages WHERE seq > %(after)s AND seq < coalesce(%(before)s, 9223372036854775807)
        UNION ALL
        SELECT seq, '{VECTOR_DISTILLATION}', id, content, session_id, project, created_at, NULL, NULL
        FROM distillations WHERE seq > %(after)s AND seq < coalesce(%(before)s, 9223372036854775807)
    ) AS items ORDER BY seq LIMIT %(limit)s"""
#: The first item above the watermark that no claim covers (nothing has taken it yet).
_UNCLAIMED_SQL = """SELECT min(seq) FROM (
        SELECT seq FROM messages WHERE seq > %(after)s AND seq <= %(upto)s
        UNION ALL SELECT seq FROM distillations WHERE seq > %(after)s AND seq <= %(upto)s
    ) AS items
    WHERE NOT EXISTS (
        SELECT 1 FROM vector_claims c
        WHERE c.model = %(model)s AND items.seq BETWEEN c.first_seq AND c.last_seq
    )"""
_BEHIND_SQL = """SELECT (SELECT count(*) FROM messages WHERE seq > %(after)s)
    + (SELECT count(*) FROM distillations WHERE seq > %(after)s)"""


# Each project's figures in one statement (see Store.project_summaries); a spend value that
# is not a plain JSON number counts nothing.
_PROJECT_SUMMARY_SQL = """
    WITH counted AS (
        SELECT s.project, count(*) AS sessions, max(s.updated_at) AS last
        FROM sessions s GROUP BY s.project
    ), messaged AS (
        SELECT s.project, count(*) AS messages
        FROM messages m JOIN sessions s ON s.id = m.session_id GROUP BY s.project
    ), spent AS (
        SELECT s.project, sum(st.value::double precision) AS usd
        FROM session_state st JOIN sessions s ON s.id = st.session_id
        WHERE st.key = %s AND st.value ~ '^-?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$'
        GROUP BY s.project
    ), known AS (
        SELECT project, count(*) AS entries FROM knowledge_versions
        WHERE is_current AND NOT is_deleted AND scope = 'project' AND coalesce(project, '') <> ''
        GROUP BY project
    ), named AS (
        SELECT project FROM counted UNION SELECT id FROM projects UNION SELECT project FROM known
    )
    SELECT n.project, coalesce(c.sessions, 0), coalesce(ms.messages, 0), coalesce(k.entries, 0),
           coalesce(sp.usd, 0), coalesce(c.last, p.last_seen_at, 0) AS last
    FROM named n
    LEFT JOIN counted c ON c.project = n.project
    LEFT JOIN messaged ms ON ms.project = n.project
    LEFT JOIN spent sp ON sp.project = n.project
    LEFT JOIN known k ON k.project = n.project
    LEFT JOIN projects p ON p.id = n.project
    ORDER BY last DESC, n.project"""


def _session_filters(
    project: str | None,
    before: tuple[float, str] | None,
    since: float | None,
    harness: str | None,
    model: str | None,
    text: str | None,
) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause (or ``""``) and its parameters of ``list_sessions``."""
    clauses: list[str] = []
    params: list[Any] = []
    if project is not None:
        clauses.append("project = %s")
        params.append(project)
    if before is not None:
        clauses.append("(updated_at, id) < (%s, %s)")
        params += [float(before[0]), _clean(str(before[1]))]
    if since is not None:
        clauses.append("updated_at >= %s")
        params.append(float(since))
    if harness:
        clauses.append("harness = %s")
        params.append(_clean(harness))
    if model:
        clauses.append("model = %s")
        params.append(_clean(model))
    if text:
        # A case-insensitive substring of the title, id, model or project.
        columns = ("title", "id", "coalesce(model, '')", "project")
        clauses.append("(" + " OR ".join(f"strpos(lower({c}), lower(%s)) > 0" for c in columns) + ")")
        params += [_clean(text)] * len(columns)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params


def _words(text: str) -> str:
    """``text`` as words separated by spaces, for PostgreSQL's parser (:data:`_NOT_WORD`)."""
    return _NOT_WORD.sub(" ", text)


def _clean(value: str | None) -> str | None:
    """PostgreSQL's text cannot hold NUL: it is stored as U+FFFD (blocks, as JSON, keep it
    escaped and exact; only the derived ``text`` columns lose it)."""
    return value.replace("\x00", "\ufffd") if value is not None and "\x00" in value else value


def _ids(values: Sequence[str]) -> list[str]:
    """Ids that can be stored at all (an id with NUL never was: it finds nothing)."""
    return [v for v in values if "\x00" not in v]


def _table_name(model: str) -> str:
    base = re.sub(r"[^a-z0-9]+", "_", model.lower()).strip("_")[:30] or "model"
    return f"vec_{base}_{hashlib.sha256(model.encode()).hexdigest()[:10]}"


class PostgresStore(Store, DistillationStore, VectorStore, KnowledgeStore, EntityStore, EventLogStore):
    name = "postgres"
    #: Every optional tier (lore_core.interfaces.Tier).
    tiers = frozenset(Tier)
    #: Several gateways and lore commands on one database (lore_core.interfaces.Store.shared).
    shared = True

    def __init__(
        self,
        settings: PostgresConfig,
        journal_dir: Path | None = None,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.dsn = settings.dsn
        self.location = shown_dsn(settings.dsn)
        # The kernel's write-ahead journal is per gateway (what this process acknowledged
        # and has not committed yet), so it lives on this machine, not in the database.
        self.journal_dir = journal_dir
        self._environ = environ
        self._pool: ConnectionPool[Conn] | None = None
        self._server_version = ""
        #: pgvector's version on the server, or None: vectors are searched exactly.
        self._pgvector: str | None = None
        self._config = settings.text_search_config
        # Resolves the tool of results whose record does not name it, within this process.
        self._calls = CallMemo()
        self._opened_at: float | None = None
        # Who this store is when its indexer claims pending items (pending_embeddings).
        self._holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        await asyncio.to_thread(self._open)

    def _open(self) -> None:
        if self._pool is not None:
            return
        if not self.dsn.strip():
            raise StoreUnavailable(
                "store-postgres.dsn is not set: name the database in .lore.json, e.g. "
                '{"store": {"backend": "postgres"}, "store-postgres": {"dsn": "postgresql://lore@db/lore"}}'
            )
        kwargs = connection_kwargs(self.settings, self._environ)
        con = first_connection(self.dsn, kwargs, self.settings.connect_attempts)
        try:
            try:
                self.migration = SchemaMigration(migrate(con), SCHEMA_VERSION)
            except SchemaTooNew as exc:
                raise StoreUnavailable(f"{self.location}: {exc}") from None
            except psycopg.Error as exc:
                raise StoreUnavailable(
                    f"{self.location}: schema migration failed: {' '.join(str(exc).split())}"
                ) from None
            self._pgvector = self._ensure_pgvector(con) if self.settings.pgvector else None
            row = con.execute("SHOW server_version").fetchone()
            self._server_version = str(row[0]).split()[0] if row else ""
            try:
                con.execute("SELECT %s::regconfig", (self._config,))
            except psycopg.Error:
                raise StoreUnavailable(
                    f"store-postgres.textSearchConfig: the server has no text search configuration "
                    f"{self._config!r} (see \\dF in psql)"
                ) from None
            self._check_fulltext_rules(con)
        finally:
            con.close()
        pool: ConnectionPool[Conn] = ConnectionPool(
            self.dsn,
            kwargs=kwargs,
            min_size=1,
            max_size=self.settings.pool_size,
            timeout=_POOL_WAIT_SECONDS,
            # A connection the server dropped (a restart) is found and replaced before use.
            check=ConnectionPool.check_connection,
            name="lore",
            open=False,
        )
        try:
            pool.open(wait=True, timeout=self.settings.connect_timeout * self.settings.connect_attempts)
        except PoolTimeout:
            pool.close()
            raise StoreUnavailable(
                f"cannot open a connection pool to PostgreSQL at {self.location}"
            ) from None
        self._pool = pool
        self._opened_at = time.time()

    def _ensure_pgvector(self, con: Conn) -> str | None:
        """pgvector's version when the server has it (created in this database when the
        role may), else None: vectors are then stored as ``real[]`` and searched exactly."""
        row = con.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        if row:
            return str(row[0])
        available = con.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        if not available:
            log.info("PostgreSQL at %s has no pgvector: vector search is exact", self.location)
            return None
        try:
            con.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            log.warning(
                "PostgreSQL at %s has pgvector but this role cannot create it (%s): vector search "
                "is exact; CREATE EXTENSION vector as the database owner makes it approximate",
                self.location,
                " ".join(str(exc).split()),
            )
            return None
        row = con.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        return str(row[0]) if row else None

    def _check_fulltext_rules(self, con: Conn) -> None:
        """Rebuild the passages when the kernel's rules or the text search configuration
        changed since they were cut (``lore reindex`` does the same on demand)."""
        rules = f"{fulltext_rules()}/{self._config}/{_SPLIT_RULES}"
        row = con.execute("SELECT value FROM lore_meta WHERE key = 'fts_rules'").fetchone()
        if row and row[0] == rules:
            return
        if row:
            log.info("full-text index at %s: rebuilding it (rules %s)", self.location, rules)
        self._rebuild_passages(con, None)
        con.execute(
            """INSERT INTO lore_meta (key, value) VALUES ('fts_rules', %s)
            ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
            (rules,),
        )

    async def close(self) -> None:
        if self._pool is not None:
            # The items this store claimed and did not embed are free for another at once
            # (a store that died leaves its claims until they run out).
            try:
                await self._call(
                    lambda con: con.execute(
                        "DELETE FROM vector_claims WHERE holder = %s AND NOT done", (self._holder,)
                    )
                )
            except (StoreUnavailable, psycopg.Error) as exc:
                log.info("could not give back the vector claims at close: %s", exc)
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.close)

    def health(self) -> dict[str, Any]:
        if self._pool is None:
            return {"ok": False, "detail": f"PostgreSQL at {self.location} is not open", "dsn": self.location}
        stats = self._pool.get_stats()
        vectors = (
            f"pgvector {self._pgvector} (HNSW, approximate)"
            if self._pgvector
            else "exact (pgvector turned off in store-postgres)"
            if not self.settings.pgvector
            else "exact (the server has no pgvector extension)"
        )
        return {
            "ok": True,
            "detail": f"PostgreSQL {self._server_version} at {self.location}",
            "dsn": self.location,
            "vectors": vectors,
            "fulltext": f"tsvector ({self._config}) with a GIN index, ranked by BM25",
            "pool": {
                "size": stats.get("pool_size", 0),
                "available": stats.get("pool_available", 0),
                "max": self.settings.pool_size,
                "waiting": stats.get("requests_waiting", 0),
            },
        }

    # -- running statements ------------------------------------------------------------------

    def _with(self, body: Callable[[Conn], T]) -> T:
        """``body`` in one transaction on a pooled connection: committed when it returns,
        rolled back when it raises."""
        pool = self._pool
        if pool is None:
            raise StoreUnavailable(f"PostgreSQL at {self.location} is not open")
        try:
            with pool.connection() as con:
                return body(con)
        except PoolTimeout:
            raise StoreUnavailable(
                f"no connection to PostgreSQL at {self.location} within {_POOL_WAIT_SECONDS:.0f} s"
            ) from None
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"PostgreSQL at {self.location}: {' '.join(str(exc).split())}") from None

    async def _call(self, body: Callable[[Conn], T]) -> T:
        return await asyncio.to_thread(self._with, body)

    async def _rows(self, query: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        def run(con: Conn) -> list[tuple[Any, ...]]:
            return con.execute(query, params).fetchall()  # type: ignore[arg-type]  # SQL of this module

        return await self._call(run)

    # -- writes ----------------------------------------------------------------------------

    async def write(self, batch: WriteBatch) -> int:
        merged = batch.merged()
        return await self._call(lambda con: self._write(con, merged))

    def _write(self, con: Conn, batch: WriteBatch) -> int:
        cur = con.cursor()
        if batch.projects:
            cur.executemany(
                """INSERT INTO projects (id, name, created_at, last_seen_at) VALUES (%s, %s, %s, %s)
                ON CONFLICT (id) DO UPDATE SET
                  name = CASE WHEN projects.name = '' THEN excluded.name ELSE projects.name END,
                  created_at = least(projects.created_at, excluded.created_at),
                  last_seen_at = greatest(projects.last_seen_at, excluded.last_seen_at)""",
                [(p.id, p.name, p.created_at, p.last_seen_at) for p in batch.projects],
            )
        if batch.sessions:
            # The same rule as lore_core.storage.records.merge_session.
            cur.executemany(
                """INSERT INTO sessions (id, project, harness, model, created_at, updated_at, title)
                VALUES (%s, %s, %s, %s, %s, %s, %s)
                ON CONFLICT (id) DO UPDATE SET
                  project = CASE WHEN sessions.project = '' THEN excluded.project
                            ELSE sessions.project END,
                  harness = CASE WHEN excluded.updated_at >= sessions.updated_at
                                 AND excluded.harness <> '' THEN excluded.harness
                            WHEN sessions.harness = '' THEN excluded.harness
                            ELSE sessions.harness END,
                  model = CASE WHEN excluded.updated_at >= sessions.updated_at
                               AND excluded.model IS NOT NULL THEN excluded.model
                          ELSE coalesce(sessions.model, excluded.model) END,
                  created_at = least(sessions.created_at, excluded.created_at),
                  updated_at = greatest(sessions.updated_at, excluded.updated_at),
                  title = CASE WHEN sessions.title = '' THEN excluded.title
                          ELSE sessions.title END""",
                [
                    (s.id, s.project, s.harness, s.model, s.created_at, s.updated_at, s.title)
                    for s in batch.sessions
                ],
            )
        if not batch.messages:
            return 0
        # Held to the commit: seq order is commit order across gateways (schema.py).
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (SEQ_LOCK,))
        columns: list[list[Any]] = [[] for _ in _MESSAGE_COLUMNS]
        for m in batch.messages:
            row = (
                m.id, m.session_id, m.parent_id, m.position, m.role,
                json.dumps(m.blocks, ensure_ascii=False), _clean(m.text), m.model,
                json.dumps(m.usage) if m.usage is not None else None, m.harness, m.project, m.api,
                m.created_at, m.complete, m.origin, _clean(m.stop_reason), _clean(m.error),
                m.context_layer,
            )  # fmt: skip
            for column, value in zip(columns, row, strict=True):
                column.append(value)
        # One statement over arrays (unnest) rather than a statement per row; RETURNING
        # names the rows that were new (a resent history inserts nothing).
        unnest = ", ".join(f"%s::{t}[]" for t in _MESSAGE_TYPES)
        cols = ", ".join(_MESSAGE_COLUMNS)
        new = cur.execute(
            f"""INSERT INTO messages ({cols}) SELECT * FROM unnest({unnest})
            ON CONFLICT (id) DO NOTHING RETURNING id""",  # type: ignore[arg-type]
            columns,
        ).fetchall()
        added = {r[0] for r in new}
        rows: list[tuple[Any, ...]] = []
        for m in batch.messages:
            if m.id not in added:
                continue
            passages = self._calls.cut(m.session_id, m.role, m.blocks, m.text or "")
            rows += self._passage_rows(
                m.id, m.session_id, m.project, m.role, m.position, m.created_at, passages
            )
        self._insert_passages(cur, rows)
        return len(added)

    def _passage_rows(
        self,
        item: str,
        session: str,
        project: str,
        role: str,
        position: int,
        created_at: float,
        passages: Sequence[Passage],
    ) -> list[tuple[Any, ...]]:
        rows = []
        for p in passages:
            header, _, body = p.text.partition("\n")
            rows.append(
                (
                    item, p.index, session, project, role, p.tool, _clean(p.source), position, created_at,
                    p.start, p.end, _clean(p.text), _words(header), _words(body),
                )
            )  # fmt: skip
        return rows

    def _insert_passages(self, cur: psycopg.Cursor[Any], rows: list[tuple[Any, ...]]) -> None:
        """Write passages and add their words to BM25's counts; the caller holds SEQ_LOCK."""
        for start in range(0, len(rows), _PASSAGE_BATCH):
            columns = [list(c) for c in zip(*rows[start : start + _PASSAGE_BATCH], strict=True)]
            params: dict[str, Any] = dict(zip(_PASSAGE_FIELDS, columns, strict=True))
            params["config"] = self._config
            cur.execute(_PASSAGE_INSERT, params)

    async def set_state(self, session_id: str, key: str, value: Any) -> None:
        await self.set_states([(session_id, key, value)])

    async def set_states(self, values: Sequence[tuple[str, str, Any]]) -> None:
        if not values:
            return
        # The last value of a (session, key) wins, as it would one call at a time.
        latest = {(s, k): json.dumps(v) for s, k, v in values}
        now = time.time()

        def run(con: Conn) -> None:
            con.cursor().executemany(
                """INSERT INTO session_state (session_id, key, value, updated_at) VALUES (%s, %s, %s, %s)
                ON CONFLICT (session_id, key) DO UPDATE SET value = excluded.value,
                  updated_at = excluded.updated_at""",
                [(s, k, v, now) for (s, k), v in latest.items()],
            )

        await self._call(run)

    # -- reads -----------------------------------------------------------------------------

    async def get_state(self, session_id: str, key: str, default: Any = None) -> Any:
        rows = await self._rows(
            "SELECT value FROM session_state WHERE session_id = %s AND key = %s", (session_id, key)
        )
        return json.loads(rows[0][0]) if rows else default

    async def get_states(self, key: str, session_ids: Sequence[str]) -> dict[str, Any]:
        if not session_ids:
            return {}
        rows = await self._rows(
            "SELECT session_id, value FROM session_state WHERE key = %s AND session_id = ANY(%s)",
            (key, _ids(session_ids)),
        )
        return {str(s): json.loads(v) for s, v in rows}

    async def session_state(self, session_id: str) -> dict[str, Any]:
        rows = await self._rows(
            "SELECT key, value FROM session_state WHERE session_id = %s ORDER BY key", (session_id,)
        )
        return {k: json.loads(v) for k, v in rows}

    async def get_session(self, session_id: str) -> Session | None:
        rows = await self._rows(_SESSION_SQL, ([session_id], [session_id]))
        return _session(rows[0]) if rows else None

    async def list_sessions(
        self,
        project: str | None = None,
        limit: int = 50,
        *,
        before: tuple[float, str] | None = None,
        since: float | None = None,
        harness: str | None = None,
        model: str | None = None,
        text: str | None = None,
    ) -> list[Session]:
        where, params = _session_filters(project, before, since, harness, model, text)

        def run(con: Conn) -> list[tuple[Any, ...]]:
            ids = [
                r[0]
                for r in con.execute(
                    f"SELECT id FROM sessions {where} ORDER BY updated_at DESC, id DESC LIMIT %s",  # type: ignore[arg-type]
                    [*params, max(0, limit)],
                ).fetchall()
            ]
            if not ids:
                return []
            return con.execute(
                _SESSION_SQL + " ORDER BY s.updated_at DESC, s.id DESC",  # type: ignore[arg-type]
                (ids, ids),
            ).fetchall()

        return [_session(r) for r in await self._call(run)]

    async def list_projects(self) -> list[Project]:
        rows = await self._rows("SELECT id, name, created_at, last_seen_at FROM projects ORDER BY id")
        return [Project(*r) for r in rows]

    async def project_summaries(self, spend_key: str) -> list[ProjectSummary]:
        rows = await self._rows(_PROJECT_SUMMARY_SQL, (spend_key,))
        return [
            ProjectSummary(
                project=str(r[0]),
                sessions=int(r[1]),
                messages=int(r[2]),
                knowledge=int(r[3]),
                spend_usd=float(r[4]),
                last_activity=float(r[5]),
            )
            for r in rows
        ]

    async def session_messages(self, session_id: str) -> list[StoredMessage]:
        rows = await self._rows(
            f"SELECT {', '.join(_MESSAGE_COLUMNS)} FROM messages WHERE session_id = %s "
            "ORDER BY position, created_at, id",
            (session_id,),
        )
        return [_message(r) for r in rows]

    async def get_messages(self, ids: Sequence[str]) -> list[StoredMessage]:
        wanted = _ids(ids)
        if not wanted:
            return []
        rows = await self._rows(
            f"SELECT {', '.join(_MESSAGE_COLUMNS)} FROM messages WHERE id = ANY(%s)", (wanted,)
        )
        found = {r[0]: _message(r) for r in rows}
        return [found[i] for i in ids if i in found]

    async def search(
        self,
        query: str,
        session_id: str | None = None,
        project: str | None = None,
        limit: int = 10,
    ) -> list[SearchHit]:
        words = _NOT_WORD.sub(" ", query or "").split()
        if not words or limit <= 0:
            return []
        # Any of the words (websearch_to_tsquery parses "a or b" safely: the words are runs of
        # letters and digits, so no operator of its syntax reaches it); stop words drop out,
        # and a query of stop words alone matches nothing. Ranked by BM25 (_BM25_SQL).
        terms = " or ".join(dict.fromkeys(w.lower() for w in words))
        filters = ""
        params: dict[str, Any] = {"config": self._config, "terms": _clean(terms), "limit": limit}
        if session_id is not None:
            filters += " AND p.session_id = %(session)s"
            params["session"] = session_id
        if project is not None:
            filters += " AND p.project = %(project)s"
            params["project"] = project
        query = _BM25_SQL.format(filters=filters)
        rows = await self._rows(query, {**params, "common": COMMON_WORD_SHARE})
        if len(rows) < limit:  # too few without the common words: every word finds passages
            rows = await self._rows(query, {**params, "common": 1.0})
        return [
            SearchHit(
                id=item, session_id=session, project=proj or "", role=role, score=float(score),
                text=text, position=int(position or 0), created_at=float(at or 0.0), passage=int(passage),
                start=int(start), end=int(end), tool=tool, source=source,
            )
            for item, passage, start, end, session, proj, role, tool, source, position, at, text, score
            in rows
        ]  # fmt: skip

    async def sync_search_index(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Passages are written with their items, so the index is never behind; this is the
        rebuild (``lore reindex``): every item cut again by the current rules."""
        return await self._call(lambda con: self._rebuild_passages(con, progress))

    def _rebuild_passages(self, con: Conn, progress: Callable[[int, int], None] | None) -> int:
        # One transaction: searches on other connections see the old index until it commits.
        with con.transaction():
            cur = con.cursor()
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (SEQ_LOCK,))
            (total,) = cur.execute(_BEHIND_SQL, {"after": 0}).fetchone() or (0,)
            if progress is not None:
                progress(0, int(total))
            cur.execute("DELETE FROM passages")
            cur.execute("DELETE FROM passage_terms")
            calls = CallMemo()
            done, after = 0, 0
            while True:
                items = cur.execute(
                    """SELECT * FROM (
                        SELECT seq, id, session_id, project, role, position, created_at, blocks, text,
                            false AS distilled
                        FROM messages WHERE seq > %(after)s
                        UNION ALL
                        SELECT seq, id, session_id, project, '', 0, created_at, NULL, content, true
                        FROM distillations WHERE seq > %(after)s
                    ) AS items ORDER BY seq LIMIT 2000""",
                    {"after": after},
                ).fetchall()
                if not items:
                    break
                rows: list[tuple[Any, ...]] = []
                for seq, ident, session, proj, role, position, at, blocks, text, distilled in items:
                    if distilled:
                        rows += self._passage_rows(
                            DISTILLATION_PREFIX + ident,
                            session,
                            proj,
                            DISTILLATION_ROLE,
                            0,
                            at,
                            cut_text(text),
                        )
                    else:
                        passages = calls.cut(session, role, json.loads(blocks) if blocks else [], text or "")
                        rows += self._passage_rows(ident, session, proj, role, position, at, passages)
                    after = seq
                self._insert_passages(cur, rows)
                done += len(items)
                if progress is not None:
                    progress(done, max(int(total), done))
        return done

    # -- forgetting --------------------------------------------------------------------------

    async def forget_session(self, session_id: str, keep_state: Sequence[str] = ()) -> ForgetReport:
        started = time.monotonic()
        keep = frozenset(keep_state)
        bytes_before = await self._database_bytes()
        steps: dict[str, float] = {}

        def delete(con: Conn) -> tuple[bool, int, int, int, int, list[str]]:
            cur = con.cursor()
            one = (session_id,)
            (sessions,) = cur.execute("SELECT count(*) FROM sessions WHERE id = %s", one).fetchone() or (0,)
            keys = [
                str(k)
                for (k,) in cur.execute(
                    "SELECT key FROM session_state WHERE session_id = %s ORDER BY key", one
                ).fetchall()
                if k not in keep
            ]
            messages = cur.execute("DELETE FROM messages WHERE session_id = %s", one).rowcount
            distillations = cur.execute("DELETE FROM distillations WHERE session_id = %s", one).rowcount
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (SEQ_LOCK,))  # passage_terms' writer
            (passages,) = cur.execute(_PASSAGE_FORGET, one).fetchone() or (0,)
            vectors = 0
            for (table,) in cur.execute("SELECT table_name FROM vector_models ORDER BY model").fetchall():
                vectors += cur.execute(
                    sql.SQL("DELETE FROM {} WHERE session_id = %s").format(sql.Identifier(table)), one
                ).rowcount
            cur.execute("DELETE FROM sessions WHERE id = %s", one)
            if keys:
                cur.execute(
                    "DELETE FROM session_state WHERE session_id = %s AND key = ANY(%s)", (session_id, keys)
                )
            found = bool(sessions or messages or distillations)
            return found, messages, distillations, passages, vectors, keys

        began = time.monotonic()
        found, messages, distillations, passages, vectors, keys = await self._call(delete)
        steps["rows"] = time.monotonic() - began
        if (found or keys) and self.settings.forget_rewrite:
            began = time.monotonic()
            await asyncio.to_thread(self._rewrite_tables)
            steps["rewrite"] = time.monotonic() - began
        return ForgetReport(
            session_id,
            found,
            messages=messages,
            distillations=distillations,
            passages=passages,
            vectors=vectors,
            state_keys=tuple(keys),
            seconds=time.monotonic() - started,
            steps=steps,
            bytes_before=bytes_before,
            bytes_after=await self._database_bytes(),
        )

    def _rewrite_tables(self) -> None:
        """VACUUM FULL the tables that held the session: a DELETE leaves the rows' bytes in
        the data files until the space is reused; a rewrite copies the live rows into new
        files and drops the old ones. Needs autocommit (VACUUM refuses a transaction)."""

        def run(con: Conn) -> None:
            tables = ["messages", "distillations", "passages", "session_state", "sessions"]
            tables += [r[0] for r in con.execute("SELECT table_name FROM vector_models").fetchall()]
            con.commit()
            con.autocommit = True
            try:
                for table in tables:
                    con.execute(sql.SQL("VACUUM FULL {}").format(sql.Identifier(table)))
            finally:
                con.autocommit = False

        self._with(run)

    async def _database_bytes(self) -> int:
        rows = await self._rows("SELECT pg_database_size(current_database())")
        return int(rows[0][0])

    # -- distillations ---------------------------------------------------------------------

    async def write_distillation(self, distillation: StoredDistillation, archive: Sequence[str] = ()) -> bool:
        d = distillation
        ids = [i.removeprefix(DISTILLATION_PREFIX) for i in archive]

        def run(con: Conn) -> bool:
            cur = con.cursor()
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (SEQ_LOCK,))
            added = cur.execute(
                f"""INSERT INTO distillations ({", ".join(_DISTILLATION_COLUMNS)})
                VALUES ({", ".join(["%s"] * len(_DISTILLATION_COLUMNS))})
                ON CONFLICT (id) DO NOTHING RETURNING id""",  # type: ignore[arg-type]
                _distillation_row(d),
            ).fetchone()
            if added:
                rows = self._passage_rows(
                    DISTILLATION_PREFIX + d.id, d.session_id, d.project, DISTILLATION_ROLE, 0, d.created_at,
                    cut_text(d.text),
                )  # fmt: skip
                self._insert_passages(cur, rows)
            if ids:
                cur.execute(_ARCHIVE_SQL, (ids,))
            return added is not None

        return await self._call(run)

    async def list_distillations(
        self, session_id: str | None = None, include_archived: bool = True
    ) -> list[StoredDistillation]:
        where: list[str] = []
        params: list[Any] = []
        if session_id is not None:
            where.append("session_id = %s")
            params.append(session_id)
        if not include_archived:
            where.append("NOT archived")
        clause = ("WHERE " + " AND ".join(where)) if where else ""
        rows = await self._rows(
            f"SELECT {', '.join(_DISTILLATION_COLUMNS)} FROM distillations {clause} "
            "ORDER BY created_at, generation, id",
            params,
        )
        return [_distillation(r) for r in rows]

    async def get_distillation(self, distillation_id: str) -> StoredDistillation | None:
        ident = distillation_id.removeprefix(DISTILLATION_PREFIX)
        if "\x00" in ident:
            return None
        rows = await self._rows(
            f"SELECT {', '.join(_DISTILLATION_COLUMNS)} FROM distillations WHERE id = %s", (ident,)
        )
        return _distillation(rows[0]) if rows else None

    async def archive_distillations(self, ids: Sequence[str]) -> int:
        wanted = _ids([i.removeprefix(DISTILLATION_PREFIX) for i in ids])
        if not wanted:
            return 0
        return await self._call(lambda con: con.execute(_ARCHIVE_SQL, (wanted,)).rowcount)

    async def distilled_message_ids(self, session_id: str) -> set[str]:
        rows = await self._rows(
            "SELECT source_ids FROM distillations WHERE session_id = %s AND generation = 0", (session_id,)
        )
        return {i for (source,) in rows for i in json.loads(source or "[]")}

    # -- vectors ---------------------------------------------------------------------------

    def _model_row(self, con: Conn, model: str, lock: bool = False) -> tuple[str, int, str, int] | None:
        """``(table, dimensions, storage, watermark)`` of a model's index, or None."""
        row = con.execute(
            "SELECT table_name, dimensions, storage, watermark FROM vector_models WHERE model = %s"
            + (" FOR UPDATE" if lock else ""),  # type: ignore[arg-type]
            (model,),
        ).fetchone()
        return (str(row[0]), int(row[1]), str(row[2]), int(row[3])) if row else None

    def _create_model(self, con: Conn, model: str, dimensions: int) -> tuple[str, int, str, int]:
        table = _table_name(model)
        storage = "vector" if self._pgvector else "real[]"
        column = (
            sql.SQL("vector({})").format(sql.Literal(dimensions)) if self._pgvector else sql.SQL("real[]")
        )
        ident = sql.Identifier(table)
        con.execute(
            sql.SQL(
                """CREATE TABLE {} (
                seq BIGINT NOT NULL,
                kind TEXT NOT NULL,
                item_id TEXT NOT NULL,
                chunk INTEGER NOT NULL,
                session_id TEXT NOT NULL,
                project TEXT NOT NULL DEFAULT '',
                created_at DOUBLE PRECISION NOT NULL,
                embedding {} NOT NULL)"""
            ).format(ident, column)
        )
        for name, columns in (("session", "session_id"), ("project", "project"), ("item", "item_id")):
            con.execute(
                sql.SQL("CREATE INDEX {} ON {} ({})").format(
                    sql.Identifier(f"{table}_{name}"), ident, sql.Identifier(columns)
                )
            )
        if self._pgvector and self.settings.hnsw_min_vectors == 0:
            self._create_hnsw(con, table)
        con.execute(
            """INSERT INTO vector_models (model, table_name, dimensions, storage, watermark, created_at)
            VALUES (%s, %s, %s, %s, 0, %s)""",
            (model, table, dimensions, storage, time.time()),
        )
        return table, dimensions, storage, 0

    @staticmethod
    def _create_hnsw(con: Conn, table: str, project: str | None = None, concurrently: bool = False) -> None:
        """The model's HNSW index over every row, or (``project``) over that project's rows:
        a partial index the planner uses for a query filtered on that project (planned with
        the value, see :meth:`nearest_passages`). No training step (unlike IVFFlat): built on
        the rows there are, then kept up to date by every insert; cosine, as the protocol ranks.
        ``concurrently`` (``con`` in autocommit): built without blocking writes, after dropping
        what a build that failed or was killed left (an invalid index)."""
        name = f"{table}_hnsw" if project is None else _project_index(table, project)
        how = sql.SQL("CONCURRENTLY ") if concurrently else sql.SQL("")
        if concurrently and con.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone() == (True,):
            con.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))
        statement = sql.SQL("CREATE INDEX {}IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops)")
        query = statement.format(how, sql.Identifier(name), sql.Identifier(table))
        if project is not None:
            query += sql.SQL(" WHERE project = {}").format(sql.Literal(project))
        con.execute(query)

    @staticmethod
    def _has_index(con: Conn, name: str) -> bool:
        """Whether the index ``name`` exists and is usable (not what a failed concurrent
        build left)."""
        row = con.execute(
            "SELECT coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)), false)",
            (name,),
        ).fetchone()
        return row == (True,)

    async def optimize_vectors(self, model: str) -> None:
        """Build the model's HNSW index once its table holds ``hnswMinVectors`` vectors, and
        one per project past the same size (``hnswPerProject``), each once, in bulk."""

        def run(con: Conn) -> None:
            # Autocommit: each build is CREATE INDEX CONCURRENTLY (no transaction around it),
            # so every gateway's vector writes go on meanwhile (minutes at a million vectors).
            con.autocommit = True
            try:
                build(con)
            finally:
                con.execute("RESET maintenance_work_mem")
                con.autocommit = False

        def build(con: Conn) -> None:
            found = self._model_row(con, model)
            if found is None or found[2] != "vector":
                return
            table, minimum = found[0], self.settings.hnsw_min_vectors
            counts = con.execute(
                sql.SQL("SELECT project, count(*) FROM {} GROUP BY project").format(sql.Identifier(table))
            ).fetchall()
            total = sum(int(n) for _, n in counts)
            wanted: list[str | None] = [None] if total >= minimum else []
            if self.settings.hnsw_per_project:
                # A project that is most of the table gains little over the shared index.
                wanted += sorted(p for p, n in counts if n >= max(minimum, 1) and 2 * n <= total)
            missing = [
                p for p in wanted
                if not self._has_index(con, f"{table}_hnsw" if p is None else _project_index(table, p))
            ]  # fmt: skip
            if not missing:
                return
            # One gateway builds them; another finds the lock taken and leaves it. A session
            # lock (the builds run outside a transaction), released once they are done; a
            # gateway that dies mid-build releases it with its connection, and the next
            # upkeep drops the invalid index it left and builds again.
            key = (f"hnsw:{model}",)
            if con.execute("SELECT pg_try_advisory_lock(hashtext(%s))", key).fetchone() != (True,):
                return
            try:
                con.execute(
                    sql.SQL("SET maintenance_work_mem = {}").format(
                        sql.Literal(f"{self.settings.hnsw_build_memory}MB")
                    )
                )
                for project in missing:
                    started = time.monotonic()
                    self._create_hnsw(con, table, project, concurrently=True)
                    log.info(
                        "vector index %s: HNSW index%s built in %.1f s",
                        model,
                        "" if project is None else f" of project {project}",
                        time.monotonic() - started,
                    )
            finally:
                con.execute("SELECT pg_advisory_unlock(hashtext(%s))", key)

        await self._call(run)

    async def pending_embeddings(self, model: str, limit: int = 256) -> list[EmbeddingItem]:
        """The next pending items no other store (gateway) has claimed, claimed for this one
        until its vectors are written or ``_CLAIM_SECONDS`` pass. Asking again gives up what
        this store had claimed and not written: the same items come back first."""

        def run(con: Conn) -> list[tuple[Any, ...]]:
            con.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"vclaim:{model}",))
            con.execute(
                """DELETE FROM vector_claims WHERE model = %s AND NOT done
                AND (holder = %s OR expires_at <= extract(epoch FROM clock_timestamp()))""",
                (model, self._holder),
            )
            found = self._model_row(con, model)
            watermark = found[3] if found else 0
            claimed = con.execute(
                "SELECT first_seq, last_seq FROM vector_claims WHERE model = %s AND last_seq > %s "
                "ORDER BY first_seq",
                (model, watermark),
            ).fetchall()
            # The gaps between the claimed ranges, in order: the first that holds items.
            after, rows = watermark, []
            for first, last in [*claimed, (None, None)]:
                if first is None or first > after + 1:
                    rows = con.execute(
                        _PENDING_SQL,
                        {"after": after, "before": first, "limit": max(0, limit)},
                    ).fetchall()
                    if rows:
                        break
                after = max(after, int(last)) if last is not None else after
            if rows:
                con.execute(
                    """INSERT INTO vector_claims (model, first_seq, last_seq, holder, expires_at)
                    VALUES (%s, %s, %s, %s, extract(epoch FROM clock_timestamp()) + %s)""",
                    (model, rows[0][0], rows[-1][0], self._holder, _CLAIM_SECONDS),
                )
            return rows

        rows = await self._call(run)
        return [
            EmbeddingItem(
                kind, ident, text or "", session or "", project or "", float(at or 0.0), int(seq), role or "",
                json.loads(blocks) if blocks else [],
            )
            for seq, kind, ident, text, session, project, at, role, blocks in rows
        ]  # fmt: skip

    async def write_vectors(self, model: str, dimensions: int, items: Sequence[ItemVectors]) -> int:
        items = list(items)

        def run(con: Conn) -> int:
            found = self._model_row(con, model, lock=True)
            if found is None:
                # Two gateways creating one model's table: the second waits, then finds it.
                con.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (model,))
                found = self._model_row(con, model, lock=True) or self._create_model(con, model, dimensions)
            table, dims, storage, watermark = found
            if dims != dimensions:
                raise VectorDimensionError(
                    f"the {model!r} vector index holds {dims}-dimensional vectors, not {dimensions}"
                )
            fresh = [iv for iv in items if iv.item.cursor > watermark]
            # An item forgotten (or gone) since it was read as pending gets no vectors, nor
            # one another store wrote first (its claim ran out and was taken meanwhile).
            ids = list({iv.item.id for iv in fresh})
            alive = {
                r[0]
                for r in con.execute(
                    "SELECT id FROM messages WHERE id = ANY(%s) "
                    "UNION SELECT id FROM distillations WHERE id = ANY(%s)",
                    (ids, ids),
                ).fetchall()
            }
            alive -= {
                r[0]
                for r in con.execute(
                    sql.SQL("SELECT DISTINCT item_id FROM {} WHERE item_id = ANY(%s)").format(
                        sql.Identifier(table)
                    ),
                    (ids,),
                ).fetchall()
            }
            rows = []
            for iv in fresh:
                if iv.item.id not in alive:
                    continue
                for chunk, vector in zip(iv.passage_indexes(), iv.vectors, strict=True):
                    if len(vector) != dimensions:
                        raise VectorDimensionError(
                            f"a vector of {len(vector)} dimensions for the {model!r} index ({dimensions})"
                        )
                    value: Any = _vector_text(vector) if storage == "vector" else [float(x) for x in vector]
                    rows.append(
                        (iv.item.cursor, iv.item.kind, iv.item.id, chunk, iv.item.session_id, iv.item.project,
                         iv.item.created_at, value)
                    )  # fmt: skip
            if rows:
                # COPY: one stream for the batch (the server parses the vectors' text form).
                columns = "seq, kind, item_id, chunk, session_id, project, created_at, embedding"
                copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(table), sql.SQL(columns))
                with con.cursor().copy(copy_sql) as copy:
                    for row in rows:
                        copy.write_row(row)
            if fresh:
                self._advance_watermark(con, model, watermark, [iv.item.cursor for iv in fresh])
            return len(rows)

        return await self._call(run)

    def _advance_watermark(self, con: Conn, model: str, watermark: int, written: list[int]) -> None:
        """Mark the items ``written`` (their seqs) done, then move the watermark over the done
        ranges that follow it, up to the first item still claimed or not claimed at all."""
        con.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"vclaim:{model}",))
        low, high = min(written), max(written)
        # This store's claim over them is done; the part of it past them stays claimed. (A
        # claim another store took over meanwhile stays its own: it is done when it writes.)
        con.execute(
            """UPDATE vector_claims SET first_seq = %(high)s + 1
            WHERE model = %(model)s AND holder = %(holder)s AND NOT done
                AND first_seq <= %(high)s AND last_seq > %(high)s""",
            {"model": model, "holder": self._holder, "high": high},
        )
        con.execute(
            """DELETE FROM vector_claims WHERE model = %(model)s AND holder = %(holder)s AND NOT done
                AND first_seq <= %(high)s AND last_seq >= %(low)s""",
            {"model": model, "holder": self._holder, "low": low, "high": high},
        )
        con.execute(
            """INSERT INTO vector_claims (model, first_seq, last_seq, holder, expires_at, done)
            VALUES (%s, %s, %s, %s, 0, true)
            ON CONFLICT (model, first_seq) DO UPDATE
            SET last_seq = greatest(vector_claims.last_seq, excluded.last_seq), done = true
            WHERE vector_claims.holder = excluded.holder""",
            (model, low, high, self._holder),
        )
        (undone, top) = con.execute(
            """SELECT min(first_seq) FILTER (WHERE NOT done), max(last_seq) FILTER (WHERE done)
            FROM vector_claims WHERE model = %s""",
            (model,),
        ).fetchone() or (None, None)
        if top is None:
            return
        upto = int(top) if undone is None else min(int(top), int(undone) - 1)
        (unclaimed,) = con.execute(
            _UNCLAIMED_SQL, {"after": watermark, "upto": upto, "model": model}
        ).fetchone() or (None,)
        if unclaimed is not None:
            upto = int(unclaimed) - 1
        if upto > watermark:
            con.execute("UPDATE vector_models SET watermark = %s WHERE model = %s", (upto, model))
            con.execute(
                "DELETE FROM vector_claims WHERE model = %s AND done AND last_seq <= %s", (model, upto)
            )

    async def nearest_passages(
        self,
        model: str,
        vector: Sequence[float],
        kinds: Sequence[str] | None = None,
        session_id: str | None = None,
        project: str | None = None,
        limit: int = 10,
    ) -> list[PassageRef]:
        if limit <= 0 or (kinds is not None and not kinds):
            return []

        def run(con: Conn) -> list[tuple[Any, ...]]:
            found = self._model_row(con, model)
            if found is None:
                return []
            table, dims, storage, _ = found
            if len(vector) != dims:
                raise VectorDimensionError(
                    f"a query vector of {len(vector)} dimensions for the {model!r} index ({dims})"
                )
            filters: list[sql.Composable] = []
            params: list[Any] = []
            if kinds is not None:
                filters.append(sql.SQL("kind = ANY(%s)"))
                params.append(list(kinds))
            if session_id is not None:
                filters.append(sql.SQL("session_id = %s"))
                params.append(session_id)
            if project is not None:
                filters.append(sql.SQL("project = %s"))
                params.append(project)
            where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(filters) if filters else sql.SQL("")
            ident = sql.Identifier(table)
            if storage == "vector":
                con.execute(
                    "SELECT set_config('hnsw.ef_search', %s, true)",
                    (str(min(_EF_SEARCH_MAX, max(40, limit))),),
                )
                if project is not None:
                    # Planned with the project's value, so that project's own HNSW index
                    # (a partial one, optimize_vectors) is used when it has one; a plan
                    # cached for any project could only use the shared index.
                    con.execute("SELECT set_config('plan_cache_mode', 'force_custom_plan', true)")
                if filters and _at_least(self._pgvector, (0, 8)):
                    # A selective filter (a session) is planned on its btree index and sorted
                    # exactly; a broader one may go through the HNSW index, where pgvector
                    # >= 0.8 goes on scanning the graph until `limit` rows pass the filter
                    # (before 0.8 only the ef_search candidates were filtered: a result short).
                    con.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
                query = sql.SQL(
                    "SELECT item_id, chunk, 1 - (embedding <=> %s::vector) AS score FROM {}{} "
                    "ORDER BY embedding <=> %s::vector LIMIT %s"
                ).format(ident, where)
                text = _vector_text(vector)
                return con.execute(query, [text, *params, text, limit]).fetchall()
            # Exact: cosine over every row the filters keep, computed by the server.
            query = sql.SQL(
                """SELECT item_id, chunk, score FROM (
                    SELECT item_id, chunk, (SELECT sum(a * b) / nullif(sqrt(sum(a * a) * sum(b * b)), 0)
                        FROM unnest(embedding, %s::real[]) AS pair(a, b)) AS score
                    FROM {}{}) AS scored
                ORDER BY score DESC NULLS LAST, item_id, chunk LIMIT %s"""
            ).format(ident, where)
            return con.execute(query, [[float(x) for x in vector], *params, limit]).fetchall()

        rows = await self._call(run)
        # A passage with facets has several vectors: it counts once, at its best.
        best: dict[tuple[str, int], float] = {}
        for item, chunk, score in rows:
            key = (str(item), int(chunk))
            best[key] = max(best.get(key, -2.0), float(score or 0.0))
        found = sorted(best.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))
        return [PassageRef(item, chunk, score) for (item, chunk), score in found[:limit]]

    async def read_passages(self, refs: Sequence[PassageRef]) -> list[SearchHit]:
        if not refs:
            return []
        last: dict[str, int] = {}
        for ref in refs:
            last[ref.item] = max(ref.passage, last.get(ref.item, 0))
        ids = _ids(list(last))

        def run(con: Conn) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
            messages = con.execute(
                "SELECT id, session_id, project, role, position, created_at, blocks, text FROM messages "
                "WHERE id = ANY(%s)",
                (ids,),
            ).fetchall()
            rest = [i for i in ids if i not in {r[0] for r in messages}]
            distillations = (
                con.execute(
                    "SELECT id, session_id, project, created_at, content FROM distillations "
                    "WHERE id = ANY(%s)",
                    (rest,),
                ).fetchall()
                if rest
                else []
            )
            return messages, distillations

        messages, distillations = await self._call(run)
        items: dict[str, tuple[Any, ...]] = {}
        for r in messages:
            blocks = json.loads(r[6]) if r[6] else []
            items[r[0]] = (*r[:6], message_passages(r[3], blocks, r[7] or "", until=last[r[0]]))
        for r in distillations:
            items[r[0]] = (
                DISTILLATION_PREFIX + r[0],
                r[1],
                r[2],
                DISTILLATION_ROLE,
                0,
                r[3],
                cut_text(r[4] or ""),
            )
        hits = []
        for ref in refs:
            item = items.get(ref.item)
            if item is None or ref.passage >= len(item[6]):
                continue  # an item gone, or cut by other rules
            p = item[6][ref.passage]
            hits.append(
                SearchHit(
                    id=item[0], session_id=item[1], project=item[2] or "", role=item[3], score=ref.score,
                    text=p.text, position=int(item[4] or 0), created_at=float(item[5] or 0.0),
                    passage=p.index, start=p.start, end=p.end, tool=p.tool, source=p.source,
                )
            )  # fmt: skip
        return hits

    async def vector_stats(self, model: str | None = None) -> dict[str, Any]:
        def run(con: Conn) -> dict[str, Any]:
            names = (
                [model]
                if model is not None
                else [r[0] for r in con.execute("SELECT model FROM vector_models ORDER BY model").fetchall()]
            )
            out: dict[str, Any] = {}
            for name in names:
                found = self._model_row(con, name)
                if found is None:
                    stats: dict[str, Any] = {"dimensions": None, "vectors": 0, "watermark": 0, "index": None}
                else:
                    table, dims, storage, watermark = found
                    (count,) = con.execute(
                        sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
                    ).fetchone() or (0,)
                    # pgvector's column before its HNSW index is built is searched exactly.
                    hnsw = storage == "vector" and self._has_index(con, f"{table}_hnsw")
                    (per_project,) = con.execute(
                        "SELECT count(*) FROM pg_indexes WHERE tablename = %s AND indexname LIKE %s",
                        (table, f"{table}_hnsw\\_%"),
                    ).fetchone() or (0,)
                    stats = {
                        "dimensions": dims,
                        "vectors": int(count),
                        "watermark": watermark,
                        "index": "hnsw" if hnsw else "exact",
                        "project_indexes": int(per_project),
                    }
                (pending,) = con.execute(_BEHIND_SQL, {"after": stats["watermark"]}).fetchone() or (0,)
                out[name] = {**stats, "pending": int(pending)}
            return out

        return await self._call(run)

    async def reset_vectors(self, model: str) -> None:
        def run(con: Conn) -> None:
            found = self._model_row(con, model, lock=True)
            if found is not None:
                con.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(found[0])))
                con.execute("DELETE FROM vector_models WHERE model = %s", (model,))
            con.execute("DELETE FROM vector_claims WHERE model = %s", (model,))

        await self._call(run)

    # -- knowledge -------------------------------------------------------------------------
    #
    # knowledge_versions is the base table (death certificates included); "current and
    # alive" is ``is_current AND NOT is_deleted``. Titles compare under the kernel's
    # normalize_title (NFKC, casefold), in Python: the tables are small.

    async def write_knowledge(self, version: KnowledgeVersion) -> bool:
        v = version

        def run(con: Conn) -> bool:
            # Serialises writers of one entry (two gateways editing it): the second waits
            # and then sees the first's version, so exactly one of two equal versions wins.
            con.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("k:" + v.logical_id,))
            if con.execute(
                "SELECT 1 FROM knowledge_versions WHERE version_id = %s", (v.version_id,)
            ).fetchone():
                return False
            (latest,) = con.execute(
                "SELECT max(version) FROM knowledge_versions WHERE logical_id = %s", (v.logical_id,)
            ).fetchone() or (None,)
            expected = int(latest) + 1 if latest is not None else 1
            if v.version != expected:
                # Raised inside the transaction: it is rolled back, nothing is written.
                raise KnowledgeConflict(
                    f"k:{v.logical_id}: version {v.version} does not follow {expected - 1}"
                )
            con.execute(
                "UPDATE knowledge_versions SET is_current = false WHERE logical_id = %s AND is_current",
                (v.logical_id,),
            )
            con.execute(
                f"""INSERT INTO knowledge_versions ({", ".join(_KNOWLEDGE_COLUMNS)})
                VALUES ({", ".join(["%s"] * len(_KNOWLEDGE_COLUMNS))})""",  # type: ignore[arg-type]
                _knowledge_row(v),
            )
            if v.version == 1:
                con.execute(
                    """INSERT INTO knowledge_metrics (logical_id, confidence, last_reinforced_at)
                    VALUES (%s, %s, %s) ON CONFLICT (logical_id) DO NOTHING""",
                    (v.logical_id, INITIAL_CONFIDENCE.get(v.created_by, DEFAULT_CONFIDENCE), v.created_at),
                )
            return True

        return await self._call(run)

    async def knowledge_versions(self, logical_id: str) -> list[KnowledgeVersion]:
        rows = await self._rows(f"{_KNOWLEDGE_SELECT} WHERE logical_id = %s ORDER BY version", (logical_id,))
        return [_knowledge(r) for r in rows]

    async def current_knowledge(
        self, project: str | None = None, *, include_global: bool = True
    ) -> list[KnowledgeVersion]:
        query = f"{_KNOWLEDGE_SELECT} WHERE is_current AND NOT is_deleted"
        params: list[Any] = []
        if project is not None:
            query += " AND ((scope = 'project' AND project = %s) OR (%s AND scope = 'global'))"
            params = [project, include_global]
        rows = await self._rows(query, params)
        return sorted((_knowledge(r) for r in rows), key=canonical_order)

    async def deleted_knowledge(
        self, project: str | None = None, *, include_global: bool = True
    ) -> list[KnowledgeVersion]:
        query = f"{_KNOWLEDGE_SELECT} WHERE is_current AND is_deleted"
        params: list[Any] = []
        if project is not None:
            query += " AND ((scope = 'project' AND project = %s) OR (%s AND scope = 'global'))"
            params = [project, include_global]
        rows = await self._rows(query + " ORDER BY created_at DESC, logical_id", params)
        return [_knowledge(r) for r in rows]

    async def knowledge_tombstone(
        self, project: str, *, logical_id: str | None = None, title: str | None = None
    ) -> KnowledgeVersion | None:
        if logical_id is not None:
            rows = await self._rows(
                f"{_KNOWLEDGE_SELECT} WHERE logical_id = %s AND is_current", (logical_id,)
            )
            if rows:
                # The entry's own state decides: alive (un-deleted) means no tombstone.
                found = _knowledge(rows[0])
                return found if found.is_deleted else None
        if title is not None:
            wanted = normalize_title(title)
            rows = await self._rows(
                f"{_KNOWLEDGE_SELECT} WHERE is_current AND is_deleted "
                "AND (scope = 'global' OR project = %s) ORDER BY created_at, logical_id",
                (project,),
            )
            for row in rows:
                found = _knowledge(row)
                if normalize_title(found.title) == wanted:
                    return found
        return None

    async def knowledge_metrics(self, logical_ids: Sequence[str] | None = None) -> dict[str, KnowledgeMetric]:
        query = "SELECT logical_id, confidence, last_reinforced_at FROM knowledge_metrics"
        params: list[Any] = []
        if logical_ids is not None:
            if not logical_ids:
                return {}
            query += " WHERE logical_id = ANY(%s)"
            params = [_ids(logical_ids)]
        rows = await self._rows(query, params)
        found = {i: KnowledgeMetric(i, float(c), float(at) if at is not None else None) for i, c, at in rows}
        order = sorted(found) if logical_ids is None else logical_ids
        return {i: found[i] for i in order if i in found}

    async def reinforce_knowledge(self, logical_ids: Sequence[str], amount: float, at: float) -> int:
        ids = list(dict.fromkeys(logical_ids))  # one row per id: an upsert may not touch a row twice
        if not ids:
            return 0

        def run(con: Conn) -> int:
            con.execute(
                """INSERT INTO knowledge_metrics (logical_id, confidence, last_reinforced_at)
                SELECT id, least(1.0, %(base)s + %(amount)s), %(at)s FROM unnest(%(ids)s::text[]) AS id
                ON CONFLICT (logical_id) DO UPDATE SET
                  confidence = least(1.0, knowledge_metrics.confidence + %(amount)s),
                  last_reinforced_at = excluded.last_reinforced_at""",
                {"ids": ids, "base": DEFAULT_CONFIDENCE, "amount": amount, "at": at},
            )
            return len(ids)

        return await self._call(run)

    async def set_knowledge_metrics(self, metrics: Sequence[KnowledgeMetric]) -> int:
        rows = [
            (m.logical_id, m.confidence, m.last_reinforced_at)
            for m in {m.logical_id: m for m in metrics}.values()  # an upsert may not touch a row twice
            if "\x00" not in m.logical_id
        ]
        if not rows:
            return 0

        def run(con: Conn) -> int:
            with con.cursor() as cur:
                cur.executemany(
                    """INSERT INTO knowledge_metrics (logical_id, confidence, last_reinforced_at)
                    VALUES (%s, %s, %s)
                    ON CONFLICT (logical_id) DO UPDATE SET confidence = excluded.confidence,
                      last_reinforced_at = excluded.last_reinforced_at""",
                    rows,
                )
            return len(rows)

        return await self._call(run)

    async def decay_knowledge(self, factor: float, not_reinforced_since: float) -> int:
        return await self._call(
            lambda con: (
                con.execute(
                    """UPDATE knowledge_metrics SET confidence = confidence * %s
                WHERE last_reinforced_at IS NULL OR last_reinforced_at < %s""",
                    (factor, not_reinforced_since),
                ).rowcount
            )
        )

    async def record_contradiction(self, judgement: KnowledgeContradiction) -> None:
        c = judgement
        await self._call(
            lambda con: con.execute(
                """INSERT INTO knowledge_contradictions (first_id, second_id, project, status,
                    first_fingerprint, second_fingerprint, judged_at, judged_by, reason, kept_id)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
                ON CONFLICT (first_id, second_id) DO UPDATE SET
                  project = excluded.project, status = excluded.status,
                  first_fingerprint = excluded.first_fingerprint,
                  second_fingerprint = excluded.second_fingerprint,
                  judged_at = excluded.judged_at, judged_by = excluded.judged_by,
                  reason = excluded.reason, kept_id = excluded.kept_id""",
                (
                    c.first_id,
                    c.second_id,
                    c.project,
                    c.status,
                    c.first_fingerprint,
                    c.second_fingerprint,
                    c.judged_at,
                    c.judged_by,
                    c.reason,
                    c.kept_id,
                ),
            )
        )

    async def knowledge_contradictions(
        self, project: str | None = None, *, statuses: Sequence[str] | None = None
    ) -> list[KnowledgeContradiction]:
        query = """SELECT first_id, second_id, project, status, first_fingerprint, second_fingerprint,
            judged_at, judged_by, reason, kept_id FROM knowledge_contradictions WHERE true"""
        params: list[Any] = []
        if project is not None:
            query += " AND project = %s"
            params.append(project)
        if statuses is not None:
            query += " AND status = ANY(%s)"
            params.append(list(statuses))
        rows = await self._rows(query + " ORDER BY judged_at DESC, first_id, second_id", params)
        return [KnowledgeContradiction(*row) for row in rows]

    # -- teams -----------------------------------------------------------------------------

    async def team_binding(self, project: str) -> TeamBinding | None:
        rows = await self._rows(
            "SELECT project, team, bound_at, policy FROM team_bindings WHERE project = %s", (project,)
        )
        return TeamBinding(*rows[0]) if rows else None

    async def set_team_binding(self, project: str, binding: TeamBinding | None) -> None:
        def run(con: Conn) -> None:
            con.execute("DELETE FROM team_bindings WHERE project = %s", (project,))
            if binding is not None:
                con.execute(
                    "INSERT INTO team_bindings (project, team, policy, bound_at) VALUES (%s, %s, %s, %s)",
                    (project, binding.team, binding.policy, binding.bound_at),
                )

        await self._call(run)

    async def team_policy(self, team: str) -> str | None:
        rows = await self._rows("SELECT policy FROM team_policies WHERE team = %s", (team,))
        return str(rows[0][0]) if rows else None

    async def set_team_policy(self, team: str, policy: str) -> None:
        await self._call(
            lambda con: con.execute(
                """INSERT INTO team_policies (team, policy) VALUES (%s, %s)
                ON CONFLICT (team) DO UPDATE SET policy = excluded.policy""",
                (team, policy),
            )
        )

    async def record_decisions(self, decisions: Sequence[KnowledgeDecision]) -> int:
        rows = [
            (d.decision_id, d.logical_id, d.project, d.fingerprint, d.decision, d.decided_by, d.decided_at)
            for d in {d.decision_id: d for d in decisions}.values()
        ]
        if not rows:
            return 0

        def run(con: Conn) -> int:
            new = 0
            for row in rows:
                new += con.execute(
                    """INSERT INTO knowledge_decisions (decision_id, logical_id, project, fingerprint,
                        decision, decided_by, decided_at) VALUES (%s, %s, %s, %s, %s, %s, %s)
                    ON CONFLICT (decision_id) DO NOTHING""",
                    row,
                ).rowcount
            return new

        return await self._call(run)

    async def knowledge_decisions(
        self, project: str | None = None, *, logical_ids: Sequence[str] | None = None
    ) -> list[KnowledgeDecision]:
        query = """SELECT decision_id, logical_id, fingerprint, decision, decided_by, decided_at, project
            FROM knowledge_decisions WHERE true"""
        params: list[Any] = []
        if project is not None:
            query += " AND project = %s"
            params.append(project)
        if logical_ids is not None:
            query += " AND logical_id = ANY(%s)"
            params.append(_ids(logical_ids))
        rows = await self._rows(query + " ORDER BY logical_id, decided_at, decision_id", params)
        return [KnowledgeDecision(*row) for row in rows]

    # -- entities --------------------------------------------------------------------------

    async def write_entities(self, entities: Sequence[Entity]) -> None:
        rows = [_entity_row(e) for e in entities]
        if rows:
            await self._call(lambda con: con.cursor().executemany(_ENTITY_UPSERT, rows))

    async def delete_entities(self, entity_ids: Sequence[str], updated: Sequence[Entity] = ()) -> int:
        ids, rows = sorted(set(_ids(entity_ids))), [_entity_row(e) for e in updated]

        def run(con: Conn) -> int:
            removed = con.execute("DELETE FROM entities WHERE id = ANY(%s)", (ids,)).rowcount if ids else 0
            if rows:
                con.cursor().executemany(_ENTITY_UPSERT, rows)
            return removed

        return await self._call(run)

    async def get_entity(self, entity_id: str) -> Entity | None:
        if "\x00" in entity_id:
            return None
        rows = await self._rows(f"{_ENTITY_SELECT} WHERE id = %s", (entity_id,))
        return _entity(rows[0]) if rows else None

    async def list_entities(
        self, project: str | None = None, *, include_global: bool = True, include_merged: bool = False
    ) -> list[Entity]:
        query = f"{_ENTITY_SELECT} WHERE (%s OR merged_into IS NULL)"
        params: list[Any] = [include_merged]
        if project is not None:
            query += " AND (coalesce(project, '') = %s OR (%s AND coalesce(project, '') = ''))"
            params += [project, include_global]
        rows = await self._rows(query, params)
        return sorted((_entity(r) for r in rows), key=entity_order)

    # -- the event log ---------------------------------------------------------------------

    async def append_events(self, project: str, run: str, events: Sequence[NewEvent], at: float) -> list[int]:
        events = list(events)

        def body(con: Conn) -> list[int]:
            # The run's row is created if missing, then locked: two gateways appending to
            # one run number their events one after the other, never the same seq twice.
            con.execute(
                """INSERT INTO event_runs (project, run, last_seq, covered_seq, created_at, updated_at)
                VALUES (%s, %s, 0, 0, %s, %s) ON CONFLICT (project, run) DO NOTHING""",
                (project, run, at, at),
            )
            (last,) = con.execute(
                "SELECT last_seq FROM event_runs WHERE project = %s AND run = %s FOR UPDATE", (project, run)
            ).fetchone() or (0,)
            seqs = list(range(int(last) + 1, int(last) + 1 + len(events)))
            if events:
                con.cursor().executemany(
                    """INSERT INTO events (project, run, seq, kind, content, working, key, created_at)
                    VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
                    [
                        (project, run, seq, e.kind, _clean(e.content), e.working, e.key, at)
                        for seq, e in zip(seqs, events, strict=True)
                    ],
                )
                con.execute(
                    "UPDATE event_runs SET last_seq = %s, updated_at = %s WHERE project = %s AND run = %s",
                    (seqs[-1], at, project, run),
                )
            return seqs

        return await self._call(body)

    async def run_events(
        self,
        project: str,
        run: str,
        *,
        after_seq: int = 0,
        upto_seq: int | None = None,
        limit: int | None = None,
        newest: bool = False,
    ) -> list[RunEvent]:
        query = """SELECT project, run, seq, kind, content, working, key, created_at FROM events
            WHERE project = %s AND run = %s AND seq > %s"""
        params: list[Any] = [project, run, after_seq]
        if upto_seq is not None:
            query += " AND seq <= %s"
            params.append(upto_seq)
        query += " ORDER BY seq DESC" if newest else " ORDER BY seq"
        if limit is not None:
            query += " LIMIT %s"
            params.append(max(0, limit))
        rows = await self._rows(query, params)
        found = [RunEvent(*row) for row in rows]
        return found[::-1] if newest else found

    async def run_state(self, project: str, run: str) -> RunState | None:
        rows = await self._rows(
            """SELECT project, run, last_seq, covered_seq, created_at, updated_at FROM event_runs
            WHERE project = %s AND run = %s""",
            (project, run),
        )
        return RunState(*rows[0]) if rows else None

    async def advance_run(
        self, project: str, run: str, covered_seq: int, snapshot: WorkingSnapshot | None, at: float
    ) -> None:
        def body(con: Conn) -> None:
            row = con.execute(
                "SELECT last_seq, covered_seq FROM event_runs WHERE project = %s AND run = %s FOR UPDATE",
                (project, run),
            ).fetchone()
            if row is None or covered_seq <= int(row[1]):
                return
            con.execute(
                "UPDATE event_runs SET covered_seq = %s, updated_at = %s WHERE project = %s AND run = %s",
                (min(covered_seq, int(row[0])), at, project, run),
            )
            if snapshot is not None:
                facts = json.dumps(
                    [
                        {"key": f.key, "content": f.content, "seq": f.seq, "kind": f.kind}
                        for f in snapshot.facts
                    ]
                )
                con.execute(
                    """INSERT INTO event_working (project, run, as_of_seq, facts, taken_at)
                    VALUES (%s, %s, %s, %s, %s) ON CONFLICT (project, run) DO UPDATE SET
                    as_of_seq = excluded.as_of_seq, facts = excluded.facts, taken_at = excluded.taken_at""",
                    (project, run, snapshot.as_of_seq, facts, snapshot.taken_at),
                )

        await self._call(body)

    async def working_snapshot(self, project: str, run: str) -> WorkingSnapshot | None:
        rows = await self._rows(
            "SELECT as_of_seq, facts, taken_at FROM event_working WHERE project = %s AND run = %s",
            (project, run),
        )
        if not rows:
            return None
        as_of, facts, taken_at = rows[0]
        return WorkingSnapshot(
            int(as_of), tuple(WorkingFact(**f) for f in json.loads(facts)), float(taken_at)
        )

    async def list_runs(self, project: str | None = None, limit: int = 100) -> list[RunState]:
        where, params = ("WHERE project = %s", [project]) if project is not None else ("", [])
        rows = await self._rows(
            f"""SELECT project, run, last_seq, covered_seq, created_at, updated_at FROM event_runs {where}
            ORDER BY updated_at DESC, project, run LIMIT %s""",
            [*params, max(0, limit)],
        )
        return [RunState(*row) for row in rows]

    async def runs_behind(self, limit: int = 1_000) -> list[RunState]:
        rows = await self._rows(
            """SELECT project, run, last_seq, covered_seq, created_at, updated_at FROM event_runs
            WHERE last_seq > covered_seq ORDER BY updated_at, project, run LIMIT %s""",
            (limit,),
        )
        return [RunState(*row) for row in rows]

    # -- leases --------------------------------------------------------------------------------

    async def claim_lease(self, key: str, holder: str, seconds: float) -> bool:
        # The server's clock: gateways on several machines agree on when a lease expires.
        def run(con: Conn) -> bool:
            row = con.execute(
                """INSERT INTO leases AS l (key, holder, expires_at)
                VALUES (%(key)s, %(holder)s, extract(epoch FROM clock_timestamp()) + %(seconds)s)
                ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
                WHERE l.holder = excluded.holder OR l.expires_at <= extract(epoch FROM clock_timestamp())
                RETURNING holder""",
                {"key": key, "holder": holder, "seconds": seconds},
            ).fetchone()
            return row is not None

        return await self._call(run)

    async def release_lease(self, key: str, holder: str) -> None:
        await self._call(
            lambda con: con.execute("DELETE FROM leases WHERE key = %s AND holder = %s", (key, holder))
        )

    # -- copying a whole store ---------------------------------------------------------------

    async def inventory(self) -> StoreInventory:
        def run(con: Conn) -> StoreInventory:
            def column(query: str) -> tuple[str, ...]:
                return tuple(str(r[0]) for r in con.execute(query).fetchall())  # type: ignore[arg-type]

            runs = con.execute("SELECT project, run FROM event_runs ORDER BY 1, 2").fetchall()
            return StoreInventory(
                state_sessions=column("SELECT DISTINCT session_id FROM session_state ORDER BY 1"),
                runs=tuple((str(p), str(r)) for p, r in runs),
                bound_projects=column("SELECT project FROM team_bindings ORDER BY 1"),
                policy_teams=column("SELECT team FROM team_policies ORDER BY 1"),
            )

        return await self._call(run)

    # -- status ------------------------------------------------------------------------------

    async def stats(self) -> dict[str, Any]:
        def run(con: Conn) -> dict[str, Any]:
            row = con.execute(
                """SELECT (SELECT count(*) FROM projects), (SELECT count(*) FROM sessions),
                    (SELECT count(*) FROM messages), (SELECT count(*) FROM distillations),
                    (SELECT count(*) FROM knowledge_versions WHERE is_current AND NOT is_deleted),
                    (SELECT count(*) FROM entities WHERE merged_into IS NULL),
                    (SELECT count(*) FROM passages),
                    (SELECT value FROM lore_meta WHERE key = 'schema_version'),
                    pg_database_size(current_database())"""
            ).fetchone()
            assert row is not None
            projects, sessions, messages, distillations, knowledge, entities, passages, version, size = row
            return {
                "backend": self.name,
                "path": self.location,
                "size_bytes": int(size),
                "schema_version": int(version or 0),
                "projects": int(projects),
                "sessions": int(sessions),
                "messages": int(messages),
                "distillations": int(distillations),
                "knowledge": int(knowledge),
                "entities": int(entities),
                "index": {
                    "ok": True,
                    "passages": int(passages),
                    "kind": f"tsvector ({self._config}), GIN, BM25",
                },
                "server_version": self._server_version,
                "pgvector": self._pgvector,
            }

        out = await self._call(run)
        out["vectors"] = await self.vector_stats()
        return out


# ---------------------------------------------------------------------------------------------
# Row conversion
# ---------------------------------------------------------------------------------------------


def _at_least(version: str | None, wanted: tuple[int, ...]) -> bool:
    if not version:
        return False
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[: len(wanted)])
    return parts >= wanted


def _project_index(table: str, project: str) -> str:
    """The name of ``table``'s HNSW index over one project's rows (at most 61 characters)."""
    return f"{table}_hnsw_{hashlib.sha256(project.encode()).hexdigest()[:10]}"


def _vector_text(vector: Sequence[float]) -> str:
    """pgvector's text form, ``[x,y,...]`` (repr keeps every digit of a float)."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _message(row: tuple[Any, ...]) -> StoredMessage:
    r = dict(zip(_MESSAGE_COLUMNS, row, strict=True))
    r["blocks"] = json.loads(r["blocks"]) if r["blocks"] else []
    r["usage"] = json.loads(r["usage"]) if r["usage"] else None
    r["text"] = r["text"] or ""
    r["complete"] = bool(r["complete"])
    return StoredMessage(**r)


def _distillation_row(d: StoredDistillation) -> tuple[Any, ...]:
    return (
        d.id, d.session_id, d.project, d.generation, _clean(d.text), json.dumps(d.source_ids), d.start, d.end,
        d.method, d.source_tokens, d.input_tokens, d.output_tokens, d.compression_ratio, d.archived,
        d.worker_provider, d.worker_model, d.created_at,
    )  # fmt: skip


def _distillation(row: tuple[Any, ...]) -> StoredDistillation:
    r = dict(zip(_DISTILLATION_COLUMNS, row, strict=True))
    return StoredDistillation(
        id=r["id"],
        session_id=r["session_id"],
        project=r["project"] or "",
        generation=int(r["generation"]),
        text=r["content"],
        source_ids=json.loads(r["source_ids"] or "[]"),
        start=float(r["start_at"]),
        end=float(r["end_at"]),
        method=r["method"],
        source_tokens=int(r["source_tokens"]),
        input_tokens=int(r["input_tokens"]),
        output_tokens=int(r["output_tokens"]),
        compression_ratio=float(r["compression_ratio"]),
        archived=bool(r["archived"]),
        worker_provider=r["worker_provider"],
        worker_model=r["worker_model"],
        created_at=float(r["created_at"]),
    )


def _knowledge_row(v: KnowledgeVersion) -> tuple[Any, ...]:
    return (
        v.version_id, v.logical_id, v.version,
        True,  # the written version becomes current; write_knowledge clears the previous one
        v.is_deleted, v.category, _clean(v.title), _clean(v.content), v.scope, v.project, v.sensitivity,
        v.created_by, v.updated_by, v.source_session, v.source_ref, v.worker_provider, v.worker_model,
        v.created_at,
    )  # fmt: skip


def _knowledge(row: tuple[Any, ...]) -> KnowledgeVersion:
    r = dict(zip(_KNOWLEDGE_COLUMNS, row, strict=True))
    created_by = r["created_by"] or AUTHOR_USER
    return KnowledgeVersion(
        version_id=r["version_id"],
        logical_id=r["logical_id"],
        version=int(r["version"]),
        category=r["category"],
        title=r["title"],
        content=r["content"],
        scope=r["scope"],
        project=r["project"] or "",
        sensitivity=r["sensitivity"],
        is_deleted=bool(r["is_deleted"]),
        created_at=float(r["created_at"]),
        created_by=created_by,
        updated_by=r["updated_by"] or created_by,
        source_session=r["source_session"],
        source_ref=r["source_ref"],
        worker_provider=r["worker_provider"],
        worker_model=r["worker_model"],
        is_current=bool(r["is_current"]),
    )


def _entity_row(e: Entity) -> tuple[Any, ...]:
    return (
        e.id, e.kind, _clean(e.name), json.dumps(e.aliases, ensure_ascii=False),
        json.dumps(relations_json(e.relations), ensure_ascii=False), e.project, e.sensitivity, e.created_at,
        e.updated_at, e.created_by, e.updated_by, e.merged_into,
    )  # fmt: skip


def _entity(row: tuple[Any, ...]) -> Entity:
    r = dict(zip(_ENTITY_COLUMNS, row, strict=True))
    created_by = r["created_by"] or AUTHOR_USER
    return Entity(
        id=r["id"],
        kind=r["kind"],
        name=r["canonical_name"],
        aliases=aliases_from_json(json.loads(r["aliases"] or "[]")),
        relations=relations_from_json(json.loads(r["relations"] or "[]")),
        project=r["project"] or "",
        sensitivity=r["sensitivity"] or "normal",
        created_at=float(r["created_at"]),
        updated_at=float(r["updated_at"]),
        created_by=created_by,
        updated_by=r["updated_by"] or created_by,
        merged_into=r["merged_into"],
    )


def _session(row: tuple[Any, ...]) -> Session:
    return Session(
        id=row[0],
        project=row[1] or "",
        harness=row[2] or "",
        model=row[3],
        created_at=row[4],
        updated_at=row[5],
        title=row[6] or "",
        message_count=int(row[7]),
        branch_count=int(row[8]),
    )


__all__ = ["SCHEMA_VERSION", "PostgresStore"]
