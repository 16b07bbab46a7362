"""Load and isolation: hundreds of concurrent streaming sessions through a real gateway for
minutes; nothing lost, duplicated or filed under another session, and memory flat.

One run starts the loopback fake provider (``python -m lore_core.testing.fake_upstream
--echo``: every answer is ``answer to <the question>``, streamed in a few deltas) and a real
gateway (``lore serve``, the DuckDB store and everything installed, its home, config and data
in a temporary directory) as two processes on free ports. From this process, ``--sessions``
concurrent clients then hold multi-turn conversations (``lore_core/testing/soak.py``):
Claude Code on the Messages API, OpenCode on Chat Completions, Codex on Responses, each with
the session id its harness reads, and a plain SDK with none (the gateway fingerprints it).
Every turn resends the whole history and streams; each conversation has ``--min-turns`` to
``--max-turns`` turns, then its client starts a new one, until ``--duration`` seconds have
passed (turns in flight finish; a hard deadline ``--grace`` seconds later cancels what is
left). First, a short phase sends the same streams straight to the fake (the baseline).

While the gateway runs, its RSS is sampled every ``--sample-every`` seconds. At the end the
gateway is stopped cleanly (SIGTERM: it flushes its writer) and the store is read directly:
every turn a client received in full must be stored exactly once (its user message and its
answer), under its own session, and no stored session may hold another conversation's text.
The exit status is 1 if any check fails (missing, duplicated, misfiled, merged or split
sessions, forks, a stream that carried another question's answer) or the gateway answered
with a 5xx. The data is generated. With ``--reopened-store`` a first gateway creates the
store and stops before the one under load opens it, as after a restart (DuckDB never
checkpointed on a reopened store until 2026-12-04, and a new store hid it). Run it by hand::

    python benchmarks/soak.py                                  # 200 sessions, 4 minutes
    python benchmarks/soak.py --sessions 50 --duration 30      # a quick look
    python benchmarks/soak.py --reopened-store                 # on a store a first gateway made
    python benchmarks/soak.py --min-turns 1 --max-turns 3      # ~10x the new sessions: tables fill
    python benchmarks/soak.py --help
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lore_store_duckdb.store import DuckDBStore

from lore_core.testing.net import free_port, spawn_logged, stop_process, wait_until_serving
from lore_core.testing.soak import KINDS, Load, Tally, Verdict, read_store_file, run_load, verify

MIB = 1024 * 1024


# ---------------------------------------------------------------------------------------------
# Servers (the same way as proxy_overhead.py and crash.py start them)
# ---------------------------------------------------------------------------------------------


@dataclass
class Servers:
    work: Path
    upstream: str = ""
    gateway: str = ""
    db: Path = Path()
    gateway_log: Path = Path()
    gateway_proc: subprocess.Popen[bytes] | None = None
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)


@contextlib.contextmanager
def servers(args: argparse.Namespace) -> Iterator[Servers]:
    """The echoing fake provider and the gateway in their own processes, always stopped."""
    with tempfile.TemporaryDirectory(prefix="lore-soak-") as tmp:
        run = Servers(work=Path(tmp))
        try:
            port = free_port()
            log = run.work / "fake-upstream.log"
            argv = [sys.executable, "-m", "lore_core.testing.fake_upstream", "--port", str(port), "--echo"]
            argv += ["--text-chunks", str(args.text_chunks), "--chunk-delay", str(args.chunk_delay)]
            fake = spawn_logged(argv, dict(os.environ), log, run.work)
            run.processes.append(fake)
            run.upstream = f"http://127.0.0.1:{port}"
            wait_until_serving(fake, run.upstream + "/__health", log)

            home = run.work / "home"
            config = run.work / "lore.json"
            config.write_text(args.gateway_config)
            run.db = run.work / "store" / "lore.duckdb"
            port = free_port()
            env = {
                **os.environ,
                # Keep the gateway away from the user's own config and data.
                "HOME": str(home),
                "XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_DATA_HOME": str(home / ".local" / "share"),
                "XDG_CACHE_HOME": str(home / ".cache"),
                "LORE_CONFIG": str(config),
                "LORE_DB_PATH": str(run.db),
                "LORE_UPSTREAM_ANTHROPIC": run.upstream,
                "LORE_UPSTREAM_OPENAI": run.upstream,
                "LORE_PORT": str(port),
                "LORE_HOST": "127.0.0.1",
            }
            run.gateway_log = run.work / "gateway.log"
            if args.reopened_store:
                # A first gateway creates the store and stops; the one under load opens it
                # again, as after any restart (a fault that only a reopened store showed).
                first = spawn_logged(
                    [sys.executable, "-m", "lore_core.cli", "serve"],
                    env,
                    run.work / "first-gateway.log",
                    run.work,
                )
                wait_until_serving(first, f"http://127.0.0.1:{port}/health", run.work / "first-gateway.log")
                if stop_process(first, timeout=60) != 0 or not run.db.exists():
                    raise RuntimeError(f"the first gateway did not leave a store at {run.db}")
            gateway = spawn_logged(
                [sys.executable, "-m", "lore_core.cli", "serve"], env, run.gateway_log, run.work
            )
            run.processes.append(gateway)
            run.gateway_proc = gateway
            run.gateway = f"http://127.0.0.1:{port}"
            wait_until_serving(gateway, run.gateway + "/health", run.gateway_log)
            yield run
        finally:
            for proc in reversed(run.processes):
                stop_process(proc)


def get_health(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url + "/health", timeout=10) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}


# ---------------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------------


def proc_status(pid: int, key: str) -> int | None:
    """A ``/proc/<pid>/status`` field in KiB (VmRSS, VmHWM); None when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time a process has used so far (Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: Seconds between readings of the store's own memory figures from ``/health``.
STORE_MEMORY_EVERY = 20.0


class RssSampler:
    """VmRSS of a process every ``every`` seconds, from a thread (a busy event loop in this
    process must not skip samples): ``samples`` holds (seconds since start, bytes). With a
    ``gateway`` URL, also what DuckDB says it holds (``/health``: store memory by use) every
    :data:`STORE_MEMORY_EVERY` seconds, in ``store_samples``."""

    def __init__(self, pid: int, every: float, gateway: str | None = None) -> None:
        self.pid = pid
        self.every = every
        self.gateway = gateway
        self.samples: list[tuple[float, int]] = []
        self.store_samples: list[tuple[float, dict[str, float]]] = []
        self.cache_samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._start = 0.0

    def __enter__(self) -> RssSampler:
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        next_store = 0.0
        while True:
            now = time.monotonic() - self._start
            kib = proc_status(self.pid, "VmRSS")
            if kib is not None:
                self.samples.append((now, kib * 1024))
            if self.gateway is not None and now >= next_store:
                next_store = now + STORE_MEMORY_EVERY
                store = (get_health(self.gateway).get("store") or {}).get("store") or {}
                if isinstance(store.get("memory_mib"), dict):
                    self.store_samples.append((now, store["memory_mib"]))
                if isinstance(store.get("index_cache"), dict):
                    self.cache_samples.append((now, store["index_cache"]))
            if self._stop.wait(self.every):
                return


def slope_mib_per_min(samples: Sequence[tuple[float, int]]) -> float:
    """Least-squares slope of RSS over time."""
    if len(samples) < 2:
        return math.nan
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_r = sum(r for _, r in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    if not var:
        return math.nan
    cov = sum((t - mean_t) * (r - mean_r) for t, r in samples)
    return cov / var / MIB * 60


def percentile_ms(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100), in milliseconds."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1] * 1000


async def phase(url: str, load: Load, seconds: float, grace: float) -> Tally:
    """``run_load`` for ``seconds``, cut off ``grace`` seconds later whatever is in flight."""
    tally = Tally()
    deadline = time.monotonic() + seconds
    try:
        async with asyncio.timeout(seconds + grace):
            await run_load(url, load, deadline, tally)
    except TimeoutError:
        pass  # the hard deadline: turns in flight are counted as cancelled
    return tally


def log_problems(path: Path) -> tuple[Counter[str], list[str]]:
    """Lines of the gateway's log by level, and the distinct warning and error lines (the
    first few, digits folded so that repeats of one message count once)."""
    levels: Counter[str] = Counter()
    distinct: Counter[str] = Counter()
    first: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        for level in ("ERROR", "WARNING", "Traceback", "CRITICAL"):
            if level in line:
                levels[level] += 1
                key = re.sub(r"\d+", "N", line.split(level, 1)[1])[:160]
                distinct[key] += 1
                first.setdefault(key, line[:240])
    lines = [f"{first[key]}  (x{n})" for key, n in distinct.most_common(8)]
    return levels, lines


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


@dataclass
class Run:
    direct: Tally
    gateway: Tally
    verdict: Verdict
    samples: list[tuple[float, int]]
    store_samples: list[tuple[float, dict[str, float]]]
    cache_samples: list[tuple[float, dict[str, float]]]
    hwm: int | None
    gateway_cpu: float | None
    health: dict[str, Any]
    exit_code: int | None
    stop_seconds: float
    log_levels: Counter[str]
    log_errors: list[str]
    describe: str
    load_average: str


def memory_lines(run: Run, args: argparse.Namespace) -> list[str]:
    warm = args.duration * args.warmup_share
    during = [(t, r) for t, r in run.samples if t <= args.duration + 1]
    after = [(t, r) for t, r in during if t >= warm]
    if not during or not after:
        return ["  memory: no samples (not Linux?)"]
    start, warm_rss, end = during[0][1], after[0][1], during[-1][1]
    peak = max(r for _, r in run.samples)
    lines = [
        f"  gateway RSS: {start / MIB:.0f} MiB at the start, {warm_rss / MIB:.0f} MiB at the end of "
        f"warm-up ({after[0][0]:.0f} s), {end / MIB:.0f} MiB at the end ({during[-1][0]:.0f} s), "
        f"max {peak / MIB:.0f} MiB" + (f" (VmHWM {run.hwm / MIB:.0f} MiB)" if run.hwm else ""),
        f"  RSS slope after warm-up: {slope_mib_per_min(after):+.2f} MiB/min "
        f"({len(after)} samples, least squares); end - warm-up: {(end - warm_rss) / MIB:+.1f} MiB",
    ]
    # The same slope over each half of the window: a leak keeps climbing, a cache levels off.
    half = warm + (args.duration - warm) / 2
    first = [(t, r) for t, r in after if t < half]
    second = [(t, r) for t, r in after if t >= half]
    lines.append(
        f"  slope in the first / second half after warm-up: {slope_mib_per_min(first):+.2f} / "
        f"{slope_mib_per_min(second):+.2f} MiB/min"
    )
    # RSS at each tenth of the run and the slope over each tenth after warm-up: whether
    # growth stops, and when.
    tenths = []
    for k in range(1, 11):
        at = args.duration * k / 10
        sample = min(during, key=lambda s: abs(s[0] - at))
        piece = [(t, r) for t, r in after if at - args.duration / 10 <= t < at]
        slope = f" ({slope_mib_per_min(piece):+.1f}/min)" if len(piece) > 2 else ""
        tenths.append(f"{sample[0]:.0f} s {sample[1] / MIB:.0f} MiB{slope}")
    lines.append("  RSS by tenth of the run (slope in that tenth): " + ", ".join(tenths))
    lines.extend(store_memory_lines(run.store_samples, warm))
    lines.extend(without_index_lines(after, run.store_samples))
    lines.extend(index_cache_lines(run.cache_samples, warm))
    return lines


def without_index_lines(
    rss: Sequence[tuple[float, int]], store: Sequence[tuple[float, dict[str, float]]]
) -> list[str]:
    """The RSS slope after warm-up less DuckDB's primary-key indexes (``art_index``): they
    hold every stored message's key (~75 B each) and grow with the data by design, so this
    is the slope of everything else, the part that must be flat."""
    if not rss or len(store) < 2:
        return []
    paired = []
    for t, memory in store:
        if t < rss[0][0]:
            continue
        nearest = min(rss, key=lambda s: abs(s[0] - t))
        paired.append((t, nearest[1] - int(memory.get("art_index", 0.0) * MIB)))
    if len(paired) < 2:
        return []
    return [
        f"  RSS less DuckDB's primary-key indexes, slope after warm-up: {slope_mib_per_min(paired):+.2f} "
        f"MiB/min ({len(paired)} samples, every {STORE_MEMORY_EVERY:g} s)"
    ]


def store_memory_lines(samples: Sequence[tuple[float, dict[str, float]]], warm: float) -> list[str]:
    """What DuckDB itself holds (``duckdb_memory()``) after warm-up and at the end, by use:
    the part of the RSS that grows with the data stored (primary-key indexes)."""
    after = [(t, m) for t, m in samples if t >= warm]
    if len(after) < 2:
        return ["  DuckDB memory: not reported"]
    (t0, first), (t1, last) = after[0], after[-1]
    tags = sorted(set(first) | set(last), key=lambda k: -last.get(k, 0.0))
    total = [(t, int(sum(m.values()) * MIB)) for t, m in after]
    return [
        f"  DuckDB's own memory {t0:.0f} s -> {t1:.0f} s (MiB): "
        + ", ".join(f"{k} {first.get(k, 0.0):.0f} -> {last.get(k, 0.0):.0f}" for k in tags)
        + f"; slope of its total {slope_mib_per_min(total):+.2f} MiB/min"
    ]


def index_cache_lines(samples: Sequence[tuple[float, dict[str, float]]], warm: float) -> list[str]:
    """The LanceDB session's caches (bounded) after warm-up and at the end: RSS that grows
    while they fill is a cache reaching its bound, not a leak."""
    after = [(t, m) for t, m in samples if t >= warm]
    if len(after) < 2:
        return ["  index caches: not reported"]
    (t0, first), (t1, last) = after[0], after[-1]
    return [
        f"  index caches (LanceDB, bounded) {t0:.0f} s -> {t1:.0f} s: {first.get('mib', 0):.0f} -> "
        f"{last.get('mib', 0):.0f} MiB, {first.get('entries', 0):.0f} -> {last.get('entries', 0):.0f} entries"
    ]


def background_line(health: dict[str, Any]) -> str:
    """Whether the background work kept up, before the stop: sessions the distiller tracks
    (a queue that grows when runs fall behind; bounded) and the context manager's store reads
    (a new session's first turn reads its state; past 0.5 s it goes on without)."""
    distill = health.get("distill") or {}
    context = health.get("context") or {}
    events = context.get("events") or {}
    return (
        f"background before the stop: distillation tracks {distill.get('tracked_sessions', '?')} sessions "
        f"({distill.get('turn_runs_waiting', '?')} turn runs waiting, "
        f"{distill.get('untracked_sessions', 0)} dropped from tracking); context composition p50 "
        f"{context.get('compose_ms_p50', '?')} ms, p99 {context.get('compose_ms_p99', '?')} ms, "
        f"store reads past their timeout {events.get('store_timeouts', 0)}"
    )


def report(run: Run, args: argparse.Namespace) -> str:
    g, d, v = run.gateway, run.direct, run.verdict
    kinds = Counter(c.kind for c in g.conversations.values())
    turns = len(g.acknowledged)
    failed = sum(g.errors.values())
    fives = sum(n for status, n in g.statuses.items() if status >= 500)
    sent = sum(1 for c in g.conversations.values() if c.session_id)
    sent_ok = sum(
        1 for label, c in g.conversations.items() if c.session_id and v.homes.get(label) == c.session_id
    )
    fingerprinted = sum(
        1
        for label, c in g.conversations.items()
        if not c.session_id and v.homes.get(label, "").startswith("fp-")
    )
    store = run.health.get("store") or {}
    stats = run.health.get("stats") or {}
    out = [
        "Lore soak benchmark. GENERATED DATA: generated conversations (unique sentences per turn), "
        "answered by the loopback fake provider echoing each question",
        f"parameters: {args.sessions} concurrent streaming sessions for {args.duration:g} s through the "
        f"gateway (after {args.direct_seconds:g} s straight to the fake), {args.min_turns}-{args.max_turns} "
        f"turns per session, think time 0-{args.think:g} s, fake streams of {args.text_chunks} text deltas "
        f"{args.chunk_delay * 1000:g} ms apart, warm-up {args.warmup_share:.0%}, RSS every "
        f"{args.sample_every:g} s, seed {args.seed}, gateway config {args.gateway_config}, "
        f"store {'reopened (created and stopped by a first gateway)' if args.reopened_store else 'new'}",
        f"machine: python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs shared by the clients, the fake and the gateway; "
        f"load average at start {run.load_average}",
        run.describe,
        "",
        f"sessions: {len(g.conversations)} conversations ("
        + ", ".join(f"{k} {kinds[k]}" for k in KINDS)
        + f"), {turns} turns received in full, {failed} failed, {g.cancelled} cancelled by the hard deadline",
        "  HTTP statuses: " + ", ".join(f"{s}: {n}" for s, n in sorted(g.statuses.items())),
        "  failures: " + (", ".join(f"{k}: {n}" for k, n in g.errors.most_common()) or "none"),
        f"  stored under the session id the client sent: {sent_ok} of {sent} conversations with one; "
        f"fingerprinted by the gateway (fp-...): {fingerprinted} of {len(g.conversations) - sent} without",
        "  session named in response headers: "
        + (
            ", ".join(f"{k} x{n}" for k, n in g.session_headers.items()) or "never (the gateway does not say)"
        ),
        f"throughput: {turns / g.seconds:.1f} turns/s through the gateway ({g.seconds:.0f} s), "
        f"{len(d.acknowledged) / d.seconds:.1f} turns/s direct ({d.seconds:.0f} s)",
        f"TTFB direct: p50 {percentile_ms(d.ttfb, 50):.1f} ms, p99 {percentile_ms(d.ttfb, 99):.1f} ms "
        f"({len(d.ttfb)} turns)",
        f"TTFB through the gateway: p50 {percentile_ms(g.ttfb, 50):.1f} ms, "
        f"p99 {percentile_ms(g.ttfb, 99):.1f} ms ({len(g.ttfb)} turns)",
    ]
    if run.gateway_cpu is not None and turns:
        out.append(f"gateway CPU: {run.gateway_cpu:.0f} s, {run.gateway_cpu / turns * 1000:.1f} ms per turn")
    out += memory_lines(run, args)
    out += [
        f"gateway stop: exit code {run.exit_code} after {run.stop_seconds:.1f} s; writer before the stop: "
        f"{store.get('exchanges', '?')} exchanges, {store.get('messages_written', '?')} messages written "
        f"in {store.get('batches', '?')} batches, {store.get('queued', '?')} queued, "
        f"{store.get('dropped_messages', '?')} dropped; upstream errors {stats.get('upstream_errors', 0)}, "
        f"client disconnects {stats.get('client_disconnects', 0)}",
        background_line(run.health),
        "gateway log: "
        + (", ".join(f"{k} {n}" for k, n in run.log_levels.items()) or "no warnings or errors"),
        *(f"    {line}" for line in run.log_errors),
        "",
        f"store: {v.sessions_stored} sessions, {v.messages_stored} messages",
        f"  turns received in full: {v.acknowledged}; stored exactly once under their own session: "
        f"{v.exactly_once}",
        f"  missing: {len(v.missing)}   duplicated: {len(v.duplicated)}   misfiled: {len(v.misfiled)}   "
        f"sessions holding several conversations: {len(v.merged)}   conversations split over sessions: "
        f"{len(v.split)}   forked sessions: {len(v.forked)}   streams with another question's answer: "
        f"{len(v.crossed)}",
        f"  turns stored whose answer the client never had in full (cut at the end): "
        f"{v.unacknowledged_stored}; stored texts naming no conversation: {v.untagged}",
    ]
    for name in ("missing", "duplicated", "misfiled", "merged", "split", "forked", "crossed"):
        for item in getattr(v, name)[:5]:
            out.append(f"    {name}: {item}")
    ok = v.ok and not fives
    verdict = "every turn stored exactly once, each session apart, no 5xx" if ok else "FAILED"
    out.append(f"RESULT: {verdict}")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200, help="concurrent client sessions")
    parser.add_argument("--duration", type=float, default=240.0, help="seconds of load through the gateway")
    parser.add_argument(
        "--direct-seconds", type=float, default=20.0, help="seconds straight to the fake first"
    )
    parser.add_argument("--min-turns", type=int, default=5, help="turns per conversation, at least ...")
    parser.add_argument("--max-turns", type=int, default=40, help="... and at most")
    parser.add_argument("--think", type=float, default=0.5, help="up to this many seconds between turns")
    parser.add_argument("--text-chunks", type=int, default=8, help="text deltas per streamed answer")
    parser.add_argument("--chunk-delay", type=float, default=0.02, help="seconds between the fake's events")
    parser.add_argument("--warmup-share", type=float, default=0.2, help="share of --duration that is warm-up")
    parser.add_argument("--sample-every", type=float, default=2.0, help="seconds between RSS samples")
    parser.add_argument("--grace", type=float, default=60.0, help="hard deadline: seconds after --duration")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gateway-config", default="{}", help="JSON config of the started gateway")
    parser.add_argument(
        "--reopened-store",
        action="store_true",
        help="load a store another gateway created and stopped (as after a restart), not a new one",
    )
    parser.add_argument("--keep-logs", help="copy the gateway's and the fake's logs into this directory")
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.duration <= 0 or not 1 <= args.min_turns <= args.max_turns:
        parser.error("need --sessions >= 1, --duration > 0 and 1 <= --min-turns <= --max-turns")
    try:
        json.loads(args.gateway_config)
    except ValueError as exc:
        parser.error(f"--gateway-config is not JSON: {exc}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    # SIGTERM takes the same way out as Ctrl-C, so the servers are always stopped.
    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        return run_all(args)
    except KeyboardInterrupt:
        print("interrupted: both servers stopped", file=sys.stderr)
        return 130


def run_all(args: argparse.Namespace) -> int:
    load_average = " ".join(f"{x:.1f}" for x in os.getloadavg())

    def load(phase_letter: str) -> Load:
        return Load(
            sessions=args.sessions,
            min_turns=args.min_turns,
            max_turns=args.max_turns,
            think=args.think,
            phase=phase_letter,
            seed=args.seed,
        )

    with servers(args) as srv:
        assert srv.gateway_proc is not None
        pid = srv.gateway_proc.pid
        health = get_health(srv.gateway)
        plugins = ", ".join(p for p in health.get("plugins", []) if not p.startswith("lore_core.")) or "none"
        describe = (
            f"gateway {health.get('version', '?')}: store {(health.get('store') or {}).get('backend', '?')}; "
            f"plugins {plugins}"
        )
        print(f"fake upstream {srv.upstream}, gateway {srv.gateway} (pid {pid})", file=sys.stderr, flush=True)
        print(f"  direct phase: {args.direct_seconds:g} s", file=sys.stderr, flush=True)
        direct = asyncio.run(phase(srv.upstream, load("d"), args.direct_seconds, args.grace))
        print(f"  gateway phase: {args.duration:g} s", file=sys.stderr, flush=True)
        cpu_before = cpu_seconds(pid)
        with RssSampler(pid, args.sample_every, srv.gateway) as sampler:
            gateway = asyncio.run(phase(srv.gateway, load("s"), args.duration, args.grace))
        cpu_after = cpu_seconds(pid)
        gateway_cpu = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
        hwm = proc_status(pid, "VmHWM")
        end_health = get_health(srv.gateway)
        stopping = time.monotonic()
        exit_code = stop_process(srv.gateway_proc, timeout=120)
        stop_seconds = time.monotonic() - stopping
        levels, errors = log_problems(srv.gateway_log)
        if args.keep_logs:
            Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
            for log in srv.work.glob("*.log"):
                shutil.copy(log, Path(args.keep_logs) / log.name)
        print("  reading the store", file=sys.stderr, flush=True)
        stored, branches = read_store_file(DuckDBStore, srv.db)

    run = Run(
        direct=direct,
        gateway=gateway,
        verdict=verify(gateway, stored, branches),
        samples=sampler.samples,
        store_samples=sampler.store_samples,
        cache_samples=sampler.cache_samples,
        hwm=hwm * 1024 if hwm is not None else None,
        gateway_cpu=gateway_cpu,
        health=end_health,
        exit_code=exit_code,
        stop_seconds=stop_seconds,
        log_levels=levels,
        log_errors=errors,
        describe=describe,
        load_average=load_average,
    )
    print(report(run, args))
    fives = sum(n for status, n in gateway.statuses.items() if status >= 500)
    return 0 if run.verdict.ok and not fives else 1


if __name__ == "__main__":
    sys.exit(main())
