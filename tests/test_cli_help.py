"""The CLI agrees with itself: every command (plugins' included) has a description and
examples in its help, mutations print JSON on request, flags mean the same everywhere, ids
may be shortened, and the completion script completes what the parser accepts."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lore_core.cli import main
from lore_core.cli.api_client import CommandError
from lore_core.cli.commands import build_parser
from lore_core.cli.common import unique_prefix
from lore_core.cli.completion import bash_script, command_tree


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from commands(sub, (*path, name))


def leaves() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    every = list(commands(build_parser([])))  # no built-in named: the plugins' commands too
    groups = {path[:-1] for path, _ in every}
    return [(path, sub) for path, sub in every if path not in groups]


def test_every_command_has_a_description_and_examples() -> None:
    found = list(commands(build_parser([])))
    assert len(found) > 50 and ("mcp",) in dict(found) and ("duckdb-compact",) in dict(found)
    for path, sub in found:
        name = " ".join(path)
        assert sub.description and len(sub.description) > 20, f"lore {name}: no description"
        assert sub.epilog and sub.epilog.startswith(("examples:", "example:")), f"lore {name}: no examples"
        assert "lore " in sub.epilog, f"lore {name}: its examples run no lore command"


# Commands with nothing to report as JSON: they run something else in the foreground, or print
# a script.
NO_JSON = {("serve",), ("run",), ("mcp",), ("completion",), ("dashboard",), ("duckdb-compact",)}


def test_every_command_that_reports_something_takes_json() -> None:
    missing = [
        " ".join(path)
        for path, sub in leaves()
        if path not in NO_JSON and "--json" not in {o for a in sub._actions for o in a.option_strings}
    ]
    assert not missing, f"no --json: {missing}"


def test_global_and_scope_mean_the_same_on_every_command_that_files_something() -> None:
    parser = build_parser(["knowledge"])
    for argv in (["knowledge", "add", "--category", "gotcha", "--title", "t"], ["knowledge", "edit", "k:1"]):
        assert parser.parse_args([*argv, "--global"]).scope == "global"
        assert parser.parse_args([*argv, "--scope", "global"]).scope == "global"
    entity = parser.parse_args(["entity", "add", "x", "--kind", "tool", "--scope", "global"])
    assert (
        entity.scope == "global" and not parser.parse_args(["entity", "add", "x", "--kind", "tool"]).is_global
    )


def test_unique_prefix() -> None:
    ids = ["3f2a9c01", "3f2b0000", "77aa"]
    assert unique_prefix("3f2a", ids, "session") == "3f2a9c01"
    assert unique_prefix("77aa", ids, "session") == "77aa"
    assert unique_prefix("zz", ids, "session") == "zz"  # the command's own "not found" speaks
    with pytest.raises(CommandError, match="'3f2' begins more than one session: 3f2a9c01, 3f2b0000"):
        unique_prefix("3f2", ids, "session")


def test_ids_may_be_shortened_on_the_command_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    lore_env: dict[str, str],
) -> None:
    for name, value in lore_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LORE_PORT", "1")  # no gateway: the store is read directly
    monkeypatch.chdir(tmp_path)

    def lore(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = lore(
        "knowledge", "add", "--category", "gotcha", "--title", "Slow CI", "--content", "x", "--json"
    )
    assert code == 0
    created = json.loads(out)["entry"]["id"]
    short = created.removeprefix("k:")[:6]
    code, out, _ = lore("knowledge", "show", short, "--json")  # without its k:, six characters
    assert code == 0 and json.loads(out)["entry"]["id"] == created
    code, out, _ = lore("knowledge", "delete", f"k:{short}", "--json")
    assert code == 0 and json.loads(out)["status"] == "deleted"

    code, out, _ = lore("entity", "add", "payments-api", "--kind", "service", "--json")
    entity = json.loads(out)["entity"]["id"]
    code, out, _ = lore("entity", "alias", entity[:6], "payments", "--json")
    assert code == 0 and json.loads(out)["entity"]["aliases"] == ["payments"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_bash_completion_completes_what_the_parser_accepts(tmp_path: Path) -> None:
    script = tmp_path / "lore.bash"
    script.write_text(bash_script(command_tree(build_parser([]))))

    def complete(line: str) -> list[str]:
        probe = (
            f"source {script}; read -ra COMP_WORDS <<< {line!r}; "
            f"[[ {line!r} == *' ' ]] && COMP_WORDS+=(''); COMP_CWORD=$((${{#COMP_WORDS[@]}}-1)); "
            '_lore; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
        return done.stdout.split()

    assert complete("lore know") == ["knowledge"]
    assert complete("lore knowledge a") == ["add", "approve"]
    assert complete("lore sessions --l") == ["--limit"]
    assert complete("lore knowledge add --g") == ["--global"]
    assert "duckdb-compact" in complete("lore d")  # a plugin's command
