"""Real Claude Code (and Codex, OpenCode) through a real gateway: the upstream calls recall,
the gateway searches and continues upstream, Claude Code completes the turn with the marker
and the final answer; on the next turn (``--continue``) the upstream sees the real recall call
and result again, byte for byte as in the follow-up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lore_e2e_support import CODEX_EXEC, client_env, codex_provider_env, find_client, run_client
from lore_harness_claude.plugin import ClaudeCodeHarness

from lore_core.recall.tool import marker_text
from lore_core.testing.fake_upstream import FakeUpstream, RecordedRequest, Reply, ToolCall

pytestmark = pytest.mark.e2e

QUERY = "zebra release script"
FINAL = "The zebra release script is tools/zebra-release.sh."


def _offers_recall(body: dict) -> bool:
    return any(isinstance(t, dict) and t.get("name") == "recall" for t in body.get("tools") or [])


def _answered_recall(body: dict) -> bool:
    last = (body.get("messages") or [{}])[-1]
    content = last.get("content") if isinstance(last, dict) else None
    return isinstance(content, list) and any(
        isinstance(b, dict)
        and b.get("type") == "tool_result"
        and str(b.get("tool_use_id", "")).startswith("call_")
        for b in content
    )


def _without_cache_control(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def test_claude_code_turn_with_recall(tmp_path: Path, start_gateway, fake_upstream: FakeUpstream) -> None:
    claude = find_client("claude")
    gateway = start_gateway()
    follow_ups: list[RecordedRequest] = []

    def responder(req: RecordedRequest) -> Reply | None:
        body = req.json or {}
        if not _offers_recall(body):
            return Reply(text="pong")  # side calls (titles, quota checks) get no recall
        text = json.dumps(body.get("messages"))
        if _answered_recall(body):
            follow_ups.append(req)
            return Reply(text=FINAL)
        if "next question" in text:
            return Reply(text="Second answer.")
        return Reply(text="", tool_calls=[ToolCall("recall", {"query": QUERY})])

    fake_upstream.responder = responder
    plan = ClaudeCodeHarness().launch(gateway.url, [])
    env = client_env(tmp_path / "home", {**plan.env, "ANTHROPIC_API_KEY": "sk-ant-test-key"})
    argv = [claude, "-p", "--output-format", "stream-json", "--verbose", "where is the release script?"]
    result = run_client(argv, env, cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert events[-1]["type"] == "result" and events[-1]["subtype"] == "success", result.describe()
    assert FINAL in events[-1]["result"]
    blocks = [b for e in events if e.get("type") == "assistant" for b in e["message"]["content"]]
    assert marker_text(QUERY) in [b.get("text") for b in blocks]
    assert [b for b in blocks if b.get("type") == "tool_use"] == []  # no dangling recall call
    assert len(follow_ups) == 1
    follow_up = follow_ups[0].json["messages"]
    call = follow_up[-2]["content"][-1]
    assert call["type"] == "tool_use" and call["name"] == "recall" and call["input"] == {"query": QUERY}

    # Next turn: Claude Code sends its history (with the marker); the upstream gets the real
    # call and result back, the follow-up's messages byte for byte.
    before = len(fake_upstream.api_requests())
    argv = [claude, "-p", "--continue", "--output-format", "stream-json", "--verbose", "next question"]
    result = run_client(argv, env, cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    turn = [r for r in fake_upstream.api_requests()[before:] if _offers_recall(r.json or {})][-1]
    sent = turn.json["messages"]
    # Claude Code moves its cache breakpoint to the newest message each turn (its own
    # change); everything else is what the follow-up sent.
    assert _without_cache_control(sent[: len(follow_up)]) == _without_cache_control(follow_up)
    restored = json.dumps(follow_up[-2:], ensure_ascii=False).encode()[1:-1]
    assert restored in turn.body and restored in follow_ups[0].body
    assert marker_text(QUERY) not in json.dumps(sent)


# The same through Codex (Responses API), as its harness would be configured by hand.


def _responses_offers_recall(body: dict) -> bool:
    return any(isinstance(t, dict) and t.get("name") == "recall" for t in body.get("tools") or [])


def test_codex_turn_with_recall(tmp_path: Path, start_gateway, fake_upstream: FakeUpstream) -> None:
    codex = find_client("codex")
    gateway = start_gateway()
    follow_ups: list[RecordedRequest] = []

    def responder(req: RecordedRequest) -> Reply | None:
        body = req.json or {}
        items = body.get("input") or []
        if not _responses_offers_recall(body):
            return Reply(text="pong")
        if any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items):
            follow_ups.append(req)
            return Reply(text=FINAL)
        return Reply(text="", tool_calls=[ToolCall("recall", {"query": QUERY})])

    fake_upstream.responder = responder
    env = codex_provider_env(tmp_path, f"{gateway.url}/v1")
    result = run_client([codex, *CODEX_EXEC, "where is the release script?"], env, cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    assert FINAL in result.stdout, result.describe()
    assert len(follow_ups) == 1
    items = follow_ups[0].json["input"]
    calls = [i for i in items if i.get("type") == "function_call"]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("recall", {"query": QUERY})]

    # Next turn (`codex exec resume --last`): the marker item becomes the real call + output.
    before = len(fake_upstream.api_requests())
    argv = [codex, *CODEX_EXEC, "resume", "--last", "next question"]
    result = run_client(argv, env, cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    turn = [r for r in fake_upstream.api_requests()[before:] if _responses_offers_recall(r.json or {})][-1]
    sent = turn.json["input"]
    assert marker_text(QUERY) not in json.dumps(sent)
    restored = json.dumps(items[-2:], ensure_ascii=False).encode()[1:-1]
    assert restored in turn.body


def test_claude_code_does_not_compact_on_scaled_usage(tmp_path: Path, start_gateway, fake_upstream) -> None:
    """Claude Code's own auto-compaction left on (no launch-plan switch), an auto-compact
    window of 200K and 170K prompt tokens really used: the usage it is shown is scaled to
    half the window, so it never sends its summarisation request."""
    claude = find_client("claude")
    gateway = start_gateway()
    plan = ClaudeCodeHarness().launch(gateway.url, [])
    extra = {"ANTHROPIC_API_KEY": "sk-ant-test-key", "CLAUDE_CODE_AUTO_COMPACT_WINDOW": "200000"}
    env = client_env(tmp_path / "home", {**plan.env, **extra})
    env.pop("DISABLE_AUTO_COMPACT", None)
    base = [claude, "-p", "--model", "claude-opus-4-8"]
    turns = (
        ([*base, "say pong"], Reply(text="pong")),
        (
            [*base, "--continue", "say pong"],
            Reply(text="pong", input_tokens=20_000, cache_read_tokens=150_000),
        ),
        ([*base, "--continue", "say pong again"], Reply(text="pong")),
    )
    for argv, reply in turns:
        fake_upstream.enqueue(reply)
        result = run_client(argv, env, cwd=tmp_path)
        assert result.returncode == 0, result.describe()
    summaries = [r for r in fake_upstream.api_requests() if b"summary of the conversation" in r.body]
    assert summaries == []
    assert gateway.gateway.stats["compactions_answered"] == 0
    assert len(fake_upstream.api_requests()) == 3


def test_opencode_turn_with_recall(
    tmp_path: Path, start_gateway, fake_upstream: FakeUpstream, monkeypatch
) -> None:
    """OpenCode (Anthropic provider) completes a turn in which the upstream calls recall; its
    next turn (``--continue``) carries the restored call and result."""
    from lore_harness_opencode.plugin import OpenCodeHarness

    monkeypatch.delenv("OPENCODE_CONFIG_CONTENT", raising=False)
    opencode = find_client("opencode")
    gateway = start_gateway()
    follow_ups: list[RecordedRequest] = []

    def responder(req: RecordedRequest) -> Reply | None:
        body = req.json or {}
        if not _offers_recall(body):
            return Reply(text="A title")
        if _answered_recall(body):
            follow_ups.append(req)
            return Reply(text=FINAL)
        if "next question" in json.dumps(body.get("messages")):
            return Reply(text="Second answer.")
        return Reply(text="", tool_calls=[ToolCall("recall", {"query": QUERY})])

    fake_upstream.responder = responder
    plan = OpenCodeHarness().launch(gateway.url, [])
    env = client_env(
        tmp_path / "home",
        {**plan.env, "OPENCODE_DISABLE_MODELS_FETCH": "1", "ANTHROPIC_API_KEY": "sk-ant-test-key"},
    )
    result = run_client([find_client("opencode"), "run", "where is the release script?"], env, cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    assert FINAL in result.stdout, result.describe()
    assert len(follow_ups) == 1
    follow_up = follow_ups[0].json["messages"]
    assert follow_up[-2]["content"][-1]["name"] == "recall"

    before = len(fake_upstream.api_requests())
    result = run_client([opencode, "run", "--continue", "next question"], env, cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    turn = [r for r in fake_upstream.api_requests()[before:] if _offers_recall(r.json or {})][-1]
    sent = turn.json["messages"]
    assert marker_text(QUERY) not in json.dumps(sent)
    restored = json.dumps(follow_up[-2:], ensure_ascii=False).encode()[1:-1]
    assert restored in turn.body
