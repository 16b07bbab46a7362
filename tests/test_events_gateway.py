"""``POST /v1/events``, ``POST /v1/pack`` and ``/openapi.json`` through a real gateway (real
sockets, the DuckDB store when installed): the token, validation against the document,
consolidation behind the writes and across a restart, and ``degraded`` exactly when a
retrieval leg is slower than the partial timeout."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import pytest

from lore_core.hookspecs import hookimpl
from lore_core.http.app import create_app
from lore_core.http.openapi import document, validate
from lore_core.plugins import Factory
from lore_core.testing.builders import TopicEmbedder
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.net import api_headers
from lore_core.testing.poll import poll
from lore_core.testing.server import ThreadedServer

PROJECT = "/work/shop"


class SlowEmbedder(TopicEmbedder):
    """Answers, but later than the packs' partial timeout (set to 0.3 s below)."""

    name = "slow"
    slow = False

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if SlowEmbedder.slow:
            await asyncio.sleep(2.0)
        return await super().embed(texts)


class EmbeddersPlugin:
    @hookimpl
    def lore_register_embedders(self, register: Callable[[Any], None]) -> None:
        register(Factory("topics", lambda config: TopicEmbedder()))
        register(Factory("slow", lambda config: SlowEmbedder()))


def write(client: httpx.Client, run: str, *events: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/v1/events", json={"project": PROJECT, "run": run, "events": list(events)})
    assert answer.status_code == 200, answer.text
    assert validate(answer.json(), "EventsResponse") is None
    return answer.json()


def pack(client: httpx.Client, run: str, query: str, **kw: Any) -> dict[str, Any]:
    answer = client.post("/v1/pack", json={"project": PROJECT, "run": run, "query": query, **kw})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert validate(body, "PackResponse") is None, validate(body, "PackResponse")
    return body


def test_events_need_the_token_and_a_loopback_host(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    server = start_gateway()
    body = {"run": "r1", "events": [{"kind": "note", "content": "secret plans"}]}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.post("/v1/events", json=body).status_code == 401
        wrong = {"Authorization": "Bearer not-the-token"}
        assert client.post("/v1/events", json=body, headers=wrong).status_code == 401
        assert client.post("/v1/pack", json={"run": "r1", "query": "plans"}).status_code == 401
        rebinding = {**api_headers(), "Host": "evil.example"}
        assert client.post("/v1/events", json=body, headers=rebinding).status_code == 421
        browser = {**api_headers(), "Origin": "http://evil.example"}
        assert client.post("/v1/events", json=body, headers=browser).status_code == 403
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=30) as client:
        answer = pack(client, "r1", "plans")
        assert answer["last_seq"] == 0  # nothing was written by the refused requests
        # Other methods on these paths are never forwarded to a provider.
        assert client.get("/v1/pack").status_code == 404
        assert client.get("/v1/events").status_code == 404
    assert fake_upstream.requests == []


def test_writes_consolidate_behind_and_packs_read_their_writes(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    config = {"embedding": {"provider": "topics"}, "events": {"consolidateDelayMs": 50, "memoryMaxEvents": 2}}
    server = start_gateway(config, extra_plugins=(EmbeddersPlugin(),))
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=30) as client:
        first = write(
            client, "build-7",
            {"kind": "note", "content": "the deployment to staging crashed with exit code 137"},
            {"kind": "status", "content": "ana is editing deploy.yaml", "working": True, "key": "ana"},
        )  # fmt: skip
        assert first["seqs"] == [1, 2] and first["last_seq"] == 2
        second = write(client, "build-7", {"kind": "note", "content": "raised the memory limit to 2 GiB"})
        assert second["seqs"] == [3]
        # Read-your-writes at once: whatever the pipeline has done, 1-3 are in the pack.
        now = pack(client, "build-7", "release", min_seq=3)
        raw = [e["seq"] for e in now["sections"][2]["events"]]
        assert all(s <= now["covered_seq"] or s in raw for s in (1, 2, 3))
        working = now["sections"][0]
        assert working["source"] == "live" and working["facts"][0]["content"] == "ana is editing deploy.yaml"

        poll(lambda: pack(client, "build-7", "release")["covered_seq"] == 3, "consolidation of the run")

        # The vector leg finds the memory by meaning ("release" ~ "deployment") once the
        # indexer embedded it.
        def found() -> dict[str, Any] | None:
            done = pack(client, "build-7", "release", min_seq=3, include_knowledge=True)
            texts = [i["text"] for i in done["sections"][1]["items"]]
            return done if any("deployment to staging crashed" in t for t in texts) else None

        done = poll(found, "the memory found by its meaning")
        assert done["sections"][2]["events"] == [] and done["freshness_lag_ms"] == 0
        assert "degraded" not in done
        assert fake_upstream.requests == []  # no provider call anywhere
    health = httpx.get(f"{server.url}/health").json()
    assert health["events"]["events"] == 3 and health["events"]["memories"] >= 1


def test_the_pipeline_resumes_after_a_restart(
    start_gateway: Callable[..., ThreadedServer],
) -> None:
    # A delay far beyond the test: nothing is consolidated before the restart.
    server = start_gateway({"events": {"consolidateDelayMs": 600_000}})
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=30) as client:
        write(client, "night", *({"kind": "note", "content": f"finding {i}"} for i in range(5)))
        assert pack(client, "night", "finding")["covered_seq"] == 0
    server.stop()
    server = start_gateway({"events": {"consolidateDelayMs": 10}})
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=30) as client:
        poll(lambda: pack(client, "night", "finding")["covered_seq"] == 5, "the resumed consolidation")
        assert write(client, "night", {"kind": "note", "content": "finding 5"})["seqs"] == [6]
        again = pack(client, "night", "finding", min_seq=6)
        held = [e["seq"] for e in again["sections"][2]["events"]]
        assert all((s <= again["covered_seq"]) != (s in held) for s in range(1, 7))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"events": [{"kind": "note", "content": "x"}]}, "body.run is required"),
        ({"run": "r", "events": []}, "body.events must have at least 1 items"),
        ({"run": "r", "events": [{"kind": "note", "content": "x", "extra": 1}]}, "body.events[0].extra"),
        ({"run": "bad run!", "events": [{"kind": "note", "content": "x"}]}, "body.run does not match"),
        (
            {"run": "r", "project": "relative/dir", "events": [{"kind": "note", "content": "x"}]},
            "body.project",
        ),
        ({"run": "r", "events": [{"kind": "note", "content": 3}]}, "body.events[0].content must be string"),
    ],
)
def test_bad_writes_get_a_400_naming_the_field(
    gateway: ThreadedServer, body: dict[str, Any], field: str
) -> None:
    with httpx.Client(base_url=gateway.url, headers=api_headers(), timeout=30) as client:
        answer = client.post("/v1/events", json=body)
        assert answer.status_code == 400 and field in answer.json()["error"]
        bad_pack = client.post("/v1/pack", json={"run": "r", "query": "x", "min_seq": -1})
        assert bad_pack.status_code == 400 and "body.min_seq must be at least 0" in bad_pack.json()["error"]
        not_json = client.post("/v1/pack", content=b"{", headers={"content-type": "application/json"})
        assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]


def test_degraded_names_exactly_the_leg_slower_than_the_partial_timeout(
    start_gateway: Callable[..., ThreadedServer],
) -> None:
    config = {
        "embedding": {"provider": "slow"},
        "events": {"consolidateDelayMs": 10, "retrievalPartialTimeoutMs": 300},
    }
    server = start_gateway(config, extra_plugins=(EmbeddersPlugin(),))
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=30) as client:
        write(client, "slow-run", {"kind": "note", "content": "the database migration failed on index 4"})
        poll(lambda: pack(client, "slow-run", "migration")["covered_seq"] == 1, "consolidation")
        SlowEmbedder.slow = False
        fast = pack(client, "slow-run", "migration")
        assert "degraded" not in fast
        SlowEmbedder.slow = True
        try:
            slow = pack(client, "slow-run", "migration", include_knowledge=True)
        finally:
            SlowEmbedder.slow = False
        assert slow["degraded"] == ["memories:vector", "knowledge:vector"]
        # Still a full answer from the legs that finished.
        assert any("migration failed" in i["text"] for i in slow["sections"][1]["items"])


def test_the_openapi_document_describes_the_memory_api(gateway: ThreadedServer) -> None:
    answer = httpx.get(f"{gateway.url}/openapi.json")
    assert answer.status_code == 200
    doc = answer.json()
    assert doc == document() and doc["openapi"].startswith("3.1")
    assert {"/v1/events", "/v1/pack", "/lore/api/recall"} <= set(doc["paths"])
    # Every route of the local API is in the document (and nothing it lacks).
    app = create_app(gateway.gateway)
    routes = {
        re.sub(r"<(?:\w+:)?(\w+)>", "{}", str(rule.rule))
        for rule in app.url_map.iter_rules()
        if str(rule.rule).startswith(("/lore/api", "/v1/events", "/v1/pack"))
    }
    documented = {re.sub(r"\{\w+\}", "{}", p) for p in doc["paths"]}
    assert routes - documented == set(), "routes missing from /openapi.json"
    assert {p for p in documented if p.startswith(("/lore/api", "/v1/"))} - routes == set()
