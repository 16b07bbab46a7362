"""Imports of optional modules that are not installed fail at once.

DuckDB's Python client tries ``import pandas`` on every ``execute`` with parameters (to
recognise pandas' missing values) and, when pandas is not installed, does not remember that:
each attempt searches every ``sys.path`` entry again, under the interpreter's import lock.
Measured on a point query of the store (DuckDB 1.5.5, 12 path entries, a busy 2-core
machine): 0.74 ms per query, 0.41 ms when the import fails at once; and since every store
thread queues on that one lock, a saturated gateway's reads waited on each other
(``benchmarks/soak.py``: session-state reads past the context manager's 0.5 s timeout).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

#: Optional modules DuckDB looks for on every query.
DUCKDB_OPTIONAL = ("pandas",)


class AbsentModules(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: an import of one of ``names`` raises at once, as the
    path search would have after walking ``sys.path``."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def fail_fast_when_absent(names: Sequence[str] = DUCKDB_OPTIONAL) -> None:
    """Put an :class:`AbsentModules` first on ``sys.meta_path`` for those of ``names`` not
    installed now (once per process; a module installed later is seen after a restart)."""
    if any(isinstance(finder, AbsentModules) for finder in sys.meta_path):
        return
    absent = [name for name in names if name not in sys.modules and importlib.util.find_spec(name) is None]
    if absent:
        sys.meta_path.insert(0, AbsentModules(absent))
