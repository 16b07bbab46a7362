"""Facets: the sentences of what a person wrote, embedded one by one, and which text of a
passage gets a vector at all (:func:`embedded_body`).

People state facts in passing: "I'm looking for workout playlists ... By the way, I take
Zumba on Tuesdays and Thursdays". One vector of the whole passage is about its main topic
(playlists); a question about the aside ("how many fitness classes do I attend?") ranks it
far down. So a passage the user wrote also gets one vector per sentence, each stored under
the passage's key: the passage is found as well as its best sentence matches (the vector
index keeps a passage's best hit). Measured on LongMemEval (benchmarks/README.md): evidence
turns the vectors ranked 15th-194th by the whole passage come first by a sentence. Only
user text: it is short next to tool output (what a coding session mostly stores), so the
cost is small, and the assistant's long answers would multiply it. Changing these rules
changes :data:`lore_core.storage.passages.FACET_RULES`.
"""

from __future__ import annotations

import re

from lore_core.distill.facts import prose_sentences
from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT
from lore_core.storage.passages import Passage

#: A sentence shorter than this is joined to the next one ("Thanks!" says nothing alone).
FACET_MIN_CHARS = 40
#: Sentences embedded per passage at most (the first ones: a pasted log's lines are not
#: sentences worth a vector each) ...
MAX_FACETS = 12
#: ... and per item (a long paste in a user message is many passages).
MAX_FACETS_PER_ITEM = 24


def sentences(text: str, min_chars: int = FACET_MIN_CHARS) -> list[str]:
    """The prose sentences of ``text`` (:func:`~lore_core.distill.facts.prose_sentences`:
    code blocks and table rows left out), each at least ``min_chars`` long (short ones
    joined to the next; a short tail to the last)."""
    out: list[str] = []
    current = ""
    for piece in prose_sentences(text):
        current = f"{current} {piece}" if current else piece
        if len(current) >= min_chars:
            out.append(current)
            current = ""
    if current:
        if out:
            out[-1] = f"{out[-1]} {current}"
        else:
            out.append(current)
    return out


def _prose(sentence: str) -> bool:
    """Words rather than markup or data: not a tag (a client's ``<command-name>`` echo), at
    least half of it letters (a pasted log line of numbers and ids, or a path, is not; a
    pasted line of code often is, and gets its vector)."""
    letters = sum(c.isalpha() for c in sentence)
    return not sentence.startswith("<") and letters * 2 >= len(sentence)


#: A tool call's or output's first piece is embedded up to this many characters: its
#: header and first lines say what it is; the rest is found by its words.
TOOL_EMBED_CHARS = 600
_PIECE = re.compile(r" part (\d+)/\d+")


def embedded_body(passage: Passage) -> str | None:
    """The text of ``passage`` that gets a vector, ``None`` for none. What was said (the
    user's and assistant's words, reasoning, distillations) is embedded whole. A tool call
    or output is embedded by its first piece only, cut to :data:`TOOL_EMBED_CHARS`: they are
    62% of what real coding sessions store, their meaning is in their header and first
    lines, and a question about the rest names its words (a path, an error, a number),
    which full-text search finds. Leaving the later pieces out changed none of 262
    real-session answers and embeds about 2.3 times less (docs/recall.md, "Indexing")."""
    if passage.block not in (TOOL_CALL, TOOL_RESULT):
        return passage.text
    piece = _PIECE.search(passage.text.split("\n", 1)[0])
    if piece is not None and int(piece.group(1)) > 1:
        return None
    return passage.text[:TOOL_EMBED_CHARS]


def facets(role: str, passage: Passage) -> list[str]:
    """The texts embedded beside ``passage``'s own, under its key: the sentences of a
    passage of the user's text when it has more than one, those that are prose, at most
    :data:`MAX_FACETS`. Tool output, tool calls, the assistant's words and distillations
    have none."""
    if role != "user" or passage.block != TEXT:
        return []
    found = sentences(passage.body)
    if len(found) < 2:
        return []
    return [s for s in found if _prose(s)][:MAX_FACETS]
