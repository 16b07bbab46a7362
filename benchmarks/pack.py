"""The memory API under load: event writes per second, pack latency at 10K and 100K events
per run, and freshness lag under a steady write load, each beside a baseline measured in
the same run on the same gateway.

One run starts a real gateway (``lore serve``, its data directory and configuration in a
temporary directory, the default store and embedder) as its own process, then for each run
size:

* **writes**: the run's events in batches of ``--batch`` through ``POST /v1/events``;
  baseline: as many ``GET /health`` round trips (the HTTP floor of one request);
* **consolidation**: how long the pipeline takes to distil the run after the last write;
* **packs**: ``--packs`` ``POST /v1/pack`` with generated queries and a random ``min_seq``;
  baseline: the same queries through ``GET /lore/api/recall`` over the run's memories (the
  retrieval alone, without the envelope and the read-your-writes window).

Then **freshness**: a steady ``--rate`` events/s into a new run for ``--lag-seconds``, packs
twice a second reading ``freshness_lag_ms``; baseline: the configured debounce
(``events.consolidateDelayMs``), the floor of the lag by design.

The events are generated (coding-agent notes: test failures, file edits, decisions, commands
with numbers and paths); nothing here is real traffic. Seconds are this machine's: compare
the ratios, not the absolute figures.

    .venv/bin/python benchmarks/pack.py                          # 10K and 100K: several minutes
    .venv/bin/python benchmarks/pack.py --sizes 10000 --packs 100 --lag-seconds 10   # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lore_core.storage.events import run_session_id  # noqa: E402
from lore_core.testing.net import free_port, wait_for_http  # noqa: E402

PROJECT = "/bench/project"
FILES = ["parser.py", "lexer.py", "store.py", "gateway.py", "tests/test_parser.py", "docs/api.md", "Makefile"]
TEMPLATES = [
    "test_{name} failed: AssertionError at {file}:{line} (expected {a}, got {b})",
    "edited {file}: renamed {name} to {name}_v{a}",
    "decision: keep {name} in {file}; the alternative cost {a} ms per call",
    "ran `pytest -k {name}`: {a} passed, {b} failed in {line}.2s",
    "opened PR #{line} for {name}",
    "the build of {file} took {a} s on CI job {line}",
]
WORDS = [
    "parse_header",
    "flush_queue",
    "retry_budget",
    "tokenize",
    "merge_spans",
    "load_config",
    "render_pack",
]


def event(rng: random.Random, i: int) -> dict[str, Any]:
    text = rng.choice(TEMPLATES).format(
        name=rng.choice(WORDS), file=rng.choice(FILES), line=rng.randint(1, 4000), a=rng.randint(1, 999), b=i
    )
    if i % 25 == 0:
        return {
            "kind": "status",
            "content": f"agent-{i % 3} is on {rng.choice(FILES)}",
            "working": True,
            "key": f"agent-{i % 3}",
        }
    return {"kind": "note", "content": text}


def query(rng: random.Random) -> str:
    return f"{rng.choice(WORDS)} {rng.choice(['failed', 'decision', 'PR', 'build', 'renamed'])}"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


class Gateway:
    def __init__(self, workdir: Path, config: dict[str, Any]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        home = workdir / "home"
        (workdir / ".lore.json").write_text(json.dumps(config))
        self.env = {
            **os.environ,
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "LORE_CONFIG": str(workdir / ".lore.json"),
            "LORE_PORT": str(self.port),
            # No provider is needed; nothing may reach a real one.
            "LORE_UPSTREAM_ANTHROPIC": "http://127.0.0.1:9",
            "LORE_UPSTREAM_OPENAI": "http://127.0.0.1:9",
        }
        self.log = open(workdir / "gateway.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lore_core.cli", "serve"],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_for_http(self.url + "/health", timeout=120)
        token_file = home / ".local" / "share" / "lore" / "gateway.token"
        self.token = token_file.read_text().strip()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def write_run(client: httpx.Client, run: str, total: int, batch: int, seed: int) -> float:
    rng = random.Random(seed)
    start = time.perf_counter()
    for first in range(0, total, batch):
        events = [event(rng, i) for i in range(first + 1, min(total, first + batch) + 1)]
        answer = client.post("/v1/events", json={"project": PROJECT, "run": run, "events": events})
        answer.raise_for_status()
    return time.perf_counter() - start


def health_round_trips(client: httpx.Client, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        client.get("/health").raise_for_status()
    return time.perf_counter() - start


def pack(client: httpx.Client, run: str, text: str, min_seq: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"project": PROJECT, "run": run, "query": text, "token_budget": 2000}
    if min_seq is not None:
        body["min_seq"] = min_seq
    answer = client.post("/v1/pack", json=body)
    answer.raise_for_status()
    return answer.json()


def wait_covered(client: httpx.Client, run: str, total: int, limit: float) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        if pack(client, run, "x")["covered_seq"] >= total:
            return time.perf_counter() - start
        time.sleep(0.5)
    return float("nan")


def wait_embedded(client: httpx.Client, limit: float) -> float:
    """Until the indexer has embedded every memory (so packs are timed alone)."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit:
        indexer = client.get("/health").json().get("indexer", {})
        if indexer.get("state") == "off" or (
            indexer.get("pending") == 0 and indexer.get("state") != "indexing"
        ):
            return time.perf_counter() - start
        time.sleep(1.0)
    return float("nan")


def size_round(client: httpx.Client, total: int, args: argparse.Namespace) -> dict[str, Any]:
    run = f"bench-{total}"
    requests = -(-total // args.batch)
    seconds = write_run(client, run, total, args.batch, seed=total)
    floor = health_round_trips(client, requests)
    distil = wait_covered(client, run, total, args.consolidate_limit)
    embedded = wait_embedded(client, args.consolidate_limit)
    rng = random.Random(7)
    pack_ms, recall_ms = [], []
    session = run_session_id(PROJECT, run)
    for _ in range(args.packs):
        text = query(rng)
        t0 = time.perf_counter()
        pack(client, run, text, min_seq=rng.randint(0, total))
        pack_ms.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        client.get(
            "/lore/api/recall",
            params={"q": text, "scope": "session", "session": session, "project": PROJECT, "limit": 12},
        ).raise_for_status()
        recall_ms.append((time.perf_counter() - t0) * 1000)
    return {
        "events": total,
        "events_per_s": total / seconds,
        "requests_per_s": requests / seconds,
        "health_per_s": requests / floor,
        "consolidation_s": distil,
        "embedded_s": embedded,
        "pack_p50": pct(pack_ms, 0.5),
        "pack_p99": pct(pack_ms, 0.99),
        "recall_p50": pct(recall_ms, 0.5),
        "recall_p99": pct(recall_ms, 0.99),
    }


def freshness(client: httpx.Client, args: argparse.Namespace) -> dict[str, Any]:
    run = "bench-freshness"
    rng = random.Random(11)
    stop = threading.Event()
    written = [0]

    def writer() -> None:
        with httpx.Client(base_url=client.base_url, headers=client.headers, timeout=60) as own:
            interval = 1.0 / args.rate
            next_at = time.perf_counter()
            while not stop.is_set():
                written[0] += 1
                own.post(
                    "/v1/events", json={"project": PROJECT, "run": run, "events": [event(rng, written[0])]}
                ).raise_for_status()
                next_at += interval
                time.sleep(max(0.0, next_at - time.perf_counter()))

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    lags: list[float] = []
    end = time.perf_counter() + args.lag_seconds
    time.sleep(1.0)
    while time.perf_counter() < end:
        lags.append(float(pack(client, run, "x")["freshness_lag_ms"]))
        time.sleep(0.5)
    stop.set()
    thread.join(30)
    settle = wait_covered(client, run, written[0], 120)
    return {
        "rate": args.rate,
        "written": written[0],
        "lag_p50": pct(lags, 0.5),
        "lag_p99": pct(lags, 0.99),
        "lag_max": max(lags) if lags else 0.0,
        "mean": statistics.fmean(lags) if lags else 0.0,
        "settle_s": settle,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000", help="events per run, comma-separated")
    parser.add_argument("--batch", type=int, default=100, help="events per POST /v1/events")
    parser.add_argument("--packs", type=int, default=200, help="packs (and recalls) per run size")
    parser.add_argument("--rate", type=float, default=50.0, help="events/s of the freshness load")
    parser.add_argument("--lag-seconds", type=float, default=30.0, help="how long the freshness load runs")
    parser.add_argument("--delay-ms", type=int, default=250, help="events.consolidateDelayMs")
    parser.add_argument("--consolidate-limit", type=float, default=1800.0, help="seconds to wait for a run")
    parser.add_argument("--workdir", default=None, help="keep the gateway's files here")
    args = parser.parse_args(argv)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="lore-pack-bench-"))
    gateway = Gateway(workdir, {"events": {"consolidateDelayMs": args.delay_ms}})
    print(f"data: generated coding-agent events; gateway at {gateway.url}, files in {workdir}", flush=True)
    try:
        with httpx.Client(
            base_url=gateway.url, headers={"Authorization": f"Bearer {gateway.token}"}, timeout=120
        ) as client:
            rows = []
            for total in (int(s) for s in args.sizes.split(",")):
                print(f"run of {total:,} events ...", flush=True)
                rows.append(size_round(client, total, args))
            print()
            print(f"writes (batches of {args.batch})      events/s   requests/s   baseline GET /health/s")
            for r in rows:
                print(
                    f"  {r['events']:>9,} events   {r['events_per_s']:>9,.0f}   {r['requests_per_s']:>10,.1f}"
                    f"   {r['health_per_s']:>10,.1f}  ({r['requests_per_s'] / r['health_per_s']:.2f}x)"
                )
            print("consolidation after the last write")
            for r in rows:
                rate = (
                    r["events"] / r["consolidation_s"] if r["consolidation_s"] == r["consolidation_s"] else 0
                )
                print(
                    f"  {r['events']:>9,} events   {r['consolidation_s']:>8.1f} s   ({rate:,.0f} events/s);"
                    f" embedded {r['embedded_s']:.1f} s later"
                )
            print("pack latency (ms)            p50      p99    baseline recall p50    p99")
            for r in rows:
                print(
                    f"  {r['events']:>9,} events {r['pack_p50']:>8.1f} {r['pack_p99']:>8.1f}"
                    f"   {r['recall_p50']:>12.1f} {r['recall_p99']:>8.1f}"
                    f"   ({r['pack_p50'] / max(r['recall_p50'], 1e-9):.2f}x p50)"
                )
            lag = freshness(client, args)
            load = f"{lag['rate']:.0f} events/s for {args.lag_seconds:.0f} s ({lag['written']:,} events)"
            print(f"freshness under {load}:")
            spread = f"p50 {lag['lag_p50']:.0f}, p99 {lag['lag_p99']:.0f}, max {lag['lag_max']:.0f}"
            print(f"  freshness_lag_ms {spread}; baseline (configured debounce) {args.delay_ms} ms")
            print(f"  caught up {lag['settle_s']:.1f} s after the load stopped")
    finally:
        gateway.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
