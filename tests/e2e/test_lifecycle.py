"""A day's lifecycle through the real ``lore`` command: ``lore run`` starts the shared gateway,
``lore doctor`` checks the setup (the real clients on PATH included), ``lore stop`` stops it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lore_e2e_support import find_client, run_client, stop_background_gateway

from lore_core.cli.launcher import gateway_files, probe
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.net import free_port

FAKE_CLIENT = Path(__file__).with_name("fake_client.py")


def lore(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    result = run_client([sys.executable, "-m", "lore_core.cli", *args], env, cwd)
    return result.returncode, result.stdout, result.stderr


def test_run_then_doctor_then_stop(
    tmp_path: Path, lore_env: dict[str, str], fake_upstream: FakeUpstream
) -> None:
    # The real clients, found where scripts/install-clients.sh put them (or on PATH).
    clients = {name: find_client(name) for name in ("claude", "codex", "opencode")}
    stand_in = tmp_path / "stand-in"
    stand_in.mkdir()
    (stand_in / "claude").write_text(
        f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(FAKE_CLIENT)!r}, run_name='__main__')\n"
    )
    (stand_in / "claude").chmod(0o755)
    port = free_port()
    base = {**os.environ, **lore_env, "LORE_PORT": str(port)}
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        base.pop(name, None)
    real_path = os.pathsep.join([*sorted({str(Path(p).parent) for p in clients.values()}), base["PATH"]])
    pid_file, _ = gateway_files(port, Path(lore_env["XDG_DATA_HOME"]) / "lore")
    try:
        # lore run starts the shared gateway (with a stand-in client that makes one request).
        run_env = {**base, "PATH": f"{stand_in}{os.pathsep}{base['PATH']}"}
        started = run_client(
            [sys.executable, "-m", "lore_core.cli", "run", "claude", "call", str(tmp_path / "r.json"), "0"],
            run_env,
            tmp_path,
        )
        assert started.returncode == 0, started.describe()
        pid = int(pid_file.read_text())
        url = f"http://127.0.0.1:{port}"

        code, out, err = lore("doctor", env={**base, "PATH": real_path}, cwd=tmp_path)
        assert code == 0, out + err
        lines = out.splitlines()
        assert any(
            line.startswith(f"ok    gateway  {url} answers: ok") and f"pid {pid}" in line for line in lines
        )
        assert any(
            line.startswith("ok    store    duckdb at ") and "held by the running gateway" in line
            for line in lines
        )
        for name, path in clients.items():
            assert f"ok    client   {name}: {path}" in lines, out
        assert any(line.startswith("ok    worker   ") and "session's own API key" in line for line in lines)
        assert lines[-1] == "lore doctor: 0 problems, 0 warnings"

        code, out, err = lore("stop", env=base, cwd=tmp_path)
        assert code == 0, err
        assert out.strip() == f"lore: stopped the gateway at {url} (pid {pid})"
        assert probe("127.0.0.1", port)[0] == "absent"
        assert not pid_file.exists()

        code, out, _ = lore("doctor", env=base, cwd=tmp_path)
        assert f"info  gateway  not running on {url}" in out.splitlines()
        code, out, _ = lore("stop", env=base, cwd=tmp_path)
        assert code == 0 and out.strip() == f"lore: no gateway is running on port {port}"
    finally:
        stop_background_gateway(pid_file)
