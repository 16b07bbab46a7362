"""The package map stays honest: every package of the kernel says what it is."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "lore_core"


def package_dirs() -> list[Path]:
    """``lore_core`` and every directory under it that holds Python modules."""
    return sorted(
        {KERNEL}
        | {
            path.parent
            for path in KERNEL.rglob("*.py")
            if not any(p == "__pycache__" or p.startswith(".") for p in path.relative_to(KERNEL).parts)
        }
    )


def test_every_kernel_package_has_an_init_with_a_docstring():
    problems = []
    for directory in package_dirs():
        init = directory / "__init__.py"
        where = init.relative_to(ROOT)
        if not init.is_file():
            problems.append(f"{directory.relative_to(ROOT)}/: no __init__.py (a package needs one)")
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"), filename=str(init)))
        if not doc or not doc.strip():
            problems.append(f"{where}:1: no docstring saying what the package is")
    assert not problems, "kernel packages without a described __init__.py:\n" + "\n".join(
        f"  {p}" for p in problems
    )
