"""docs/hooks.md documents every hook exactly as specified, and every hook has a test.

The hooks are read from :mod:`lore_core.hookspecs` at test time (what pluggy itself sees
through ``add_hookspecs``), so adding, renaming or removing a hookspec is noticed at once.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pluggy
import pytest

from lore_core import hookspecs

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "hooks.md"
THIS = Path(__file__).resolve()


def specified_hooks() -> dict[str, pluggy.HookCaller]:
    """Every hookspec of the module, as a plugin manager registers them."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    return {
        name: caller
        for name, caller in vars(pm.hook).items()
        if isinstance(caller, pluggy.HookCaller) and caller.spec is not None
    }


HOOKS = specified_hooks()
HOOK_NAMES = sorted(HOOKS)


def signature_text(name: str) -> str:
    """``name(arg: Annotation, ...) -> Return`` as written in the source (annotations are
    strings there: ``from __future__ import annotations``)."""
    function = HOOKS[name].spec.function
    sig = inspect.signature(function)

    def annotation(value: object) -> str:
        return value if isinstance(value, str) else inspect.formatannotation(value)

    params = []
    for param in sig.parameters.values():
        text = param.name
        if param.annotation is not inspect.Parameter.empty:
            text += f": {annotation(param.annotation)}"
        if param.default is not inspect.Parameter.empty:
            text += f" = {param.default!r}"
        params.append(text)
    text = f"{name}({', '.join(params)})"
    if sig.return_annotation is not inspect.Signature.empty:
        text += f" -> {annotation(sig.return_annotation)}"
    return text


def squash(text: str) -> str:
    return " ".join(text.replace("`", " ").split()).replace("( ", "(").replace(" )", ")")


def doc_lines() -> list[str]:
    """The reference's lines, those inside fenced code blocks blanked out but for the
    ``lore_x(`` names they call or define (comments there are not headings)."""
    assert DOC.is_file(), f"{DOC.relative_to(ROOT)} is missing"
    lines, fenced = [], False
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
        elif fenced:
            lines.append(" ".join(re.findall(r"\blore_[a-z0-9_]+\s*\(", line)))
        else:
            lines.append(line)
    return lines


def heading_or_row(line: str) -> bool:
    return line.lstrip().startswith(("#", "|"))


def section_of(name: str) -> str:
    """The text from the heading naming ``name`` with its signature to the next heading."""
    lines = doc_lines()
    wanted = squash(signature_text(name))
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#") and wanted in squash(line):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("#")), len(lines))
            return "\n".join(lines[i:end])
    return ""


def package_names() -> set[str]:
    """``lore_core`` and every plugin's top-level package: ``lore_*`` names that are no hook."""
    names = {"lore_core"}
    for child in (ROOT / "plugins").glob("*/*"):
        if child.is_dir() and (child / "__init__.py").is_file():
            names.add(child.name)
    return names


def test_the_hookspecs_are_found():
    assert HOOK_NAMES, "no hookspec found in lore_core.hookspecs"
    marked = {
        name
        for name, value in vars(hookspecs).items()
        if callable(value) and getattr(value, f"{hookspecs.PROJECT_NAME}_spec", None) is not None
    }
    assert set(HOOK_NAMES) == marked


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_every_hook_is_in_the_reference_with_its_signature(name):
    wanted = squash(signature_text(name))
    found = [line for line in doc_lines() if heading_or_row(line) and wanted in squash(line)]
    assert found, (
        f"docs/hooks.md has no heading or table row naming the hook {name} with its signature "
        f"`{signature_text(name)}` (as in lore_core/hookspecs.py)"
    )


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_the_reference_states_the_hook_kind(name):
    opts = HOOKS[name].spec.opts
    section = section_of(name)
    for kind in ("firstresult", "historic"):
        expected = "yes" if opts.get(kind) else "no"
        match = re.search(rf"\*\*{kind}:\*\*\s*(yes|no)\b", section)
        assert match, f"docs/hooks.md: the section of {name} does not say `**{kind}:** yes|no`"
        assert match.group(1) == expected, (
            f"docs/hooks.md says {name} {kind}: {match.group(1)}, the hookspec says {expected}"
        )


def test_the_reference_names_no_hook_that_does_not_exist():
    packages = package_names()
    unknown = []
    for number, line in enumerate(doc_lines(), 1):
        # A name called or given a signature (``lore_x(``) anywhere, and any ``lore_*`` name
        # in a heading or table row that is not a package, must be a hook.
        names = set(re.findall(r"\b(lore_[a-z0-9_]+)\s*\(", line))
        if heading_or_row(line):
            names |= {n for n in re.findall(r"\b(lore_[a-z0-9_]+)\b(?!\.)", line) if n not in packages}
        unknown += [f"docs/hooks.md:{number}: {n}" for n in sorted(names - set(HOOK_NAMES))]
    assert not unknown, "docs/hooks.md names hooks lore_core.hookspecs does not specify:\n" + "\n".join(
        unknown
    )


def suite_files() -> list[Path]:
    """Every Python file of the test suites (``tests/``, ``plugins/*/tests/``) but this one."""
    files = [*(ROOT / "tests").rglob("*.py"), *(ROOT / "plugins").glob("*/tests/**/*.py")]
    return sorted(p.resolve() for p in files if p.resolve() != THIS and "__pycache__" not in p.parts)


def test_the_test_files_are_found():
    sources = suite_files()
    assert THIS not in sources
    assert any(p.name == "test_hookspecs.py" for p in sources)
    assert any("plugins" in p.parts for p in sources)


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_every_hook_has_a_test(name):
    tested_in = [p for p in suite_files() if name in p.read_text(encoding="utf-8", errors="replace")]
    assert tested_in, (
        f"no test names the hook {name}: add one under tests/ or plugins/*/tests/ (this file does not count)"
    )
