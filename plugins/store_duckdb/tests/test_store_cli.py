"""``lore store migrate`` and ``lore store copy`` on real DuckDB files, through real ``lore``
processes: versions reported, every tier copied DuckDB -> DuckDB through the Store protocol
and counted on both sides, a non-empty destination refused, a second copy adding nothing,
bad input answered in one line."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from lore_store_duckdb import schema
from lore_store_duckdb.store import DuckDBStore

from lore_core.testing.copying import fill_every_tier, picture
from lore_core.testing.net import free_port


def lore(tmp_path: Path, db: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / ".lore.json"
    config.write_text(json.dumps({"store": {"path": str(db)}, "server": {"port": free_port()}}))
    env = {k: v for k, v in os.environ.items() if k not in ("LORE_DB_PATH", "LORE_STORE")}
    env["LORE_CONFIG"] = str(config)
    return subprocess.run(
        [sys.executable, "-m", "lore_core.cli", *argv], capture_output=True, text=True, env=env, timeout=300
    )


def filled(path: Path) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        store = DuckDBStore(path)
        await store.open()
        try:
            await fill_every_tier(store)
            return await picture(store)
        finally:
            await store.close()

    return asyncio.run(main())


def read(path: Path) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        store = DuckDBStore(path)
        await store.open()
        try:
            assert await store.search("deploy billing"), "the copy's full-text index finds nothing"
            return await picture(store)
        finally:
            await store.close()

    return asyncio.run(main())


def test_migrate_reports_what_it_applied(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE lore_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)")
    for statements in schema.MIGRATIONS[:5]:
        for statement in statements:
            con.execute(statement)
    con.execute("INSERT INTO lore_meta VALUES ('schema_version', '5')")
    con.close()

    done = lore(tmp_path, db, "store", "migrate", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    latest = schema.SCHEMA_VERSION
    assert report == {
        "backend": "duckdb",
        "location": str(db),
        "versioned": True,
        "before": 5,
        "after": latest,
        "applied": list(range(6, latest + 1)),
    }
    again = lore(tmp_path, db, "store", "migrate")
    assert again.returncode == 0 and f"is up to date: schema version {latest}" in again.stdout
    new = lore(tmp_path, tmp_path / "new.duckdb", "store", "migrate")
    assert new.returncode == 0 and f"was new: schema made at version {latest}" in new.stdout


# Slow: four lore processes and two stores filled with every tier (the copy itself is checked in
# process by tests/test_store_copy.py and by every store's conformance round trip).
@pytest.mark.slow
def test_copy_duckdb_to_duckdb_every_tier_counted_and_idempotent(tmp_path: Path) -> None:
    source, target = tmp_path / "source.duckdb", tmp_path / "copy" / "target.duckdb"
    target.parent.mkdir()
    expected = filled(source)

    done = lore(tmp_path, source, "store", "copy", "--to", f"duckdb:{target}", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and not report["failures"]
    tiers = {t["tier"]: t for t in report["tiers"]}
    assert all(t["source"] == t["destination"] and t["ok"] for t in tiers.values())
    assert tiers["messages"]["source"] == len(expected["messages"]) > 0
    assert tiers["events"]["source"] == 4 and tiers["knowledge versions"]["source"] == 6
    assert "copying messages" in done.stderr  # the progress display
    assert read(target) == expected

    # Into a store that holds data: refused unless --merge; then nothing is added.
    refused = lore(tmp_path, source, "store", "copy", "--to", str(target))
    assert refused.returncode == 2 and "--merge" in refused.stderr and "Traceback" not in refused.stderr
    merged = lore(tmp_path, source, "store", "copy", "--from", str(source), "--to", str(target), "--merge")
    assert merged.returncode == 0, merged.stderr
    assert "MISMATCH" not in merged.stdout and "messages" in merged.stdout
    again = json.loads(
        lore(tmp_path, source, "store", "copy", "--to", str(target), "--merge", "--json").stdout
    )
    written = {t["tier"]: t["written"] for t in again["tiers"]}
    assert written["messages"] == written["distillations"] == written["events"] == 0
    assert read(target) == expected


@pytest.mark.slow  # five lore processes; test_migrate_reports_what_it_applied keeps the command line fast
def test_copy_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "lore.duckdb"
    cases = {
        ("--from", str(tmp_path / "missing.duckdb"), "--to", str(tmp_path / "x.duckdb")): "no such file",
        ("--to", "nonsense"): "names no store",
        ("--to", "duckdb:"): "no location",
        ("--to", str(db)): "the same store",
        ("--to", str(tmp_path / "nope.json")): "no such configuration file",
    }
    for argv, said in cases.items():
        done = lore(tmp_path, db, "store", "copy", *argv)
        assert done.returncode == 2, (argv, done.stderr)
        assert said in done.stderr and "Traceback" not in done.stderr, (argv, done.stderr)
    assert not (tmp_path / "missing.duckdb").exists()
