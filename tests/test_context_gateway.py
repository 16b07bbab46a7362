"""The context manager through a real gateway: a session that outgrows a small configured
window is sent upstream at layers above 0, every request well-formed, the distiller's logs
becoming the distilled prefix; usage reported by the upstream calibrates the session."""

from __future__ import annotations

import itertools
import json

import anthropic
import pytest

from lore_core.testing.fake_upstream import Reply
from lore_core.testing.poll import poll
from lore_core.testing.simulate import ToolStep, Turn, anthropic_messages

SESSION = "ctx-gateway-1"
WINDOW = 6_000
CONFIG = {
    "models": {"claude-tiny": {"maxInputTokens": WINDOW, "contextWindow": WINDOW + 2_000}},
    "budget": {"maxLayer0Tokens": 2_000},
    "distill": {
        "observer": "extractive",
        "idleTimeoutSeconds": 3600.0,
        "segmentMaxTokens": 1_200,
        "firstSegmentMinMessages": 2,
        "metaThreshold": 1000,
    },
}


def turns(count: int) -> list[Turn]:
    out = []
    for t in range(count):
        listing = "\n".join(f"src/pkg/mod_{t}_{i}.py: def handler_{i}(): return {i * t}" for i in range(30))
        out.append(
            Turn(
                f"step {t}: look at the handlers of module {t}",
                [
                    ToolStep(
                        "Bash",
                        {"command": f"grep -rn handler src/pkg/mod_{t}_*"},
                        listing,
                        call_id=f"toolu_{t:04d}",
                    )
                ],
                f"module {t} has 30 handlers; handler_{t} returns {t * t}.",
            )
        )
    return out


def realistic_usage(req) -> Reply:
    """Input tokens as a provider would count them (about a token per 4 bytes of body)."""
    return Reply(text="noted", input_tokens=max(len(req.body) // 4, 1))


def well_formed(body: dict) -> None:
    msgs = body["messages"]
    roles = [m["role"] for m in msgs]
    assert roles[0] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    for i, msg in enumerate(msgs):
        content = msg["content"] if isinstance(msg["content"], list) else []
        uses = sorted(b["id"] for b in content if b.get("type") == "tool_use")
        if uses:
            nxt = msgs[i + 1]["content"]
            assert uses == sorted(b["tool_use_id"] for b in nxt if b.get("type") == "tool_result")
        results = [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]
        if results:
            prev = msgs[i - 1]["content"]
            assert sorted(results) == sorted(b["id"] for b in prev if b.get("type") == "tool_use")


def test_a_session_past_a_small_window_goes_upstream_compressed_and_well_formed(start_gateway, fake_upstream):
    fake_upstream.responder = realistic_usage
    server = start_gateway(CONFIG)
    client = anthropic.Anthropic(
        base_url=server.url, api_key="sk-test", default_headers={"x-session-id": SESSION}, max_retries=0
    )
    session = turns(24)
    tools = [{"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}}]
    sent_layers = []
    for n in range(1, len(session) + 1):
        history = anthropic_messages(session[:n], answered=False)
        answer = client.messages.create(
            model="claude-tiny",
            max_tokens=512,
            system="You are a coding agent.",
            messages=history,
            tools=tools,
        )
        assert answer.content[0].text == "noted"
        upstream = fake_upstream.api_requests()[-1].json
        well_formed(upstream)
        # Fields the pipeline does not own travel unchanged.
        assert upstream["tools"][0]["name"] == "Bash" and upstream["max_tokens"] == 512
        # The current turn always goes out whole.
        assert f"step {n - 1}:" in json.dumps(upstream["messages"][-3:])
        status = server.gateway.context.session_status(SESSION)
        sent_layers.append(status["layer"])
        if status["layer"] > 0:
            assert upstream["messages"] != history
            if status["layer"] < 4:
                # What the upstream counted (calibration corrects the local estimate to it).
                counted = len(fake_upstream.api_requests()[-1].body) // 4
                assert counted <= WINDOW
        if n == 12:
            # Let the distiller catch up with what has been said so far.
            poll(lambda: server.call(server.gateway.store.list_distillations(SESSION)), "distillations")
    assert sent_layers[0] == 0 and max(sent_layers) > 0
    # With observation logs stored, the prompt carries them as the distilled prefix.
    assert any("[Lore memory]" in json.dumps(r.json) for r in fake_upstream.api_requests()[12:])
    # The store keeps the conversation as the client sent it, never the composed prompt.
    server.call(server.gateway.writer.wait_idle(timeout=10))
    stored = server.call(server.gateway.store.session_messages(SESSION))
    assert len(stored) >= 2 * len(session)
    assert not any("[Lore memory]" in m.text or "stripped by Lore" in m.text for m in stored)
    status = server.gateway.context.session_status(SESSION)
    assert status["turns"] == len(session) and status["prompt_tokens_real"] > 0
    assert status["calibration_factor"] != 1.0
    health = server.gateway.health()["context"]
    assert health["sessions"] >= 1 and sum(health["by_layer"].values()) >= len(session)


# Slow: a twenty-turn session (the Anthropic one above keeps the gateway's compression in the fast
# run; tests/test_context_layers.py checks no cut splits a tool call from its result).
@pytest.mark.slow
def test_an_openai_chat_session_past_its_window_keeps_every_tool_call_with_its_result(
    start_gateway, fake_upstream
):
    import openai

    from lore_core.testing.simulate import chat_messages

    fake_upstream.responder = realistic_usage
    config = {**CONFIG, "models": {"gpt-tiny": {"maxInputTokens": WINDOW, "contextWindow": WINDOW + 2_000}}}
    server = start_gateway(config)
    client = openai.OpenAI(
        base_url=server.url + "/v1",
        api_key="sk-test",
        default_headers={"x-session-id": "ctx-chat"},
        max_retries=0,
    )
    session = turns(20)
    layers = []
    for n in range(1, len(session) + 1):
        history = chat_messages(session[:n], answered=False, system="You are a coding agent.")
        client.chat.completions.create(model="gpt-tiny", messages=history, temperature=0)
        upstream = fake_upstream.api_requests()[-1].json
        msgs = upstream["messages"]
        assert msgs[0] == {"role": "system", "content": "You are a coding agent."}
        assert upstream["temperature"] == 0
        for i, msg in enumerate(msgs):
            for call in msg.get("tool_calls") or []:
                assert msgs[i + 1] == {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": msgs[i + 1]["content"],
                }
            if msg["role"] == "tool":
                previous = msgs[i - 1].get("tool_calls") or []
                assert msg["tool_call_id"] in [c["id"] for c in previous]
        assert f"step {n - 1}:" in json.dumps(msgs[-3:])
        layers.append(server.gateway.context.session_status("ctx-chat")["layer"])
    assert layers[0] == 0 and max(layers) > 0
