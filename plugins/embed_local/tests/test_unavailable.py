"""A model that cannot load: a clear health reason, a specific exception, one log line."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from lore_embed_local import EmbedderUnavailable, EmbedLocalConfig, LocalEmbedder


def embed_error(emb: LocalEmbedder, texts: list[str]) -> EmbedderUnavailable:
    with pytest.raises(EmbedderUnavailable) as info:
        asyncio.run(emb.embed(texts))
    return info.value


def test_a_missing_model_file_is_reported_by_health_and_embed(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "model.onnx"
    emb = LocalEmbedder(EmbedLocalConfig(model_path=str(missing)))

    health = emb.health()
    assert health["ok"] is False
    assert str(missing) in health["detail"]
    assert "full-text search only" in health["detail"]

    error = embed_error(emb, ["hello"])
    assert str(missing) in error.reason
    assert emb.health()["ok"] is False
    assert emb.health()["reason"] == error.reason


def test_a_corrupt_model_file_fails_on_load_then_health_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"this is not an onnx model" * 100)
    emb = LocalEmbedder(EmbedLocalConfig(model_path=str(broken)))
    # The file exists, so before loading health cannot know better.
    assert emb.health()["ok"] is True

    with caplog.at_level(logging.WARNING, logger="lore.embed_local"):
        errors = [embed_error(emb, ["hello"]) for _ in range(3)]
        with pytest.raises(EmbedderUnavailable):
            asyncio.run(emb.load())

    assert all("onnxruntime cannot load" in e.reason and str(broken) in e.reason for e in errors)
    health = emb.health()
    assert health["ok"] is False
    assert "onnxruntime cannot load" in health["detail"]
    # Said once, not once per call.
    warnings = [r for r in caplog.records if r.name == "lore.embed_local"]
    assert len(warnings) == 1
    assert "full-text search only" in warnings[0].getMessage()


def test_a_missing_tokenizer_is_reported(tmp_path: Path) -> None:
    missing = tmp_path / "tokenizer.json"
    emb = LocalEmbedder(EmbedLocalConfig(tokenizer_path=str(missing)))
    assert emb.health()["ok"] is False
    assert str(missing) in embed_error(emb, ["hello"]).reason
    with pytest.raises(EmbedderUnavailable):
        emb.chunk("hello " * 1000)


def test_a_corrupt_tokenizer_is_reported(tmp_path: Path) -> None:
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not json", encoding="utf-8")
    error = embed_error(LocalEmbedder(EmbedLocalConfig(tokenizer_path=str(broken))), ["hello"])
    assert "cannot load the tokenizer" in error.reason
