"""Knowledge on a shared store (``Store.shared``): an entry another gateway wrote reaches this
gateway's next new session at once and a session under way within MARK_REFRESH_SECONDS;
on a store one gateway holds, no mark is written or read."""

from __future__ import annotations

import asyncio

from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import LoreConfig
from lore_core.knowledge.book import KnowledgeBook
from lore_core.knowledge.inject import KnowledgeInjector
from lore_core.knowledge.shared import MARK_KEY, MARK_REFRESH_SECONDS
from lore_core.testing.builders import CallCount


class SharedMemoryStore(MemoryStore):
    shared = True


def words(text: str) -> int:
    return len(text.split())


async def inject(injector: KnowledgeInjector, session: str) -> str:
    found = injector.cached(session, "/p", message_ids=["m1"], thread="t")
    if found is None:
        found = await injector.for_request(
            session, "/p", opening_text="deploy", message_ids=["m1"], thread="t", main=True
        )
    return found.baseline + found.context + "".join(str(m) for _, m in found.deltas)


def test_another_gateways_entry_reaches_new_and_running_sessions() -> None:
    async def main() -> None:
        store = SharedMemoryStore()
        await store.open()
        now = [1000.0]
        # Two gateways: each its own book and injector, one store.
        book_a = KnowledgeBook(store)
        injector_b = KnowledgeInjector(
            KnowledgeBook(store), LoreConfig().knowledge, words, clock=lambda: now[0]
        )
        assert "make ship" not in await inject(injector_b, "s-before")
        await book_a.create(
            project="/p", category="gotcha", title="Deploy with make ship", content="make ship."
        )
        assert "make ship" in await inject(injector_b, "s-after")  # a new session: at once
        # A session under way sees an edit from the other gateway once the refresh is due.
        await book_a.create(project="/p", category="gotcha", title="Tabs in Makefiles", content="tabs.")
        assert "Tabs in Makefiles" not in await inject(injector_b, "s-before")
        now[0] += MARK_REFRESH_SECONDS
        assert "Tabs in Makefiles" in await inject(injector_b, "s-before")

    asyncio.run(main())


def test_a_store_one_gateway_holds_has_no_mark() -> None:
    async def main() -> None:
        store = MemoryStore()
        await store.open()
        injector = KnowledgeInjector(KnowledgeBook(store), LoreConfig().knowledge, words)
        reads = CallCount(store, "get_state")
        await injector.book.create(project="/p", category="gotcha", title="Deploy", content="make ship.")
        assert "Deploy" in await inject(injector, "s-1")
        assert await store.get_state("", MARK_KEY) is None
        assert reads.calls == 2  # the session's pin read, and the check above

    asyncio.run(main())
