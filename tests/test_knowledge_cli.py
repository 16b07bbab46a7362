"""`lore knowledge`, `lore export` and `lore import`: through the running gateway and, with no
gateway, on the store file directly; the book's refusals are errors with the reason."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from lore_core import cli
from lore_core.testing.server import ThreadedServer


def lore(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def exercise(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    p = ["--project", str(project)]
    code, out, _ = lore(
        capsys, "knowledge", "add", *p, "--category", "decision", "--title", "Use DuckDB",
        "--content", "DuckDB is the store; SQLite was rejected for its FTS rebuilds.",
    )  # fmt: skip
    assert code == 0 and out.startswith("created: k:")
    ident = out.split()[1]
    code, out, _ = lore(capsys, "knowledge", "list", *p, "--json")
    assert code == 0 and [e["title"] for e in json.loads(out)] == ["Use DuckDB"]
    assert lore(capsys, "knowledge", "edit", ident, "--content", "DuckDB, with LanceDB for FTS.")[0] == 0
    code, out, _ = lore(capsys, "knowledge", "show", ident)
    assert code == 0 and "DuckDB, with LanceDB for FTS." in out and "v2" in out

    # export writes .lore.md at the project root; import reads a hand edit back.
    assert lore(capsys, "export", *p)[0] == 0
    lore_md = project / ".lore.md"
    assert f"<!-- lore:{ident.removeprefix('k:')} -->" in lore_md.read_text()
    lore_md.write_text(lore_md.read_text() + "\n### Tabs, not spaces\n\nIndent Makefiles with tabs.\n")
    code, out, _ = lore(capsys, "import", *p)
    assert code == 0 and "1 created" in out
    code, out, _ = lore(capsys, "knowledge", "list", *p, "--json")
    assert {e["title"]: e["category"] for e in json.loads(out)} == {
        "Use DuckDB": "decision",
        "Tabs, not spaces": "gotcha",  # the file's last heading
    }

    # delete, then every way back is refused with the reason.
    assert lore(capsys, "knowledge", "delete", ident)[0] == 0
    code, _, err = lore(
        capsys,
        "knowledge",
        "add",
        *p,
        "--category",
        "decision",
        "--title",
        "use duckdb",
        "--content",
        "again",
    )
    assert code == 1 and "deleted" in err
    code, _, err = lore(capsys, "knowledge", "edit", "k:0000000000000000", "--title", "x")
    assert code == 1 and "no knowledge entry" in err
    # The file still has the entry (written before the delete): importing it is refused.
    code, out, _ = lore(capsys, "import", *p)
    assert code == 1 and "refused 'Use DuckDB'" in out and "deleted" in out
    # export now leaves it out; --output - prints the file instead.
    code, out, _ = lore(capsys, "export", *p, "--output", "-")
    assert code == 0 and "Use DuckDB" not in out and "Tabs, not spaces" in out


def test_knowledge_commands_through_the_gateway(
    start_gateway: Callable[..., ThreadedServer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    server = start_gateway()
    monkeypatch.setenv("LORE_PORT", str(server.port))
    project = tmp_path / "shop"
    project.mkdir()
    exercise(capsys, project)
    assert "via the running gateway" in lore(capsys, "knowledge", "list", "--all")[2]


def test_knowledge_commands_on_the_store_file(
    lore_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("LORE_PORT", "1")  # no gateway there
    project = tmp_path / "shop"
    project.mkdir()
    exercise(capsys, project)
    assert "reading the" in lore(capsys, "knowledge", "list", "--all")[2]
