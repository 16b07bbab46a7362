"""Import lanes (lore_core.knowledge.imports) and sensitivity, on the in-memory store and on
DuckDB: every lane (``.lore.md``, mem0, a JSON list, an agents file) refuses to bring back an
entry the user deleted, by id where the lane has ids and by title where it has none, and says
why; secrets never enter; restricted entries are in no export and in no worker prompt, and
sensitive ones only when asked for."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.config import KnowledgeConfig, LoreConfig
from lore_core.interfaces import CuratorContext
from lore_core.knowledge.book import CREATED, KnowledgeBook
from lore_core.knowledge.curation import KnowledgeUpkeep
from lore_core.knowledge.curator import LLMKnowledgeCurator
from lore_core.knowledge.imports import (
    AGENTS,
    DEFAULT_CATEGORY,
    FORMATS,
    JSON,
    LORE_MD,
    MEM0,
    ImportFormatError,
    derive_title,
    export_text,
    guess_format,
    import_text,
    keyed_id,
    parse_agents,
    parse_json,
    parse_mem0,
)
from lore_core.knowledge.lorefile import ImportReport
from lore_core.plugins import Registry, make_plugin_manager
from lore_core.storage.knowledge import AUTHOR_IMPORT, KnowledgeVersion
from lore_core.storage.records import StoredDistillation
from lore_core.worker.client import WorkerResult

PROJECT = "/src/shop"
OTHER = "/src/elsewhere"
BACKENDS = ["memory", "duckdb"]
SECRET = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8I9j0" * 2


def run(backend: str, tmp_path: Path, body: Callable[[KnowledgeBook], Awaitable[Any]]) -> Any:
    """``body(book)`` on a fresh store of ``backend``."""
    if backend == "duckdb":
        duckdb_store = pytest.importorskip("lore_store_duckdb.store")
        store: Any = duckdb_store.DuckDBStore(tmp_path / "lore.duckdb")
    else:
        store = MemoryStore()

    async def main() -> Any:
        await store.open()
        try:
            return await body(KnowledgeBook(store))
        finally:
            await store.close()

    return asyncio.run(main())


async def add(book: KnowledgeBook, title: str, content: str, **kw: Any) -> KnowledgeVersion:
    kw.setdefault("category", "pattern")
    result = await book.create(project=PROJECT, title=title, content=content, **kw)
    assert result.status == CREATED and result.version is not None, result
    return result.version


async def lane(
    book: KnowledgeBook, fmt: str, text: str, name: str = "", *, allow_global: bool = False
) -> ImportReport:
    return await import_text(
        book, PROJECT, text, fmt, Path(name or f"import.{fmt}"), allow_global=allow_global
    )


MEM0_EXPORT = {
    "results": [
        {
            "id": "892db2ae-06d9-49e5-8b3e-585ef9b85b8e",
            "memory": "Prefers tabs over spaces in Makefiles. Spaces break recipes.",
            "categories": ["user_preferences"],
            "user_id": "alice",
            "created_at": "2026-11-30T10:00:00-08:00",
        },
        {
            "id": "a1",
            "memory": "Deploys must go through the staging cluster first",
            "metadata": {"category": "gotcha", "sensitivity": "normal"},
        },
    ]
}

AGENTS_FILE = """# CLAUDE.md

This file guides coding agents in this repository.

## Commands

- Run the tests with `pytest -q` before pushing.
- Lint with `ruff check .`
  - never skip the hooks

## Gotchas

- The gateway holds the DuckDB file: use the API while it runs.
"""


def deleted_reason(report: ImportReport) -> dict[str, str]:
    return dict(report.refused)


# -- every lane refuses to resurrect a deleted entry ----------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_mem0_lane_refuses_a_deleted_memory_by_its_id_even_with_new_words(backend: str, tmp_path: Path):
    async def body(book: KnowledgeBook):
        first = await lane(book, MEM0, json.dumps(MEM0_EXPORT), "mem0.json")
        tabs = next(v for v in first.created if v.title.startswith("Prefers tabs"))
        await book.delete(tabs.logical_id)
        again = await lane(book, MEM0, json.dumps(MEM0_EXPORT), "mem0.json")
        # mem0 edited the memory since: another title, the same id.
        edited = json.loads(json.dumps(MEM0_EXPORT))
        edited["results"][0]["memory"] = "Makefile recipes need tab characters."
        reworded = await lane(book, MEM0, json.dumps(edited), "mem0.json")
        return tabs, first, again, reworded, await book.entries(PROJECT)

    tabs, first, again, reworded, alive = run(backend, tmp_path, body)
    assert len(first.created) == 2 and not first.refused
    assert tabs.logical_id == keyed_id(PROJECT, "mem0:892db2ae-06d9-49e5-8b3e-585ef9b85b8e")
    assert tabs.source_ref == "mem0:892db2ae-06d9-49e5-8b3e-585ef9b85b8e"
    for report, title in ((again, tabs.title), (reworded, "Makefile recipes need tab characters")):
        reason = deleted_reason(report)[title]
        assert f"k:{tabs.logical_id} was deleted" in reason and "by user" in reason
        assert not report.created and len(report.unchanged) == 1
        assert report.as_json()["refused"] == [{"title": title, "reason": reason}]
    assert [e.title for e in alive] == ["Deploys must go through the staging cluster first"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_mem0_lane_without_ids_refuses_by_title(backend: str, tmp_path: Path):
    async def body(book: KnowledgeBook):
        made = await add(book, "Prefers dark mode", "Dark mode everywhere.")
        await book.delete(made.logical_id)
        return await lane(book, MEM0, json.dumps([{"memory": "prefers dark mode."}]))

    report = run(backend, tmp_path, body)
    (title, reason), *_ = report.refused
    assert title == "prefers dark mode" and "an entry titled 'Prefers dark mode' was deleted" in reason
    assert not report.created


@pytest.mark.parametrize("backend", BACKENDS)
def test_json_lane_refuses_by_id_and_by_title(backend: str, tmp_path: Path):
    async def body(book: KnowledgeBook):
        marked = await add(book, "Use DuckDB", "DuckDB is the store.", category="decision")
        unmarked = await add(book, "Tabs in Makefiles", "Recipes need a tab.")
        exported, _ = await export_text(book, PROJECT, JSON)
        rows = json.loads(exported)
        await book.delete(marked.logical_id)
        await book.delete(unmarked.logical_id)
        # The id's entry renamed in the file: still the deleted entry.
        rows[0]["title"] = "Use DuckDB, really"
        del rows[1]["id"]
        rows[1]["title"] = "TABS IN MAKEFILES!"
        return marked, await lane(book, JSON, json.dumps(rows)), await book.entries(PROJECT)

    marked, report, alive = run(backend, tmp_path, body)
    refused = deleted_reason(report)
    assert f"k:{marked.logical_id} was deleted" in refused["Use DuckDB, really"]
    assert "an entry titled 'Tabs in Makefiles' was deleted" in refused["TABS IN MAKEFILES!"]
    assert not report.created and not report.updated and alive == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_agents_lane_refuses_by_title(backend: str, tmp_path: Path):
    async def body(book: KnowledgeBook):
        first = await lane(book, AGENTS, AGENTS_FILE, "CLAUDE.md")
        gotcha = next(v for v in first.created if v.category == "gotcha")
        await book.delete(gotcha.logical_id)
        again = await lane(book, AGENTS, AGENTS_FILE, "CLAUDE.md")
        return first, gotcha, again

    first, gotcha, again = run(backend, tmp_path, body)
    assert len(first.created) == 4 and {v.source_ref for v in first.created} == {"CLAUDE.md"}
    reason = deleted_reason(again)[gotcha.title]
    assert f"an entry titled {gotcha.title!r} was deleted" in reason
    assert not again.created and len(again.unchanged) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_lore_md_lane_refuses_by_marker_and_by_title(backend: str, tmp_path: Path):
    async def body(book: KnowledgeBook):
        entry = await add(book, "Use DuckDB", "DuckDB is the store.", category="decision")
        text, _ = await export_text(book, PROJECT, LORE_MD)
        await book.delete(entry.logical_id)
        by_marker = await lane(book, LORE_MD, text.replace("### Use DuckDB", "### Use DuckDB now"))
        by_title = await lane(book, LORE_MD, text.replace(f"<!-- lore:{entry.logical_id} -->", ""))
        return entry, by_marker, by_title

    entry, by_marker, by_title = run(backend, tmp_path, body)
    assert f"k:{entry.logical_id} was deleted" in deleted_reason(by_marker)["Use DuckDB now"]
    assert "an entry titled 'Use DuckDB' was deleted" in deleted_reason(by_title)["Use DuckDB"]


# -- what each lane reads -------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_mem0_memories_become_entries_and_a_reimport_changes_nothing(backend: str, tmp_path: Path):
    async def body(book: KnowledgeBook):
        first = await lane(book, MEM0, json.dumps(MEM0_EXPORT))
        tabs = next(v for v in first.created if v.title.startswith("Prefers tabs"))
        # A person renames and re-categorises it in Lore: a re-import keeps that.
        await book.update(tabs.logical_id, title="Makefiles want tabs", category="gotcha")
        again = await lane(book, MEM0, json.dumps({"memories": MEM0_EXPORT["results"]}))
        other_project = await import_text(book, OTHER, json.dumps(MEM0_EXPORT["results"]), MEM0, Path("m"))
        return first, again, other_project, await book.entries(PROJECT)

    first, again, other_project, alive = run(backend, tmp_path, body)
    by_title = {v.title: v for v in first.created}
    tabs = by_title["Prefers tabs over spaces in Makefiles"]
    staging = by_title["Deploys must go through the staging cluster first"]
    assert tabs.content == "Prefers tabs over spaces in Makefiles. Spaces break recipes."
    assert (tabs.category, tabs.sensitivity, tabs.created_by) == ("preference", "sensitive", AUTHOR_IMPORT)
    assert (staging.category, staging.sensitivity) == ("gotcha", "normal")
    assert not again.created and not again.updated and len(again.unchanged) == 2
    assert {(e.title, e.category) for e in alive} >= {("Makefiles want tabs", "gotcha")}
    # The same memories in another project are that project's entries, under other ids.
    assert len(other_project.created) == 2
    assert {v.logical_id for v in other_project.created}.isdisjoint(v.logical_id for v in first.created)


def test_mem0_parse_reports_what_it_skips():
    parsed = parse_mem0(
        json.dumps(
            [
                "just a string",
                {"id": "x1"},
                {"id": {"nested": 1}, "memory": "Uses fish as the shell"},
                {"id": 42, "memory": "Likes the colour teal", "categories": ["misc", "Decisions"]},
                {"id": SECRET, "memory": "Uses zsh at work"},
            ]
        )
    )
    assert parsed.problems == [
        "memory 1: not a JSON object: skipped",
        'memory 2: no "memory" text: skipped',
        "memory 3: id {'nested': 1} is not a string: matched by title only",
        "memory 5: the id is not a mem0 id (too long, or a secret): matched by title only",
    ]
    fish, teal, zsh = parsed.items
    assert zsh.key is None
    assert (fish.key, fish.guessed_category) == (None, None)
    assert (teal.key, teal.guessed_category, teal.title) == ("mem0:42", "decision", "Likes the colour teal")


@pytest.mark.parametrize("backend", BACKENDS)
def test_json_lane_reads_fields_reports_problems_and_round_trips(backend: str, tmp_path: Path):
    rows = [
        {"title": "Use DuckDB", "content": "DuckDB is the store.", "category": "Decisions"},
        {"content": "Always run ruff before committing. It is fast.", "sensitivity": "sensitive"},
        {"title": "House style", "content": "Short sentences.", "scope": "global", "id": "k:house-style"},
        {"title": "Bad id", "content": "Kept.", "id": "NOT AN ID"},
        {"title": "use duckdb", "content": "A second entry of that title."},
        {"title": 7, "content": "x"},
        {"title": "Nothing"},
        {"title": "Odd", "content": "x", "category": "trivia"},
        [],
    ]

    async def body(book: KnowledgeBook):
        # A global entry is imported as one only when asked (tests/test_security_paths.py).
        report = await lane(book, JSON, json.dumps(rows), "entries.json", allow_global=True)
        exported, _ = await export_text(book, PROJECT, JSON, include_sensitive=True)
        return report, exported, await book.entries(PROJECT)

    report, exported, alive = run(backend, tmp_path, body)
    assert report.problems == [
        "entry 4: id 'NOT AN ID' is not a Lore id (k:<4-64 lowercase letters, digits, - or _>): "
        "matched by title only",
        "entry 6: 'title' is not a string: skipped",
        'entry 7: no "content": skipped',
        "entry 9: not a JSON object: skipped",
        "entry 5: 'use duckdb' has the title of entry 1: skipped",
    ]
    assert [(t, r.split(",")[0]) for t, r in report.refused] == [("Odd", "category must be one of decision")]
    found = {e.title: e for e in alive}
    assert set(found) == {"Use DuckDB", "Always run ruff before committing", "House style", "Bad id"}
    assert found["Use DuckDB"].category == "decision"
    ruff = found["Always run ruff before committing"]
    assert (ruff.category, ruff.sensitivity) == (DEFAULT_CATEGORY, "sensitive")
    assert (found["House style"].logical_id, found["House style"].scope) == ("house-style", "global")
    assert {e.source_ref for e in alive} == {"entries.json"}

    # What export --format json wrote, imported into another store, is the same entries.
    async def elsewhere(book: KnowledgeBook):
        report = await lane(book, JSON, exported)
        return report, await book.entries(PROJECT, include_global=False)

    again, copied = run("memory", tmp_path, elsewhere)
    assert not again.refused and not again.problems
    assert {(e.logical_id, e.title, e.content, e.category, e.sensitivity) for e in copied} == {
        (e.logical_id, e.title, e.content, e.category, e.sensitivity) for e in alive if e.scope == "project"
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_json_id_of_another_projects_entry_creates_a_new_entry_here(backend: str, tmp_path: Path):
    async def body(book: KnowledgeBook):
        theirs = await book.create(project=OTHER, category="pattern", title="Theirs", content="There.")
        assert theirs.version is not None
        rows = [{"id": theirs.version.ref, "title": "Ours", "content": "Here."}]
        return (
            theirs.version,
            await lane(book, JSON, json.dumps(rows)),
            await book.get(theirs.version.logical_id),
        )

    theirs, report, untouched = run(backend, tmp_path, body)
    (created,) = report.created
    assert created.logical_id != theirs.logical_id and created.project == PROJECT
    assert "another project's entry" in report.problems[0]
    assert untouched is not None and untouched.title == "Theirs" and untouched.version == 1


def test_agents_file_bullets_and_sections_become_entries():
    parsed = parse_agents(
        AGENTS_FILE
        + "\n## Decision\n\nWe keep DuckDB.\n\n```sh\n# not a heading\n- not a bullet\n```\n"
        + "\n### Details\n\n1. First numbered item\n2) Second one\n   continued\n"
    )
    got = [(i.where, i.title, i.guessed_category, i.content) for i in parsed.items]
    assert got == [
        ("line 1", "CLAUDE.md", None, "This file guides coding agents in this repository."),
        ("line 7", "Run the tests with `pytest -q` before pushing", None,
         "Run the tests with `pytest -q` before pushing."),
        ("line 8", "Lint with `ruff check .`", None, "Lint with `ruff check .`\n- never skip the hooks"),
        ("line 13", "The gateway holds the DuckDB file: use the...", "gotcha",
         "The gateway holds the DuckDB file: use the API while it runs."),
        ("line 15", "Decision", "decision", "We keep DuckDB.\n\n```sh\n# not a heading\n- not a bullet\n```"),
        ("line 26", "First numbered item", "decision", "First numbered item"),
        ("line 27", "Second one", "decision", "Second one\ncontinued"),
    ]  # fmt: skip
    assert not parsed.problems


def test_derived_titles():
    assert derive_title("\n  Prefers dark mode.  Also light.\nmore") == "Prefers dark mode"
    assert (
        derive_title("one two three four five six seven eight nine")
        == "one two three four five six seven eight..."
    )
    assert len(derive_title("x" * 500)) == 200


def test_format_errors_and_guesses():
    for parse, text in ((parse_mem0, "not json"), (parse_json, "{}"), (parse_mem0, '{"x": 1}')):
        with pytest.raises(ImportFormatError, match=r"^not a"):
            parse(text)
    with pytest.raises(ImportFormatError, match="nests too deeply"):
        parse_json("[" * 100_000)
    with pytest.raises(ImportFormatError, match="unknown import format"):
        asyncio.run(import_text(None, PROJECT, "x", "csv", Path("x")))  # type: ignore[arg-type]
    assert guess_format("repo/.lore.md", "[]") == LORE_MD
    assert guess_format("AGENTS.md", "# x") == guess_format("claude.md", "") == AGENTS
    assert guess_format("export.json", json.dumps(MEM0_EXPORT)) == MEM0
    assert guess_format("x", json.dumps([{"id": "1", "memory": "m"}])) == MEM0
    assert guess_format("x", json.dumps([{"title": "t", "content": "c"}])) == JSON
    assert guess_format("broken.json", "{") == JSON
    assert guess_format("notes.md", "# Project knowledge\n") == LORE_MD
    assert set(FORMATS) == {LORE_MD, MEM0, JSON, AGENTS}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_secrets_never_enter_through_any_lane(backend: str, fmt: str, tmp_path: Path):
    text = {
        MEM0: json.dumps([{"id": "s1", "memory": f"The deploy key is {SECRET}"}]),
        JSON: json.dumps([{"title": "Deploy key", "content": f"export ANTHROPIC_API_KEY={SECRET}"}]),
        AGENTS: f"## Deploy\n\n- Use {SECRET} to deploy\n",
        LORE_MD: f"## Gotchas\n\n### Deploy key\n\nexport ANTHROPIC_API_KEY={SECRET}\n",
    }[fmt]

    async def body(book: KnowledgeBook):
        return await lane(book, fmt, text), await book.entries(None)

    report, everything = run(backend, tmp_path, body)
    assert len(report.refused) == 1 and "secret" in report.refused[0][1]
    assert everything == [] and not report.created
    assert SECRET not in json.dumps(report.as_json())


# -- sensitivity ----------------------------------------------------------------------------


async def three_sensitivities(book: KnowledgeBook) -> None:
    await add(book, "Normal entry", "NORMAL-TEXT")
    await add(book, "Sensitive entry", "SENSITIVE-TEXT", sensitivity="sensitive")
    await add(book, "Restricted entry", "RESTRICTED-TEXT", sensitivity="restricted")


@pytest.mark.parametrize("backend", BACKENDS)
def test_restricted_entries_are_in_no_export_and_sensitive_ones_only_when_asked(backend: str, tmp_path: Path):
    async def body(book: KnowledgeBook):
        await three_sensitivities(book)
        return {
            (fmt, sensitive): await export_text(book, PROJECT, fmt, include_sensitive=sensitive)
            for fmt in (LORE_MD, JSON)
            for sensitive in (False, True)
        }

    exports = run(backend, tmp_path, body)
    for (fmt, sensitive), (text, report) in exports.items():
        assert "NORMAL-TEXT" in text
        assert ("SENSITIVE-TEXT" in text) is sensitive, (fmt, sensitive)
        assert "RESTRICTED-TEXT" not in text and "Restricted entry" not in text
        assert (report.skipped_restricted, report.skipped_sensitive) == (1, 0 if sensitive else 1)
    assert [r["sensitivity"] for r in json.loads(exports[JSON, True][0])] == ["normal", "sensitive"]


class RecordingWorker:
    """Stands in for the worker client: keeps each prompt, answers with ``answer``."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.prompts: list[str] = []

    async def complete(self, system: str, prompt: str, **_: Any) -> WorkerResult:
        self.prompts.append(system + "\n" + prompt)
        return WorkerResult(json.dumps(self.answer), None, "worker-model", "anthropic-messages", "test", "")  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sees_sensitive", [False, True])
def test_the_worker_prompt_never_holds_restricted_entries_and_sensitive_ones_only_by_setting(
    backend: str, sees_sensitive: bool, tmp_path: Path
):
    config = LoreConfig(knowledge=KnowledgeConfig(worker_sees_sensitive=sees_sensitive))
    factory = Registry.collect(make_plugin_manager()).curators["knowledge"]["llm"]

    async def body(book: KnowledgeBook):
        await three_sensitivities(book)
        hidden = {e.title: e.logical_id for e in await book.entries(PROJECT)}
        # The model names entries it may not have been shown: those operations are dropped.
        worker = RecordingWorker(
            {
                "operations": [
                    {"op": "update", "id": f"k:{hidden['Restricted entry']}", "content": "leaked"},
                    {"op": "update", "id": f"k:{hidden['Sensitive entry']}", "content": "edited"},
                ]
            }
        )
        curator = factory(CuratorContext(config=config, worker=worker))
        assert isinstance(curator, LLMKnowledgeCurator)
        await book.store.write_distillation(
            StoredDistillation(id="log1", session_id="s1", generation=0, text="- notes", project=PROJECT)
        )
        report = await KnowledgeUpkeep(book, config.knowledge, curator).curate_session("s1", PROJECT)
        return worker.prompts, report, {e.title: e.content for e in await book.entries(PROJECT)}

    prompts, report, contents = run(backend, tmp_path, body)
    (prompt,) = prompts
    assert "NORMAL-TEXT" in prompt
    assert "RESTRICTED-TEXT" not in prompt and "Restricted entry" not in prompt
    assert ("SENSITIVE-TEXT" in prompt) is sees_sensitive
    assert contents["Restricted entry"] == "RESTRICTED-TEXT"
    assert contents["Sensitive entry"] == ("edited" if sees_sensitive else "SENSITIVE-TEXT")
    assert any("was not shown" in w for w in report.warnings)
