"""docs/quickstart.md, run as written: every command of its ``bash`` blocks, in order, in a
fresh home directory, with the real Claude Code against the fake upstream.

``lore`` on PATH is this checkout's (the install command itself is run by
tests/test_install.py, from the same page). Adapted, and only this: ``lore run claude`` gets
``-p "say pong"`` (the interactive client would wait for a person), ``<session>`` is the id
of the latest session, and the default port 8377 is a free one (LORE_PORT).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lore_e2e_support import client_env, find_client, stop_background_gateway

from lore_core.cli.launcher import gateway_files
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.net import free_port

pytestmark = pytest.mark.e2e

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"
# Run elsewhere: the install, by tests/test_install.py; uv itself is how the tests run.
RUN_ELSEWHERE = {"pip install uv", "uv tool install --reinstall ./packaging/lore"}
INTERACTIVE = {"lore run claude": 'lore run claude -p "say pong"'}


def quickstart_commands() -> list[str]:
    """The command lines of the page's ``bash`` blocks, without their comments."""
    commands, inside = [], False
    for line in QUICKSTART.read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```bash"
            continue
        if inside and line.strip():
            commands.append(re.split(r"\s+#\s", line, maxsplit=1)[0].strip())
    return commands


def test_the_install_line_is_the_one_the_install_test_runs() -> None:
    sys.path.insert(0, str(QUICKSTART.parents[1] / "tests"))
    from test_install import documented_install_command

    assert " ".join(documented_install_command()) in quickstart_commands()


def test_the_quickstart_runs_as_written(tmp_path: Path, fake_upstream: FakeUpstream) -> None:
    claude = find_client("claude")
    home = tmp_path / "home"
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lore").write_text(f'#!/bin/sh\nexec {sys.executable} -m lore_core.cli "$@"\n')
    (bin_dir / "lore").chmod(0o755)
    port = free_port()
    env = client_env(
        home,
        {
            "PATH": f"{bin_dir}:{Path(claude).parent}:/usr/local/bin:/usr/bin:/bin",
            "LORE_PORT": str(port),
            "LORE_UPSTREAM_ANTHROPIC": fake_upstream.url,
            "LORE_UPSTREAM_OPENAI": fake_upstream.url,
            "ANTHROPIC_API_KEY": "sk-ant-test-key",
        },
    )
    pid_file, _ = gateway_files(port, home / ".local" / "share" / "lore")

    def shell(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", f"set -o pipefail; {command}"],
            cwd=project, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip

    commands = quickstart_commands()
    assert len(commands) >= 20, commands
    ran = []
    try:
        for written in commands:
            if written in RUN_ELSEWHERE:
                continue
            command = INTERACTIVE.get(written, written).replace("127.0.0.1:8377", f"127.0.0.1:{port}")
            if "<session>" in command:
                latest = json.loads(shell("lore sessions --limit 1 --json").stdout)
                command = command.replace("<session>", latest[0]["id"])
            done = shell(command)
            output = done.stdout + done.stderr
            # `curl ... | head` may end curl with SIGPIPE once head has its lines.
            assert done.returncode == 0 or (command.endswith("| head") and done.stdout), (
                f"$ {command}\nexit {done.returncode}\n{output[-3000:]}"
            )
            assert "Traceback" not in output, f"$ {command}\n{output[-3000:]}"
            ran.append((command, done.stdout))
    finally:
        stop_background_gateway(pid_file)

    said = dict(ran)
    assert said["lore --version"].startswith("lore-core ")
    assert "pong" in said['lore run claude -p "say pong"']
    assert fake_upstream.api_requests(), "the agent did not go through the gateway"
    assert "claude: set up" in said["lore setup"]
    assert not (home / ".claude" / "settings.json").exists()  # setup undone: the file it made is gone
    assert str(project) in said["lore sessions"]
    assert "--- [0] user" in said["lore show"] and "say pong" in said["lore show"]
    assert "lore doctor: 0 problems" in said["lore doctor"]
    assert (project / ".lore.md").exists()
    assert "lore_requests_total" in said[next(c for c in said if c.startswith("curl "))]
    assert "forgot session" in said[next(c for c in said if c.startswith("lore forget "))]
    assert "stopped the gateway" in said["lore stop"]
    assert "would stop" not in said["lore uninstall --dry-run"]  # stopped already
    assert (
        "would run" in said["lore uninstall --dry-run"]
        or "remove that environment" in said["lore uninstall --dry-run"]
    )
