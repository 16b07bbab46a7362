"""Secrets stay out of derived memory: provider keys, a private key block and a bearer token
planted in a session reach the upstream in the client's own requests (it needs them) and
nowhere else: not the store's files, not the worker's inputs, not the distillations, not a
recall result, not the local API's answers.

Real parts: a gateway with the DuckDB store and the fake provider as the session's upstream
and as the worker (observer prompts answered by a fake that echoes what it read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core.distill.prompts import OBSERVER_MARKER
from lore_core.testing.fake_upstream import FakeUpstream, Reply, ToolCall
from lore_core.testing.fake_worker import curator_responder
from lore_core.testing.net import api_headers
from lore_core.testing.poll import poll

pytest.importorskip("lore_store_duckdb")

SECRETS = {
    "anthropic key": "sk-ant-api03-" + "Qw7Er9Ty2Ui4Op6As8Df" * 3,
    "openai key": "sk-proj-" + "Zx1Cv3Bn5Mm7Lk9Jh2Gf" * 2,
    "github token": "ghp_" + "Aa1Bb2Cc3Dd4Ee5Ff6Gg7Hh8Ii9Jj0Kk1Ll",
    "aws key": "AKIA" + "QWERTYUIOPASDFGH",
    "bearer token": "tok_" + "Vb6Nm8Qw1Er3Ty5Ui7Op9",
    "private key": "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
}
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n" + SECRETS["private key"] + "\n-----END OPENSSH PRIVATE KEY-----"
)
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}
TOOLS = [{"name": "Bash", "description": "Run a command", "input_schema": SCHEMA}]


def _leaks(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


def test_planted_secrets_reach_only_the_upstream_that_needs_them(
    start_gateway: Any, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    # Observer and curator prompts answered by the responder: a curation that runs late must
    # not take the model's queued replies (it did: the recall round then had no tool result).
    fake_upstream.responder = curator_responder(lambda _user: [])
    server = start_gateway(
        config={
            "worker": {"upstream": fake_upstream.url, "apiKey": "worker-key", "model": "claude-test"},
            "distill": {"idleTimeoutSeconds": 0.3, "firstSegmentMinMessages": 3, "firstSegmentMinTokens": 8},
            # Expansion would send the recall query to the worker: the query is the model's,
            # not the session's, and is not what this test is about.
            "recall": {"expand": "never"},
        }
    )
    session = {"x-session-id": "secret-session", "x-api-key": "client-key", "anthropic-version": "2023-06-01"}
    history: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": f"Deploy with ANTHROPIC_API_KEY={SECRETS['anthropic key']} and "
            f"OPENAI_API_KEY={SECRETS['openai key']}; the deploy key is\n{PRIVATE_KEY}",
        }
    ]
    call = ToolCall(
        "Bash", {"command": f"curl -H 'Authorization: Bearer {SECRETS['bearer token']}' deploy.local"}
    )
    fake_upstream.enqueue(Reply(text="Running the deploy.", tool_calls=[call]))

    def turn() -> dict[str, Any]:
        body = {"model": "claude-test", "max_tokens": 100, "messages": history, "tools": TOOLS}
        reply = httpx.post(server.url + "/v1/messages", json=body, headers=session, timeout=30)
        reply.raise_for_status()
        answer = reply.json()
        history.append({"role": "assistant", "content": answer["content"]})
        return answer

    turn()
    output = f"pushed with GITHUB_TOKEN={SECRETS['github token']} as {SECRETS['aws key']}: deploy ok"
    history.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": output}]}
    )
    fake_upstream.enqueue(Reply(text="The deploy went through."))
    turn()

    # Distilled once the session is idle (the worker is the fake provider).
    def distilled() -> list[dict[str, Any]]:
        rows = httpx.get(
            server.url + "/lore/api/distillations",
            params={"session": "secret-session"},
            headers=api_headers(),
        ).json()
        return rows if isinstance(rows, list) and rows else []

    distillations = poll(distilled, "a distillation of the session")

    # The model asks its memory about the deploy: the recall result goes upstream in the
    # gateway's follow-up request.
    recall = ToolCall("recall", {"query": "deploy key GITHUB_TOKEN ANTHROPIC_API_KEY"})
    fake_upstream.enqueue(Reply(text="", tool_calls=[recall]), Reply(text="Found it."))
    history.append({"role": "user", "content": "Which keys did the deploy use?"})
    turn()

    requests = fake_upstream.api_requests()
    worker_inputs = [r for r in requests if OBSERVER_MARKER in r.body.decode("utf-8", "replace")]
    assert worker_inputs, "the observer ran through the worker"
    for req in worker_inputs:
        assert _leaks(req.body.decode("utf-8", "replace")) == [], "the worker's input"
    for row in distillations:
        assert _leaks(str(row)) == [], "a distillation"

    follow_up = requests[-1].json
    results = [
        block
        for message in follow_up["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result" and block.get("tool_use_id") == recall.id
    ]
    assert results and "REDACTED" in str(results), "the recall result found the planted lines"
    assert _leaks(str(results)) == [], "the recall result"
    # The client's own requests did carry them upstream: that is the one place they belong.
    assert set(_leaks(requests[0].body.decode())) == {"anthropic key", "openai key", "private key"}

    # The local API's reads.
    for path, params in [
        ("/lore/api/sessions/secret-session", {}),
        ("/lore/api/search", {"q": "deploy"}),
        ("/lore/api/recall", {"q": "deploy keys", "session": "secret-session"}),
    ]:
        reply = httpx.get(server.url + path, params=params, headers=api_headers(), timeout=30)
        assert reply.status_code == 200, path
        assert _leaks(reply.text) == [], path

    # Every file the gateway wrote: the store, its indexes, the journal, the token.
    server.call(server.gateway.writer.wait_idle())
    server.stop()
    for path in (tmp_path / "home").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            leaked = [name for name, value in SECRETS.items() if value.encode() in data]
            assert leaked == [], f"{path}: {leaked}"
