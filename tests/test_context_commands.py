"""Slash commands answered by the gateway (``/lore:status``, ``/lore:amnesia on|off``) on every
wire API through the official SDKs, amnesia's effect on the store (also across a restart),
and the daily-budget throttle with its counters on /health."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from lore_core import cli
from lore_core.context.commands import SlashCommand, find_command
from lore_core.model import TEXT, TOOL_RESULT, Block, Message, RequestView
from lore_core.testing.fake_upstream import FakeUpstream, Reply
from lore_core.testing.net import get_json
from lore_core.testing.poll import poll
from lore_core.testing.server import ThreadedServer

MODEL = "claude-sonnet-4-6"


def _view(*messages: Message) -> RequestView:
    return RequestView(api="anthropic-messages", raw={}, body=b"", messages=list(messages))


def _user(*texts: str) -> Message:
    return Message("user", [Block(TEXT, text=t) for t in texts])


# -- recognising a command ---------------------------------------------------------------------


def test_find_command_shapes() -> None:
    assert find_command(_view(_user("/lore:status"))) == SlashCommand("status")
    assert find_command(_view(_user("  /lore:amnesia   ON "))) == SlashCommand("amnesia", ("ON",))
    assert find_command(_view(_user("/lore:"))) == SlashCommand("help")
    # Claude Code puts housekeeping beside the user's words.
    reminder = "<system-reminder>\nAs you answer, use the context below.\n</system-reminder>"
    assert find_command(_view(_user(reminder, "/lore:status"))) == SlashCommand("status")
    # ... and sends a command it knows in tags.
    tagged = "<command-message>lore:amnesia</command-message>\n<command-name>/lore:amnesia</command-name>\n"
    tagged += "<command-args>off</command-args>"
    assert find_command(_view(_user(tagged))) == SlashCommand("amnesia", ("off",))


def test_find_command_ignores_what_is_not_a_command() -> None:
    assert find_command(_view()) is None
    assert find_command(_view(_user("please run /lore:status for me"))) is None
    assert find_command(_view(_user("/lore:status\nand then explain the code"))) is None
    assert find_command(_view(_user("/compact"))) is None
    # An earlier command in the history is not the current turn.
    assert find_command(_view(_user("/lore:status"), Message("assistant", [Block(TEXT, text="ok")]))) is None
    result = Message("user", [Block(TOOL_RESULT, text="/lore:status", tool_call_id="t1")])
    assert find_command(_view(result)) is None


# -- through the gateway -----------------------------------------------------------------------


@pytest.fixture
def anthropic_client(gateway: ThreadedServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-test-key", max_retries=0)


@pytest.fixture
def openai_client(gateway: ThreadedServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0)


@pytest.mark.parametrize("stream", [False, True])
def test_status_on_anthropic_without_an_upstream_call(
    anthropic_client: anthropic.Anthropic, fake_upstream: FakeUpstream, stream: bool
) -> None:
    fake_upstream.enqueue(Reply(text="First answer.", input_tokens=1000, output_tokens=50))
    history: list[dict[str, Any]] = [{"role": "user", "content": "Explain the build."}]
    first = anthropic_client.messages.create(model=MODEL, max_tokens=100, messages=history)
    history += [
        {"role": "assistant", "content": first.content[0].text},
        {"role": "user", "content": "/lore:status"},
    ]
    if stream:
        with anthropic_client.messages.stream(model=MODEL, max_tokens=100, messages=history) as s:
            answer = s.get_final_message()
    else:
        answer = anthropic_client.messages.create(model=MODEL, max_tokens=100, messages=history)
    text = answer.content[0].text
    assert "Lore - session" in text
    # The first turn's usage was priced: 1000 input + 50 output tokens at Sonnet prices.
    assert "cost:" in text and "$0.0037 this session" in text
    # The first exchange is counted although the command came before its write was due.
    assert "stored:    2 messages" in text
    assert len(fake_upstream.api_requests()) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_commands_on_chat_completions_and_responses(
    openai_client: openai.OpenAI, fake_upstream: FakeUpstream, stream: bool
) -> None:
    messages = [{"role": "user", "content": "/lore:help"}]
    if stream:
        chunks = list(openai_client.chat.completions.create(model="gpt-5", messages=messages, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        answer = openai_client.chat.completions.create(model="gpt-5", messages=messages)
        text = answer.choices[0].message.content
    assert "/lore:amnesia on|off" in text

    if stream:
        events = list(openai_client.responses.create(model="gpt-5", input="/lore:nonsense", stream=True))
        assert events[-1].type == "response.completed"
        text = events[-1].response.output_text
    else:
        text = openai_client.responses.create(model="gpt-5", input="/lore:nonsense").output_text
    assert text.startswith("Unknown Lore command /lore:nonsense.")
    assert fake_upstream.api_requests() == []


def _stored_texts(server: ThreadedServer, session: str) -> list[str]:
    shown = get_json(f"{server.url}/lore/api/sessions/{session}")
    return [m["text"] for m in shown["messages"]]


def test_amnesia_keeps_a_stretch_of_the_session_out_of_the_store_across_a_restart(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    session = "amnesia-session"
    server = start_gateway()
    headers = {"x-lore-session": session}

    def client(srv: ThreadedServer) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            base_url=srv.url, api_key="sk-ant-k", max_retries=0, default_headers=headers
        )

    history: list[dict[str, Any]] = []

    def turn(srv: ThreadedServer, text: str, reply: str | None = None) -> str:
        if reply is not None:
            fake_upstream.enqueue(Reply(text=reply))
        history.append({"role": "user", "content": text})
        answer = client(srv).messages.create(model=MODEL, max_tokens=50, messages=history)
        history.append({"role": "assistant", "content": answer.content[0].text})
        return answer.content[0].text

    turn(server, "remember the public part", "noted public")
    assert turn(server, "/lore:amnesia on").startswith("Lore amnesia is ON")
    assert turn(server, "/lore:amnesia on") == "Lore amnesia was already on for this session."
    turn(server, "the secret is hunter2", "noted secret")
    turn(server, "more secret talk", "noted more")
    assert "amnesia:   ON" in turn(server, "/lore:status")

    # A restart in the middle: the state comes back from the store.
    server.stop()
    server = start_gateway()
    turn(server, "still secret after restart", "noted restart")
    assert turn(server, "/lore:amnesia off").startswith("Lore amnesia is OFF")
    turn(server, "public again", "noted public again")
    server.call(server.gateway.writer.wait_idle())

    texts = _stored_texts(server, session)
    assert "remember the public part" in texts and "noted public" in texts
    assert "public again" in texts and "noted public again" in texts
    leaked = [t for t in texts if "secret" in t or "amnesia" in t or "restart" in t or "noted more" in t]
    assert leaked == []
    assert len(fake_upstream.api_requests()) == 5


def test_a_command_from_other_credentials_changes_nothing(
    gateway: ThreadedServer, fake_upstream: FakeUpstream
) -> None:
    """Any local process can name a session: /lore:amnesia from another API key is refused
    and changes nothing; the owner's own key (and a refreshed key that carries the
    session's history) is obeyed."""
    session = {"x-lore-session": "owned-session"}

    def client(key: str) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0, default_headers=session)

    history: list[dict[str, Any]] = [{"role": "user", "content": "the owner's first words"}]
    fake_upstream.enqueue(Reply(text="owner answer"))
    first = client("sk-ant-owner").messages.create(model=MODEL, max_tokens=50, messages=history)
    history.append({"role": "assistant", "content": first.content[0].text})

    # A stranger guessing the session id: alone, and with a made-up history.
    for messages in (
        [{"role": "user", "content": "/lore:amnesia on"}],
        [
            {"role": "user", "content": "a guessed first message"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "/lore:amnesia on"},
        ],
    ):
        answer = client("sk-ant-stranger").messages.create(model=MODEL, max_tokens=50, messages=messages)
        assert answer.content[0].text.startswith("Lore did not run this command")
        status = client("sk-ant-stranger").messages.create(
            model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "/lore:status"}]
        )
        assert "Lore did not run this command" in status.content[0].text  # spend is not shown either
    assert not gateway.gateway.amnesia.is_on("owned-session")
    assert gateway.gateway.stats["commands_refused"] == 4
    assert (
        "/lore:amnesia on|off"
        in client("sk-ant-stranger")
        .messages.create(model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "/lore:help"}])
        .content[0]
        .text
    )  # help reads nothing of the session

    # The owner's key is obeyed ...
    command = [*history, {"role": "user", "content": "/lore:amnesia on"}]
    on = client("sk-ant-owner").messages.create(model=MODEL, max_tokens=50, messages=command)
    assert on.content[0].text.startswith("Lore amnesia is ON")
    # ... and so is a refreshed key that carries the session's own history.
    command = [*command, {"role": "assistant", "content": on.content[0].text}]
    command.append({"role": "user", "content": "/lore:amnesia off"})
    off = client("sk-ant-refreshed").messages.create(model=MODEL, max_tokens=50, messages=command)
    assert off.content[0].text.startswith("Lore amnesia is OFF")
    assert len(fake_upstream.api_requests()) == 1  # no command reached the provider


def test_throttle_delays_when_spend_is_projected_past_the_daily_budget(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = start_gateway({"budget": {"dailyBudgetUsd": 0.001, "maxDelaySeconds": 0.2}})
    client = anthropic.Anthropic(base_url=server.url, api_key="sk-ant-k", max_retries=0)
    messages = [{"role": "user", "content": "hello"}]
    # 100K input tokens at $3/Mtok: $0.30, far past a $0.001 budget.
    fake_upstream.enqueue(Reply(text="expensive", input_tokens=100_000))
    client.messages.create(model=MODEL, max_tokens=10, messages=messages)
    health = get_json(server.url + "/health")
    assert health["throttle"] == {"throttle.events": 0, "throttle.totalDelayMs": 0}
    assert health["spend"]["today_usd"] == pytest.approx(0.30, rel=0.01)

    started = time.monotonic()
    client.messages.create(model=MODEL, max_tokens=10, messages=messages)
    waited = time.monotonic() - started
    health = get_json(server.url + "/health")
    assert health["throttle"]["throttle.events"] == 1
    # pressure 1, overshoot far past 3: the delay is the configured maximum, 200 ms.
    assert 190 <= health["throttle"]["throttle.totalDelayMs"] <= 200
    assert waited >= 0.19

    # `lore status` shows the counters and the day's spend.
    monkeypatch.setenv("LORE_PORT", str(server.port))
    assert cli.main(["status"]) == 0
    out = capsys.readouterr()[0]
    assert "spend:   $0.3001 today of a $0.001 daily budget" in out
    assert "throttle.events 1, throttle.totalDelayMs 2" in out


def test_no_budget_means_no_throttle(gateway: ThreadedServer, fake_upstream: FakeUpstream) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-k", max_retries=0)
    for _ in range(2):
        fake_upstream.enqueue(Reply(text="x", input_tokens=100_000))
        client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert get_json(gateway.url + "/health")["throttle"]["throttle.events"] == 0


def test_spend_survives_a_restart_and_the_budget_holds_at_once(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    config = {"budget": {"dailyBudgetUsd": 0.001, "maxDelaySeconds": 0.2}}
    headers = {"x-lore-session": "spender"}
    messages = [{"role": "user", "content": "hello"}]

    def ask(srv: ThreadedServer) -> None:
        client = anthropic.Anthropic(
            base_url=srv.url, api_key="sk-ant-k", max_retries=0, default_headers=headers
        )
        fake_upstream.enqueue(Reply(text="expensive", input_tokens=100_000))  # $0.30 at $3/Mtok
        client.messages.create(model=MODEL, max_tokens=10, messages=messages)

    server = start_gateway(config)
    ask(server)
    server.stop()

    server = start_gateway(config)
    poll(lambda: get_json(server.url + "/health")["spend"]["today_usd"] > 0.29, "the day's spend loaded")
    # Over the budget from the first request after the restart.
    ask(server)
    health = get_json(server.url + "/health")
    assert health["throttle"]["throttle.events"] == 1
    assert health["spend"]["today_usd"] == pytest.approx(0.60, rel=0.01)
    client = anthropic.Anthropic(
        base_url=server.url, api_key="sk-ant-k", max_retries=0, default_headers=headers
    )
    status = client.messages.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "/lore:status"}]
    )
    # Both requests: 100K input and a few output tokens each.
    assert "cost:      $0.6001 this session, $0.6001 today" in status.content[0].text


def test_a_session_that_starts_under_amnesia_is_titled_by_what_was_stored(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    """The title is the session's first stored prompt: nothing said under amnesia, not even
    the command that turned it on, names the session in `lore sessions` or the dashboard."""
    server = start_gateway()
    client = anthropic.Anthropic(
        base_url=server.url,
        api_key="sk-ant-k",
        max_retries=0,
        default_headers={"x-lore-session": "amn-first"},
    )
    history: list[dict[str, Any]] = []

    def turn(text: str, reply: str | None = None) -> None:
        if reply is not None:
            fake_upstream.enqueue(Reply(text=reply))
        history.append({"role": "user", "content": text})
        answer = client.messages.create(model=MODEL, max_tokens=50, messages=history)
        history.append({"role": "assistant", "content": answer.content[0].text})

    turn("/lore:amnesia on")
    turn("the secret plan is hunter2", "noted")
    server.call(server.gateway.writer.wait_idle())
    listed = {s["id"]: s for s in get_json(f"{server.url}/lore/api/sessions")}
    assert listed.get("amn-first", {}).get("title", "") == ""
    turn("/lore:amnesia off")
    turn("the public plan", "ok")
    server.call(server.gateway.writer.wait_idle())
    listed = {s["id"]: s for s in get_json(f"{server.url}/lore/api/sessions")}
    assert listed["amn-first"]["title"] == "the public plan"
