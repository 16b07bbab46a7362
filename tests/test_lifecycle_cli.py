"""``lore serve`` at start (what it uses; a store another gateway holds), ``lore stop``,
``lore doctor`` and ``lore config``: the real command line, real files, processes and sockets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lore_core import cli
from lore_core.cli.lifecycle import describe_worker
from lore_core.config import LoreConfig, WorkerConfig, load_config
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.net import free_port, get_json, spawn_logged, stop_process, wait_until_serving


def lore(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


class Serving:
    """``lore serve`` in a process of its own, as a user starts it."""

    def __init__(self, env: dict[str, str], cwd: Path, port: int, log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        argv = [sys.executable, "-m", "lore_core.cli", "serve", "--port", str(port)]
        self.proc = spawn_logged(argv, env, log, cwd=cwd)
        wait_until_serving(self.proc, self.url + "/health", log, timeout=90)

    @property
    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def serve(tmp_path: Path, lore_env: dict[str, str]) -> Iterator[Any]:
    started: list[Serving] = []

    def start(port: int | None = None, env: dict[str, str] | None = None) -> Serving:
        n = len(started)
        server = Serving(
            {**os.environ, **lore_env, **(env or {})},
            tmp_path,
            port or free_port(),
            tmp_path / f"serve-{n}.log",
        )
        started.append(server)
        return server

    yield start
    for server in started:
        stop_process(server.proc, timeout=60)


def data_dir(lore_env: dict[str, str]) -> Path:
    return Path(lore_env["XDG_DATA_HOME"]) / "lore"


# ---------------------------------------------------------------------------------------------
# lore serve: what it says at start
# ---------------------------------------------------------------------------------------------


def test_serve_says_at_start_what_it_uses(
    serve: Any, lore_env: dict[str, str], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    Path(lore_env["LORE_CONFIG"]).write_text(
        json.dumps({"upstream": {"byModelPrefix": {"gpt-9": "http://127.0.0.1:9"}}})
    )
    server = serve()
    lines = server.output.splitlines()
    said = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in lines[1:7]}
    assert lines[0].startswith("Lore ")
    assert said["configuration"] == (
        f"{lore_env['LORE_CONFIG']} (LORE_CONFIG); environment: LORE_UPSTREAM_ANTHROPIC, LORE_UPSTREAM_OPENAI"
    )
    assert said["upstreams"] == (
        f"anthropic {fake_upstream.url}, openai {fake_upstream.url}, gpt-9* http://127.0.0.1:9"
    )
    assert said["data"] == str(data_dir(lore_env))
    assert said["store"] == f"duckdb at {data_dir(lore_env) / 'lore.duckdb'}"
    assert said["worker"].startswith("each session's own model, billed to that session's own API key")
    for plugin in (
        "harness-claude",
        "harness-codex",
        "harness-opencode",
        "store-duckdb",
        "embed-local",
        "mcp",
    ):
        assert plugin in said["plugins"]
    # Then where to point clients, as before.
    assert lines[7] == f"Lore gateway listening on {server.url}"


def test_the_worker_line_says_whose_key_pays() -> None:
    assert "billed to that session's own API key" in describe_worker(LoreConfig())
    named = describe_worker(LoreConfig(worker=WorkerConfig(model="claude-haiku-4-5")))
    assert named.startswith("claude-haiku-4-5 (worker.model), billed to that session's own API key")
    configured = LoreConfig(
        worker=WorkerConfig(model="qwen3", upstream="http://127.0.0.1:11434", api_key="sk-secret-123")
    )
    assert (
        describe_worker(configured) == "qwen3 at http://127.0.0.1:11434, billed to the key in worker.apiKey"
    )
    assert "sk-secret-123" not in describe_worker(configured)


# ---------------------------------------------------------------------------------------------
# One gateway per store
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_gateway_on_a_store_another_holds_refuses_to_start(
    serve: Any, lore_env: dict[str, str], tmp_path: Path
) -> None:
    first = serve()
    port = free_port()
    second = subprocess.run(
        [sys.executable, "-m", "lore_core.cli", "serve", "--port", str(port)],
        env={**os.environ, **lore_env}, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert second.returncode == 1, second.stderr
    store = data_dir(lore_env) / "lore.duckdb"
    assert second.stderr.strip() == (
        f"lore: the store {store} is in use by the gateway at {first.url} (pid {first.proc.pid}). "
        f"Use that gateway, stop it first (lore stop --port {first.port}), or give this one another "
        "store (LORE_DB_PATH=... or store.path in .lore.json)"
    )
    assert "Traceback" not in second.stdout + second.stderr
    assert "listening" not in second.stdout
    # A command that finds no gateway on its port cannot open the store either, and says why.
    reader = subprocess.run(
        [sys.executable, "-m", "lore_core.cli", "sessions"],
        env={**os.environ, **lore_env, "LORE_PORT": str(port)}, cwd=tmp_path, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert reader.returncode == 3, reader.stderr
    assert f"lore: the store {store} is in use by the gateway at {first.url} (pid {first.proc.pid})" in (
        reader.stderr
    )
    # The first one is untouched, and still names itself in its pid file.
    assert get_json(first.url + "/health")["status"] == "ok"
    assert (data_dir(lore_env) / f"gateway-{first.port}.pid").read_text().strip() == str(first.proc.pid)

    # The claim goes with the process, however it ends.
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(30)
    third = serve(port=port)
    assert get_json(third.url + "/health")["store"]["status"] == "ok"


@pytest.mark.slow  # two gateway processes; the stop --all test below starts the same two
def test_another_store_is_another_gateway(serve: Any, tmp_path: Path) -> None:
    serve()
    other = serve(env={"LORE_DB_PATH": str(tmp_path / "other" / "lore.duckdb")})
    assert get_json(other.url + "/health")["store"]["status"] == "ok"


# ---------------------------------------------------------------------------------------------
# lore stop
# ---------------------------------------------------------------------------------------------


def test_stop_stops_the_gateway_on_the_port_and_removes_its_pid_file(
    serve: Any, lore_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    server = serve()
    pid_file = data_dir(lore_env) / f"gateway-{server.port}.pid"
    assert pid_file.read_text().strip() == str(server.proc.pid)
    code, out, err = lore(capsys, "stop", "--port", str(server.port))
    assert code == 0, err
    assert out.strip() == f"lore: stopped the gateway at {server.url} (pid {server.proc.pid})"
    # A clean stop, as Ctrl+C: exit code 0, the pid file gone.
    assert server.proc.wait(30) == 0
    assert not pid_file.exists()
    # Nothing left to stop is not an error.
    code, out, _ = lore(capsys, "stop", "--port", str(server.port))
    assert code == 0 and out.strip() == f"lore: no gateway is running on port {server.port}"


def test_stop_uses_the_configured_port_and_stops_all_with_all(
    serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = serve()
    second = serve(env={"LORE_DB_PATH": str(tmp_path / "other" / "lore.duckdb")})
    monkeypatch.setenv("LORE_PORT", str(first.port))
    code, out, _ = lore(capsys, "stop", "--json")
    assert code == 0
    assert json.loads(out) == [
        {"port": first.port, "url": first.url, "pid": first.proc.pid, "outcome": "stopped"}
    ]
    assert second.proc.poll() is None
    code, out, _ = lore(capsys, "stop", "--all")
    assert code == 0 and out.strip() == f"lore: stopped the gateway at {second.url} (pid {second.proc.pid})"
    assert second.proc.wait(30) == 0


def test_stop_never_signals_a_process_that_is_not_a_gateway(
    lore_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A pid file outlives a gateway killed with kill -9; its number may be anyone's now."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        port = free_port()
        pid_file = data_dir(lore_env) / f"gateway-{port}.pid"
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{bystander.pid}\n")
        code, out, _ = lore(capsys, "stop", "--port", str(port))
        assert code == 0
        assert out.strip() == (
            f"lore: no gateway is running on port {port} (removed {pid_file}: pid {bystander.pid} is gone)"
        )
        assert bystander.poll() is None and not pid_file.exists()
    finally:
        bystander.kill()
        bystander.wait()


# ---------------------------------------------------------------------------------------------
# lore doctor
# ---------------------------------------------------------------------------------------------


def doctor_lines(out: str) -> dict[str, list[tuple[str, str]]]:
    """``check name -> [(status, detail), ...]`` from ``lore doctor``'s output."""
    found: dict[str, list[tuple[str, str]]] = {}
    for line in out.splitlines():
        if line.startswith(" ") or line.startswith("lore doctor:"):
            continue
        status, name, detail = line.split(None, 2)
        found.setdefault(name, []).append((status, detail))
    return found


def test_doctor_with_a_running_gateway_finds_nothing_wrong(
    serve: Any, lore_env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve()
    monkeypatch.setenv("LORE_PORT", str(server.port))
    code, out, err = lore(capsys, "doctor")
    assert code == 0, out + err
    checks = doctor_lines(out)
    assert checks["config"] == [("ok", f"{lore_env['LORE_CONFIG']} (LORE_CONFIG); environment: LORE_PORT, "
                                        "LORE_UPSTREAM_ANTHROPIC, LORE_UPSTREAM_OPENAI: valid")]  # fmt: skip
    assert checks["data"] == [("ok", f"{data_dir(lore_env)} (drwx------, yours only)")]
    version = get_json(server.url + "/health")["version"]
    assert checks["gateway"] == [("ok", f"{server.url} answers: ok, Lore {version}, pid {server.proc.pid}")]
    assert checks["store"] == [
        ("ok", f"duckdb at {data_dir(lore_env) / 'lore.duckdb'}: held by the running gateway")
    ]
    assert checks["plugins"][0][0] == "ok"
    assert {status for status, _ in checks["client"]} <= {"ok", "info"}
    (worker,) = checks["worker"]
    assert worker[0] == "ok" and "billed to that session's own API key" in worker[1]
    assert out.splitlines()[-1] == "lore doctor: 0 problems, 0 warnings"


def test_doctor_fails_on_a_store_held_by_a_gateway_on_another_port(
    serve: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve()
    monkeypatch.setenv("LORE_PORT", str(free_port()))
    code, out, _ = lore(capsys, "doctor", "--json")
    assert code == 1
    report = json.loads(out)
    (store,) = [c for c in report["checks"] if c["name"] == "store"]
    assert store["status"] == "FAIL"
    assert f"in use by the gateway at {server.url} (pid {server.proc.pid})" in store["detail"]
    assert (
        store["hint"]
        == f"lore serve here would refuse: lore stop --port {server.port}, or LORE_PORT={server.port}"
    )
    assert report["problems"] == 1


def test_doctor_without_a_gateway_opens_the_store_and_says_how_to_start_one(
    lore_env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LORE_PORT", str(free_port()))
    code, out, _ = lore(capsys, "doctor")
    assert code == 0, out
    checks = doctor_lines(out)
    assert checks["gateway"][0][0] == "info" and checks["gateway"][0][1].startswith("not running on")
    # Nothing made yet: the doctor creates no store.
    assert checks["store"] == [("ok", f"duckdb at {data_dir(lore_env) / 'lore.duckdb'}: not made yet "
                                      "(the first lore serve makes it)")]  # fmt: skip
    assert not (data_dir(lore_env) / "lore.duckdb").exists()


def test_doctor_reports_a_broken_configuration_without_a_traceback(
    tmp_path: Path, lore_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    Path(lore_env["LORE_CONFIG"]).write_text('{"server": {"port": "eighty"}}')
    code, out, err = lore(capsys, "doctor")
    assert code == 1 and "Traceback" not in out + err
    (status, detail), *_ = doctor_lines(out)["config"]
    assert status == "FAIL" and "server.port" in detail
    # What needs no configuration is still checked.
    assert "plugins" in doctor_lines(out)


def test_doctor_warns_about_an_open_data_directory_and_a_missing_default_plugin(
    lore_env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from lore_core import install

    directory = data_dir(lore_env)
    directory.mkdir(parents=True)
    directory.chmod(0o755)
    monkeypatch.setitem(install.DEFAULT_PLUGINS, "lore-imaginary", "plugins/imaginary")
    code, out, _ = lore(capsys, "doctor", "--json")
    assert code == 0
    checks = {(c["name"], c["status"]): c for c in json.loads(out)["checks"]}
    assert (
        checks["data", "warn"]["hint"]
        == f"lore serve makes it owner-only at start; or now: chmod 700 {directory}"
    )
    missing = checks["plugins", "warn"]
    assert missing["detail"] == "default plugins not installed: lore-imaginary"
    assert missing["hint"].endswith(str(Path(install.__file__).parent.parent / "plugins" / "imaginary"))


# ---------------------------------------------------------------------------------------------
# lore config
# ---------------------------------------------------------------------------------------------


def config_rows(out: str) -> dict[str, tuple[str, str]]:
    rows = {}
    for line in out.splitlines()[1:]:
        key, _, rest = line.partition(" = ")
        value, _, source = rest.partition("  # ")
        rows[key.strip()] = (value, source)
    return rows


def test_config_says_where_each_value_comes_from(
    tmp_path: Path,
    lore_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LORE_CONFIG")
    user = Path(lore_env["XDG_CONFIG_HOME"]) / "lore" / ".lore.json"
    user.parent.mkdir(parents=True)
    user.write_text(json.dumps({
        "server": {"port": 9100, "allowedHosts": ["lore.internal"]},
        "worker": {"apiKey": "sk-ant-do-not-print", "model": "claude-haiku-4-5"},
        "knowledge": {"enabled": False},
    }))  # fmt: skip
    project = tmp_path / "repo"
    (project / "src").mkdir(parents=True)
    (project / ".lore.json").write_text(
        json.dumps({"server": {"port": 9200}, "models": {"qwen": {"input": 0.1}}})
    )
    monkeypatch.chdir(project / "src")
    monkeypatch.setenv("LORE_WORKER_MODEL", "gpt-5-mini")

    code, out, _ = lore(capsys, "config")
    assert code == 0
    assert out.splitlines()[0] == f"# configuration files, later wins: {user}, {project / '.lore.json'}"
    rows = config_rows(out)
    assert rows["server.host"] == ('"127.0.0.1"', "default")
    assert rows["server.port"] == ("9200", str(project / ".lore.json"))
    assert rows["server.allowedHosts"] == ('["lore.internal"]', str(user))
    assert rows["worker.model"] == ('"gpt-5-mini"', "LORE_WORKER_MODEL")
    assert rows["worker.apiKey"] == ('"(set)"', str(user))
    assert rows["knowledge.enabled"] == ("false", str(user))
    assert rows["models.qwen.input"] == ("0.1", str(project / ".lore.json"))
    assert rows["upstream.anthropic"] == (
        json.dumps(lore_env["LORE_UPSTREAM_ANTHROPIC"]),
        "LORE_UPSTREAM_ANTHROPIC",
    )
    assert "sk-ant-do-not-print" not in out
    # A plugin's own section is there too, with its defaults.
    assert any(key.startswith("store-duckdb.") and source == "default" for key, (_, source) in rows.items())
    # What it shows is what the gateway uses: the knowledge section of a file applies.
    assert load_config(cwd=project).knowledge.enabled is False

    code, out, _ = lore(capsys, "config", "server.port", "--json")
    assert code == 0
    assert json.loads(out)["settings"] == [
        {"key": "server.port", "value": 9200, "source": str(project / ".lore.json")}
    ]


def test_config_refuses_an_unknown_key_and_reports_a_broken_file(
    lore_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = lore(capsys, "config", "server.prot")
    assert code == 2 and err.strip() == "lore: no setting 'server.prot' (lore config lists them all)"
    Path(lore_env["LORE_CONFIG"]).write_text("{not json")
    code, out, err = lore(capsys, "config")
    assert code == 2 and not out
    assert err.startswith(f"lore: configuration error: {lore_env['LORE_CONFIG']}: not valid JSON")


def test_every_lifecycle_command_has_a_description_and_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("stop", "doctor", "config"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = capsys.readouterr().out
        assert "examples:" in text and f"lore {command}" in text.split("examples:", 1)[1]
