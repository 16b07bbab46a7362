"""Splitting long messages into pieces the model reads whole."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from lore_embed_local import LocalEmbedder


def tokens(embedder: LocalEmbedder, text: str) -> int:
    """Tokens the model sees for ``text``, specials included, before any truncation."""
    return len(embedder._ensure_splitter().encode(text).ids)


def test_a_text_that_fits_is_one_piece(embedder: LocalEmbedder) -> None:
    assert embedder.chunk("a short message") == ["a short message"]
    assert embedder.chunk("") == [""]


@pytest.mark.parametrize("max_tokens", [32, 128, 256])
def test_pieces_fit_overlap_and_cover_the_text(
    embedder: LocalEmbedder, prose: Callable[[int, int], str], max_tokens: int
) -> None:
    text = prose(20_000, 5)
    pieces = embedder.chunk(text, max_tokens=max_tokens, overlap=8)
    assert len(pieces) > 1
    assert pieces[0] == text[: len(pieces[0])]
    assert text.endswith(pieces[-1])
    search_from, previous_end = 0, 0
    for piece in pieces:
        assert tokens(embedder, piece) <= max_tokens
        start = text.find(piece, search_from)
        assert start >= 0, "every piece is a substring, in order"
        # Consecutive pieces share text (the first starts at 0): nothing is lost between.
        assert start <= previous_end
        search_from, previous_end = start + 1, start + len(piece)
    assert previous_end == len(text)


def test_pieces_are_cut_between_words(embedder: LocalEmbedder) -> None:
    # Long words become several word pieces; no boundary may fall inside one.
    words = ["internationalisation", "unbelievably", "electroencephalography", "gateway"] * 300
    text = " ".join(words)
    for piece in embedder.chunk(text, max_tokens=40, overlap=5):
        assert set(piece.split()) <= set(words)


def test_the_default_size_is_max_tokens(embedder: LocalEmbedder, prose: Callable[[int, int], str]) -> None:
    pieces = embedder.chunk(prose(10_000, 9))
    assert all(tokens(embedder, piece) <= embedder.settings.max_tokens for piece in pieces)
    # Pieces are near the limit, not needlessly small.
    assert tokens(embedder, pieces[0]) > embedder.settings.max_tokens - 10


def test_a_word_longer_than_a_piece_is_split_inside_and_still_ends(embedder: LocalEmbedder) -> None:
    # 100 characters is the longest word WordPiece splits (longer ones become one [UNK]);
    # this one is dozens of pieces, more than a 16-token window holds.
    word = "".join("zqxjkvbwp"[(i * 7) % 9] for i in range(100))
    text = f"head {word} tail"
    assert tokens(embedder, word) > 16
    pieces = embedder.chunk(text, max_tokens=16, overlap=2)
    assert len(pieces) > 2
    assert pieces[0].startswith("head") and pieces[-1].endswith("tail")


def test_bad_arguments_are_refused(embedder: LocalEmbedder) -> None:
    with pytest.raises(ValueError):
        embedder.chunk("text", max_tokens=2)
    with pytest.raises(ValueError):
        embedder.chunk("text", max_tokens=10, overlap=8)
