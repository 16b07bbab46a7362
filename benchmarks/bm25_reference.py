"""The plain-BM25 reference of the real-session question sets, measured in the same run.

What the data sets' READMEs call "plain BM25": Okapi BM25 (k1 1.5, b 0.75, idf
``log((N - n + 0.5) / (n + 0.5) + 1)``, tokens ``\\w+`` lower-cased, each distinct query term
counted once) over the replayed text of every session item cut into 2,000-character slices,
one index per project; the query is the question, the retrieved text the top 10 slices joined
(about 20,000 characters, against the recall tool's 8,000). A system's margin over this on
both folders is the signal, so ``real_sessions.py`` prints it beside its own figure.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from transcripts import Question, Session, replayed_text

SLICE_CHARS = 2000
TOP = 10
K1, B = 1.5, 0.75
_TOKEN = re.compile(r"\w+")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class Bm25Index:
    def __init__(self, slices: Sequence[str]) -> None:
        self.slices = list(slices)
        self.freqs = [Counter(_tokens(s)) for s in self.slices]
        self.lengths = [sum(f.values()) for f in self.freqs]
        self.average = sum(self.lengths) / max(1, len(self.lengths))
        self.df: Counter[str] = Counter()
        for f in self.freqs:
            self.df.update(f.keys())

    def top(self, query: str, k: int = TOP) -> list[str]:
        n = len(self.slices)
        terms = dict.fromkeys(_tokens(query))
        idf = {t: math.log((n - self.df[t] + 0.5) / (self.df[t] + 0.5) + 1) for t in terms if self.df[t]}
        scored = []
        for i, f in enumerate(self.freqs):
            score = 0.0
            norm = K1 * (1 - B + B * self.lengths[i] / self.average)
            for t, w in idf.items():
                tf = f.get(t)
                if tf:
                    score += w * tf * (K1 + 1) / (tf + norm)
            if score > 0:
                scored.append((score, i))
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [self.slices[i] for _, i in scored[:k]]


def _slices(texts: Iterable[str]) -> list[str]:
    out = []
    for text in texts:
        for start in range(0, len(text), SLICE_CHARS):
            out.append(text[start : start + SLICE_CHARS])
    return out


def answers(sessions: Sequence[Session], questions: Sequence[Question]) -> dict[str, str]:
    """Question id -> the reference's retrieved text, searched in the question's project."""
    by_project: dict[str, list[str]] = defaultdict(list)
    for session in sessions:
        for window in session.windows:
            by_project[session.project].extend(replayed_text(item) for item in window.items)
    indexes = {project: Bm25Index(_slices(texts)) for project, texts in by_project.items()}
    project_of = {s.id: s.project for s in sessions}
    return {q.id: "\n".join(indexes[project_of[q.session]].top(q.question)) for q in questions}
