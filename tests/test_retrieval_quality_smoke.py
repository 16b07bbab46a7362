"""Smoke test of ``benchmarks/retrieval_quality.py``: its metric code on hand-made cases, the
replay of a session into store records, the fixed question selection, and a real run of the
BM25 leg (DuckDB store, recall engine) on shipped LongMemEval questions."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys
from pathlib import Path

import pytest

from lore_core.recall.ids import Kind

ROOT = Path(__file__).resolve().parents[1]


def _load_benchmark():
    spec = importlib.util.spec_from_file_location(
        "retrieval_quality", ROOT / "benchmarks" / "retrieval_quality.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


rq = _load_benchmark()


def test_recall_at_k_hand_made():
    ranked = ["a", "b", "c", "d", "e", "f"]
    assert rq.recall_at_k(ranked, ["c", "z"], 5) == {"any": 1.0, "all": 0.0, "frac": 0.5}
    assert rq.recall_at_k(ranked, ["a", "e"], 5) == {"any": 1.0, "all": 1.0, "frac": 1.0}
    assert rq.recall_at_k(ranked, ["f"], 5) == {"any": 0.0, "all": 0.0, "frac": 0.0}
    assert rq.recall_at_k(ranked, ["f"], 6)["all"] == 1.0
    assert rq.recall_at_k([], ["a"], 10) == {"any": 0.0, "all": 0.0, "frac": 0.0}
    with pytest.raises(ValueError):
        rq.recall_at_k(ranked, [], 5)


def test_score_question_turns_and_distinct_sessions():
    question = {
        "evidence_turns": [
            {"session_id": "s1", "turn_index": 2, "role": "user"},
            {"session_id": "s3", "turn_index": 0, "role": "user"},
        ],
        "answer_session_ids": ["s1", "s3"],
    }
    # Turn level: (s1, 2) at rank 1, (s3, 0) at rank 7; duplicates do not take a rank.
    turns = [("s1", 2), ("s1", 2), ("s2", 0), ("s2", 1), ("s2", 2), ("s4", 0), ("s4", 1), ("s3", 0)]
    # Session level counts distinct sessions: s3 is the 4th distinct session although the
    # 8th turn, so it is in the top 5 sessions.
    deep = [("s1", 0), ("s1", 1), ("s2", 0), ("s2", 5), ("s4", 0), ("s4", 1), ("s4", 2), ("s3", 0)]
    s = rq.score_question(question, rq.dedupe(turns), deep)
    assert s["turn any@5"] == 1.0 and s["turn all@5"] == 0.0 and s["turn frac@5"] == 0.5
    assert s["turn all@10"] == 1.0 and s["turn frac@10"] == 1.0
    assert s["session all@5"] == 1.0 and s["session frac@5"] == 1.0
    # The first 3 distinct sessions are s1, s2, s4: s3 is missed at k=3.
    assert rq.score_question(question, turns, deep, ks=(3,))["session frac@3"] == 0.5


def test_ranked_turns_maps_message_ids_to_turns_in_rank_order():
    turns_of = {"m1": [("s1", 1)], "m2": [("s2", 3), ("s2", 4)], "m3": [("s1", 0)]}
    ids = ["t:m2", "d:abc", "t:m1", "t:unknown", "t:m2", "t:m3"]
    assert rq.ranked_turns(ids, turns_of) == [("s2", 3), ("s2", 4), ("s1", 1), ("s1", 0)]


def test_session_batch_one_message_per_turn_and_coalesced_assistant_items():
    session = {
        "session_id": "sess_1",
        "date": "2023/05/20 (Sat) 02:21",
        "turns": [
            {"role": "user", "content": "I adopted a cat named Biscuit.", "has_answer": True},
            {"role": "assistant", "content": "Congratulations!", "has_answer": False},
            {"role": "assistant", "content": "Cats love boxes.", "has_answer": False},
            {"role": "user", "content": "", "has_answer": False},
        ],
    }
    batch, turns_of = rq.session_batch("q1", session)
    assert [m.role for m in batch.messages] == ["user", "assistant", "user"]
    assert {m.project for m in batch.messages} == {"/longmemeval/q1"}
    assert all(m.created_at == rq.parse_date(session["date"]) for m in batch.messages)
    by_position = {m.position: turns_of[m.id] for m in batch.messages}
    assert by_position == {0: [("sess_1", 0)], 1: [("sess_1", 1), ("sess_1", 2)], 2: [("sess_1", 3)]}
    assert "Biscuit" in batch.messages[0].text


def test_parse_date_is_utc():
    assert rq.parse_date("2023/05/20 (Sat) 02:21") == 1684549260.0


def test_selection_is_fixed_stratified_and_skips_abstention():
    questions = rq.load_questions()
    assert len(questions) == 112
    picked = rq.select_questions(questions, 30)
    assert len(picked) == 30
    assert picked == rq.select_questions(questions, 30)
    assert not any(q["is_abstention"] for q in picked)
    types = {q["question_type"] for q in picked}
    assert len(types) == 6  # every question type is represented
    everything = rq.select_questions(questions, None)
    assert len(everything) == 106 and all(q["evidence_turns"] for q in everything)
    assert rq.select_questions(questions, 500) == everything


def test_exact_vector_source_ranks_by_cosine_and_filters_by_project():
    import numpy as np

    from lore_core.recall.ids import Scope
    from lore_core.recall.sources import SearchFilter
    from lore_core.store import StoredMessage

    msgs = [
        StoredMessage(
            id="a", session_id="s", parent_id=None, position=0, role="user", text="x", project="/p"
        ),
        StoredMessage(
            id="b", session_id="s", parent_id=None, position=1, role="user", text="y", project="/p"
        ),
        StoredMessage(
            id="c", session_id="t", parent_id=None, position=0, role="user", text="z", project="/q"
        ),
    ]
    vectors = np.array([[1.0, 0.0], [0.6, 0.8], [1.0, 0.0]], dtype=np.float32)
    source = rq.ExactVectorSource(msgs, vectors)
    hits = asyncio.run(source.search_vector([0.0, 1.0], SearchFilter(Scope.PROJECT, project="/p"), 5))
    assert [h.key for h in hits] == ["b", "a"]
    assert math.isclose(hits[0].score, 0.8, rel_tol=1e-6) and hits[0].kind is Kind.MESSAGE
    hits = asyncio.run(source.search_vector([1.0, 0.0], SearchFilter(Scope.PROJECT), 1))
    assert [h.key for h in hits] == ["a"]


def test_bm25_leg_on_shipped_questions(tmp_path):
    """Two real questions through the DuckDB store and the recall engine's text source."""
    wanted = {"58bf7951", "c4ea545c"}
    questions = {q["question_id"]: q for q in rq.load_questions() if q["question_id"] in wanted}
    haystacks = list(rq.iter_haystacks(wanted))
    assert {h["question_id"] for h in haystacks} == wanted
    for h in haystacks:
        q = questions[h["question_id"]]
        scores = asyncio.run(rq.run_question(q, h, ["bm25"], None, tmp_path))
        s = scores["bm25"]
        assert set(s) == {
            f"{lv} {m}@{k}" for lv in ("turn", "session") for m in ("any", "all", "frac") for k in (5, 10)
        }
        assert all(0.0 <= v <= 1.0 for v in s.values())
        # Keyword questions whose evidence BM25 finds: proves hits map back to the labelled turns.
        assert s["turn any@10"] == 1.0 and s["session any@5"] == 1.0
        assert s["turn frac@5"] <= s["turn frac@10"]
    assert not any(tmp_path.iterdir())  # each question's store is removed


def test_cli_bm25_only_prints_the_table(capsys):
    assert rq.main(["--methods", "bm25", "--questions", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "2 questions" in out and "| turn | all@10 |" in out and "| session | frac@5 |" in out
    assert rq.main(["--methods", "bm25,nonsense", "--questions", "1"]) == 2
