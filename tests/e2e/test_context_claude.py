"""Real Claude Code through the gateway in a session that outgrows a small configured window.

The model's window is made small in ``.lore.json`` (``models``) with a layer-0 cap
(``budget.maxLayer0Tokens``); every turn runs a tool with a long output. Claude Code's own
auto-compaction is left ON, its threshold brought down to 48K tokens: the fake upstream reports
realistic usage (about a token per 4 bytes of the request), which passes that threshold on the
third turn. With the usage the client sees scaled (``budget.clientUsageShare``), Claude Code
never compacts and the requests past the window go upstream at layers above 0, well-formed;
with the real usage reported (share 1) it does compact - the control case, answered from
Lore's memory without an upstream call. Either way every turn completes.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from lore_e2e_support import client_env, find_client, run_client
from lore_harness_claude.plugin import ClaudeCodeHarness

from lore_core.testing.fake_upstream import FakeUpstream, RecordedRequest, Reply, ToolCall
from lore_core.testing.server import ThreadedServer

pytestmark = pytest.mark.e2e

MODEL = "claude-sonnet-4-6"
# Claude Code's system prompt and tool definitions alone are about 20K tokens.
WINDOW = 100_000
CONFIG = {
    "models": {MODEL: {"maxInputTokens": WINDOW, "contextWindow": WINDOW}},
    "budget": {"maxLayer0Tokens": 60_000},
    # Observation logs without an LLM: the fake upstream answers only the client's calls.
    "distill": {"observer": "extractive", "segmentMaxTokens": 2_000, "firstSegmentMinMessages": 2},
}
TURNS = 10
# Claude Code's auto-compaction threshold (2.1.197): its window (at least 100K, whatever
# CLAUDE_CODE_AUTO_COMPACT_WINDOW asks for) less 20K kept for the answer, times
# CLAUDE_AUTOCOMPACT_PCT_OVERRIDE: 80K x 60% = 48K. It checks before every request: the
# usage last reported plus its estimate of what came since (here a ~7-9K tool output). The
# real prompts of this session pass 48K on the second or third turn, still at layer 0 (below
# the 60K cap); with the usage scaled to 20% of WINDOW the client is told at most 20K.
CLIENT_COMPACT_ENV = {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": "100000", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "60"}
SCALED_SHARE = 0.2


def reply_for(request: RecordedRequest) -> Reply:
    """A new user turn runs a tool with a long output; its result gets a short answer."""
    body = request.json
    usage = max(len(request.body) // 4, 1)
    last = body["messages"][-1]
    content = (
        last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
    )
    if any(block.get("type") == "tool_result" for block in content):
        return Reply(text="The listing is long; noted the module layout.", input_tokens=usage)
    command = "seq 1 1000 | sed 's/^/src\\/lore\\/module_line_/'"
    return Reply(
        text="",
        tool_calls=[ToolCall("Bash", {"command": command, "description": "list"})],
        input_tokens=usage,
    )


def compaction_requests(fake: FakeUpstream) -> list[Any]:
    return [
        r for r in fake.api_requests() if "summary of the conversation" in r.body.decode(errors="replace")
    ]


def assert_well_formed(body: dict[str, Any]) -> None:
    messages = body["messages"]
    roles = [m["role"] for m in messages]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles)), roles
    for i, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        uses = sorted(b["id"] for b in content if b.get("type") == "tool_use")
        if uses:
            following = messages[i + 1]["content"]
            assert uses == sorted(b["tool_use_id"] for b in following if b.get("type") == "tool_result")
    marks = sum(
        1
        for part in [
            *(body.get("system") or []),
            *(b for m in messages if isinstance(m["content"], list) for b in m["content"]),
        ]
        if isinstance(part, dict) and part.get("cache_control")
    )
    assert marks <= 4, marks


@pytest.mark.parametrize("usage_share", [SCALED_SHARE, 1.0], ids=["usage-scaled", "real-usage-control"])
def test_claude_code_session_past_a_small_window(
    usage_share: float, tmp_path: Path, start_gateway: Any, fake_upstream: FakeUpstream
) -> None:
    claude = find_client("claude")
    config = {**CONFIG, "budget": {**CONFIG["budget"], "clientUsageShare": usage_share}}
    server: ThreadedServer = start_gateway(config)
    fake_upstream.responder = reply_for
    plan = ClaudeCodeHarness().launch(server.url, [])
    env = client_env(
        tmp_path / "home",
        {
            **plan.env,
            "ANTHROPIC_API_KEY": "sk-ant-test-key",
            **CLIENT_COMPACT_ENV,
        },
    )
    # Claude Code's own auto-compaction stays on: the gateway must keep it from firing.
    env.pop("DISABLE_AUTO_COMPACT", None)

    for turn in range(TURNS):
        argv = [claude, "-p", "--allowedTools", "Bash", "--model", MODEL]
        if turn:
            argv.append("--continue")
        argv.append(f"step {turn}: list the module lines again and remember them")
        result = run_client(argv, env, cwd=tmp_path)
        assert result.returncode == 0, result.describe()
        assert "noted the module layout" in result.stdout, result.describe()

    requests = fake_upstream.api_requests()
    # A compaction request never reaches the upstream: the gateway answers it from memory.
    assert compaction_requests(fake_upstream) == []
    for request in requests:
        assert_well_formed(request.json)
    if usage_share == 1:
        # The control: told the real usage, Claude Code compacts (and then never grows past
        # the layer-0 cap again), which is what the scaled usage prevents.
        assert server.gateway.stats["compactions_answered"] > 0
        return
    assert server.gateway.stats["compactions_answered"] == 0
    by_layer = server.gateway.health()["context"]["by_layer"]
    compressed = sum(count for layer, count in by_layer.items() if int(layer) > 0)
    assert compressed > 0, by_layer
    # Past the window what went upstream is smaller than what the client holds.
    assert max(len(r.json["messages"]) for r in requests) > len(requests[-1].json["messages"])
    assert max(len(r.body) for r in requests) // 4 <= WINDOW
