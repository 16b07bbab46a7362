"""The documented install: one command puts ``lore`` on PATH with the default plugins, and every
install hint Lore prints can be followed as written.

The slow test runs the command from docs/quickstart.md as written (``uv tool install`` of
``packaging/lore``) into a temporary tool directory, then runs ``lore --version``, ``lore
plugins`` and ``lore serve`` from PATH, in a directory outside the checkout, with a fresh home.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest

from lore_core.install import (
    DEFAULT_DISTRIBUTION,
    DEFAULT_PLUGINS,
    INSTALL_COMMAND,
    OPTIONAL_PLUGINS,
    plugin_hint,
)
from lore_core.testing.net import free_port, spawn_logged, stop_process, wait_until_serving

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "docs" / "quickstart.md"
DIRECT_REFERENCE = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+) @ \{root:parent:parent:uri\}(?P<folder>/\S*)?$")


def _name(requirement: str) -> str:
    return re.split(r"[ <>=;@\[]", requirement, maxsplit=1)[0]


# ---------------------------------------------------------------------------------------------
# What the distribution holds, and the hints
# ---------------------------------------------------------------------------------------------


def test_the_lore_distribution_is_the_kernel_with_every_default_plugin_from_this_checkout() -> None:
    meta = tomllib.loads((ROOT / DEFAULT_DISTRIBUTION / "pyproject.toml").read_text())["project"]
    found = {}
    for requirement in meta["dependencies"]:
        match = DIRECT_REFERENCE.match(requirement)
        assert match, f"not a direct reference into this checkout: {requirement!r}"
        folder = ROOT / (match["folder"] or "/").lstrip("/")
        declared = tomllib.loads((folder / "pyproject.toml").read_text())["project"]["name"]
        assert declared == match["name"], f"{requirement!r} points at {declared}"
        found[match["name"]] = folder
    assert set(found) == {"lore-core", *DEFAULT_PLUGINS}
    assert all(found[name] == ROOT / folder for name, folder in DEFAULT_PLUGINS.items())
    # `lore` on PATH comes from the kernel's entry point, declared again by the distribution.
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["scripts"] == root["project"]["scripts"] == {"lore": "lore_core.cli:main"}
    # The same plugins `uv run` installs (the dev group, which has the optional ones too), and
    # every plugin of the repository is either a default or an optional one.
    dev = {_name(r) for r in root["dependency-groups"]["dev"]}
    assert set(DEFAULT_PLUGINS) | set(OPTIONAL_PLUGINS) <= dev
    assert not set(DEFAULT_PLUGINS) & set(OPTIONAL_PLUGINS)
    assert {p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file()} == {
        Path(folder).name for folder in {**DEFAULT_PLUGINS, **OPTIONAL_PLUGINS}.values()
    }
    for name, folder in OPTIONAL_PLUGINS.items():
        declared = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]["name"]
        assert declared == name


def test_the_quickstart_documents_the_install_command() -> None:
    assert INSTALL_COMMAND in QUICKSTART.read_text()


def test_install_hints_name_the_plugin_folder_in_this_checkout() -> None:
    for name, folder in {**DEFAULT_PLUGINS, **OPTIONAL_PLUGINS}.items():
        hint = plugin_hint(name)
        argv = shlex.split(hint)
        # A command that installs into the interpreter running lore, the folder as its argument.
        assert sys.executable in argv and str(ROOT / folder) in argv, hint
        assert argv[:3] == ["uv", "pip", "install"] or argv[1:4] == ["-m", "pip", "install"], hint


def test_without_a_checkout_the_hint_says_to_run_it_in_a_clone(monkeypatch: pytest.MonkeyPatch) -> None:
    """lore installed from wheels: the command names the folder, to run in a clone."""
    from lore_core import install

    monkeypatch.setattr(install, "checkout_dir", lambda: None)
    hint = plugin_hint("lore-store-duckdb")
    assert hint.endswith(
        " plugins/store_duckdb in a clone of Lore's repository (lore-store-duckdb: not published on PyPI)"
    )
    assert sys.executable in hint


def test_no_message_tells_to_pip_install_a_plugin_by_name() -> None:
    """The plugins are not on PyPI and some of their names belong to other projects there:
    ``pip install lore-mcp`` would install someone else's package."""
    sources = [*(ROOT / "lore_core").rglob("*.py"), *(ROOT / "plugins").glob("*/lore_*/**/*.py")]
    offenders = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in sources
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.search(r"(pip|pipx|uv pip|uv tool) install[^\"']*\blore-", line)
    ]
    assert not offenders, "\n".join(offenders)


# ---------------------------------------------------------------------------------------------
# The documented command, run as written
# ---------------------------------------------------------------------------------------------


def documented_install_command() -> list[str]:
    """The install command of docs/quickstart.md's install block."""
    lines = [line.strip() for line in QUICKSTART.read_text().splitlines()]
    commands = [line for line in lines if line.startswith("uv tool install ")]
    assert commands, "docs/quickstart.md shows no `uv tool install` command"
    return shlex.split(commands[0].split("#", 1)[0])


def find_uv() -> str:
    found = os.environ.get("UV") or shutil.which("uv")  # `uv run` tells its children where it is
    if found:
        return found
    if os.environ.get("LORE_REQUIRE_E2E") == "1":
        pytest.fail("uv is not on PATH: the install test needs it")
    pytest.skip("uv is not on PATH")


def install(uv: str, argv: list[str], tmp_path: Path) -> Path:
    """Run the documented command from the checkout's root into a temporary tool directory;
    returns the directory of the executables it installed."""
    constraints = tmp_path / "locked.txt"
    # The versions uv.lock pins, which `uv sync` has already downloaded: the install takes them
    # from uv's cache instead of whatever is newest on the index.
    subprocess.run(
        [uv, "export", "--frozen", "--all-packages", "--no-hashes", "--no-emit-workspace", "--no-header",
         "--no-annotate", "--format", "requirements-txt", "--output-file", str(constraints)],
        cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip
    bin_dir = tmp_path / "bin"
    env = {
        **os.environ,
        "UV_TOOL_DIR": str(tmp_path / "tools"),
        "UV_TOOL_BIN_DIR": str(bin_dir),
        "UV_CONSTRAINT": str(constraints),
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    command = [uv, *argv[1:]]
    # Offline first (everything is in the cache on a machine that ran `uv sync`); with the
    # network when the cache lacks an index page (a fresh CI machine).
    offline = subprocess.run(
        command, cwd=ROOT, env={**env, "UV_OFFLINE": "1"}, capture_output=True, text=True
    )
    if offline.returncode != 0:
        online = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        assert online.returncode == 0, f"offline:\n{offline.stderr}\nonline:\n{online.stderr}"
    return bin_dir


@pytest.mark.slow
def test_the_documented_command_puts_lore_on_path_with_the_default_plugins(tmp_path: Path) -> None:
    uv = find_uv()
    argv = documented_install_command()
    assert argv[:3] == ["uv", "tool", "install"]
    bin_dir = install(uv, argv, tmp_path)

    # A fresh user: nothing of this checkout, its .venv or the developer's home on the way.
    home = tmp_path / "home"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        "PATH": os.pathsep.join([str(bin_dir), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "LANG": "C.UTF-8",
    }
    lore = shutil.which("lore", path=env["PATH"])
    assert lore == str(bin_dir / "lore")
    # The installed copy runs, not the checkout: its interpreter is the tool environment's.
    shebang = Path(lore).resolve().read_text().splitlines()[0]
    assert str(tmp_path / "tools") in shebang, shebang

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["lore", *args], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120
        )

    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("lore-core "), version

    plugins = run("plugins", "--json")
    assert plugins.returncode == 0, plugins.stderr
    report = json.loads(plugins.stdout)
    assert not report["failed"] and report["config_error"] is None
    assert set(DEFAULT_PLUGINS) <= {row["distribution"] for row in report["loaded"]}

    port = free_port()
    log = tmp_path / "serve.log"
    proc = spawn_logged([lore, "serve", "--port", str(port)], env, log, cwd=elsewhere)
    try:
        wait_until_serving(proc, f"http://127.0.0.1:{port}/health", log, timeout=90)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://127.0.0.1:{port}/health", timeout=10) as resp:
            health = json.loads(resp.read())
    finally:
        code = stop_process(proc, timeout=60)
    output = log.read_text()
    assert code == 0, output
    # The DuckDB store, in the fresh home's data directory.
    data_dir = home / ".local" / "share" / "lore"
    assert health["store"]["backend"] == "duckdb", health["store"]
    assert health["store"]["store"]["path"] == str(data_dir / "lore.duckdb")
    assert f"listening on http://127.0.0.1:{port}" in output
    assert str(data_dir) in output
    assert "Traceback" not in output

    # And off again: `lore setup` undone, the memory purged, the program removed by the tool
    # that installed it (uv, told where its tools are, as when it installed them).
    settings = home / ".claude" / "settings.json"
    setup = run("setup", "claude", "--no-start")
    assert setup.returncode == 0 and json.loads(settings.read_text())["env"]["ANTHROPIC_BASE_URL"], setup
    env.update({"PATH": f"{Path(uv).parent}{os.pathsep}{env['PATH']}", "UV_TOOL_DIR": str(tmp_path / "tools"),
                "UV_TOOL_BIN_DIR": str(bin_dir)})  # fmt: skip
    dry = run("uninstall", "--purge", "--dry-run")
    assert dry.returncode == 0 and "would run: uv tool uninstall lore" in dry.stdout, dry
    assert data_dir.exists() and (bin_dir / "lore").exists()
    gone = run("uninstall", "--purge")
    assert gone.returncode == 0, gone
    assert "undid lore setup claude" in gone.stdout and "removed the program" in gone.stdout, gone.stdout
    assert not settings.exists()  # setup created it: undo removes it
    assert not data_dir.exists() and not (bin_dir / "lore").exists()
