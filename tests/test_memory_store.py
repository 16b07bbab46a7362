"""The kernel's in-memory reference store passes the store conformance suite."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.interfaces import Store
from lore_core.testing.conformance.store import StoreConformance


class TestMemoryStore(StoreConformance):
    persistent = False

    @pytest.fixture
    def make_store(self) -> Callable[[], Store]:
        return MemoryStore
