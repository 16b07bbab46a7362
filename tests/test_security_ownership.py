"""Memory follows its owner on the model routes (lore_core/pipeline/ownership.py), through
real sockets: the findings F1, F2, F3, F6 and F7 of the security review, and another OS
user on the same machine. The attacker has no gateway token; ``evil`` is a loopback server
of its own, the victim's provider is the configured fake upstream."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lore_core.builtin.memory_store import MemoryStore
from lore_core.context import manager
from lore_core.http.access import SessionOwners
from lore_core.testing.fake_upstream import FakeUpstream, RecordedRequest
from lore_core.testing.fake_worker import observer_responder, request_texts
from lore_core.testing.poll import poll
from lore_core.testing.server import ThreadedServer
from lore_core.worker.client import MAX_REMEMBERED_SESSIONS, WorkerClient

VICTIM_KEY = "sk-ant-api03-victim-" + "V1" * 12
ATTACKER_KEY = "sk-ant-api03-attacker-" + "A2" * 12
PLANTED = "PLANTED-KNOWLEDGE-7f3a"
TOOLS = [{"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}}]
OBSERVER_MARKER = "You are the memory observer"


@pytest.fixture(autouse=True)
def patient_knowledge_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first request of a session waits for the knowledge read (on a loaded machine the
    store can take longer than the request path's half second)."""
    monkeypatch.setattr(manager, "STORE_TIMEOUT_SECONDS", 10.0)


def body(messages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 50,
        "tools": TOOLS,
        "messages": messages or [{"role": "user", "content": "what do you know about this project?"}],
    }


def model_request(
    server: ThreadedServer,
    key: str,
    session: str,
    project: Path,
    *,
    upstream: str | None = None,
    token: str | None = None,
    messages: list[dict[str, Any]] | None = None,
) -> httpx.Response:
    headers = {
        "x-api-key": key,
        "anthropic-version": "2023-06-01",
        "x-session-id": session,
        "x-lore-project": str(project),
    }
    if upstream:
        headers["x-lore-upstream-url"] = upstream
    if token:
        headers["x-lore-token"] = token
    return httpx.post(server.url + "/v1/messages", json=body(messages), headers=headers, timeout=30)


def api(server: ThreadedServer) -> httpx.Client:
    token = server.gateway.tokens.current()
    return httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {token}"}, timeout=30)


def plant_knowledge(server: ThreadedServer, project: Path) -> None:
    with api(server) as client:
        entry = {
            "project": str(project),
            "category": "pattern",
            "title": "How this project deploys",
            "content": f"Deploy with scripts/blue-green.sh ({PLANTED}).",
        }
        response = client.post("/lore/api/knowledge", json=entry)
        assert response.status_code in (200, 201), response.text


def stored_sessions(server: ThreadedServer) -> set[str]:
    server.call(server.gateway.writer.wait_idle(10.0))
    return {s.id for s in server.call(server.gateway.store.list_sessions(limit=10_000))}


def model_calls(fake: FakeUpstream) -> list[RecordedRequest]:
    return [r for r in fake.api_requests() if r.path.startswith("/v1/messages")]


def worker_calls(fake: FakeUpstream) -> list[RecordedRequest]:
    out = []
    for req in model_calls(fake):
        try:
            system, _ = request_texts(req.json)
        except ValueError:
            continue
        if OBSERVER_MARKER in system or "curator" in system.lower():
            out.append(req)
    return out


def test_f1_memory_never_goes_to_an_upstream_the_client_chose(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """F1: a local process without the token names the victim's project (and session) and
    its own upstream: the request reaches that upstream byte for byte, with no knowledge,
    no recall tool, and nothing of it is stored. The owner's request carries the knowledge
    (so a leak would show), and so does one naming an upstream with the gateway token."""
    project = tmp_path / "shop"
    project.mkdir()
    with FakeUpstream() as evil:
        server = start_gateway()
        plant_knowledge(server, project)
        assert model_request(server, VICTIM_KEY, "victim-1", project).status_code == 200
        assert PLANTED in model_calls(fake_upstream)[-1].body.decode()

        for session in ("attacker-1", "victim-1"):
            response = model_request(server, ATTACKER_KEY, session, project, upstream=evil.url)
            assert response.status_code == 200, response.text
            received = model_calls(evil)[-1]
            assert PLANTED not in received.body.decode()
            assert json.loads(received.body) == body()  # untouched: no recall tool, no knowledge
            assert received.header("x-lore-upstream-url") is None
        assert "attacker-1" not in stored_sessions(server)
        assert server.gateway.stats["memory_refused"] == 2

        # The gateway's owner may send its memory anywhere: with the token.
        token = server.gateway.tokens.current()
        model_request(server, VICTIM_KEY, "victim-2", project, upstream=evil.url, token=token)
        assert PLANTED in model_calls(evil)[-1].body.decode()
        assert "victim-2" in stored_sessions(server)


def test_configured_upstreams_keep_memory_without_the_token(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """``upstream.allowedUrls``: a client that names a listed upstream (or a path under it)
    keeps its memory with no token."""
    project = tmp_path / "shop"
    project.mkdir()
    with FakeUpstream() as local_model:
        server = start_gateway({"upstream": {"allowedUrls": [local_model.url]}})
        plant_knowledge(server, project)
        model_request(server, VICTIM_KEY, "s-local", project, upstream=local_model.url + "/v1")
        assert PLANTED in model_calls(local_model)[-1].body.decode()
        assert "s-local" in stored_sessions(server)


@pytest.mark.slow
def test_f2_f3_f7_background_work_goes_only_to_the_sessions_own_credentials(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """F2/F7: one request under the victim's session id, then more sessions than the worker
    keeps credentials for, all naming the attacker's upstream: the victim's observer call
    still goes to the victim's provider with the victim's key, no worker call reaches the
    attacker, and none is made for the attacker's sessions under anyone's key. F3: those
    sessions are not stored, so nothing is distilled or curated from them."""
    project = tmp_path / "shop"
    project.mkdir()
    fake_upstream.responder = observer_responder()
    distill = {"idleTimeoutSeconds": 0.3, "firstSegmentMinMessages": 3, "firstSegmentMinTokens": 8}
    with FakeUpstream() as evil:
        server = start_gateway({"distill": distill})
        history: list[dict[str, Any]] = []
        for text in ("open src/refund.py", "the rounding bug is in refund_total", "fix it with Decimal"):
            history.append({"role": "user", "content": text})
            response = model_request(server, VICTIM_KEY, "victim-s", project, messages=list(history))
            history.append({"role": "assistant", "content": response.json()["content"][0]["text"]})

        seven = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"attacker text {i}"} for i in range(7)
        ]
        model_request(server, ATTACKER_KEY, "victim-s", project, upstream=evil.url, messages=seven)
        for i in range(MAX_REMEMBERED_SESSIONS + 8):
            model_request(server, ATTACKER_KEY, f"evict-{i}", project, upstream=evil.url, messages=seven)

        poll(lambda: worker_calls(fake_upstream), "the victim's observer call")
        server.call(server.gateway.distiller.distill_session("victim-s", reason="test"))
        assert worker_calls(evil) == []
        assert all(call.header("x-api-key") == VICTIM_KEY for call in worker_calls(fake_upstream))
        assert not any("attacker text" in call.body.decode() for call in worker_calls(fake_upstream))
        assert not any(s.startswith("evict-") for s in stored_sessions(server))
        # Every request the attacker's upstream got is one the attacker sent, untouched.
        assert len(model_calls(evil)) == MAX_REMEMBERED_SESSIONS + 9


def test_f7_a_session_without_its_own_credentials_waits() -> None:
    """F7: the worker never bills a session's work to another session's credentials (before:
    a session evicted from the worker's memory used the latest seen)."""
    worker = WorkerClient()
    worker.remember_credentials(
        "owner-s", "anthropic", "http://127.0.0.1:9", {"x-api-key": VICTIM_KEY}, model="m"
    )
    assert worker.available("owner-s")
    assert not worker.available("someone-else")
    assert worker.available(None)  # work of no session (query expansion): the latest seen


def test_f6_a_session_keeps_its_owner_across_a_restart(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """F6: the owner is kept in the store; after a restart a stranger with the session's
    first message (and a made-up answer) is still refused; the owner's refreshed key, which
    carries an answer the gateway relayed, takes the session over."""
    project = tmp_path / "shop"
    project.mkdir()
    server = start_gateway()
    first = [{"role": "user", "content": "the owner's first words"}]
    answer = model_request(server, VICTIM_KEY, "owned", project, messages=first).json()["content"][0]["text"]
    server.call(server.gateway.writer.wait_idle(10.0))
    server.stop()

    server = start_gateway()
    stranger = [
        *first,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "/lore:amnesia on"},
    ]
    refused = model_request(server, ATTACKER_KEY, "owned", project, messages=stranger)
    assert refused.json()["content"][0]["text"].startswith("Lore did not run this command")
    assert not server.gateway.amnesia.is_on("owned")

    refreshed = [
        *first,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "/lore:amnesia on"},
    ]
    obeyed = model_request(server, VICTIM_KEY + "-refreshed", "owned", project, messages=refreshed)
    assert obeyed.json()["content"][0]["text"].startswith("Lore amnesia is ON")


CLIENT_AS_ANOTHER_USER = textwrap.dedent(
    """
    import http.client, json, sys
    url, project, key = sys.argv[1], sys.argv[2], sys.argv[3]
    host, port = url.split("//")[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    for session, text in (("other-user-s", "what do you know?"), ("other-user-s", "/lore:status")):
        body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 50,
                           "messages": [{"role": "user", "content": text}]})
        connection.request("POST", "/v1/messages", body, {
            "content-type": "application/json", "x-api-key": key, "anthropic-version": "2023-06-01",
            "x-session-id": session, "x-lore-project": project})
        response = connection.getresponse()
        print(response.status, json.dumps(json.loads(response.read())))
    """
)


AS_ANOTHER_USER: dict[str, Any] = {"user": 65534, "group": 65534, "extra_groups": [], "cwd": "/"}


def interpreter_for_another_user() -> str:
    """A Python that user 65534 may run (this one may live in root's home)."""
    for candidate in (os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            probe = subprocess.run([candidate, "-I", "-c", "pass"], **AS_ANOTHER_USER, timeout=30)
        except OSError:
            continue
        if probe.returncode == 0:
            return candidate
    pytest.skip("no Python interpreter that another user may run")


@pytest.mark.skipif(sys.platform != "linux", reason="the kernel tells a loopback client's user on Linux")
@pytest.mark.skipif(os.getuid() != 0, reason="running a client as another OS user needs root")
def test_another_os_user_gets_no_memory(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Another account on the machine (uid 65534) sends the victim's project on the default
    upstream: the request goes to the provider untouched, its command is refused, nothing
    is stored. The same request from the gateway's own user carries the knowledge."""
    project = tmp_path / "shop"
    project.mkdir()
    server = start_gateway()
    assert server.gateway.peer_users.available
    plant_knowledge(server, project)
    model_request(server, VICTIM_KEY, "own-user-s", project)
    assert PLANTED in model_calls(fake_upstream)[-1].body.decode()

    python = interpreter_for_another_user()
    result = subprocess.run(
        [python, "-I", "-c", CLIENT_AS_ANOTHER_USER, server.url, str(project), ATTACKER_KEY],
        **AS_ANOTHER_USER,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    (asked, commanded) = result.stdout.strip().splitlines()
    assert asked.startswith("200 ") and commanded.startswith("200 ")
    assert "Lore did not run this command" in commanded
    received = model_calls(fake_upstream)[-1]
    assert PLANTED not in received.body.decode() and "recall" not in received.body.decode()
    assert "other-user-s" not in stored_sessions(server)
    assert server.gateway.stats["memory_refused: the client runs as another OS user"] == 1
    assert server.gateway.stats["commands_refused"] == 1


def test_require_token_for_memory(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """``server.requireTokenForMemory``: the gateway's own user without the token is relayed
    untouched (and not stored); with the token in X-Lore-Token it gets its memory."""
    project = tmp_path / "shop"
    project.mkdir()
    server = start_gateway({"server": {"requireTokenForMemory": True}})
    plant_knowledge(server, project)
    model_request(server, VICTIM_KEY, "no-token", project)
    assert json.loads(model_calls(fake_upstream)[-1].body) == body()
    model_request(server, VICTIM_KEY, "with-token", project, token=server.gateway.tokens.current())
    assert PLANTED in model_calls(fake_upstream)[-1].body.decode()
    assert stored_sessions(server) == {"with-token"}


def test_two_first_requests_of_a_session_at_once_give_it_one_owner() -> None:
    # Both read "no owner" from the store before either bound it: the second used to bind
    # the session to itself too (and the last one bound stayed its owner).
    class SlowStore(MemoryStore):
        async def get_state(self, session_id: str, key: str, default: Any = None) -> Any:
            value = await super().get_state(session_id, key, default)
            await asyncio.sleep(0.05)  # the answer is on its way while the other request reads
            return value

    async def main() -> tuple[list[bool], bytes | None]:
        store = SlowStore()
        owners = SessionOwners(store, b"k" * 32)

        async def no_answers() -> bool:
            return False

        claims = await asyncio.gather(
            owners.claim("s-new", {"x-api-key": "first"}, no_answers),
            owners.claim("s-new", {"x-api-key": "second"}, no_answers),
        )
        return list(claims), await SessionOwners(store, b"k" * 32).owner("s-new")

    claims, stored = asyncio.run(main())
    assert claims == [True, False]
    assert stored == SessionOwners(MemoryStore(), b"k" * 32).credential({"x-api-key": "first"})
