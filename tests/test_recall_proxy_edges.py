"""The recall tool through the gateway: bad input, a failing recall, recall mixed with the
client's own tool calls, the round bound, restores after a restart, real memories found,
the stored history, and the usage the client is shown."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from lore_core.recall.tool import marker_text
from lore_core.testing.fake_upstream import Reply, ToolCall
from lore_core.testing.net import api_headers

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
ANTHROPIC_TOOL = {"name": "read_file", "description": "Read a file", "input_schema": SCHEMA}
CHAT_TOOL = {"type": "function", "function": {"name": "read_file", "parameters": SCHEMA}}
RESPONSES_TOOL = {"type": "function", "name": "read_file", "parameters": SCHEMA}
MODEL = "claude-opus-4-8"


def _anthropic(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test-key", max_retries=0)


def _openai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)


def _responses_answer(client: openai.OpenAI, stream: bool, **kwargs):
    """A Responses answer, streamed (the SDK's final response) or not."""
    if stream:
        with client.responses.stream(**kwargs) as s:
            return s.get_final_response()
    return client.responses.create(**kwargs)


def _ask(client, history, stream, tools=(ANTHROPIC_TOOL,)):
    kwargs = dict(model=MODEL, max_tokens=100, messages=history, tools=list(tools))
    if stream:
        with client.messages.stream(**kwargs) as s:
            return s.get_final_message()
    return client.messages.create(**kwargs)


def _tool_result(fake, n: int = 1) -> str:
    """The recall tool result the n-th upstream request carried (Anthropic)."""
    return fake.api_requests()[n].json["messages"][-1]["content"][0]["content"]


# ---------------------------------------------------------------------------------------------
# Bad input and failures become tool results; the turn completes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"query": ""}, "empty query"),
        ({"query": "   "}, "empty query"),
        ({"query": "x" * 100_000}, "No memories found"),
        ({"query": "deploy", "scope": "galaxy"}, "galaxy"),
        ({"id": "t:doesnotexist"}, "t:doesnotexist"),
        ({"id": "q:nonsense"}, "q:nonsense"),
        ({"query": 42, "limit": "many"}, "empty query"),
    ],
)
def test_bad_recall_input_is_a_tool_result(gateway, fake_upstream, arguments, expected):
    fake_upstream.enqueue(Reply(text="", tool_calls=[ToolCall("recall", arguments)]), Reply(text="Done."))
    message = _ask(_anthropic(gateway), [{"role": "user", "content": "look it up"}], stream=True)
    assert message.content[-1].text == "Done."
    assert message.stop_reason == "end_turn"
    assert len(fake_upstream.api_requests()) == 2
    result = _tool_result(fake_upstream)
    assert expected in result
    assert len(result) <= 20_000


def test_arguments_that_are_not_an_object_are_a_tool_result(gateway, fake_upstream):
    fake_upstream.enqueue(
        Reply(text="", tool_calls=[ToolCall("recall", ["not", "an", "object"])]), Reply(text="Recovered.")
    )
    completion = _openai(gateway).chat.completions.create(
        model="gpt-4.1", messages=[{"role": "user", "content": "hi"}], tools=[CHAT_TOOL]
    )
    assert completion.choices[0].message.content.endswith("Recovered.")
    tool_msg = fake_upstream.api_requests()[1].json["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["content"] == "recall arguments must be an object"


@pytest.mark.parametrize("stream", [False, True])
def test_a_recall_that_throws_becomes_recall_failed(gateway, fake_upstream, stream):
    async def broken(*args, **kwargs):
        raise RuntimeError("the index is gone")

    gateway.gateway.recall.search = broken
    fake_upstream.enqueue(
        Reply(text="", tool_calls=[ToolCall("recall", {"query": "deploy"})]),
        Reply(text="I could not recall."),
    )
    message = _ask(_anthropic(gateway), [{"role": "user", "content": "what did we deploy?"}], stream)
    assert [b.text for b in message.content] == [marker_text("deploy"), "I could not recall."]
    assert _tool_result(fake_upstream) == "recall failed: RuntimeError: the index is gone"


@pytest.mark.parametrize("stream", [False, True])
def test_follow_up_upstream_error_ends_the_turn_with_what_was_said(gateway, fake_upstream, stream):
    fake_upstream.enqueue(
        Reply(text="Checking.", tool_calls=[ToolCall("recall", {"query": "deploy"})]), Reply(status=400)
    )
    message = _ask(_anthropic(gateway), [{"role": "user", "content": "what did we deploy?"}], stream)
    assert [b.text for b in message.content] == ["Checking.", marker_text("deploy")]
    assert message.stop_reason == "end_turn"
    assert not any(b.type == "tool_use" for b in message.content)


# ---------------------------------------------------------------------------------------------
# Bounded depth
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_recall_rounds_are_bounded(start_gateway, fake_upstream, stream):
    server = start_gateway({"recall": {"maxRounds": 2}})
    fake_upstream.enqueue(
        *[Reply(text=f"round {i}", tool_calls=[ToolCall("recall", {"query": f"q{i}"})]) for i in range(5)]
    )
    message = _ask(_anthropic(server), [{"role": "user", "content": "dig deep"}], stream)
    assert len(fake_upstream.api_requests()) == 3  # the first call + 2 follow-ups
    texts = [b.text for b in message.content]
    assert texts == ["round 0", marker_text("q0"), "round 1", marker_text("q1"), "round 2"]
    assert message.stop_reason == "end_turn"


def test_recall_tool_can_be_switched_off(start_gateway, fake_upstream):
    server = start_gateway({"recall": {"tool": False}})
    _ask(_anthropic(server), [{"role": "user", "content": "hi"}], stream=False)
    assert [t["name"] for t in fake_upstream.api_requests()[0].json["tools"]] == ["read_file"]


def test_no_tools_no_recall_and_the_client_recall_wins(gateway, fake_upstream):
    client = _anthropic(gateway)
    client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "title?"}])
    assert "tools" not in fake_upstream.api_requests()[0].json
    own = {"name": "recall", "description": "the client's own", "input_schema": {"type": "object"}}
    call = ToolCall("recall", {"what": "mine"})
    fake_upstream.enqueue(Reply(text="", tool_calls=[call]))
    message = _ask(client, [{"role": "user", "content": "x"}], stream=True, tools=[own])
    assert [t["name"] for t in fake_upstream.api_requests()[1].json["tools"]] == ["recall"]
    assert message.content[-1].type == "tool_use" and message.content[-1].id == call.id
    assert len(fake_upstream.api_requests()) == 2


# ---------------------------------------------------------------------------------------------
# Recall mixed with the client's own tool calls
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("recall_first", [True, False])
@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_mixed_calls(gateway, fake_upstream, stream, recall_first):
    recall = ToolCall("recall", {"query": "deploy"})
    read = ToolCall("read_file", {"path": "deploy.sh"})
    calls = [recall, read] if recall_first else [read, recall]
    fake_upstream.enqueue(Reply(text="Two things.", tool_calls=calls), Reply(text="Done."))
    client = _anthropic(gateway)
    history = [{"role": "user", "content": "deploy it"}]
    message = _ask(client, history, stream)
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[1].id == read.id and message.stop_reason == "tool_use"
    assert len(fake_upstream.api_requests()) == 1

    history += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": read.id, "content": "echo hi"}]},
    ]
    assert _ask(client, history, stream).content[0].text == "Done."
    sent = fake_upstream.api_requests()[1].json["messages"]
    uses = [b for b in sent[1]["content"] if b["type"] == "tool_use"]
    assert [b["id"] for b in uses] == [c.id for c in calls]
    assert [b["input"] for b in uses] == [c.input for c in calls]
    results = {r["tool_use_id"]: r["content"] for r in sent[2]["content"]}
    assert [r["tool_use_id"] for r in sent[2]["content"]] == [c.id for c in calls]
    assert "deploy" in results[recall.id] and results[read.id] == "echo hi"


@pytest.mark.parametrize("stream", [False, True])
def test_chat_mixed_calls(gateway, fake_upstream, stream):
    recall = ToolCall("recall", {"query": "deploy"})
    read = ToolCall("read_file", {"path": "deploy.sh"})
    fake_upstream.enqueue(Reply(text="", tool_calls=[read, recall]), Reply(text="Done."))
    client = _openai(gateway)
    history = [{"role": "user", "content": "deploy it"}]
    kwargs = dict(model="gpt-4.1", tools=[CHAT_TOOL])
    if stream:
        with client.chat.completions.stream(messages=history, **kwargs) as s:
            completion = s.get_final_completion()
    else:
        completion = client.chat.completions.create(messages=history, **kwargs)
    message = completion.choices[0].message
    assert [c.id for c in message.tool_calls] == [read.id]
    assert completion.choices[0].finish_reason == "tool_calls"

    history += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [c.model_dump(exclude_none=True) for c in message.tool_calls],
        },
        {"role": "tool", "tool_call_id": read.id, "content": "echo hi"},
    ]
    client.chat.completions.create(messages=history, **kwargs)
    sent = fake_upstream.api_requests()[1].json["messages"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == [read.id, recall.id]
    assert [(m["role"], m["tool_call_id"]) for m in sent[2:4]] == [("tool", read.id), ("tool", recall.id)]
    assert "deploy" in sent[3]["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_mixed_calls(gateway, fake_upstream, stream):
    recall = ToolCall("recall", {"query": "deploy"})
    read = ToolCall("read_file", {"path": "deploy.sh"})
    fake_upstream.enqueue(Reply(text="", tool_calls=[recall, read]), Reply(text="Done."))
    client = _openai(gateway)
    items = [{"role": "user", "content": "deploy it"}]
    kwargs = dict(model="gpt-5", tools=[RESPONSES_TOOL])
    response = _responses_answer(client, stream, input=items, **kwargs)
    assert [(i.type, i.call_id) for i in response.output] == [("function_call", read.id)]

    items += [
        {
            "type": "function_call",
            "call_id": read.id,
            "name": "read_file",
            "arguments": response.output[0].arguments,
        },
        {"type": "function_call_output", "call_id": read.id, "output": "echo hi"},
    ]
    client.responses.create(input=items, **kwargs)
    sent = fake_upstream.api_requests()[1].json["input"]
    assert [(i["type"], i["call_id"]) for i in sent[1:]] == [
        ("function_call", recall.id),
        ("function_call", read.id),
        ("function_call_output", recall.id),
        ("function_call_output", read.id),
    ]
    assert "deploy" in sent[3]["output"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_namespaced_recall_is_the_clients(gateway, fake_upstream, stream):
    """Codex puts each MCP server's tools in a namespace: ``recall`` of the ``mcp__lore``
    server is the client's call, not the gateway's, and keeps its namespace when the
    gateway's own recall in the same round is replayed upstream."""
    ours = ToolCall("recall", {"query": "deploy"})
    theirs = ToolCall("recall", {"query": "deploy"}, namespace="mcp__lore")
    fake_upstream.enqueue(Reply(text="", tool_calls=[ours, theirs]), Reply(text="Done."))
    client = _openai(gateway)
    items = [{"role": "user", "content": "deploy it"}]
    namespace = {"type": "namespace", "name": "mcp__lore", "tools": [{**RESPONSES_TOOL, "name": "recall"}]}
    # The SDK's types know no namespace tool: the tools go in as they are on the wire.
    kwargs = dict(model="gpt-5", extra_body={"tools": [RESPONSES_TOOL, namespace]})
    response = _responses_answer(client, stream, input=items, **kwargs)
    assert [(i.type, i.call_id) for i in response.output] == [("function_call", theirs.id)]
    assert response.output[0].model_dump().get("namespace") == "mcp__lore"

    items += [
        {
            "type": "function_call",
            "call_id": theirs.id,
            "namespace": "mcp__lore",
            "name": "recall",
            "arguments": response.output[0].arguments,
        },
        {"type": "function_call_output", "call_id": theirs.id, "output": "nothing yet"},
    ]
    client.responses.create(input=items, **kwargs)
    sent = fake_upstream.api_requests()[1].json["input"]
    assert [(i["type"], i["call_id"]) for i in sent[1:]] == [
        ("function_call", ours.id),
        ("function_call", theirs.id),
        ("function_call_output", ours.id),
        ("function_call_output", theirs.id),
    ]
    replayed = {i["call_id"]: i for i in sent if i.get("type") == "function_call"}
    assert "namespace" not in replayed[ours.id]
    assert replayed[theirs.id]["namespace"] == "mcp__lore"


# ---------------------------------------------------------------------------------------------
# Memory: real results, restores that survive a restart, the stored history
# ---------------------------------------------------------------------------------------------


def _wait_for_search(server, query: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        hits = httpx.get(server.url + "/lore/api/search", params={"q": query}, headers=api_headers()).json()
        if hits:
            return
        time.sleep(0.05)
    raise AssertionError(f"{query!r} never became searchable")


def test_recall_finds_an_earlier_session_and_restores_after_restart(start_gateway, fake_upstream):
    server = start_gateway()
    client = _anthropic(server)
    fake_upstream.enqueue(Reply(text="Noted: the zebra release script lives in tools/zebra-release.sh."))
    client.messages.create(
        model=MODEL,
        max_tokens=50,
        messages=[{"role": "user", "content": "Remember the zebra release script."}],
    )
    _wait_for_search(server, "zebra")

    fake_upstream.enqueue(
        Reply(text="", tool_calls=[ToolCall("recall", {"query": "zebra release"})]),
        Reply(text="It is tools/zebra-release.sh."),
    )
    history = [{"role": "user", "content": "Where was that release script again?"}]
    message = _ask(client, history, stream=True)
    assert "tools/zebra-release.sh" in _tool_result(fake_upstream, 2)
    follow_up = fake_upstream.api_requests()[2]

    # Restart: the restore record comes back from the store.
    server.stop()
    server = start_gateway()
    fake_upstream.enqueue(Reply(text="ok"))
    history += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
        {"role": "user", "content": "Run it."},
    ]
    _ask(_anthropic(server), history, stream=False)
    sent = fake_upstream.api_requests()[-1]
    assert sent.json["messages"][:3] == follow_up.json["messages"]
    prefix = json.dumps(follow_up.json["messages"], ensure_ascii=False).encode()[:-1]
    assert prefix in sent.body

    # The store recorded the recall exchange: the call and its result.
    sessions = httpx.get(server.url + "/lore/api/sessions", headers=api_headers()).json()
    stored = []
    for s in sessions:
        stored += httpx.get(server.url + f"/lore/api/sessions/{s['id']}", headers=api_headers()).json()[
            "messages"
        ]
    text = json.dumps(stored)
    assert "zebra release" in text and "tools/zebra-release.sh" in text
    assert any(m["role"] == "tool" or "tool_result" in json.dumps(m) for m in stored)


ENTRY = "Quokkaflux builds ship from the night lane."


def _recall_round_trip(server, api: str, project: str, stream: bool) -> None:
    """One turn in which the model calls recall (answered in the same response), then the
    client's next turn carrying what it saw, on ``api``, in session ``s-<api>``."""
    headers = {"x-session-id": f"s-{api}", "x-lore-project": project}
    first: list[Any] = [{"role": "user", "content": "Where do the builds ship from?"}]
    nxt: Any = {"role": "user", "content": "Thanks."}
    seen: Any
    if api == "anthropic":
        claude = anthropic.Anthropic(
            base_url=server.url, api_key="sk-ant-test-key", max_retries=0, default_headers=headers
        )
        message = _ask(claude, first, stream)
        seen = {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]}
        _ask(claude, [*first, seen, nxt], stream)
        return
    client = openai.OpenAI(
        base_url=server.url + "/v1", api_key="sk-test", max_retries=0, default_headers=headers
    )
    if api == "chat":
        kwargs: dict[str, Any] = dict(model="gpt-4.1", tools=[CHAT_TOOL])
        completion: Any
        if stream:
            with client.chat.completions.stream(messages=first, **kwargs) as s:
                completion = s.get_final_completion()
        else:
            completion = client.chat.completions.create(messages=first, **kwargs)
        seen = {"role": "assistant", "content": completion.choices[0].message.content}
        client.chat.completions.create(messages=[*first, seen, nxt], **kwargs)
        return
    kwargs = dict(model="gpt-5", tools=[RESPONSES_TOOL])
    response = _responses_answer(client, stream, input=first, **kwargs)
    output = [item.model_dump(exclude_none=True) for item in response.output]
    _responses_answer(client, False, input=[*first, *output, nxt], **kwargs)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["anthropic", "chat", "responses"])
def test_the_stored_history_is_the_clients_without_the_gateways_prompt(
    start_gateway, fake_upstream, tmp_path, monkeypatch, api, stream
):
    """A recall round's follow-up goes upstream as composed (knowledge in the system
    part, which Chat Completions carries as messages), but the store records the client's
    own messages plus the real recall call and result: nothing the gateway put in the
    prompt, so an entry deleted later is gone from recall too."""
    from lore_core.context import manager

    monkeypatch.setattr(manager, "STORE_TIMEOUT_SECONDS", 10.0)  # the knowledge read, on a busy box
    project = tmp_path / "shop"
    project.mkdir()
    server = start_gateway()
    with httpx.Client(base_url=server.url, headers=api_headers(), timeout=30) as api_client:
        created = api_client.post(
            "/lore/api/knowledge",
            json={"project": str(project), "category": "gotcha", "title": "Shipping", "content": ENTRY},
        )
        assert created.status_code == 201, created.text
        entry_id = created.json()["entry"]["logical_id"]
        fake_upstream.enqueue(
            Reply(text="", tool_calls=[ToolCall("recall", {"query": "where builds ship"})]),
            Reply(text="From the night lane."),
            Reply(text="ok"),
        )
        _recall_round_trip(server, api, str(project), stream)
        first, follow_up, following = fake_upstream.api_requests()
        for sent in (first, follow_up, following):
            assert "<lore-" in sent.body.decode() and ENTRY in sent.body.decode()  # the gateway's prompt went

        stored = api_client.get(f"/lore/api/sessions/s-{api}", params={"branches": "all"}).json()["messages"]
        blocks = [b for m in stored for b in m["blocks"]]
        results = [b for b in blocks if b["type"] == "tool_result" and b.get("tool_name") == "recall"]
        assert len(results) == 1 and results[0]["text"].startswith("<lore-recall>")  # the real result
        assert any(b["type"] == "tool_call" and b["tool_name"] == "recall" for b in blocks)  # and call
        assert any("From the night lane." in json.dumps(b) for b in blocks)
        own = [json.dumps(b) for b in blocks if b not in results]
        assert not [t for t in own if "<lore-" in t or "Quokkaflux" in t]
        assert "<lore-knowledge" not in json.dumps(stored) and "<lore-context" not in json.dumps(stored)
        assert [m["role"] for m in stored if m["role"] == "system"] == []

        assert api_client.delete(f"/lore/api/knowledge/{entry_id}").status_code == 200
        found = api_client.get(
            "/lore/api/recall", params={"q": "Quokkaflux night lane", "project": str(project)}
        )
        assert "Quokkaflux" not in json.dumps(found.json()["results"])


# ---------------------------------------------------------------------------------------------
# Usage the client is shown
# ---------------------------------------------------------------------------------------------

BIG = dict(input_tokens=5_000, cache_read_tokens=150_000, cache_write_tokens=25_000, output_tokens=40)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_usage_is_scaled_for_the_client_only(gateway, fake_upstream, stream):
    fake_upstream.enqueue(Reply(text="big answer", **BIG))
    message = _ask(_anthropic(gateway), [{"role": "user", "content": "a big prompt"}], stream)
    usage = message.usage
    shown = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    assert 90_000 <= shown <= 100_000  # at most half the 200K window
    assert usage.output_tokens == 40
    # Proportional: the cache-read share of the prompt stays what it was.
    assert abs(usage.cache_read_input_tokens / shown - 150 / 180) < 0.01

    # Lore keeps the real numbers.
    sessions = httpx.get(gateway.url + "/lore/api/sessions", headers=api_headers()).json()
    messages = httpx.get(
        gateway.url + f"/lore/api/sessions/{sessions[0]['id']}", headers=api_headers()
    ).json()["messages"]
    real = [m["usage"] for m in messages if m.get("usage")]
    assert real and real[-1]["cache_read_tokens"] == 150_000 and real[-1]["input_tokens"] == 5_000


def test_small_prompts_keep_their_usage(gateway, fake_upstream):
    fake_upstream.enqueue(Reply(text="small", input_tokens=1_000, cache_read_tokens=20_000))
    message = _ask(_anthropic(gateway), [{"role": "user", "content": "hi"}], stream=True)
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens) == (1_000, 20_000)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_usage_is_scaled(start_gateway, fake_upstream, stream):
    server = start_gateway({"models": {"gpt-4.1": {"contextWindow": 100_000}}})
    fake_upstream.enqueue(Reply(text="big", input_tokens=20_000, cache_read_tokens=60_000, output_tokens=7))
    client = _openai(server)
    kwargs = dict(model="gpt-4.1", messages=[{"role": "user", "content": "x"}], tools=[CHAT_TOOL])
    if stream:
        with client.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as s:
            usage = s.get_final_completion().usage
    else:
        usage = client.chat.completions.create(**kwargs).usage
    assert usage.prompt_tokens == 50_000
    assert usage.prompt_tokens_details.cached_tokens == 37_500
    assert usage.completion_tokens == 7 and usage.total_tokens == 50_007


@pytest.mark.parametrize("tools", ["tools", "big-body", "server-state"])
@pytest.mark.parametrize("stream", [False, True])
def test_responses_usage_is_scaled(start_gateway, fake_upstream, stream, tools):
    server = start_gateway({"models": {"gpt-5": {"contextWindow": 100_000}}})
    fake_upstream.enqueue(Reply(text="big", input_tokens=20_000, cache_read_tokens=60_000, output_tokens=7))
    client = _openai(server)
    if tools == "tools":
        kwargs = dict(model="gpt-5", input="x", tools=[RESPONSES_TOOL])
    elif tools == "big-body":
        # A side call without tools goes through the rewriting relay only when its body is
        # big enough that its prompt may be past the share ...
        kwargs = dict(model="gpt-5", input="word " * 25_000)
    else:
        # ... or when it continues server-side state: the history is upstream, not in the body.
        kwargs = dict(model="gpt-5", input="x", previous_response_id="resp_earlier")
    usage = _responses_answer(client, stream, **kwargs).usage
    assert usage.input_tokens == 50_000
    assert usage.input_tokens_details.cached_tokens == 37_500
    assert usage.output_tokens == 7 and usage.total_tokens == 50_007


def test_usage_share_zero_reports_the_real_usage(start_gateway, fake_upstream):
    server = start_gateway({"budget": {"clientUsageShare": 0}})
    fake_upstream.enqueue(Reply(text="big", **BIG))
    message = _ask(_anthropic(server), [{"role": "user", "content": "x"}], stream=True)
    assert message.usage.cache_read_input_tokens == 150_000


def test_a_small_side_call_is_relayed_untouched(gateway, fake_upstream):
    fake_upstream.enqueue(Reply(text="title", **BIG))
    with _anthropic(gateway).messages.stream(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "title?"}]
    ) as s:
        message = s.get_final_message()
    assert message.usage.cache_read_input_tokens == 150_000


# ---------------------------------------------------------------------------------------------
# Without a recall call the answer is the upstream's, byte for byte
# ---------------------------------------------------------------------------------------------

PLAIN = {
    "/v1/messages": {
        "model": MODEL,
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [ANTHROPIC_TOOL],
    },
    "/v1/chat/completions": {
        "model": "gpt-4.1",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [CHAT_TOOL],
        "stream_options": {"include_usage": True},
    },
    "/v1/responses": {"model": "gpt-5", "input": "hi", "tools": [RESPONSES_TOOL]},
}


@pytest.mark.parametrize("path", list(PLAIN))
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("with_call", [False, True])
def test_plain_answers_keep_the_upstream_bytes(gateway, fake_upstream, path, stream, with_call):
    calls = [ToolCall("read_file", {"path": "a.py"})] if with_call else []
    fake_upstream.enqueue(Reply(text="Hello there, friend.", tool_calls=calls, text_chunks=5))
    body = dict(PLAIN[path])
    if stream:
        body["stream"] = True
    else:
        body.pop("stream_options", None)
    response = httpx.post(
        gateway.url + path, json=body, headers={"x-api-key": "k", "authorization": "Bearer k"}
    )
    assert response.status_code == 200
    assert response.content == bytes(fake_upstream.responses_sent[-1])
    sent = fake_upstream.api_requests()[-1].json
    names = [t.get("name") or t.get("function", {}).get("name") for t in sent["tools"]]
    assert names == ["read_file", "recall"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
def test_recall_loop_over_compressed_upstream_answers(gateway, fake_upstream, stream, encoding):
    fake_upstream.enqueue(
        Reply(text="", tool_calls=[ToolCall("recall", {"query": "deploy"})], compress=encoding),
        Reply(text="Done.", compress=encoding),
    )
    message = _ask(_anthropic(gateway), [{"role": "user", "content": "what did we deploy?"}], stream)
    assert [b.text for b in message.content] == [marker_text("deploy"), "Done."]
    assert "deploy" in _tool_result(fake_upstream)


def test_a_continuation_cut_off_aborts_the_client_stream(gateway, fake_upstream):
    fake_upstream.enqueue(
        Reply(text="", tool_calls=[ToolCall("recall", {"query": "deploy"})]),
        Reply(text="This answer never ends.", drop_after_events=4),
    )
    # Whatever exception type the SDK's transport raises: the stream must not end cleanly.
    with pytest.raises(Exception, match=r"incomplete|closed|Connection"):
        _ask(_anthropic(gateway), [{"role": "user", "content": "what did we deploy?"}], stream=True)


# ---------------------------------------------------------------------------------------------
# Several recalls: in one round, and over two rounds (restored together)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_two_recalls_in_one_round(gateway, fake_upstream, stream):
    one, two = ToolCall("recall", {"query": "alpha"}), ToolCall("recall", {"id": "t:0000"})
    fake_upstream.enqueue(Reply(text="", tool_calls=[one, two]), Reply(text="Both."))
    client = _openai(gateway)
    kwargs = dict(model="gpt-4.1", messages=[{"role": "user", "content": "x"}], tools=[CHAT_TOOL])
    if stream:
        with client.chat.completions.stream(**kwargs) as s:
            completion = s.get_final_completion()
    else:
        completion = client.chat.completions.create(**kwargs)
    content = completion.choices[0].message.content
    assert marker_text("alpha") in content and marker_text(None, "t:0000") in content
    assert content.endswith("Both.")
    sent = fake_upstream.api_requests()[1].json["messages"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == [one.id, two.id]
    assert [(m["role"], m["tool_call_id"]) for m in sent[2:]] == [("tool", one.id), ("tool", two.id)]


@pytest.mark.parametrize("stream", [False, True])
def test_two_rounds_are_restored_together(gateway, fake_upstream, stream):
    first, second = ToolCall("recall", {"query": "alpha"}), ToolCall("recall", {"query": "beta"})
    fake_upstream.enqueue(
        Reply(text="", tool_calls=[first]), Reply(text="Hm.", tool_calls=[second]), Reply(text="Found both.")
    )
    client = _anthropic(gateway)
    history = [{"role": "user", "content": "alpha and beta?"}]
    message = _ask(client, history, stream)
    assert [b.text for b in message.content] == [
        marker_text("alpha"),
        "Hm.",
        marker_text("beta"),
        "Found both.",
    ]
    follow_up = fake_upstream.api_requests()[2]
    fake_upstream.enqueue(Reply(text="ok"))
    history += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
        {"role": "user", "content": "and gamma?"},
    ]
    _ask(client, history, stream)
    sent = fake_upstream.api_requests()[3]
    n = len(follow_up.json["messages"])
    assert n == 5 and sent.json["messages"][:n] == follow_up.json["messages"]
    assert json.dumps(follow_up.json["messages"], ensure_ascii=False).encode()[:-1] in sent.body
    assert sent.json["messages"][n:] == [
        {"role": "assistant", "content": [{"type": "text", "text": "Found both."}]},
        {"role": "user", "content": "and gamma?"},
    ]
    # A third turn restores the same way (the record is used on every later request).
    fake_upstream.enqueue(Reply(text="ok"))
    history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "thanks"}]
    _ask(client, history, stream)
    assert fake_upstream.api_requests()[4].json["messages"][: n + 2] == sent.json["messages"]


def test_injecting_twice_keeps_one_recall_tool_and_stays_ours():
    from lore_core.recall.memory import inject_tool
    from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

    codec = AnthropicMessagesCodec()
    raw = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "tools": [ANTHROPIC_TOOL]}
    view = codec.parse(raw, json.dumps(raw).encode())
    assert inject_tool(codec, view) is True
    assert inject_tool(codec, view) is True  # composed again after an overflow: still the gateway's
    assert [t["name"] for t in view.tools] == ["read_file", "recall"]
    own = {"name": "recall", "description": "mine", "input_schema": {"type": "object"}}
    raw["tools"] = [own]
    view = codec.parse(raw, json.dumps(raw).encode())
    assert inject_tool(codec, view) is False and view.tools == [own]


def test_recall_after_an_overflow_retry(start_gateway, fake_upstream):
    too_long = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 208310 tokens > 200000 maximum",
        },
    }
    server = start_gateway({"distill": {"observer": "extractive"}})
    fake_upstream.enqueue(
        Reply(status=400, error_body=too_long),
        Reply(text="", tool_calls=[ToolCall("recall", {"query": "deploy"})]),
        Reply(text="Done."),
    )
    history = []
    for i in range(6):
        history += [
            {"role": "user", "content": f"step {i}: " + "details " * 50},
            {"role": "assistant", "content": f"ok {i}"},
        ]
    history.append({"role": "user", "content": "and now?"})
    message = _ask(_anthropic(server), history, stream=True)
    assert [b.text for b in message.content] == [marker_text("deploy"), "Done."]
    refused, retried, follow_up = fake_upstream.api_requests()
    for req in (refused, retried, follow_up):
        assert [t["name"] for t in req.json["tools"]] == ["read_file", "recall"]
    assert follow_up.json["messages"][-2]["content"][-1]["name"] == "recall"


def test_client_leaving_during_the_continuation(gateway, fake_upstream):
    fake_upstream.enqueue(
        Reply(text="", tool_calls=[ToolCall("recall", {"query": "deploy"})]),
        Reply(text="a long answer " * 40, text_chunks=40, chunk_delay=0.05),
    )
    body = {
        "model": MODEL,
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "what did we deploy?"}],
        "tools": [ANTHROPIC_TOOL],
    }
    seen = b""
    with httpx.stream(
        "POST", gateway.url + "/v1/messages", json=body, headers={"x-api-key": "k"}
    ) as response:
        for chunk in response.iter_raw():
            seen += chunk
            if b"a long answer" in seen:
                break  # leave mid-continuation
    assert marker_text("deploy").encode() in seen.replace(b'\\"', b'"')
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and gateway.gateway.stats["client_disconnects"] < 1:
        time.sleep(0.05)
    assert gateway.gateway.stats["client_disconnects"] == 1
    assert len(fake_upstream.api_requests()) == 2
    # The gateway serves on.
    fake_upstream.enqueue(Reply(text="still here"))
    assert (
        _ask(_anthropic(gateway), [{"role": "user", "content": "hi"}], stream=True).content[0].text
        == "still here"
    )


def test_non_streaming_follow_up_cut_off_answers_with_what_was_said(gateway, fake_upstream):
    fake_upstream.enqueue(
        Reply(text="Checking.", tool_calls=[ToolCall("recall", {"query": "deploy"})]),
        Reply(text="never arrives whole", drop_after_bytes=20),
    )
    message = _ask(_anthropic(gateway), [{"role": "user", "content": "what did we deploy?"}], stream=False)
    assert [b.text for b in message.content] == ["Checking.", marker_text("deploy")]
    assert message.stop_reason == "end_turn"


def test_non_streaming_first_answer_cut_off_is_a_502(gateway, fake_upstream):
    fake_upstream.enqueue(Reply(text="never arrives whole", drop_after_bytes=20))
    with pytest.raises(anthropic.InternalServerError, match="broke off"):
        _ask(_anthropic(gateway), [{"role": "user", "content": "hi"}], stream=False)


def test_the_same_marker_in_two_turns_restores_each_turn_its_own(gateway, fake_upstream):
    client = _openai(gateway)
    kwargs = dict(model="gpt-4.1", tools=[CHAT_TOOL])
    history = [{"role": "user", "content": "deploy?"}]
    follow_ups = []
    for answer in ("First answer.", "Second answer."):
        fake_upstream.enqueue(
            Reply(text="", tool_calls=[ToolCall("recall", {"query": "deploy"})]), Reply(text=answer)
        )
        content = client.chat.completions.create(messages=history, **kwargs).choices[0].message.content
        assert content.endswith(answer)
        follow_ups.append(fake_upstream.api_requests()[-1].json["messages"])
        history += [{"role": "assistant", "content": content}, {"role": "user", "content": "again?"}]
    fake_upstream.enqueue(Reply(text="ok"))
    client.chat.completions.create(messages=history, **kwargs)
    sent = fake_upstream.api_requests()[-1].json["messages"]
    first, second = follow_ups
    assert sent[: len(first)] == first
    assert sent[len(first)] == {"role": "assistant", "content": "First answer."}
    assert sent[: len(second)] == second
    assert sent[len(second)] == {"role": "assistant", "content": "Second answer."}
    assert first[2]["tool_call_id"] != second[-1]["tool_call_id"]


def test_event_splitter_keeps_each_events_bytes_across_any_chunking():
    from lore_core.wire.turns import EventSplitter

    stream = (
        b'event: message_start\ndata: {"a": 1}\n\n'
        b": a comment\n\n"
        b'event: content_block_delta\r\ndata: {"b":\r\ndata: 2}\r\n\r\n'
        b"data: [DONE]\n\n"
    )
    for size in (1, 2, 3, 7, len(stream)):
        splitter = EventSplitter()
        events = []
        for i in range(0, len(stream), size):
            events += splitter.feed(stream[i : i + size])
        assert [(name, data) for name, data, _ in events] == [
            ("message_start", '{"a": 1}'),
            ("", ""),  # a keep-alive comment, relayed as it came
            ("content_block_delta", '{"b":\n2}'),
            ("", "[DONE]"),
        ]
        assert events[0][2] == b'event: message_start\ndata: {"a": 1}\n\n'
        assert events[1][2] == b": a comment\n\n"
        assert events[3][2] == b"data: [DONE]\n\n"
