"""Smoke test of ``benchmarks/retrieval_quality.py``: its metric code on hand-made cases, the
replay of a session into store records, the fixed question selection, a real run of the BM25
leg (DuckDB store, recall engine) on shipped LongMemEval questions, and all three legs (the
indexer and the store's vector index with the real on-device embedder) on a tiny haystack."""

from __future__ import annotations

import asyncio
import importlib.util
import pickle
import sys
from pathlib import Path

import pytest

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


def _tiny_case() -> tuple[dict, dict]:
    chatter = [
        "Can you suggest a good recipe for banana bread?",
        "Sure: mash three ripe bananas, mix with flour, sugar, butter and an egg, bake for an hour.",
        "What is the capital of Australia?",
        "Canberra is the capital of Australia.",
        "How do I change a flat bicycle tyre?",
        "Remove the wheel, lever the tyre off, replace the inner tube and pump it up.",
        "Recommend a science fiction novel please.",
        "Try The Left Hand of Darkness by Ursula K. Le Guin.",
    ]
    sessions = [
        {
            "session_id": f"noise_{i}",
            "date": f"2023/01/0{i + 1} (Mon) 10:00",
            "turns": [
                {"role": "user" if j % 2 == 0 else "assistant", "content": text, "has_answer": False}
                for j, text in enumerate(chatter[2 * i : 2 * i + 2])
            ],
        }
        for i in range(4)
    ]
    sessions.insert(
        2,
        {
            "session_id": "answer_1",
            "date": "2023/01/03 (Tue) 09:00",
            "turns": [
                {
                    "role": "user",
                    "content": "We just brought home a kitten and named her Miso.",
                    "has_answer": True,
                },
                {"role": "assistant", "content": "Lovely! Kittens need lots of play.", "has_answer": False},
            ],
        },
    )
    question = {
        "question_id": "tiny",
        "question": "What did I call my new cat?",
        "answer_session_ids": ["answer_1"],
        "evidence_turns": [{"session_id": "answer_1", "turn_index": 0, "role": "user"}],
    }
    return question, {"question_id": "tiny", "sessions": sessions}


def test_all_three_legs_on_a_tiny_haystack_with_the_real_embedder(tmp_path):
    """The vector leg as the product runs it: the indexer embeds the stored messages into the
    store's vector index, the recall engine searches it; and the optional embedding cache."""
    question, haystack = _tiny_case()
    embedder = rq.Embedder(tmp_path / "cache")
    try:
        scores = asyncio.run(
            rq.run_question(question, haystack, rq.METHODS, embedder, tmp_path / "w", ks=(1, 5))
        )
    finally:
        asyncio.run(embedder.close())
    # No word of the question is in the evidence ("cat" vs "kitten"): full text cannot find
    # it, the vectors rank it first, and fusion keeps it in the top 5.
    assert scores["bm25"]["turn any@5"] == 0.0
    assert scores["vector"]["turn any@1"] == 1.0 and scores["vector"]["session all@1"] == 1.0
    assert scores["hybrid"]["turn any@5"] == 1.0
    assert embedder.texts >= 10  # every stored turn and the query
    again = rq.Embedder(tmp_path / "cache")
    try:
        cached = asyncio.run(
            rq.run_question(question, haystack, ["vector"], again, tmp_path / "w", ks=(1, 5))
        )
    finally:
        asyncio.run(again.close())
    assert again.texts == 0 and cached["vector"] == scores["vector"]


def test_dumped_lists_replay_to_the_scores_of_the_run(tmp_path):
    """``--dump-lists`` keeps what recall ranked; ``rank_replay.py`` feeds it through the
    engine's own ``rank`` and must score exactly what the run scored."""
    spec = importlib.util.spec_from_file_location("rank_replay", ROOT / "benchmarks" / "rank_replay.py")
    assert spec and spec.loader
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    question, haystack = _tiny_case()
    lists = tmp_path / "lists"
    lists.mkdir()
    embedder = rq.Embedder(tmp_path / "cache")
    try:
        scores = asyncio.run(
            rq.run_question(question, haystack, ["hybrid"], embedder, tmp_path / "w", dump_dir=lists)
        )
    finally:
        asyncio.run(embedder.close())
    dumps = [pickle.loads(path.read_bytes()) for path in lists.glob("*.pickle")]
    assert len(dumps) == 1 and dumps[0]["searches"][10]["lists"]
    assert replay.replay(dumps, replay.engine) == [scores["hybrid"]]
    assert scores["hybrid"]["turn any@5"] == 1.0


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
    assert "2 question(s)" in out and "| turn | all@10 |" in out and "| session | frac@5 |" in out
    assert rq.main(["--methods", "bm25,nonsense", "--questions", "1"]) == 2
    assert rq.main(["--methods", "bm25", "--only", "58bf7951,nope"]) == 2
    assert "nope" in capsys.readouterr().err
