"""Entities (lore_core.knowledge.entities, lore_core.recall.entities): the write path's rules
(aliases, refusals, merges, renames, relations), alias expansion in recall (the must-show:
a question naming only an alias finds entries and messages that use only the canonical
name), entities as ``e:`` results, and the known entities in the LTM baseline. Run on the
in-memory store and on a real DuckDB file."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from lore_store_duckdb.store import DuckDBStore

from lore_core.builtin.memory_store import MemoryStore
from lore_core.interfaces import Store
from lore_core.knowledge.book import KnowledgeBook
from lore_core.knowledge.entities import (
    CREATED,
    MERGED,
    REFUSED,
    UNCHANGED,
    UPDATED,
    EntityBook,
    EntityInputError,
    check_predicate,
)
from lore_core.knowledge.prompt import baseline_text
from lore_core.recall.store_engine import recall, store_recall_engine
from lore_core.storage.entities import AUTHOR_CURATOR
from lore_core.testing.builders import CallCount, answer, batch_of, exchange, text

HERE, ELSEWHERE = "/work/shop", "/work/blog"


@pytest.fixture(params=["memory", "duckdb"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    if request.param == "memory":
        return MemoryStore
    return lambda: DuckDBStore(tmp_path / "lore.duckdb")


def run(make_store: Callable[[], Store], body: Callable[[Store], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        store = make_store()
        await store.open()
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(main())


# -- the write path ------------------------------------------------------------------------------


def test_create_validates_and_a_known_name_adds_aliases(make_store: Callable[[], Store]) -> None:
    async def body(store: Store) -> None:
        book = EntityBook(store)
        made = await book.create(project=HERE, name="PostgreSQL", kind="service", aliases=["pg", "PG "])
        assert made.status == CREATED and made.entity is not None
        assert made.entity.aliases == ["pg"]  # "PG " is the same alias normalised
        assert made.entity.ref.startswith("e:")
        # The same name again (any of its names, any case) is the same subject.
        again = await book.create(project=HERE, name="postgresql", kind="tool", aliases=["postgres"])
        assert again.status == UPDATED and again.entity is not None
        assert again.entity.id == made.entity.id and again.entity.kind == "service"
        assert again.entity.aliases == ["pg", "postgres"]
        assert (await book.create(project=HERE, name="PG", aliases=["Postgres"])).status == UNCHANGED
        for bad, field in (
            ({"name": ""}, "name"),
            ({"name": "a\nb"}, "name"),
            ({"name": "x" * 121}, "name"),
            ({"name": "Redis", "kind": "database"}, "kind"),
            ({"name": "Redis", "aliases": [""]}, "alias"),
            ({"name": "Redis", "sensitivity": "secret"}, "sensitivity"),
            ({"name": "sk-ant-api03-" + "a" * 40}, "secret"),
        ):
            result = await book.create(project=HERE, **bad)
            assert result.status == REFUSED and field in result.reason, (bad, result.reason)
        assert [e.name for e in await book.entities(HERE)] == ["PostgreSQL"]

    run(make_store, body)


def test_an_alias_of_another_entity_is_refused_with_the_reason(make_store: Callable[[], Store]) -> None:
    async def body(store: Store) -> None:
        book = EntityBook(store)
        pg = (await book.create(project=HERE, name="PostgreSQL", kind="service", aliases=["pg"])).entity
        redis = (await book.create(project=HERE, name="Redis", kind="service")).entity
        assert pg is not None and redis is not None
        refused = await book.add_alias(redis.ref, "PG")
        assert refused.status == REFUSED
        assert (
            "'PG' belongs to" in refused.reason
            and pg.ref in refused.reason
            and "PostgreSQL" in refused.reason
        )
        assert (await book.add_alias(redis.ref, "postgresql")).status == REFUSED  # a canonical name too
        refused = await book.create(project=HERE, name="Cache", aliases=["redis"])
        assert refused.status == REFUSED and redis.ref in refused.reason
        # Another project does not see this one's names: "pg" may mean something else there.
        other = await book.create(project=ELSEWHERE, name="Paul Graham", kind="person", aliases=["pg"])
        assert other.status == CREATED
        # A global entity's names are everyone's: it may not take a name a project uses.
        clash = await book.create(project="", name="Postgres Global", aliases=["pg"])
        assert clash.status == REFUSED and "pg" in clash.reason
        # By name, within the project: "redis" names e:redis here.
        assert (await book.add_alias("redis", "redis-server", project=HERE)).status == UPDATED
        assert (await book.add_alias("e:0000000000000000", "x")).status == REFUSED
        removed = await book.remove_alias(pg.ref, "PG")
        assert removed.status == UPDATED and removed.entity is not None and removed.entity.aliases == []
        assert (await book.remove_alias(pg.ref, "pg")).status == REFUSED  # no longer there
        assert "canonical" in (await book.remove_alias(pg.ref, "postgresql")).reason

    run(make_store, body)


def test_merge_moves_names_and_relations_and_leaves_a_redirect(make_store: Callable[[], Store]) -> None:
    async def body(store: Store) -> None:
        book = EntityBook(store)
        keep = (await book.create(project=HERE, name="PostgreSQL", kind="service", aliases=["pg"])).entity
        dup = (await book.create(project=HERE, name="Postgres DB", kind="service", aliases=["psql"])).entity
        api = (await book.create(project=HERE, name="billing-api", kind="repository")).entity
        cache = (await book.create(project=HERE, name="Redis", kind="service")).entity
        assert keep and dup and api and cache
        assert (await book.relate(api.ref, "depends on", dup.ref)).status == UPDATED
        assert (await book.relate(dup.ref, "caches_with", "redis", project=HERE)).status == UPDATED
        assert (await book.relate(dup.ref, "caches_with", cache.ref)).status == UNCHANGED
        assert (await book.relate(dup.ref, "x", dup.ref)).status == REFUSED  # not itself
        assert (await book.relate(dup.ref, "uses", "nothing-known", project=HERE)).status == REFUSED
        generation = book.generation

        merged = await book.merge(keep.ref, "Postgres DB", project=HERE)
        assert merged.status == MERGED and merged.entity is not None and book.generation == generation + 1
        survivor = merged.entity
        assert survivor.id == keep.id
        assert survivor.aliases == ["pg", "Postgres DB", "psql"]
        assert [(r.predicate, r.target) for r in survivor.relations] == [("caches_with", cache.id)]
        # The merged id still opens (as the survivor); the redirect keeps its own record.
        assert (await book.get(dup.ref)).id == keep.id  # type: ignore[union-attr]
        gone = await store.get_entity(dup.id)
        assert gone is not None and gone.merged_into == keep.id
        # A third entity's relation to the merged one now points at the survivor.
        api_now = await book.get(api.ref)
        assert api_now is not None and [(r.predicate, r.target) for r in api_now.relations] == [
            ("depends_on", keep.id)
        ]
        assert [e.name for e in await book.entities(HERE)] == ["billing-api", "PostgreSQL", "Redis"]
        # Its names are the survivor's now: "psql" names PostgreSQL, and can go nowhere else.
        assert (await book.resolve(HERE, "psql")).id == keep.id  # type: ignore[union-attr]
        assert (await book.add_alias(cache.ref, "psql")).status == REFUSED
        assert (await book.merge(keep.ref, dup.ref)).status == REFUSED  # it is keep already
        # A global entity is never merged into one project's (it would vanish for the others).
        shared = (await book.create(project="", name="GitHub", kind="service")).entity
        assert shared is not None
        refused = await book.merge(api.ref, shared.ref)
        assert refused.status == REFUSED and "global" in refused.reason

    run(make_store, body)


def test_merge_refuses_names_that_clash_and_rename_keeps_the_old_name(
    make_store: Callable[[], Store],
) -> None:
    async def body(store: Store) -> None:
        book = EntityBook(store)
        shared = (await book.create(project="", name="GitHub", kind="service")).entity
        mine = (await book.create(project=HERE, name="gh cli", kind="tool", aliases=["gh"])).entity
        theirs = (
            await book.create(project=ELSEWHERE, name="GH Pages", kind="service", aliases=["gh"])
        ).entity
        assert shared and mine and theirs
        # Merged into the global one, "gh" would name two entities in ELSEWHERE.
        refused = await book.merge(shared.ref, mine.ref)
        assert refused.status == REFUSED and theirs.ref in refused.reason
        renamed = await book.rename(mine.ref, "GitHub CLI")
        assert renamed.status == UPDATED and renamed.entity is not None
        assert (renamed.entity.name, renamed.entity.aliases) == ("GitHub CLI", ["gh", "gh cli"])
        assert (await book.rename(mine.ref, "github")).status == REFUSED  # the global one's name
        assert (await book.set_kind(mine.ref, "service")).status == UPDATED
        assert (await book.set_kind(mine.ref, "planet")).status == REFUSED

    run(make_store, body)


def test_predicates_are_normalised_words() -> None:
    assert check_predicate(" Depends On ") == "depends_on"
    assert check_predicate("owned-by") == "owned_by"
    for bad in ("", "1st", "a;b", "x" * 41, 3):
        with pytest.raises(EntityInputError):
            check_predicate(bad)


# -- recall ----------------------------------------------------------------------------------------


async def _seed_postgres(store: Store) -> tuple[KnowledgeBook, EntityBook]:
    knowledge, entities = KnowledgeBook(store), EntityBook(store)
    await store.write(
        batch_of(
            exchange(
                [text("user", "Which port does the PostgreSQL server listen on here?")],
                answer("PostgreSQL listens on port 6543 in this repository, not the default."),
                project=HERE,
            ),
            exchange(
                [text("user", "Tune the nginx worker count")],
                answer("nginx now runs 8 worker processes."),
                session="s-2",
                project=HERE,
            ),
        )
    )
    await knowledge.create(
        project=HERE,
        category="gotcha",
        title="PostgreSQL runs on a custom port",
        content="The PostgreSQL server of the dev stack listens on 6543 (docker-compose.yml).",
    )
    sync = getattr(store, "sync_index", None)
    if sync is not None:
        await sync()
    return knowledge, entities


def test_a_question_naming_an_alias_finds_what_only_uses_the_canonical_name(
    make_store: Callable[[], Store],
) -> None:
    """The must-show: "pg" is nowhere in the memory; with the entity it finds the entry and
    the messages that say "PostgreSQL", without it it does not."""

    async def body(store: Store) -> tuple[Any, Any, Any]:
        _, entities = await _seed_postgres(store)
        engine = store_recall_engine(store, entities=entities)
        question = "anything unusual about pg?"
        without = await recall(engine, question, "project", None, HERE)
        made = await entities.create(
            project=HERE, name="PostgreSQL", kind="service", aliases=["pg", "postgres"]
        )
        assert made.entity is not None
        with_entity = await recall(engine, question, "project", None, HERE)
        return without, with_entity, made.entity

    without, found, entity = run(make_store, body)
    texts = " ".join(r.text for r in without.results)
    assert "6543" not in texts and "PostgreSQL" not in texts
    kinds = {r.id.split(":")[0] for r in found.results if "6543" in r.text}
    assert {"t", "k"} <= kinds  # the message and the knowledge entry
    assert found.metadata["aliases"] == [
        {"entity": entity.ref, "matched": "pg", "names": ["PostgreSQL", "postgres"]}
    ]
    assert any("also searched for" in n and '"PostgreSQL"' in n for n in found.notes)
    # The entity itself is a result too, with its e: id.
    assert any(r.id == entity.ref and r.source == "entity" for r in found.results)


def test_alias_expansion_is_whole_word_and_per_project(make_store: Callable[[], Store]) -> None:
    async def body(store: Store) -> dict[str, Any]:
        _, entities = await _seed_postgres(store)
        await entities.create(project=HERE, name="PostgreSQL", kind="service", aliases=["pg"])
        engine = store_recall_engine(store, entities=entities)
        return {
            # "pgbouncer" and "upgrade" hold "pg" but do not name it.
            "inside": await recall(engine, "pgbouncer upgrade settings", "project", None, HERE),
            "elsewhere": await recall(engine, "pg port", "project", None, ELSEWHERE),
            "upper": await recall(engine, "PG port?", "project", None, HERE),
            "canonical": await recall(engine, "postgresql port", "project", None, HERE),
        }

    found = run(make_store, body)
    assert "aliases" not in found["inside"].metadata
    assert "aliases" not in found["elsewhere"].metadata
    assert found["upper"].metadata["aliases"][0]["names"] == ["PostgreSQL"]
    # Naming the canonical name searches the aliases too.
    assert found["canonical"].metadata["aliases"][0]["names"] == ["pg"]


def test_entity_ids_open_with_relations_and_merged_ids_redirect(make_store: Callable[[], Store]) -> None:
    async def body(store: Store) -> tuple[Any, Any, Any, Any]:
        book = EntityBook(store)
        pg = (await book.create(project=HERE, name="PostgreSQL", kind="service", aliases=["pg"])).entity
        dup = (await book.create(project=HERE, name="Postgres 16", kind="service")).entity
        api = (await book.create(project=HERE, name="billing-api", kind="repository")).entity
        hidden = (
            await book.create(project=HERE, name="Vault", kind="service", sensitivity="restricted")
        ).entity
        assert pg and dup and api and hidden
        await book.relate(api.ref, "depends_on", pg.ref)
        await book.merge(pg.ref, dup.ref)
        engine = store_recall_engine(store, entities=book)
        return (
            await recall(engine, dup.ref),
            await recall(engine, "billing api", "knowledge", None, HERE),
            await recall(engine, hidden.ref),
            await recall(engine, "vault", "knowledge", None, HERE),
        )

    opened, searched, hidden, not_found = run(make_store, body)
    text = opened.results[0].text
    assert opened.results[0].id.startswith("e:") and "PostgreSQL" in text
    assert "was merged into this entity" in text and "billing-api" in text and "depends_on" in text
    assert searched.results[0].source == "entity" and "billing-api" in searched.results[0].text
    assert "depends_on PostgreSQL" in searched.results[0].text
    assert "restricted" in hidden.results[0].text and "Vault" not in hidden.results[0].text
    assert all("Vault" not in r.text for r in not_found.results)


def test_no_entities_means_no_expansion_work(make_store: Callable[[], Store]) -> None:
    async def body(store: Store) -> tuple[Any, int]:
        listed = CallCount(store, "list_entities")
        _, entities = await _seed_postgres(store)
        engine = store_recall_engine(store, entities=entities)
        for _ in range(5):
            response = await recall(engine, "postgresql port", "project", None, HERE)
        return response, listed.calls

    response, calls = run(make_store, body)
    assert "aliases" not in response.metadata and response.results
    assert calls == 1  # the empty table, read once and cached until a write


# -- the LTM baseline ----------------------------------------------------------------------------


def test_the_baseline_lists_known_entities_briefly_and_stably(make_store: Callable[[], Store]) -> None:
    async def body(store: Store) -> list[Any]:
        book = EntityBook(store)
        await book.create(project=HERE, name="Redis", kind="service")
        await book.create(project=HERE, name="PostgreSQL", kind="service", aliases=["pg", "postgres"])
        await book.create(
            project="", name="Alice Martin", kind="person", aliases=["alice"], author=AUTHOR_CURATOR
        )
        await book.create(project=HERE, name="Vault", kind="service", sensitivity="restricted")
        return await book.entities(HERE)

    entities = run(make_store, body)

    def count(s: str) -> int:
        return len(s) // 4

    block = baseline_text([], {}, max_tokens=1500, count=count, entities=entities, max_entities=30)
    lines = [line for line in block.splitlines() if line.startswith("- e:")]
    assert [line.split(" ", 2)[2] for line in lines] == [
        "Alice Martin [person] aka alice",
        "PostgreSQL [service] aka pg, postgres",
        "Redis [service]",
    ]
    assert "Vault" not in block  # restricted never reaches a prompt
    # The same entities in another order give the same bytes.
    again = baseline_text(
        [], {}, max_tokens=1500, count=count, entities=list(reversed(entities)), max_entities=30
    )
    assert again == block
    # Bounded: at most max_entities (those with aliases first), and none with 0.
    two = baseline_text([], {}, max_tokens=1500, count=count, entities=entities, max_entities=2)
    assert [line.split(" ")[2] for line in two.splitlines() if line.startswith("- e:")] == [
        "Alice",
        "PostgreSQL",
    ]
    assert baseline_text([], {}, max_tokens=1500, count=count, entities=entities, max_entities=0) == ""


# -- from the curator's answer ---------------------------------------------------------------------


def test_curator_entities_are_parsed_leniently() -> None:
    from lore_core.knowledge.curator import parse_entities

    raw = [
        {"name": " PostgreSQL ", "kind": "service", "aliases": ["pg", "", None, "x\ny"]},
        {
            "name": "Dana",
            "kind": "wizard",
            "relations": [{"predicate": "owns", "target": "PostgreSQL"}, "x", {}],
        },
        {"kind": "tool"},
        7,
        {"name": "ghp_" + "a" * 36},
    ]
    found, skipped, warnings = parse_entities(raw)
    assert [(e.name, e.kind, e.aliases) for e in found] == [
        ("PostgreSQL", "service", ["pg"]),
        ("Dana", "other", []),
    ]
    assert [(r.predicate, r.target) for r in found[1].relations] == [("owns", "PostgreSQL")]
    # 3 bad aliases, 2 bad relations, 3 bad items: each counted, none raised.
    assert skipped == 8 and len(warnings) == 8
    assert parse_entities(None) == ([], 0, [])
    assert parse_entities({"name": "x"})[1] == 1
    assert len(parse_entities([{"name": f"e{i}"} for i in range(60)])[0]) == 50


def test_curation_writes_entities_through_the_book_and_without_a_worker_none() -> None:
    from lore_core.config import KnowledgeConfig
    from lore_core.knowledge.curation import KnowledgeUpkeep
    from lore_core.knowledge.curator import Curation, LLMKnowledgeCurator, ProposedEntity, ProposedRelation
    from lore_core.storage.records import StoredDistillation
    from lore_core.worker.client import NoWorker

    shown: list[list[str]] = []

    class Scripted(LLMKnowledgeCurator):
        def __init__(self, answer: Curation | Exception) -> None:
            self.answer = answer

        async def curate(
            self, observations: Any, entries: Any, *, session_id: Any = None, entities: Any = ()
        ) -> Curation:
            shown.append([e.name for e in entities])
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    async def main() -> tuple[Any, Any, Any, list[Any], list[Any]]:
        store = MemoryStore()
        await store.open()
        book, entities = KnowledgeBook(store), EntityBook(store)
        await entities.create(project=HERE, name="Redis", kind="service", aliases=["cache"])
        await entities.create(project="", name="GitHub", kind="service")
        await store.write_distillation(
            StoredDistillation(id="o1", session_id="s1", generation=0, text="- x", project=HERE)
        )
        await store.write_distillation(
            StoredDistillation(id="o2", session_id="s2", generation=0, text="- y", project=HERE)
        )
        offline = KnowledgeUpkeep(
            book, KnowledgeConfig(), Scripted(NoWorker("no credentials")), entities=entities
        )
        none = await offline.curate_session("s2", HERE)
        after_offline = await entities.entities(HERE)
        answer = Curation(
            [],
            [],
            entities=[
                ProposedEntity("PostgreSQL", "service", ["pg", "cache"]),  # "cache" is Redis's
                ProposedEntity("redis", "tool", ["redis-server"]),  # known: aliases added, kind kept
                ProposedEntity("GitHub", "service", ["gh"]),  # global: not changed by a project
                ProposedEntity(
                    "billing-api",
                    "repository",
                    relations=[
                        ProposedRelation("depends_on", "PostgreSQL"),
                        ProposedRelation("uses", "Kafka"),
                    ],
                ),
            ],
            entities_skipped=2,
        )
        upkeep = KnowledgeUpkeep(book, KnowledgeConfig(), Scripted(answer), entities=entities)
        report = await upkeep.curate_session("s1", HERE)
        return none, report, after_offline, await entities.entities(HERE), list(shown)

    none, report, after_offline, found, prompts = asyncio.run(main())
    assert "no usable worker" in none.skipped and [e.name for e in after_offline] == ["GitHub", "Redis"]
    by_name = {e.name: e for e in found}
    assert set(by_name) == {"billing-api", "GitHub", "PostgreSQL", "Redis"}
    assert by_name["PostgreSQL"].aliases == ["pg"] and by_name["PostgreSQL"].created_by == "curator"
    assert (by_name["Redis"].kind, by_name["Redis"].aliases) == ("service", ["cache", "redis-server"])
    assert by_name["GitHub"].aliases == []
    assert [(r.predicate, r.target) for r in by_name["billing-api"].relations] == [
        ("depends_on", by_name["PostgreSQL"].id)
    ]
    assert report.entities["created"] == 2 and report.entities["aliases"] == 2
    assert report.entities["relations"] == 1 and report.entities["refused"] == 1
    assert report.entities["skipped"] == 2 + 1 + 1  # the answer's, GitHub's alias, Kafka
    assert any("cache" in reason and "Redis" in reason for _, reason in report.refused)
    assert prompts[-1] == ["GitHub", "Redis"]  # the curator is shown the known entities


def test_a_version_1_entities_row_reads_after_the_migration(tmp_path: Path) -> None:
    """The entities table existed since schema version 1 (never written by a release): the
    migration that adds authorship, sensitivity and merges keeps such a row readable."""
    import duckdb
    from lore_store_duckdb import schema

    path = tmp_path / "old.duckdb"
    before = schema.MIGRATIONS.index(schema.V6)
    con = duckdb.connect(str(path))
    schema.current_version(con)
    for statements in schema.MIGRATIONS[:before]:
        for statement in statements:
            con.execute(statement)
    con.execute("INSERT INTO lore_meta VALUES ('schema_version', ?)", (str(before),))
    con.execute(
        "INSERT INTO entities (id, kind, canonical_name, aliases, relations, project, created_at, "
        "updated_at) VALUES ('00aa00aa00aa00aa', 'tool', 'make', '[\"gmake\"]', '[]', NULL, 1.0, 2.0)"
    )
    con.close()

    async def body(store: Store) -> Any:
        return await store.get_entity("00aa00aa00aa00aa"), (await store.stats())["schema_version"]

    found, version = run(lambda: DuckDBStore(path), body)
    assert version == schema.SCHEMA_VERSION
    assert found is not None and (found.name, found.aliases, found.project) == ("make", ["gmake"], "")
    assert (found.sensitivity, found.created_by, found.updated_by, found.merged_into) == (
        "normal",
        "user",
        "user",
        None,
    )
