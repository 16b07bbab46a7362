"""The import rules that keep the kernel, the plugins and the test kit apart, checked by
parsing every module's imports with :mod:`ast` (no module is imported).

Every ``import x`` and ``from x import y`` counts wherever it is (module level, inside a
function, under ``if TYPE_CHECKING:``), relative imports resolved against the module's
package, and so does ``importlib.import_module("x")`` / ``__import__("x")`` with a constant
name. The rules:

1. the kernel (``lore_core/``) never imports a plugin package;
2. a plugin never imports another plugin: its own package, ``lore_core`` and third-party
   libraries only;
3. product code never imports the test kit: no module of ``lore_core/`` outside
   ``lore_core/testing/`` imports ``lore_core.testing``, ``pytest`` or ``hypothesis``, and no
   plugin package (outside its ``tests/``) does either;
4. no branch on a built-in wire API name outside the wire packages: the names below appear as
   string constants only under ``lore_core/wire/`` (and where ``lore_core/config.py`` declares
   a setting's accepted values). Tests and the test kit are exempt;
5. no closed vocabulary in the kernel: a built-in provider's name appears as a string
   constant only under ``lore_core/wire/`` (where ``providers.py`` declares them, as any
   plugin declares its own), and no module of the kernel but ``lore_core/toolkinds.py`` keeps
   a table of tool names (a set, tuple or list of them given a name). The test kit is exempt.

Plugin packages are discovered from the folders: every top-level package in ``plugins/*/``
(or ``plugins/*/src/``).
"""

from __future__ import annotations

import ast
import functools
import textwrap
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "lore_core"
PLUGINS = ROOT / "plugins"
TEST_KIT = KERNEL / "testing"
WIRE = KERNEL / "wire"

TEST_KIT_MODULE = "lore_core.testing"
TEST_LIBRARIES = ("pytest", "_pytest", "hypothesis")
WIRE_API_NAMES = frozenset({"anthropic-messages", "openai-chat", "openai-responses"})
#: The built-in providers' names (``lore_core/wire/providers.py``; a test below keeps the two
#: lists equal).
PROVIDER_NAMES = frozenset({"anthropic", "openai"})
#: The one tool-kind table.
TOOL_KIND_TABLE = KERNEL / "toolkinds.py"
WIRE_NAME_ALLOWED = {
    # ``WorkerAPI = Literal["", "anthropic-messages", ...]`` declares the values the
    # ``worker.api`` setting accepts: validating a setting is not a branch on the API, and the
    # configuration cannot import the wire packages' codecs to ask them their names.
    KERNEL / "config.py",
}


@attrs.frozen
class Import:
    path: Path
    line: int
    #: Every module name the statement may import: ``from a import b`` gives ``a`` and ``a.b``
    #: (``b`` may be a submodule).
    names: tuple[str, ...]
    source: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.source}"


def plugin_packages() -> dict[str, Path]:
    """Top-level package name -> the plugin folder holding it."""
    found: dict[str, Path] = {}
    for plugin in sorted(p for p in PLUGINS.iterdir() if p.is_dir()):
        for base in (plugin, plugin / "src"):
            for child in sorted(base.glob("*/__init__.py")):
                if child.parent.name not in {"tests", "src"}:
                    found[child.parent.name] = plugin
    return found


PACKAGES = plugin_packages()


def python_files(base: Path) -> list[Path]:
    return sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    """The dotted name of a kernel or plugin module (plugins' files relative to their folder)."""
    if path.is_relative_to(KERNEL):
        rel = path.relative_to(ROOT)
    else:
        plugin = PLUGINS / path.relative_to(PLUGINS).parts[0]
        rel = path.relative_to(plugin)
        if rel.parts[0] == "src":
            rel = rel.relative_to("src")
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts)


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def resolve(module: str | None, level: int, importer: str, package: bool) -> str:
    """The absolute name ``from <level dots><module> import ...`` refers to in ``importer``."""
    if level == 0:
        return module or ""
    parts = importer.split(".")
    if not package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, *([module] if module else [])])


def imports_in(tree: ast.AST, path: Path, importer: str, package: bool, text: str) -> Iterator[Import]:
    lines = text.splitlines()

    def source(node: ast.stmt | ast.expr) -> str:
        end = node.end_lineno or node.lineno
        return " ".join(" ".join(lines[node.lineno - 1 : end]).split())

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(path, node.lineno, (alias.name,), source(node))
        elif isinstance(node, ast.ImportFrom):
            base = resolve(node.module, node.level, importer, package)
            names = [base] if base else []
            names += [f"{base}.{a.name}" if base else a.name for a in node.names if a.name != "*"]
            yield Import(path, node.lineno, tuple(names), source(node))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if (
                called in {"import_module", "__import__"}
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                yield Import(path, node.lineno, (first.value,), source(node))


@functools.cache
def parsed(path: Path) -> tuple[ast.Module, str]:
    text = path.read_text(encoding="utf-8")
    return ast.parse(text, filename=str(path)), text


def imports_of(path: Path) -> list[Import]:
    tree, text = parsed(path)
    return list(imports_in(tree, path, module_name(path), is_package(path), text))


def top(name: str) -> str:
    return name.split(".", 1)[0]


def is_within(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def under(path: Path, *bases: Path) -> bool:
    return any(path.is_relative_to(base) for base in bases)


def plugin_product_files() -> list[Path]:
    """Every module of every plugin package, without the tests."""
    files = []
    for package, plugin in PACKAGES.items():
        root = plugin / "src" / package if (plugin / "src" / package).is_dir() else plugin / package
        files += [p for p in python_files(root) if "tests" not in p.relative_to(root).parts]
    return files


def check(rule: str, violations: list[object]) -> None:
    """Fail naming every offending file, line and import, one a line."""
    if violations:
        pytest.fail(f"{rule}:\n" + "\n".join(f"  {v}" for v in violations), pytrace=False)


# ---------------------------------------------------------------------------------------------
# The checker itself
# ---------------------------------------------------------------------------------------------


def test_the_plugin_packages_are_discovered():
    assert {"lore_store_duckdb", "lore_harness_claude", "lore_embed_local"} <= set(PACKAGES)
    assert "lore_core" not in PACKAGES and "tests" not in PACKAGES


def test_every_kind_of_import_is_seen_and_relative_ones_resolved():
    code = textwrap.dedent(
        """
        import a.b as ab, c
        from . import sibling
        from .. import up
        from ..other.mod import thing
        from .local import *

        def later():
            from lore_core import testing
            import importlib
            importlib.import_module("lore_store_duckdb.plugin")
        """
    )
    path = KERNEL / "pkg" / "sub" / "mod.py"
    found = [i.names for i in imports_in(ast.parse(code), path, "lore_core.pkg.sub.mod", False, code)]
    assert found == [
        ("a.b",),
        ("c",),
        ("lore_core.pkg.sub", "lore_core.pkg.sub.sibling"),
        ("lore_core.pkg", "lore_core.pkg.up"),
        ("lore_core.pkg.other.mod", "lore_core.pkg.other.mod.thing"),
        ("lore_core.pkg.sub.local",),
        ("lore_core", "lore_core.testing"),
        ("importlib",),
        ("lore_store_duckdb.plugin",),
    ]
    # In a package's __init__.py one dot is the package itself.
    assert resolve("x", 1, "lore_core.pkg", package=True) == "lore_core.pkg.x"
    assert (
        module_name(PLUGINS / "store_duckdb" / "lore_store_duckdb" / "plugin.py")
        == "lore_store_duckdb.plugin"
    )


# ---------------------------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------------------------


def test_the_kernel_never_imports_a_plugin():
    violations = [
        imp
        for path in python_files(KERNEL)
        for imp in imports_of(path)
        if any(top(name) in PACKAGES for name in imp.names)
    ]
    check("the kernel imports a plugin package", violations)


def test_a_plugin_never_imports_another_plugin():
    violations = []
    for plugin in sorted(set(PACKAGES.values())):
        own = {package for package, folder in PACKAGES.items() if folder == plugin}
        for path in python_files(plugin):
            for imp in imports_of(path):
                others = {top(name) for name in imp.names} & (set(PACKAGES) - own)
                if others:
                    violations.append(f"{imp}  (imports {', '.join(sorted(others))})")
    check("a plugin imports another plugin", violations)


def test_a_plugin_reaches_the_gateway_through_the_public_module_not_the_cli():
    """Plugins' product code never imports the ``lore`` command's modules (``lore_core.cli``):
    a command of theirs reaches the gateway through ``lore_core.local_gateway``."""
    violations = []
    for plugin in sorted(set(PACKAGES.values())):
        for path in python_files(plugin):
            if "tests" in path.relative_to(plugin).parts:
                continue
            violations += [
                str(imp)
                for imp in imports_of(path)
                if any(n == "lore_core.cli" or n.startswith("lore_core.cli.") for n in imp.names)
            ]
    check("a plugin imports the lore command's modules", violations)


def test_product_code_never_imports_the_test_kit():
    violations = []
    kernel_product = [p for p in python_files(KERNEL) if not under(p, TEST_KIT)]
    for path in [*kernel_product, *plugin_product_files()]:
        for imp in imports_of(path):
            if any(is_within(name, TEST_KIT_MODULE) or top(name) in TEST_LIBRARIES for name in imp.names):
                violations.append(imp)
    check("product code imports the test kit", violations)


def test_no_branch_on_a_wire_api_name_outside_the_wire_packages():
    kernel_product = [
        p for p in python_files(KERNEL) if not under(p, TEST_KIT, WIRE) and p not in WIRE_NAME_ALLOWED
    ]
    violations = []
    for path in [*kernel_product, *plugin_product_files()]:
        tree, _ = parsed(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in WIRE_API_NAMES:
                violations.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    check(
        "a wire API name outside lore_core/wire (move the per-API logic into the codec's package)",
        violations,
    )


# ---------------------------------------------------------------------------------------------
# No closed vocabularies in the kernel (provider names, tool kinds)
# ---------------------------------------------------------------------------------------------


def kernel_product_files() -> list[Path]:
    return [p for p in python_files(KERNEL) if not under(p, TEST_KIT)]


def test_the_provider_names_are_the_built_in_declarations():
    from lore_core.wire.providers import BUILTIN_PROVIDERS

    assert {p.name for p in BUILTIN_PROVIDERS} == PROVIDER_NAMES


def test_no_provider_name_outside_the_wire_packages():
    """The kernel knows a provider only from its declaration (``lore_register_providers``):
    a codec with a provider of its own gets what the built-in ones get."""
    violations = []
    for path in kernel_product_files():
        if under(path, WIRE):
            continue
        tree, _ = parsed(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in PROVIDER_NAMES:
                violations.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    check(
        "a provider's name outside lore_core/wire (declare what the kernel needs on "
        "interfaces.Provider and read it from the registry's providers)",
        violations,
    )


def _strings(node: ast.AST) -> list[str]:
    """The strings of a set, tuple or list literal, or of ``frozenset``/``set``/``tuple`` of one."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
        if node.func.id in {"frozenset", "set", "tuple", "list"}:
            return _strings(node.args[0])
    if isinstance(node, ast.Set | ast.Tuple | ast.List):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def tool_name_tables(tree: ast.AST) -> list[tuple[int, list[str]]]:
    """Collections of two or more tool names (as the table knows them) given a name."""
    from lore_core.toolkinds import DEFAULT_TOOL_KINDS

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            names = [s for s in _strings(node.value) if s.lower() in DEFAULT_TOOL_KINDS]
            if len(names) >= 2:
                found.append((node.lineno, names))
    return found


def test_the_tool_table_finder_finds_the_old_tables():
    code = textwrap.dedent(
        """
        _EDIT_TOOLS = frozenset({"edit", "multiedit", "str_replace"})
        READ_TOOLS: frozenset[str] = frozenset({"Read", "read_file"})
        SHELL = ("Bash", "exec_command")
        NOT_TOOLS = ("command", "path")
        ONE = ["Read"]
        """
    )
    assert [line for line, _ in tool_name_tables(ast.parse(code))] == [2, 3, 4]


def test_no_tool_name_table_outside_the_tool_kind_table():
    """What a tool does is read from ``lore_core/toolkinds.py`` (extended by plugins through
    ``lore_tool_kinds``), never from a list of names of its own."""
    violations = []
    for path in kernel_product_files():
        if path == TOOL_KIND_TABLE:
            continue
        tree, _ = parsed(path)
        for line, names in tool_name_tables(tree):
            violations.append(f"{path.relative_to(ROOT)}:{line}: {', '.join(names)}")
    check(
        "a table of tool names outside lore_core/toolkinds.py (ask tool_kind(name) instead)",
        violations,
    )
