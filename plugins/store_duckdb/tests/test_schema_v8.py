"""A database of schema version 7 migrates to version 8 (a summary row per session, kept by
every write, so listing sessions reads no message): the summary is filled from the messages
already stored, with the same counts as counting them over the messages table, and later
writes carry it on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import attrs
import duckdb
from lore_store_duckdb import schema
from lore_store_duckdb.store import DuckDBStore

from lore_core.storage.convert import records_from_exchange
from lore_core.testing.builders import answer, batch_of, exchange, text

# What list_sessions computed before version 8: the counts over the messages table.
COUNTED = """
    WITH parents AS (SELECT DISTINCT session_id, parent_id FROM messages WHERE parent_id IS NOT NULL)
    SELECT m.session_id, count(*), count(*) FILTER (WHERE q.parent_id IS NULL)
    FROM messages m LEFT JOIN parents q ON q.session_id = m.session_id AND q.parent_id = m.id
    GROUP BY m.session_id ORDER BY m.session_id
"""


def test_version_7_database_gets_its_session_summary(tmp_path: Path) -> None:
    db = tmp_path / "lore.duckdb"
    base = [text("user", "q1"), text("assistant", "a1")]
    straight = exchange([*base, text("user", "q2")], answer("a2"), session="straight", at=100.0)
    forked = exchange([*base, text("user", "other q2")], answer("b2"), session="straight", at=200.0)
    orphan = exchange(
        [text("user", "x1"), text("assistant", "y1"), text("user", "x2")], session="gap", at=300.0
    )
    gap = batch_of(orphan)

    async def write_with_version_7() -> None:
        store = DuckDBStore(db)
        await store.open()
        try:
            await store.write(batch_of(straight))
            await store.write(batch_of(forked))
            # A session stored with a hole: its first message never was (as /lore:amnesia leaves it).
            await store.write(attrs.evolve(gap, messages=gap.messages[1:]))
        finally:
            await store.close()

    asyncio.run(write_with_version_7())
    # As the version-7 plugin left the file: no summary table (nor what later versions added),
    # version 7.
    con = duckdb.connect(str(db))
    expected = con.execute(COUNTED).fetchall()
    con.execute("DROP TABLE session_summary")
    con.execute("ALTER TABLE messages DROP COLUMN context_layer")
    con.execute("UPDATE lore_meta SET value = '7' WHERE key = 'schema_version'")
    con.close()
    assert expected == [("gap", 2, 1), ("straight", 6, 2)]

    async def use_version_8() -> None:
        store = DuckDBStore(db)
        await store.open()
        try:
            assert (await store.stats())["schema_version"] == schema.SCHEMA_VERSION
            listed = {s.id: (s.message_count, s.branch_count) for s in await store.list_sessions()}
            assert listed == {sid: (n, leaves) for sid, n, leaves in expected}
            # Writes after the migration carry the migrated rows on: the missing first
            # message arrives (the hole closes: still one leaf), and a new turn.
            await store.write(gap)
            more = exchange(
                [*base, text("user", "q2"), text("assistant", "a2"), text("user", "q3")], answer("a3")
            )
            more.session_id = "straight"
            await store.write(batch_of(more))
            for sid in ("gap", "straight"):
                found = await store.get_session(sid)
                assert found is not None
                assert (found.message_count, found.branch_count) == {"gap": (3, 1), "straight": (8, 2)}[sid]
        finally:
            await store.close()

    asyncio.run(use_version_8())
    con = duckdb.connect(str(db))
    recounted = con.execute(COUNTED).fetchall()
    summary = con.execute(
        "SELECT session_id, message_count, branch_count FROM session_summary ORDER BY session_id"
    ).fetchall()
    con.close()
    assert summary == recounted  # the kept summary is what counting would say


def test_records_of_an_exchange_name_their_parents() -> None:
    """What the summary relies on: a message names its parent by id, and a resent history
    has the same ids (stored once)."""
    first = records_from_exchange(exchange([text("user", "q1")], answer("a1")))
    again = records_from_exchange(exchange([text("user", "q1"), text("assistant", "a1"), text("user", "q2")]))
    assert [m.id for m in again.messages[:2]] == [m.id for m in first.messages]
    assert again.messages[2].parent_id == first.messages[1].id
