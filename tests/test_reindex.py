"""`lore reindex`: a resumable backfill of the vector index with a progress bar, run against
the store directly while no gateway holds it; `lore recall` then searches by meaning."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lore_core import cli
from lore_core.recall.indexer import VectorIndexer
from lore_core.storage.passages import VECTOR_RULES
from lore_core.testing.builders import answer, batch_of, exchange, text
from lore_core.testing.net import free_port
from tests.test_indexer import TopicsPlugin
from tests.test_vectors import TopicEmbedder

pytest.importorskip("lore_store_duckdb")
from lore_store_duckdb.store import DuckDBStore


@pytest.fixture
def db_path(tmp_path: Path, lore_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "data" / "lore.duckdb"
    monkeypatch.setenv("LORE_DB_PATH", str(path))
    monkeypatch.setenv("LORE_PORT", str(free_port()))  # no gateway answers there
    return path


@pytest.fixture
def topics(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The plugins that give the CLI the topic embedder as the ``topics`` provider."""
    monkeypatch.setenv("LORE_EMBEDDING_PROVIDER", "topics")
    return [TopicsPlugin()]


def write_corpus(path: Path, partly_indexed: int = 0) -> None:
    async def main() -> None:
        store = DuckDBStore(path)
        await store.open()
        try:
            await store.write(
                batch_of(
                    exchange(
                        [text("user", "my tabby kitten sleeps all day")], answer("kittens do"), session="a"
                    ),
                    exchange(
                        [text("user", "the postgres migration deadlocked")], answer("retry it"), session="b"
                    ),
                    exchange(
                        [text("user", "how do we ship the rollout")], answer("canary first"), session="c"
                    ),
                )
            )
            if partly_indexed:
                await VectorIndexer(store, TopicEmbedder(), batch_size=partly_indexed).index_batch()
        finally:
            await store.close()

    asyncio.run(main())


def test_reindex_embeds_everything_then_recall_finds_by_meaning(
    db_path: Path, topics: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    write_corpus(db_path)
    assert cli.main(["reindex"], extra_plugins=topics) == 0
    captured = capsys.readouterr()
    assert "6 items embedded" in captured.out and "0 items pending" in captured.out
    index = f"{TopicEmbedder.model_id}@{VECTOR_RULES}"
    assert f"embedding for {index} [" in captured.err and "6/6" in captured.err
    assert "search index [" in captured.err
    # "feline" shares no word with anything stored: only the vectors can find the kitten.
    assert cli.main(["recall", "feline", "--scope", "all", "--json"], extra_plugins=topics) == 0
    captured = capsys.readouterr()
    results = json.loads(captured.out)
    assert results[0]["text"] == "[user]\nmy tabby kitten sleeps all day"
    assert "full-text" not in captured.err
    assert cli.main(["status"], extra_plugins=topics) == 0
    assert f"vectors: {index}: 6 vectors, 0 items pending" in capsys.readouterr().out
    # Nothing left: a second run embeds nothing.
    assert cli.main(["reindex", "--json"], extra_plugins=topics) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["embedded"], summary["vectors"], summary["pending"]) == (0, 6, 0)


def test_reindex_resumes_where_it_stopped(
    db_path: Path, topics: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    write_corpus(db_path, partly_indexed=2)  # an earlier run embedded two items, then stopped
    assert cli.main(["reindex", "--json"], extra_plugins=topics) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["embedded"], summary["vectors"], summary["pending"]) == (4, 6, 0)
    # --full drops this model's vectors and embeds everything again.
    assert cli.main(["reindex", "--full", "--json"], extra_plugins=topics) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["embedded"], summary["vectors"]) == (6, 6)


def test_reindex_refuses_while_a_gateway_holds_the_store(
    start_gateway: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = start_gateway()
    monkeypatch.setenv("LORE_PORT", str(server.port))
    assert cli.main(["reindex"]) == 3
    err = capsys.readouterr().err
    assert "gateway is running" in err and "stop it" in err
    # Its indexer's state is what `lore status` shows instead.
    assert cli.main(["status"]) == 0
    assert "indexer: " in capsys.readouterr().out


def test_reindex_names_an_unknown_provider(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["reindex", "--provider", "nonesuch"]) == 2
    assert "embedding.provider" in capsys.readouterr().err


def test_reindex_with_the_on_device_model(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local = pytest.importorskip("lore_embed_local")
    if not local.LocalEmbedder().health()["ok"]:
        pytest.skip("the packaged on-device model is not installed")
    write_corpus(db_path)
    assert cli.main(["reindex", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == f"{local.LocalEmbedder.model_id}@{VECTOR_RULES}"
    assert (summary["embedded"], summary["dimensions"], summary["pending"]) == (6, 384, 0)
    assert cli.main(["recall", "cat sleeping", "--scope", "all", "--json"]) == 0
    captured = capsys.readouterr()
    assert "kitten" in json.loads(captured.out)[0]["text"]
    assert "full-text" not in captured.err


def test_reindex_says_when_the_model_cannot_be_used(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_indexer import BrokenPlugin

    write_corpus(db_path)
    assert cli.main(["reindex", "--provider", "broken"], extra_plugins=[BrokenPlugin()]) == 3
    assert "the embedding model cannot be used: the model file is missing" in capsys.readouterr().err
