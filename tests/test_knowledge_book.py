"""KnowledgeBook (lore_core.knowledge.book): the rules every knowledge write obeys."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from lore_core.builtin.memory_store import MemoryStore
from lore_core.knowledge.book import CREATED, DELETED, REFUSED, UNCHANGED, UPDATED, KnowledgeBook

P = "/work/shop"


def with_book(body: Callable[[KnowledgeBook], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        store = MemoryStore()
        await store.open()
        return await body(KnowledgeBook(store))

    return asyncio.run(run())


def add(book: KnowledgeBook, title: str, content: str = "Some content.", **kw: Any) -> Awaitable[Any]:
    return book.create(project=P, category=kw.pop("category", "pattern"), title=title, content=content, **kw)


def test_create_edit_delete_and_the_history_they_leave() -> None:
    async def body(book: KnowledgeBook) -> Any:
        made = await add(book, "Tests", "Run pytest -q.")
        again = await add(book, "tests.", "Run pytest -q.")  # same subject, same text
        edited = await book.update(made.version.logical_id, content="Run pytest -q -x.")
        gone = await book.delete(made.version.logical_id)
        return made, again, edited, gone, await book.store.knowledge_versions(made.version.logical_id)

    made, again, edited, gone, history = with_book(body)
    assert (made.status, again.status, edited.status, gone.status) == (CREATED, UNCHANGED, UPDATED, DELETED)
    assert [v.content for v in history] == ["Run pytest -q.", "Run pytest -q -x.", "Run pytest -q -x."]
    assert [v.is_deleted for v in history] == [False, False, True]


def test_a_deleted_memory_does_not_come_back_by_title_or_by_id() -> None:
    async def body(book: KnowledgeBook) -> Any:
        made = await add(book, "Use the staging DB")
        await book.delete(made.version.logical_id)
        by_title = await add(book, "use the staging db!")
        by_id = await add(book, "Another title", logical_id=made.version.logical_id)
        other = await add(book, "Staging")
        renamed = await book.update(other.version.logical_id, title="Use the staging DB")
        revived_edit = await book.update(made.version.logical_id, content="new")
        return by_title, by_id, renamed, revived_edit, await book.entries(P)

    by_title, by_id, renamed, revived_edit, alive = with_book(body)
    for result in (by_title, by_id, renamed, revived_edit):
        assert result.status == REFUSED and "deleted" in result.reason
    assert [e.title for e in alive] == ["Staging"]


def test_an_explicit_id_never_makes_a_second_entry_with_a_known_title() -> None:
    async def body(book: KnowledgeBook) -> Any:
        first = await add(book, "Use DuckDB")
        second = await add(book, "use duckdb", "Other words.", logical_id="bbbbbbbbbbbbbbbb")
        return first, second, await book.entries(P)

    first, second, alive = with_book(body)
    assert second.status == UPDATED and second.version.logical_id == first.version.logical_id
    assert len(alive) == 1


def test_dedup_by_title_never_lowers_sensitivity_nor_touches_global_entries() -> None:
    async def body(book: KnowledgeBook) -> Any:
        secret = await add(book, "Deploy policy", sensitivity="restricted")
        again = await add(book, "deploy policy", "Changed words.")
        shared = await add(book, "House style", scope="global")
        local = await add(book, "House style", "Only here.")
        return secret, again, shared, local

    _secret, again, shared, local = with_book(body)
    assert again.status == UPDATED and again.version.sensitivity == "restricted"
    assert local.status == CREATED and local.version.logical_id != shared.version.logical_id


def test_renaming_onto_another_entrys_title_is_refused() -> None:
    async def body(book: KnowledgeBook) -> Any:
        await add(book, "Alpha")
        beta = await add(book, "Beta")
        return await book.update(beta.version.logical_id, title="ALPHA")

    assert with_book(body).status == REFUSED


def test_invalid_fields_and_secrets_are_refused_with_the_reason() -> None:
    async def body(book: KnowledgeBook) -> Any:
        return [
            await add(book, "x", category="opinion"),
            await add(book, "", "content"),
            await add(book, "two\nlines"),
            await add(book, "Key", "export ANTHROPIC_API_KEY=sk-ant-api03-" + "a" * 80),
            await add(book, "Scope", scope="team"),
            await book.update("0000000000000000", content="x"),
        ]

    results = with_book(body)
    assert all(r.status == REFUSED for r in results)
    reasons = " | ".join(r.reason for r in results)
    for words in ("category must be", "title must be", "secret", "scope must be", "no entry"):
        assert words in reasons


def test_scope_moves_keep_the_entry_in_its_project() -> None:
    """Made global and back, an entry returns to its project; an entry created global has no
    project to move to, and saying so beats filing it under none."""

    async def run() -> tuple[Any, ...]:
        store = MemoryStore()
        await store.open()
        book = KnowledgeBook(store)
        made = await book.create(project="/work/shop", category="pattern", title="Logs", content="JSON logs.")
        assert made.version is not None
        ident = made.version.logical_id
        out = await book.update(ident, scope="global")
        back = await book.update(ident, scope="project")
        born = await book.create(
            project="/work/shop", category="pattern", title="Every", content="x", scope="global"
        )
        assert born.version is not None
        refused = await book.update(born.version.logical_id, scope="project")
        return out, back, refused

    out, back, refused = asyncio.run(run())
    assert out.version.project == "" and out.version.scope == "global"
    assert back.version.project == "/work/shop" and back.version.scope == "project"
    assert refused.status == "refused" and "never belonged to a project" in refused.reason
