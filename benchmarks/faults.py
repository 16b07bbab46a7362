"""The fault campaign: every fault the gateway is promised to survive, run and tabled.

Each fault is exercised by tests of the suite (real sockets, a real gateway; the store
faults with the DuckDB store): this runs those tests through pytest and prints, per fault,
what is expected and what happened. The data is generated (scripted upstream answers,
generated conversations). Run it by hand from the repository root::

    python benchmarks/faults.py             # about three minutes on 2 cores
    python benchmarks/faults.py --verbose   # pytest's own output too

The exit status is non-zero when any case fails. The load soak (200 concurrent streaming
sessions) is ``benchmarks/soak.py``; ``benchmarks/crash.py`` kills the gateway 20+ times.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DUCKDB = "plugins/store_duckdb/tests/test_gateway_duckdb.py"
TRANSPORT = "tests/test_proxy_transport.py"
FAULTS = "tests/test_faults.py"


@dataclass
class Fault:
    area: str
    name: str
    expected: str
    tests: list[str]
    outcomes: dict[str, str] = field(default_factory=dict)  # node id -> outcome
    seconds: float = 0.0


CAMPAIGN = [
    Fault(
        "upstream",
        "connection refused",
        "502 in the API's error shape after bounded retries",
        [f"{TRANSPORT}::test_unreachable_upstream_gives_502_in_the_api_shape"],
    ),
    Fault(
        "upstream",
        "reset / cut inside the headers",
        "retried, then 502 in the API's shape; /health names the upstream until it answers",
        [f"{FAULTS}::test_upstream_reset_before_answering"],
    ),
    Fault(
        "upstream",
        "5xx",
        "502/503/504 retried with backoff; a lasting one (and any 500) reaches the client as sent",
        [
            f"{TRANSPORT}::test_retries_503_then_succeeds",
            f"{TRANSPORT}::test_persistent_503_reaches_the_client_after_bounded_retries",
            f"{TRANSPORT}::test_client_errors_and_rate_limits_are_not_retried_and_arrive_verbatim",
        ],
    ),
    Fault(
        "upstream",
        "slow headers",
        "retried after upstream.headerTimeoutSeconds, then 502 saying so",
        [f"{TRANSPORT}::test_header_timeout_is_retried_then_reported"],
    ),
    Fault(
        "upstream",
        "slow body",
        "JSON: 502 in the API's shape after readTimeoutSeconds; stream: cut for the client too",
        [f"{FAULTS}::test_upstream_body_stops_arriving"],
    ),
    Fault(
        "upstream",
        "mid-stream drop",
        "the client's stream is cut too (never ended as if complete); partial answer kept",
        [
            f"{TRANSPORT}::test_an_upstream_stream_cut_off_is_cut_off_for_the_client_too",
            "tests/test_recall_proxy_edges.py::test_a_continuation_cut_off_aborts_the_client_stream",
            "tests/test_recall_proxy_edges.py::test_non_streaming_first_answer_cut_off_is_a_502",
        ],
    ),
    Fault(
        "upstream",
        "malformed SSE",
        "relayed as it came (the recall loop holds closing events to the end); no traceback",
        [f"{FAULTS}::test_malformed_event_stream_is_relayed_as_it_came"],
    ),
    Fault(
        "upstream",
        "non-JSON or wrong-shape body",
        "the upstream's own status and bytes",
        [
            f"{FAULTS}::test_non_json_error_body_reaches_the_client_as_sent",
            f"{FAULTS}::test_a_200_of_the_wrong_shape_is_relayed_as_is",
        ],
    ),
    Fault(
        "client",
        "disconnect mid-stream",
        "upstream request cancelled; the partial answer stored, marked incomplete",
        [f"{TRANSPORT}::test_client_disconnect_mid_stream_cancels_upstream_and_keeps_partial"],
    ),
    Fault(
        "store",
        "locked by another process",
        "traffic flows; /health degraded with the reason; written without loss once free",
        [f"{DUCKDB}::test_locked_database_degrades_then_recovers_without_loss"],
    ),
    Fault(
        "store",
        "disk full",
        "traffic flows; /health degraded; every exchange written once when there is room",
        [
            f"{DUCKDB}::test_a_full_disk_degrades_then_everything_is_written_once",
            "tests/test_journal.py::test_a_failed_append_leaves_no_torn_frame_behind",
        ],
    ),
    Fault(
        "store",
        "corrupted file at start-up",
        "traffic flows; file left untouched; the journal replays into a new database",
        [f"{DUCKDB}::test_corrupted_database_degrades_but_traffic_flows"],
    ),
    Fault(
        "store",
        "gateway killed (kill -9)",
        "every exchange answered in full is stored exactly once after the restart",
        [
            "tests/test_journal.py::test_sigkill_before_the_write_loses_no_answered_exchange",
            f"{DUCKDB}::test_sigkill_mid_load_keeps_every_durable_exchange",
        ],
    ),
    Fault(
        "embedder",
        "cannot load / crash / hang",
        "traffic flows; recall answers from full-text search; /health says why",
        [
            "tests/test_indexer.py::test_gateway_with_an_embedder_that_cannot_load_serves_full_text",
            f"{FAULTS}::test_embedder_crash_or_hang",
        ],
    ),
    Fault(
        "worker",
        "429 storm / hung",
        "requests answered throughout; bounded calls, breaker opens; extractive observer distils",
        [
            f"{FAULTS}::test_worker_429_storm_or_hung",
            "tests/test_distill_scheduler.py::test_a_hung_worker_never_holds_up_the_request_path",
        ],
    ),
]


class Collector:
    """A pytest plugin: each test's outcome and duration, filed under its fault."""

    def __init__(self, campaign: list[Fault]) -> None:
        self.campaign = campaign

    def _fault(self, nodeid: str) -> Fault | None:
        for fault in self.campaign:
            if any(nodeid == t or nodeid.startswith((t + "[", t + "::")) for t in fault.tests):
                return fault
        return None

    def pytest_runtest_logreport(self, report: Any) -> None:
        fault = self._fault(report.nodeid)
        if fault is None:
            return
        fault.seconds += report.duration
        if report.when == "call" or report.outcome != "passed":
            previous = fault.outcomes.get(report.nodeid)
            if previous in (None, "passed"):
                fault.outcomes[report.nodeid] = report.outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--verbose", action="store_true", help="show pytest's output")
    args = parser.parse_args(argv)
    targets = sorted({t for fault in CAMPAIGN for t in fault.tests})
    collector = Collector(CAMPAIGN)
    began = time.monotonic()
    pytest.main(
        [*targets, "-p", "no:randomly", *([] if args.verbose else ["-q", "--no-header"])], plugins=[collector]
    )
    wall = time.monotonic() - began

    print()
    print("Fault campaign (generated data: scripted upstream answers, generated conversations)")
    print(f"{'area':9} {'fault':32} {'cases':>5} {'passed':>6} {'seconds':>7}  expected")
    totals: dict[str, int] = defaultdict(int)
    for fault in CAMPAIGN:
        cases = len(fault.outcomes)
        passed = sum(1 for outcome in fault.outcomes.values() if outcome == "passed")
        totals["cases"] += cases
        totals["passed"] += passed
        mark = "" if cases and passed == cases else "  <-- FAILED" if cases else "  <-- NOT RUN"
        figures = f"{cases:5} {passed:6} {fault.seconds:7.1f}"
        print(f"{fault.area:9} {fault.name:32} {figures}  {fault.expected}{mark}")
    print(f"{'':9} {'total':32} {totals['cases']:5} {totals['passed']:6} {wall:7.1f}  (wall time of the run)")
    failed = [nid for fault in CAMPAIGN for nid, outcome in fault.outcomes.items() if outcome != "passed"]
    for nodeid in failed:
        print(f"FAILED {nodeid}")
    empty = [fault.name for fault in CAMPAIGN if not fault.outcomes]
    return 1 if failed or empty or not totals["cases"] else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
