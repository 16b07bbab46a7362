"""Undo in long-term memory, through a real gateway's API and the CLI: a deleted knowledge
entry is restored as a new version (its history kept, the certificate included), and an
entity is deleted with the ids merged into it and every relation to it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core import cli
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer


@pytest.fixture
def api(start_gateway: Callable[..., ThreadedServer], monkeypatch: pytest.MonkeyPatch) -> httpx.Client:
    server = start_gateway(config={"store": {"backend": "memory"}})
    monkeypatch.setenv("LORE_PORT", str(server.port))
    with httpx.Client(base_url=server.url + "/lore/api", headers=api_headers(), timeout=30) as client:
        yield client


def _add(api: httpx.Client, project: Path, title: str, content: str) -> dict[str, Any]:
    body = {"project": str(project), "category": "decision", "title": title, "content": content}
    answer = api.post("/knowledge", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json()["entry"])


def test_a_deleted_entry_is_restored_as_a_new_version(
    api: httpx.Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = _add(api, tmp_path, "Use DuckDB", "the store is DuckDB")
    ident = entry["id"]
    assert api.patch(f"/knowledge/{ident}", json={"content": "the store is DuckDB, 16 KiB blocks"}).is_success
    assert api.delete(f"/knowledge/{ident}").json()["status"] == "deleted"
    # The title is refused while the entry is deleted, and the refusal says how to restore.
    refused = api.post("/knowledge", json={"project": str(tmp_path), "category": "decision",
                                            "title": "use duckdb", "content": "again"})  # fmt: skip
    assert refused.status_code == 409 and f"lore knowledge restore {ident}" in refused.json()["error"]

    restored = api.post(f"/knowledge/{ident}/restore")
    assert restored.status_code == 200, restored.text
    body = restored.json()
    assert body["status"] == "restored"
    assert (body["entry"]["content"], body["entry"]["is_deleted"]) == (
        "the store is DuckDB, 16 KiB blocks",
        False,
    )
    shown = api.get(f"/knowledge/{ident}").json()
    assert [(v["version"], v["is_deleted"]) for v in shown["versions"]] == [
        (1, False),
        (2, False),
        (3, True),
        (4, False),
    ]
    assert [e["id"] for e in api.get("/knowledge", params={"project": str(tmp_path)}).json()] == [ident]
    # Restoring what is alive changes nothing; an unknown id is a 404.
    assert api.post(f"/knowledge/{ident}/restore").json()["status"] == "unchanged"
    assert api.post("/knowledge/k:0000aaaa0000aaaa/restore").status_code == 404

    # The CLI, through the gateway.
    assert api.delete(f"/knowledge/{ident}").is_success
    assert cli.main(["knowledge", "restore", ident, "--json"]) == 0
    out, err = capsys.readouterr()
    assert "via the running gateway" in err and json.loads(out)["status"] == "restored"
    assert cli.main(["knowledge", "restore", "k:0000aaaa0000aaaa"]) == 1


def test_an_entity_is_deleted_with_its_redirects_and_the_relations_to_it(
    api: httpx.Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = {"project": str(tmp_path)}

    def change(action: str, **fields: Any) -> httpx.Response:
        return api.post(f"/entities/{action}", json={**fields, **project})

    pg = change("add", name="PostgreSQL", kind="service", aliases=["pg"]).json()["entity"]
    old = change("add", name="Postgres 9", kind="service").json()["entity"]
    api_ = change("add", name="billing-api", kind="service").json()["entity"]
    assert change("merge", keep=pg["id"], other=old["id"]).is_success
    assert change("relate", ref="billing-api", predicate="depends_on", target="PostgreSQL").is_success

    gone = change("delete", ref="pg")  # by one of its names
    assert gone.status_code == 200, gone.text
    assert (gone.json()["status"], gone.json()["entity"]["id"]) == ("deleted", pg["id"])
    everything = api.get("/entities", params={**project, "merged": "1"}).json()
    assert [(e["id"], e["relations"]) for e in everything] == [(api_["id"], [])]
    for ref in (pg["id"], old["id"], "PostgreSQL"):
        assert api.get("/entities/show", params={"ref": ref, **project}).status_code == 404
    assert change("delete", ref=pg["id"]).status_code == 404
    assert change("delete", ref=pg["id"], name="x").status_code == 400  # a field delete does not take
    # The name is free again.
    assert change("add", name="PostgreSQL", kind="service").status_code == 201

    assert cli.main(["entity", "delete", "billing-api", "--project", str(tmp_path), "--json"]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(out)["status"] == "deleted"
    assert [e["name"] for e in api.get("/entities", params=project).json()] == ["PostgreSQL"]


def test_a_title_an_alive_entry_holds_is_not_taken_back() -> None:
    """One title names one entry: the book never lets an alive entry take a deleted one's
    title, but a store written by other means (an older Lore, a hand edit) may hold both."""
    import asyncio

    from lore_core.builtin.memory_store import MemoryStore
    from lore_core.knowledge.book import REFUSED, KnowledgeBook
    from lore_core.storage.knowledge import KnowledgeVersion

    async def run() -> None:
        store = MemoryStore()
        book = KnowledgeBook(store)
        first = await book.create(project="/p", category="decision", title="Use DuckDB", content="one")
        assert first.version is not None
        await book.delete(first.version.logical_id)
        await store.write_knowledge(
            KnowledgeVersion("other.1", "other", 1, "decision", "use duckdb", "two", project="/p")
        )
        result = await book.restore(first.version.ref)
        assert result.status == REFUSED and "k:other has the title" in result.reason
        assert result.version is not None and result.version.is_deleted

    asyncio.run(run())
