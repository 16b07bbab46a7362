"""The full-text index holds passages and is rebuilt from DuckDB when the passage rules it
was cut by are not the kernel's (an upgrade), or when it has an older layout."""

from __future__ import annotations

import asyncio
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from lore_store_duckdb.store import DuckDBStore

from lore_core.storage.passages import FULLTEXT_RULES
from lore_core.testing.builders import batch_of, exchange, text, tool_call, tool_result


def _write(db: Path) -> None:
    async def go() -> None:
        store = DuckDBStore(db)
        await store.open()
        try:
            call = tool_call("Bash", "c1", {"command": "make lint"})
            output = tool_result(
                "c1", "\n".join(f"line {i} of the lint run" for i in range(200)) + "\nheron.go:1:1: bad (vet)"
            )
            await store.write(batch_of(exchange([text("user", "lint it"), call, output], session="s-h")))
            assert await store.search("heron")  # indexed (and the index created)
        finally:
            await store.close()

    asyncio.run(go())


def _search(db: Path, query: str) -> tuple[list, int, list[tuple[int, int]]]:
    async def go() -> tuple[list, int, list[tuple[int, int]]]:
        store = DuckDBStore(db)
        await store.open()
        seen: list[tuple[int, int]] = []
        try:
            indexed = await store.sync_search_index(lambda done, total: seen.append((done, total)))
            return await store.search(query), indexed, seen
        finally:
            await store.close()

    return asyncio.run(go())


def test_an_index_cut_by_other_rules_is_rebuilt_with_progress(tmp_path: Path) -> None:
    db = tmp_path / "lore.duckdb"
    _write(db)
    con = duckdb.connect(str(db))
    con.execute("UPDATE lore_meta SET value = 'p0' WHERE key = 'fts_rules'")
    con.close()
    hits, indexed, seen = _search(db, "heron")
    assert indexed == 3  # every stored message cut again
    assert seen[0] == (0, 3) and seen[-1] == (3, 3)
    assert len(hits) == 1 and hits[0].text.startswith("[tool Bash: make lint]") and hits[0].passage
    con = duckdb.connect(str(db))
    assert con.execute("SELECT value FROM lore_meta WHERE key = 'fts_rules'").fetchone() == (FULLTEXT_RULES,)
    con.close()
    # Current rules: nothing to do the next time.
    assert _search(db, "heron")[1] == 0


@pytest.mark.parametrize(
    ("name", "old_table"),
    [
        # Before passages: a table of whole messages.
        ("messages", pa.table({"seq": [1], "id": ["old"], "text": ["heron whole message"]})),
        # Passages with a column per field, before they were packed into ``hit``.
        (
            "passages",
            pa.table(
                {
                    "seq": [1],
                    "id": ["old:0"],
                    "item_id": ["old"],
                    "passage": [0],
                    "start": [0],
                    "end": [19],
                    "session_id": ["s-h"],
                    "project": [""],
                    "role": ["user"],
                    "tool": [None],
                    "source": [None],
                    "position": [0],
                    "created_at": [0.0],
                    "text": ["heron old passage"],
                }
            ),
        ),
    ],
    ids=["messages", "passages"],
)
def test_an_index_of_an_older_layout_is_replaced(tmp_path: Path, name: str, old_table: pa.Table) -> None:
    db = tmp_path / "lore.duckdb"
    _write(db)
    import lancedb

    index = lancedb.connect(str(tmp_path / "lore.duckdb.fts"))
    index.drop_table("passage_hits")
    index.create_table(name, old_table)
    hits, indexed, _ = _search(db, "heron")
    assert indexed == 3 and [h.passage is not None for h in hits] == [True]
    assert hits[0].id != "old" and hits[0].session_id == "s-h" and hits[0].role == "user"
    assert lancedb.connect(str(tmp_path / "lore.duckdb.fts")).list_tables().tables == ["passage_hits"]


def test_closing_does_not_wait_for_a_merge_in_progress(tmp_path: Path, monkeypatch) -> None:
    """A merge of a large index runs for minutes and cannot be interrupted: the store closes
    (and the gateway stops) without it; the merge is redone after the next start."""
    import threading

    import lore_store_duckdb.fulltext as store_module

    entered, release = threading.Event(), threading.Event()

    def slow_merge(self) -> None:
        entered.set()
        release.wait(60)

    monkeypatch.setattr(store_module.FullTextIndex, "optimize_due", lambda self: True)
    monkeypatch.setattr(store_module.FullTextIndex, "optimize", slow_merge)
    monkeypatch.setattr(store_module, "FTS_STOP_WAIT_SECONDS", 0.2)

    timer = threading.Timer(30, release.set)
    timer.daemon = True

    async def go() -> None:
        store = DuckDBStore(tmp_path / "lore.duckdb")
        await store.open()
        turn = [text("user", "merge me"), text("assistant", "ok")]
        await store.write(batch_of(exchange(turn, session="s-m")))
        assert await asyncio.to_thread(entered.wait, 30)  # the index thread is merging
        # Released 30 s from now: a close that waited for the merge would return after it.
        timer.start()
        await store.close()
        assert not release.is_set()

    try:
        asyncio.run(go())
    finally:
        timer.cancel()
        release.set()
    # Nothing was lost: the next start finds the message (and redoes what was not merged).
    assert [h.id for h in _search(tmp_path / "lore.duckdb", "merge")[0]]


def test_health_reports_the_index_caches_within_their_bounds(tmp_path: Path) -> None:
    from lore_store_duckdb import lance

    async def go() -> dict:
        store = DuckDBStore(tmp_path / "lore.duckdb")
        await store.open()
        try:
            said = [text("user", "where is the heron"), text("assistant", "ok")]
            await store.write(batch_of(exchange(said)))
            assert await store.search("heron")  # the index is open, so is the shared session
            return store.health()
        finally:
            await store.close()

    cache = asyncio.run(go())["index_cache"]
    assert set(cache) == {"mib", "entries"} and cache["entries"] >= 0
    assert 0 <= cache["mib"] <= (lance.INDEX_CACHE_BYTES + lance.METADATA_CACHE_BYTES) / 2**20


def test_a_project_search_finds_that_project_only_whatever_the_list_of_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project is filtered as "none of the other projects" (see MAX_EXCLUDED_PROJECTS): the
    hits must be those of ``project = ...`` also for a project that arrives after the list
    was made, a list that misses one, and too many projects to list."""

    def session_of(project: str, n: int) -> object:
        words = [text("user", f"heron sighting {i} in {project}") for i in range(n)]
        return exchange(words, session=f"s-{project.strip('/')}", project=project)

    async def go() -> None:
        store = DuckDBStore(tmp_path / "lore.duckdb")
        await store.open()
        try:
            await store.write(batch_of(session_of("/p/a", 3), session_of("/p/b", 5)))

            async def projects_of(project: str) -> list[str]:
                hits = await store.search("heron", project=project, limit=20)
                return sorted({h.project for h in hits}) if hits else []

            assert await projects_of("/p/a") == ["/p/a"]
            assert len(await store.search("heron", project="/p/a", limit=20)) == 3
            # A project written after the list was made joins it.
            await store.write(batch_of(session_of("/p/c", 4)))
            assert await projects_of("/p/a") == ["/p/a"]
            assert len(await store.search("heron", project="/p/c", limit=20)) == 4
            index = store._index
            assert index is not None and index._projects == {"/p/a", "/p/b", "/p/c"}
            # A list missing a project (its rows in the table): the hits are checked, the
            # search made again with "=", and the project listed from then on.
            index._projects = {"/p/a", "/p/b"}
            hits = await store.search("heron", project="/p/a", limit=20)
            assert len(hits) == 3 and {h.project for h in hits} == {"/p/a"}
            assert index._projects == {"/p/a", "/p/b", "/p/c"}
            # Too many projects to list: "=".
            monkeypatch.setattr("lore_store_duckdb.fulltext.MAX_EXCLUDED_PROJECTS", 1)
            assert index._other_projects("/p/a") is None
            hits = await store.search("heron", project="/p/b", limit=20)
            assert len(hits) == 5 and {h.project for h in hits} == {"/p/b"}
            # The session filter is unchanged, and a project nobody wrote finds nothing.
            assert len(await store.search("heron", session_id="s-p/c", limit=20)) == 4
            assert await store.search("heron", project="/p/none", limit=20) == []
        finally:
            await store.close()

    asyncio.run(go())
