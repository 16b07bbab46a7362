"""`lore team` and `lore knowledge pending|approve|reject`: through the running gateway (real
sockets, its local API) and on the store file with no gateway. An unapproved entry never
reaches the shared export; the gateway writes the approval into ``.lore.md``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from lore_core import cli
from lore_core.testing.net import api_headers
from lore_core.testing.poll import poll
from lore_core.testing.server import ThreadedServer


def lore(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def exercise(capsys: pytest.CaptureFixture[str], project: Path) -> str:
    p = ["--project", str(project)]
    code, out, err = lore(capsys, "knowledge", "pending", *p)
    assert code == 1 and "not bound to a team" in err
    code, out, _ = lore(capsys, "team", "show", *p)
    assert code == 0 and "not bound to a team" in out
    code, out, _ = lore(capsys, "team", "bind", "core", "--policy", "manual", *p)
    assert code == 0 and "team core, policy manual (project)" in out
    code, out, _ = lore(
        capsys, "knowledge", "add", *p, "--category", "decision", "--title", "Use DuckDB",
        "--content", "DuckDB is the store.",
    )  # fmt: skip
    assert code == 0
    ident = out.split()[1]
    code, out, _ = lore(capsys, "knowledge", "pending", *p)
    assert code == 0 and f"{ident}  pending" in out and "Use DuckDB" in out

    # Pending: the shared export holds neither its content nor its title.
    code, out, _ = lore(capsys, "export", *p, "-o", "-")
    assert code == 0 and "DuckDB" not in out and "lore:decision" not in out
    code, out, _ = lore(capsys, "export", *p, "--format", "json")
    assert code == 0 and out.strip() == "[]"

    code, out, err = lore(capsys, "knowledge", "approve", ident, "--by=a --> b", *p)
    assert code == 1 and "may not hold" in err
    code, out, _ = lore(capsys, "knowledge", "approve", ident, "--by", "Ana Lima", *p)
    assert code == 0 and f"{ident}  approved" in out and "by Ana Lima" in out
    code, out, _ = lore(capsys, "export", *p, "-o", "-")
    assert "DuckDB is the store." in out and f"lore:decision {ident.removeprefix('k:')} approved" in out
    assert "Ana Lima -->" in out

    # An edit waits; the team keeps the approved text.
    assert lore(capsys, "knowledge", "edit", ident, "--content", "SQLite is the store.")[0] == 0
    code, out, _ = lore(capsys, "knowledge", "pending", *p, "--json")
    assert code == 0 and '"changed_since_approval": true' in out
    code, out, _ = lore(capsys, "export", *p, "-o", "-")
    assert "DuckDB is the store." in out and "SQLite" not in out
    code, out, _ = lore(capsys, "knowledge", "reject", ident, "--by", "Bo", *p)
    assert code == 0 and f"{ident}  rejected" in out

    code, out, _ = lore(capsys, "team", "policy", "auto", *p)
    assert code == 0 and "policy auto (project)" in out
    code, out, _ = lore(capsys, "team", "unbind", *p)
    assert code == 0 and "not bound" in out
    code, out, err = lore(capsys, "team", "unbind", *p)
    assert code == 1 and "not bound" in err
    code, out, err = lore(capsys, "team", "policy", "manual", *p)
    assert code == 1 and "not bound" in err
    return ident


def test_team_commands_through_the_gateway(
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
    assert "via the running gateway" in lore(capsys, "team", "show", "--project", str(project))[2]


def test_team_commands_on_the_store_file(
    lore_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("LORE_PORT", "1")  # no gateway there
    project = tmp_path / "shop"
    project.mkdir()
    exercise(capsys, project)
    assert "reading the" in lore(capsys, "team", "show", "--project", str(project))[2]


def test_the_gateway_writes_approvals_into_the_project_file(
    start_gateway: Callable[..., ThreadedServer], tmp_path: Path
) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    server = start_gateway({"knowledge": {"createLoreMd": True}})  # the project has no .lore.md yet
    lore_md = project / ".lore.md"
    with httpx.Client(base_url=server.url, timeout=30) as model:
        # A request from the project: the gateway watches its .lore.md from now on.
        answer = model.post(
            "/v1/messages",
            json={
                "model": "claude-sonnet-4-5",
                "max_tokens": 50,
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers={"x-api-key": "sk-test", "x-lore-project": str(project)},
        )
        assert answer.status_code == 200
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=30) as client:
        bound = client.post(
            "/lore/api/team", json={"project": str(project), "action": "bind", "team": "core"}
        )
        assert bound.status_code == 200 and bound.json()["policy"] == "auto"
        manual = client.post(
            "/lore/api/team", json={"project": str(project), "action": "policy", "policy": "manual"}
        )
        assert manual.json()["policy"] == "manual"
        added = client.post(
            "/lore/api/knowledge",
            json={
                "project": str(project),
                "category": "gotcha",
                "title": "Port",
                "content": "8377 may be taken.",
            },
        ).json()["entry"]
        assert client.get("/lore/api/knowledge/pending", params={"project": str(project)}).json()["pending"]
        missing = client.post(
            "/lore/api/knowledge/decisions", json={"id": added["id"], "decision": "approved"}
        )
        assert missing.status_code == 400 and "missing by" in missing.json()["error"]
        nowhere = client.post(
            "/lore/api/knowledge/decisions", json={"id": "k:nope-nope", "decision": "approved", "by": "Ana"}
        )
        assert nowhere.status_code == 404
        approved = client.post(
            "/lore/api/knowledge/decisions", json={"id": added["id"], "decision": "approved", "by": "Ana"}
        )
        assert approved.status_code == 200 and approved.json()["state"] == "approved"
        server.call(server.gateway.knowledge_upkeep.sync_files(force=True))
    poll(lambda: lore_md.exists() and "lore:decision" in lore_md.read_text(), "the approval in .lore.md")
    text = lore_md.read_text()
    assert "8377 may be taken." in text and f"lore:decision {added['logical_id']} approved" in text


def test_a_team_change_says_what_lore_md_will_share(
    lore_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Binding with the manual policy shares nothing until approved: the command says so
    before the next export rewrites the file, instead of emptying it without a word."""
    monkeypatch.setenv("LORE_PORT", "1")  # no gateway there
    project = tmp_path / "shop"
    project.mkdir()
    p = ["--project", str(project)]
    for title in ("Use DuckDB", "CI needs TZ=UTC"):
        assert (
            lore(capsys, "knowledge", "add", *p, "--category", "gotcha", "--title", title, "--content", "x.")[
                0
            ]
            == 0
        )
    code, _, err = lore(capsys, "team", "bind", "core", "--policy", "manual", *p)
    assert code == 0
    assert ".lore.md will share 0 entries of this project from its next export (2 until now)" in err
    assert "lore knowledge pending" in err
    code, out, _ = lore(capsys, "team", "unbind", *p, "--json")
    assert code == 0
    assert (json.loads(out)["shared_before"], json.loads(out)["shared_after"]) == (0, 2)
    code, _, err = lore(capsys, "team", "bind", "core", *p)  # auto: the same two
    assert code == 0 and "will share" not in err
