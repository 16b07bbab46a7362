"""``lore setup <agent>`` / ``lore setup undo <agent>`` on the clients' own configuration files
(the real clients reading them: tests/e2e/test_setup_clients.py)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from lore_core.cli import main


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("LORE_PORT", "18377")
    monkeypatch.chdir(tmp_path)
    return home


def lore(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


CLAUDE_ENV = {
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:18377",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_AUTO_COMPACT": "1",
}


def test_claude_settings_round_trip_keeps_everything_else(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    original = {
        "model": "opus",
        "env": {"MY_OWN": "1", "DISABLE_TELEMETRY": "0"},
        "permissions": {"allow": []},
    }
    settings.write_text(json.dumps(original))
    settings.chmod(0o640)

    code, out, _ = lore(capsys, "setup", "claude", "--no-start")
    assert code == 0
    assert "env.ANTHROPIC_BASE_URL" in out and "lore setup undo claude" in out
    written = json.loads(settings.read_text())
    assert written["env"] == {"MY_OWN": "1", **CLAUDE_ENV}
    assert written["model"] == "opus" and written["permissions"] == {"allow": []}
    assert stat.S_IMODE(settings.stat().st_mode) == 0o640  # the file's own mode kept
    (backup,) = (home / ".local" / "share" / "lore" / "setup-backups" / "claude").iterdir()
    assert json.loads(backup.read_text()) == original

    code, out, _ = lore(capsys, "setup")
    assert code == 0 and out.startswith("claude: set up ")

    code, out, _ = lore(capsys, "setup", "undo", "claude")
    assert code == 0
    assert "put back" in out and "env.DISABLE_TELEMETRY" in out
    assert json.loads(settings.read_text()) == original
    code, out, _ = lore(capsys, "setup")
    assert out.startswith("no agent is set up")


def test_undo_leaves_what_the_user_changed_since(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = home / ".claude" / "settings.json"
    assert lore(capsys, "setup", "claude", "--no-start")[0] == 0
    changed = json.loads(settings.read_text())
    changed["env"]["ANTHROPIC_BASE_URL"] = "http://proxy.example:9000"
    settings.write_text(json.dumps(changed))

    code, out, _ = lore(capsys, "setup", "undo", "claude")
    assert code == 0
    assert "left " in out and "env.ANTHROPIC_BASE_URL as it is" in out
    assert json.loads(settings.read_text()) == {"env": {"ANTHROPIC_BASE_URL": "http://proxy.example:9000"}}


def test_a_second_setup_keeps_the_values_from_before_the_first(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    before = 'openai_base_url = "https://corp.example/v1"\n'
    config.write_text(before)
    assert lore(capsys, "setup", "codex", "--no-start")[0] == 0
    monkeypatch.setenv("LORE_PORT", "18400")  # the gateway moved: set up again
    assert lore(capsys, "setup", "codex", "--no-start")[0] == 0
    assert config.read_text() == 'openai_base_url = "http://127.0.0.1:18400/v1"\n'
    code, out, _ = lore(capsys, "setup", "undo", "codex")
    assert code == 0 and "put back" in out
    assert config.read_text() == before


def test_toml_keeps_comments_and_tables(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    before = '# mine\nmodel = "gpt-5"\n\n[profiles.fast]\nmodel = "o3"  # quick\n'
    config.write_text(before)
    assert lore(capsys, "setup", "codex", "--no-start")[0] == 0
    assert config.read_text() == (
        '# mine\nmodel = "gpt-5"\nopenai_base_url = "http://127.0.0.1:18377/v1"\n\n'
        '[profiles.fast]\nmodel = "o3"  # quick\n'
    )
    assert lore(capsys, "setup", "undo", "codex")[0] == 0
    assert config.read_text() == before


def test_files_and_objects_setup_created_are_removed_by_undo(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = home / ".config" / "opencode" / "opencode.json"
    code, out, _ = lore(capsys, "setup", "opencode", "--no-start", "--json")
    assert code == 0
    report = json.loads(out)
    assert {tuple(c["key"]) for c in report["changes"]} == {
        ("provider", "anthropic", "options", "baseURL"),
        ("provider", "openai", "options", "baseURL"),
        ("compaction", "auto"),
        ("compaction", "prune"),
    }
    assert json.loads(config.read_text())["compaction"] == {"auto": False, "prune": False}
    assert lore(capsys, "setup", "undo", "opencode")[0] == 0
    assert not config.exists()


def test_dry_run_writes_nothing(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = lore(capsys, "setup", "claude", "--dry-run")
    assert code == 0 and out.startswith("would set ")
    assert not (home / ".claude").exists()
    assert not (home / ".local" / "share" / "lore" / "setup.json").exists()


def test_a_file_that_does_not_parse_is_left_untouched(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"model": "opus",')
    code, _, err = lore(capsys, "setup", "claude", "--no-start")
    assert code == 1 and "does not parse" in err and str(settings) in err
    assert settings.read_text() == '{"model": "opus",'
    assert lore(capsys, "setup")[1].startswith("no agent is set up")


def test_mistakes_are_named(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = lore(capsys, "setup", "undo", "claude")
    assert code == 1 and "was not set up" in err
    code, _, err = lore(capsys, "setup", "undo")
    assert code == 2 and "lore setup undo claude" in err
    code, _, err = lore(capsys, "setup", "nosuch", "--no-start")
    assert code == 2 and "no harness named 'nosuch'" in err and "claude" in err


def test_uninstall_undoes_setups_and_purges_only_when_asked(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = home / ".local" / "share" / "lore"
    config_dir = home / ".config" / "lore"
    config_dir.mkdir(parents=True)
    (config_dir / ".lore.json").write_text("{}")
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"model": "opus"}')
    assert lore(capsys, "setup", "claude", "--no-start")[0] == 0

    code, out, _ = lore(capsys, "uninstall", "--dry-run", "--purge")
    assert code == 0 and "would undo lore setup claude" in out and f"would remove {data_dir}" in out
    assert "ANTHROPIC_BASE_URL" in settings.read_text() and data_dir.exists()

    code, out, _ = lore(capsys, "uninstall", "--keep-program")
    assert code == 0 and "undid lore setup claude" in out and f"kept the memory in {data_dir}" in out
    assert json.loads(settings.read_text()) == {"model": "opus"} and data_dir.exists()

    code, out, _ = lore(capsys, "uninstall", "--keep-program", "--purge", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["removed"] == [str(data_dir), str(config_dir)] and report["setups"] == {}
    assert not data_dir.exists() and not config_dir.exists()
    assert settings.exists()  # the client's own file stays


def test_doctor_says_whether_each_set_up_agent_still_points_at_the_gateway(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert lore(capsys, "setup", "claude", "--no-start")[0] == 0
    _, out, _ = lore(capsys, "doctor")
    assert "ok    setup    claude: its own configuration points at http://127.0.0.1:18377" in out.splitlines()
    monkeypatch.setenv("LORE_PORT", "18400")  # the gateway moved; the file did not
    _, out, _ = lore(capsys, "doctor")
    line = next(line for line in out.splitlines() if line.startswith("warn  setup"))
    assert (
        "claude: its files no longer point at http://127.0.0.1:18400" in line
        and "env.ANTHROPIC_BASE_URL" in line
    )
    assert "lore setup claude writes them again" in out
