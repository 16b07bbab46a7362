"""Real clients launch ``lore mcp`` from the MCP configuration docs/mcp.md shows and call its
tools: the fake upstream (the "model") asks for ``knowledge_search``, the client runs it
through the stdio server against a real gateway, and the tool result it sends back upstream
holds the entry the gateway stored.

* Claude Code: ``--mcp-config`` (the ``mcpServers`` JSON ``claude mcp add`` writes) and
  ``--strict-mcp-config``, so nothing else of the machine's configuration is read;
* Codex: ``[mcp_servers.lore]`` in ``$CODEX_HOME/config.toml``;
* OpenCode: ``mcp.lore`` (a ``local`` server) in the project's ``opencode.json``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from lore_e2e_support import CODEX_EXEC, client_env, codex_provider_env, find_client, run_client
from lore_harness_claude.plugin import ClaudeCodeHarness
from lore_harness_opencode.plugin import OpenCodeHarness

from lore_core.testing.fake_upstream import FakeUpstream, RecordedRequest, Reply, ToolCall
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer

pytestmark = pytest.mark.e2e
pytest.importorskip("lore_mcp")

QUERY = "zebrafish toolchain"
CONTENT = "The build uses the zebrafish toolchain, pinned in tools/versions.txt."
FINAL = "The toolchain is zebrafish."


def seeded_gateway(tmp_path: Path, start_gateway) -> tuple[ThreadedServer, Path, str]:
    """A gateway without its own recall tool (the client must call lore mcp's), a project
    directory, and one knowledge entry of that project: its id."""
    gateway = start_gateway({"recall": {"tool": False}})
    project = tmp_path / "proj"
    project.mkdir()
    return gateway, project, seed(gateway, project)


def seed(gateway: ThreadedServer, project: Path) -> str:
    answer = httpx.post(
        f"{gateway.url}/lore/api/knowledge",
        json={
            "project": str(project),
            "category": "decision",
            "title": "Build toolchain",
            "content": CONTENT,
        },
        headers=api_headers(),
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["entry"]["id"])


def server_env(gateway: ThreadedServer, lore_env: dict[str, str]) -> dict[str, str]:
    """What the MCP server's configuration passes to ``lore mcp``: where the gateway and its
    token are (the test's isolated ones; a real setup needs none of it)."""
    keys = ("LORE_CONFIG", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "HOME")
    return {"LORE_PORT": str(gateway.port), **{k: lore_env[k] for k in keys}}


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]


def anthropic_search_responder(
    pick: Callable[[list[str]], str | None], results: list[str]
) -> Callable[[RecordedRequest], Reply]:
    """The model on the Messages wire: asks for the search tool ``pick`` finds among the
    request's tools, then answers FINAL once the tool result is back (kept in ``results``).
    Requests without the tool (titles, quota checks) get a plain answer."""

    def responder(req: RecordedRequest) -> Reply:
        body = req.json or {}
        search = pick(tool_names(body))
        if search is None:
            return Reply(text="pong")
        last = (body.get("messages") or [{}])[-1]
        outputs = [
            b for b in last.get("content") or [] if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        if outputs:
            results.append(json.dumps(outputs))
            return Reply(text=FINAL)
        return Reply(text="", tool_calls=[ToolCall(search, {"query": QUERY})])

    return responder


def test_claude_code_calls_knowledge_search_through_lore_mcp(
    tmp_path: Path, start_gateway, fake_upstream: FakeUpstream, lore_env: dict[str, str]
) -> None:
    claude = find_client("claude")
    gateway, project, entry_id = seeded_gateway(tmp_path, start_gateway)
    results: list[str] = []
    search = "mcp__lore__knowledge_search"
    fake_upstream.responder = anthropic_search_responder(
        lambda names: search if search in names else None, results
    )
    # The configuration docs/mcp.md shows, with the test's environment for the server.
    config = {
        "mcpServers": {
            "lore": {
                "type": "stdio",
                "command": sys.executable,
                "args": ["-m", "lore_core.cli", "mcp", "--no-start"],
                "env": server_env(gateway, lore_env),
            }
        }
    }
    (tmp_path / "mcp.json").write_text(json.dumps(config))
    plan = ClaudeCodeHarness().launch(gateway.url, [])
    # In -p mode Claude Code connects MCP servers in the background and may send its first
    # request before ``lore mcp`` is up (seen on a loaded CI machine: status "pending", no
    # tools); MCP_CONNECTION_NONBLOCKING=0 makes it wait for them, as a scripted run needs.
    env = client_env(
        tmp_path / "home",
        {**plan.env, "ANTHROPIC_API_KEY": "sk-ant-test-key", "MCP_CONNECTION_NONBLOCKING": "0"},
    )
    argv = [
        claude,
        "-p",
        "--mcp-config",
        str(tmp_path / "mcp.json"),
        "--strict-mcp-config",
        "--allowedTools",
        "mcp__lore__knowledge_search",
        "--output-format",
        "stream-json",
        "--verbose",
        "which toolchain do we use?",
    ]
    result = run_client(argv, env, cwd=project)
    assert result.returncode == 0, result.describe()
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    init = next(e for e in events if e.get("type") == "system" and e.get("subtype") == "init")
    assert {"name": "lore", "status": "connected"} in init.get("mcp_servers", []), result.describe()
    assert events[-1]["type"] == "result" and FINAL in events[-1]["result"], result.describe()
    assert len(results) == 1, result.describe()
    assert entry_id in results[0] and "zebrafish toolchain, pinned" in results[0]


def test_codex_calls_knowledge_search_through_lore_mcp(
    tmp_path: Path, start_gateway, fake_upstream: FakeUpstream, lore_env: dict[str, str]
) -> None:
    codex = find_client("codex")
    gateway, project, entry_id = seeded_gateway(tmp_path, start_gateway)
    results: list[str] = []

    def responder(req: RecordedRequest) -> Reply | None:
        body = req.json or {}
        names = json.dumps(body.get("tools") or [])
        if "knowledge_search" not in names:
            return Reply(text="pong")
        items = body.get("input") or []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if outputs:
            results.append(json.dumps(outputs))
            return Reply(text=FINAL)
        # Codex sends each MCP server's tools as one namespace (``mcp__lore``) and maps a
        # call back by its namespace and bare name.
        namespace = next(
            t["name"]
            for t in body.get("tools") or []
            if t.get("type") == "namespace" and "knowledge_search" in json.dumps(t.get("tools"))
        )
        assert namespace == "mcp__lore", namespace
        call = ToolCall("knowledge_search", {"query": QUERY}, namespace=namespace)
        return Reply(text="", tool_calls=[call])

    fake_upstream.responder = responder
    env = codex_provider_env(tmp_path, f"{gateway.url}/v1")
    config = Path(env["CODEX_HOME"]) / "config.toml"
    server = server_env(gateway, lore_env)
    config.write_text(
        config.read_text()
        + "\n[mcp_servers.lore]\n"
        + f"command = {json.dumps(sys.executable)}\n"
        + 'args = ["-m", "lore_core.cli", "mcp", "--no-start"]\n'
        # Codex starts its MCP servers beside the first turn; a required one is waited for.
        + "required = true\n"
        + "env = { "
        + ", ".join(f"{k} = {json.dumps(v)}" for k, v in server.items())
        + " }\n"
    )
    argv = [codex, *CODEX_EXEC, "--dangerously-bypass-approvals-and-sandbox", "which toolchain do we use?"]
    result = run_client(argv, env, cwd=project)
    assert result.returncode == 0, result.describe()
    assert FINAL in result.stdout, result.describe()
    assert len(results) == 1, result.describe()
    assert entry_id in results[0] and "zebrafish toolchain, pinned" in results[0]


def test_opencode_calls_knowledge_search_through_lore_mcp(
    tmp_path: Path,
    start_gateway,
    fake_upstream: FakeUpstream,
    lore_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opencode = find_client("opencode")
    monkeypatch.delenv("OPENCODE_CONFIG_CONTENT", raising=False)  # the launch plan's own
    gateway, project, entry_id = seeded_gateway(tmp_path, start_gateway)
    results: list[str] = []
    # OpenCode names an MCP server's tools <server>_<tool>.
    fake_upstream.responder = anthropic_search_responder(
        lambda names: "lore_knowledge_search" if "lore_knowledge_search" in names else None, results
    )
    # The configuration docs/mcp.md shows (a project's opencode.json), with the test's
    # environment for the server.
    command = [sys.executable, "-m", "lore_core.cli", "mcp", "--no-start"]
    mcp = {
        "lore": {
            "type": "local",
            "command": command,
            "enabled": True,
            "environment": server_env(gateway, lore_env),
        }
    }
    (project / "opencode.json").write_text(json.dumps({"mcp": mcp}))
    plan = OpenCodeHarness().launch(gateway.url, [])
    env = client_env(
        tmp_path / "home",
        {**plan.env, "OPENCODE_DISABLE_MODELS_FETCH": "1", "ANTHROPIC_API_KEY": "sk-ant-test-key"},
    )
    result = run_client([opencode, "run", "which toolchain do we use?"], env, cwd=project)
    assert result.returncode == 0, result.describe()
    assert FINAL in result.stdout, result.describe()
    assert len(results) == 1, result.describe()
    assert entry_id in results[0] and "zebrafish toolchain, pinned" in results[0]
