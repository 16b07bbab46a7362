"""The recall tool through the gateway, end to end with the official SDKs: the fake upstream
calls recall, the gateway searches and continues upstream, the client sees a marker and the
final answer (never the recall call), and the next request carries the real tool call and
result, byte-identical to the follow-up that was sent."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from lore_core.recall.tool import marker_text
from lore_core.testing.fake_upstream import Reply, ToolCall

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
ANTHROPIC_TOOL = {"name": "read_file", "description": "Read a file", "input_schema": SCHEMA}
CHAT_TOOL = {"type": "function", "function": {"name": "read_file", "parameters": SCHEMA}}
RESPONSES_TOOL = {"type": "function", "name": "read_file", "parameters": SCHEMA}
QUERY = "deploy script"
MARKER = marker_text(QUERY)
FINAL = "The deploy script is scripts/deploy.sh."


@pytest.fixture
def anthropic_client(gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-test-key", max_retries=0)


@pytest.fixture
def openai_client(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0)


def _recall_then_answer(fake, *, query: str = QUERY, text: str = FINAL, lead: str = "") -> ToolCall:
    call = ToolCall("recall", {"query": query})
    fake.enqueue(Reply(text=lead, tool_calls=[call]), Reply(text=text))
    return call


def _messages_json_bytes(items: list) -> bytes:
    # The codec renders bodies with json.dumps(ensure_ascii=False) and default separators.
    return json.dumps(items, ensure_ascii=False).encode()


def _assert_prefix_restored(fake, key: str) -> None:
    """The third upstream request (the client's next turn) starts with the follow-up's
    history, byte for byte."""
    _first, follow_up, following = fake.api_requests()[-3:]
    sent = follow_up.json[key]
    nxt = following.json[key]
    assert nxt[: len(sent)] == sent
    prefix = _messages_json_bytes(sent)[:-1]  # without the closing bracket
    assert prefix in following.body
    assert prefix in follow_up.body


# ---------------------------------------------------------------------------------------------
# Anthropic Messages
# ---------------------------------------------------------------------------------------------


def _anthropic_ask(client, history, stream):
    if stream:
        events = []
        with client.messages.stream(
            model="claude-opus-4-8", max_tokens=100, messages=history, tools=[ANTHROPIC_TOOL]
        ) as s:
            for event in s:
                events.append(event)
            return s.get_final_message(), events
    message = client.messages.create(
        model="claude-opus-4-8", max_tokens=100, messages=history, tools=[ANTHROPIC_TOOL]
    )
    return message, []


def _check_anthropic_events(events) -> None:
    kinds = [e.type for e in events]
    assert kinds.count("message_start") == 1 and kinds[0] == "message_start"
    assert kinds.count("message_stop") == 1 and kinds[-1] == "message_stop"
    assert kinds.count("message_delta") == 1
    starts = [e.index for e in events if e.type == "content_block_start"]
    assert starts == list(range(len(starts)))
    stops = [e.index for e in events if e.type == "content_block_stop"]
    assert stops == starts


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_recall_loop(anthropic_client, fake_upstream, stream):
    call = _recall_then_answer(fake_upstream, lead="Let me check my memory.")
    history = [{"role": "user", "content": "Where is the deploy script we wrote?"}]
    message, events = _anthropic_ask(anthropic_client, history, stream)
    if stream:
        _check_anthropic_events(events)
    assert [b.type for b in message.content] == ["text", "text", "text"]
    assert [b.text for b in message.content] == ["Let me check my memory.", MARKER, FINAL]
    assert message.stop_reason == "end_turn"

    first, follow_up = fake_upstream.api_requests()
    assert [t["name"] for t in first.json["tools"]] == ["read_file", "recall"]
    sent = follow_up.json["messages"]
    assert sent[:1] == first.json["messages"]
    assert sent[1]["role"] == "assistant"
    assert sent[1]["content"][-1] == {
        "type": "tool_use",
        "id": call.id,
        "name": "recall",
        "input": {"query": QUERY},
    }
    result = sent[2]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == call.id
    assert "deploy script" in result["content"]  # the search answered (no memories yet)
    assert follow_up.json.get("stream", False) is stream

    # Next turn: the client sends the history as it saw it (marker included).
    fake_upstream.enqueue(Reply(text="ok"))
    history = [
        *history,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
        {"role": "user", "content": "Thanks. Run it."},
    ]
    _anthropic_ask(anthropic_client, history, stream)
    _assert_prefix_restored(fake_upstream, "messages")
    following = fake_upstream.api_requests()[-1].json["messages"]
    assert following[3] == {"role": "assistant", "content": [{"type": "text", "text": FINAL}]}
    assert following[4]["content"] == "Thanks. Run it."
    assert not any(MARKER in json.dumps(m) for m in following)


# ---------------------------------------------------------------------------------------------
# Chat Completions
# ---------------------------------------------------------------------------------------------


def _chat_ask(client, history, stream):
    kwargs = dict(model="gpt-4.1", messages=history, tools=[CHAT_TOOL])
    if stream:
        chunks = []
        with client.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as s:
            for event in s:
                if event.type == "chunk":
                    chunks.append(event.chunk)
            return s.get_final_completion(), chunks
    return client.chat.completions.create(**kwargs), []


@pytest.mark.parametrize("lead", ["", "Let me check."])
@pytest.mark.parametrize("stream", [False, True])
def test_chat_recall_loop(openai_client, fake_upstream, stream, lead):
    call = _recall_then_answer(fake_upstream, lead=lead)
    history = [{"role": "user", "content": "Where is the deploy script we wrote?"}]
    completion, chunks = _chat_ask(openai_client, history, stream)
    message = completion.choices[0].message
    assert message.content == (f"{lead}\n\n" if lead else "") + f"{MARKER}\n\n{FINAL}"
    assert not message.tool_calls
    assert completion.choices[0].finish_reason == "stop"
    if stream:
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finishes == ["stop"]
        assert len({c.id for c in chunks}) == 1
        assert completion.usage is not None and completion.usage.completion_tokens == 6

    first, follow_up = fake_upstream.api_requests()
    assert [t["function"]["name"] for t in first.json["tools"]] == ["read_file", "recall"]
    sent = follow_up.json["messages"]
    assert sent[1]["content"] == (lead or None)
    assert sent[1]["tool_calls"][0]["id"] == call.id
    assert sent[1]["tool_calls"][0]["function"]["name"] == "recall"
    assert sent[2]["role"] == "tool" and sent[2]["tool_call_id"] == call.id

    fake_upstream.enqueue(Reply(text="ok"))
    history = [
        *history,
        {"role": "assistant", "content": message.content},
        {"role": "user", "content": "Thanks. Run it."},
    ]
    _chat_ask(openai_client, history, stream)
    _assert_prefix_restored(fake_upstream, "messages")
    following = fake_upstream.api_requests()[-1].json["messages"]
    assert following[3] == {"role": "assistant", "content": FINAL}


# ---------------------------------------------------------------------------------------------
# Responses
# ---------------------------------------------------------------------------------------------


def _responses_ask(client, items, stream):
    kwargs = dict(model="gpt-5", input=items, tools=[RESPONSES_TOOL])
    if stream:
        events = []
        with client.responses.stream(**kwargs) as s:
            for event in s:
                events.append(event)
            return s.get_final_response(), events
    return client.responses.create(**kwargs), []


@pytest.mark.parametrize("lead", ["", "Let me check."])
@pytest.mark.parametrize("stream", [False, True])
def test_responses_recall_loop(openai_client, fake_upstream, stream, lead):
    call = _recall_then_answer(fake_upstream, lead=lead)
    items = [{"role": "user", "content": "Where is the deploy script we wrote?"}]
    response, events = _responses_ask(openai_client, items, stream)
    assert response.output_text.endswith(FINAL)
    texts = [p.text for item in response.output if item.type == "message" for p in item.content]
    assert texts == [lead] * bool(lead) + [MARKER, FINAL]
    assert all(item.type == "message" for item in response.output)
    if stream:
        seqs = [e.sequence_number for e in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        kinds = [e.type for e in events]
        assert kinds.count("response.created") == 1 and kinds[-1] == "response.completed"
        added = [e.output_index for e in events if e.type == "response.output_item.added"]
        assert added == list(range(len(added)))

    first, follow_up = fake_upstream.api_requests()
    assert [t["name"] for t in first.json["tools"]] == ["read_file", "recall"]
    sent = follow_up.json["input"]
    if lead:
        assert sent.pop(1) == {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": lead}],
        }
    assert sent[1] == {
        "type": "function_call",
        "call_id": call.id,
        "name": "recall",
        "arguments": json.dumps({"query": QUERY}),
    }
    assert sent[2]["type"] == "function_call_output" and sent[2]["call_id"] == call.id

    fake_upstream.enqueue(Reply(text="ok"))
    items = [
        *items,
        *[item.model_dump(exclude_none=True) for item in response.output],
        {"role": "user", "content": "Thanks. Run it."},
    ]
    _responses_ask(openai_client, items, stream)
    _assert_prefix_restored(fake_upstream, "input")
    following = fake_upstream.api_requests()[-1].json["input"]
    n = 4 if lead else 3
    assert following[n]["type"] == "message" and following[n]["content"][0]["text"] == FINAL
    assert following[n + 1]["content"] == "Thanks. Run it."
    assert len(following) == n + 2
    assert not any(MARKER in json.dumps(m) for m in following)
