"""``lore store copy``'s kernel side (lore_core.storage.copy, lore_core.cli.store) on the
in-memory store: the count check catches a destination that lost something, a store
without a tier says so instead of failing, and store names on the command line resolve
as docs/storage.md says. The real copies (DuckDB -> DuckDB, DuckDB -> PostgreSQL) are in
the store plugins' tests; every store proves the round trip in the conformance suite."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.cli.store import StoreSpecError, store_config
from lore_core.config import LoreConfig
from lore_core.plugins import Factory
from lore_core.storage.copy import copy_store, tier_lines
from lore_core.storage.records import WriteBatch
from lore_core.testing.copying import fill_every_tier


class LosingStore(MemoryStore):
    """Drops every message of one session: what a broken destination would do."""

    async def write(self, batch: WriteBatch) -> int:
        kept = [m for m in batch.messages if m.session_id != "copy-s1"]
        return await super().write(attrs.evolve(batch, messages=kept))


class MessagesOnly(MemoryStore):
    """The memory store declaring none of the optional tiers."""

    name = "messages-only"
    tiers = frozenset()


def copy(source: MemoryStore, destination: MemoryStore) -> list[str]:
    async def main() -> list[str]:
        await source.open()
        await destination.open()
        await fill_every_tier(source)
        report = await copy_store(source, destination)
        return [*tier_lines(report), f"ok={report.ok}"]

    return asyncio.run(main())


def test_a_destination_that_lost_messages_fails_the_count_check() -> None:
    lines = copy(MemoryStore(), LosingStore())
    assert lines[-1] == "ok=False"
    assert [line.split()[0] for line in lines if "MISMATCH" in line] == ["messages"]


def test_a_tier_the_destination_lacks_is_reported_not_copied() -> None:
    lines = copy(MemoryStore(), MessagesOnly())
    assert lines[-1] == "ok=True"
    skipped = {line.split("  ")[0]: line.split("not copied: ")[1] for line in lines if "not copied" in line}
    assert skipped == {
        "distillations": "the messages-only store has no distillations",
        **dict.fromkeys(
            ["knowledge entries", "knowledge versions", "contradictions", "team bindings", "team policies"],
            "the messages-only store has no knowledge",
        ),
        "decisions": "the messages-only store has no knowledge",
        "entities": "the messages-only store has no entities",
        "event runs": "the messages-only store has no event log",
        "events": "the messages-only store has no event log",
    }
    copied = [line.split()[0] for line in lines[1:-1] if "not copied" not in line]
    assert copied == ["projects", "sessions", "messages", "session"]  # "session state"


def test_store_names_on_the_command_line() -> None:
    config = LoreConfig()
    config.store.path = "/data/lore.duckdb"
    stores = {name: Factory(name, MemoryStore) for name in ("duckdb", "postgres", "memory")}

    def resolve(spec: str | None) -> tuple[str, str, bool]:
        found, must_exist = store_config(spec, config, stores, {})  # type: ignore[arg-type]
        return found.store.backend, found.store.path, must_exist

    assert resolve(None) == ("", "/data/lore.duckdb", False)
    assert resolve("duckdb") == ("", "/data/lore.duckdb", False)  # the configured store
    assert resolve("postgres") == ("postgres", "", False)
    assert resolve("postgresql://lore@db/lore") == ("postgres", "postgresql://lore@db/lore", False)
    assert resolve("postgres:host=db dbname=lore") == ("postgres", "host=db dbname=lore", False)
    assert resolve("duckdb:/backup/lore.duckdb") == ("duckdb", "/backup/lore.duckdb", True)
    assert resolve("./old/lore.duckdb") == ("duckdb", str(Path("old/lore.duckdb").absolute()), True)
    bad: Sequence[tuple[str, str]] = [
        ("", "empty"),
        ("duckdb:", "no location"),
        ("nonsense", "names no store"),
        ("missing.json", "no such configuration file"),
    ]
    for spec, said in bad:
        with pytest.raises(StoreSpecError, match=said):
            resolve(spec)
