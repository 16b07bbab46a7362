"""``lore setup <agent>`` with the real clients: after it, each client started on its own (no
``lore run``, no base URL in its environment) goes through the gateway; after ``lore setup
undo`` its configuration file is as it was."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from lore_e2e_support import CODEX_EXEC, client_env, find_client, run_client

from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.server import ThreadedServer

pytestmark = pytest.mark.e2e


def lore_setup(home: Path, port: int, *args: str) -> str:
    env = client_env(home, {"LORE_PORT": str(port), "CODEX_HOME": str(home / ".codex")})
    result = run_client([sys.executable, "-m", "lore_core.cli", "setup", *args], env, cwd=home)
    assert result.returncode == 0, result.describe()
    return result.stdout


# agent, its executable, the command line of one turn, its key variable, its config file (in
# the home), what the file held before setup.
CLIENTS = {
    "claude": (
        ["-p", "say pong"],
        {"ANTHROPIC_API_KEY": "sk-ant-test-key"},
        ".claude/settings.json",
        '{\n  "model": "claude-sonnet-4-5",\n  "env": {"MY_OWN": "1"}\n}\n',
    ),
    "codex": (
        [*CODEX_EXEC, "say pong"],
        {"CODEX_API_KEY": "sk-test"},
        ".codex/config.toml",
        '# my settings\nmodel = "gpt-5-codex"\n\n[profiles.fast]\nmodel = "gpt-5-mini"\n',
    ),
    "opencode": (
        ["run", "say pong"],
        {"ANTHROPIC_API_KEY": "sk-ant-test-key", "OPENCODE_DISABLE_MODELS_FETCH": "1"},
        ".config/opencode/opencode.json",
        '{"theme": "system"}',
    ),
}


@pytest.mark.parametrize("agent", sorted(CLIENTS))
def test_setup_wires_the_client_however_it_starts_and_undo_restores_its_file(
    agent: str,
    tmp_path: Path,
    gateway: ThreadedServer,
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENCODE_CONFIG_CONTENT", raising=False)
    executable = find_client(agent)
    argv, keys, config_file, before = CLIENTS[agent]
    home = tmp_path / "home"
    config = home / config_file
    config.parent.mkdir(parents=True)
    config.write_text(before)

    said = lore_setup(home, gateway.port, agent, "--no-start")
    assert f"http://127.0.0.1:{gateway.port}" in said

    # Started on its own: nothing in its environment names the gateway.
    env = client_env(home, {**keys, "CODEX_HOME": str(home / ".codex")})
    result = run_client([executable, *argv], env, cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    assert "pong" in result.stdout
    assert fake_upstream.api_requests(), "the client did not go through the gateway"

    lore_setup(home, gateway.port, "undo", agent)
    if agent == "codex":
        assert config.read_text() == before  # comments and tables as they were
    else:
        after = json.loads(config.read_text())
        after.pop("$schema", None)  # OpenCode adds its schema's URL to the file by itself
        assert after == json.loads(before)
