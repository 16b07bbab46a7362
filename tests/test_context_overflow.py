"""Recognising an upstream's "prompt is too long" answer, and the layer a session must start
from next."""

from __future__ import annotations

import json

import anthropic
import pytest

from lore_core.context.overflow import Overflow, next_min_layer, overflow_in_failed_response, parse_overflow
from lore_core.testing.fake_upstream import Reply
from lore_core.testing.poll import poll


def _body(payload: object) -> bytes:
    return json.dumps(payload).encode()


ANTHROPIC_TOO_LONG = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 208310 tokens > 200000 maximum",
    },
}
OPENAI_TOO_LONG = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages resulted "
        "in 190000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
RESPONSES_TOO_LONG = {
    "error": {
        "message": "Your input exceeds the context window of this model. "
        "Please adjust your input and try again.",
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }
}


def test_anthropic_overflow_with_its_numbers() -> None:
    overflow = parse_overflow(400, _body(ANTHROPIC_TOO_LONG))
    assert overflow is not None and (overflow.tokens, overflow.limit) == (208310, 200000)
    assert overflow.overshoot == pytest.approx(0.04155)
    assert next_min_layer(0, overflow) == 2


def test_openai_overflow_with_its_numbers_is_a_large_overshoot() -> None:
    overflow = parse_overflow(400, _body(OPENAI_TOO_LONG))
    assert overflow is not None and (overflow.tokens, overflow.limit) == (190000, 128000)
    assert next_min_layer(0, overflow) == 3


def test_responses_overflow_without_numbers() -> None:
    overflow = parse_overflow(400, _body(RESPONSES_TOO_LONG))
    assert overflow is not None and overflow.overshoot is None
    assert next_min_layer(0, overflow) == 2


def test_anthropic_body_too_large() -> None:
    body = {
        "type": "error",
        "error": {"type": "request_too_large", "message": "Request exceeds the maximum size"},
    }
    assert parse_overflow(413, _body(body)) is not None


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            400,
            _body(
                {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": "max_tokens: required"},
                }
            ),
        ),
        (401, _body(ANTHROPIC_TOO_LONG)),  # not a status an overflow comes with
        (429, _body({"error": {"message": "rate limited", "code": "rate_limit_exceeded"}})),
        (400, b"<html>bad gateway</html>"),
        (400, b""),
        (400, _body(["not", "an", "object"])),
    ],
)
def test_other_errors_are_not_overflows(status: int, body: bytes) -> None:
    assert parse_overflow(status, body) is None


def test_repeated_overflow_goes_one_layer_further_up_to_four() -> None:
    small = Overflow("prompt is too long", tokens=201_000, limit=200_000)
    assert [next_min_layer(current, small) for current in range(5)] == [2, 2, 3, 4, 4]
    large = Overflow("prompt is too long", tokens=300_000, limit=200_000)
    assert [next_min_layer(current, large) for current in range(5)] == [3, 3, 3, 4, 4]


def test_a_failed_responses_event_says_whether_it_was_an_overflow() -> None:
    def failed(error: object) -> str:
        return json.dumps({"type": "response.failed", "response": {"status": "failed", "error": error}})

    too_long = {"code": "context_length_exceeded", "message": "Your input exceeds the context window."}
    assert overflow_in_failed_response(failed(too_long)) == Overflow("Your input exceeds the context window.")
    assert overflow_in_failed_response(failed({"code": "context_length_exceeded"})) is not None
    assert overflow_in_failed_response(failed({"code": "server_error", "message": "try again"})) is None
    assert overflow_in_failed_response(failed(None)) is None
    assert overflow_in_failed_response("not json") is None


# -- through the gateway -----------------------------------------------------------------------


def _turns(count: int) -> list[dict]:
    history: list[dict] = []
    for n in range(count):
        history.append(
            {"role": "user", "content": f"question {n}: " + "explain the scheduler in depth " * 20}
        )
        history.append(
            {"role": "assistant", "content": f"answer {n}: " + "the scheduler polls idle sessions " * 20}
        )
    return history


def test_an_overflow_is_recomposed_at_once_and_later_turns_start_at_the_raised_layer(
    start_gateway, fake_upstream
) -> None:
    session = "overflow-session"
    config = {"distill": {"observer": "extractive"}}
    server = start_gateway(config)

    def client(srv):
        headers = {"x-lore-session": session}
        return anthropic.Anthropic(
            base_url=srv.url, api_key="sk-ant-k", max_retries=0, default_headers=headers
        )

    history = [*_turns(6), {"role": "user", "content": "and now?"}]
    # The upstream refuses the raw prompt: the gateway composes it again at layer 2 and the
    # client gets the answer, not the error.
    fake_upstream.enqueue(Reply(status=400, error_body=ANTHROPIC_TOO_LONG), Reply(text="fits now"))
    answer = client(server).messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=history)
    assert answer.content[0].text == "fits now"
    refused, retried = fake_upstream.api_requests()
    assert refused.json["messages"] == history
    assert retried.json["messages"] != history
    assert "and now?" in json.dumps(retried.json["messages"][-1])
    assert server.gateway.stats["context_overflows"] == 1 and server.gateway.stats["overflow_retries"] == 1
    assert server.call(server.gateway.store.get_state(session, "forceMinLayer")) == 2

    # After a restart the next turn starts at layer 2 straight away.
    server.stop()
    server = start_gateway(config)
    fake_upstream.reset()
    history += [{"role": "assistant", "content": "fits now"}, {"role": "user", "content": "next"}]
    fake_upstream.enqueue(Reply(text="fine"))
    assert client(server).messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=history)
    status = server.gateway.context.session_status(session)
    assert status["force_min_layer"] == 2 and status["layer"] >= 2
    assert fake_upstream.api_requests()[0].json["messages"] != history

    # Refused again at layer 2 and at layer 3: one retry only, the client gets the error, and
    # the session goes one layer further each time.
    fake_upstream.enqueue(
        Reply(status=400, error_body=OPENAI_TOO_LONG), Reply(status=400, error_body=OPENAI_TOO_LONG)
    )
    with pytest.raises(anthropic.BadRequestError, match="maximum context length"):
        client(server).messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=history)
    assert server.call(server.gateway.store.get_state(session, "forceMinLayer")) == 4
    assert len(fake_upstream.api_requests()) == 3


def test_other_client_errors_leave_the_layer_alone(gateway, fake_upstream) -> None:
    client = anthropic.Anthropic(
        base_url=gateway.url, api_key="sk-ant-k", max_retries=0, default_headers={"x-lore-session": "s2"}
    )
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"}}
    fake_upstream.enqueue(Reply(status=400, error_body=error))
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        client.messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=_turns(1)[:1])
    assert gateway.gateway.stats["context_overflows"] == 0
    assert gateway.call(gateway.gateway.store.get_state("s2", "forceMinLayer")) in (None, 0)


def _responses_turns(count: int) -> list[dict]:
    """Responses input items: each turn asks, runs a tool with a long output, answers."""
    items: list[dict] = []
    for n in range(count):
        items += [
            {"role": "user", "content": f"question {n}: what does the scheduler log say?"},
            {
                "type": "function_call",
                "call_id": f"call_{n}",
                "name": "run",
                "arguments": '{"cmd": "cat log"}',
            },
            {
                "type": "function_call_output",
                "call_id": f"call_{n}",
                "output": "scheduler polled 12 idle sessions\n" * 80,
            },
            {"role": "assistant", "content": f"answer {n}: it polls idle sessions"},
        ]
    return items


ASK = {"role": "user", "content": "and now?"}


def _turn_requests(fake_upstream) -> list:
    """The requests of the client's turn (the urgent distillation's worker call goes to the
    same fake)."""
    return [r for r in fake_upstream.api_requests() if r.json["input"][-1:] == [ASK]]


RESPONSES_FAILURE = {"code": "context_length_exceeded", "message": RESPONSES_TOO_LONG["error"]["message"]}
RESPONSES_TOOL = {"type": "function", "name": "run", "parameters": {"type": "object", "properties": {}}}


def _responses_client(server, session: str):
    import openai

    headers = {"x-lore-session": session}
    return openai.OpenAI(
        base_url=server.url + "/v1", api_key="sk-test", max_retries=0, default_headers=headers
    )


@pytest.mark.parametrize("tools", [False, True], ids=["plain-relay", "recall-loop"])
def test_a_responses_stream_failing_as_too_long_is_composed_again_before_the_client_sees_it(
    gateway, fake_upstream, tools
) -> None:
    """OpenAI answers an input past the window on a started stream (HTTP 200, then
    response.failed). Codex does not retry that ("ran out of room in the model's context
    window"): the gateway holds the stream's opening events until the next one, sees the
    failure before anything was relayed, and sends the request again at the raised layer."""
    session = f"responses-overflow-{tools}"
    fake_upstream.enqueue(Reply(stream_failure=RESPONSES_FAILURE), Reply(text="fits now"))
    history = [*_responses_turns(6), ASK]
    kwargs = {"tools": [RESPONSES_TOOL]} if tools else {}
    events = list(
        _responses_client(gateway, session).responses.create(
            model="gpt-5", input=history, stream=True, **kwargs
        )
    )
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert "response.failed" not in [e.type for e in events]
    assert events[-1].response.output_text == "fits now"
    refused, retried = _turn_requests(fake_upstream)
    assert refused.json["input"] == history
    # Layer 2: the old tool outputs became annotations; the last two turns are whole.
    outputs = [i["output"] for i in retried.json["input"] if i.get("type") == "function_call_output"]
    assert len(outputs) == 6 and len(outputs[0]) < 500 and outputs[-1] == history[-3]["output"]
    stats = gateway.gateway.stats
    assert stats["context_overflows"] == 1 and stats["overflow_retries"] == 1
    assert gateway.call(gateway.gateway.store.get_state(session, "forceMinLayer")) == 2


def test_a_responses_stream_failing_again_after_the_retry_reaches_the_client(gateway, fake_upstream) -> None:
    session = "responses-overflow-twice"
    fake_upstream.enqueue(Reply(stream_failure=RESPONSES_FAILURE), Reply(stream_failure=RESPONSES_FAILURE))
    history = [*_responses_turns(6), ASK]
    events = list(
        _responses_client(gateway, session).responses.create(model="gpt-5", input=history, stream=True)
    )
    assert events[-1].type == "response.failed"
    assert len(_turn_requests(fake_upstream)) == 2
    # The session goes one layer further for its next turn.
    raised = lambda: gateway.call(gateway.gateway.store.get_state(session, "forceMinLayer")) == 3  # noqa: E731
    poll(raised, "forceMinLayer to rise to 3")


def test_other_stream_failures_are_relayed_as_they_came(gateway, fake_upstream) -> None:
    failure = {"code": "server_error", "message": "The server had an error processing your request."}
    fake_upstream.enqueue(Reply(stream_failure=failure))
    events = list(
        _responses_client(gateway, "responses-other").responses.create(model="gpt-5", input="hi", stream=True)
    )
    assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
    assert len(fake_upstream.api_requests()) == 1
    assert gateway.gateway.stats["context_overflows"] == 0
