"""The official SDKs through the gateway to the loopback fake: every wire API, streaming and
not, with a tool round trip; the bytes the client receives are the bytes the upstream sent."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from lore_core.testing.fake_upstream import Reply, ToolCall

TOOL = {
    "name": "read_file",
    "description": "Read a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
OPENAI_TOOL = {
    "type": "function",
    "function": {"name": "read_file", "parameters": TOOL["input_schema"]},
}
RESPONSES_TOOL = {"type": "function", "name": "read_file", "parameters": TOOL["input_schema"]}


@pytest.fixture
def anthropic_client(gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-test-key", max_retries=0)


@pytest.fixture
def openai_client(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0)


def _last_api_request(fake):
    return fake.api_requests()[-1]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_round_trip(anthropic_client, fake_upstream, stream):
    call = ToolCall("read_file", {"path": "src/app.py"})
    fake_upstream.enqueue(Reply(text="Let me look.", tool_calls=[call]), Reply(text="It defines main()."))
    messages = [{"role": "user", "content": "What is in src/app.py?"}]

    def ask(history):
        if stream:
            with anthropic_client.messages.stream(
                model="claude-opus-4-8", max_tokens=100, messages=history, tools=[TOOL]
            ) as s:
                return s.get_final_message()
        return anthropic_client.messages.create(
            model="claude-opus-4-8", max_tokens=100, messages=history, tools=[TOOL]
        )

    first = ask(messages)
    assert first.stop_reason == "tool_use"
    tool_use = next(b for b in first.content if b.type == "tool_use")
    assert (tool_use.name, tool_use.input, tool_use.id) == ("read_file", {"path": "src/app.py"}, call.id)

    history = [
        *messages,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "def main(): ..."}],
        },
    ]
    second = ask(history)
    assert second.content[0].text == "It defines main()."
    sent = _last_api_request(fake_upstream).json
    assert sent["messages"][-1]["content"][0]["tool_use_id"] == call.id
    assert sent.get("stream", False) is stream


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_tool_round_trip(openai_client, fake_upstream, stream):
    call = ToolCall("read_file", {"path": "README.md"})
    fake_upstream.enqueue(Reply(text="", tool_calls=[call]), Reply(text="It is a readme."))
    messages = [{"role": "user", "content": "Read the readme"}]
    first = openai_client.chat.completions.create(
        model="gpt-5", messages=messages, tools=[OPENAI_TOOL], stream=stream
    )
    if stream:
        chunks = list(first)
        calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
        call_id = next(tc.id for tc in calls if tc.id)
        args = "".join(tc.function.arguments or "" for tc in calls)
    else:
        tc = first.choices[0].message.tool_calls[0]
        call_id, args = tc.id, tc.function.arguments
    assert call_id == call.id and json.loads(args) == {"path": "README.md"}

    history = [
        *messages,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "read_file", "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "# Project"},
    ]
    second = openai_client.chat.completions.create(
        model="gpt-5", messages=history, tools=[OPENAI_TOOL], stream=stream
    )
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in second if c.choices)
    else:
        text = second.choices[0].message.content
    assert text == "It is a readme."
    assert _last_api_request(fake_upstream).json["messages"][-1]["tool_call_id"] == call.id


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tool_round_trip(openai_client, fake_upstream, stream):
    call = ToolCall("read_file", {"path": "setup.cfg"})
    fake_upstream.enqueue(Reply(text="", tool_calls=[call]), Reply(text="Config for setuptools."))
    if stream:
        events = list(
            openai_client.responses.create(
                model="gpt-5", input="Read setup.cfg", tools=[RESPONSES_TOOL], stream=True
            )
        )
        assert events[-1].type == "response.completed"
        first = events[-1].response
    else:
        first = openai_client.responses.create(model="gpt-5", input="Read setup.cfg", tools=[RESPONSES_TOOL])
    fc = next(item for item in first.output if item.type == "function_call")
    assert fc.call_id == call.id and json.loads(fc.arguments) == {"path": "setup.cfg"}

    history = [
        {"role": "user", "content": "Read setup.cfg"},
        {"type": "function_call", "call_id": fc.call_id, "name": fc.name, "arguments": fc.arguments},
        {"type": "function_call_output", "call_id": fc.call_id, "output": "[metadata]"},
    ]
    if stream:
        events = list(
            openai_client.responses.create(model="gpt-5", input=history, tools=[RESPONSES_TOOL], stream=True)
        )
        text = events[-1].response.output_text
    else:
        text = openai_client.responses.create(
            model="gpt-5", input=history, tools=[RESPONSES_TOOL]
        ).output_text
    assert text == "Config for setuptools."
    assert _last_api_request(fake_upstream).json["input"][-1]["call_id"] == call.id


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v1/messages",
            {"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        ),
        ("/v1/chat/completions", {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}),
        ("/chat/completions", {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/responses", {"model": "gpt-x", "input": "hi"}),
        ("/v1/codex/responses", {"model": "gpt-x", "input": "hi"}),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_client_receives_upstream_bytes_exactly(gateway, fake_upstream, path, body, stream):
    fake_upstream.enqueue(Reply(text="byte for byte", text_chunks=1))
    with httpx.Client() as client:
        response = client.post(
            gateway.url + path, json={**body, "stream": stream}, headers={"x-api-key": "k"}
        )
    assert response.status_code == 200
    assert response.content == fake_upstream.responses_sent[-1]
    assert b"byte for byte" in response.content


def test_streamed_chunks_arrive_before_the_stream_ends(gateway, fake_upstream):
    """SSE is relayed as it arrives, never buffered to the end."""
    import time

    fake_upstream.enqueue(Reply(text="a b c d", text_chunks=4, chunk_delay=0.4))
    body = {
        "model": "claude-x",
        "max_tokens": 5,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    arrivals = []
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", gateway.url + "/v1/messages", json=body) as r,
    ):
        start = time.monotonic()
        for chunk in r.iter_raw():
            arrivals.append((time.monotonic() - start, chunk))
    # The fake sends ~10 events 0.4 s apart; a buffering proxy would deliver everything at once.
    assert len(arrivals) >= 5
    assert arrivals[-1][0] - arrivals[0][0] > 1.0


def test_models_and_count_tokens_pass_through(anthropic_client, openai_client, fake_upstream):
    assert openai_client.models.list().data[0].id == "fake-model"
    count = anthropic_client.messages.count_tokens(
        model="claude-x", messages=[{"role": "user", "content": "count these tokens please"}]
    )
    assert count.input_tokens > 0
    assert fake_upstream.requests[-1].path == "/v1/messages/count_tokens"
