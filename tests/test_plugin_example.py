"""The harness-plugin example from the docs installs into a fresh environment and works."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Seconds per test (see the slow marker in lore_core.testing.fixtures).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "lore-harness-aider"


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        if os.environ.get("CI"):
            pytest.fail("uv is required in CI to build the example plugin's environment")
        pytest.skip("uv not installed")
    return uv


def test_example_harness_plugin_installs_and_is_used(tmp_path):
    uv = _uv()
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(python), str(ROOT), str(EXAMPLE)],
        check=True,
        timeout=600,
    )
    listed = subprocess.run([venv / "bin" / "lore", "plugins"], capture_output=True, text=True, check=True)
    assert "harness-aider" in listed.stdout and "lore-harness-aider 0.1.0" in listed.stdout

    script = textwrap.dedent(
        """
        import json, sys
        from lore_core.gateway import Gateway
        from lore_core.interfaces import RequestContext
        from lore_core.pipeline.parse import identify
        from lore_core.wire.openai_chat.codec import OpenAIChatCodec
        body = {"model": "gpt-5", "messages": [
            {"role": "system", "content": "Current working directory: /home/dev/shop"},
            {"role": "user", "content": "fix the cart"}]}
        view = OpenAIChatCodec().parse(body, json.dumps(body).encode())
        gw = Gateway.load()
        ctx = RequestContext("/v1/chat/completions", {"user-agent": "aider/0.86"}, view)
        harness, session, project = identify(gw, ctx)
        plan = gw.registry.harnesses["aider"].launch("http://127.0.0.1:9", ["--yes"])
        print(json.dumps([harness.name, session.startswith("fp-"), project, plan.env]))
        """
    )
    env = {**os.environ, "LORE_CONFIG": str(tmp_path / "lore.json")}
    (tmp_path / "lore.json").write_text("{}")
    out = subprocess.run([python, "-c", script], capture_output=True, text=True, check=True, env=env)
    name, fingerprinted, project, launch_env = json.loads(out.stdout)
    assert name == "aider" and fingerprinted and project == "/home/dev/shop"
    assert launch_env == {"OPENAI_API_BASE": "http://127.0.0.1:9/v1"}
