"""One real embedder shared by the tests that only read from it (loading costs ~1 s)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator

import pytest
from lore_embed_local import LocalEmbedder


@pytest.fixture(scope="session")
def embedder() -> Iterator[LocalEmbedder]:
    emb = LocalEmbedder()
    asyncio.run(emb.load())
    yield emb
    asyncio.run(emb.close())


_WORDS = (
    "the gateway stores every message and the model recalls them later through hybrid search "
    "over full text and vectors while a proxy relays streamed responses from the provider "
    "config file plugin session project token batch thread queue latency cache index"
).split()


def _prose(chars: int, seed: int) -> str:
    """Deterministic word soup of ``chars`` characters."""
    rng = random.Random(seed)
    words: list[str] = []
    length = 0
    while length < chars:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:chars]


@pytest.fixture(scope="session")
def prose() -> Callable[[int, int], str]:
    return _prose
