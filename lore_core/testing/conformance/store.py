"""The store conformance suite: the contract of :class:`lore_core.interfaces.Store` and of each
optional tier (:class:`lore_core.interfaces.Tier`) as tests, one mixin per tier.

Every store plugin's tests subclass :class:`MessagesConformance` (the core every store has)
and the mixin of each tier the store declares in ``Store.tiers``, and must pass them:
:meth:`MessagesConformance.test_the_suites_are_the_declared_tiers` fails when the two
differ. :class:`StoreConformance` is every suite at once, for a store with every tier (as
the kernel's in-memory reference store, ``tests/test_memory_store.py``)::

    from lore_core.testing.conformance.store import MessagesConformance, VectorsConformance

    class TestMyStore(MessagesConformance, VectorsConformance):  # tiers = {Tier.VECTORS}
        persistent = True  # data must survive close() and a fresh open()

        @pytest.fixture
        def make_store(self, tmp_path):
            # Each call returns a new, unopened store object on the same location.
            return lambda: MyStore(path=tmp_path / "store")

Tests are plain functions that drive the store's coroutines with ``asyncio.run``, so the
suite needs no async pytest plugin. Records are built from real wire-neutral exchanges with
:func:`lore_core.storage.convert.records_from_exchange`, exactly as the gateway's writer does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

import attrs
import pytest

from lore_core.interfaces import (
    DistillationStore,
    EntityStore,
    EventLogStore,
    KnowledgeStore,
    Store,
    Tier,
    VectorStore,
    check_tiers,
    has_tier,
)
from lore_core.model import (
    TOOL_CALL,
    TOOL_RESULT,
)
from lore_core.storage.identity import main_branch
from lore_core.storage.knowledge import (
    AUTHOR_CURATOR,
    AUTHOR_IMPORT,
    AUTHOR_USER,
    DEFAULT_CONFIDENCE,
    INITIAL_CONFIDENCE,
    KnowledgeConflict,
    KnowledgeContradiction,
    KnowledgeMetric,
    KnowledgeVersion,
    canonical_order,
    new_logical_id,
    new_version_id,
    next_version,
    normalize_title,
)
from lore_core.storage.records import StoredDistillation, WriteBatch, distillation_id

# -- building exchanges ----------------------------------------------------------------------
from lore_core.testing.builders import (
    TopicEmbedder,
    answer,
    batch_of,
    exchange,
    text,
    tool_call,
    tool_result,
)

if TYPE_CHECKING:

    class TieredStore(Store, DistillationStore, VectorStore, KnowledgeStore, EntityStore, EventLogStore):
        """What the tests call: the core and every tier's members (each test uses those of
        its own suite's tier)."""

else:
    TieredStore = Store


class _StoreSuite:
    """What every part of the suite shares: the ``make_store`` fixture, running a body on an
    open store, the corpora the tests write."""

    #: Set to True when data must survive ``close()`` and a fresh ``open()``.
    persistent: bool = False

    @pytest.fixture
    def make_store(self) -> Callable[[], Store]:
        raise NotImplementedError("a store's test class provides the make_store fixture")

    def run(self, make_store: Callable[[], Store], body: Callable[[TieredStore], Awaitable[None]]) -> None:
        async def main() -> None:
            store = make_store()
            await store.open()
            try:
                # A tier's tests run only on a store that declares it (the declared-tiers test).
                await body(cast(TieredStore, store))
            finally:
                await store.close()

        asyncio.run(main())

    def reopen(self, make_store: Callable[[], Store], body: Callable[[TieredStore], Awaitable[None]]) -> None:
        self.run(make_store, body)

    def _corpus(self) -> WriteBatch:
        return batch_of(
            exchange(
                [text("user", "the migration to postgres failed with a deadlock error")],
                answer("deadlock again: retry the postgres migration with a lock timeout"),
                session="s-a",
                project="/p/one",
                at=100.0,
            ),
            exchange(
                [text("user", "write a haiku about autumn leaves")],
                answer("crisp leaves drift"),
                session="s-b",
                project="/p/one",
                at=200.0,
            ),
            exchange(
                [text("user", "why does the build fail on arm64")],
                answer("the postgres driver has no arm64 wheel"),
                session="s-c",
                project="/p/two",
                at=300.0,
            ),
        )

    def _distillation(
        self, generation: int, text: str, sources: list[str], session: str = "s-1", at: float = 5000.0
    ) -> StoredDistillation:
        return StoredDistillation(
            id=distillation_id(session, generation, sources),
            session_id=session,
            generation=generation,
            text=text,
            source_ids=sources,
            project="/work/alpha",
            created_at=at,
            start=at - 100,
            end=at - 10,
            method="llm",
            source_tokens=400,
            input_tokens=300,
            output_tokens=40,
            compression_ratio=10.0,
            worker_provider="anthropic",
            worker_model="claude-test",
        )

    def _forget_corpus(self) -> WriteBatch:
        """Session ``s-gone`` (unique words in a prompt, a tool's call and output and an
        answer) and session ``s-kept`` beside it, in the same project."""
        gone = exchange(
            [
                text("user", "the zanzibarquux secret plan, please"),
                tool_call("Bash", "call_9", {"command": "cat xylophonequartz.txt"}, say="Reading it"),
                tool_result("call_9", "the file says marmalade7741 and the wombat sleeps"),
            ],
            answer("Noted: yodelfrost is the answer."),
            session="s-gone",
            at=1000.0,
        )
        kept = exchange(
            [text("user", "the wombat plan for the kept session")],
            answer("kept answer about the wombat"),
            session="s-kept",
            at=2000.0,
        )
        return batch_of(gone, kept)

    #: "Use tabs" in fullwidth letters, the same title under NFKC.
    _FULLWIDTH = "\uff35\uff53\uff45 \uff54\uff41\uff42\uff53"

    @staticmethod
    def _knowledge(
        title: str,
        *,
        logical_id: str | None = None,
        category: str = "decision",
        scope: str = "project",
        project: str = "/work/alpha",
        created_by: str = AUTHOR_USER,
        at: float = 1000.0,
        content: str | None = None,
        **fields: Any,
    ) -> KnowledgeVersion:
        """Version 1 of a new entry (scope ``global`` entries belong to no project)."""
        ident = logical_id or new_logical_id()
        return KnowledgeVersion(
            version_id=new_version_id(ident, 1),
            logical_id=ident,
            version=1,
            category=category,
            title=title,
            content=f"about {title}" if content is None else content,
            scope=scope,
            project="" if scope == "global" else project,
            created_at=at,
            created_by=created_by,
            updated_by=created_by,
            **fields,
        )

    @staticmethod
    def _entity(name: str, **fields: Any) -> Any:
        from lore_core.storage.entities import Entity, new_entity_id

        values: dict[str, Any] = {"kind": "service", "project": "/work/alpha", "created_at": 10.0}
        values.update(fields)
        values.setdefault("updated_at", values["created_at"])
        return Entity(id=values.pop("id", None) or new_entity_id(), name=name, **values)

    MODEL = "test-embedder-v1"

    @staticmethod
    def _unit(*values: float) -> list[float]:
        norm = sum(v * v for v in values) ** 0.5
        return [v / norm for v in values]

    def _axis(self, text: str) -> list[float]:
        """A fixed 4-dimensional "embedding": the axis of the topic the text is about."""
        if "haiku" in text or "leaves" in text:
            return self._unit(0.1, 1.0, 0.0, 0.0)
        if "arm64" in text:
            return self._unit(0.2, 0.0, 1.0, 0.0)
        if "wombat" in text:
            return self._unit(0.0, 0.0, 0.1, 1.0)
        return self._unit(1.0, 0.1, 0.0, 0.0)

    async def _embed_pending(self, store: TieredStore, model: str | None = None, batch: int = 256) -> int:
        from lore_core.storage.records import ItemVectors

        total = 0
        while True:
            items = await store.pending_embeddings(model or self.MODEL, limit=batch)
            if not items:
                return total
            done = [ItemVectors(i, [self._axis(i.text)] if i.text else []) for i in items]
            total += await store.write_vectors(model or self.MODEL, 4, done)

    @staticmethod
    def _require(store: Store, tier: Tier) -> None:
        """Skip a test that also needs another tier than its own when the store lacks it."""
        if not has_tier(store, tier):
            pytest.skip(f"the {store.name} store has no {tier.label}")


class TierConformance(_StoreSuite):
    """The suite of one optional tier (:attr:`tier`)."""

    tier: ClassVar[Tier]


class MessagesConformance(_StoreSuite):
    """The core every store passes: lifecycle, writes and identity, sessions, projects and
    state, full-text search, forgetting, leases and copying."""

    def test_the_suites_are_the_declared_tiers(self, make_store: Callable[[], Store]) -> None:
        """The tiers the store declares are exactly those it derives from the interface of
        (:func:`~lore_core.interfaces.check_tiers`) and those whose suites this class runs."""
        store = make_store()
        check_tiers(store)
        tested = {c.tier for c in type(self).__mro__ if issubclass(c, TierConformance) and "tier" in vars(c)}
        assert set(type(store).tiers) == tested, (
            f"the {store.name} store declares {sorted(t.value for t in type(store).tiers)}; "
            f"this class runs the suites of {sorted(t.value for t in tested)}"
        )

    def test_empty_store(self, make_store: Callable[[], Store]) -> None:
        async def body(store: TieredStore) -> None:
            stats = await store.stats()
            assert (stats["projects"], stats["sessions"], stats["messages"]) == (0, 0, 0)
            assert "schema_version" in stats and "size_bytes" in stats
            assert await store.list_sessions() == []
            assert await store.get_session("nope") is None
            assert await store.session_messages("nope") == []
            assert await store.search("anything") == []
            assert store.health()["ok"] is True
            assert isinstance(store.name, str) and store.name
            # Where the kernel's journal goes: a directory of its own (not an existing file),
            # or None for a store that keeps nothing across a restart.
            journal = store.journal_dir
            assert journal is None or (isinstance(journal, Path) and not journal.is_file())

        self.run(make_store, body)

    def test_roundtrip_structure(self, make_store: Callable[[], Store]) -> None:
        msgs = [
            text("user", "list the files please"),
            tool_call("Bash", "call_1", {"command": "ls -la", "opts": {"b": 2, "a": 1}}, say="Running ls"),
            tool_result("call_1", "README.md\nsetup.py", is_error=True),
        ]
        ex = exchange(msgs, answer("There are two files.", input_tokens=123, output_tokens=45))
        ex.context_layer = 3  # the layer the context manager sent the request at

        async def body(store: TieredStore) -> None:
            added = await store.write(batch_of(ex))
            assert added == 4
            session = await store.get_session("s-1")
            assert session is not None
            assert (session.project, session.harness, session.model) == (
                "/work/alpha",
                "claude",
                "test-model-1",
            )
            assert session.title == "list the files please"
            assert (session.message_count, session.branch_count) == (4, 1)
            stored = await store.session_messages("s-1")
            assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
            assert [m.position for m in stored] == [0, 1, 2, 3]
            assert stored[0].parent_id is None
            assert [m.parent_id for m in stored[1:]] == [m.id for m in stored[:-1]]
            call = stored[1].blocks[1]
            assert (
                call["type"] == TOOL_CALL and call["tool_name"] == "Bash" and call["tool_call_id"] == "call_1"
            )
            assert call["tool_input"] == {"command": "ls -la", "opts": {"b": 2, "a": 1}}
            result = stored[2].blocks[0]
            assert result["type"] == TOOL_RESULT and result["is_error"] is True
            assert result["tool_call_id"] == "call_1" and result["text"] == "README.md\nsetup.py"
            last = stored[3]
            assert last.origin == "response" and last.complete is True
            assert (
                last.usage is not None
                and last.usage["input_tokens"] == 123
                and last.usage["output_tokens"] == 45
            )
            assert last.model == "test-model-1" and last.stop_reason == "end_turn"
            assert last.context_layer == 3 and stored[0].context_layer is None
            assert last.text == "There are two files."
            assert stored[0].harness == "claude" and stored[0].created_at == 1_700_000_000.0
            assert "Bash" in stored[1].text and "ls -la" in stored[1].text
            again = await store.get_messages([stored[2].id, "missing", stored[0].id])
            assert [m.id for m in again] == [stored[2].id, stored[0].id]

        self.run(make_store, body)

    def test_lookup_by_any_id_is_safe(self, make_store: Callable[[], Store]) -> None:
        """Ids a model asks to open reach ``get_messages`` as they were typed: quotes, NUL,
        SQL, thousands of them find nothing (or what exists) and never fail."""
        ex = exchange([text("user", "hello there")], answer("hi"))
        odd = ["it's", "a'); DROP TABLE messages; --", "back\\slash", "nul\0byte", "?", "$1", "", "ü🙂"]

        async def body(store: TieredStore) -> None:
            await store.write(batch_of(ex))
            stored = await store.session_messages("s-1")
            assert await store.get_messages(odd) == []
            found = await store.get_messages([*odd[:4], stored[1].id, *odd[4:]])
            assert [m.id for m in found] == [stored[1].id]
            many = [f"missing-{i}" for i in range(3000)] + [stored[0].id]
            assert [m.id for m in await store.get_messages(many)] == [stored[0].id]
            assert len(await store.session_messages("s-1")) == 2

        self.run(make_store, body)

    def test_write_is_idempotent(self, make_store: Callable[[], Store]) -> None:
        ex = exchange([text("user", "hello there")], answer("hi"))

        async def body(store: TieredStore) -> None:
            assert await store.write(batch_of(ex)) == 2
            assert await store.write(batch_of(ex)) == 0
            assert (await store.stats())["messages"] == 2

        self.run(make_store, body)

    def test_resent_history_is_stored_once(self, make_store: Callable[[], Store]) -> None:
        turn1 = exchange([text("user", "first question")], answer("first answer"), at=1000.0)
        turn2 = exchange(
            [
                text("user", "first question"),
                text("assistant", "first answer"),
                text("user", "second question"),
            ],
            answer("second answer"),
            at=2000.0,
        )

        async def body(store: TieredStore) -> None:
            await store.write(batch_of(turn1))
            assert await store.write(batch_of(turn2)) == 2
            stored = await store.session_messages("s-1")
            assert [m.text for m in stored] == [
                "first question",
                "first answer",
                "second question",
                "second answer",
            ]
            # The stored answer is the one assembled from the response: usage is kept.
            assert stored[1].origin == "response" and stored[1].usage is not None
            session = await store.get_session("s-1")
            assert session is not None and session.updated_at == 2001.0 and session.created_at == 1000.0

        self.run(make_store, body)

    def test_edited_history_forks(self, make_store: Callable[[], Store]) -> None:
        base = [text("user", "question one"), text("assistant", "answer one")]
        original = exchange([*base, text("user", "use postgres")], answer("ok postgres"), at=1000.0)
        edited = exchange([*base, text("user", "use sqlite")], answer("ok sqlite"), at=2000.0)

        async def body(store: TieredStore) -> None:
            await store.write(batch_of(original))
            await store.write(batch_of(edited))
            stored = await store.session_messages("s-1")
            assert len(stored) == 6  # the shared prefix once, both branches kept
            session = await store.get_session("s-1")
            assert session is not None and session.branch_count == 2
            branch = main_branch(stored)
            assert [m.text for m in branch] == ["question one", "answer one", "use sqlite", "ok sqlite"]
            forks = [m for m in stored if m.position == 2]
            assert len({m.parent_id for m in forks}) == 1

        self.run(make_store, body)

    def test_partial_answer_is_marked_incomplete(self, make_store: Callable[[], Store]) -> None:
        ex = exchange([text("user", "stream something long")], answer("half of the ans", complete=False))
        ex.client_disconnected = True

        async def body(store: TieredStore) -> None:
            await store.write(batch_of(ex))
            stored = await store.session_messages("s-1")
            assert stored[-1].text == "half of the ans" and stored[-1].complete is False
            assert stored[0].complete is True

        self.run(make_store, body)

    def test_unicode_and_large_text(self, make_store: Callable[[], Store]) -> None:
        big = "ünïcødé 日本語 🚀 " + "lorem ipsum " * 20_000
        ex = exchange([text("user", big)], answer("quote: \"'\\ \x01"))

        async def body(store: TieredStore) -> None:
            await store.write(batch_of(ex))
            stored = await store.session_messages("s-1")
            assert stored[0].text == big.strip() or stored[0].text == big
            assert stored[1].text == "quote: \"'\\ \x01"

        self.run(make_store, body)

    def test_sessions_by_project_newest_first(self, make_store: Callable[[], Store]) -> None:
        async def body(store: TieredStore) -> None:
            await store.write(
                batch_of(
                    exchange([text("user", "a")], session="old", project="/p/one", at=100.0),
                    exchange([text("user", "b")], session="new", project="/p/one", at=300.0),
                    exchange([text("user", "c")], session="other", project="/p/two", at=200.0),
                )
            )
            assert [s.id for s in await store.list_sessions()] == ["new", "other", "old"]
            assert [s.id for s in await store.list_sessions(project="/p/one")] == ["new", "old"]
            assert [s.id for s in await store.list_sessions(limit=1)] == ["new"]
            projects = await store.list_projects()
            assert [p.id for p in projects] == ["/p/one", "/p/two"]
            assert projects[0].name == "one"
            # A later exchange updates the session (model, updated_at) but not its creation.
            await store.write(
                batch_of(
                    exchange(
                        [text("user", "a"), text("assistant", "x"), text("user", "y")],
                        answer("z"),
                        session="old",
                        project="/p/one",
                        at=400.0,
                    )
                )
            )
            assert (await store.list_sessions())[0].id == "old"
            old = await store.get_session("old")
            assert old is not None and old.created_at == 100.0 and old.model == "test-model-1"

        self.run(make_store, body)

    def test_session_pages_and_filters(self, make_store: Callable[[], Store]) -> None:
        """Keyset pages in ``(updated_at, id)`` order (ties broken by id) and the filters."""

        def ex(session: str, at: float, first: str, project: str = "/p/one", harness: str = "claude") -> Any:
            return exchange(
                [text("user", first)], answer("ok"), session=session, project=project, harness=harness, at=at
            )

        async def body(store: TieredStore) -> None:
            await store.write(
                batch_of(
                    ex("a", 100.0, "Deploy the API"),
                    ex("b", 200.0, "fix the tests", harness="codex"),
                    ex("c", 200.0, "write docs", project="/p/two"),
                    ex("d", 300.0, "Review the DEPLOY script"),
                    ex("e", 400.0, "lint", project="/p/two", harness="codex"),
                )
            )
            everything = [s.id for s in await store.list_sessions(limit=10)]
            assert everything == ["e", "d", "c", "b", "a"]  # c and b tie on updated_at: by id
            pages: list[str] = []
            before: tuple[float, str] | None = None
            while True:
                page = await store.list_sessions(limit=2, before=before)
                pages += [s.id for s in page]
                if len(page) < 2:
                    break
                before = (page[-1].updated_at, page[-1].id)
            assert pages == everything  # each once, none skipped at the tie
            first = (await store.list_sessions(limit=10))[3]
            assert [s.id for s in await store.list_sessions(before=(first.updated_at, first.id))] == ["a"]
            assert [s.id for s in await store.list_sessions(since=200.0)] == ["e", "d", "c", "b"]
            assert [s.id for s in await store.list_sessions(harness="codex")] == ["e", "b"]
            assert [s.id for s in await store.list_sessions(project="/p/two", harness="codex")] == ["e"]
            assert [s.id for s in await store.list_sessions(text="deploy")] == ["d", "a"]  # any case
            assert [s.id for s in await store.list_sessions(text="/P/TWO")] == ["e", "c"]  # the project
            assert [s.id for s in await store.list_sessions(text="no such text")] == []
            model = (await store.list_sessions(limit=1))[0].model
            assert model and [s.id for s in await store.list_sessions(model=model)] == everything
            assert await store.list_sessions(model="another-model") == []
            assert [s.id for s in await store.list_sessions(text="review", since=300.0, limit=1)] == ["d"]
            assert await store.list_sessions(limit=0) == []
            # Every listed session carries its counts, as get_session has them.
            for listed in await store.list_sessions(limit=10):
                assert listed == await store.get_session(listed.id)
                assert (listed.message_count, listed.branch_count) == (2, 1)

        self.run(make_store, body)

    def test_session_counts_follow_every_write(self, make_store: Callable[[], Store]) -> None:
        """Messages and branches as the store keeps them across batches: a resent history,
        a fork, a message stored before its parent, a forgotten session written again."""
        turn1 = exchange([text("user", "q1")], answer("a1"), at=1000.0)
        turn2 = exchange(
            [text("user", "q1"), text("assistant", "a1"), text("user", "q2")], answer("a2"), at=2000.0
        )
        fork = exchange(
            [text("user", "q1"), text("assistant", "a1"), text("user", "q2 edited")], answer("b2"), at=3000.0
        )
        late = exchange(
            [text("user", "x1"), text("assistant", "y1"), text("user", "x2")], answer("y2"), session="s-2"
        )

        async def counts(store: TieredStore, session_id: str) -> tuple[int, int]:
            found = await store.get_session(session_id)
            assert found is not None
            (listed,) = [s for s in await store.list_sessions(limit=10) if s.id == session_id]
            assert (listed.message_count, listed.branch_count) == (found.message_count, found.branch_count)
            return found.message_count, found.branch_count

        async def body(store: TieredStore) -> None:
            await store.write(batch_of(turn1))
            assert await counts(store, "s-1") == (2, 1)
            await store.write(batch_of(turn2))
            await store.write(batch_of(turn2))  # resent: nothing new
            assert await counts(store, "s-1") == (4, 1)
            await store.write(batch_of(fork))
            assert await counts(store, "s-1") == (6, 2)
            # The last two messages of a session stored first, their parents after them.
            whole = batch_of(late)
            await store.write(attrs.evolve(whole, messages=whole.messages[2:]))
            assert (await counts(store, "s-2"))[0] == 2
            await store.write(whole)
            assert await counts(store, "s-2") == (4, 1)
            assert await counts(store, "s-1") == (6, 2)  # the other session untouched
            await store.forget_session("s-2")
            assert await store.get_session("s-2") is None
            await store.write(batch_of(exchange([text("user", "again")], session="s-2")))
            assert await counts(store, "s-2") == (1, 1)

        self.run(make_store, body)

    def test_project_summaries(self, make_store: Callable[[], Store]) -> None:
        alive = self._knowledge("Use uv", project="/p/one")
        gone = self._knowledge("Use pip", project="/p/one")
        elsewhere = self._knowledge("Only knowledge here", project="/p/three")
        shared = self._knowledge("Everywhere", scope="global")

        async def body(store: TieredStore) -> None:
            assert await store.project_summaries("spendUsd") == []
            await store.write(
                batch_of(
                    exchange([text("user", "a")], answer("b"), session="s-1", project="/p/one", at=100.0),
                    exchange([text("user", "c")], session="s-2", project="/p/one", at=300.0),
                    exchange([text("user", "d")], answer("e"), session="s-3", project="/p/two", at=200.0),
                )
            )
            await store.set_state("s-1", "spendUsd", 0.25)
            await store.set_state("s-2", "spendUsd", 1.5)
            await store.set_state("s-2", "other", 100)
            await store.set_state("s-3", "spendUsd", {"not": "a number"})
            knowledge = has_tier(store, Tier.KNOWLEDGE)
            if knowledge:
                for entry in (alive, gone, elsewhere, shared):
                    await store.write_knowledge(entry)
                await store.write_knowledge(
                    next_version(gone, updated_by=AUTHOR_USER, at=2000.0, deleted=True)
                )
            found = {p.project: p for p in await store.project_summaries("spendUsd")}
            # Most recent first; a project with knowledge only, with the knowledge tier.
            assert list(found) == ["/p/one", "/p/two", "/p/three"][: 3 if knowledge else 2]
            one, two = found["/p/one"], found["/p/two"]
            assert (one.sessions, one.messages, one.knowledge, one.last_activity) == (
                2,
                3,
                int(knowledge),
                301.0,
            )
            assert one.spend_usd == pytest.approx(1.75)
            assert (two.sessions, two.messages, two.knowledge, two.spend_usd) == (1, 2, 0, 0.0)
            assert two.last_activity == 201.0
            if knowledge:
                three = found["/p/three"]
                assert (three.sessions, three.messages, three.knowledge) == (0, 0, 1)

        self.run(make_store, body)

    def test_session_state(self, make_store: Callable[[], Store]) -> None:
        async def body(store: TieredStore) -> None:
            assert await store.get_state("s-1", "forceMinLayer") is None
            assert await store.get_state("s-1", "forceMinLayer", 0) == 0
            await store.set_state("s-1", "forceMinLayer", 2)
            await store.set_state("s-1", "forceMinLayer", 3)
            await store.set_state("s-1", "calibration", {"ratio": 1.25, "turns": [1, 2]})
            await store.set_state("s-2", "forceMinLayer", 1)
            assert await store.get_state("s-1", "forceMinLayer") == 3
            assert await store.session_state("s-1") == {
                "forceMinLayer": 3,
                "calibration": {"ratio": 1.25, "turns": [1, 2]},
            }

        self.run(make_store, body)

    def test_session_states_in_one_call(self, make_store: Callable[[], Store]) -> None:
        async def body(store: TieredStore) -> None:
            assert await store.get_states("spendUsd", []) == {}
            await store.set_states([])
            await store.set_state("s-1", "spendUsd", 0.5)
            await store.set_states(
                [
                    ("s-1", "spendUsd", 1.25),
                    ("s-2", "spendUsd", 2.0),
                    ("s-2", "spendUsd", 2.5),
                    ("s-3", "other", 1),
                ]
            )
            # The last value of a session's key wins; sessions without the key are left out.
            found = await store.get_states("spendUsd", ["s-1", "s-2", "s-3", "s-4"])
            assert found == {"s-1": 1.25, "s-2": 2.5}
            assert await store.get_state("s-3", "other") == 1
            assert await store.session_state("s-2") == {"spendUsd": 2.5}

        self.run(make_store, body)

    def test_persistence_across_reopen(self, make_store: Callable[[], Store]) -> None:
        if not self.persistent:
            pytest.skip("this store does not persist")
        ex = exchange([text("user", "remember the flamingo")], answer("noted"))

        async def write(store: TieredStore) -> None:
            await store.write(batch_of(ex))
            await store.set_state("s-1", "forceMinLayer", 2)

        async def read(store: TieredStore) -> None:
            assert (await store.stats())["messages"] == 2
            assert await store.get_state("s-1", "forceMinLayer") == 2
            assert [h.text for h in await store.search("flamingo")] == ["[user]\nremember the flamingo"]
            assert await store.write(batch_of(ex)) == 0

        self.run(make_store, write)
        self.reopen(make_store, read)

    def test_search_ranks_by_bm25(self, make_store: Callable[[], Store]) -> None:
        async def body(store: TieredStore) -> None:
            await store.write(self._corpus())
            hits = await store.search("deadlock")
            assert len(hits) == 2 and {h.session_id for h in hits} == {"s-a"}
            assert all(h.score > 0 for h in hits)
            assert hits[0].score >= hits[1].score
            hits = await store.search("postgres deadlock")
            assert hits[0].session_id == "s-a" and len(hits) == 3
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            haiku = await store.search("haiku")
            assert len(haiku) == 1
            h = haiku[0]
            assert (h.session_id, h.project, h.role, h.position) == ("s-b", "/p/one", "user", 0)
            # A hit is a passage: the message's only one here, headed by where it came from.
            assert (h.text, h.passage) == ("[user]\nwrite a haiku about autumn leaves", 0)
            assert (h.start, h.end) == (0, len("write a haiku about autumn leaves"))
            assert h.id == (await store.session_messages("s-b"))[0].id
            assert await store.search("zebra") == []
            assert await store.search("") == []
            assert await store.search("   ") == []

        self.run(make_store, body)

    def test_search_weighs_rare_words_up(self, make_store: Callable[[], Store]) -> None:
        """BM25's IDF: one occurrence of a word few passages hold, in a longer passage,
        outranks three of a word nearly every passage holds (a ranking without corpus
        statistics, PostgreSQL's ts_rank, puts the three first)."""

        async def body(store: TieredStore) -> None:
            everyday = [
                exchange([text("user", f"the widget is fine, check {i}")], session=f"w-{i}", at=10.0 + i)
                for i in range(7)
            ]
            await store.write(
                batch_of(
                    *everyday,
                    exchange([text("user", "widget widget widget")], session="many", at=50.0),
                    exchange(
                        [text("user", "we talked about zanzibar and the weather and the tides at length")],
                        session="rare",
                        at=60.0,
                    ),
                )
            )
            hits = await store.search("widget zanzibar")
            assert hits[0].session_id == "rare"
            assert hits[1].session_id == "many"

        self.run(make_store, body)

    def test_search_finds_words_inside_paths_and_names(self, make_store: Callable[[], Store]) -> None:
        """A file name, a path, a branch or a snake_case name is searched by its words."""

        async def body(store: TieredStore) -> None:
            said = "fixed push_common.go, then rebased onto origin/soph/one-to-one-checkpoints"
            await store.write(batch_of(exchange([text("user", said)], session="paths", at=10.0)))
            for word in ("common", "push", "soph", "checkpoints"):
                assert [h.session_id for h in await store.search(word)] == ["paths"], word

        self.run(make_store, body)

    def test_search_scores_forget_what_was_forgotten(self, make_store: Callable[[], Store]) -> None:
        """A forgotten session leaves nothing in the ranking's statistics: the scores are
        those from before it was written."""

        async def body(store: TieredStore) -> None:
            await store.write(self._corpus())
            before = [(h.id, round(h.score, 6)) for h in await store.search("postgres deadlock")]
            await store.write(
                batch_of(
                    *(
                        exchange([text("user", f"postgres postgres note {i}")], session="noise", at=900.0 + i)
                        for i in range(5)
                    )
                )
            )
            await store.forget_session("noise")
            assert [(h.id, round(h.score, 6)) for h in await store.search("postgres deadlock")] == before

        self.run(make_store, body)

    def test_search_filters_and_limit(self, make_store: Callable[[], Store]) -> None:
        async def body(store: TieredStore) -> None:
            await store.write(self._corpus())
            assert {h.session_id for h in await store.search("postgres", project="/p/two")} == {"s-c"}
            assert {h.session_id for h in await store.search("postgres", session_id="s-a")} == {"s-a"}
            assert await store.search("postgres", session_id="s-b") == []
            assert await store.search("postgres", project="/p/none") == []
            assert len(await store.search("postgres", limit=1)) == 1
            assert len(await store.search("postgres", limit=10)) == 3

        self.run(make_store, body)

    def test_search_sees_new_messages_at_once(self, make_store: Callable[[], Store]) -> None:
        async def body(store: TieredStore) -> None:
            await store.write(self._corpus())
            assert await store.search("kumquat") == []
            for i in range(5):
                await store.write(
                    batch_of(exchange([text("user", f"kumquat number {i}")], session=f"k-{i}", at=1000.0 + i))
                )
                hits = await store.search("kumquat")
                assert len(hits) == i + 1

        self.run(make_store, body)

    def test_search_finds_the_passage(self, make_store: Callable[[], Store]) -> None:
        """A long tool output is searched as passages: the hit is the passage with the
        match (not the whole output), cut by the kernel's rules, and says which tool and
        command produced it."""
        from lore_core.storage.passages import cut, item_text

        noise = "\n".join(
            f"ok   pkg/module{i}   0.{i:02d}s   cached build artefact reused" for i in range(80)
        )
        output = f"{noise}\n--- FAIL: TestLighthouseKeeper (0.01s)\n{noise}"
        call = tool_call("Bash", "c1", {"command": "go test ./..."}, say="Running the tests.")

        async def body(store: TieredStore) -> None:
            await store.write(
                batch_of(exchange([text("user", "run the tests"), call, tool_result("c1", output)]))
            )
            hits = await store.search("TestLighthouseKeeper")
            assert len(hits) == 1
            hit = hits[0]
            stored = next(
                m for m in await store.session_messages("s-1") if m.role == "user" and m.position == 2
            )
            passages = cut(stored.role, stored.blocks)
            assert len(passages) > 3  # the output is several passages
            assert hit.id == stored.id and hit.passage is not None and hit.passage > 0
            assert hit.text == passages[hit.passage].text
            assert "TestLighthouseKeeper" in hit.text and len(hit.text) < len(output) / 3
            assert hit.text.startswith("[tool Bash: go test ./...]")
            assert hit.tool == "Bash"
            assert item_text(stored.role, stored.blocks)[hit.start : hit.end] == passages[hit.passage].body
            # Every passage of the output is searchable, and they come back as such.
            many = await store.search("cached artefact", limit=100)
            assert {h.passage for h in many if h.id == stored.id} == set(range(len(passages)))

        self.run(make_store, body)

    def test_sync_search_index(self, make_store: Callable[[], Store]) -> None:
        async def body(store: TieredStore) -> None:
            await store.write(self._corpus())
            seen: list[tuple[int, int]] = []
            await store.sync_search_index(lambda done, total: seen.append((done, total)))
            assert seen and all(done <= total for done, total in seen)
            assert len(await store.search("postgres")) == 3

        self.run(make_store, body)

    def test_search_text_masks_secrets(self, make_store: Callable[[], Store]) -> None:
        key = "sk-ant-api03-" + "Q" * 40
        ex = exchange([text("user", f"my key is {key} keep it secret")], answer("I will not repeat it"))

        async def body(store: TieredStore) -> None:
            await store.write(batch_of(ex))
            stored = await store.session_messages("s-1")
            assert key not in stored[0].text and key not in repr(stored[0].blocks)
            assert "[REDACTED:anthropic-key]" in stored[0].text
            assert [h.id for h in await store.search("secret")] == [stored[0].id]

        self.run(make_store, body)

    def test_forget_session_removes_it_and_nothing_else(self, make_store: Callable[[], Store]) -> None:
        unique = ("zanzibarquux", "xylophonequartz", "marmalade7741", "yodelfrost", "quokkaplan")

        async def body(store: TieredStore) -> None:
            # What the store has of the tiers a session reaches is forgotten with it.
            distilled = has_tier(store, Tier.DISTILLATIONS)
            vectors = has_tier(store, Tier.VECTORS)
            await store.write(self._forget_corpus())
            ids = [m.id for m in await store.session_messages("s-gone")]
            kept_ids = [m.id for m in await store.session_messages("s-kept")]
            assert len(ids) == 4 and len(kept_ids) == 2
            obs = self._distillation(0, "- quokkaplan: the zanzibarquux plan", ids[:2], session="s-gone")
            meta = self._distillation(1, "## quokkaplan consolidated", [obs.id], session="s-gone", at=6000.0)
            other = self._distillation(0, "- the wombat plan kept", kept_ids, session="s-kept")
            if distilled:
                await store.write_distillation(obs)
                await store.write_distillation(meta, archive=[obs.id])
                await store.write_distillation(other)
            for key in ("forceMinLayer", "recall.restore", "amnesia"):
                await store.set_state("s-gone", key, {"k": key})
            await store.set_state("s-kept", "forceMinLayer", 2)
            if vectors:
                assert await self._embed_pending(store) > 0
            before = (await store.vector_stats(self.MODEL))[self.MODEL]["vectors"] if vectors else 0
            assert await store.search("zanzibarquux")  # found before it is forgotten
            assert {h.session_id for h in await store.search("wombat")} == {"s-gone", "s-kept"}

            report = await store.forget_session("s-gone", keep_state=["amnesia"])

            assert report.session_id == "s-gone" and report.found
            assert (report.messages, report.distillations) == (4, 2 if distilled else 0)
            assert report.passages >= (6 if distilled else 4)  # each item has a passage at least
            assert report.state_keys == ("forceMinLayer", "recall.restore")
            assert report.seconds >= 0 and all(v >= 0 for v in report.steps.values())
            assert await store.get_session("s-gone") is None
            assert await store.session_messages("s-gone") == []
            assert await store.get_messages(ids) == []
            if distilled:
                assert await store.list_distillations("s-gone") == []
                assert await store.get_distillation(obs.id) is None
                assert await store.get_distillation(meta.ref) is None
                assert await store.distilled_message_ids("s-gone") == set()
            assert await store.session_state("s-gone") == {"amnesia": {"k": "amnesia"}}
            for word in unique:
                assert await store.search(word) == [], word
            assert {h.session_id for h in await store.search("wombat")} == {"s-kept"}
            # The other session is untouched.
            assert [s.id for s in await store.list_sessions()] == ["s-kept"]
            assert [m.id for m in await store.session_messages("s-kept")] == kept_ids
            assert await store.session_state("s-kept") == {"forceMinLayer": 2}
            stats = await store.stats()
            assert (stats["sessions"], stats["messages"]) == (1, 2)
            if distilled:
                assert [d.id for d in await store.list_distillations()] == [other.id]
                assert stats["distillations"] == 1
            if vectors:
                assert report.vectors > 0
                after = (await store.vector_stats(self.MODEL))[self.MODEL]
                assert after["vectors"] == before - report.vectors and after["pending"] == 0
                assert await store.pending_embeddings(self.MODEL) == []  # nothing to re-embed
                hits = await store.vector_search(self.MODEL, self._unit(0.0, 0.0, 0.1, 1.0), limit=20)
                assert hits and {h.session_id for h in hits} == {"s-kept"}

            # Forgetting again finds nothing; an unknown session likewise.
            again = await store.forget_session("s-gone", keep_state=["amnesia"])
            assert not again.found and (again.messages, again.distillations, again.vectors) == (0, 0, 0)
            assert not (await store.forget_session("never-there")).found
            # The store itself does not refuse the session later (the kernel's writer decides
            # what of a resent history is stored): written again, it is new.
            assert await store.write(self._forget_corpus()) == 4
            assert [h.session_id for h in await store.search("zanzibarquux")] == ["s-gone"]
            if vectors:
                pending = await store.pending_embeddings(self.MODEL)
                assert {p.session_id for p in pending} == {"s-gone"} and len(pending) == 4

        self.run(make_store, body)

    def test_forget_session_persists_across_reopen(self, make_store: Callable[[], Store]) -> None:
        if not self.persistent:
            pytest.skip("this store does not persist")

        async def write(store: TieredStore) -> None:
            await store.write(self._forget_corpus())
            gone = [m.id for m in await store.session_messages("s-gone")]
            if has_tier(store, Tier.DISTILLATIONS):
                await store.write_distillation(
                    self._distillation(0, "- zanzibarquux", gone, session="s-gone")
                )
            assert (await store.forget_session("s-gone")).found

        async def read(store: TieredStore) -> None:
            assert await store.get_session("s-gone") is None
            assert await store.session_messages("s-gone") == []
            if has_tier(store, Tier.DISTILLATIONS):
                assert await store.list_distillations("s-gone") == []
            assert await store.search("zanzibarquux") == [] and await store.search("yodelfrost") == []
            assert [h.session_id for h in await store.search("wombat")] == ["s-kept", "s-kept"]
            # Writes and searches go on as before.
            more = exchange([text("user", "a fresh ocelot question")], session="s-new", at=3000.0)
            assert await store.write(batch_of(more)) == 1
            assert [h.session_id for h in await store.search("ocelot")] == ["s-new"]

        self.run(make_store, write)
        self.reopen(make_store, read)

    def test_leases_one_holder_at_a_time_until_expiry(self, make_store: Callable[[], Store]) -> None:
        """A store that implements leases grants a key to one holder at a time, renews it for
        that holder, frees it on release or expiry, and keeps it across a reopen (a crashed
        holder's lease runs out, it does not vanish); the default grants every claim."""
        implemented: list[bool] = []

        async def body(store: TieredStore) -> None:
            implemented.append(type(store).claim_lease is not Store.claim_lease)
            if not implemented[0]:
                assert await store.claim_lease("k", "gw-a", 60) and await store.claim_lease("k", "gw-b", 60)
                return
            assert await store.claim_lease("distill:s", "gw-a", 60)
            assert not await store.claim_lease("distill:s", "gw-b", 60)
            assert await store.claim_lease("distill:s", "gw-a", 60)  # renewed
            assert await store.claim_lease("distill:t", "gw-b", 60)  # another key
            await store.release_lease("distill:s", "gw-b")  # not gw-b's: it stays
            assert not await store.claim_lease("distill:s", "gw-b", 60)
            await store.release_lease("distill:s", "gw-a")
            assert await store.claim_lease("distill:s", "gw-b", 60)
            assert await store.claim_lease("short", "gw-a", 0.3)
            assert not await store.claim_lease("short", "gw-b", 60)
            await asyncio.sleep(0.5)
            assert await store.claim_lease("short", "gw-b", 60)  # expired

        async def after(store: TieredStore) -> None:
            assert not await store.claim_lease("distill:t", "gw-a", 60)  # gw-b's still

        self.run(make_store, body)
        if implemented[0] and self.persistent:
            self.reopen(make_store, after)

    def test_leases_between_two_gateways_of_a_shared_store(self, make_store: Callable[[], Store]) -> None:
        """A store several gateways share (``Store.shared``): a lease one instance holds is
        refused to another instance on the same data until it is released or expires."""

        async def body(one: TieredStore) -> None:
            if not one.shared:
                pytest.skip("this store is not shared between gateways")
            two = make_store()
            await two.open()
            try:
                assert await one.claim_lease("distill:s", "gw-a", 60)
                assert not await two.claim_lease("distill:s", "gw-b", 60)
                await one.release_lease("distill:s", "gw-a")
                assert await two.claim_lease("distill:s", "gw-b", 0.3)
                assert not await one.claim_lease("distill:s", "gw-a", 60)
                await asyncio.sleep(0.5)  # gw-b died with it: it runs out
                assert await one.claim_lease("distill:s", "gw-a", 60)
            finally:
                await two.close()

        self.run(make_store, body)

    def test_copy_every_tier_in_and_out(self, make_store: Callable[[], Store]) -> None:
        """``inventory`` and ``set_knowledge_metrics`` let :func:`~lore_core.storage.copy.copy_store`
        carry every tier through the store's interfaces: a full memory copied into this store
        reads back the same (every tier it has; the others are reported, not copied), a second
        copy adds nothing, and this store copied out again equals it."""
        from lore_core.builtin.memory_store import MemoryStore
        from lore_core.storage.copy import TIER_OF, copy_store
        from lore_core.testing.copying import fill_every_tier, picture

        async def body(store: TieredStore) -> None:
            source = MemoryStore()
            await source.open()
            await fill_every_tier(source)
            everything = await picture(source)
            report = await copy_store(source, store)
            assert report.ok, report.as_dict()
            assert {t.tier: t.written for t in report.tiers}["messages"] == len(everything["messages"])
            held = await picture(store)  # the tiers this store has
            expected = {part: everything[part] for part in held}
            assert held == expected
            assert {t.tier for t in report.tiers if t.skipped} == {
                tier for tier, needs in TIER_OF.items() if not has_tier(store, needs)
            }
            again = await copy_store(source, store, merged=True)
            assert again.ok
            added = {t.tier: t.written for t in again.tiers}
            for tier in ("messages", "distillations", "knowledge versions", "decisions", "events"):
                assert added[tier] in (0, None), tier  # None: a tier this store lacks
            assert await picture(store) == expected
            out = MemoryStore()
            await out.open()
            assert (await copy_store(store, out)).ok
            copied_out = await picture(out)
            assert {part: copied_out[part] for part in held} == expected

        self.run(make_store, body)


class DistillationsConformance(TierConformance):
    """:class:`~lore_core.interfaces.DistillationStore`."""

    tier = Tier.DISTILLATIONS

    def test_distillations_roundtrip_with_provenance(self, make_store: Callable[[], Store]) -> None:
        ex = exchange([text("user", "one"), text("assistant", "two"), text("user", "three")], answer("four"))

        async def body(store: TieredStore) -> None:
            await store.write(batch_of(ex))
            ids = [m.id for m in await store.session_messages("s-1")]
            assert await store.list_distillations("s-1") == []
            assert await store.distilled_message_ids("s-1") == set()
            first = self._distillation(0, "- 10:00 user asked about the flux capacitor", ids[:2], at=5000.0)
            second = self._distillation(0, "- 10:05 assistant replaced setup.py", ids[2:], at=6000.0)
            assert await store.write_distillation(first) is True
            assert await store.write_distillation(second) is True
            # The same segment written again (a retry after a crash) is not a duplicate.
            assert await store.write_distillation(first) is False
            other = self._distillation(0, "elsewhere", ["x"], session="s-2", at=5500.0)
            await store.write_distillation(other)
            rows = await store.list_distillations("s-1")
            assert [d.id for d in rows] == [first.id, second.id]
            assert rows[0] == first  # every provenance field survives the round trip
            assert [d.id for d in await store.list_distillations()] == [first.id, other.id, second.id]
            assert await store.distilled_message_ids("s-1") == set(ids)
            assert await store.distilled_message_ids("s-2") == {"x"}
            assert await store.get_distillation(first.id) == first
            assert await store.get_distillation(first.ref) == first
            assert await store.get_distillation("missing") is None

            # A meta-distillation archives what it consolidated, in the same write.
            meta = self._distillation(1, "## Current state\n- flux capacitor fixed", [first.id], at=7000.0)
            assert await store.write_distillation(meta, archive=[first.ref]) is True
            live = await store.list_distillations("s-1", include_archived=False)
            assert [d.id for d in live] == [second.id, meta.id]
            everything = await store.list_distillations("s-1")
            assert [(d.id, d.archived) for d in everything] == [
                (first.id, True),
                (second.id, False),
                (meta.id, False),
            ]
            # Archived gen-0 rows still count as distilled: their messages are not redone.
            assert await store.distilled_message_ids("s-1") == set(ids)
            assert await store.archive_distillations([second.id, first.id, "missing"]) == 1
            assert [d.id for d in await store.list_distillations("s-1", include_archived=False)] == [meta.id]
            assert (await store.stats())["distillations"] == 4

        self.run(make_store, body)

    def test_distillations_are_searchable(self, make_store: Callable[[], Store]) -> None:
        async def body(store: TieredStore) -> None:
            await store.write(self._corpus())
            obs = self._distillation(0, "- 10:00 decided on the wombat cache layout", ["m1"], session="s-a")
            archived = self._distillation(0, "- 09:00 wombat benchmark 42 ms", ["m0"], session="s-a")
            await store.write_distillation(archived)
            await store.archive_distillations([archived.id])
            await store.write_distillation(obs)
            hits = await store.search("wombat")
            assert {h.id for h in hits} == {obs.ref, archived.ref}  # archived rows stay searchable
            hit = next(h for h in hits if h.id == obs.ref)
            assert (hit.session_id, hit.role, hit.project) == ("s-a", "distillation", "/work/alpha")
            assert hit.text == f"[distillation]\n{obs.text}" and hit.passage == 0
            assert await store.search("wombat", session_id="s-b") == []
            assert [h.id for h in await store.search("layout", session_id="s-a")] == [obs.ref]
            # Messages and distillations rank in one corpus.
            mixed = await store.search("deadlock wombat")
            assert {h.role for h in mixed} >= {"distillation", "user"}

        self.run(make_store, body)

    def test_distillations_persist_across_reopen(self, make_store: Callable[[], Store]) -> None:
        if not self.persistent:
            pytest.skip("this store does not persist")
        obs = self._distillation(0, "- the quokka migration finished", ["m1", "m2"])

        async def write(store: TieredStore) -> None:
            await store.write_distillation(obs)

        async def read(store: TieredStore) -> None:
            assert await store.list_distillations("s-1") == [obs]
            assert await store.distilled_message_ids("s-1") == {"m1", "m2"}
            assert [h.id for h in await store.search("quokka")] == [obs.ref]
            assert await store.write_distillation(obs) is False

        self.run(make_store, write)
        self.reopen(make_store, read)


class KnowledgeConformance(TierConformance):
    """:class:`~lore_core.interfaces.KnowledgeStore`: versions, metrics, contradictions, teams."""

    tier = Tier.KNOWLEDGE

    def test_knowledge_new_entry_roundtrips_every_field(self, make_store: Callable[[], Store]) -> None:
        entry = self._knowledge(
            "Use tabs in Makefiles",
            category="gotcha",
            content="make needs a tab before every recipe line ✓",
            sensitivity="sensitive",
            created_by=AUTHOR_CURATOR,
            source_session="s-1",
            source_ref="d:abc123",
            worker_provider="anthropic",
            worker_model="claude-test",
            at=1234.5,
        )
        global_entry = self._knowledge(
            "Commit messages say why", scope="global", category="preference", sensitivity="restricted"
        )

        async def body(store: TieredStore) -> None:
            assert await store.knowledge_versions(entry.logical_id) == []
            assert await store.current_knowledge() == []
            assert await store.write_knowledge(entry) is True
            assert await store.write_knowledge(global_entry) is True
            stored = attrs.evolve(entry, is_current=True)  # set by the store on reads
            assert await store.knowledge_versions(entry.logical_id) == [stored]
            assert await store.current_knowledge("/work/alpha", include_global=False) == [stored]
            assert stored.ref == f"k:{entry.logical_id}"
            (read,) = await store.knowledge_versions(global_entry.logical_id)
            assert read == attrs.evolve(global_entry, is_current=True)
            assert (read.scope, read.project, read.sensitivity) == ("global", "", "restricted")
            assert read.source_session is None and read.worker_model is None
            assert (await store.stats())["knowledge"] == 2

        self.run(make_store, body)

    def test_deleted_knowledge_is_listed_until_restored(self, make_store: Callable[[], Store]) -> None:
        kept = self._knowledge("Kept", at=1000.0)
        first = self._knowledge("Deleted first", at=1000.0)
        later = self._knowledge("Deleted later", scope="global", at=1000.0)
        other = self._knowledge("Elsewhere", project="/work/beta", at=1000.0)

        async def body(store: TieredStore) -> None:
            assert await store.deleted_knowledge() == []
            for entry in (kept, first, later, other):
                await store.write_knowledge(entry)
            for entry, at in ((first, 2000.0), (later, 3000.0), (other, 2500.0)):
                await store.write_knowledge(next_version(entry, updated_by=AUTHOR_USER, at=at, deleted=True))
            found = await store.deleted_knowledge()
            assert [v.logical_id for v in found] == [later.logical_id, other.logical_id, first.logical_id]
            assert all(v.is_deleted and v.is_current and v.version == 2 for v in found)
            assert found[0].title == "Deleted later" and found[0].content == "about Deleted later"
            alpha = await store.deleted_knowledge("/work/alpha")
            assert [v.logical_id for v in alpha] == [later.logical_id, first.logical_id]  # with the global
            only = await store.deleted_knowledge("/work/alpha", include_global=False)
            assert [v.logical_id for v in only] == [first.logical_id]
            (dead,) = only
            await store.write_knowledge(next_version(dead, updated_by=AUTHOR_USER, at=4000.0))  # restored
            assert await store.deleted_knowledge("/work/alpha", include_global=False) == []
            assert kept.logical_id not in {v.logical_id for v in await store.deleted_knowledge()}

        self.run(make_store, body)

    def test_knowledge_edit_appends_a_version(self, make_store: Callable[[], Store]) -> None:
        first = self._knowledge(
            "Database", content="we use SQLite", created_by=AUTHOR_CURATOR, source_ref="d:1"
        )
        second = next_version(
            first, updated_by=AUTHOR_USER, at=2000.0, content="we use DuckDB", title="Database choice"
        )

        async def body(store: TieredStore) -> None:
            await store.write_knowledge(first)
            assert second.version == 2 and second.version_id != first.version_id
            assert await store.write_knowledge(second) is True
            versions = await store.knowledge_versions(first.logical_id)
            assert [(v.version, v.is_current) for v in versions] == [(1, False), (2, True)]
            # Version 1 is immutable: exactly as written, only no longer current.
            assert versions[0] == first
            assert versions[1] == attrs.evolve(second, is_current=True)
            # The edit's provenance is its own; the creator is copied forward.
            assert (versions[1].created_by, versions[1].updated_by) == (AUTHOR_CURATOR, AUTHOR_USER)
            assert versions[1].source_ref is None
            current = await store.current_knowledge("/work/alpha")
            assert [(v.logical_id, v.version, v.content) for v in current] == [
                (first.logical_id, 2, "we use DuckDB")
            ]
            assert (await store.stats())["knowledge"] == 1

        self.run(make_store, body)

    def test_knowledge_write_is_idempotent_and_refuses_conflicts(
        self, make_store: Callable[[], Store]
    ) -> None:
        first = self._knowledge("Retries", content="retry three times")
        second = next_version(first, updated_by=AUTHOR_USER, at=2000.0, content="retry five times")

        async def body(store: TieredStore) -> None:
            assert await store.write_knowledge(first) is True
            before = await store.knowledge_versions(first.logical_id)
            # The same version again (a retry) is skipped, whatever it carries.
            assert await store.write_knowledge(first) is False
            assert await store.write_knowledge(attrs.evolve(first, content="changed")) is False
            assert await store.knowledge_versions(first.logical_id) == before
            # A version number that skips, or repeats one already stored under a new id.
            skip = next_version(second, updated_by=AUTHOR_USER, content="skipped")
            with pytest.raises(KnowledgeConflict):
                await store.write_knowledge(skip)
            repeat = attrs.evolve(first, version_id=f"{first.logical_id}.again", content="repeated")
            with pytest.raises(KnowledgeConflict):
                await store.write_knowledge(repeat)
            # A first write must be version 1.
            orphan = attrs.evolve(
                self._knowledge("Orphan", logical_id="orphan-entry"), version=2, version_id="orphan-entry.2"
            )
            with pytest.raises(KnowledgeConflict):
                await store.write_knowledge(orphan)
            # Nothing of the refused writes is stored.
            assert await store.knowledge_versions(first.logical_id) == before
            assert await store.knowledge_versions("orphan-entry") == []
            assert "orphan-entry" not in await store.knowledge_metrics()
            assert [v.content for v in await store.current_knowledge()] == ["retry three times"]
            # The store still writes after a refusal.
            assert await store.write_knowledge(second) is True
            # Two edits made from the same version get the same version id: the second is
            # skipped as already stored (False), it does not overwrite the first.
            rival = next_version(first, updated_by=AUTHOR_CURATOR, content="retry forever")
            assert rival.version_id == second.version_id
            assert await store.write_knowledge(rival) is False
            assert [v.content for v in await store.current_knowledge()] == ["retry five times"]

        self.run(make_store, body)

    def test_knowledge_delete_appends_a_death_certificate(self, make_store: Callable[[], Store]) -> None:
        tabs = self._knowledge("Use tabs")
        beta = self._knowledge("Beta only", project="/work/beta")
        everywhere = self._knowledge("Everywhere rule", scope="global")
        kept = self._knowledge("Keep me")

        async def body(store: TieredStore) -> None:
            for entry in (tabs, beta, everywhere, kept):
                await store.write_knowledge(entry)
            assert await store.knowledge_tombstone("/work/alpha", logical_id=tabs.logical_id) is None
            assert await store.knowledge_tombstone("/work/alpha", title="Use tabs") is None
            certificates = {}
            for entry in (tabs, beta, everywhere):
                dead = next_version(entry, updated_by=AUTHOR_USER, at=3000.0, deleted=True, source_ref="cli")
                assert await store.write_knowledge(dead) is True
                certificates[entry.logical_id] = attrs.evolve(dead, is_current=True)

            assert [v.logical_id for v in await store.current_knowledge()] == [kept.logical_id]
            assert (await store.stats())["knowledge"] == 1
            # The history keeps every version, the certificate last and current.
            history = await store.knowledge_versions(tabs.logical_id)
            assert [(v.version, v.is_deleted, v.is_current) for v in history] == [
                (1, False, False),
                (2, True, True),
            ]
            assert history[0] == tabs

            expected = certificates[tabs.logical_id]
            assert await store.knowledge_tombstone("/work/alpha", logical_id=tabs.logical_id) == expected
            # By title, compared normalised: case, whitespace, edge punctuation, NFKC.
            for title in ("Use tabs", "  use   TABS!! ", "**Use tabs.**", self._FULLWIDTH):
                assert await store.knowledge_tombstone("/work/alpha", title=title) == expected, title
            assert await store.knowledge_tombstone("/work/alpha", title="Use tab") is None
            # Global certificates count for every project; another project's do not.
            wanted = certificates[everywhere.logical_id]
            assert await store.knowledge_tombstone("/work/alpha", title="everywhere rule") == wanted
            assert await store.knowledge_tombstone("/work/gamma", title="Everywhere rule") == wanted
            assert await store.knowledge_tombstone("/work/alpha", title="Beta only") is None
            assert (
                await store.knowledge_tombstone("/work/beta", title="beta only")
                == certificates[beta.logical_id]
            )
            # A logical id names one entry wherever it lives.
            by_id = await store.knowledge_tombstone("/work/alpha", logical_id=beta.logical_id)
            assert by_id == certificates[beta.logical_id]
            # An unknown id falls back to the title; an alive entry has no tombstone.
            assert (
                await store.knowledge_tombstone("/work/alpha", logical_id="unknown-id", title="use tabs")
                == expected
            )
            assert await store.knowledge_tombstone("/work/alpha", logical_id=kept.logical_id) is None
            assert await store.knowledge_tombstone("/work/alpha", title="Keep me") is None
            assert await store.knowledge_tombstone("/work/alpha") is None

        self.run(make_store, body)

    def test_knowledge_tombstone_after_recreate_and_undelete(self, make_store: Callable[[], Store]) -> None:
        old = self._knowledge("Prefer ruff", content="ruff, not flake8")
        dead = next_version(old, updated_by=AUTHOR_USER, at=2000.0, deleted=True)
        # Re-created by hand under the same title: a new entry, a new logical id.
        new = self._knowledge("prefer ruff", content="ruff for lint and format", at=2500.0)

        async def body(store: TieredStore) -> None:
            await store.write_knowledge(old)
            await store.write_knowledge(dead)
            await store.write_knowledge(new)
            certificate = attrs.evolve(dead, is_current=True)
            # The import lanes' check by title still sees the old certificate ...
            assert await store.knowledge_tombstone("/work/alpha", title="Prefer ruff") == certificate
            assert await store.knowledge_tombstone("/work/alpha", logical_id=old.logical_id) == certificate
            # ... while the new entry's own (alive) state decides when its id is known.
            assert (
                await store.knowledge_tombstone("/work/alpha", logical_id=new.logical_id, title="Prefer ruff")
                is None
            )
            assert [v.logical_id for v in await store.current_knowledge("/work/alpha")] == [new.logical_id]

            # Editing the deleted entry un-deletes it: a version after the certificate.
            revived = next_version(dead, updated_by=AUTHOR_USER, at=3000.0, content="ruff again")
            assert revived.version == 3 and not revived.is_deleted
            assert await store.write_knowledge(revived) is True
            assert await store.knowledge_tombstone("/work/alpha", logical_id=old.logical_id) is None
            assert await store.knowledge_tombstone("/work/alpha", title="Prefer ruff") is None
            history = await store.knowledge_versions(old.logical_id)
            assert [(v.version, v.is_deleted, v.is_current) for v in history] == [
                (1, False, False),
                (2, True, False),
                (3, False, True),
            ]
            current = await store.current_knowledge("/work/alpha")
            assert {v.logical_id for v in current} == {old.logical_id, new.logical_id}

        self.run(make_store, body)

    def test_deletions_are_found_in_the_base_table_not_the_alive_view(
        self, make_store: Callable[[], Store]
    ) -> None:
        """The trap every import lane must avoid: asking the "current and alive" view whether
        the user deleted an entry. By definition it cannot show a death certificate, so the
        answer is always "no" and the deleted entry would be imported again; only
        knowledge_tombstone (the base table) sees it."""
        entry = self._knowledge("Never use eval", category="gotcha")
        dead = next_version(entry, updated_by=AUTHOR_USER, at=2000.0, deleted=True)

        async def body(store: TieredStore) -> None:
            await store.write_knowledge(entry)
            await store.write_knowledge(dead)
            wanted = normalize_title("never use EVAL.")
            for view in (
                await store.current_knowledge("/work/alpha"),
                await store.current_knowledge("/work/alpha", include_global=False),
                await store.current_knowledge(None),
            ):
                assert [v for v in view if normalize_title(v.title) == wanted] == []
            found = await store.knowledge_tombstone("/work/alpha", title="never use EVAL.")
            assert found is not None
            assert (found.logical_id, found.version, found.is_deleted, found.is_current) == (
                entry.logical_id,
                2,
                True,
                True,
            )

        self.run(make_store, body)

    def test_current_knowledge_filters_by_project_in_canonical_order(
        self, make_store: Callable[[], Store]
    ) -> None:
        gotcha = self._knowledge("Zebra crossing", category="gotcha")
        banana = self._knowledge("Banana", category="decision")
        apple = self._knowledge("apple", category="decision")  # before "Banana" once normalised
        same_b = self._knowledge("Same title", logical_id="bbbb-entry", category="pattern")
        same_a = self._knowledge("same title.", logical_id="aaaa-entry", category="pattern")  # tie: by id
        architecture = self._knowledge("Layers", category="architecture")
        preference = self._knowledge("Short answers", category="preference", scope="global")
        beta = self._knowledge("Beta decision", category="decision", project="/work/beta")
        gone = self._knowledge("Gone", category="decision")
        edited = self._knowledge("Caching", category="pattern", content="old")

        async def body(store: TieredStore) -> None:
            for entry in (
                gotcha,
                banana,
                apple,
                same_b,
                same_a,
                architecture,
                preference,
                beta,
                gone,
                edited,
            ):
                await store.write_knowledge(entry)
            await store.write_knowledge(next_version(gone, updated_by=AUTHOR_USER, deleted=True))
            await store.write_knowledge(next_version(edited, updated_by=AUTHOR_USER, content="new"))

            alpha = await store.current_knowledge("/work/alpha")
            assert [v.title for v in alpha] == [
                "apple",
                "Banana",
                "Caching",
                "same title.",
                "Same title",
                "Short answers",
                "Layers",
                "Zebra crossing",
            ]
            assert alpha == sorted(alpha, key=canonical_order)
            assert all(v.is_current and not v.is_deleted for v in alpha)
            assert next(v for v in alpha if v.title == "Caching").content == "new"
            local = await store.current_knowledge("/work/alpha", include_global=False)
            assert [v.title for v in local] == [v.title for v in alpha if v.title != "Short answers"]
            assert [v.title for v in await store.current_knowledge("/work/beta")] == [
                "Beta decision",
                "Short answers",
            ]
            assert [v.title for v in await store.current_knowledge("/work/nowhere")] == ["Short answers"]
            assert await store.current_knowledge("/work/nowhere", include_global=False) == []
            everything = await store.current_knowledge(None)
            assert [v.title for v in everything] == [
                "apple",
                "Banana",
                "Beta decision",
                "Caching",
                "same title.",
                "Same title",
                "Short answers",
                "Layers",
                "Zebra crossing",
            ]
            assert await store.current_knowledge() == everything

        self.run(make_store, body)

    def test_knowledge_metrics_created_reinforced_and_decayed(self, make_store: Callable[[], Store]) -> None:
        by_user = self._knowledge("By user", created_by=AUTHOR_USER, at=1000.0)
        by_curator = self._knowledge("By curator", created_by=AUTHOR_CURATOR, at=1100.0)
        by_import = self._knowledge("By import", created_by=AUTHOR_IMPORT, at=1200.0)

        def numbers(metrics: dict[str, KnowledgeMetric]) -> dict[str, tuple[Any, float | None]]:
            return {i: (pytest.approx(m.confidence), m.last_reinforced_at) for i, m in metrics.items()}

        async def body(store: TieredStore) -> None:
            assert await store.knowledge_metrics() == {}
            for entry in (by_user, by_curator, by_import):
                await store.write_knowledge(entry)
            ids = [by_user.logical_id, by_curator.logical_id, by_import.logical_id]
            created = await store.knowledge_metrics(ids)
            assert created == {
                by_user.logical_id: KnowledgeMetric(
                    by_user.logical_id, INITIAL_CONFIDENCE[AUTHOR_USER], 1000.0
                ),
                by_curator.logical_id: KnowledgeMetric(
                    by_curator.logical_id, INITIAL_CONFIDENCE[AUTHOR_CURATOR], 1100.0
                ),
                by_import.logical_id: KnowledgeMetric(
                    by_import.logical_id, INITIAL_CONFIDENCE[AUTHOR_IMPORT], 1200.0
                ),
            }
            # An edit and a death certificate leave the register as it was.
            await store.write_knowledge(
                next_version(by_user, updated_by=AUTHOR_CURATOR, at=1500.0, content="x")
            )
            await store.write_knowledge(
                next_version(by_curator, updated_by=AUTHOR_USER, at=1600.0, deleted=True)
            )
            assert await store.knowledge_metrics(ids) == created
            assert await store.knowledge_metrics([by_import.logical_id, "unknown"]) == {
                by_import.logical_id: created[by_import.logical_id]
            }
            assert await store.knowledge_metrics([]) == {}

            # Reinforcement adds, caps at 1.0 and stamps the time; a missing metric starts at
            # the default. Repeated ids count once.
            changed = await store.reinforce_knowledge(
                [by_user.logical_id, by_curator.logical_id, by_curator.logical_id, "no-metric-yet"],
                0.15,
                3000.0,
            )
            assert changed == 3
            assert await store.reinforce_knowledge([], 0.15, 3000.0) == 0
            assert numbers(await store.knowledge_metrics()) == {
                by_user.logical_id: (1.0, 3000.0),
                by_curator.logical_id: (INITIAL_CONFIDENCE[AUTHOR_CURATOR] + 0.15, 3000.0),
                by_import.logical_id: (INITIAL_CONFIDENCE[AUTHOR_IMPORT], 1200.0),
                "no-metric-yet": (DEFAULT_CONFIDENCE + 0.15, 3000.0),
            }

            # Decay touches only entries not reinforced since the given time.
            assert await store.decay_knowledge(0.5, not_reinforced_since=3000.0) == 1
            assert await store.decay_knowledge(0.5, not_reinforced_since=1000.0) == 0
            assert numbers(await store.knowledge_metrics()) == {
                by_user.logical_id: (1.0, 3000.0),
                by_curator.logical_id: (INITIAL_CONFIDENCE[AUTHOR_CURATOR] + 0.15, 3000.0),
                by_import.logical_id: (INITIAL_CONFIDENCE[AUTHOR_IMPORT] * 0.5, 1200.0),
                "no-metric-yet": (DEFAULT_CONFIDENCE + 0.15, 3000.0),
            }
            assert await store.decay_knowledge(0.9, not_reinforced_since=3001.0) == 4
            assert (await store.knowledge_metrics([by_user.logical_id]))[by_user.logical_id].confidence == (
                pytest.approx(0.9)
            )

        self.run(make_store, body)

    def test_knowledge_persists_across_reopen(self, make_store: Callable[[], Store]) -> None:
        if not self.persistent:
            pytest.skip("this store does not persist")
        edited = self._knowledge("Indent with spaces", created_by=AUTHOR_IMPORT, source_ref=".lore.md")
        second = next_version(edited, updated_by=AUTHOR_USER, at=2000.0, content="four spaces")
        deleted = self._knowledge("Old habit", scope="global")
        certificate = next_version(deleted, updated_by=AUTHOR_USER, at=2100.0, deleted=True)

        async def write(store: TieredStore) -> None:
            for version in (edited, second, deleted, certificate):
                await store.write_knowledge(version)
            await store.reinforce_knowledge([edited.logical_id], 0.05, 2500.0)

        async def read(store: TieredStore) -> None:
            assert await store.knowledge_versions(edited.logical_id) == [
                edited,
                attrs.evolve(second, is_current=True),
            ]
            assert await store.current_knowledge("/work/alpha") == [attrs.evolve(second, is_current=True)]
            found = await store.knowledge_tombstone("/work/other", title="old habit")
            assert found == attrs.evolve(certificate, is_current=True)
            metrics = await store.knowledge_metrics()
            assert set(metrics) == {edited.logical_id, deleted.logical_id}
            assert metrics[edited.logical_id].confidence == pytest.approx(
                INITIAL_CONFIDENCE[AUTHOR_IMPORT] + 0.05
            )
            assert metrics[edited.logical_id].last_reinforced_at == 2500.0
            assert (await store.stats())["knowledge"] == 1
            assert await store.write_knowledge(second) is False
            with pytest.raises(KnowledgeConflict):
                await store.write_knowledge(attrs.evolve(second, version_id="x.2"))

        self.run(make_store, write)
        self.reopen(make_store, read)

    def test_contradictions_keep_the_latest_judgement_per_pair(self, make_store: Callable[[], Store]) -> None:
        def judged(a: str, b: str, status: str, at: float, project: str = "/work/alpha", **kw: Any) -> Any:
            return KnowledgeContradiction(a, b, project, status, f"fp-{a}", f"fp-{b}", at, "worker:x/y", **kw)

        first = judged("aaaa", "bbbb", "open", 10.0, reason="tabs against spaces")
        other = judged("aaaa", "cccc", "cleared", 20.0)
        elsewhere = judged("dddd", "eeee", "open", 30.0, project="/work/beta")

        async def write(store: TieredStore) -> None:
            assert await store.knowledge_contradictions() == []
            for judgement in (first, other, elsewhere):
                await store.record_contradiction(judgement)
            # A person keeps one: the same pair's record is replaced, not added.
            await store.record_contradiction(
                attrs.evolve(first, status="resolved", judged_at=40.0, judged_by="user", kept_id="aaaa")
            )

        async def read(store: TieredStore) -> None:
            resolved = attrs.evolve(
                first, status="resolved", judged_at=40.0, judged_by="user", kept_id="aaaa"
            )
            assert await store.knowledge_contradictions() == [resolved, elsewhere, other]
            assert await store.knowledge_contradictions("/work/alpha") == [resolved, other]
            assert await store.knowledge_contradictions("/work/alpha", statuses=["open", "cleared"]) == [
                other
            ]
            assert await store.knowledge_contradictions(statuses=["open"]) == [elsewhere]
            assert await store.knowledge_contradictions("/work/none") == []

        if self.persistent:
            self.run(make_store, write)
            self.reopen(make_store, read)
        else:
            self.run(make_store, lambda store: _both(store, write, read))

    def test_team_bindings_policies_and_decisions(self, make_store: Callable[[], Store]) -> None:
        from lore_core.storage.knowledge import TeamBinding, make_decision

        approve = make_decision("aaaa", "fp1", "approved", "ana", 100.000001, project="/work/alpha")
        reject = make_decision("aaaa", "fp1", "rejected", "bo", 100.000001, project="/work/alpha")
        other = make_decision("bbbb", "fp2", "approved", "ana", 50.0, project="/work/beta")

        async def write(store: TieredStore) -> None:
            assert await store.team_binding("/work/alpha") is None
            assert await store.knowledge_decisions() == []
            await store.set_team_binding("/work/alpha", TeamBinding("/work/alpha", "core", 10.0, "manual"))
            await store.set_team_binding("/work/beta", TeamBinding("/work/beta", "core", 11.0))
            await store.set_team_binding("/work/gamma", TeamBinding("/work/gamma", "web", 12.0))
            await store.set_team_binding("/work/gamma", None)
            await store.set_team_policy("core", "auto")
            await store.set_team_policy("core", "manual")
            assert await store.record_decisions([approve, reject, approve]) == 2
            # The same decision again, even recorded under another clone's project path: held once.
            assert await store.record_decisions([attrs.evolve(approve, project="/elsewhere"), other]) == 1

        async def read(store: TieredStore) -> None:
            assert await store.team_binding("/work/alpha") == TeamBinding(
                "/work/alpha", "core", 10.0, "manual"
            )
            assert await store.team_binding("/work/beta") == TeamBinding("/work/beta", "core", 11.0, None)
            assert await store.team_binding("/work/gamma") is None
            assert await store.team_policy("core") == "manual"
            assert await store.team_policy("web") is None
            held = await store.knowledge_decisions()
            assert held == sorted(
                [approve, reject, other], key=lambda d: (d.logical_id, d.decided_at, d.decision_id)
            )
            assert held[0].decided_at == 100.000001
            assert await store.knowledge_decisions("/work/beta") == [other]
            assert await store.knowledge_decisions(logical_ids=["bbbb"]) == [other]
            assert await store.knowledge_decisions("/work/alpha", logical_ids=["bbbb"]) == []

        if self.persistent:
            self.run(make_store, write)
            self.reopen(make_store, read)
        else:
            self.run(make_store, lambda store: _both(store, write, read))


class EntitiesConformance(TierConformance):
    """:class:`~lore_core.interfaces.EntityStore`."""

    tier = Tier.ENTITIES

    def test_entities_roundtrip_and_replace(self, make_store: Callable[[], Store]) -> None:
        from lore_core.storage.entities import AUTHOR_CURATOR, Relation

        target = self._entity("Redis")
        entity = self._entity(
            "PostgreSQL ✓",
            aliases=["pg", "postgres", "Postgres DB"],
            relations=[Relation("caches_with", target.id), Relation("runs_on", "ffff0000ffff0000")],
            sensitivity="sensitive",
            created_by=AUTHOR_CURATOR,
            updated_by=AUTHOR_USER,
            created_at=1234.5,
            updated_at=1300.25,
        )

        async def body(store: TieredStore) -> None:
            assert await store.list_entities() == []
            assert await store.get_entity(entity.id) is None
            await store.write_entities([entity, target])
            assert await store.get_entity(entity.id) == entity
            assert await store.list_entities("/work/alpha") == [entity, target]  # by normalised name
            assert (await store.stats())["entities"] == 2
            # A stored id is replaced whole: a merge leaves a redirect in the same write.
            renamed = attrs.evolve(entity, aliases=["pg"], relations=[], updated_at=2000.0)
            redirect = attrs.evolve(target, merged_into=entity.id, updated_at=2000.0)
            await store.write_entities([renamed, redirect])
            assert await store.get_entity(entity.id) == renamed
            assert await store.get_entity(target.id) == redirect  # a merged id still opens
            assert await store.list_entities("/work/alpha") == [renamed]
            assert await store.list_entities("/work/alpha", include_merged=True) == [renamed, redirect]
            assert (await store.stats())["entities"] == 1
            await store.write_entities([])

        self.run(make_store, body)

    def test_entities_listed_by_project_with_global_ones(self, make_store: Callable[[], Store]) -> None:
        alpha = self._entity("billing-api", kind="repository")
        beta = self._entity("Billing API", project="/work/beta")
        shared = self._entity("alice", kind="person", project="")
        # Sorted by the normalised name: "Zeta" after "billing-api" despite the capital.
        zeta = self._entity("Zeta", kind="tool")

        async def body(store: TieredStore) -> None:
            await store.write_entities([zeta, shared, beta, alpha])
            assert await store.list_entities("/work/alpha") == [shared, alpha, zeta]
            assert await store.list_entities("/work/alpha", include_global=False) == [alpha, zeta]
            assert await store.list_entities("/work/beta") == [shared, beta]
            assert await store.list_entities("") == [shared]
            everything = await store.list_entities()
            assert sorted(e.id for e in everything) == sorted(e.id for e in (alpha, beta, shared, zeta))
            assert await store.list_entities("/work/none", include_global=False) == []

        self.run(make_store, body)

    def test_entities_deleted_with_the_others_rewritten_in_one_call(
        self, make_store: Callable[[], Store]
    ) -> None:
        from lore_core.storage.entities import Entity, Relation

        async def body(store: TieredStore) -> None:
            pg = Entity("e1", "service", "PostgreSQL", ["pg"], project="/work/alpha")
            old = Entity("e2", "service", "Postgres 9", project="/work/alpha", merged_into="e1")
            api = Entity(
                "e3", "service", "billing-api", relations=[Relation("uses", "e1")], project="/work/alpha"
            )
            await store.write_entities([pg, old, api])
            dropped = Entity("e3", "service", "billing-api", project="/work/alpha", updated_at=5.0)
            assert await store.delete_entities(["e1", "e2", "nope"], [dropped]) == 2
            assert await store.get_entity("e1") is None and await store.get_entity("e2") is None
            assert await store.list_entities(None, include_merged=True) == [dropped]
            assert await store.delete_entities(["e1"]) == 0

        self.run(make_store, body)

    def test_entities_persist_across_reopen(self, make_store: Callable[[], Store]) -> None:
        if not self.persistent:
            pytest.skip("this store does not persist")
        from lore_core.storage.entities import Relation

        kept = self._entity("Jane Doe", kind="person", aliases=["jd", "Jane"], project="")
        other = self._entity("J. Doe", kind="person", merged_into=kept.id, project="")
        tool = self._entity("golangci-lint", kind="tool", relations=[Relation("configured_by", kept.id)])

        async def write(store: TieredStore) -> None:
            await store.write_entities([kept, other, tool])

        async def read(store: TieredStore) -> None:
            assert await store.get_entity(other.id) == other
            assert await store.list_entities("/work/alpha") == [tool, kept]
            assert await store.list_entities("/work/alpha", include_merged=True) == [tool, other, kept]

        self.run(make_store, write)
        self.reopen(make_store, read)


class EventLogConformance(TierConformance):
    """:class:`~lore_core.interfaces.EventLogStore`."""

    tier = Tier.EVENTS

    def test_event_log_numbers_runs_and_keeps_their_checkpoints(
        self, make_store: Callable[[], Store]
    ) -> None:
        from lore_core.storage.events import NewEvent, WorkingFact, WorkingSnapshot

        note = NewEvent("note", "the parser fails on empty input")
        editing = NewEvent("status", "editing parser.py", working=True, key="editing")

        async def write(store: TieredStore) -> None:
            assert await store.run_state("/work/alpha", "build") is None
            assert await store.run_events("/work/alpha", "build") == []
            assert await store.append_events("/work/alpha", "build", [note, editing], 10.0) == [1, 2]
            assert await store.append_events("/work/alpha", "build", [note], 11.0) == [3]
            # Another run, and the same run name in another project, count on their own.
            assert await store.append_events("/work/alpha", "review", [note], 12.0) == [1]
            assert await store.append_events("/work/beta", "build", [note], 13.0) == [1]
            snapshot = WorkingSnapshot(2, (WorkingFact("editing", "editing parser.py", 2, "status"),), 14.0)
            await store.advance_run("/work/alpha", "build", 2, snapshot, 14.0)
            await store.advance_run("/work/alpha", "build", 1, None, 15.0)  # never backwards
            await store.advance_run("/work/alpha", "build", 99, None, 15.0)  # never past the last
            await store.advance_run("/work/none", "build", 1, None, 15.0)  # no such run: nothing

        async def read(store: TieredStore) -> None:
            state = await store.run_state("/work/alpha", "build")
            assert state is not None and (state.last_seq, state.covered_seq, state.created_at) == (3, 3, 10.0)
            events = await store.run_events("/work/alpha", "build")
            assert [(e.seq, e.kind, e.working, e.key, e.created_at) for e in events] == [
                (1, "note", False, None, 10.0),
                (2, "status", True, "editing", 10.0),
                (3, "note", False, None, 11.0),
            ]
            assert events[1].content == "editing parser.py"
            assert [e.seq for e in await store.run_events("/work/alpha", "build", after_seq=1)] == [2, 3]
            assert [e.seq for e in await store.run_events("/work/alpha", "build", upto_seq=2)] == [1, 2]
            assert [e.seq for e in await store.run_events("/work/alpha", "build", limit=2)] == [1, 2]
            newest = await store.run_events("/work/alpha", "build", limit=2, newest=True)
            assert [e.seq for e in newest] == [2, 3]
            snapshot = await store.working_snapshot("/work/alpha", "build")
            assert snapshot is not None and snapshot.as_of_seq == 2
            assert snapshot.facts == (WorkingFact("editing", "editing parser.py", 2, "status"),)
            assert await store.working_snapshot("/work/alpha", "review") is None
            behind = await store.runs_behind()
            assert [(s.project, s.run) for s in behind] == [
                ("/work/alpha", "review"),
                ("/work/beta", "build"),
            ]
            # Every run, most recently updated first.
            runs = await store.list_runs()
            assert [(s.project, s.run, s.last_seq, s.covered_seq) for s in runs] == [
                ("/work/alpha", "build", 3, 3),
                ("/work/beta", "build", 1, 0),
                ("/work/alpha", "review", 1, 0),
            ]
            assert [s.run for s in await store.list_runs("/work/alpha")] == ["build", "review"]
            assert [s.run for s in await store.list_runs(limit=1)] == ["build"]
            assert await store.list_runs("/work/none") == []

        if self.persistent:
            self.run(make_store, write)
            self.reopen(make_store, read)
        else:
            self.run(make_store, lambda store: _both(store, write, read))


class VectorsConformance(TierConformance):
    """:class:`~lore_core.interfaces.VectorStore`."""

    tier = Tier.VECTORS

    def test_vectors_pending_then_written(self, make_store: Callable[[], Store]) -> None:
        from lore_core.storage.records import ItemVectors

        async def body(store: TieredStore) -> None:
            self._require(store, Tier.DISTILLATIONS)
            assert await store.pending_embeddings(self.MODEL) == []
            await store.write(self._corpus())
            obs = self._distillation(0, "- wombat cache layout decided", ["m1"], session="s-a")
            await store.write_distillation(obs)
            pending = await store.pending_embeddings(self.MODEL)
            assert [(p.kind, p.session_id) for p in pending] == [
                ("message", "s-a"), ("message", "s-a"), ("message", "s-b"), ("message", "s-b"),
                ("message", "s-c"), ("message", "s-c"), ("distillation", "s-a"),
            ]  # fmt: skip
            assert [p.cursor for p in pending] == sorted(p.cursor for p in pending)
            assert len({p.cursor for p in pending}) == len(pending)
            assert pending[-1].id == obs.id and pending[-1].text == obs.text
            assert pending[-1].project == "/work/alpha"
            assert pending[0].text == "the migration to postgres failed with a deadlock error"
            assert pending[0].project == "/p/one"
            assert [p.id for p in await store.pending_embeddings(self.MODEL, limit=2)] == [
                p.id for p in pending[:2]
            ]
            # A prefix is written (the second item has two chunks, the third no text at all).
            first = [
                ItemVectors(pending[0], [self._axis(pending[0].text)]),
                ItemVectors(pending[1], [self._unit(0, 0, 1, 0), self._unit(1, 0, 0, 0)]),
                ItemVectors(pending[2], []),
            ]
            assert await store.write_vectors(self.MODEL, 4, first) == 3
            assert [p.id for p in await store.pending_embeddings(self.MODEL)] == [p.id for p in pending[3:]]
            stats = (await store.vector_stats(self.MODEL))[self.MODEL]
            assert (stats["dimensions"], stats["vectors"], stats["pending"]) == (4, 3, 4)
            # Another model sees everything pending and its own empty index.
            assert len(await store.pending_embeddings("other-model")) == 7
            assert (await store.vector_stats("other-model"))["other-model"]["vectors"] == 0
            assert await self._embed_pending(store) == 4
            assert await store.pending_embeddings(self.MODEL) == []
            assert (await store.vector_stats())[self.MODEL]["vectors"] == 7
            # New arrivals are pending again.
            await store.write(batch_of(exchange([text("user", "a new haiku")], session="s-d", at=900.0)))
            assert [p.text for p in await store.pending_embeddings(self.MODEL)] == ["a new haiku"]

        self.run(make_store, body)

    def test_a_passage_with_facets_is_one_hit_at_its_best(self, make_store: Callable[[], Store]) -> None:
        """A passage written with several vectors (its own and its facets', the indexer's
        sentences of user text) is found by any of them and counts once, at its best."""
        from lore_core.storage.records import ItemVectors

        async def body(store: TieredStore) -> None:
            await store.write(self._corpus())
            pending = await store.pending_embeddings(self.MODEL)
            # The first message: its passage's own vector on one axis, two facets on others.
            first = ItemVectors(
                pending[0],
                [self._unit(1, 0, 0, 0), self._unit(0, 0, 1, 0), self._unit(0, 0, 0.6, 0.8)],
                [0, 0, 0],
            )
            rest = [ItemVectors(i, [self._unit(0.1, 1.0, 0, 0)]) for i in pending[1:]]
            assert await store.write_vectors(self.MODEL, 4, [first, *rest]) == 3 + len(rest)
            hits = await store.vector_search(self.MODEL, self._unit(0, 0, 1, 0), limit=10)
            assert [h.id for h in hits].count(pending[0].id) == 1
            assert hits[0].id == pending[0].id and hits[0].passage == 0
            assert hits[0].score == pytest.approx(1.0, abs=1e-4)  # the best facet's
            # A limit is a most: the passages of the best vectors, each once.
            three = await store.vector_search(self.MODEL, self._unit(0, 0, 1, 0), limit=3)
            assert 1 <= len(three) <= 3 and three[0].id == pending[0].id
            assert len({(h.id, h.passage) for h in three}) == len(three)

        self.run(make_store, body)

    def test_vector_search_ranks_and_filters(self, make_store: Callable[[], Store]) -> None:
        async def body(store: TieredStore) -> None:
            self._require(store, Tier.DISTILLATIONS)
            await store.write(self._corpus())
            archived = self._distillation(0, "- 09:00 wombat benchmark 42 ms", ["m0"], session="s-a")
            await store.write_distillation(archived)
            await store.archive_distillations([archived.id])
            await self._embed_pending(store)
            hits = await store.vector_search(self.MODEL, self._unit(0.1, 1.0, 0.0, 0.0), limit=10)
            assert len(hits) == 7
            assert {h.session_id for h in hits[:2]} == {"s-b"}  # the haiku pair, nearest first
            assert hits[0].score == pytest.approx(1.0, abs=1e-4)
            assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            haiku = next(h for h in hits if h.role == "user" and h.session_id == "s-b")
            assert (haiku.text, haiku.project, haiku.position, haiku.passage) == (
                "[user]\nwrite a haiku about autumn leaves",
                "/p/one",
                0,
                0,
            )
            assert haiku.id == (await store.session_messages("s-b"))[0].id
            # Archived distillations stay searchable by vector, as d:<id> hits.
            top = await store.vector_search(self.MODEL, self._unit(0, 0, 0, 1), limit=1)
            assert [(h.id, h.role, h.text) for h in top] == [
                (archived.ref, "distillation", f"[distillation]\n{archived.text}")
            ]
            assert top[0].project == "/work/alpha"
            # Filters: kind, session, project, limit.
            only_msgs = await store.vector_search(self.MODEL, self._unit(0, 0, 0, 1), kinds=["message"])
            assert only_msgs and all(h.role != "distillation" for h in only_msgs)
            only_d = await store.vector_search(self.MODEL, self._unit(1, 0, 0, 0), kinds=["distillation"])
            assert [h.id for h in only_d] == [archived.ref]
            in_c = await store.vector_search(self.MODEL, self._unit(0.1, 1, 0, 0), session_id="s-c")
            assert {h.session_id for h in in_c} == {"s-c"} and len(in_c) == 2
            two = await store.vector_search(self.MODEL, self._unit(0.1, 1, 0, 0), project="/p/two")
            assert {h.session_id for h in two} == {"s-c"}
            assert await store.vector_search(self.MODEL, self._unit(1, 0, 0, 0), project="/p/none") == []
            assert len(await store.vector_search(self.MODEL, self._unit(1, 0, 0, 0), limit=3)) == 3
            # A model never indexed has nothing to find.
            assert await store.vector_search("unknown-model", self._unit(1, 0, 0, 0)) == []

        self.run(make_store, body)

    def test_vector_search_in_two_steps(self, make_store: Callable[[], Store]) -> None:
        """``nearest_passages`` finds what ``vector_search`` finds, without the texts;
        ``read_passages`` gives the same hits, in the order asked, leaving out a passage
        its item does not have or an item that is not stored."""
        from lore_core.storage.records import PassageRef

        async def body(store: TieredStore) -> None:
            self._require(store, Tier.DISTILLATIONS)
            await store.write(self._corpus())
            archived = self._distillation(0, "- 09:00 wombat benchmark 42 ms", ["m0"], session="s-a")
            await store.write_distillation(archived)
            await self._embed_pending(store)
            query = self._unit(0.1, 1.0, 0.0, 0.3)
            hits = await store.vector_search(self.MODEL, query, limit=10)
            refs = await store.nearest_passages(self.MODEL, query, limit=10)
            assert [(r.passage, round(r.score, 6)) for r in refs] == [
                (h.passage, round(h.score, 6)) for h in hits
            ]
            # A distillation's ref names it without the d: prefix; its hit has it.
            assert archived.id in {r.item for r in refs} and archived.ref in {h.id for h in hits}
            read = await store.read_passages(refs)
            assert [h.as_json() for h in read] == [h.as_json() for h in hits]
            backwards = await store.read_passages(refs[::-1])
            assert [h.as_json() for h in backwards] == [h.as_json() for h in hits[::-1]]
            missing = [
                PassageRef("f" * 32, 0, 0.5), PassageRef(refs[0].item, 999, 0.5),
                PassageRef("it's'); DROP TABLE messages; --\0", 0, 0.5), refs[1],
            ]  # fmt: skip
            assert [h.as_json() for h in await store.read_passages(missing)] == [hits[1].as_json()]
            assert await store.read_passages([]) == []
            filtered = await store.nearest_passages(self.MODEL, query, session_id="s-c", limit=10)
            in_c = {m.id for m in await store.session_messages("s-c")}
            assert filtered and {r.item for r in filtered} <= in_c
            assert await store.nearest_passages("unknown-model", query) == []

        self.run(make_store, body)

    def test_vector_search_one_hit_per_passage(self, make_store: Callable[[], Store]) -> None:
        """Vectors are written under the index of the passage they embed (a long item may
        have only some embedded), and a hit is that passage."""
        from lore_core.storage.passages import cut
        from lore_core.storage.records import ItemVectors

        paragraphs = "\n\n".join(
            f"paragraph {i}: " + "filler words about nothing much " * 20 for i in range(6)
        )

        async def body(store: TieredStore) -> None:
            await store.write(batch_of(exchange([text("user", paragraphs)])))
            (pending,) = await store.pending_embeddings(self.MODEL)
            passages = cut(pending.role, pending.blocks)
            assert len(passages) >= 4
            vectors: list[Sequence[float]] = [
                self._unit(1, 0, 0, 0),
                self._unit(0, 1, 0, 0),
                self._unit(0, 0, 0, 1),
            ]
            item = ItemVectors(pending, vectors, passages=[0, 2, len(passages) - 1])
            assert await store.write_vectors(self.MODEL, 4, [item]) == 3
            hits = await store.vector_search(self.MODEL, self._unit(0, 0.1, 0, 1), limit=10)
            assert [h.passage for h in hits] == [len(passages) - 1, 2, 0]
            assert len({(h.id, h.passage) for h in hits}) == 3 and {h.id for h in hits} == {pending.id}
            assert hits[0].text == passages[-1].text and hits[1].text == passages[2].text
            assert (hits[1].start, hits[1].end) == (passages[2].start, passages[2].end)
            assert hits[0].score == pytest.approx(max(h.score for h in hits))

        self.run(make_store, body)

    def test_vector_hit_shows_the_matching_passage(self, make_store: Callable[[], Store]) -> None:
        """End to end: the indexer embeds a long message's passages, the store reports which
        passage a query's vector matched, and the recall result shows that passage (no query
        word occurs in it, so only the vectors can have found it). The assistant's words are
        embedded passage by passage (a tool output only by its first piece)."""
        from lore_core.recall.indexer import VectorIndexer
        from lore_core.recall.store_engine import store_recall_engine
        from lore_core.recall.tool import format_response

        before = " ".join(f"step {i} of the build copied the assets to the cache" for i in range(60))
        after = " ".join(f"cleanup pass {i} removed stale files from the workspace" for i in range(60))
        output = f"{before} then the rollout crashed on node seven {after}"

        async def body(store: TieredStore) -> None:
            await store.write(batch_of(exchange([text("user", "run the build"), text("assistant", output)])))
            embedder = TopicEmbedder()
            assert await VectorIndexer(store, embedder).run_until_idle() > 0
            engine = store_recall_engine(store, embedder=embedder)
            response = await engine.search("deployment failure", project="/work/alpha")
            assert response.results and "rollout crashed" in response.results[0].text
            shown = format_response(response)
            assert "rollout crashed on node seven" in shown
            assert "step 0 of the build" not in shown

        self.run(make_store, body)

    def test_vectors_never_mix_dimensions(self, make_store: Callable[[], Store]) -> None:
        from lore_core.storage.records import ItemVectors, VectorDimensionError

        async def body(store: TieredStore) -> None:
            await store.write(self._corpus())
            pending = await store.pending_embeddings(self.MODEL)
            await store.write_vectors(self.MODEL, 4, [ItemVectors(pending[0], [self._unit(1, 0, 0, 0)])])
            with pytest.raises(VectorDimensionError):
                await store.write_vectors(self.MODEL, 3, [ItemVectors(pending[1], [[1.0, 0.0, 0.0]])])
            # The failed write marked nothing embedded.
            assert [p.id for p in await store.pending_embeddings(self.MODEL)] == [p.id for p in pending[1:]]
            # Another model keeps its own size.
            assert (
                await store.write_vectors("small-model", 3, [ItemVectors(pending[0], [[0.0, 1.0, 0.0]])]) == 1
            )
            hits = await store.vector_search("small-model", [0.0, 1.0, 0.0])
            assert [h.id for h in hits] == [pending[0].id]
            assert (await store.vector_stats("small-model"))["small-model"]["dimensions"] == 3

        self.run(make_store, body)

    def test_reset_vectors_makes_everything_pending(self, make_store: Callable[[], Store]) -> None:
        async def body(store: TieredStore) -> None:
            await store.write(self._corpus())
            await self._embed_pending(store)
            await self._embed_pending(store, model="keep-me")
            await store.reset_vectors(self.MODEL)
            assert len(await store.pending_embeddings(self.MODEL)) == 6
            assert await store.vector_search(self.MODEL, self._unit(1, 0, 0, 0)) == []
            assert len(await store.vector_search("keep-me", self._unit(1, 0, 0, 0))) == 6
            assert await self._embed_pending(store) == 6
            assert len(await store.vector_search(self.MODEL, self._unit(1, 0, 0, 0))) == 6

        self.run(make_store, body)

    def test_vectors_persist_across_reopen(self, make_store: Callable[[], Store]) -> None:
        if not self.persistent:
            pytest.skip("this store does not persist")
        from lore_core.storage.records import ItemVectors

        async def write(store: TieredStore) -> None:
            await store.write(self._corpus())
            pending = await store.pending_embeddings(self.MODEL)
            await store.write_vectors(
                self.MODEL, 4, [ItemVectors(p, [self._axis(p.text)]) for p in pending[:4]]
            )

        async def read(store: TieredStore) -> None:
            assert len(await store.pending_embeddings(self.MODEL)) == 2
            hits = await store.vector_search(self.MODEL, self._unit(0.1, 1, 0, 0), limit=2)
            assert {h.session_id for h in hits} == {"s-b"}
            assert await self._embed_pending(store) == 2
            assert (await store.vector_stats(self.MODEL))[self.MODEL]["vectors"] == 6

        self.run(make_store, write)
        self.reopen(make_store, read)


class StoreConformance(
    MessagesConformance,
    DistillationsConformance,
    KnowledgeConformance,
    EntitiesConformance,
    EventLogConformance,
    VectorsConformance,
):
    """Every suite: a store that declares every tier."""


async def _both(store: TieredStore, *steps: Callable[[TieredStore], Awaitable[None]]) -> None:
    for step in steps:
        await step(store)
