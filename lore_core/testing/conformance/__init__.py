"""Conformance suites, one per plugin kind: a plugin's tests subclass its suite.

* :class:`~lore_core.testing.conformance.store.StoreConformance` (``store``)
* :class:`~lore_core.testing.conformance.embedder.EmbedderConformance` (``embedder``)
* :class:`~lore_core.testing.conformance.codec.CodecConformance` (``codec``; needs hypothesis)
* :class:`~lore_core.testing.conformance.harness.HarnessConformance` (``harness``)

The names are importable from here too; each module is imported only when its suite is first
used, so importing this package pulls in neither pytest nor hypothesis.
"""

from __future__ import annotations

import importlib
from typing import Any

_SUITES = {
    "StoreConformance": "store",
    "EmbedderConformance": "embedder",
    "CodecConformance": "codec",
    "HarnessConformance": "harness",
}

__all__ = list(_SUITES)


def __getattr__(name: str) -> Any:
    module = _SUITES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
