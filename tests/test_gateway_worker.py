"""The gateway lends each session's credentials (in memory only) to its background work,
and reports the worker and the embedding provider on /health."""

from __future__ import annotations

import json

import httpx

from lore_core.testing.fake_upstream import Reply

BODY = {"model": "claude-haiku-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}


def test_a_session_credentials_reach_the_worker_but_never_health(gateway, fake_upstream):
    key = "sk-ant-worker-secret-123"
    with httpx.Client(timeout=30) as client:
        r = client.post(
            gateway.url + "/v1/messages", json=BODY, headers={"x-api-key": key, "x-session-id": "s-42"}
        )
        assert r.status_code == 200
        health = client.get(gateway.url + "/health").json()
    assert key not in json.dumps(health)
    assert health["worker"]["sessions_with_credentials"] == 1
    assert "embedder" in health

    # A background call for that session goes to the session's upstream with its key.
    fake_upstream.enqueue(Reply(text="observed"))
    worker = gateway.gateway.worker
    result = gateway.call(worker.complete("You observe.", "segment", session_id="s-42", purpose="observer"))
    assert result.text == "observed"
    seen = fake_upstream.api_requests()[-1]
    assert seen.header("x-api-key") == key
    assert seen.json["model"] == "claude-haiku-4-5"
