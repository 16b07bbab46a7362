"""The local embedder passes the kernel's embedder conformance suite with the real model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lore_embed_local import EmbedLocalConfig, LocalEmbedder

from lore_core.testing.conformance.embedder import EmbedderConformance


class TestLocalEmbedder(EmbedderConformance):
    @pytest.fixture
    def make_embedder(self) -> Callable[[], LocalEmbedder]:
        return LocalEmbedder

    @pytest.fixture
    def embedder(self, embedder: LocalEmbedder) -> LocalEmbedder:
        # The conftest's one loaded model (loading costs ~1 s); the checks that need a fresh
        # object (the vector space survives a restart) build their own.
        return embedder

    @pytest.fixture
    def make_unavailable_embedder(self, tmp_path: Path) -> Callable[[], LocalEmbedder]:
        missing = tmp_path / "nowhere" / "model.onnx"
        return lambda: LocalEmbedder(EmbedLocalConfig(model_path=str(missing)))
