"""The rule that keeps the store's optional tiers declared, checked by parsing every kernel
module with :mod:`ast` (no module is imported), as :mod:`tests.test_import_rules` does.

A store says which tiers it has in ``Store.tiers`` (``lore_core.interfaces.Tier``), and a
harness whether it launches a client in ``Harness.launches``; the kernel asks those
declarations before it uses a tier or a capability. So no module of ``lore_core/`` outside
the test kit (``lore_core/testing/``) mentions ``NotImplementedError`` other than to raise
it: no ``except NotImplementedError`` (alone or in a tuple), no ``isinstance(...,
NotImplementedError)``, no ``contextlib.suppress(NotImplementedError)``, no helper that
builds one to be raised elsewhere. Calling a member to find out whether it works is the
probing the declarations replace. (Raising it stays allowed: a base class's member that a
subclass must override, such as ``Codec.parse``.)
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

from tests.test_import_rules import KERNEL, ROOT, TEST_KIT, check, parsed, python_files, under

NAME = "NotImplementedError"


def probes(tree: ast.AST) -> Iterator[int]:
    """The lines where ``NotImplementedError`` is named other than as what a ``raise`` raises
    (``raise NotImplementedError`` or ``raise NotImplementedError(...)``)."""
    raised: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == NAME:
                raised.add(id(exc))
    for node in ast.walk(tree):
        named = (isinstance(node, ast.Name) and node.id == NAME) or (
            isinstance(node, ast.Attribute) and node.attr == NAME
        )
        if named and id(node) not in raised:
            yield node.lineno  # type: ignore[attr-defined]
        # ``-> NotImplementedError`` in a string annotation (``from __future__ import annotations``).
        if isinstance(node, ast.Constant) and node.value == NAME:
            yield node.lineno


def _lines(code: str) -> list[int]:
    return sorted(set(probes(ast.parse(textwrap.dedent(code)))))


def test_the_checker_finds_every_kind_of_probing():
    code = """
        import builtins
        import contextlib

        class Codec:
            def parse(self):
                raise NotImplementedError
            def render(self):
                raise NotImplementedError("a codec renders")

        async def recall(store):
            try:
                return await store.vector_search()
            except NotImplementedError:
                return []

        def others(exc, store):
            try:
                store.entities()
            except (KeyError, builtins.NotImplementedError):
                pass
            with contextlib.suppress(NotImplementedError):
                store.knowledge()
            return isinstance(exc, NotImplementedError)

        def _not_implemented(store) -> "NotImplementedError":
            return NotImplementedError(f"the {store.name} store has no tier")
        """
    assert _lines(code) == [14, 20, 22, 24, 26, 27]


def test_the_kernel_asks_the_declared_tiers_instead_of_probing():
    violations = []
    for path in python_files(KERNEL):
        if under(path, TEST_KIT):
            continue
        tree, _ = parsed(path)
        violations += [f"{Path(path).relative_to(ROOT)}:{line}" for line in sorted(set(probes(tree)))]
    check(
        "NotImplementedError caught or probed in the kernel (ask the declaration instead: "
        "`Tier.X in store.tiers`, lore_core.interfaces.tier_of, Harness.launches)",
        violations,
    )
