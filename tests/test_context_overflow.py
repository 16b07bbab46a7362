"""Recognising an upstream's "prompt is too long" answer, and the layer a session must start
from next."""

from __future__ import annotations

import json

import anthropic
import pytest

from lore_core.context.overflow import Overflow, next_min_layer, parse_overflow
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


def test_a_responses_stream_that_fails_as_too_long_raises_the_layer_for_the_retry(
    gateway, fake_upstream
) -> None:
    """OpenAI answers an input past the window on a started stream (HTTP 200, then
    response.failed): too late to send it again, but the client's retry starts higher."""
    import openai

    session = "responses-overflow"
    client = openai.OpenAI(
        base_url=gateway.url + "/v1",
        api_key="sk-test",
        max_retries=0,
        default_headers={"x-lore-session": session},
    )
    failure = {"code": "context_length_exceeded", "message": RESPONSES_TOO_LONG["error"]["message"]}
    fake_upstream.enqueue(Reply(stream_failure=failure))
    events = list(client.responses.create(model="gpt-5", input="hello", stream=True))
    assert events[-1].type == "response.failed"
    raised = lambda: gateway.call(gateway.gateway.store.get_state(session, "forceMinLayer")) == 2  # noqa: E731
    poll(raised, "forceMinLayer to rise to 2")
    assert gateway.gateway.stats["context_overflows"] == 1
