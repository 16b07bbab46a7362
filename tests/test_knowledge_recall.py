"""Recall over knowledge (lore_core.knowledge.search): ``k:`` results beside messages,
``scope=knowledge``, other projects' entries only with ``scope=all`` and weighed lower, ids
opened in full (deleted entries say so), through the same engine the model's tool uses."""

from __future__ import annotations

import asyncio
from typing import Any

from lore_core.builtin.memory_store import MemoryStore
from lore_core.knowledge.book import KnowledgeBook
from lore_core.recall.store_engine import recall, store_recall_engine

HERE, ELSEWHERE = "/work/shop", "/work/blog"


async def seeded() -> tuple[Any, KnowledgeBook]:
    store = MemoryStore()
    await store.open()
    book = KnowledgeBook(store)
    await book.create(
        project=HERE,
        category="decision",
        title="Payments go through Stripe",
        content="Use the Stripe SDK for payments; the PayPal integration was dropped.",
    )
    await book.create(
        project=HERE, category="gotcha", title="Flaky clock in tests", content="Freeze time with freezegun."
    )
    await book.create(
        project=ELSEWHERE,
        category="pattern",
        title="Payments webhooks",
        content="Payments webhooks are verified with the signing secret before parsing.",
    )
    return store_recall_engine(store), book


def test_knowledge_results_carry_k_ids_and_respect_the_project() -> None:
    async def run() -> tuple[Any, Any, Any]:
        engine, _ = await seeded()
        own = await recall(engine, "how are payments handled", "knowledge", None, HERE)
        mixed = await recall(engine, "payments", "project", None, HERE)
        everywhere = await recall(engine, "payments webhooks", "all", None, HERE)
        return own, mixed, everywhere

    own, mixed, everywhere = asyncio.run(run())
    assert own.error is None and own.results[0].id.startswith("k:")
    assert "Stripe" in own.results[0].text
    assert all("webhooks" not in r.text for r in own.results + mixed.results)  # other project: not asked
    assert any("webhooks" in r.text for r in everywhere.results)  # scope all crosses projects


def test_other_projects_entries_weigh_less_than_this_projects() -> None:
    async def run() -> Any:
        engine, book = await seeded()
        await book.create(
            project=HERE,
            category="pattern",
            title="Payments webhooks here",
            content="Payments webhooks are verified with the signing secret before parsing.",
        )
        return await recall(engine, "payments webhooks verified signing secret", "all", None, HERE)

    answer = asyncio.run(run())
    texts = [r.text for r in answer.results]
    own = next(i for i, t in enumerate(texts) if "Payments webhooks here" in t)
    other = next(i for i, t in enumerate(texts) if "Payments webhooks\n" in t)
    assert own < other


def test_a_k_id_opens_the_entry_and_a_deleted_one_says_so() -> None:
    async def run() -> tuple[Any, Any]:
        engine, book = await seeded()
        entry = (await book.by_title(HERE, "Flaky clock in tests")).logical_id
        opened = await recall(engine, f"k:{entry}", None, None, HERE)
        await book.delete(entry)
        gone = await recall(engine, f"k:{entry}", None, None, HERE)
        return opened, gone

    opened, gone = asyncio.run(run())
    assert "Freeze time with freezegun." in opened.results[0].text
    assert "deleted" in gone.results[0].text and "freezegun" not in gone.results[0].text


def test_restricted_entries_never_reach_the_model_through_recall() -> None:
    """Recall's results go to the (usually hosted) model: a restricted entry is neither found
    nor opened by id; its text stays in the store."""

    async def run() -> tuple[Any, Any]:
        engine, book = await seeded()
        made = await book.create(
            project=HERE,
            category="gotcha",
            title="Payments staging host",
            content="Payments staging runs on the host behind the office VPN.",
            sensitivity="restricted",
        )
        assert made.version is not None
        found = await recall(engine, "payments staging host VPN", "knowledge", None, HERE)
        opened = await recall(engine, made.version.ref, None, None, HERE)
        return found, opened

    found, opened = asyncio.run(run())
    assert all("VPN" not in r.text for r in found.results)
    assert "restricted" in opened.results[0].text and "VPN" not in opened.results[0].text


def test_a_search_reads_the_entries_once_and_the_next_search_sees_a_new_entry() -> None:
    """The text list, the cascade's relaxed rounds and the vector list share one read of
    the entries per search; a write between two searches is found by the second."""
    from lore_core.testing.builders import CallCount, TopicEmbedder

    async def run() -> tuple[int, Any, Any]:
        store = MemoryStore()
        await store.open()
        book = KnowledgeBook(store)
        reads = CallCount(store, "current_knowledge")
        engine = store_recall_engine(store, embedder=TopicEmbedder())
        # Nothing matches: the cascade relaxes the query and searches again.
        before = await recall(engine, "deployment rollout broken canary", "knowledge", None, HERE)
        searched = reads.calls
        await book.create(
            project=HERE, category="gotcha", title="Canary rollout", content="Canary rollouts need a flag."
        )
        after = await recall(engine, "deployment rollout broken canary", "knowledge", None, HERE)
        return searched, before, after

    searched, before, after = asyncio.run(run())
    assert searched == 1
    assert before.error is None and before.results == []
    assert after.results and after.results[0].id.startswith("k:") and "Canary" in after.results[0].text
