"""The OpenCode harness against requests derived from real OpenCode 1.18.33 traffic.

``fixtures/opencode_requests.json`` holds the title request (to the small model, no
environment block) and the main request of one Anthropic session, and main requests sent
through the Responses and Chat Completions APIs, with long texts cut down.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from lore_harness_opencode.plugin import CONFIG_ENV, LAUNCH_ENV, OpenCodeHarness, gateway_config

from lore_core.testing.captured import (
    Captures,
    ExchangeRecorder,
    captured_header,
    replay_headers,
    request_context,
)
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.server import ThreadedServer

CAPTURES = Captures(Path(__file__).parent / "fixtures" / "opencode_requests.json")
CAPTURED_CWD = "/home/dev/clients/proj-opencode"
MAIN_REQUESTS = ["opencode-anthropic#1", "opencode-openai#1", "opencode-chat#1"]


# -- recognition, session, project ---------------------------------------------------------


@pytest.mark.parametrize("tag", MAIN_REQUESTS)
def test_main_requests_on_all_three_apis(tag: str) -> None:
    request = CAPTURES[tag]
    ctx = request_context(request)
    harness = OpenCodeHarness()
    assert harness.recognise(ctx) == 100
    assert harness.session_id(ctx) == captured_header(request, "x-session-id")
    assert harness.session_id(ctx).startswith("ses_")
    assert harness.project(ctx) == CAPTURED_CWD


def test_the_title_request_belongs_to_the_same_session() -> None:
    title, main = CAPTURES["opencode-anthropic"], CAPTURES["opencode-anthropic#1"]
    harness = OpenCodeHarness()
    assert harness.session_id(request_context(title)) == harness.session_id(request_context(main))
    # It carries no environment block: its project is the gateway's working directory.
    assert harness.project(request_context(title, gateway_cwd="/srv/gw")) == "/srv/gw"


def test_session_fallbacks() -> None:
    ctx = request_context(CAPTURES["opencode-openai#1"])
    harness = OpenCodeHarness()
    session = ctx.headers.pop("x-session-id")
    assert harness.session_id(ctx) == session  # x-session-affinity
    del ctx.headers["x-session-affinity"]
    assert harness.session_id(ctx) == session  # session-id
    del ctx.headers["session-id"]
    assert harness.session_id(ctx) == ctx.view.raw["prompt_cache_key"] == session
    del ctx.view.raw["prompt_cache_key"]
    assert harness.session_id(ctx) is None


def test_project_header_wins() -> None:
    ctx = request_context(CAPTURES["opencode-chat#1"])
    ctx.headers["x-lore-project"] = "/work/chosen"
    assert OpenCodeHarness().project(ctx) == "/work/chosen"


def test_other_clients_are_not_opencode() -> None:
    codex = {
        "path": "/v1/responses",
        "headers": [["originator", "codex_exec"], ["user-agent", "codex_exec/0.171.0"], ["session-id", "s"]],
        "body": {"input": []},
    }
    claude = {
        "path": "/v1/messages",
        "headers": [["User-Agent", "claude-cli/2.1.197"], ["X-Claude-Code-Session-Id", "s"]],
        "body": {"messages": []},
    }
    for request in (codex, claude):
        assert OpenCodeHarness().recognise(request_context(request)) == 0


# -- through a real gateway ----------------------------------------------------------------


@pytest.mark.parametrize("tag", MAIN_REQUESTS)
def test_gateway_identifies_opencode_among_installed_harnesses(
    tag: str, start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    recorder = ExchangeRecorder()
    server = start_gateway(extra_plugins=(recorder,))
    request = CAPTURES[tag]
    headers = replay_headers(request)
    response = httpx.post(
        server.url + request["path"],
        headers=headers,
        content=json.dumps(request["body"]).encode(),
        timeout=30,
    )
    assert response.status_code == 200
    (exchange,) = recorder.wait(1)
    assert exchange.response.text == "pong"
    assert exchange.harness == "opencode"
    assert exchange.session_id == captured_header(request, "x-session-id")
    assert exchange.project == CAPTURED_CWD
    assert fake_upstream.api_requests()[-1].path == request["path"]


# -- launching -----------------------------------------------------------------------------


def test_launch_plan_configures_the_providers_and_switches_compaction_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    plan = OpenCodeHarness().launch("http://127.0.0.1:8377", ["run", "say pong"])
    assert plan.argv == ["opencode", "run", "say pong"]
    assert plan.files == {}
    assert plan.env["OPENCODE_DISABLE_AUTOCOMPACT"] == "1"
    assert plan.env["OPENCODE_DISABLE_PRUNE"] == "1"
    assert set(plan.env) == {CONFIG_ENV, *LAUNCH_ENV}
    config = json.loads(plan.env[CONFIG_ENV])
    assert config["provider"] == {
        "anthropic": {"options": {"baseURL": "http://127.0.0.1:8377/v1"}},
        "openai": {"options": {"baseURL": "http://127.0.0.1:8377/v1"}},
    }


def test_the_users_inline_configuration_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = {
        "model": "anthropic/claude-sonnet-4-5",
        "provider": {"anthropic": {"options": {"apiKey": "sk-ant-mine", "baseURL": "https://elsewhere/v1"}}},
    }
    monkeypatch.setenv(CONFIG_ENV, json.dumps(mine))
    config = json.loads(OpenCodeHarness().launch("http://127.0.0.1:9", []).env[CONFIG_ENV])
    assert config["model"] == "anthropic/claude-sonnet-4-5"
    assert config["provider"]["anthropic"]["options"] == {
        "apiKey": "sk-ant-mine",
        "baseURL": "http://127.0.0.1:9/v1",
    }
    assert config["provider"]["openai"]["options"] == {"baseURL": "http://127.0.0.1:9/v1"}
    # Something OpenCode could not read either is replaced rather than merged.
    assert json.loads(gateway_config("http://h:1", "{not json"))["provider"]["openai"]["options"] == {
        "baseURL": "http://h:1/v1"
    }


@pytest.mark.parametrize(
    ("provider", "suffix", "body"),
    [
        (
            "anthropic",
            "/messages",
            {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
        ),
        ("openai", "/responses", {"model": "gpt-5", "input": "x"}),
        ("openai", "/chat/completions", {"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}),
    ],
)
def test_the_base_urls_in_the_plan_reach_the_upstream_through_the_gateway(
    provider: str,
    suffix: str,
    body: dict[str, Any],
    gateway: ThreadedServer,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    config = json.loads(OpenCodeHarness().launch(gateway.url, []).env[CONFIG_ENV])
    # The AI SDK providers OpenCode uses append the API path to baseURL.
    base = config["provider"][provider]["options"]["baseURL"]
    response = httpx.post(base + suffix, json=body, headers={"authorization": "Bearer k"}, timeout=30)
    assert response.status_code == 200
    assert "pong" in response.text
    (seen,) = fake_upstream.api_requests()
    assert seen.path == "/v1" + suffix
