"""docs/architecture.md's package table says what each part of the kernel may import; this
test reads the table and checks every kernel module's imports against it (parsed with
:mod:`ast` by the helpers of ``test_import_rules``), so the table stays what the code does
and a new coupling between packages is a decision written into it, not an accident."""

from __future__ import annotations

import re
from pathlib import Path

import attrs

from tests.test_import_rules import KERNEL, ROOT, check, imports_of, module_name, python_files

TABLE = ROOT / "docs" / "architecture.md"
_TICKED = re.compile(r"`([^`]+)`")


@attrs.frozen
class Row:
    #: Top-level modules (``gateway``) and packages (``wire``) the row is about.
    parts: tuple[str, ...]
    #: Module prefixes they may import (``lore_core.storage``, ``lore_core.pipeline.turn``).
    allowed: tuple[str, ...]
    everything: bool


def table_rows() -> list[Row]:
    text = TABLE.read_text(encoding="utf-8")
    table = text[text.index("| Package | Lines |") :].split("\n\n", 1)[0]
    rows = []
    contract: tuple[str, ...] = ()  # the first row's modules (the table says so below it)
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        parts = tuple(name.rstrip("/") for name in _TICKED.findall(cells[0]))
        contract = contract or parts
        may = cells[-1]
        allowed = [f"lore_core.{name.replace('/', '.')}" for name in _TICKED.findall(may)]
        if "the contract" in may or "each other" in may:
            allowed += [f"lore_core.{name}" for name in contract]
        rows.append(Row(parts, tuple(allowed), "everything" in may))
    return rows


def part_of(module: str) -> str:
    """``lore_core.storage.records`` -> ``storage``; ``lore_core.gateway`` -> ``gateway``."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else "lore_core"


def test_the_table_names_every_part_of_the_kernel_once() -> None:
    named = [part for row in table_rows() for part in row.parts]
    assert len(named) == len(set(named)), named
    present = {part_of(module_name(p)) for p in python_files(KERNEL)} - {"__init__", "lore_core"}
    assert present == set(named), (sorted(present - set(named)), sorted(set(named) - present))


def test_every_kernel_import_is_one_the_table_allows() -> None:
    rows = {part: row for row in table_rows() for part in row.parts}
    violations = []
    for path in python_files(KERNEL):
        importer = part_of(module_name(path))
        row = rows.get(importer)
        if row is None or row.everything:
            continue  # lore_core/__init__.py, and the parts that may import anything
        for imp in imports_of(path):
            name = imp.names[0]
            if not name.startswith("lore_core"):
                continue
            if name == "lore_core" or part_of(name) == importer:
                continue  # the package root (its hookimpl marker), and the part's own modules
            wanted = [n for n in imp.names if n.startswith("lore_core.")]
            if not any(n == a or n.startswith(a + ".") for n in wanted for a in row.allowed):
                violations.append(imp)
    check("kernel imports docs/architecture.md's table does not allow", violations)


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    rows = {part: row for row in table_rows() for part in row.parts}
    assert "lore_core.http" not in rows["wire"].allowed and not rows["wire"].everything
    assert (
        "lore_core.pipeline" not in rows["interfaces"].allowed
        and "lore_core.storage" in rows["interfaces"].allowed
    )
    assert rows["cli"].everything
