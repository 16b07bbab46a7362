"""Text that points somewhere points at something that exists: no reference to a design
document that is not in the repository, and every ``lore_core.*`` name cited in the code's
comments and docstrings, the docs and the README resolves to a module or an attribute."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = [*(ROOT / "lore_core").rglob("*.py"), *(ROOT / "plugins").glob("*/lore_*/**/*.py")]
TEXTS = [*CODE, *(ROOT / "docs").glob("*.md"), ROOT / "README.md", *(ROOT / "plugins").glob("*/README.md")]
CITED = re.compile(r"\blore_core(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def test_no_reference_to_a_document_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in CODE
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "MISSION" in line
    ]
    assert not offenders, f"cite docs/*.md instead: {offenders}"


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_every_cited_lore_core_name_exists() -> None:
    missing: dict[str, list[str]] = {}
    for path in TEXTS:
        for name in set(CITED.findall(path.read_text(encoding="utf-8"))):
            if not _resolves(name):
                missing.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert not missing, missing


NUMBERS = {"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}


def test_the_hooks_guide_counts_the_hooks_and_names_every_built_in_plugin() -> None:
    from lore_core import hookspecs
    from lore_core.plugins import BUILTIN_PLUGINS

    text = (ROOT / "docs" / "hooks.md").read_text(encoding="utf-8")
    said = re.search(r"The (\w+) `lore_register_\*` hooks", text)
    registers = [name for name in hookspecs.all_hookspec_names() if name.startswith("lore_register_")]
    assert said and NUMBERS[said.group(1)] == len(registers), (said, registers)
    listed = text[text.index("`BUILTIN_PLUGINS`") :].split(")", 1)[0]
    assert all(
        f"`{name.rsplit('.', 1)[1]}`" in listed or f"`{name}`" in listed for name in BUILTIN_PLUGINS
    ), listed
