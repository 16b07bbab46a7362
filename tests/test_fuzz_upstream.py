"""Property-based fuzzing of what the upstream answers (hypothesis), through a real gateway.

The request side is fuzzed in ``test_fuzz_codecs.py``; here the provider misbehaves: a
loopback upstream (:class:`~lore_core.testing.raw_upstream.RawUpstream`) answers with a
generated event stream or JSON body for each wire API. Events and bodies are shaped like the
API's own (its event types, its field names, nested the way it nests them), but every field
may hold any JSON value instead, unknown fields and event types appear, and ``data:`` lines
may not be JSON at all. Each is sent to a plain relay (no tools offered) and to the recall
loop (tools offered, so the gateway's recall tool is added and the loop reads every event),
streamed and not. For every example:

* the client gets a 200; from the plain relay, and for every JSON answer, exactly the
  bytes the upstream sent (the recall loop renumbers content blocks and holds a stream's
  closing events until its end, so a stream out of order may reach the client reordered);
* the gateway logs no error and no traceback (an answer the codec cannot read is relayed
  and said in a warning);
* the gateway answers a normal request afterwards.

Tool calls named ``recall`` are left out: the recall loop acts on those (it answers them and
asks the upstream again), so its output is not the upstream's bytes by design.
``LORE_FUZZ_EXAMPLES`` sets the examples per property (``benchmarks/fuzz.py`` runs
thousands).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lore_core.testing.fuzz import FUZZ, Tally, json_values, log_problems, texts
from lore_core.testing.raw_upstream import RawUpstream, http_head
from lore_core.testing.server import ThreadedServer

# Seconds per test (see the slow marker in lore_core.testing.fixtures).
pytestmark = pytest.mark.slow

PATHS = {
    "anthropic-messages": "/v1/messages",
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
}
REQUESTS: dict[str, dict[str, Any]] = {
    "anthropic-messages": {
        "model": "claude-x",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "openai-chat": {"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]},
    "openai-responses": {"model": "gpt-x", "input": "hi"},
}
TOOLS = {
    "anthropic-messages": {"name": "Bash", "input_schema": {"type": "object"}},
    "openai-chat": {"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}},
    "openai-responses": {"type": "function", "name": "Bash", "parameters": {"type": "object"}},
}


def either(shaped: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the API's own shape, sometimes any JSON value in its place."""
    return st.one_of(shaped, shaped, shaped, json_values(4))


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with some of ``fields`` (each maybe of the wrong type) and unknown keys."""
    known = st.fixed_dictionaries({}, optional={k: either(v) for k, v in fields.items()})
    unknown = st.dictionaries(texts(8).map(lambda k: "x-" + k), json_values(3), max_size=2)
    return st.builds(lambda a, b: {**b, **a}, known, unknown)


def tool_names() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(["Bash", "read_file", "edit"]), texts(12)).filter(
        lambda name: "recall" not in name.lower()
    )


NUMBER = st.integers(min_value=-3, max_value=5)
TEXT = texts(40)
# Small counts: a prompt near the context window makes the recall loop scale the usage the
# client sees (by design), and then its bytes are not the upstream's.
USAGE = st.fixed_dictionaries(
    {}, optional={k: NUMBER for k in ("input_tokens", "output_tokens", "prompt_tokens", "completion_tokens")}
)

ANTHROPIC_BLOCK = obj(
    type=st.sampled_from(["text", "tool_use", "thinking", "server_tool_use", "mystery"]),
    text=TEXT,
    id=TEXT,
    name=tool_names(),
    input=json_values(3),
)
ANTHROPIC_DELTA = obj(
    type=st.sampled_from(["text_delta", "input_json_delta", "thinking_delta", "signature_delta", "odd"]),
    text=TEXT,
    partial_json=TEXT,
    thinking=TEXT,
    stop_reason=st.sampled_from(["end_turn", "tool_use", "max_tokens"]),
)
ANTHROPIC_EVENT = st.one_of(
    obj(type=st.just("message_start"), message=obj(id=TEXT, model=TEXT, usage=USAGE, content=st.just([]))),
    obj(type=st.just("content_block_start"), index=NUMBER, content_block=ANTHROPIC_BLOCK),
    obj(type=st.just("content_block_delta"), index=NUMBER, delta=ANTHROPIC_DELTA),
    obj(type=st.just("content_block_stop"), index=NUMBER),
    obj(type=st.just("message_delta"), delta=ANTHROPIC_DELTA, usage=USAGE),
    obj(type=st.sampled_from(["message_stop", "ping", "error", "unknown_event"]), error=obj(message=TEXT)),
)

CHAT_TOOL_CALL = obj(
    index=NUMBER, id=TEXT, type=st.just("function"), function=obj(name=tool_names(), arguments=TEXT)
)
CHAT_CHOICE = obj(
    index=NUMBER,
    delta=obj(role=st.just("assistant"), content=TEXT, tool_calls=st.lists(CHAT_TOOL_CALL, max_size=2)),
    message=obj(role=st.just("assistant"), content=TEXT, tool_calls=st.lists(CHAT_TOOL_CALL, max_size=2)),
    finish_reason=st.sampled_from(["stop", "tool_calls", "length"]),
)
CHAT_EVENT = obj(id=TEXT, model=TEXT, object=TEXT, choices=st.lists(CHAT_CHOICE, max_size=2), usage=USAGE)

RESPONSES_ITEM = obj(
    type=st.sampled_from(["message", "function_call", "reasoning", "custom_tool_call", "mystery"]),
    id=TEXT,
    name=tool_names(),
    call_id=TEXT,
    arguments=TEXT,
    role=st.just("assistant"),
    content=st.lists(obj(type=st.sampled_from(["output_text", "refusal"]), text=TEXT), max_size=2),
)
RESPONSES_BODY = obj(
    id=TEXT,
    model=TEXT,
    status=st.sampled_from(["completed", "in_progress", "failed", "incomplete"]),
    output=st.lists(RESPONSES_ITEM, max_size=2),
    usage=USAGE,
)
RESPONSES_EVENT = obj(
    type=st.sampled_from(
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.output_text.delta",
            "response.function_call_arguments.delta",
            "response.output_item.done",
            "response.completed",
            "response.failed",
            "error",
            "response.mystery",
        ]
    ),
    sequence_number=NUMBER,
    output_index=NUMBER,
    item=RESPONSES_ITEM,
    delta=TEXT,
    response=RESPONSES_BODY,
)

EVENTS = {
    "anthropic-messages": ANTHROPIC_EVENT,
    "openai-chat": CHAT_EVENT,
    "openai-responses": RESPONSES_EVENT,
}
BODIES = {
    "anthropic-messages": obj(
        id=TEXT,
        type=st.just("message"),
        role=st.just("assistant"),
        model=TEXT,
        content=st.lists(ANTHROPIC_BLOCK, max_size=3),
        stop_reason=st.sampled_from(["end_turn", "tool_use"]),
        usage=USAGE,
    ),
    "openai-chat": obj(id=TEXT, model=TEXT, choices=st.lists(CHAT_CHOICE, max_size=2), usage=USAGE),
    "openai-responses": RESPONSES_BODY,
}


@st.composite
def event_stream(draw: st.DrawFn, api: str) -> bytes:
    """SSE of the API's events; sometimes a ``data:`` line that is not JSON, and for the
    OpenAI APIs maybe the ``[DONE]`` end."""
    frames = []
    for _ in range(draw(st.integers(min_value=0, max_value=8))):
        if draw(st.integers(min_value=0, max_value=9)) == 0:
            data = draw(st.sampled_from(["{not json", "[DONE]", "", "7", '"text"', "null"]))
        else:
            data = json.dumps(draw(EVENTS[api]), ensure_ascii=draw(st.booleans()))
        event = draw(EVENTS[api].map(lambda ev: ev.get("type")))
        name = (
            f"event: {event}\n"
            if isinstance(event, str) and api != "openai-chat" and "\n" not in event
            else ""
        )
        frames.append(f"{name}data: {data}\n\n".encode("utf-8", "surrogatepass"))
    if api != "anthropic-messages" and draw(st.booleans()):
        frames.append(b"data: [DONE]\n\n")
    return b"".join(frames)


@pytest.fixture
def relay(start_gateway: Callable[..., ThreadedServer]) -> ThreadedServer:
    return start_gateway(config={"upstream": {"maxRetries": 0}})


def _answer_and_check(
    server: ThreadedServer,
    raw: RawUpstream,
    api: str,
    tools: bool,
    stream: bool,
    body: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.clear()
    content_type = "text/event-stream" if stream else "application/json"
    raw.script = [http_head(200, content_type, None if stream else len(body)), body, "close"]
    request = {**REQUESTS[api], "stream": stream}
    if tools:
        request["tools"] = [TOOLS[api]]
    response = httpx.post(
        server.url + PATHS[api],
        json=request,
        # With the token: a request the pipeline works on (without, it is relayed untouched).
        headers={"x-lore-upstream-url": raw.url, "x-lore-token": server.gateway.tokens.current()},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    if not (tools and stream):
        assert response.content == body
    assert log_problems(caplog.records) == []
    normal = httpx.post(server.url + PATHS[api], json=REQUESTS[api], timeout=30)
    assert normal.status_code == 200


@pytest.mark.parametrize("tools", [False, True], ids=["relay", "recall-loop"])
@pytest.mark.parametrize("api", list(PATHS))
def test_fuzz_upstream_event_streams(
    relay: ThreadedServer, api: str, tools: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        RawUpstream() as raw,
        Tally(f"upstream streams {api} ({'recall loop' if tools else 'relay'})") as tally,
    ):

        @FUZZ
        @given(body=event_stream(api))
        def check(body: bytes) -> None:
            tally.case()
            _answer_and_check(relay, raw, api, tools, True, body, caplog)

        check()


@pytest.mark.parametrize("tools", [False, True], ids=["relay", "recall-loop"])
@pytest.mark.parametrize("api", list(PATHS))
def test_fuzz_upstream_json_answers(
    relay: ThreadedServer, api: str, tools: bool, caplog: pytest.LogCaptureFixture
) -> None:
    with RawUpstream() as raw, Tally(f"upstream JSON {api} ({'recall loop' if tools else 'relay'})") as tally:

        @FUZZ
        @given(answer=BODIES[api], ascii_only=st.booleans())
        def check(answer: dict[str, Any], ascii_only: bool) -> None:
            tally.case()
            body = json.dumps(answer, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
            _answer_and_check(relay, raw, api, tools, False, body, caplog)

        check()
