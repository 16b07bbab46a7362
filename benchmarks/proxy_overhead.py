"""How much latency and throughput the Lore gateway costs over talking to the provider directly.

One run starts the loopback fake provider and a real gateway (``lore serve``), each in its own
process on a free port, then sends the same Anthropic ``/v1/messages`` load straight to the
fake ("direct", the baseline) and through the gateway, and prints the difference:

* non-streaming: latency p50/p99 (request sent to body fully read) and throughput;
* streaming (``"stream": true``): time to first byte (request sent to the first body chunk,
  i.e. the first SSE event) p50/p99 and throughput;

at each concurrency (default 1 and 16) and for two body sizes (a tiny request and a ~30 KB
one shaped like a coding agent's turn: system prompt, tools, tool calls and results).

Direct and gateway runs are interleaved in rounds so that slow drift on a noisy machine hits
both alike. The load generator is a plain aiohttp client, far cheaper per request than the
gateway, but it shares the CPU with both servers: on a small machine the concurrent figures
include that contention. This is a benchmark, not a test; run it by hand::

    python benchmarks/proxy_overhead.py            # about a minute
    python benchmarks/proxy_overhead.py --help     # counts, sizes, concurrency, ...

Before and after a change, in one run: ``--baseline-src DIR`` starts a second gateway from
another source tree (``git worktree add /tmp/before <commit>``; its ``lore_core`` and
plugins are imported from there, the installed dependencies are shared) and measures it in
the same alternating rounds, as a third target beside direct and the gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from lore_core.testing.net import free_port, spawn_logged, stop_process, wait_until_serving

# The targets the gateway is held to (added on top of the direct figure, at the median).
TARGET_ADDED_P50_MS = 2.0
TARGET_ADDED_TTFB_MS = 3.0

HEADERS = {
    "content-type": "application/json",
    "accept": "application/json",
    "anthropic-version": "2023-06-01",
    "x-api-key": "sk-ant-bench-not-a-real-key",
    # A coding agent's user agent, so the gateway's harness recognition runs as in real use.
    "user-agent": "claude-cli/1.0.0 (external, cli)",
}


# ---------------------------------------------------------------------------------------------
# Request bodies
# ---------------------------------------------------------------------------------------------


def small_body(stream: bool) -> bytes:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "ping"}],
        "stream": stream,
    }
    return json.dumps(body).encode()


def large_body(stream: bool, target_bytes: int = 30_000) -> bytes:
    """A ~30 KB request shaped like one turn of a coding agent's conversation."""
    system = (
        "You are an interactive CLI tool that helps users with software engineering tasks.\n"
        " - Primary working directory: /home/dev/project\n"
        + "Follow the repository's conventions; keep answers short; explain why, not what.\n"
        * 40
    )
    tools = [
        {
            "name": name,
            "description": f"{name}: " + "Use this tool to inspect or change the workspace. " * 12,
            "input_schema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "absolute path of the file"},
                    "pattern": {"type": "string", "description": "a regular expression"},
                    "limit": {"type": "integer", "description": "maximum number of results"},
                },
                "required": ["path"],
            },
        }
        for name in ("Read", "Edit", "Write", "Grep", "Glob", "Bash")
    ]
    code = "def handler(request):\n    return respond(request.json(), status=200)\n" * 6
    messages: list[dict] = [{"role": "user", "content": "Find why the handler returns 500 on empty bodies."}]
    turn = 0
    while len(json.dumps(messages)) + len(system) + len(json.dumps(tools)) < target_bytes - 1500:
        call_id = f"toolu_{turn:04d}"
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look at the handler module first."},
                    {
                        "type": "tool_use",
                        "id": call_id,
                        "name": "Read",
                        "input": {"path": f"/src/m{turn}.py"},
                    },
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call_id, "content": code}],
            }
        )
        turn += 1
    messages.append({"role": "user", "content": "Now fix it and run the tests."})
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "system": [{"type": "text", "text": system}],
        "tools": tools,
        "messages": messages,
        "metadata": {"user_id": json.dumps({"session_id": "bench-session"})},
        "stream": stream,
    }
    return json.dumps(body).encode()


BODIES = {"small": small_body, "large": large_body}


# ---------------------------------------------------------------------------------------------
# Servers under test
# ---------------------------------------------------------------------------------------------


@dataclass
class Servers:
    upstream: str
    gateway: str
    # A second gateway from another source tree (--baseline-src), "" when none.
    baseline: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # Process ids of the servers this run started, by target ("direct", "gateway").
    pids: dict[str, int] = field(default_factory=dict)


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time a process has used so far (Linux only; None elsewhere)."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def servers(args: argparse.Namespace) -> Iterator[Servers]:
    """The fake upstream and the gateway in their own processes, always stopped at the end."""
    with tempfile.TemporaryDirectory(prefix="lore-bench-") as tmp:
        work = Path(tmp)
        running = Servers(upstream=args.upstream_url or "", gateway=args.gateway_url or "")
        try:
            if not running.upstream:
                port = free_port()
                log = work / "fake-upstream.log"
                proc = spawn_logged(
                    [sys.executable, "-m", "lore_core.testing.fake_upstream", "--port", str(port)],
                    dict(os.environ),
                    log,
                )
                running.processes.append(proc)
                running.upstream = f"http://127.0.0.1:{port}"
                running.pids["direct"] = proc.pid
                wait_until_serving(proc, running.upstream + "/__health", log)
            if not running.gateway:
                running.gateway = _start_gateway(args, running, work / "gateway", "gateway")
            if args.baseline_src:
                running.baseline = _start_gateway(args, running, work / "baseline", "baseline")
            yield running
        finally:
            for proc in reversed(running.processes):
                stop_process(proc)


def _start_gateway(args: argparse.Namespace, running: Servers, work: Path, name: str) -> str:
    """``lore serve`` in its own process, home and data directory; ``name`` "baseline" runs
    the source tree of ``--baseline-src`` instead of this one."""
    work.mkdir(parents=True)
    port = free_port()
    config = work / "lore.json"
    config.write_text(args.gateway_config)
    home = work / "home"
    env = {
        **os.environ,
        # Keep the gateway away from the user's own config and data.
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "LORE_CONFIG": str(config),
        "LORE_UPSTREAM_ANTHROPIC": running.upstream,
        "LORE_UPSTREAM_OPENAI": running.upstream,
        "LORE_PORT": str(port),
        "LORE_HOST": "127.0.0.1",
    }
    if name == "baseline":
        # Its kernel and plugins shadow the installed ones (entry points name modules, which
        # are then imported from here).
        src = Path(args.baseline_src).resolve()
        paths = [str(src), *(str(p) for p in sorted((src / "plugins").iterdir()) if p.is_dir())]
        env["PYTHONPATH"] = os.pathsep.join(paths)
    log = work / "gateway.log"
    # Not started in this checkout: ``python -m`` puts the working directory first on the path.
    proc = spawn_logged([sys.executable, "-m", "lore_core.cli", "serve"], env, log, cwd=work)
    running.processes.append(proc)
    url = f"http://127.0.0.1:{port}"
    running.pids[name] = proc.pid
    wait_until_serving(proc, url + "/health", log)
    return url


# ---------------------------------------------------------------------------------------------
# Load
# ---------------------------------------------------------------------------------------------


@dataclass
class Samples:
    """Per-request times in seconds, and the wall time the measured requests took."""

    times: list[float] = field(default_factory=list)
    wall: float = 0.0
    requests: int = 0
    errors: int = 0
    # CPU seconds the server process used while serving them (None when unknown).
    cpu: float | None = None
    # The median of each alternating round, in order (paired with the other targets' rounds).
    round_p50s: list[float] = field(default_factory=list)


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, stream: bool) -> float:
    """Seconds to the whole body (JSON) or to the first body chunk (SSE); the rest is drained."""
    start = time.perf_counter()
    async with session.post(url, data=body, headers=HEADERS) as resp:
        if stream:
            first = await resp.content.readany()
            elapsed = time.perf_counter() - start
            while await resp.content.readany():
                pass
            ok = bool(first)
        else:
            data = await resp.read()
            elapsed = time.perf_counter() - start
            ok = bool(data)
        if resp.status != 200 or not ok:
            raise RuntimeError(f"HTTP {resp.status}")
    return elapsed


async def _drive(
    session: aiohttp.ClientSession, url: str, body: bytes, stream: bool, count: int, concurrency: int
) -> Samples:
    out = Samples()
    remaining = count

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            try:
                out.times.append(await _one(session, url, body, stream))
            except (TimeoutError, aiohttp.ClientError, RuntimeError):
                out.errors += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    out.wall = time.perf_counter() - start
    out.requests = count
    return out


def _session(concurrency: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency, limit_per_host=0),
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=60),
    )


@dataclass
class Cell:
    size: str
    stream: bool
    concurrency: int
    direct: Samples
    gateway: Samples
    baseline: Samples | None = None


async def measure(
    srv: Servers, size: str, stream: bool, concurrency: int, count: int, warmup: int, rounds: int
) -> Cell:
    body = BODIES[size](stream)
    urls = {"direct": srv.upstream + "/v1/messages", "gateway": srv.gateway + "/v1/messages"}
    if srv.baseline:
        urls["baseline"] = srv.baseline + "/v1/messages"
    results = {name: Samples() for name in urls}
    sessions = {name: _session(concurrency) for name in urls}
    try:
        for name, url in urls.items():
            await _drive(sessions[name], url, body, stream, max(warmup, concurrency), concurrency)
        per_round = max(concurrency, math.ceil(count / rounds))
        for round_ in range(rounds):
            # Alternate which target goes first, so neither always runs on a warmer machine.
            for name in list(urls) if round_ % 2 == 0 else list(reversed(urls)):
                url = urls[name]
                before = cpu_seconds(srv.pids.get(name))
                part = await _drive(sessions[name], url, body, stream, per_round, concurrency)
                after = cpu_seconds(srv.pids.get(name))
                total = results[name]
                total.times += part.times
                if part.times:
                    total.round_p50s.append(statistics.median(part.times))
                total.wall += part.wall
                total.requests += part.requests
                total.errors += part.errors
                if before is not None and after is not None:
                    total.cpu = (total.cpu or 0.0) + after - before
    finally:
        for session in sessions.values():
            await session.close()
    return Cell(size, stream, concurrency, results["direct"], results["gateway"], results.get("baseline"))


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) in milliseconds."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1] * 1000


def paired_difference(after: Samples, before: Samples, resamples: int = 2000) -> str:
    """The median of the per-round differences of the p50s (``after`` - ``before``, rounds
    run back to back, so both saw the same machine) with a 95% bootstrap interval, in ms: on
    a shared machine the pooled p50s of two targets drift apart with the load of the moment,
    the paired rounds much less."""
    diffs = [a - b for a, b in zip(after.round_p50s, before.round_p50s, strict=False)]
    if len(diffs) < 2:
        return "-"
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(resamples))
    low, high = medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]
    return f"{statistics.median(diffs) * 1000:+.2f} [{low * 1000:+.2f}, {high * 1000:+.2f}]"


def throughput(s: Samples) -> float:
    return (s.requests - s.errors) / s.wall if s.wall else math.nan


def cpu_per_request(s: Samples) -> str:
    return "-" if s.cpu is None or not s.requests else f"{s.cpu / s.requests * 1000:.2f}"


def table(cells: list[Cell], stream: bool) -> str:
    metric = "TTFB" if stream else "latency"
    target = TARGET_ADDED_TTFB_MS if stream else TARGET_ADDED_P50_MS
    head: tuple[str, ...] = (
        "body",
        "conc",
        "direct p50",
        "gateway p50",
        "added p50",
        f"target <{target:g}",
        "direct p99",
        "gateway p99",
        "added p99",
        "direct req/s",
        "gateway req/s",
        "gw CPU/req",
        "errors",
    )
    with_baseline = any(c.baseline is not None for c in cells)
    if with_baseline:
        head += ("before p50", "added vs before", "per round [95% CI]", "before req/s", "before CPU/req")
    rows: list[tuple[str, ...]] = [head]
    for c in cells:
        if c.stream != stream:
            continue
        d50, g50 = percentile(c.direct.times, 50), percentile(c.gateway.times, 50)
        d99, g99 = percentile(c.direct.times, 99), percentile(c.gateway.times, 99)
        added = g50 - d50
        rows.append(
            (
                c.size,
                str(c.concurrency),
                f"{d50:.2f}",
                f"{g50:.2f}",
                f"{added:+.2f}",
                "met" if added < target else "MISSED",
                f"{d99:.2f}",
                f"{g99:.2f}",
                f"{g99 - d99:+.2f}",
                f"{throughput(c.direct):.0f}",
                f"{throughput(c.gateway):.0f}",
                cpu_per_request(c.gateway),
                str(c.direct.errors + c.gateway.errors + (c.baseline.errors if c.baseline else 0)),
            )
        )
        if with_baseline:
            b50 = percentile(c.baseline.times, 50) if c.baseline else math.nan
            before_cpu = cpu_per_request(c.baseline) if c.baseline else "-"
            before_rps = f"{throughput(c.baseline):.0f}" if c.baseline else "-"
            paired = paired_difference(c.gateway, c.baseline) if c.baseline else "-"
            rows[-1] += (f"{b50:.2f}", f"{g50 - b50:+.2f}", paired, before_rps, before_cpu)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [f"{'streaming: time to first byte' if stream else 'non-streaming: ' + metric} (ms)"]
    for n, row in enumerate(rows):
        lines.append(
            "  ".join(
                cell.rjust(w) if i > 0 else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def describe_gateway(url: str) -> str:
    """Which plugins and store the measured gateway ran with: they are part of its cost."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            health = json.loads(resp.read())
    except (OSError, ValueError) as exc:
        return f"gateway /health unreadable: {exc}"
    store = health.get("store") or {}
    backend = store.get("backend", "?") if isinstance(store, dict) else "?"
    plugins = ", ".join(p for p in health.get("plugins", []) if not p.startswith("lore_core.")) or "none"
    return f"gateway {health.get('version', '?')}: store {backend}; plugins {plugins}"


def report(cells: list[Cell], args: argparse.Namespace, gateway: str) -> str:
    sizes = ", ".join(f"{s} = {len(BODIES[s](False)):,} bytes" for s in args.sizes)
    out = [
        "Lore gateway overhead: the fake upstream direct vs the same requests through the gateway",
        f"python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs (load generator and both servers share them); bodies: {sizes}",
        gateway,
        f"per cell: {args.warmup} warm-up, then {args.requests} requests at concurrency 1 and "
        f"{args.concurrent_requests} above, in {args.rounds} alternating rounds",
        "",
        table(cells, stream=False),
        "",
        table(cells, stream=True),
        "",
        f"targets: added p50 latency < {TARGET_ADDED_P50_MS:g} ms, added p50 TTFB < "
        f"{TARGET_ADDED_TTFB_MS:g} ms (added = gateway - direct). Loopback only: no real network in it.",
        "gw CPU/req: ms of CPU the gateway process used per request (its cost with no queueing).",
    ]
    if args.baseline_src:
        out.append(
            f"before: a second gateway from {args.baseline_src} in the same rounds; "
            "added vs before = gateway p50 - before p50; per round = the median of the rounds' "
            "own differences with its 95% bootstrap interval (use many rounds: --rounds 30)."
        )
    return "\n".join(out)


async def run(args: argparse.Namespace, srv: Servers) -> list[Cell]:
    cells = []
    for stream in (False, True):
        for size in args.sizes:
            for concurrency in args.concurrency:
                count = args.requests if concurrency == 1 else args.concurrent_requests
                cell = await measure(srv, size, stream, concurrency, count, args.warmup, args.rounds)
                print(
                    f"  {'stream' if stream else 'json':6} {size:5} c={concurrency:<3} "
                    f"direct p50 {percentile(cell.direct.times, 50):6.2f} ms  "
                    f"gateway p50 {percentile(cell.gateway.times, 50):6.2f} ms",
                    file=sys.stderr,
                    flush=True,
                )
                cells.append(cell)
    return cells


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="measured requests per cell at c=1")
    parser.add_argument(
        "--concurrent-requests", type=int, default=4000, help="measured requests per cell at c>1"
    )
    parser.add_argument("--warmup", type=int, default=200, help="warm-up requests per cell and target")
    parser.add_argument("--rounds", type=int, default=4, help="alternate direct/gateway this many times")
    parser.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16], help="e.g. 1,16"
    )
    parser.add_argument(
        "--sizes",
        type=lambda s: s.split(","),
        default=["small", "large"],
        help="request bodies: small, large (~30 KB) or both (default)",
    )
    parser.add_argument(
        "--gateway-config",
        default="{}",
        help='JSON config for the started gateway, e.g. \'{"store": {"backend": "memory"}}\'',
    )
    parser.add_argument("--upstream-url", help="use this running fake upstream instead of starting one")
    parser.add_argument(
        "--baseline-src",
        help="also measure a gateway run from this source tree (a git worktree of an earlier commit)",
    )
    parser.add_argument(
        "--gateway-url", help="use this running gateway (pointed at --upstream-url) instead of starting one"
    )
    args = parser.parse_args(argv)
    unknown = set(args.sizes) - set(BODIES)
    if unknown:
        parser.error(f"unknown size(s): {', '.join(sorted(unknown))}")
    try:
        json.loads(args.gateway_config)
    except ValueError as exc:
        parser.error(f"--gateway-config is not JSON: {exc}")
    if args.baseline_src and not (Path(args.baseline_src) / "lore_core").is_dir():
        parser.error(f"--baseline-src {args.baseline_src}: no lore_core there")
    if args.gateway_url and not args.upstream_url:
        parser.error("--gateway-url needs --upstream-url (the upstream that gateway forwards to)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    # SIGTERM takes the same way out as Ctrl-C, so the servers are always stopped.
    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    with servers(args) as srv:
        print(f"fake upstream {srv.upstream}, gateway {srv.gateway}", file=sys.stderr, flush=True)
        gateway = describe_gateway(srv.gateway)
        cells = asyncio.run(run(args, srv))
    print(report(cells, args, gateway))
    return 0


if __name__ == "__main__":
    sys.exit(main())
