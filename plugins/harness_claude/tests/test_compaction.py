"""Claude Code's own compaction request is answered from Lore's distillations, without an
upstream call, in the wire format it asked for (streamed or not)."""

from __future__ import annotations

import json

import httpx
import pytest
from lore_harness_claude.plugin import COMPACTION_MARKER

from lore_core.testing.fake_upstream import Reply
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

SESSION = "5d0c7a4e-compaction-test"
HEADERS = {
    "x-api-key": "sk-ant-test-key",
    "user-agent": "claude-cli/2.1.197 (external, sdk-cli)",
    "x-claude-code-session-id": SESSION,
    "anthropic-version": "2023-06-01",
}


def turn(history: list[dict], text: str) -> list[dict]:
    return [*history, {"role": "user", "content": [{"type": "text", "text": text}]}]


@pytest.mark.parametrize("stream", [False, True])
def test_compaction_is_answered_from_memory(start_gateway, fake_upstream, stream):
    server = start_gateway(config={"store": {"backend": "memory"}})
    history: list[dict] = []
    facts = [
        "Edit src/payments/refund.py to fix the rounding error in refund_total",
        "Run pytest tests/test_refund.py: 14 passed, 2 failed with ZeroDivisionError",
        "We decided to keep Decimal instead of float because of cents rounding",
    ]
    with httpx.Client(timeout=60) as client:
        for i, fact in enumerate(facts * 2):
            fake_upstream.enqueue(Reply(text=f"Done step {i}: noted {fact}"))
            history = turn(history, fact)
            body = {"model": "claude-opus-4-8", "max_tokens": 100, "messages": history}
            r = client.post(server.url + "/v1/messages?beta=true", json=body, headers=HEADERS)
            assert r.status_code == 200
            history.append({"role": "assistant", "content": r.json()["content"]})
        before = len(fake_upstream.api_requests())

        compact = turn(history, f"Your task is to {COMPACTION_MARKER}, paying close attention to ...")
        body = {"model": "claude-opus-4-8", "max_tokens": 20000, "messages": compact, "stream": stream}
        r = client.post(server.url + "/v1/messages?beta=true", json=body, headers=HEADERS)

    assert r.status_code == 200
    assert len(fake_upstream.api_requests()) == before, "the compaction request went upstream"
    if stream:
        assert r.headers["content-type"].startswith("text/event-stream")
        assembler = AnthropicMessagesCodec().assembler()
        assembler.feed(r.content)
        answer = assembler.result()
        assert answer.complete
        text = answer.text
    else:
        text = "".join(b["text"] for b in r.json()["content"] if b["type"] == "text")
    assert text.startswith("<summary>") and text.rstrip().endswith("</summary>")
    assert "src/payments/refund.py" in text
    assert "ZeroDivisionError" in text
    health = httpx.get(server.url + "/health").json()
    assert health["stats"]["compactions_answered"] == 1
    assert json.dumps(health).count("sk-ant-test-key") == 0


def test_an_ordinary_request_is_not_a_compaction(start_gateway, fake_upstream):
    server = start_gateway(config={"store": {"backend": "memory"}})
    body = {"model": "claude-opus-4-8", "max_tokens": 5, "messages": turn([], "summarise this file for me")}
    r = httpx.post(server.url + "/v1/messages", json=body, headers=HEADERS, timeout=30)
    assert r.status_code == 200 and len(fake_upstream.api_requests()) == 1


def test_f5_a_stranger_naming_the_session_gets_no_summary_and_health_names_no_session(
    start_gateway, fake_upstream
):
    """F5 of the security review: another key sending a compaction request under the
    session's id (learnt from the open /health, which listed running distillations by id)
    is not answered from the session's distillations: it goes upstream untouched. /health
    names no session."""
    server = start_gateway(config={"store": {"backend": "memory"}})
    history: list[dict] = []
    with httpx.Client(timeout=60) as client:
        for i, fact in enumerate(["Edit src/payments/refund.py", "The DB password is hunter2-in-refund"] * 2):
            fake_upstream.enqueue(Reply(text=f"Done step {i}"))
            history = turn(history, fact)
            body = {"model": "claude-opus-4-8", "max_tokens": 100, "messages": history}
            assert client.post(server.url + "/v1/messages", json=body, headers=HEADERS).status_code == 200
            history.append({"role": "assistant", "content": f"Done step {i}"})
        assert server.call(server.gateway.distiller.compaction_summary(SESSION)) is not None
        assert SESSION not in client.get(server.url + "/health").text

        before = len(fake_upstream.api_requests())
        fake_upstream.enqueue(Reply(text="an upstream summary"))
        made_up = turn([], f"Your task is to {COMPACTION_MARKER}, paying close attention to ...")
        body = {"model": "claude-opus-4-8", "max_tokens": 2000, "messages": made_up}
        stranger = {**HEADERS, "x-api-key": "sk-ant-stranger-key"}
        r = client.post(server.url + "/v1/messages", json=body, headers=stranger)
    assert r.status_code == 200
    assert "hunter2" not in r.text and "refund.py" not in r.text
    assert len(fake_upstream.api_requests()) == before + 1  # went upstream, as it came
    assert json.loads(fake_upstream.api_requests()[-1].body) == body
    assert server.gateway.stats.get("compactions_answered", 0) == 0
