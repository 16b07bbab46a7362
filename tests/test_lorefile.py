"""``.lore.md``: rendering and parsing round-trip, one new fact is a one-entry diff, hand
edits come back through the KnowledgeBook (refusals included), export filters and is quiet
when nothing changed."""

from __future__ import annotations

import asyncio
import difflib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.knowledge.book import CREATED, DELETED, KnowledgeBook
from lore_core.knowledge.lorefile import (
    ParsedEntry,
    export,
    import_file,
    parse,
    render,
)
from lore_core.storage.knowledge import AUTHOR_IMPORT, KnowledgeVersion

PROJECT = "/src/lore"
OTHER = "/src/elsewhere"


def run(body: Callable[[KnowledgeBook], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        store = MemoryStore()
        await store.open()
        try:
            return await body(KnowledgeBook(store))
        finally:
            await store.close()

    return asyncio.run(main())


def version(logical_id: str, category: str, title: str, content: str, sensitivity: str = "normal"):
    return KnowledgeVersion(
        version_id=f"{logical_id}.1",
        logical_id=logical_id,
        version=1,
        category=category,
        title=title,
        content=content,
        project=PROJECT,
        sensitivity=sensitivity,
    )


async def add(book: KnowledgeBook, title: str, content: str, category: str = "decision", **kw: Any):
    result = await book.create(project=PROJECT, category=category, title=title, content=content, **kw)
    assert result.status == CREATED, result
    assert result.version is not None
    return result.version


TRICKY = "\n".join(
    [
        "First line.",
        "# not a heading",
        "## not a category",
        "   ### indented title",
        "\\# already escaped by hand",
        "\\\\## two backslashes",
        "see <!-- lore:0123456789abcdef --> inline",
        "<!--lore:abcdabcdabcdabcd-->",
        "\\d+ stays as written",
        "",
        "",
        "\tindented with a tab, trailing spaces   ",
        "    # four spaces: code, not structure",
        "#hashtag",
        "#### level four",
        "last",
    ]
)


# -- render / parse -------------------------------------------------------------------------


def test_round_trip_keeps_ids_categories_titles_contents_and_flags():
    entries = [
        version("aaaaaaaaaaaaaaaa", "gotcha", "Tabs in Makefiles", "Recipes need a tab."),
        version("bbbbbbbbbbbbbbbb", "decision", "Use DuckDB for the store", TRICKY),
        version("cccccccccccccccc", "decision", "another decision", "B before U.", "sensitive"),
        version("dddddddddddddddd", "architecture", "#1 rule: the gateway never blocks", "Never."),
        version("eeeeeeeeeeeeeeee", "preference", "C# style", "Allman braces."),
    ]
    text = render(entries)
    parsed = parse(text)
    assert parsed.problems == []
    got = {(e.logical_id, e.category, e.title, e.content, e.sensitivity) for e in parsed.entries}
    assert got == {(e.logical_id, e.category, e.title, e.content, e.sensitivity) for e in entries}
    assert render(parsed.entries) == text
    # the file order is the canonical one: categories in fixed order, titles sorted
    assert [e.logical_id for e in parsed.entries] == [
        "cccccccccccccccc",
        "bbbbbbbbbbbbbbbb",
        "eeeeeeeeeeeeeeee",
        "dddddddddddddddd",
        "aaaaaaaaaaaaaaaa",
    ]
    assert "<!-- lore:cccccccccccccccc sensitive -->\n### another decision\n" in text
    assert "\n\\# not a heading\n" in text


def test_layout_is_fixed_and_deterministic():
    empty = render([])
    assert empty == (
        "# Project knowledge\n\n"
        "<!-- Curated by Lore. Edit freely: `lore import` (or the running gateway, when this file "
        "changes) reads your edits back. Keep each entry's lore: marker; an entry without one is "
        "created as new. -->\n\n"
        "## Decisions\n\n## Patterns\n\n## Preferences\n\n## Architecture\n\n## Gotchas\n"
    )
    one = [version("aaaaaaaaaaaaaaaa", "pattern", "Title", "\n\nBody\n\n")]
    assert render(one) == render(list(reversed(one)))
    block = "## Patterns\n\n<!-- lore:aaaaaaaaaaaaaaaa -->\n### Title\n\nBody\n\n## Preferences\n"
    assert block in render(one)
    assert render(one, project_name="lore\nx").startswith("# Project knowledge: lore x\n\n")


def test_render_refuses_restricted_entries():
    with pytest.raises(ValueError, match="restricted"):
        render([version("aaaaaaaaaaaaaaaa", "pattern", "T", "c", "restricted")])


def test_parse_tolerates_crlf_trailing_spaces_tabs_headings_forms_and_no_final_newline():
    text = (
        "\ufeff# Knowledge  \r\n"
        "intro text is ignored\r\n"
        "##\tdecision  \r\n"
        "\r\n"
        "<!--\tlore:aaaaaaaaaaaaaaaa   -->   \r\n"
        "\r\n"
        "\r\n"
        "###   Keep it  \r\n"
        "\r\n"
        "line one  \r\n"
        "\tline two\r\n"
        "\r\n"
        "## GOTCHAS:\r\n"
        "###No space after hashes\r\n"
        "content without final newline"
    )
    parsed = parse(text)
    assert parsed.problems == []
    assert [(e.logical_id, e.category, e.title, e.content, e.line) for e in parsed.entries] == [
        ("aaaaaaaaaaaaaaaa", "decision", "Keep it", "line one  \n\tline two", 8),
        (None, "gotcha", "No space after hashes", "content without final newline", 14),
    ]
    for heading, category in [("Architecture", "architecture"), ("Preferences", "preference")]:
        assert parse(f"## {heading}\n### t\nc\n").entries[0].category == category


def test_parse_problems_name_their_lines_and_the_rest_is_kept():
    text = "\n".join(
        [
            "# Project knowledge",  # 1
            "### Before any heading",  # 2
            "x",  # 3
            "## Decisions",  # 4
            "stray paragraph",  # 5
            "<!-- lore:NOT VALID! -->",  # 6
            "### Bad marker id",  # 7
            "kept as unmarked",  # 8
            "<!-- lore:aaaaaaaaaaaaaaaa -->",  # 9
            "### Empty",  # 10
            "",  # 11
            "## Misc",  # 12
            "### Under misc",  # 13
            "lost",  # 14
            "## Patterns",  # 15
            "<!-- lore:bbbbbbbbbbbbbbbb -->",  # 16
            "### Good",  # 17
            "kept",  # 18
            "<!-- lore:bbbbbbbbbbbbbbbb -->",  # 19
            "### Copied block",  # 20
            "new entry",  # 21
            "<!-- lore:cccccccccccccccc -->",  # 22
            "## Gotchas",  # 23
        ]
    )
    parsed = parse(text)
    assert [(e.title, e.logical_id, e.category) for e in parsed.entries] == [
        ("Bad marker id", None, "decision"),
        ("Good", "bbbbbbbbbbbbbbbb", "pattern"),
        ("Copied block", None, "pattern"),
    ]
    problems = "\n".join(parsed.problems)
    assert len(parsed.problems) == 7, problems
    for number, words in [
        (2, "before any ## category heading"),
        (5, "text outside an entry"),
        (6, "does not hold a valid id"),
        (10, "has no content"),
        (13, "unknown heading 'Misc'"),
        (20, "already used by the entry at line 17"),
        (22, "not followed by an entry title"),
    ]:
        found = [p for p in parsed.problems if p.startswith(f"line {number}: ") and words in p]
        assert found, (number, problems)


# -- export ---------------------------------------------------------------------------------


def added_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    diff = list(difflib.unified_diff(before.splitlines(True), after.splitlines(True), n=0))
    body = [line for line in diff[2:] if not line.startswith("@@")]
    return [x[1:] for x in body if x.startswith("+")], [x[1:] for x in body if x.startswith("-")]


@pytest.mark.parametrize("category", ["decision", "pattern", "gotcha"])
def test_one_new_fact_is_a_one_entry_diff(tmp_path: Path, category: str):
    path = tmp_path / ".lore.md"

    async def body(book: KnowledgeBook):
        await add(book, "Use DuckDB", "Not SQLite.")
        await add(book, "Zebra decision", "Last by title.")
        await add(book, "Arch", "Layers.", category="architecture")
        await export(book, PROJECT, path)
        before = path.read_text()
        new = await add(book, "Middle", "The new fact.\n\nTwo paragraphs.", category=category)
        report = await export(book, PROJECT, path)
        return before, path.read_text(), new, report

    before, after, new, report = run(body)
    assert report.changed and report.written == 4
    added, removed = added_lines(before, after)
    assert removed == []
    expected = [f"<!-- lore:{new.logical_id} -->\n", "### Middle\n", "\n", "The new fact.\n", "\n"]
    expected += ["Two paragraphs.\n", "\n"]
    assert sorted(added) == sorted(expected)


def test_export_filters_by_project_scope_and_sensitivity(tmp_path: Path):
    path = tmp_path / ".lore.md"

    async def body(book: KnowledgeBook):
        await add(book, "Normal", "n")
        sensitive = await add(book, "Sensitive", "s", sensitivity="sensitive")
        await add(book, "Restricted", "r", sensitivity="restricted")
        await add(book, "Global", "g", scope="global")
        await book.create(project=OTHER, category="decision", title="Other project", content="o")
        plain = await export(book, PROJECT, path)
        plain_text = path.read_text()
        flagged = await export(book, PROJECT, path, include_sensitive=True)
        return plain, plain_text, flagged, path.read_text(), sensitive

    plain, plain_text, flagged, flagged_text, sensitive = run(body)
    assert (plain.written, plain.skipped_sensitive, plain.skipped_restricted) == (1, 1, 1)
    assert (flagged.written, flagged.skipped_sensitive, flagged.skipped_restricted) == (2, 0, 1)
    assert [e.title for e in parse(plain_text).entries] == ["Normal"]
    assert [e.title for e in parse(flagged_text).entries] == ["Normal", "Sensitive"]
    assert f"<!-- lore:{sensitive.logical_id} sensitive -->" in flagged_text
    for text in (plain_text, flagged_text):
        assert "Restricted" not in text and "Global" not in text and "Other project" not in text


def test_export_does_not_touch_an_unchanged_file(tmp_path: Path):
    path = tmp_path / ".lore.md"

    async def body(book: KnowledgeBook):
        await add(book, "One", "1")
        first = await export(book, PROJECT, path)
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
        os.chmod(path, 0o640)
        second = await export(book, PROJECT, path)
        stamp = path.stat().st_mtime_ns
        await add(book, "Two", "2")
        third = await export(book, PROJECT, path)
        return first, second, stamp, third

    first, second, stamp, third = run(body)
    assert first.changed and not second.changed and third.changed
    assert stamp == 1_000_000_000
    assert path.stat().st_mtime_ns != stamp
    assert path.stat().st_mode & 0o777 == 0o640  # the replacement keeps the file's mode
    assert [p.name for p in tmp_path.iterdir()] == [".lore.md"]  # no temporary file left


# -- import ---------------------------------------------------------------------------------


def test_hand_edit_is_version_two_and_an_unmarked_entry_is_created_then_marked(tmp_path: Path):
    path = tmp_path / ".lore.md"

    async def body(book: KnowledgeBook):
        entry = await add(book, "Use DuckDB", "Not SQLite.")
        await export(book, PROJECT, path)
        text = path.read_text().replace("Not SQLite.", "Not SQLite: one file, columnar.")
        text = text.replace("## Gotchas\n", "## Gotchas\n\n### Hand written\n\nTyped by a person.\n")
        path.write_text(text)
        report = await import_file(book, PROJECT, path)
        versions = await book.store.knowledge_versions(entry.logical_id)
        again = await import_file(book, PROJECT, path)
        await export(book, PROJECT, path)
        return entry, report, versions, again, path.read_text()

    entry, report, versions, again, final = run(body)
    assert [v.logical_id for v in report.updated] == [entry.logical_id]
    assert [v.title for v in report.created] == ["Hand written"]
    assert report.refused == [] and report.problems == []
    assert [v.version for v in versions] == [1, 2]
    assert versions[-1].content == "Not SQLite: one file, columnar."
    assert versions[-1].updated_by == AUTHOR_IMPORT and versions[-1].source_ref == ".lore.md"
    created = report.created[0]
    assert created.created_by == AUTHOR_IMPORT and created.category == "gotcha"
    assert not again.changed and len(again.unchanged) == 2
    assert f"<!-- lore:{created.logical_id} -->\n### Hand written\n\nTyped by a person.\n" in final


def test_unknown_marker_id_is_kept_and_a_known_title_is_not_duplicated(tmp_path: Path):
    path = tmp_path / ".lore.md"
    path.write_text(
        "## Decisions\n\n<!-- lore:from-another-machine -->\n### Fresh\n\nf\n\n"
        "<!-- lore:0000111122223333 -->\n### use duckdb\n\nedited elsewhere\n"
    )

    async def body(book: KnowledgeBook):
        existing = await add(book, "Use DuckDB", "Not SQLite.")
        report = await import_file(book, PROJECT, path)
        return existing, report, await book.entries(PROJECT)

    existing, report, entries = run(body)
    assert [v.logical_id for v in report.created] == ["from-another-machine"]
    assert [v.logical_id for v in report.updated] == [existing.logical_id]
    assert sorted(e.title for e in entries) == ["Fresh", "Use DuckDB"]


def test_a_marker_of_another_projects_entry_creates_a_new_entry_here(tmp_path: Path):
    path = tmp_path / ".lore.md"

    async def body(book: KnowledgeBook):
        result = await book.create(project=OTHER, category="decision", title="Theirs", content="t")
        assert result.version is not None
        path.write_text(f"## Decisions\n<!-- lore:{result.version.logical_id} -->\n### Theirs\n\nmine now\n")
        report = await import_file(book, PROJECT, path)
        return result.version, report, await book.get(result.version.logical_id)

    theirs, report, still = run(body)
    assert [(v.project, v.content) for v in report.created] == [(PROJECT, "mine now")]
    assert report.created[0].logical_id != theirs.logical_id
    assert still is not None and still.content == "t" and still.version == 1
    assert any("another project" in p for p in report.problems)


def test_a_sensitive_flag_added_by_hand_is_kept_one_removed_is_not(tmp_path: Path):
    path = tmp_path / ".lore.md"

    async def body(book: KnowledgeBook):
        normal = await add(book, "Normal", "n")
        sensitive = await add(book, "Sensitive", "s", sensitivity="sensitive")
        path.write_text(
            f"## Decisions\n<!-- lore:{normal.logical_id} sensitive -->\n### Normal\n\nn\n"
            f"<!-- lore:{sensitive.logical_id} -->\n### Sensitive\n\ns\n"
        )
        await import_file(book, PROJECT, path)
        return await book.get(normal.logical_id), await book.get(sensitive.logical_id)

    normal, sensitive = run(body)
    assert normal is not None and normal.sensitivity == "sensitive"
    assert sensitive is not None and sensitive.sensitivity == "sensitive" and sensitive.version == 1


@pytest.mark.parametrize("marked", [True, False])
def test_a_deleted_entry_readded_by_hand_is_refused(tmp_path: Path, marked: bool):
    path = tmp_path / ".lore.md"

    async def body(book: KnowledgeBook):
        entry = await add(book, "Use SQLite", "Small and simple.")
        await export(book, PROJECT, path)
        old_text = path.read_text()
        assert (await book.delete(entry.logical_id)).status == DELETED
        if not marked:
            old_text = old_text.replace(f"<!-- lore:{entry.logical_id} -->\n", "")
            old_text = old_text.replace("### Use SQLite", "### use sqlite")
        path.write_text(old_text)
        report = await import_file(book, PROJECT, path)
        return entry, report, await book.get(entry.logical_id), await book.entries(PROJECT)

    entry, report, current, alive = run(body)
    assert report.created == [] and report.updated == []
    assert len(report.refused) == 1
    title, reason = report.refused[0]
    assert title.casefold() == "use sqlite"
    assert "deleted" in reason and entry.logical_id in reason
    assert current is not None and current.is_deleted and current.is_current and current.version == 2
    assert alive == []


def test_entries_missing_from_the_file_are_not_deleted(tmp_path: Path):
    path = tmp_path / ".lore.md"
    path.write_text(render([]))

    async def body(book: KnowledgeBook):
        await add(book, "Kept", "k")
        report = await import_file(book, PROJECT, path)
        return report, await book.entries(PROJECT)

    report, alive = run(body)
    assert not report.changed and [e.title for e in alive] == ["Kept"]


def test_parse_problems_are_reported_and_the_rest_imported(tmp_path: Path):
    path = tmp_path / ".lore.md"
    path.write_text(
        "# Project knowledge\n\n## Decisions\n\n### Empty\n\n## Misc\n\n### Lost\n\nx\n\n"
        "## Patterns\n\n<!-- lore:BAD -->\n### Bad id\n\nstill imported\n\n### Good\n\ng\n"
    )

    async def body(book: KnowledgeBook):
        report = await import_file(book, PROJECT, path)
        return report, await book.entries(PROJECT)

    report, alive = run(body)
    assert sorted(v.title for v in report.created) == ["Bad id", "Good"]
    assert sorted(e.title for e in alive) == ["Bad id", "Good"]
    assert [p.split(":")[0] for p in report.problems] == ["line 5", "line 9", "line 15"]


def test_a_secret_pasted_into_the_file_is_refused_not_stored(tmp_path: Path):
    path = tmp_path / ".lore.md"
    key = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8I9j0" * 2

    async def body(book: KnowledgeBook):
        entry = await add(book, "Deploy", "Use the CI pipeline.")
        await export(book, PROJECT, path)
        text = path.read_text().replace("Use the CI pipeline.", f"Use the CI pipeline with {key}.")
        text += f"\n### Token\n\nexport ANTHROPIC_API_KEY={key}\n"
        path.write_text(text)
        report = await import_file(book, PROJECT, path)
        return entry, report, await book.store.knowledge_versions(entry.logical_id), await book.entries(None)

    _, report, versions, everything = run(body)
    assert sorted(t for t, _ in report.refused) == ["Deploy", "Token"]
    assert all("secret" in reason for _, reason in report.refused)
    assert [v.version for v in versions] == [1]
    assert [e.title for e in everything] == ["Deploy"]
    assert all(key not in e.content for e in everything)


def test_import_errors_name_the_path(tmp_path: Path):
    async def body(book: KnowledgeBook):
        missing = tmp_path / "nope" / ".lore.md"
        with pytest.raises(FileNotFoundError) as not_found:
            await import_file(book, PROJECT, missing)
        assert str(missing) in str(not_found.value)
        binary = tmp_path / ".lore.md"
        binary.write_bytes(b"## Decisions\n### T\n\n\xff\xfe bad\n")
        with pytest.raises(ValueError, match="not UTF-8") as bad:
            await import_file(book, PROJECT, binary)
        assert str(binary) in str(bad.value)
        with pytest.raises(ValueError, match="cannot read"):
            await import_file(book, PROJECT, tmp_path)  # a directory

    run(body)


def test_parsed_entries_render_without_marker_when_unmarked():
    text = render([ParsedEntry(None, "pattern", "Loose", "body")])
    assert "## Patterns\n\n### Loose\n\nbody\n\n## Preferences" in text
    assert parse(text).entries == [ParsedEntry(None, "pattern", "Loose", "body", "normal", 9)]


def test_an_unmarked_block_never_lowers_an_entrys_sensitivity(tmp_path: Path):
    path = tmp_path / ".lore.md"
    path.write_text("## Decisions\n\n### db password policy\n\nRotate monthly.\n")

    async def body(book: KnowledgeBook):
        secret = await add(book, "DB password policy", "Rotate weekly.", sensitivity="restricted")
        report = await import_file(book, PROJECT, path)
        await export(book, PROJECT, path, include_sensitive=True)
        return secret, report, await book.get(secret.logical_id), path.read_text()

    secret, report, current, text = run(body)
    assert [v.logical_id for v in report.updated] == [secret.logical_id]
    assert current is not None and current.sensitivity == "restricted"
    assert current.content == "Rotate monthly."
    assert "Rotate" not in text


def test_a_rename_onto_a_deleted_or_taken_title_is_refused(tmp_path: Path):
    path = tmp_path / ".lore.md"

    async def body(book: KnowledgeBook):
        gone = await add(book, "Use SQLite", "Small.")
        await book.delete(gone.logical_id)
        taken = await add(book, "Use DuckDB", "Columnar.")
        renamed = await add(book, "Storage engine", "Pick one.", category="architecture")
        path.write_text(
            f"## Architecture\n<!-- lore:{renamed.logical_id} -->\n### Use SQLite\n\nPick one.\n"
            f"## Decisions\n<!-- lore:{taken.logical_id} -->\n### Use DuckDB\n\nColumnar.\n"
        )
        first = await import_file(book, PROJECT, path)
        path.write_text(f"## Architecture\n<!-- lore:{renamed.logical_id} -->\n### use duckdb\n\nPick one.\n")
        second = await import_file(book, PROJECT, path)
        return first, second, await book.get(renamed.logical_id)

    first, second, current = run(body)
    assert [(t, "was deleted" in r) for t, r in first.refused] == [("Use SQLite", True)]
    assert len(first.unchanged) == 1
    assert [(t, "has that title already" in r) for t, r in second.refused] == [("use duckdb", True)]
    assert current is not None and current.title == "Storage engine" and current.version == 1
