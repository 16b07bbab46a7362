"""A passage's kind weighs its score (``engine._prior``): what was said in the conversation
(the user's and the assistant's own prose) before reasoning and tool calls, and those
before a tool's output and what retells the conversation, when their lists score them
alike."""

from __future__ import annotations

from lore_core.recall.fusion import BM25, Ranked, RankedList
from lore_core.recall.ids import Kind, format_id
from lore_core.recall.intent import parse
from lore_core.recall.ranking import OUTPUT_PRIOR, RETOLD_PARTS, RETOLD_PRIOR, WORK_PRIOR, _prior, rank
from lore_core.recall.sources import SourceHit

TEXTS = {
    "thinking": "[assistant thinking]\nthe lock file is stale, so the migration failed",
    "call": "[assistant -> Bash]\nBash:\nrm migration.lock  # the lock file is stale",
    "output": "[tool Bash: ./migrate.sh]\nerror: migration failed: the lock file is stale",
    "said": "[assistant]\nThe migration failed because the lock file was stale.",
    "asked": "[user]\nthe migration failed, is the lock file stale?",
}


def _lists(kinds: dict[str, Kind]) -> list[RankedList]:
    """One full-text list scoring every passage the same."""
    items = [
        Ranked(format_id(kinds.get(key, Kind.MESSAGE), key), 1.0,
               (kinds.get(key, Kind.MESSAGE), SourceHit(key, 1.0, body, {"role": "assistant"})))
        for key, body in TEXTS.items()
    ]  # fmt: skip
    return [RankedList("t:store:bm25:q0", items, 1.0, BM25)]


def test_what_was_said_ranks_before_reasoning_calls_and_outputs() -> None:
    results = rank(_lists({}), parse("why did the migration fail?"), None, 10)
    order = [r.id.split(":", 1)[1] for r in results]
    assert set(order[:2]) == {"said", "asked"}
    assert set(order[2:4]) == {"thinking", "call"}
    assert order[4] == "output"


def test_what_retells_the_conversation_weighs_least_and_knowledge_like_what_was_said() -> None:
    """A distillation, or a client's summary after a compaction (stored as a "user" message
    of many passages), holds every word of what it retells."""
    assert _prior(Kind.DISTILLATION, "[distillation 2026-12-07] part 2/7\n...") == RETOLD_PRIOR
    summary = f"[user] part 3/{RETOLD_PARTS} #decision\n2. Key Technical Concepts: ..."
    assert _prior(Kind.MESSAGE, summary) == RETOLD_PRIOR < WORK_PRIOR
    # The user's own words, and the assistant's long report, are what was said.
    assert _prior(Kind.MESSAGE, f"[user] part 2/{RETOLD_PARTS - 1}\nhere is what I want") == 1.0
    assert _prior(Kind.MESSAGE, f"[assistant] part 3/{RETOLD_PARTS + 4}\n## Review") == 1.0
    assert _prior(Kind.KNOWLEDGE, "Use DuckDB for the store") == 1.0
    assert _prior(Kind.MESSAGE, TEXTS["output"]) == OUTPUT_PRIOR < WORK_PRIOR < 1.0


def test_no_kind_weighs_more_than_its_fusion_score() -> None:
    """The deferred reads (``RecallEngine._rank``) rely on a passage's score in the answer
    being at most its fusion score."""
    for kind in Kind:
        for body in TEXTS.values():
            assert 0.0 < _prior(kind, body) <= 1.0
