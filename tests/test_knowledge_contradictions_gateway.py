"""Contradictions through a real gateway (real sockets, the DuckDB store when installed, the
loopback provider as the worker that judges): an opposing pair becomes ``open``, a similar
compatible pair ``cleared``, neither entry changes; editing one side brings the pair back
to the judge; resolving keeps one (the other gets a death certificate) or both; the CLI
prints and settles the same pairs through the gateway."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core import cli
from lore_core.knowledge.prompts import CONTRADICTION_MARKER
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.fake_worker import contradiction_responder, request_texts
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer

CONFIG = {"distill": {"idleTimeoutSeconds": 3600}}


def opposite(prompt: str) -> bool:
    text = prompt.lower()
    return "tabs" in text and "spaces" in text


def judge_calls(fake: FakeUpstream) -> int:
    return sum(CONTRADICTION_MARKER in request_texts(r.json)[0] for r in fake.api_requests())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    root.mkdir()
    return root


def add(client: httpx.Client, project: Path, title: str, content: str) -> dict[str, Any]:
    response = client.post(
        "/lore/api/knowledge",
        json={"project": str(project), "category": "pattern", "title": title, "content": content},
    )
    assert response.status_code == 201, response.text
    return response.json()["entry"]


def test_pairs_are_judged_recorded_and_settled_by_a_person(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    project: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_upstream.responder = contradiction_responder(opposite)
    server = start_gateway(CONFIG)
    # One model request: the worker then judges with this session's provider credentials.
    with httpx.Client(base_url=server.url, timeout=30) as model:
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
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=60) as client:
        tabs = add(client, project, "Indentation", "Indent Python code with tabs in this repo.")
        spaces = add(client, project, "Indent style", "Indent Python code with four spaces in this repo.")
        width = add(
            client, project, "Indent width", "Indent Python code with care in this repo, wrap at 110."
        )
        before = client.get("/lore/api/knowledge", params={"project": str(project)}).json()

        scan = client.post("/lore/api/knowledge/contradictions/scan", params={"project": str(project)})
        assert scan.status_code == 200, scan.text
        report = scan.json()
        assert report["opened"] == [sorted([tabs["id"], spaces["id"]])] and report["stopped"] is None
        calls = judge_calls(fake_upstream)
        assert calls == report["judged"] >= 2

        pairs = client.get("/lore/api/knowledge/contradictions", params={"project": str(project)}).json()
        assert pairs[0]["status"] == "open"  # open ones first
        assert {pairs[0]["first"]["title"], pairs[0]["second"]["title"]} == {"Indentation", "Indent style"}
        assert pairs[0]["judged_by"].startswith("worker:")
        assert {p["status"] for p in pairs[1:]} == {"cleared"}
        # Judged, never changed.
        assert client.get("/lore/api/knowledge", params={"project": str(project)}).json() == before

        # Nothing new: a second scan asks nothing.
        client.post("/lore/api/knowledge/contradictions/scan", params={"project": str(project)})
        assert judge_calls(fake_upstream) == calls
        # One side's text changes: its pairs are judged again (and the tabs pair is now fine).
        edit = client.patch(
            f"/lore/api/knowledge/{spaces['id']}",
            json={"content": "Indent Python code with tabs, never mixed."},
        )
        assert edit.status_code == 200
        again = client.post(
            "/lore/api/knowledge/contradictions/scan", params={"project": str(project)}
        ).json()
        assert again["judged"] >= 1 and judge_calls(fake_upstream) > calls
        still_open = client.get(
            "/lore/api/knowledge/contradictions", params={"project": str(project), "status": "open"}
        ).json()
        assert still_open == []

        # Bad requests are a 4xx with a reason.
        bad = client.post("/lore/api/knowledge/contradictions/resolve", json={"first": tabs["id"]})
        assert bad.status_code == 400
        both_given = client.post(
            "/lore/api/knowledge/contradictions/resolve",
            json={"first": tabs["id"], "second": width["id"], "keep": tabs["id"], "keep_both": True},
        )
        assert both_given.status_code == 400
        missing = client.post(
            "/lore/api/knowledge/contradictions/resolve",
            json={"first": tabs["id"], "second": "k:nope-nope", "keep_both": True},
        )
        assert missing.status_code == 404
        assert client.get("/lore/api/knowledge/contradictions", params={"status": "maybe"}).status_code == 400

    # The CLI, through the running gateway: list, keep both, keep one.
    monkeypatch.setenv("LORE_PORT", str(server.port))
    capsys.readouterr()
    assert cli.main(["knowledge", "contradictions", "--project", str(project)]) == 0
    listing = capsys.readouterr().out
    assert "cleared" in listing and "Indent width" in listing
    assert cli.main(["knowledge", "resolve", tabs["id"], width["id"], "--keep-both"]) == 0
    assert capsys.readouterr().out.startswith("kept")
    assert cli.main(["knowledge", "resolve", tabs["id"], spaces["id"], "--keep", spaces["id"]]) == 0
    assert capsys.readouterr().out.startswith("resolved")
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=30) as client:
        alive = {
            e["title"] for e in client.get("/lore/api/knowledge", params={"project": str(project)}).json()
        }
        statuses = {
            frozenset((p["first"]["id"], p["second"]["id"])): p["status"]
            for p in client.get("/lore/api/knowledge/contradictions", params={"project": str(project)}).json()
        }
    assert alive == {"Indent style", "Indent width"}
    assert statuses[frozenset((tabs["id"], width["id"]))] == "kept"
    assert statuses[frozenset((tabs["id"], spaces["id"]))] == "resolved"
