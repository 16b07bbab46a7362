"""Codecs: lossless parse/render, incremental assembly at any chunk boundary."""

from __future__ import annotations

import json

import pytest

from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT, Block, Message
from lore_core.testing.fake_upstream import Reply, ToolCall, _sse_events
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.openai_chat.codec import OpenAIChatCodec
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec
from lore_core.wire.sse import SSEParser

ANTHROPIC_BODY = {
    "model": "claude-opus-4-8",
    "max_tokens": 64000,
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.87f;"},
        {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}},
    ],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>ctx</system-reminder>"}]},
        {"role": "system", "content": "a system message inside messages"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"cmd": "ls"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py\nb.py"}]},
        {"role": "user", "content": [{"type": "brand_new_block", "x": 1}]},
    ],
    "metadata": {"user_id": '{"session_id": "s-1"}'},
    "thinking": {"type": "adaptive"},
    "stream": True,
}
CHAT_BODY = {
    "model": "gpt-5",
    "messages": [
        {"role": "developer", "content": "be terse"},
        {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"dir": "."}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ],
    "stream_options": {"include_usage": True},
}
RESPONSES_BODY = {
    "model": "gpt-5-codex",
    "instructions": "You are Codex.",
    "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<cwd>/p</cwd>"}]},
        {"type": "function_call", "call_id": "fc1", "name": "exec_command", "arguments": '{"cmd":"ls"}'},
        {"type": "function_call_output", "call_id": "fc1", "output": "a.py"},
        {"type": "additional_tools", "tools": []},
        {"type": "configuration_update", "x": True},
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "thinking"}],
            "encrypted_content": "zz",
        },
    ],
    "store": False,
    "prompt_cache_key": "k",
}


@pytest.mark.parametrize(
    ("codec", "body"),
    [
        (AnthropicMessagesCodec(), ANTHROPIC_BODY),
        (OpenAIChatCodec(), CHAT_BODY),
        (OpenAIResponsesCodec(), RESPONSES_BODY),
    ],
)
def test_render_of_an_unchanged_view_is_the_original_json(codec, body):
    raw = json.loads(json.dumps(body))
    view = codec.parse(raw, json.dumps(raw).encode())
    assert codec.render(view) == body


def test_anthropic_blocks_are_modelled():
    view = AnthropicMessagesCodec().parse(ANTHROPIC_BODY, b"")
    assert view.stream and view.model == "claude-opus-4-8"
    assert [m.role for m in view.messages] == ["user", "system", "assistant", "user", "user"]
    call = view.messages[2].blocks[0]
    assert (call.type, call.tool_name, call.tool_call_id, call.tool_input) == (
        TOOL_CALL,
        "Bash",
        "t1",
        {"cmd": "ls"},
    )
    result = view.messages[3].blocks[0]
    assert (result.type, result.tool_call_id, result.text) == (TOOL_RESULT, "t1", "a.py\nb.py")
    assert view.messages[4].blocks[0].wire_type == "brand_new_block"


def test_responses_items_are_modelled_and_unknown_items_kept():
    view = OpenAIResponsesCodec().parse(RESPONSES_BODY, b"")
    kinds = [(m.role, m.blocks[0].type) for m in view.messages]
    assert kinds[2] == ("assistant", TOOL_CALL) and kinds[3] == ("tool", TOOL_RESULT)
    assert view.messages[4].raw == {"type": "additional_tools", "tools": []}
    assert view.system[0].text == "You are Codex."


@pytest.mark.parametrize(
    ("codec", "body"),
    [
        (AnthropicMessagesCodec(), ANTHROPIC_BODY),
        (OpenAIChatCodec(), CHAT_BODY),
        (OpenAIResponsesCodec(), RESPONSES_BODY),
    ],
)
def test_synthetic_messages_render_in_the_wire_shape(codec, body):
    view = codec.parse(json.loads(json.dumps(body)), b"")
    view.messages.append(Message(role="user", blocks=[Block(TEXT, text="added by a layer")], synthetic=True))
    view.modified = True
    rendered = codec.render(view)
    wire = rendered.get("messages") or rendered.get("input")
    assert "added by a layer" in json.dumps(wire[-1])
    assert json.dumps(wire[:-1]) == json.dumps(body.get("messages") or body.get("input"))


REPLY = Reply(
    text="Hello there, world", text_chunks=4, tool_calls=[ToolCall("grep", {"pattern": "TODO"}, id="call_1")]
)


@pytest.mark.parametrize(
    ("codec", "api"),
    [
        (AnthropicMessagesCodec(), "anthropic"),
        (OpenAIChatCodec(), "chat"),
        (OpenAIResponsesCodec(), "responses"),
    ],
)
@pytest.mark.parametrize("chunk_size", [1, 3, 7, 64, 10_000])
def test_assembler_rebuilds_the_message_at_any_chunking(codec, api, chunk_size):
    stream = b"".join(_sse_events(api, REPLY, "m", include_usage=True))
    assembler = codec.assembler()
    for i in range(0, len(stream), chunk_size):
        assembler.feed(stream[i : i + chunk_size])
    msg = assembler.result()
    assert msg.complete
    assert msg.text == "Hello there, world"
    call = next(b for b in msg.blocks if b.type == TOOL_CALL)
    assert (call.tool_name, call.tool_call_id, call.tool_input) == ("grep", "call_1", {"pattern": "TODO"})
    assert msg.usage.output_tokens == REPLY.output_tokens


@pytest.mark.parametrize(
    ("codec", "api"),
    [
        (AnthropicMessagesCodec(), "anthropic"),
        (OpenAIChatCodec(), "chat"),
        (OpenAIResponsesCodec(), "responses"),
    ],
)
def test_a_cut_stream_gives_a_partial_incomplete_message(codec, api):
    events = list(_sse_events(api, Reply(text="abcdefgh", text_chunks=4), "m", include_usage=False))
    assembler = codec.assembler()
    for event in events[: len(events) // 2 + 1]:
        assembler.feed(event)
    msg = assembler.result()
    assert not msg.complete
    assert msg.text and "abcdefgh".startswith(msg.text) and msg.text != "abcdefgh"


def test_sse_parser_handles_crlf_split_and_comments():
    parser = SSEParser()
    stream = b": comment\r\nevent: a\r\ndata: 1\r\ndata: 2\r\n\r\ndata: x\n\n"
    events = []
    for i in range(len(stream)):
        events.extend(parser.feed(stream[i : i + 1]))
    assert events == [("a", "1\n2"), ("", "x")]


@pytest.mark.parametrize("codec", [AnthropicMessagesCodec(), OpenAIChatCodec(), OpenAIResponsesCodec()])
@pytest.mark.parametrize("stream", [False, True])
def test_gateway_made_answers_are_well_formed(codec, stream):
    body, content_type = codec.render_response("made by the gateway", "m-1", stream)
    if stream:
        assert content_type == "text/event-stream"
        assembler = codec.assembler()
        assembler.feed(body)
        msg = assembler.result()
    else:
        assert content_type == "application/json"
        msg = codec.parse_response(json.loads(body))
    assert msg.complete and msg.text == "made by the gateway"
