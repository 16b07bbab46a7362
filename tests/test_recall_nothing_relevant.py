"""A query about something never stored gets "nothing in memory matches" on every surface:
the model's recall tool through the proxy, the local API, ``lore recall`` and packs (the MCP
tool: ``plugins/mcp/tests``). A query about what was stored still gets its memories."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from lore_core import cli
from lore_core.context.framing import DATA_NOTICE
from lore_core.recall.tool import RESULT_LABEL, TOOL_NAME
from lore_core.testing.fake_upstream import FakeUpstream, Reply, ToolCall
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer

PROJECT = "/home/dev/zoo"
NEVER = "which sourdough starter recipe did grandma send for the quokka enclosure?"
STORED = "which test fails with the wallaby KeyError?"
TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]


def _converse(
    server: ThreadedServer, fake: FakeUpstream, session: str, turns: list[str]
) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    headers = {"x-api-key": "k", "x-session-id": session, "x-lore-project": PROJECT}
    for text in turns:
        history.append({"role": "user", "content": text})
        body = {"model": "claude-test", "max_tokens": 20, "messages": history, "tools": TOOLS}
        reply = httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30).json()
        history.append({"role": "assistant", "content": reply["content"]})
    return history


def test_nothing_relevant_on_every_surface(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = start_gateway()
    _converse(
        server,
        fake_upstream,
        "s-zoo",
        [
            "the flaky test is tests/test_quokka.py",
            "quokka fails with KeyError: 'wallaby' when the enclosure map is empty",
        ],
    )
    server.call(server.gateway.writer.wait_idle(timeout=10.0), timeout=30)

    # 1. The model's tool, through the proxy.
    for query, nothing in ((NEVER, True), (STORED, False)):
        fake_upstream.enqueue(
            Reply(text="", tool_calls=[ToolCall(TOOL_NAME, {"query": query})]), Reply(text="ok")
        )
        body = {
            "model": "claude-test",
            "max_tokens": 20,
            "messages": [{"role": "user", "content": "have we seen this?"}],
            "tools": TOOLS,
        }
        headers = {"x-api-key": "k", "x-session-id": "s-ask", "x-lore-project": PROJECT}
        assert (
            httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30).status_code == 200
        )
        follow_up = fake_upstream.api_requests()[-1].json
        result = follow_up["messages"][-1]["content"][0]["content"]
        # Results come framed as reference data (security review F9).
        frame = f"<lore-{RESULT_LABEL}>\n{DATA_NOTICE}\n\n"
        assert result.startswith(frame), result[:300]
        shown = result.removeprefix(frame)
        assert shown.startswith(f'Nothing in memory matches "{query}"') is nothing, result[:1500]
        if not nothing:
            assert "wallaby" in result

    # 2. The local API says so in its JSON.
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=30) as client:
        never = client.get("/lore/api/recall", params={"q": NEVER, "project": PROJECT}).json()
        stored = client.get("/lore/api/recall", params={"q": STORED, "project": PROJECT}).json()
    assert never["matched"] is False and stored["matched"] is True
    assert all(r["relevance"] < 0.45 for r in never["results"])

    # 3. `lore recall`.
    monkeypatch.setenv("LORE_PORT", str(server.port))
    capsys.readouterr()
    assert cli.main(["recall", NEVER, "--project", PROJECT]) == 0
    assert capsys.readouterr().out.startswith(f'Nothing in memory matches "{NEVER}"')
    assert cli.main(["recall", STORED, "--project", PROJECT]) == 0
    assert "Nothing in memory matches" not in capsys.readouterr().out


def test_a_pack_leaves_out_memories_that_match_nothing_of_its_query(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    server = start_gateway({"events": {"consolidateDelayMs": 20, "memoryMaxEvents": 2}})
    events = [
        {"kind": "note", "content": "the deployment to staging crashed with exit code 137"},
        {"kind": "note", "content": "raised the deployment memory limit to 2 GiB"},
    ]
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=30) as client:
        assert (
            client.post("/v1/events", json={"project": PROJECT, "run": "r1", "events": events}).status_code
            == 200
        )

        def pack(query: str) -> dict[str, Any]:
            answer = client.post(
                "/v1/pack", json={"project": PROJECT, "run": "r1", "query": query, "min_seq": 2}
            )
            assert answer.status_code == 200, answer.text
            return answer.json()

        deadline = time.monotonic() + 20
        while pack("deployment crashed")["covered_seq"] < 2:
            assert time.monotonic() < deadline, "the run was not consolidated"
            time.sleep(0.1)
        assert any("exit code 137" in i["text"] for i in pack("deployment crashed")["sections"][1]["items"])
        never = pack(NEVER)
        assert never["sections"][1]["items"] == []
        assert "(nothing in memory matches the query)" in json.dumps(never)
