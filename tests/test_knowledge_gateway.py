"""Long-term knowledge through a real gateway (real sockets, the DuckDB store when installed,
the loopback provider acting as model and as worker).

* the curator turns a session into entries (a test worker answers its prompt with
  operations), ``.lore.md`` follows, a new fact is a one-entry diff, a hand edit comes back,
  an entry thrown away and re-added by hand is refused with the reason in the log;
* what session 1 taught is in session 2's first upstream request without any recall call,
  and a superseded value is never injected again;
* 50 turns on each wire API with knowledge changing mid-session: from turn 2 on every
  upstream request starts with the same system and knowledge bytes and extends the previous
  request; each change arrives once, as a delta, at the same place on every later turn.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core.context import manager
from lore_core.knowledge.prompts import CURATOR_MARKER
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.fake_worker import curator_responder, request_texts
from lore_core.testing.net import api_headers
from lore_core.testing.poll import poll
from lore_core.testing.server import ThreadedServer

# createLoreMd: these projects have no .lore.md yet, and these tests follow the one Lore writes.
CONFIG = {"distill": {"idleTimeoutSeconds": 3600}, "knowledge": {"createLoreMd": True}}


@pytest.fixture(autouse=True)
def patient_knowledge_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check what a session's first request carries. On the request path the
    knowledge read has half a second before the request goes without it (and the next one
    tries again); on a loaded CI machine the store, busy importing and exporting .lore.md,
    once took longer. The gateway runs in this process: give the read longer here."""
    monkeypatch.setattr(manager, "STORE_TIMEOUT_SECONDS", 10.0)


def anthropic_turn(history: list[dict[str, Any]], text: str) -> dict[str, Any]:
    """A request as Claude Code sends it: cache markers on its two system blocks and on the
    newest message (three of Anthropic's four)."""
    history.append({"role": "user", "content": [{"type": "text", "text": text}]})
    messages = copy.deepcopy(history)
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 200,
        "system": [
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}},
        ],
        "tools": [{"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}}],
        "messages": messages,
    }


def send(
    client: httpx.Client, body: dict[str, Any], session: str, project: Path, path: str = "/v1/messages"
) -> str:
    response = client.post(
        path,
        json=body,
        headers={"x-session-id": session, "x-lore-project": str(project), "authorization": "Bearer sk-test"},
    )
    assert response.status_code == 200, response.text
    return response.text


def upstream_bodies(fake: FakeUpstream) -> list[dict[str, Any]]:
    """The model requests the provider received (the worker's calls left out)."""
    out = []
    for req in fake.api_requests():
        body = req.json
        system, _ = request_texts(body)
        if "lore:" not in system.split("\n", 1)[0]:
            out.append(body)
    return out


def curator_calls(fake: FakeUpstream) -> int:
    return sum(CURATOR_MARKER in request_texts(r.json)[0] for r in fake.api_requests())


def api(server: ThreadedServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=api_headers(), timeout=30)


def entries(server: ThreadedServer, project: Path) -> dict[str, dict[str, Any]]:
    with api(server) as client:
        found = client.get("/lore/api/knowledge", params={"project": str(project)}).json()
    return {e["title"]: e for e in found}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    root.mkdir()
    return root


@pytest.mark.slow
def test_curated_knowledge_reaches_lore_md_and_the_next_session(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    project: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="lore.knowledge")

    def script(user: str) -> list[dict[str, Any]]:
        existing = {title: ref for ref, title in _entries_shown(user)}
        if "switch the test runner to tox" in user:
            return [
                {
                    "op": "update",
                    "id": existing["Test runner"],
                    "content": "Run the tests with tox -e py311.",
                },
                {"op": "reconfirm", "id": existing["Use DuckDB for the store"]},
                {"op": "delete", "id": existing["Deploy with deploy.sh"], "reason": "CI deploys now"},
            ]
        return [
            {
                "op": "create",
                "category": "decision",
                "title": "Use DuckDB for the store",
                "content": "The store is DuckDB; its full-text search is LanceDB beside it.",
                "rejected": "SQLite",
                "source": "d:x",
            },
            {
                "op": "create",
                "category": "preference",
                "title": "Test runner",
                "content": "Run the tests with pytest -q.",
            },
            {
                "op": "create",
                "category": "pattern",
                "title": "Deploy with deploy.sh",
                "content": "Deploys run scripts/deploy.sh from a clean checkout.",
            },
            {
                "op": "create",
                "category": "decision",
                "title": "No rejected alternative",
                "content": "Dropped.",
            },
            {"op": "create", "category": "gotcha", "title": "Token", "content": "sk-ant-api03-" + "b" * 90},
        ]

    fake_upstream.responder = curator_responder(script)
    server = start_gateway(CONFIG)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        history: list[dict[str, Any]] = []
        for text in (
            "Set up the store for the orders service, with a schema for orders and customers",
            "We keep DuckDB rather than SQLite: SQLite's full-text search needed full rebuilds",
            "Run the tests with pytest -q and tell me which ones fail, with their messages",
            "Good. Now add a migration for the customers table and commit it",
        ):
            send(client, anthropic_turn(history, text), "s1", project)
            history.append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    with api(server) as client:
        assert client.post("/lore/api/distill", params={"session": "s1"}).status_code == 200
    assert curator_calls(fake_upstream) == 1
    found = entries(server, project)
    # The decision without a rejected alternative and the secret are dropped.
    assert set(found) == {"Use DuckDB for the store", "Test runner", "Deploy with deploy.sh"}
    decision = found["Use DuckDB for the store"]
    assert "Rejected: SQLite" in decision["content"]
    assert (decision["created_by"], decision["source_session"]) == ("curator", "s1")
    assert decision["worker_model"]

    # .lore.md follows the store.
    lore_md = project / ".lore.md"
    poll(
        lambda: lore_md.exists() and "Use DuckDB for the store" in lore_md.read_text(), "the knowledge upkeep"
    )
    before = lore_md.read_text()
    assert f"<!-- lore:{decision['logical_id']} -->" in before

    # One new fact is a one-entry diff.
    with api(server) as client:
        added = client.post(
            "/lore/api/knowledge",
            json={
                "project": str(project),
                "category": "gotcha",
                "title": "Port 8377 in use",
                "content": "A second gateway on the same port fails at start: stop the first.",
            },
        )
    assert added.status_code == 201
    poll(lambda: "Port 8377 in use" in lore_md.read_text(), "the knowledge upkeep")
    after = lore_md.read_text()
    diff = [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if not line.startswith(("---", "+++", "@@"))
    ]
    assert all(line.startswith("+") for line in diff)
    assert [line for line in diff if line.strip("+ ")] == [
        f"+<!-- lore:{added.json()['entry']['logical_id']} -->",
        "+### Port 8377 in use",
        "+A second gateway on the same port fails at start: stop the first.",
    ]

    # A hand edit is imported.
    time.sleep(0.05)
    lore_md.write_text(after.replace("Run the tests with pytest -q.", "Run the tests with pytest -q -x."))
    poll(
        lambda: entries(server, project)["Test runner"]["content"] == "Run the tests with pytest -q -x.",
        "the knowledge upkeep",
    )
    assert entries(server, project)["Test runner"]["version"] == 2

    # Deleted, then re-added by hand (marker kept): refused, with the reason in the log.
    gotcha = entries(server, project)["Port 8377 in use"]
    with api(server) as client:
        assert client.delete(f"/lore/api/knowledge/{gotcha['id']}").status_code == 200
    poll(lambda: "Port 8377 in use" not in lore_md.read_text(), "the knowledge upkeep")
    lore_md.write_text(
        lore_md.read_text().rstrip("\n") + "\n\n" + "\n".join(diff_entry(after, gotcha)) + "\n"
    )
    poll(
        lambda: any("not imported" in r.getMessage() and "deleted" in r.getMessage() for r in caplog.records),
        "the knowledge upkeep",
    )
    assert "Port 8377 in use" not in entries(server, project)
    with api(server) as client:
        history_of = client.get(f"/lore/api/knowledge/{gotcha['id']}").json()
    assert history_of["entry"]["is_deleted"] and history_of["entry"]["is_current"]

    # Session 2's first request carries what session 1 taught, without any recall call.
    fake_upstream.requests.clear()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        send(client, anthropic_turn([], "Add an index to the orders store"), "s2", project)
    first = upstream_bodies(fake_upstream)[0]
    system = json.dumps(first["system"])
    assert "Run the tests with pytest -q -x." in system  # the preference, in full
    assert "Use DuckDB for the store" in system  # the decision: catalogue and context block
    assert "its full-text search is LanceDB" in system
    assert not any(
        part.get("type") == "tool_use" and part.get("name") == "recall"
        for m in first["messages"]
        for part in (m["content"] if isinstance(m["content"], list) else [])
    )

    # The curator supersedes the preference; a later session never sees the old value.
    with httpx.Client(base_url=server.url, timeout=30) as client:
        history = []
        for text in (
            "Please switch the test runner to tox from now on, pytest alone misses the env setup",
            "Update the CI workflow so that it calls tox with the py311 environment only",
            "Then run the whole suite through tox once and report the counts of passed tests",
        ):
            send(client, anthropic_turn(history, text), "s3", project)
            history.append({"role": "assistant", "content": [{"type": "text", "text": "done"}]})
    with api(server) as client:
        assert client.post("/lore/api/distill", params={"session": "s3"}).status_code == 200
    now = entries(server, project)
    assert now["Test runner"]["content"] == "Run the tests with tox -e py311."
    assert "Deploy with deploy.sh" not in now  # deleted by the curator: a death certificate
    poll(lambda: "deploy.sh" not in lore_md.read_text(), "the knowledge upkeep")
    fake_upstream.requests.clear()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        send(client, anthropic_turn([], "Run the test suite"), "s4", project)
    text = json.dumps(upstream_bodies(fake_upstream)[0])
    assert "tox -e py311" in text and "pytest -q" not in text


def _entries_shown(user: str) -> list[tuple[str, str]]:
    import re

    return re.findall(r'<entry id="(k:[0-9a-z_-]+)" category="[a-z]+" title="([^"]*)">', user)


def diff_entry(text: str, entry: dict[str, Any]) -> list[str]:
    """The lines of one entry in a .lore.md text (marker, title, content)."""
    lines = text.splitlines()
    start = lines.index(f"<!-- lore:{entry['logical_id']} -->")
    end = start + 1
    while end < len(lines) and not lines[end].startswith(("<!-- lore:", "## ")):
        end += 1
    return lines[start:end]


# ---------------------------------------------------------------------------------------------
# Cache stability on every wire API
# ---------------------------------------------------------------------------------------------

TURNS = 50


def chat_body(history: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": "gpt-4.1",
        "messages": [{"role": "system", "content": "You are a coding agent."}, *history],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
    }


def responses_body(history: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": "gpt-4.1",
        "instructions": "You are a coding agent.",
        "input": list(history),
        "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
        "store": False,
    }


def strip_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_markers(v) for v in value]
    return value


def items_of(api_name: str, body: dict[str, Any]) -> list[Any]:
    """The conversation part of a request (Chat's system messages are the head)."""
    if api_name == "responses":
        return body["input"]
    return [m for m in body["messages"] if m["role"] != "system"]


def head_of(api_name: str, body: dict[str, Any]) -> Any:
    """The system and knowledge part of a request, as sent."""
    if api_name == "anthropic":
        return body["system"]
    if api_name == "responses":
        return body["instructions"]
    return [m for m in body["messages"] if m["role"] == "system"]


# Fifty turns each: the Chat and Responses cases are slow, the Anthropic one keeps the rule in
# the fast run.
@pytest.mark.parametrize(
    "api_name",
    [
        "anthropic",
        pytest.param("chat", marks=pytest.mark.slow),
        pytest.param("responses", marks=pytest.mark.slow),
    ],
)
def test_fifty_turns_with_knowledge_changing_keep_the_prompt_cache(
    api_name: str,
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    project: Path,
) -> None:
    server = start_gateway(CONFIG)
    book = server.gateway.knowledge
    first = server.call(
        book.create(
            project=str(project), category="preference", title="Style", content="Use type hints everywhere."
        )
    )
    server.call(
        book.create(
            project=str(project),
            category="architecture",
            title="Orders store",
            content="Orders live in DuckDB.",
        )
    )
    changes = {
        20: lambda: book.create(
            project=str(project),
            category="gotcha",
            title="Flaky clock",
            content="Mock time in test_orders.py.",
        ),
        35: lambda: book.update(first.version.logical_id, content="Use type hints and dataclasses."),
    }
    history: list[dict[str, Any]] = []
    path = {"anthropic": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}[
        api_name
    ]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for turn in range(1, TURNS + 1):
            if turn in changes:
                server.call(changes[turn]())
            text = f"turn {turn}: change the orders store"
            if api_name == "anthropic":
                body = anthropic_turn(history, text)
            else:
                history.append({"role": "user", "content": text})
                body = chat_body(history) if api_name == "chat" else responses_body(history)
            send(client, body, f"cache-{api_name}", project, path)
            history.append({"role": "assistant", "content": f"answer {turn}"})
    bodies = upstream_bodies(fake_upstream)
    assert len(bodies) == TURNS
    head = head_of(api_name, bodies[0])
    assert "Use type hints everywhere." in json.dumps(head) and "Orders live in DuckDB." in json.dumps(head)
    if api_name == "anthropic":
        # Four breakpoints at most; every 1-hour one before every 5-minute one.
        for body in bodies:
            ttls = [
                part["cache_control"].get("ttl", "5m")
                for part in [*body["system"], *body["tools"]]
                + [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]]
                if "cache_control" in part
            ]
            assert len(ttls) <= 4 and ttls == sorted(ttls, key=lambda t: t != "1h") and "1h" in ttls
    for n, (before, after) in enumerate(itertools.pairwise(bodies), start=2):
        assert head_of(api_name, after) == head, f"turn {n}: the system and knowledge blocks changed"
        old, new = strip_markers(items_of(api_name, before)), strip_markers(items_of(api_name, after))
        assert new[: len(old)] == old, f"turn {n} does not extend turn {n - 1}"
    for n, body in enumerate(bodies, start=1):
        text = json.dumps(items_of(api_name, body))
        assert text.count("Mock time in test_orders.py.") == (1 if n >= 20 else 0)
        assert text.count("Use type hints and dataclasses.") == (1 if n >= 35 else 0)
        assert "Use type hints everywhere." not in text  # the baseline stays in the system part
    # The deltas sit where they first appeared: after the user message of turns 20 and 35.
    last = items_of(api_name, bodies[-1])
    where = [i for i, item in enumerate(last) if "Lore: project knowledge changed" in json.dumps(item)]
    assert len(where) == 2
    assert "turn 20:" in json.dumps(last[where[0] - 1]) and "turn 35:" in json.dumps(last[where[1] - 1])


def test_requests_without_tools_get_no_knowledge(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, project: Path
) -> None:
    server = start_gateway(CONFIG)
    server.call(
        server.gateway.knowledge.create(
            project=str(project), category="preference", title="Style", content="Use type hints everywhere."
        )
    )
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": "Summarise this conversation title"}],
    }
    raw = json.dumps(body).encode()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        response = client.post(
            "/v1/messages",
            content=raw,
            headers={
                "x-session-id": "side",
                "x-lore-project": str(project),
                "content-type": "application/json",
            },
        )
    assert response.status_code == 200
    assert [r.body for r in fake_upstream.api_requests()] == [raw]  # byte for byte
