"""Dashboard render times on a generated store, beside the same gateway's ``/health``.

Builds a DuckDB store of ``--messages`` generated messages (~400 characters each, 20 per
session: the generator of ``benchmarks/store.py``, written through the real store writer),
starts a real gateway on it (no embedder, no idle distillation: only the pages' own work is
measured), logs in through a minted link and times each page over HTTP: the median and the
95th percentile of ``--rounds`` requests after two warm-up requests, the whole answer read.

    uv run python plugins/dashboard/benchmarks/render.py --messages 100000
    uv run python plugins/dashboard/benchmarks/render.py --messages 1000000   # ~3 GB, minutes
    uv run python plugins/dashboard/benchmarks/render.py --workdir DIR --only reader  # one page

The issue's target: every page in <= 300 ms on a store of a million messages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))

from store import exchanges, make_texts, make_vocab  # noqa: E402  (the repository's store benchmark)


async def build_store(env: dict[str, str], cwd: Path, total: int, seed: int) -> float:
    """Write ``total`` generated messages into the configured store (DuckDB, found through
    the plugin registry as the gateway finds it); the seconds it took."""
    from lore_core.config import StoreConfig
    from lore_core.plugins import bootstrap
    from lore_core.storage.writer import StoreWriter, choose_store

    rng = random.Random(seed)
    words, weights = make_vocab(rng)
    pool = make_texts(rng, words, weights, 20_000)
    work = exchanges(total, pool, rng)
    boot = bootstrap(env=env, cwd=cwd)
    store = choose_store(boot.config, boot.registry.stores)
    writer = StoreWriter(store, StoreConfig(flush_interval_ms=250, max_pending_messages=10 * total))
    await writer.start()
    started = time.perf_counter()
    for i, ex in enumerate(work):
        writer.submit(ex)
        if i % 50 == 0:
            await asyncio.sleep(0)
    await writer.wait_idle(timeout=7200)
    await store.sync_search_index()
    await writer.stop()
    return time.perf_counter() - started


async def open_store(env: dict[str, str], cwd: Path) -> float:
    """Open the configured store once, found through the plugin registry as the gateway
    finds it (a file of an older schema is migrated then); the seconds it took."""
    from lore_core.plugins import bootstrap
    from lore_core.storage.writer import choose_store

    boot = bootstrap(env=env, cwd=cwd)
    started = time.perf_counter()
    store = choose_store(boot.config, boot.registry.stores)
    await store.open()
    await store.close()
    return time.perf_counter() - started


def timed(client: httpx.Client, url: str, rounds: int) -> tuple[float, float, int]:
    """(median ms, p95 ms, status) of GETting ``url``."""
    status = 0
    for _ in range(2):
        status = client.get(url).status_code
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        answer = client.get(url)
        _ = answer.content
        samples.append((time.perf_counter() - started) * 1000)
        status = answer.status_code
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.95 * len(samples)))], status


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", help="keep the store here (default: a temporary directory)")
    parser.add_argument(
        "--only", help="time only the pages whose name holds this text (e.g. reader), beside /health"
    )
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="lore-dashboard-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "lore.duckdb"
    home = work / "home"
    env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "LORE_CONFIG": str(work / "lore.json"),
        # Only the pages' own work: no embedder indexing a million messages meanwhile.
        "LORE_DISABLE_PLUGINS": "embed-local",
    }
    config = {"store": {"backend": "duckdb", "path": str(db)}, "distill": {"idleTimeoutSeconds": 604800}}
    (work / "lore.json").write_text(json.dumps(config))
    os.environ.update(env)
    if db.exists():
        print(f"using the store in {db}", flush=True)
        seconds = asyncio.run(open_store(dict(os.environ), work))
        print(f"opened (and migrated when it was older) in {seconds:.1f} s", flush=True)
    else:
        seconds = asyncio.run(build_store(dict(os.environ), work, args.messages, args.seed))
        print(f"stored {args.messages:,} messages in {seconds:.0f} s", flush=True)

    from lore_core.gateway import Gateway
    from lore_core.testing.net import api_headers
    from lore_core.testing.server import ThreadedServer

    gateway = Gateway.load(env=dict(os.environ), cwd=work)
    with ThreadedServer(gateway) as server:
        mint = httpx.post(server.url + "/ui/login-links", headers=api_headers(), timeout=60)
        mint.raise_for_status()
        client = httpx.Client(base_url=server.url, timeout=600, headers=api_headers())
        client.get(mint.json()["path"])
        status = client.get("/lore/api/status", headers=api_headers()).json()
        messages = status["store"].get("messages")
        print(f"the gateway's store: {messages:,} messages, {status['store'].get('sessions'):,} sessions")
        word = "m12345"  # every generated message ends with its number: a word that exists once
        first = client.get("/lore/api/sessions", params={"limit": "50"}).json()
        after = f"{first[-1]['updated_at']!r}~{first[-1]['id']}"
        middle = client.get("/lore/api/sessions", params={"limit": "25000"}).json()[-1]
        deep = f"{middle['updated_at']!r}~{middle['id']}"
        pages = [
            ("/health (no dashboard)", "/health"),
            ("Health", "/ui/"),
            ("Projects", "/ui/projects"),
            ("Sessions", "/ui/sessions"),
            ("Sessions, one project", "/ui/sessions?project=/bench/p3"),
            ("Sessions, text matching nothing", "/ui/sessions?q=no-such-text"),
            ("Sessions, text matching one session", "/ui/sessions?q=bench-12345"),
            ("Sessions, one harness (every session's)", "/ui/sessions?harness=bench"),
            ("Sessions, a harness matching nothing", "/ui/sessions?harness=claude"),
            ("Sessions, the second page", "/ui/sessions?" + urllib.parse.urlencode({"after": after})),
            (
                "Sessions, a page 25,000 sessions deep",
                "/ui/sessions?" + urllib.parse.urlencode({"after": deep}),
            ),
            ("Session reader (20 messages)", "/ui/session?id=bench-17"),
            ("Search", f"/ui/search?q={word}"),
            ("Knowledge", "/ui/knowledge"),
            ("Spend", "/ui/spend"),
            ("Contradictions", "/ui/contradictions"),
            ("Events (the runs)", "/ui/events"),
            # What the pages read, without the dashboard: the store's own share.
            ("API: 51 sessions (the first page's read)", "/lore/api/sessions?limit=51"),
            ("API: the projects (the projects page's read)", "/lore/api/projects"),
            ("API: one session (the reader's read)", "/lore/api/sessions/bench-17"),
        ]
        if args.only:
            pages = [p for p in pages if p[1] == "/health" or args.only.lower() in p[0].lower()]
        print(f"\n| Page ({messages:,} messages) | median ms | p95 ms | status |")
        print("| --- | ---: | ---: | ---: |")
        for name, path in pages:
            median, p95, code = timed(client, path, args.rounds)
            print(f"| {name} | {median:.1f} | {p95:.1f} | {code} |", flush=True)

        if args.only:
            return
        # Does a slow page hold up the gateway? /health timed while the heaviest pages render
        # over and over on other connections.
        stop = threading.Event()

        def render_heavy() -> None:
            with httpx.Client(base_url=server.url, timeout=600, cookies=client.cookies) as other:
                while not stop.is_set():
                    for path in ("/ui/projects", "/ui/sessions", "/ui/sessions?q=no-such-text"):
                        other.get(path)

        busy = [threading.Thread(target=render_heavy, daemon=True) for _ in range(2)]
        for thread in busy:
            thread.start()
        time.sleep(1.0)
        median, p95, code = timed(httpx.Client(base_url=server.url, timeout=60), "/health", args.rounds * 4)
        stop.set()
        for thread in busy:
            thread.join()
        print(f"| /health while two clients render the heaviest pages | {median:.1f} | {p95:.1f} | {code} |")


if __name__ == "__main__":
    main()
