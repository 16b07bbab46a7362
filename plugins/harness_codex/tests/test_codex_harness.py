"""The Codex harness against requests derived from real Codex CLI 0.171.0 traffic.

``fixtures/codex_requests.json`` holds one request of the built-in provider (four developer
items before the ``<environment_context>`` item) and one of a custom provider, with their
headers as sent and long texts cut down.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from lore_harness_codex.plugin import CodexHarness, find_cwd, turn_metadata

from lore_core.testing.captured import (
    Captures,
    ExchangeRecorder,
    captured_header,
    replay_headers,
    request_context,
)
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.server import ThreadedServer

CAPTURES = Captures(Path(__file__).parent / "fixtures" / "codex_requests.json")
CAPTURED_CWD = "/home/dev/clients/proj"


# -- recognition, session, project ---------------------------------------------------------


@pytest.mark.parametrize("tag", ["codex-builtin", "codex-provider"])
def test_captured_requests_are_recognised_with_their_session_and_project(tag: str) -> None:
    request = CAPTURES[tag]
    ctx = request_context(request)
    harness = CodexHarness()
    assert harness.recognise(ctx) == 100
    session = captured_header(request, "session-id")
    assert harness.session_id(ctx) == session
    # Every other place Codex writes the session agrees with the header.
    assert captured_header(request, "thread-id") == session
    assert request["body"]["prompt_cache_key"] == session
    assert turn_metadata(ctx)["session_id"] == session
    assert harness.project(ctx) == CAPTURED_CWD


def test_the_built_in_provider_puts_the_cwd_after_four_developer_items() -> None:
    # Why the harness looks past the first three messages that generic helpers read.
    view = request_context(CAPTURES["codex-builtin"]).view
    assert view is not None
    index = next(i for i, m in enumerate(view.messages) if "<cwd>" in m.text)
    assert index >= 4
    assert find_cwd(view) == CAPTURED_CWD


def test_session_fallbacks_in_order() -> None:
    ctx = request_context(CAPTURES["codex-provider"])
    harness = CodexHarness()
    ctx.headers["session-id"] = ""
    ctx.headers["thread-id"] = "thread-from-header"
    assert harness.session_id(ctx) == "thread-from-header"
    del ctx.headers["thread-id"]
    assert harness.session_id(ctx) == ctx.view.raw["prompt_cache_key"]
    del ctx.view.raw["prompt_cache_key"]
    assert harness.session_id(ctx) == ctx.view.raw["client_metadata"]["session_id"]
    del ctx.view.raw["client_metadata"]["session_id"]
    # Last: the session inside the turn metadata (header or body).
    assert harness.session_id(ctx) == json.loads(ctx.headers["x-codex-turn-metadata"])["session_id"]
    del ctx.headers["x-codex-turn-metadata"]
    del ctx.view.raw["client_metadata"]["x-codex-turn-metadata"]
    assert harness.session_id(ctx) is None


def test_project_fallbacks_in_order() -> None:
    harness = CodexHarness()
    ctx = request_context(CAPTURES["codex-provider"], gateway_cwd="/srv/gw")
    ctx.headers["x-lore-project"] = "/work/chosen"
    assert harness.project(ctx) == "/work/chosen"
    del ctx.headers["x-lore-project"]
    # Without an <environment_context> item, the workspace from the turn metadata.
    ctx.view.messages = [m for m in ctx.view.messages if "<cwd>" not in m.text]
    metadata = json.loads(ctx.headers["x-codex-turn-metadata"])
    metadata["workspaces"] = {"/work/from-metadata": {"has_changes": False}}
    ctx.headers["x-codex-turn-metadata"] = json.dumps(metadata)
    assert harness.project(ctx) == "/work/from-metadata"
    del ctx.headers["x-codex-turn-metadata"]
    del ctx.view.raw["client_metadata"]["x-codex-turn-metadata"]
    assert harness.project(ctx) == "/srv/gw"


def test_other_clients_are_not_codex() -> None:
    opencode = {
        "path": "/v1/responses",
        "headers": [
            ["User-Agent", "opencode/1.18.33 (linux; x64) ai-sdk/provider-utils/4.0.40"],
            ["originator", "opencode"],
            ["session-id", "ses_1"],
        ],
        "body": {"model": "gpt-5", "input": []},
    }
    sdk = {
        "path": "/v1/responses",
        "headers": [["User-Agent", "OpenAI/Python 1.50.0"]],
        "body": {"input": "hi"},
    }
    for request in (opencode, sdk):
        assert CodexHarness().recognise(request_context(request)) == 0


# -- through a real gateway ----------------------------------------------------------------


@pytest.mark.parametrize("tag", ["codex-builtin", "codex-provider"])
def test_gateway_identifies_codex_among_installed_harnesses(
    tag: str, start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    recorder = ExchangeRecorder()
    server = start_gateway(extra_plugins=(recorder,))
    request = CAPTURES[tag]
    headers = replay_headers(request)
    response = httpx.post(
        f"{server.url}/v1/responses",
        headers=headers,
        content=json.dumps(request["body"]).encode(),
        timeout=30,
    )
    assert response.status_code == 200
    assert "response.completed" in response.text
    (exchange,) = recorder.wait(1)
    assert exchange.response.text == "pong"
    assert exchange.harness == "codex"
    assert exchange.session_id == captured_header(request, "session-id")
    assert exchange.project == CAPTURED_CWD
    assert fake_upstream.api_requests()[-1].path == "/v1/responses"


# -- launching -----------------------------------------------------------------------------


def test_launch_plan_points_the_built_in_provider_at_the_gateway() -> None:
    plan = CodexHarness().launch("http://127.0.0.1:8377", ["exec", "say pong"])
    # Root-level -c overrides apply to every subcommand, so they go before the user's args.
    assert plan.argv == ["codex", "-c", "openai_base_url=http://127.0.0.1:8377/v1", "exec", "say pong"]
    assert plan.env == {}
    assert plan.files == {}


def test_the_base_url_in_the_plan_reaches_the_upstream_through_the_gateway(
    gateway: ThreadedServer, fake_upstream: FakeUpstream
) -> None:
    plan = CodexHarness().launch(gateway.url, [])
    base = plan.argv[plan.argv.index("-c") + 1].removeprefix("openai_base_url=")
    # Codex appends "/responses" to the provider's base URL.
    body = {"model": "gpt-5-codex", "input": "ping", "stream": False}
    response = httpx.post(
        f"{base}/responses", json=body, headers={"authorization": "Bearer sk-test"}, timeout=30
    )
    assert response.status_code == 200
    assert response.json()["output"][0]["content"][0]["text"] == "pong"
    (seen,) = fake_upstream.api_requests()
    assert seen.path == "/v1/responses"
    assert seen.header("authorization") == "Bearer sk-test"
