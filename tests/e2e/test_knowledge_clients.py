"""Real Claude Code and Codex through a real gateway that holds knowledge of the project they
run in: their requests reach the provider with the knowledge blocks (Claude Code: a system
block with a 1-hour breakpoint, within Anthropic's four; Codex: in ``instructions``), each
client completes its turn, and the next turn sends the same knowledge bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lore_e2e_support import CODEX_EXEC, client_env, codex_provider_env, find_client, run_client
from lore_harness_claude.plugin import ClaudeCodeHarness

from lore_core.testing.fake_upstream import FakeUpstream, Reply

pytestmark = pytest.mark.e2e

PREFERENCE = "Run the test suite with pytest -q before every commit."


def knowing_gateway(start_gateway, project: Path):
    gateway = start_gateway()
    gateway.call(
        gateway.gateway.knowledge.create(
            project=str(project), category="preference", title="Tests before commits", content=PREFERENCE
        )
    )
    return gateway


def test_claude_code_gets_the_projects_knowledge(
    tmp_path: Path, start_gateway, fake_upstream: FakeUpstream
) -> None:
    claude = find_client("claude")
    project = tmp_path.resolve()
    gateway = knowing_gateway(start_gateway, project)
    fake_upstream.responder = lambda req: Reply(text="pong")
    plan = ClaudeCodeHarness().launch(gateway.url, [])
    env = client_env(tmp_path / "home", {**plan.env, "ANTHROPIC_API_KEY": "sk-ant-test-key"})
    for argv in (
        [claude, "-p", "say pong"],
        [claude, "-p", "--continue", "say pong again"],
    ):
        result = run_client(argv, env, cwd=project)
        assert result.returncode == 0, result.describe()
        assert "pong" in result.stdout
    agent = [r.json for r in fake_upstream.api_requests() if (r.json or {}).get("tools")]
    assert len(agent) >= 2, [r.path for r in fake_upstream.api_requests()]
    systems = []
    for body in agent:
        knowledge = [b for b in body["system"] if b.get("text", "").startswith("<lore-knowledge>")]
        assert len(knowledge) == 1 and PREFERENCE in knowledge[0]["text"]
        assert knowledge[0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
        markers = [
            part["cache_control"].get("ttl", "5m")
            for part in [*body["system"], *body["tools"]]
            + [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]]
            if isinstance(part, dict) and "cache_control" in part
        ]
        assert len(markers) <= 4 and markers == sorted(markers, key=lambda t: t != "1h")
        systems.append(json.dumps(knowledge[0]))
    # Claude Code changes its own system text between runs (the model line); the knowledge
    # block is the same bytes every time.
    assert len(set(systems)) == 1


def test_codex_gets_the_projects_knowledge(
    tmp_path: Path, start_gateway, fake_upstream: FakeUpstream
) -> None:
    codex = find_client("codex")
    project = tmp_path.resolve()
    gateway = knowing_gateway(start_gateway, project)
    fake_upstream.responder = lambda req: Reply(text="pong")
    env = codex_provider_env(tmp_path, f"{gateway.url}/v1")
    result = run_client([codex, *CODEX_EXEC, "say pong"], env, cwd=project)
    assert result.returncode == 0, result.describe()
    bodies = [r.json for r in fake_upstream.api_requests() if (r.json or {}).get("tools")]
    assert bodies and all(PREFERENCE in body["instructions"] for body in bodies)
    assert "pong" in result.stdout
