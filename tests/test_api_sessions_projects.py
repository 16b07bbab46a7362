"""``GET /lore/api/sessions`` pages and filters, and ``GET /lore/api/projects``, over real
sockets against a gateway that stored real traffic (``/v1/messages`` through the fake
upstream): what the dashboard's sessions and projects pages read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer


def model_request(server: ThreadedServer, session: str, project: str, words: str) -> None:
    headers = {
        "x-api-key": "sk-ant-test",
        "anthropic-version": "2023-06-01",
        "x-lore-session": session,
        "x-lore-project": project,
    }
    body = {"model": "claude-sonnet-4-5", "max_tokens": 20, "messages": [{"role": "user", "content": words}]}
    response = httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text


@pytest.fixture
def server(start_gateway: Callable[..., ThreadedServer]) -> ThreadedServer:
    server = start_gateway()
    model_request(server, "s-one", "/srv/one", "Deploy the service")
    model_request(server, "s-two", "/srv/one", "fix the flaky test")
    model_request(server, "s-three", "/srv/two", "write the docs")
    model_request(server, "s-four", "/srv/two", "review the DEPLOY script")
    return server


def get(server: ThreadedServer, path: str, **params: Any) -> httpx.Response:
    return httpx.get(server.url + path, params=params, headers=api_headers(), timeout=30)


def test_sessions_come_in_keyset_pages_with_filters(server: ThreadedServer) -> None:
    everything = get(server, "/lore/api/sessions", limit=100).json()
    ids = [s["id"] for s in everything]
    assert sorted(ids) == ["s-four", "s-one", "s-three", "s-two"]
    assert all(s["message_count"] == 2 and s["branch_count"] == 1 for s in everything)
    # Page by page, one session each, by the last row's (updated_at, id).
    seen: list[str] = []
    before = ""
    while True:
        page = get(server, "/lore/api/sessions", limit=1, **({"before": before} if before else {})).json()
        if not page:
            break
        seen += [s["id"] for s in page]
        before = f"{page[-1]['updated_at']!r}~{page[-1]['id']}"
    assert seen == ids
    # A session arriving meanwhile does not shift a later page.
    second = f"{everything[0]['updated_at']!r}~{everything[0]['id']}"
    model_request(server, "s-five", "/srv/two", "a new one")
    assert [s["id"] for s in get(server, "/lore/api/sessions", before=second).json()] == ids[1:]
    assert [s["id"] for s in get(server, "/lore/api/sessions", limit=1).json()] == ["s-five"]

    def listed(**params: Any) -> list[str]:
        answer = get(server, "/lore/api/sessions", **params)
        assert answer.status_code == 200, answer.text
        return sorted(s["id"] for s in answer.json())

    assert listed(q="deploy") == ["s-four", "s-one"]  # the title, any case
    assert listed(q="S-THR") == ["s-three"]  # the id
    assert listed(q="/srv/two", project="/srv/two") == ["s-five", "s-four", "s-three"]
    assert listed(q="nothing like this") == []
    harness = everything[0]["harness"]
    assert listed(harness=harness) == sorted([*ids, "s-five"])
    assert listed(harness="no-such-harness") == []
    model = everything[0]["model"]
    assert model and listed(model=model) == sorted([*ids, "s-five"])
    newest = get(server, "/lore/api/sessions", limit=1).json()[0]
    assert listed(since=repr(newest["updated_at"])) == ["s-five"]
    for bad in ({"before": "yesterday"}, {"before": "12.5"}, {"before": "nan~s-one"}, {"since": "soon"}):
        answer = get(server, "/lore/api/sessions", **bad)
        assert answer.status_code == 400 and "error" in answer.json(), bad


def test_projects_are_counted_by_the_store(server: ThreadedServer) -> None:
    added = httpx.post(
        server.url + "/lore/api/knowledge",
        json={"project": "/srv/two", "category": "decision", "title": "Docs in docs/", "content": "Always."},
        headers=api_headers(),
        timeout=30,
    )
    assert added.status_code == 201, added.text
    httpx.post(
        server.url + "/lore/api/knowledge",
        json={"project": "/srv/knowledge-only", "category": "gotcha", "title": "Tabs", "content": "In make."},
        headers=api_headers(),
        timeout=30,
    ).raise_for_status()
    refused = httpx.get(server.url + "/lore/api/projects", timeout=30)
    assert refused.status_code == 401
    answer = get(server, "/lore/api/projects")
    assert answer.status_code == 200, answer.text
    rows = {p["project"]: p for p in answer.json()}
    assert list(rows)[:2] == ["/srv/two", "/srv/one"]  # most recently active first
    one, two = rows["/srv/one"], rows["/srv/two"]
    assert (one["sessions"], one["messages"], one["knowledge"]) == (2, 4, 0)
    assert (two["sessions"], two["messages"], two["knowledge"]) == (2, 4, 1)
    assert rows["/srv/knowledge-only"]["sessions"] == 0 and rows["/srv/knowledge-only"]["knowledge"] == 1
    sessions = get(server, "/lore/api/sessions", limit=100).json()
    assert two["last_activity"] == max(s["updated_at"] for s in sessions if s["project"] == "/srv/two")
    # The spend of a project's sessions: what /lore/api/spend says of each today.
    spend = {s["session"]: s["usd"] for s in get(server, "/lore/api/spend", days=1).json()["by_session"]}
    assert one["spend_usd"] > 0
    assert one["spend_usd"] == pytest.approx(spend["s-one"] + spend["s-two"], abs=1e-5)
    assert two["spend_usd"] == pytest.approx(spend["s-three"] + spend["s-four"], abs=1e-5)


def test_runs_and_their_events(server: ThreadedServer) -> None:
    for run, count in (("build", 5), ("review", 1)):
        events = [{"kind": "note", "content": f"{run} step {i}"} for i in range(count)]
        answer = httpx.post(
            server.url + "/v1/events",
            json={"project": "/srv/one", "run": run, "events": events},
            headers=api_headers(),
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
    assert httpx.get(server.url + "/lore/api/runs", timeout=30).status_code == 401
    runs = get(server, "/lore/api/runs", project="/srv/one").json()
    assert sorted((r["run"], r["last_seq"]) for r in runs) == [("build", 5), ("review", 1)]
    # Newest first: by the last change, an event or the consolidation catching up (which
    # runs in the background, so either run may have changed last).
    assert [r["updated_at"] for r in runs] == sorted((r["updated_at"] for r in runs), reverse=True)
    for r in runs:
        assert r["behind"] == r["last_seq"] - r["covered_seq"] >= 0 and r["lag_ms"] >= 0
    assert get(server, "/lore/api/runs", project="/srv/two").json() == []
    assert [r["run"] in ("build", "review") for r in get(server, "/lore/api/runs", limit=1).json()] == [True]

    page = get(server, "/lore/api/runs/events", project="/srv/one", run="build", limit=2).json()
    assert page["run"]["last_seq"] == 5
    assert [(e["seq"], e["content"]) for e in page["events"]] == [(5, "build step 4"), (4, "build step 3")]
    covered = page["run"]["covered_seq"]
    assert all(e["distilled"] == (e["seq"] <= covered) for e in page["events"])
    older = get(server, "/lore/api/runs/events", project="/srv/one", run="build", before=4).json()
    assert [e["seq"] for e in older["events"]] == [3, 2, 1]
    one = {"project": "/srv/one"}
    assert get(server, "/lore/api/runs/events", **one, run="build", before=1).json()["events"] == []
    assert get(server, "/lore/api/runs/events", **one, run="nope").status_code == 404
    assert get(server, "/lore/api/runs/events", **one).status_code == 400
    assert get(server, "/lore/api/runs/events", **one, run="build", before="x").status_code == 400
