"""The MCP server driven by the official SDK's client, over stdio (``lore mcp`` as a
subprocess) and over streamable HTTP (``/mcp`` on the gateway), against a real gateway on
loopback (the in-memory store, or DuckDB when installed).

* every tool answers over both transports, and the same call gets the same answer;
* knowledge_add goes through the KnowledgeBook's rules (a secret is refused, a deleted
  title is refused, the same title edits the entry, the provenance says mcp) and reports a
  manual team's pending approval;
* without the token, with a wrong one, with a foreign Host or a web page's Origin, ``/mcp``
  is refused and nothing is read or written; a malformed request is a 4xx, never a 500.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from lore_core.context.framing import DATA_NOTICE
from lore_core.recall.tool import RESULT_LABEL
from lore_core.testing.fake_upstream import Reply
from lore_core.testing.net import api_headers, free_port
from lore_core.testing.server import ThreadedServer

TOOLS = {"recall", "knowledge_search", "knowledge_add", "write_event", "pack", "forget_session"}
Session = Callable[[], Any]


@asynccontextmanager
async def stdio_session(server: ThreadedServer, project: Path, *extra: str) -> AsyncIterator[ClientSession]:
    """``lore mcp`` as an agent launches it, pointed at the test's gateway by LORE_PORT."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "lore_core.cli", "mcp", "--no-start", *extra],
        env={**os.environ, "LORE_PORT": str(server.port)},
        cwd=str(project),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def http_session(
    server: ThreadedServer, project: Path | None, headers: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    sent = {**api_headers(), **({"X-Lore-Project": str(project)} if project else {}), **(headers or {})}
    async with (
        httpx2.AsyncClient(headers=sent, timeout=60) as client,
        streamable_http_client(server.url + "/mcp", http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def run(coro: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(coro)


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def entries(server: ThreadedServer, project: Path) -> list[dict[str, Any]]:
    request = urllib.request.Request(
        f"{server.url}/lore/api/knowledge?project={project}&global=0", headers=api_headers()
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


async def exercise_knowledge(session: ClientSession, title: str) -> dict[str, Any]:
    """knowledge_add, then both searches, on one session; what each answered."""
    listed = await session.list_tools()
    assert {tool.name for tool in listed.tools} == TOOLS
    added = await session.call_tool(
        "knowledge_add",
        {
            "category": "decision",
            "title": title,
            "content": f"{title}: the build uses the zebrafish toolchain, pinned in tools/versions.",
        },
    )
    assert not added.is_error, text_of(added)
    assert added.structured_content["status"] == "created"
    found = await session.call_tool("knowledge_search", {"query": "zebrafish toolchain"})
    assert not found.is_error, text_of(found)
    recalled = await session.call_tool("recall", {"query": "zebrafish toolchain", "limit": 5})
    assert not recalled.is_error, text_of(recalled)
    entry_id = added.structured_content["entry"]["id"]
    assert entry_id in text_of(found) and entry_id in text_of(recalled)
    assert {r["id"] for r in found.structured_content["results"]} <= {
        r["id"] for r in found.structured_content["results"] if r["id"].startswith(("k:", "e:"))
    }
    return {"added": added, "found": found, "recalled": recalled}


@pytest.mark.slow
def test_every_knowledge_tool_over_stdio_and_http_gives_the_same_answers(
    gateway: ThreadedServer, project: Path
) -> None:
    async def main() -> dict[str, Any]:
        async with stdio_session(gateway, project) as session:
            over_stdio = await exercise_knowledge(session, "Build toolchain")
        async with http_session(gateway, project) as session:
            over_http = await exercise_knowledge(session, "Release toolchain")
            same = await session.call_tool("knowledge_search", {"query": "zebrafish toolchain"})
        # The same call over stdio: the same answer (the gateway's routes answer both).
        async with stdio_session(gateway, project) as session:
            again = await session.call_tool("knowledge_search", {"query": "zebrafish toolchain"})
        return {"stdio": over_stdio, "http": over_http, "again": again, "same": same}

    answers = run(main)
    assert answers["same"].structured_content == answers["again"].structured_content
    assert text_of(answers["same"]) == text_of(answers["again"])
    stored = entries(gateway, project)
    assert sorted(e["title"] for e in stored) == ["Build toolchain", "Release toolchain"]
    assert {e["source_ref"] for e in stored} == {"mcp"}


def test_knowledge_add_follows_the_books_rules(shared_gateway: ThreadedServer, project: Path) -> None:
    async def main() -> dict[str, Any]:
        async with http_session(shared_gateway, project) as session:
            out: dict[str, Any] = {}
            out["secret"] = await session.call_tool(
                "knowledge_add",
                {
                    "category": "gotcha",
                    "title": "Deploy key",
                    "content": "use sk-ant-api03-" + "A" * 40 + " for deploys",
                },
            )
            args = {"category": "preference", "title": "Indentation", "content": "tabs"}
            out["first"] = await session.call_tool("knowledge_add", args)
            out["edit"] = await session.call_tool("knowledge_add", {**args, "content": "four spaces"})
            out["same"] = await session.call_tool("knowledge_add", {**args, "content": "four spaces"})
            out["bad"] = await session.call_tool("knowledge_add", {**args, "category": "gossip"})
            return out

    out = run(main)
    assert out["secret"].is_error and "secret" in text_of(out["secret"])
    assert out["first"].structured_content["status"] == "created"
    assert out["edit"].structured_content["status"] == "updated"
    assert out["same"].structured_content["status"] == "unchanged"
    assert out["bad"].is_error  # the SDK validates the category's enum
    stored = entries(shared_gateway, project)
    assert [(e["title"], e["content"]) for e in stored] == [("Indentation", "four spaces")]

    # A deleted title stays deleted (its death certificate refuses it).
    entry_id = stored[0]["id"]
    deleted = httpx.delete(f"{shared_gateway.url}/lore/api/knowledge/{entry_id}", headers=api_headers())
    deleted.raise_for_status()

    async def again() -> Any:
        async with http_session(shared_gateway, project) as session:
            return await session.call_tool(
                "knowledge_add", {"category": "preference", "title": "Indentation", "content": "tabs"}
            )

    refused = run(again)
    assert refused.is_error and "deleted" in text_of(refused)
    assert entries(shared_gateway, project) == []


def test_forget_session_forgets_a_session_of_the_project_only(
    gateway: ThreadedServer, fake_upstream: Any, project: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for session, where in (("s-mine", project), ("s-theirs", elsewhere)):
        fake_upstream.enqueue(Reply(text=f"the quetzalmarrow answer of {session}"))
        body = {
            "model": "claude-test",
            "max_tokens": 20,
            "messages": [{"role": "user", "content": "quetzalmarrow?"}],
        }
        headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "x-lore-session": session,
                   "x-lore-project": str(where)}  # fmt: skip
        httpx.post(f"{gateway.url}/v1/messages", json=body, headers=headers, timeout=30).raise_for_status()

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with http_session(gateway, project) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            out["annotations"] = tools["forget_session"].annotations
            out["theirs"] = await session.call_tool("forget_session", {"session_id": "s-theirs"})
            out["unknown"] = await session.call_tool("forget_session", {"session_id": "s-none"})
            out["mine"] = await session.call_tool("forget_session", {"session_id": "s-mine"})
        return out

    out = run(main)
    assert out["annotations"].destructive_hint is True
    assert out["theirs"].is_error and "not this project's" in text_of(out["theirs"])
    assert out["unknown"].is_error and "no session" in text_of(out["unknown"])
    assert not out["mine"].is_error, text_of(out["mine"])
    assert out["mine"].structured_content["messages"] == 2 and "Forgot session s-mine" in text_of(out["mine"])
    headers = api_headers()
    left = httpx.get(f"{gateway.url}/lore/api/sessions", headers=headers).json()
    assert [s["id"] for s in left] == ["s-theirs"]
    hits = httpx.get(f"{gateway.url}/lore/api/search", params={"q": "quetzalmarrow"}, headers=headers).json()
    assert {h["session"] for h in hits} == {"s-theirs"}


def test_a_manual_team_leaves_a_new_entry_pending(shared_gateway: ThreadedServer, project: Path) -> None:
    bound = httpx.post(
        f"{shared_gateway.url}/lore/api/team",
        json={"project": str(project), "action": "bind", "team": "core", "policy": "manual"},
        headers=api_headers(),
    )
    assert bound.status_code == 200, bound.text

    async def main() -> Any:
        async with http_session(shared_gateway, project) as session:
            return await session.call_tool(
                "knowledge_add", {"category": "decision", "title": "Queue", "content": "we use NATS"}
            )

    added = run(main)
    assert not added.is_error, text_of(added)
    assert added.structured_content["team"] == "pending"
    assert "approval" in text_of(added)


def test_recall_without_a_project_over_http_says_how_to_name_one(shared_gateway: ThreadedServer) -> None:
    async def main() -> Any:
        async with http_session(shared_gateway, None) as session:
            return await session.call_tool("recall", {"query": "anything"})

    answer = run(main)
    assert answer.is_error and "X-Lore-Project" in text_of(answer)


def test_the_project_argument_must_be_absolute(shared_gateway: ThreadedServer, project: Path) -> None:
    async def main() -> Any:
        async with http_session(shared_gateway, project) as session:
            return await session.call_tool("recall", {"query": "x", "project": "relative/dir"})

    answer = run(main)
    assert answer.is_error and "absolute" in text_of(answer)


def test_events_and_packs_over_stdio_and_http(gateway: ThreadedServer, project: Path) -> None:
    async def exercise(session: ClientSession, run_name: str) -> dict[str, Any]:
        written = await session.call_tool(
            "write_event", {"run": run_name, "kind": "note", "content": "the flaky test is test_upload_retry"}
        )
        assert not written.is_error, text_of(written)
        seq = written.structured_content["seq"]
        working = await session.call_tool(
            "write_event",
            {
                "run": run_name,
                "kind": "status",
                "content": "alice owns the upload fix",
                "working": True,
                "key": "owner",
            },
        )
        assert not working.is_error, text_of(working)
        packed = await session.call_tool(
            "pack", {"run": run_name, "query": "which test is flaky", "min_seq": seq, "token_budget": 500}
        )
        assert not packed.is_error, text_of(packed)
        assert "test_upload_retry" in text_of(packed)
        assert packed.structured_content["last_seq"] >= seq
        assert "covered_seq" in text_of(packed)
        return {"seq": seq, "pack": packed}

    async def main() -> dict[str, Any]:
        async with stdio_session(gateway, project) as session:
            over_stdio = await exercise(session, "run-stdio")
        async with http_session(gateway, project) as session:
            over_http = await exercise(session, "run-http")
        return {"stdio": over_stdio, "http": over_http}

    out = run(main)
    assert out["stdio"]["seq"] >= 1 and out["http"]["seq"] >= 1


# -- the guard ------------------------------------------------------------------------------------

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ADD = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {
        "name": "knowledge_add",
        "arguments": {"category": "decision", "title": "Intruder", "content": "written by a web page"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    "headers, status",
    [
        ({}, 401),
        ({"Authorization": "Bearer not-the-token"}, 401),
        ({"Host": "evil.example:80"}, 421),
        ({"Origin": "http://evil.example"}, 403),
    ],
    ids=["no-token", "wrong-token", "foreign-host", "foreign-origin"],
)
def test_mcp_is_refused_without_the_token_or_from_elsewhere(
    shared_gateway: ThreadedServer, project: Path, headers: dict[str, str], status: int
) -> None:
    sent = {**MCP_HEADERS, "X-Lore-Project": str(project)}
    if "Authorization" not in headers and status != 401:
        sent.update(api_headers())  # the token is right: the Host or Origin alone refuses
    sent.update(headers)
    refused = shared_gateway.gateway.stats["requests_refused"]
    for body in (INITIALIZE, ADD):
        answer = httpx.post(shared_gateway.url + "/mcp", json=body, headers=sent)
        assert answer.status_code == status, answer.text
        assert "error" in answer.json()
    assert entries(shared_gateway, project) == []
    assert shared_gateway.gateway.stats["requests_refused"] >= refused + 2


def test_a_raw_tools_call_with_the_token_writes(shared_gateway: ThreadedServer, project: Path) -> None:
    """The refusals above are the guard's: the same request with the token is served."""
    sent = {**MCP_HEADERS, **api_headers(), "X-Lore-Project": str(project)}
    answer = httpx.post(shared_gateway.url + "/mcp", json=ADD, headers=sent)
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"]["structuredContent"]["status"] == "created"
    assert [e["title"] for e in entries(shared_gateway, project)] == ["Intruder"]


@pytest.mark.parametrize(
    "method, path, content, extra",
    [
        ("POST", "/mcp", b"{not json", {}),
        ("POST", "/mcp", b"[]", {}),
        ("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 3, "method": "no/such"}).encode(), {}),
        ("POST", "/mcp", json.dumps(INITIALIZE).encode(), {"Accept": "text/html"}),
        ("POST", "/mcp", json.dumps(INITIALIZE).encode(), {"Content-Type": "text/plain"}),
        ("GET", "/mcp", b"", {}),
        ("DELETE", "/mcp", b"", {}),
        ("PUT", "/mcp", b"{}", {}),
        ("POST", "/mcp/elsewhere", b"{}", {}),
    ],
)
def test_client_mistakes_are_never_a_500(
    shared_gateway: ThreadedServer, method: str, path: str, content: bytes, extra: dict[str, str]
) -> None:
    sent = {**MCP_HEADERS, **api_headers(), **extra}
    answer = httpx.request(method, shared_gateway.url + path, content=content, headers=sent)
    assert answer.status_code < 500, (answer.status_code, answer.text)
    # The gateway still answers.
    assert httpx.get(shared_gateway.url + "/health").status_code == 200


def test_a_websocket_to_mcp_is_refused(shared_gateway: ThreadedServer) -> None:
    answer = httpx.get(
        shared_gateway.url + "/mcp",
        headers={
            **api_headers(),
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        },
    )
    assert answer.status_code in (403, 426), answer.text


def test_lore_mcp_without_a_gateway_says_so_on_stderr(lore_env: dict[str, str], project: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lore_core.cli", "mcp", "--no-start"],
        env={**os.environ, "LORE_PORT": str(free_port())},
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert done.stdout == ""  # stdout is the MCP channel: nothing else is ever written there
    assert "no Lore gateway answers" in done.stderr and "lore serve" in done.stderr


def test_the_gateway_stops_cleanly_after_serving_mcp(
    start_gateway: Callable[..., ThreadedServer], project: Path
) -> None:
    server = start_gateway()

    async def main() -> None:
        async with http_session(server, project) as session:
            await session.call_tool("recall", {"query": "anything"})

    run(main)
    server.stop()
    assert server._error is None


def test_recall_of_something_never_stored_says_nothing_matches(
    gateway: ThreadedServer, project: Path
) -> None:
    async def main() -> tuple[Any, Any]:
        async with http_session(gateway, project) as session:
            await exercise_knowledge(session, "Build toolchain")
            never = await session.call_tool(
                "recall", {"query": "which sourdough starter recipe did grandma send for the toolchain?"}
            )
            stored = await session.call_tool("recall", {"query": "zebrafish toolchain"})
        return never, stored

    never, stored = run(main)
    assert not never.is_error and not stored.is_error
    # Results come framed as reference data (security review F9); "no memories" is a sentence.
    shown = text_of(never).removeprefix(f"<lore-{RESULT_LABEL}>\n{DATA_NOTICE}\n\n")
    assert shown.startswith("Nothing in memory matches") or shown.startswith("No memories found")
    assert "Nothing in memory matches" not in text_of(stored) and "zebrafish" in text_of(stored)
