"""The amnesia cache (lore_core.storage.amnesia) stays bounded without forgetting a range."""

from __future__ import annotations

import asyncio

import pytest

import lore_core.storage.amnesia as amnesia_module
from lore_core.builtin.memory_store import MemoryStore
from lore_core.storage.amnesia import Amnesia


def test_sessions_without_ranges_are_cached_up_to_the_bound_and_ranges_never_drop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(amnesia_module, "MAX_CACHED_SESSIONS", 5)

    async def run() -> tuple[Amnesia, MemoryStore]:
        store = MemoryStore()
        await store.open()
        amnesia = Amnesia(store)
        await amnesia.load("quiet")
        assert await amnesia.turn_on("quiet", 4)
        for n in range(50):
            await amnesia.load(f"s{n}")
        return amnesia, store

    amnesia, _store = asyncio.run(run())
    assert len(amnesia._ranges) == 6  # five sessions without ranges, and the one with
    assert amnesia.is_on("quiet") and amnesia.ranges("quiet") == [(4, None)]
    assert amnesia.ranges("s0") == []  # forgotten: read again on its next request
