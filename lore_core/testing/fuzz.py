"""Shared pieces of the property-based fuzz tests (``tests/test_fuzz_*.py``) and of
``benchmarks/fuzz.py`` that runs them at scale. Needs ``hypothesis`` (a dev dependency):
nothing outside the tests imports this module.

* :data:`FUZZ`: the hypothesis settings every fuzz property runs with. ``LORE_FUZZ_EXAMPLES``
  sets the examples per property (CI runs the small default); runs are reproducible
  (``derandomize``) and write no example database into the work tree.
* :class:`Tally`: counts the cases of one target and, when ``LORE_FUZZ_REPORT`` names a file,
  appends ``{"target", "cases", "failures", "seconds"}`` to it as one JSON line (the
  benchmark's table; the seconds are reported, never asserted).
* :func:`json_values`, :func:`texts`: valid JSON values and unicode text.
* :func:`log_problems`: the gateway log records a fuzz case must not produce.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

# hypothesis keeps caches (Unicode tables, constants of the code under test) in ./.hypothesis:
# outside the work tree instead, unless told where (the example database is off, below).
if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
    set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "lore-hypothesis")

EXAMPLES_ENV = "LORE_FUZZ_EXAMPLES"
REPORT_ENV = "LORE_FUZZ_REPORT"
#: Examples per property in CI: both fuzz files together stay well under a minute on 2 cores.
CI_EXAMPLES = 25


def examples() -> int:
    value = os.environ.get(EXAMPLES_ENV, "").strip()
    return max(1, int(value)) if value else CI_EXAMPLES


settings.register_profile(
    "lore-fuzz",
    max_examples=examples(),
    # The cases talk to a real gateway on a shared machine: no per-example time limit.
    deadline=None,
    # The same examples every run (CI must be reproducible); no .hypothesis/ directory.
    derandomize=True,
    database=None,
    # One gateway per test, reset between examples (starting one per example is seconds).
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    print_blob=False,
)
FUZZ = settings.get_profile("lore-fuzz")


class Tally:
    """The cases one fuzz target ran, and whether it failed, for the benchmark's report."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.cases = 0
        self.started = time.monotonic()

    def case(self) -> None:
        self.cases += 1

    def __enter__(self) -> Tally:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        failures = 0
        if exc is not None:
            # hypothesis raises a group when it found several distinct failing examples.
            failures = len(exc.exceptions) if isinstance(exc, BaseExceptionGroup) else 1
        report = os.environ.get(REPORT_ENV)
        if report:
            seconds = round(time.monotonic() - self.started, 2)
            line = json.dumps(
                {"target": self.target, "cases": self.cases, "failures": failures, "seconds": seconds}
            )
            with Path(report).open("a", encoding="utf-8") as f:
                f.write(line + "\n")


def texts(max_size: int = 24) -> st.SearchStrategy[str]:
    """Unicode text of every plane (no surrogates: json.dumps would write them as escapes
    only; the fuzz tests add lone surrogates on purpose where they mean to)."""
    return st.text(max_size=max_size)


def json_scalars() -> st.SearchStrategy[Any]:
    return (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | texts()
    )


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value: scalars, arrays and objects nested a few levels."""
    return st.recursive(
        json_scalars(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts(10), inner, max_size=4),
        max_leaves=max_leaves,
    )


def log_problems(records: list[logging.LogRecord]) -> list[str]:
    """Records that show the gateway broke: an error, or any traceback."""
    return [
        f"{r.levelname} {r.name}: {r.getMessage()}"
        for r in records
        if r.levelno >= logging.ERROR or r.exc_info is not None
    ]
