"""Nothing acknowledged is lost: ``kill -9`` the gateway at random moments under load.

A real gateway (``lore serve``, the DuckDB store, default settings) serves clients that
talk to the loopback fake provider through it: Anthropic Messages and Chat Completions,
streamed and not, several turns per session (every turn resends the history, as coding
clients do). At a random moment (``--min-up`` to ``--max-up`` seconds after it is ready)
the gateway gets SIGKILL, in the middle of whatever it was doing: relaying streams,
waiting to write, writing. It is started again on the same store and the clients go on
with new sessions. After ``--kills`` kills a last gateway replays what the previous one
left and stops cleanly, and the store is read directly.

Every exchange whose response the client received in full (a JSON body with its answer,
or a stream through its terminal event) must be in the store exactly once: its user
message and its answer. Exchanges cut off by a kill may be there or not (the client never
saw them complete). The data is generated: unique sentences per turn. Run it by hand::

    python benchmarks/crash.py                  # 20 kills, about two minutes
    python benchmarks/crash.py --kills 50 --clients 12
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from lore_core.testing.fake_upstream import FakeUpstream, RecordedRequest, Reply
from lore_core.testing.net import free_port, wait_for_http


@dataclass
class Tally:
    acknowledged: list[tuple[str, str]] = field(default_factory=list)  # (user text, answer text)
    cut_off: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    return ""


def responder(req: RecordedRequest) -> Reply:
    body = req.json or {}
    words = last_user_text(body)
    # Streams take a moment (ten events, 5 ms apart), so kills land inside them too.
    return Reply(text=f"answer to {words}", text_chunks=8, chunk_delay=0.005)


def client_loop(url: str, life: int, index: int, stop: threading.Event, tally: Tally, seed: int) -> None:
    """Sessions of a few turns each until the gateway dies (or ``stop``)."""
    rng = random.Random(seed)
    session_no = 0
    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            session_no += 1
            session = f"crash-{life}-{index}-{session_no}"
            api = rng.choice(["anthropic", "chat"])
            history: list[dict[str, Any]] = []
            for turn in range(rng.randint(1, 5)):
                words = f"{session} turn {turn} {rng.getrandbits(40):x}"
                history.append({"role": "user", "content": words})
                stream = rng.random() < 0.5
                try:
                    answer = _exchange(client, api, session, history, stream)
                except (httpx.HTTPError, ValueError):
                    with tally.lock:
                        tally.cut_off += 1
                    return  # the gateway is gone
                with tally.lock:
                    tally.acknowledged.append((words, answer))
                history.append({"role": "assistant", "content": answer})


def _exchange(
    client: httpx.Client, api: str, session: str, history: list[dict[str, Any]], stream: bool
) -> str:
    if api == "anthropic":
        path = "/v1/messages"
        body: dict[str, Any] = {"model": "claude-test", "max_tokens": 50, "messages": history}
        headers = {"x-api-key": "k", "x-session-id": session, "anthropic-version": "2023-06-01"}
    else:
        path = "/v1/chat/completions"
        body = {"model": "gpt-test", "messages": history}
        headers = {"authorization": "Bearer k", "x-session-id": session}
    if not stream:
        reply = client.post(path, json=body, headers=headers)
        reply.raise_for_status()
        data = reply.json()
        return data["content"][0]["text"] if api == "anthropic" else data["choices"][0]["message"]["content"]
    body["stream"] = True
    text: list[str] = []
    terminal = False
    with client.stream("POST", path, json=body, headers=headers) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                terminal = True
                continue
            event = json.loads(data)
            if api == "anthropic":
                if event.get("type") == "content_block_delta":
                    text.append(event["delta"].get("text", ""))
                terminal = terminal or event.get("type") == "message_stop"
            else:
                for choice in event.get("choices") or []:
                    text.append((choice.get("delta") or {}).get("content") or "")
    if not terminal:
        raise ValueError("the stream ended before its terminal event")
    return "".join(text)


def stored_texts(db: Path) -> Counter[str]:
    from lore_store_duckdb.store import DuckDBStore

    async def read() -> Counter[str]:
        store = DuckDBStore(db)
        await store.open()
        try:
            texts: Counter[str] = Counter()
            for session in await store.list_sessions(limit=1_000_000):
                texts.update(m.text for m in await store.session_messages(session.id))
            return texts
        finally:
            await store.close()

    return asyncio.run(read())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--clients", type=int, default=8, help="concurrent client sessions")
    parser.add_argument("--min-up", type=float, default=0.5, help="seconds the gateway runs at least")
    parser.add_argument("--max-up", type=float, default=3.0, help="... and at most, before the kill")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fsync", action="store_true", help="store.fsync: true")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    # The fake provider's server complains about every stream a kill cut; that is the point.
    logging.getLogger("aiohttp").setLevel(logging.CRITICAL)

    with tempfile.TemporaryDirectory(prefix="lore-crash-") as tmp, FakeUpstream() as fake:
        fake.responder = responder
        work = Path(tmp)
        db = work / "store" / "lore.duckdb"
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        config = work / "lore.json"
        config.write_text(json.dumps({"store": {"fsync": args.fsync}}))
        env = {
            **os.environ,
            "LORE_CONFIG": str(config),
            "LORE_DB_PATH": str(db),
            "LORE_PORT": str(port),
            "LORE_UPSTREAM_ANTHROPIC": fake.url,
            "LORE_UPSTREAM_OPENAI": fake.url,
            "HOME": str(work / "home"),
            "XDG_DATA_HOME": str(work / "data"),
            "XDG_CONFIG_HOME": str(work / "config"),
        }

        def serve(life: int) -> subprocess.Popen[bytes]:
            with (work / f"gateway-{life}.log").open("wb") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "lore_core.cli", "serve"],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=work,
                )
            wait_for_http(url + "/health", timeout=60)
            return proc

        tally = Tally()
        started = time.monotonic()
        for life in range(args.kills):
            proc = serve(life)
            stop = threading.Event()
            clients = [
                threading.Thread(
                    target=client_loop, args=(url, life, i, stop, tally, rng.getrandbits(32)), daemon=True
                )
                for i in range(args.clients)
            ]
            for thread in clients:
                thread.start()
            up = rng.uniform(args.min_up, args.max_up)
            time.sleep(up)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            stop.set()
            for thread in clients:
                thread.join(timeout=60)
            print(
                f"  kill {life + 1:>3}/{args.kills} after {up:.2f} s: "
                f"{len(tally.acknowledged)} exchanges acknowledged so far",
                file=sys.stderr,
                flush=True,
            )

        # The last run replays what the last kill left, then stops cleanly.
        proc = serve(args.kills)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        elapsed = time.monotonic() - started
        replays = []
        for life in range(1, args.kills + 1):
            for line in (work / f"gateway-{life}.log").read_text(errors="replace").splitlines():
                if "replaying" in line:
                    replays.append(int(line.split("replaying ", 1)[1].split()[0]))
        texts = stored_texts(db)

    missing = [pair for pair in tally.acknowledged if texts[pair[0]] == 0 or texts[pair[1]] == 0]
    duplicated = [pair for pair in tally.acknowledged if texts[pair[0]] > 1 or texts[pair[1]] > 1]
    acknowledged = len(tally.acknowledged)
    print(f"Lore crash benchmark (generated data: unique sentences, {args.clients} clients), {elapsed:.0f} s")
    print(f"  kills (SIGKILL at a random moment, {args.min_up}-{args.max_up} s up): {args.kills}")
    print(f"  store.fsync: {str(args.fsync).lower()}")
    print(f"  exchanges acknowledged to clients (response received in full): {acknowledged}")
    print(f"  exchanges cut off by a kill (never acknowledged): {tally.cut_off}")
    print(
        f"  restarts that replayed the journal: {len(replays)} of {args.kills}, "
        f"{sum(replays)} exchanges replayed"
    )
    print(f"  acknowledged and stored exactly once: {acknowledged - len(missing) - len(duplicated)}")
    print(f"  acknowledged but missing: {len(missing)}   stored twice: {len(duplicated)}")
    for pair in (missing + duplicated)[:10]:
        print(f"    {pair[0]!r}: user x{texts[pair[0]]}, answer x{texts[pair[1]]}")
    ok = acknowledged > 0 and not missing and not duplicated
    print("RESULT:", "every acknowledged exchange stored exactly once" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
