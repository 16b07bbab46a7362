"""What a gateway and a command load only when they first need it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lore_core.gateway import Gateway
from lore_core.testing.net import get_json
from lore_core.testing.server import ThreadedServer


def _configure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, port: int = 0) -> Path:
    config = tmp_path / ".lore.json"
    body: dict = {"store": {"path": str(tmp_path / "store")}}
    if port:
        body["server"] = {"port": port}
    config.write_text(json.dumps(body), encoding="utf-8")
    monkeypatch.setenv("LORE_CONFIG", str(config))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return config


def test_a_gateway_loads_the_embedding_model_at_its_first_recall_not_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle gateway does not hold the model (about 100 MB with its runtime): /health says
    it loads on first use, and the first recall (which embeds its query) loads it."""
    _configure(tmp_path, monkeypatch)
    server = ThreadedServer(Gateway.load()).start()
    try:
        # Once the indexer has looked for work (and found none), the model is still not loaded.
        deadline = time.monotonic() + 30
        while get_json(server.url + "/health")["indexer"]["state"] != "idle":
            assert time.monotonic() < deadline, "the indexer never went idle"
            time.sleep(0.05)
        embedder = get_json(server.url + "/health")["embedder"]
        assert embedder["provider"] == "local"
        assert embedder["ok"] is True and embedder["loaded"] is False
        assert "loads on first use" in embedder["detail"]
        get_json(server.url + "/lore/api/recall?q=which+port+does+the+gateway+use&scope=all")
        assert get_json(server.url + "/health")["embedder"]["loaded"] is True
    finally:
        server.stop()


def test_a_read_command_through_a_running_gateway_loads_no_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command a running gateway answers reads the core configuration only: the plugins
    (the dashboard, the store, the curators' HTTP client) take most of a second to import."""
    from lore_core.testing.net import free_port

    port = free_port()
    _configure(tmp_path, monkeypatch, port)
    server = ThreadedServer(Gateway.load(), port=port).start()
    try:
        code = (
            "import sys\n"
            "from lore_core.cli.commands import main\n"
            "assert main(['sessions', '--json']) == 0\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('lore_dashboard', 'lore_store_duckdb', 'lore_embed_local', 'duckdb', 'aiohttp', 'httpx'))\n"
            "print('HEAVY', ','.join(heavy))\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "via the running gateway" in done.stderr
        assert done.stdout.strip().splitlines()[-1] == "HEAVY"
    finally:
        server.stop()
