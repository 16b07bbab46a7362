"""`lore knowledge`, `lore export` and `lore import`: through the running gateway and, with no
gateway, on the store file directly; the book's refusals are errors with the reason."""

from __future__ import annotations

import copy
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


MEM0_EXPORT = {
    "results": [
        {"id": "m-tabs", "memory": "Prefers tabs in Makefiles.", "categories": ["user_preferences"]},
        {"id": "m-stage", "memory": "Deploys go through staging first.", "metadata": {"category": "gotcha"}},
    ]
}
AGENTS_FILE = (
    "# Guide\n\n## Commands\n\n- Run pytest before pushing.\n\n## Gotchas\n\n- Port 8377 may be taken.\n"
)


def titles(capsys: pytest.CaptureFixture[str], project: Path) -> dict[str, dict[str, object]]:
    code, out, _ = lore(capsys, "knowledge", "list", "--project", str(project), "--json")
    assert code == 0
    return {e["title"]: e for e in json.loads(out)}


def exercise_lanes(capsys: pytest.CaptureFixture[str], project: Path, files: Path) -> None:
    """Every import lane through ``lore import``, refusing what was deleted; every export
    without restricted entries, and with sensitive ones only on --include-sensitive."""
    p = ["--project", str(project)]

    # mem0 (guessed from the content): a deleted memory is refused by its id on re-import.
    export = copy.deepcopy(MEM0_EXPORT)
    mem0 = files / "memories.json"
    mem0.write_text(json.dumps(export))
    code, out, _ = lore(capsys, "import", str(mem0), *p)
    assert code == 0 and "(mem0): 2 created" in out
    tabs = titles(capsys, project)["Prefers tabs in Makefiles"]
    assert (tabs["sensitivity"], tabs["source_ref"]) == ("sensitive", "mem0:m-tabs")
    assert lore(capsys, "knowledge", "delete", str(tabs["id"]))[0] == 0
    export["results"][0]["memory"] = "Makefiles need tabs."  # reworded in mem0: same id
    mem0.write_text(json.dumps(export))
    code, out, _ = lore(capsys, "import", str(mem0), *p)
    assert code == 1 and f"refused 'Makefiles need tabs': {tabs['id']} was deleted" in out

    # An agents file (by its name): deleted entries are refused by title; the JSON report.
    agents = project / "CLAUDE.md"
    agents.write_text(AGENTS_FILE)
    code, out, _ = lore(capsys, "import", str(agents), *p)
    assert code == 0 and "(agents): 2 created" in out
    port = titles(capsys, project)["Port 8377 may be taken"]
    assert port["category"] == "gotcha"
    assert lore(capsys, "knowledge", "delete", str(port["id"]))[0] == 0
    code, out, _ = lore(capsys, "import", str(agents), *p, "--format", "agents", "--json")
    report = json.loads(out)
    assert code == 1 and set(report) == {
        "path",
        "created",
        "updated",
        "unchanged",
        "refused",
        "problems",
        "decisions",
    }
    assert report["created"] == [] and report["unchanged"] == 1
    (refusal,) = report["refused"]
    assert refusal["title"] == "Port 8377 may be taken"
    assert "an entry titled 'Port 8377 may be taken' was deleted" in refusal["reason"]

    # Sensitivity: restricted entries are in no export, sensitive ones only when asked for.
    for title, sensitivity in (("Quiet", "sensitive"), ("Secret sauce", "restricted")):
        code, _, _ = lore(
            capsys, "knowledge", "add", *p, "--category", "pattern", "--title", title,
            "--content", f"{sensitivity.upper()}-TEXT", "--sensitivity", sensitivity,
        )  # fmt: skip
        assert code == 0
    for fmt in ("lore-md", "json"):
        code, plain, _ = lore(capsys, "export", *p, "--format", fmt, "--output", "-")
        code2, with_sensitive, _ = lore(
            capsys, "export", *p, "--format", fmt, "-o", "-", "--include-sensitive"
        )
        assert code == code2 == 0
        # mem0's memories entered sensitive; the agents file's entries normal.
        assert "Run pytest before pushing" in plain and "Deploys go through staging" not in plain
        assert "SENSITIVE-TEXT" not in plain and "SENSITIVE-TEXT" in with_sensitive
        both = plain + with_sensitive
        assert "RESTRICTED-TEXT" not in both and "Secret sauce" not in both
    code, out, _ = lore(capsys, "export", *p)
    assert code == 0 and "1 restricted never exported" in out
    assert "RESTRICTED-TEXT" not in (project / ".lore.md").read_text()

    # The JSON export (printed without --output) comes back through the json lane: an entry
    # deleted since is refused by its id.
    code, exported, _ = lore(capsys, "export", *p, "--format", "json", "--include-sensitive")
    rows = json.loads(exported)
    assert code == 0 and {r["sensitivity"] for r in rows} == {"normal", "sensitive"}
    quiet = next(r for r in rows if r["title"] == "Quiet")
    assert lore(capsys, "knowledge", "delete", quiet["id"])[0] == 0
    dump = files / "dump.json"
    dump.write_text(exported)
    code, out, _ = lore(capsys, "import", str(dump), *p)
    assert code == 1 and "(json)" in out and f"refused 'Quiet': {quiet['id']} was deleted" in out

    # Input that is not of its format: a clear error, nothing written.
    broken = files / "broken.json"
    broken.write_text("{not json")
    code, _, err = lore(capsys, "import", str(broken), *p)
    assert code == 1 and "not a JSON list of entries: the text is not JSON (line 1, column 2" in err
    code, _, err = lore(capsys, "import", str(agents), *p, "--format", "mem0")
    assert code == 1 and "not a mem0 export" in err


def test_import_lanes_and_exports_through_the_gateway(
    start_gateway: Callable[..., ThreadedServer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    import httpx

    from lore_core.testing.net import api_headers

    server = start_gateway()
    monkeypatch.setenv("LORE_PORT", str(server.port))
    project = tmp_path / "shop"
    project.mkdir()
    exercise_lanes(capsys, project, tmp_path)
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=30) as client:
        for route, params, body, message in (
            (
                "/knowledge/import",
                {"format": "csv"},
                b"x",
                "format must be one of lore-md, mem0, json, agents",
            ),
            ("/knowledge/import", {"format": "mem0"}, b"[1", "not a mem0 export: the text is not JSON"),
            ("/knowledge/import", {"path": "x.json"}, b'{"a": 1}', "not a JSON list of entries"),
            ("/knowledge/file", {"format": "xml"}, None, "format must be one of lore-md, json"),
        ):
            method = "POST" if body is not None else "GET"
            answer = client.request(
                method, "/lore/api" + route, params={"project": str(project), **params}, content=body
            )
            assert answer.status_code == 400 and message in answer.json()["error"], answer.text


def test_import_lanes_and_exports_on_the_store_file(
    lore_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("LORE_PORT", "1")  # no gateway there
    project = tmp_path / "shop"
    project.mkdir()
    exercise_lanes(capsys, project, tmp_path)


def test_the_parser_offers_every_lane() -> None:
    from lore_core.cli.commands import build_parser
    from lore_core.knowledge.imports import EXPORT_FORMATS, FORMATS

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore[union-attr]
    choices = {
        name: next(a.choices for a in commands[name]._actions if a.dest == "format")
        for name in ("import", "export")
    }
    assert tuple(choices["import"]) == FORMATS and tuple(choices["export"]) == EXPORT_FORMATS
