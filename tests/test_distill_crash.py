"""A gateway killed with SIGKILL in the middle of a distillation (the worker has the segment,
its answer not yet back) and restarted re-does that segment: no message is lost from the
distillations and none is distilled twice. Real processes, the DuckDB store, the fake worker.

No wall-clock assertion: the test polls with generous deadlines."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core.distill.prompts import OBSERVER_MARKER
from lore_core.storage.identity import main_branch
from lore_core.testing.fake_upstream import FakeUpstream, RecordedRequest, Reply
from lore_core.testing.fake_worker import observer_responder, request_texts
from lore_core.testing.net import free_port, spawn_logged, wait_until_serving
from lore_core.testing.poll import poll

# Seconds per test (see the slow marker in lore_core.testing.fixtures).
pytestmark = pytest.mark.slow

duckdb_store = pytest.importorskip("lore_store_duckdb.store")

SESSION = "crash-distill"


def observer_calls(fake: FakeUpstream) -> int:
    count = 0
    for req in fake.api_requests():
        try:
            system, _ = request_texts(req.json)
        except ValueError:
            continue
        count += OBSERVER_MARKER in system
    return count


def read_store(db: Path) -> tuple[list[str], list[list[str]]]:
    """(message ids of the conversation, source ids of each gen-0 distillation)."""

    async def main() -> tuple[list[str], list[list[str]]]:
        store = duckdb_store.DuckDBStore(db)
        await store.open()
        try:
            messages = main_branch(await store.session_messages(SESSION))
            rows = await store.list_distillations(SESSION)
            return [m.id for m in messages], [d.source_ids for d in rows if d.generation == 0]
        finally:
            await store.close()

    return asyncio.run(main())


def test_sigkill_mid_distillation_neither_loses_nor_duplicates(fake_upstream: FakeUpstream, tmp_path: Path):
    # The observer's answer can be held back: the kill lands while the worker call is open.
    hold = {"seconds": 0.0}
    answer = observer_responder()

    def respond(req: RecordedRequest) -> Reply | None:
        reply = answer(req)
        if reply is not None and hold["seconds"]:
            reply.delay_headers = hold["seconds"]
        return reply

    fake_upstream.responder = respond
    db = tmp_path / "store" / "lore.duckdb"
    port = free_port()
    config = tmp_path / "lore.json"
    # A configured worker (the fake), so the restarted gateway can distil before the
    # session's client comes back with its credentials.
    config.write_text(
        json.dumps(
            {
                "worker": {"upstream": fake_upstream.url, "apiKey": "worker-key", "model": "claude-test"},
                "distill": {
                    "idleTimeoutSeconds": 0.3,
                    "firstSegmentMinMessages": 3,
                    "firstSegmentMinTokens": 8,
                },
            }
        )
    )
    env = {
        **os.environ,
        "LORE_CONFIG": str(config),
        "LORE_DB_PATH": str(db),
        "LORE_PORT": str(port),
        "LORE_UPSTREAM_ANTHROPIC": fake_upstream.url,
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    url = f"http://127.0.0.1:{port}"
    history: list[dict[str, Any]] = []

    def turn(*texts: str) -> None:
        for i, text in enumerate(texts):
            if i:
                history.append({"role": "assistant", "content": f"ok: {texts[i - 1]}"})
            history.append({"role": "user", "content": text})
        body = {"model": "claude-test", "max_tokens": 50, "messages": history}
        headers = {"x-session-id": SESSION, "x-api-key": "client-key", "anthropic-version": "2023-06-01"}
        resp = httpx.post(url + "/v1/messages", json=body, headers=headers, timeout=30)
        resp.raise_for_status()
        history.append({"role": "assistant", "content": resp.json()["content"][0]["text"]})

    def distilled() -> list[dict[str, Any]]:
        # The token the gateway process made in its own data directory.
        token = (tmp_path / "data" / "lore" / "gateway.token").read_text().strip()
        with httpx.Client(timeout=10) as client:
            return client.get(
                url + "/lore/api/distillations",
                params={"session": SESSION},
                headers={"Authorization": f"Bearer {token}"},
            ).json()

    def serve(log_name: str) -> subprocess.Popen[bytes]:
        log = tmp_path / log_name
        proc = spawn_logged([sys.executable, "-m", "lore_core.cli", "serve"], env, log)
        wait_until_serving(proc, url + "/health", log)
        return proc

    proc = serve("gateway-1.log")
    try:
        turn("gannet: pytest -q fails in tests/test_gannet.py", "gannet: 2 failed", "fix it")
        poll(lambda: len(distilled()) == 1, "the first distillation")
        hold["seconds"] = 30.0
        turn("osprey: now src/osprey.py raises KeyError", "osprey: trace attached", "go")
        poll(lambda: observer_calls(fake_upstream) == 2, "the second observer call")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()

    # Killed mid-call: the second segment was never written.
    ids, sources = read_store(db)
    assert len(sources) == 1 and set(sources[0]) < set(ids)

    hold["seconds"] = 0.0
    proc = serve("gateway-2.log")
    try:
        # The restarted gateway resumes the session on its own and re-does the segment.
        poll(lambda: len(distilled()) == 2, "the re-done distillation")
        assert observer_calls(fake_upstream) == 3
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()

    ids, sources = read_store(db)
    flat = [i for s in sources for i in s]
    assert len(flat) == len(set(flat)), "a message was distilled twice"
    assert set(flat) == set(ids), "a message was never distilled"
    assert len(sources) == 2


def test_lore_distill_without_a_gateway_uses_the_store_directly(tmp_path: Path, monkeypatch, capsys):
    from lore_core import cli
    from lore_core.testing.builders import answer, batch_of, exchange, text, tool_call, tool_result

    db = tmp_path / "direct" / "lore.duckdb"
    (tmp_path / "lore.json").write_text("{}")
    for key, value in {
        "LORE_CONFIG": str(tmp_path / "lore.json"),
        "LORE_DB_PATH": str(db),
        "LORE_PORT": str(free_port()),  # nobody listens: no gateway
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }.items():
        monkeypatch.setenv(key, value)
    messages = [
        text("user", "the cormorant service fails to start"),
        tool_call("Bash", "c1", {"command": "systemctl status cormorant"}),
        tool_result("c1", "cormorant.service: Failed with result 'exit-code'", is_error=True),
        text("assistant", "the unit file points at /opt/cormorant/bin/run.sh which is missing"),
        text("user", "recreate it"),
    ]

    async def seed() -> None:
        store = duckdb_store.DuckDBStore(db)
        await store.open()
        try:
            await store.write(
                batch_of(exchange(messages, answer("done", output_tokens=7), session="direct-1"))
            )
        finally:
            await store.close()

    asyncio.run(seed())
    assert cli.main(["distill", "--json"]) == 0
    captured = capsys.readouterr()
    assert "gateway not running" in captured.err and "distilling [" in captured.err
    (report,) = json.loads(captured.out)
    # No worker outside a gateway unless configured: the extractive observer, and it says so.
    assert report["observed"] == {"extractive": 1}
    assert any("extractive observer" in note for note in report["notes"])
    assert cli.main(["distillations", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["session"] == "direct-1" and row["generation"] == 0 and len(row["source_ids"]) == 6
    assert "/opt/cormorant/bin/run.sh" in row["text"]
    assert cli.main(["show", row["id"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "extractive"
