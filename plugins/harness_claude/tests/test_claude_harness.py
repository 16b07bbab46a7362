"""The Claude Code harness against requests derived from real Claude Code 2.1.197 traffic.

``fixtures/claude_code_requests.json`` holds captured requests with their headers as sent and
their bodies cut down to what a harness reads (the system prompt's environment section, the
metadata, the first messages).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from lore_harness_claude.plugin import LAUNCH_ENV, ClaudeCodeHarness, session_from_user_id

from lore_core.testing.captured import (
    Captures,
    ExchangeRecorder,
    captured_header,
    replay_headers,
    request_context,
)
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.server import ThreadedServer

CAPTURES = Captures(Path(__file__).parent / "fixtures" / "claude_code_requests.json")
CAPTURED_CWD = "/home/dev/clients/proj"


# -- recognition, session, project ---------------------------------------------------------


@pytest.mark.parametrize("tag", CAPTURES.tags)
def test_captured_requests_are_recognised_with_their_session_and_project(tag: str) -> None:
    request = CAPTURES[tag]
    ctx = request_context(request)
    harness = ClaudeCodeHarness()
    assert harness.recognise(ctx) == 100
    session = captured_header(request, "x-claude-code-session-id")
    assert harness.session_id(ctx) == session
    # The header and metadata.user_id agree in every capture.
    assert session_from_user_id(request["body"]["metadata"]["user_id"]) == session
    assert harness.project(ctx) == CAPTURED_CWD


def test_session_falls_back_to_metadata_user_id_without_the_header() -> None:
    request = CAPTURES["claude-code-print"]
    ctx = request_context(request)
    del ctx.headers["x-claude-code-session-id"]
    harness = ClaudeCodeHarness()
    assert harness.recognise(ctx) == 90  # still the claude-cli user agent
    assert harness.session_id(ctx) == "072458e5-3672-4ac4-90c3-2fa3e800a54f"


def test_legacy_user_id_format_and_junk() -> None:
    legacy = (
        "user_5f1e_account_9a8b7c6d-0000-4000-8000-000000000000_session_0e4c2a7a-1b2c-4d5e-8f90-123456789abc"
    )
    assert session_from_user_id(legacy) == "0e4c2a7a-1b2c-4d5e-8f90-123456789abc"
    for junk in (None, "", 42, "not json", '{"session_id": 7}', "[1, 2]"):
        assert session_from_user_id(junk) is None


def test_project_header_wins_and_gateway_cwd_is_the_last_resort() -> None:
    request = CAPTURES["claude-code-print"]
    ctx = request_context(request)
    ctx.headers["x-lore-project"] = "/work/elsewhere"
    assert ClaudeCodeHarness().project(ctx) == "/work/elsewhere"

    bare = {
        "path": "/v1/messages",
        "headers": [["User-Agent", "claude-cli/2.1.197"]],
        "body": {"messages": []},
    }
    assert ClaudeCodeHarness().project(request_context(bare, gateway_cwd="/srv/gw")) == "/srv/gw"


def test_other_clients_are_not_claude_code() -> None:
    sdk = {
        "path": "/v1/messages",
        "headers": [["User-Agent", "Anthropic/Python 0.40.0"], ["x-api-key", "k"]],
        "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    }
    opencode = {
        "path": "/v1/messages",
        "headers": [
            ["User-Agent", "opencode/1.18.33 ai-sdk/provider-utils/4.0.46"],
            ["x-session-id", "ses_1"],
        ],
        "body": {"model": "m", "messages": []},
    }
    for request in (sdk, opencode):
        assert ClaudeCodeHarness().recognise(request_context(request)) == 0


# -- through a real gateway ----------------------------------------------------------------


@pytest.mark.parametrize("tag", ["claude-code-print", "claude-code-prefix"])
def test_gateway_identifies_claude_code_among_installed_harnesses(
    tag: str, start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    recorder = ExchangeRecorder()
    server = start_gateway(extra_plugins=(recorder,))
    request = CAPTURES[tag]
    headers = replay_headers(request)
    prefix = "/anthropic" if tag.endswith("prefix") else ""
    response = httpx.post(
        f"{server.url}{prefix}/v1/messages?beta=true",
        headers=headers,
        content=json.dumps(request["body"]).encode(),
        timeout=30,
    )
    assert response.status_code == 200
    assert "event: message_stop" in response.text
    (exchange,) = recorder.wait(1)
    assert exchange.response.text == "pong"
    assert exchange.harness == "claude"
    assert exchange.session_id == captured_header(request, "x-claude-code-session-id")
    assert exchange.project == CAPTURED_CWD
    assert fake_upstream.api_requests()[-1].path == "/v1/messages"


# -- launching -----------------------------------------------------------------------------


def test_launch_plan_wires_claude_code_to_the_gateway_and_switches_compaction_off() -> None:
    plan = ClaudeCodeHarness().launch("http://127.0.0.1:8377", ["-p", "say pong"])
    assert plan.argv == ["claude", "-p", "say pong"]
    assert plan.env == {
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:8377",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_AUTO_COMPACT": "1",
    }
    assert plan.env.items() >= LAUNCH_ENV.items()
    assert plan.files == {}


def test_the_base_url_in_the_plan_reaches_the_upstream_through_the_gateway(
    gateway: ThreadedServer, fake_upstream: FakeUpstream
) -> None:
    plan = ClaudeCodeHarness().launch(gateway.url, [])
    # Claude Code appends the API path to ANTHROPIC_BASE_URL, as the Anthropic SDKs do.
    base = plan.env["ANTHROPIC_BASE_URL"]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "ping"}]}
    response = httpx.post(
        f"{base}/v1/messages?beta=true",
        json=body,
        headers={"x-api-key": "sk-ant-test-key", "anthropic-version": "2023-06-01"},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.json()["content"][0]["text"] == "pong"
    (seen,) = fake_upstream.api_requests()
    assert (seen.path, seen.query) == ("/v1/messages", "beta=true")
    assert seen.header("x-api-key") == "sk-ant-test-key"
