"""Entities through a real gateway (real sockets, the DuckDB store, the loopback provider as
model and as worker):

* the curator's answer names entities (some malformed): the good ones are stored through
  the entity book, the bad ones skipped and counted, never an error;
* a question through ``/lore/api/recall`` naming only an alias finds the message that uses
  only the canonical name, and the response says which expansion was applied;
* the next session's first upstream request lists the known entities in the baseline;
* the local API answers bad input with a 4xx JSON error naming the field (never a 500);
* ``lore entity ...`` through the gateway and, with no gateway, on the store file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core import cli
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.fake_worker import curator_responder, request_texts
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer

CONFIG = {"distill": {"idleTimeoutSeconds": 3600}}


def anthropic_turn(history: list[dict[str, Any]], text: str) -> dict[str, Any]:
    history.append({"role": "user", "content": [{"type": "text", "text": text}]})
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 200,
        "system": [{"type": "text", "text": "You are a coding agent."}],
        "tools": [{"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}}],
        "messages": list(history),
    }


def send(client: httpx.Client, body: dict[str, Any], session: str, project: Path) -> None:
    response = client.post(
        "/v1/messages",
        json=body,
        headers={"x-session-id": session, "x-lore-project": str(project), "authorization": "Bearer sk-test"},
    )
    assert response.status_code == 200, response.text


def api(server: ThreadedServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=api_headers(), timeout=30)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    root.mkdir()
    return root


CURATED_ENTITIES: list[Any] = [
    {"name": "PostgreSQL", "kind": "service", "aliases": ["pg", "postgres", "", 7]},
    {"name": "orders-api", "kind": "repository", "relations": [
        {"predicate": "depends on", "target": "PostgreSQL"},
        {"predicate": "uses", "target": "Kafka"},  # not known: skipped
        {"predicate": "1bad", "target": "PostgreSQL"},  # not a predicate: skipped
    ]},
    {"name": "Dana Ruiz", "kind": "human", "aliases": ["dana"]},  # unknown kind: "other"
    {"kind": "tool"},  # no name: skipped
    "not an object",  # skipped
    {"name": "sk-ant-api03-" + "c" * 60, "kind": "tool"},  # a secret: skipped
]  # fmt: skip


def test_curated_entities_expand_recall_and_reach_the_baseline(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, project: Path
) -> None:
    fake_upstream.responder = curator_responder(lambda _user: [], entities=lambda _user: CURATED_ENTITIES)
    server = start_gateway(CONFIG)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        history: list[dict[str, Any]] = []
        for text in (
            "Why does the orders service refuse connections to PostgreSQL after the restart?",
            "The PostgreSQL container listens on 6543 now: update the connection string in settings.py",
            "Run the integration tests against PostgreSQL and tell me which fail",
        ):
            send(client, anthropic_turn(history, text), "s1", project)
            history.append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    with api(server) as client:
        assert client.post("/lore/api/distill", params={"session": "s1"}).status_code == 200
        found = {
            e["name"]: e for e in client.get("/lore/api/entities", params={"project": str(project)}).json()
        }
        assert set(found) == {"PostgreSQL", "orders-api", "Dana Ruiz"}
        pg = found["PostgreSQL"]
        assert (pg["kind"], pg["aliases"], pg["created_by"]) == ("service", ["pg", "postgres"], "curator")
        assert found["Dana Ruiz"]["kind"] == "other"
        assert found["orders-api"]["relations"] == [
            {"predicate": "depends_on", "target": pg["id"], "target_name": "PostgreSQL"}
        ]
        # The alias is nowhere in the memory: the expansion finds what says "PostgreSQL".
        answer = client.get("/lore/api/recall", params={"q": "pg 6543", "project": str(project)}).json()
        assert answer["error"] is None
        assert answer["aliases"] == [
            {"entity": pg["id"], "matched": "pg", "names": ["PostgreSQL", "postgres"]}
        ]
        assert any(r["id"].startswith("t:") and "listens on 6543" in r["text"] for r in answer["results"])
        assert any("also searched for" in n for n in answer["notes"])
        opened = client.get("/lore/api/recall", params={"q": pg["id"]}).json()
        assert "orders-api" in opened["results"][0]["text"] and "depends_on" in opened["results"][0]["text"]

    # The next session's first request lists the known entities in its baseline block.
    fake_upstream.requests.clear()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        send(client, anthropic_turn([], "Add an index to the orders table"), "s2", project)
    model_calls = [
        r.json for r in fake_upstream.api_requests() if "lore:" not in request_texts(r.json)[0][:40]
    ]
    system = json.dumps(model_calls[0]["system"])
    assert f"{pg['id']} PostgreSQL [service] aka pg, postgres" in system
    assert "Dana Ruiz [other] aka dana" in system and "sk-ant" not in system


def test_api_answers_bad_input_with_a_4xx_naming_the_field(
    start_gateway: Callable[..., ThreadedServer], project: Path
) -> None:
    server = start_gateway(CONFIG)
    p = str(project)
    with api(server) as client:

        def post(action: str, body: Any) -> httpx.Response:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            return client.post(f"/lore/api/entities/{action}", content=raw)

        made = post("add", {"project": p, "name": "Redis", "kind": "service", "aliases": ["cache"]})
        assert made.status_code == 201 and made.json()["entity"]["aliases"] == ["cache"]
        redis = made.json()["entity"]["id"]
        assert post("add", {"project": p, "name": "redis", "kind": "service"}).json()["status"] == "unchanged"
        cases: list[tuple[str, Any, int, str]] = [
            ("add", {"project": p, "kind": "tool"}, 400, "name"),
            ("add", {"project": p, "name": "X", "kind": "planet"}, 400, "kind"),
            ("add", {"project": p, "name": "X", "aliases": ["a\nb"]}, 400, "alias"),
            ("add", {"project": p, "name": "sk-ant-api03-" + "d" * 50}, 400, "secret"),
            ("add", {"project": p, "name": 3}, 400, "name"),
            ("add", {"project": "relative", "name": "X"}, 400, "project"),
            ("add", {"name": "X"}, 400, "project"),
            ("add", {"project": p, "name": "X", "aliases": "one"}, 400, "aliases"),
            ("add", {"project": p, "name": "X", "aliases": [1]}, 400, "aliases"),
            ("add", {"project": p, "name": "X", "colour": "red"}, 400, "colour"),
            ("add", {"project": p, "name": "Memcached", "aliases": ["cache"]}, 409, redis),
            ("add", b"{not json", 400, "JSON"),
            ("add", [1, 2], 400, "object"),
            ("alias", {"ref": redis}, 400, "alias"),
            ("alias", {"ref": redis, "alias": "x", "remove": "yes"}, 400, "remove"),
            ("alias", {"ref": "e:0000000000000000", "alias": "x"}, 404, "no entity"),
            ("alias", {"ref": "Nobody", "alias": "x", "project": p}, 404, "no entity"),
            ("relate", {"ref": redis, "predicate": "uses", "target": "Nobody", "project": p}, 404, "Nobody"),
            ("relate", {"ref": redis, "predicate": "!!", "target": redis}, 400, "predicate"),
            ("relate", {"ref": redis, "predicate": "uses", "target": redis}, 409, "itself"),
            ("edit", {"ref": redis, "kind": "planet"}, 400, "kind"),
            ("merge", {"keep": redis}, 400, "other"),
            ("merge", {"keep": redis, "other": redis}, 409, "already"),
            ("edit", {"ref": redis}, 400, "nothing to change"),
            ("nonsense", {}, 404, "action"),
        ]
        for action, body, status, word in cases:
            response = post(action, body)
            assert response.status_code == status, (action, body, response.text)
            assert word in response.json()["error"], (action, body, response.text)
        assert client.get("/lore/api/entities/show").status_code == 400
        assert client.get("/lore/api/entities/show", params={"ref": "e:ffff"}).status_code == 404
        assert client.get("/lore/api/entities", params={"project": "rel"}).status_code == 400
        shown = client.get("/lore/api/entities/show", params={"ref": "cache", "project": p})
        assert shown.status_code == 200 and shown.json()["entity"]["id"] == redis
    # Every route needs the gateway token.
    with httpx.Client(base_url=server.url, timeout=30) as bare:
        assert bare.get("/lore/api/entities").status_code == 401
        refused = bare.post("/lore/api/entities/add", json={"project": p, "name": "Sneaky"})
        assert refused.status_code == 401
    with api(server) as client:
        assert [e["name"] for e in client.get("/lore/api/entities").json()] == ["Redis"]


def lore(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def exercise(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    p = ["--project", str(project)]
    code, out, _ = lore(capsys, "entity", "add", "PostgreSQL", "--kind", "service", "--alias", "pg", *p)
    assert code == 0 and out.startswith("created: e:") and "aka pg" in out
    pg = out.split()[1]
    code, out, _ = lore(capsys, "entity", "add", "Postgres 16", "--kind", "service", "--alias", "psql", *p)
    dup = out.split()[1]
    assert lore(capsys, "entity", "add", "billing-api", "--kind", "repository", *p)[0] == 0
    assert lore(capsys, "entity", "relate", "billing-api", "depends_on", dup, *p)[0] == 0
    # An alias another entity has: refused, with the reason.
    code, _, err = lore(capsys, "entity", "alias", "billing-api", "PG", *p)
    assert code == 1 and "belongs to" in err and pg in err
    code, out, _ = lore(capsys, "entity", "alias", pg, "postgres", *p)
    assert code == 0 and "aka pg, postgres" in out
    code, out, _ = lore(capsys, "entity", "merge", "PostgreSQL", "psql", *p)
    assert code == 0 and out.startswith(f"merged: {pg}") and "Postgres 16" in out
    # The merged id shows the survivor; its relation moved with the merge.
    code, out, _ = lore(capsys, "entity", "show", dup, *p, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["entity"]["id"] == pg and shown["merged"] == [dup]
    assert [r["source_name"] for r in shown["related"]] == ["billing-api"]
    code, out, _ = lore(capsys, "entity", "show", "pg", *p)
    assert code == 0 and "billing-api depends_on this" in out
    assert lore(capsys, "entity", "alias", pg, "pg", "--remove", *p)[0] == 0
    code, out, _ = lore(capsys, "entity", "rename", pg, "PostgreSQL 16", *p)
    assert code == 0 and "PostgreSQL 16  aka" in out and out.rstrip().endswith("psql, PostgreSQL")
    code, out, _ = lore(capsys, "entity", "list", *p, "--json")
    rows = json.loads(out)
    assert code == 0 and [r["name"] for r in rows] == ["billing-api", "PostgreSQL 16"]
    assert rows[1]["aliases"] == ["postgres", "Postgres 16", "psql", "PostgreSQL"]
    code, out, _ = lore(capsys, "entity", "list", "--all")
    assert code == 0 and len(out.splitlines()) == 2
    code, _, err = lore(capsys, "entity", "show", "e:0000000000000000", *p)
    assert code == 1 and "no entity" in err


def test_entity_commands_through_the_gateway(
    start_gateway: Callable[..., ThreadedServer],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    project: Path,
) -> None:
    server = start_gateway()
    monkeypatch.setenv("LORE_PORT", str(server.port))
    exercise(capsys, project)
    assert "via the running gateway" in lore(capsys, "entity", "list", "--all")[2]


def test_entity_commands_on_the_store_file(
    lore_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    project: Path,
) -> None:
    monkeypatch.setenv("LORE_PORT", "1")  # no gateway there
    exercise(capsys, project)
    assert "reading the" in lore(capsys, "entity", "list", "--all")[2]


def test_the_cli_knows_the_entity_kinds() -> None:
    from lore_core.storage.entities import ENTITY_KINDS

    parser = cli.commands.build_parser()
    args = parser.parse_args(["entity", "add", "x", "--kind", "file"])
    assert args.kind == "file"
    sub = next(a for a in parser._subparsers._group_actions if a.dest == "command")  # type: ignore[union-attr]
    add = sub.choices["entity"]._subparsers._group_actions[0].choices["add"]  # type: ignore[union-attr]
    kind = next(a for a in add._actions if a.dest == "kind")
    assert tuple(kind.choices) == ENTITY_KINDS
