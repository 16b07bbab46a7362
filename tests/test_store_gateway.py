"""The temporal store behind a real gateway: the official anthropic SDK drives a 20-turn
session (tool use, streaming and not) and every message is stored exactly once; a client
that hangs up mid-stream leaves a partial answer marked incomplete; a failing store leaves
the proxy passing traffic while /health says degraded; the CLI reads through the gateway."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from lore_core import cli, hookimpl
from lore_core.builtin.memory_store import MemoryStore
from lore_core.cli.sessions import render_message
from lore_core.testing.fake_upstream import FakeUpstream, Reply, ToolCall
from lore_core.testing.net import get_json
from lore_core.testing.server import ThreadedServer

API_KEY = "sk-ant-api03-LoreStoreTestKey-" + "x7Q2" * 8
BEARER = "lore-test-bearer-" + "Zq9" * 10
MODEL = "claude-sonnet-test"


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def content_json(message: anthropic.types.Message) -> list[dict[str, Any]]:
    # What a client resends next turn: the response's blocks as the SDK dumps them.
    return [block.model_dump(exclude_none=True) for block in message.content]


def test_twenty_turn_sdk_session_is_stored_once(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    server = start_gateway()
    by_key = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0)
    by_bearer = anthropic.Anthropic(base_url=server.url, auth_token=BEARER, max_retries=0)
    tools = [{"name": "read_file", "description": "read a file", "input_schema": {"type": "object"}}]

    history: list[dict[str, Any]] = []
    pending_tool: anthropic.types.ToolUseBlock | None = None
    for turn in range(20):
        if pending_tool is not None:
            history.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": pending_tool.id,
                            "content": f"contents of {pending_tool.input['path']}: def f{turn}(): pass",
                            # Claude Code moves its cache marker to the newest block every turn.
                            "cache_control": {"type": "ephemeral"},
                        }
                    ],
                }
            )
        else:
            history.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": f"question {turn}: explain the flux capacitor part {turn}",
                            "cache_control": {"type": "ephemeral"},
                        }
                    ],
                }
            )
        # Only the newest block carries cache_control, as Claude Code sends it.
        for msg in history[:-1]:
            if isinstance(msg["content"], list):
                for block in msg["content"]:
                    block.pop("cache_control", None)
        if turn % 4 == 1:
            reply = Reply(
                text=f"Let me read module {turn}.",
                tool_calls=[ToolCall("read_file", {"path": f"src/mod{turn}.py", "opts": {"z": 1, "a": 2}})],
                input_tokens=100 + turn,
                output_tokens=20 + turn,
            )
        else:
            reply = Reply(text=f"Answer {turn}: the capacitor needs 1.21 gigawatts.", input_tokens=100 + turn)
        fake_upstream.enqueue(reply)
        client = by_key if turn % 2 == 0 else by_bearer
        kwargs: dict[str, Any] = {"model": MODEL, "max_tokens": 256, "messages": history, "tools": tools}
        if turn % 3 == 0:
            with client.messages.stream(**kwargs) as stream:
                answer = stream.get_final_message()
        else:
            answer = client.messages.create(**kwargs)
        history.append({"role": "assistant", "content": content_json(answer)})
        pending_tool = next((b for b in answer.content if b.type == "tool_use"), None)

    assert len(fake_upstream.api_requests()) == 20
    monkeypatch.setenv("LORE_PORT", str(server.port))

    # Through the CLI, which must use the running gateway's API.
    assert cli.main(["sessions", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "via the running gateway" in err
    sessions = json.loads(out)
    assert len(sessions) == 1
    session = sessions[0]
    assert session["message_count"] == len(history) == 40
    assert session["branch_count"] == 1
    assert session["model"] == MODEL

    detail = get_json(f"{server.url}/lore/api/sessions/{session['id']}")
    stored = detail["messages"]
    assert [m["role"] for m in stored] == [m["role"] for m in history]
    assert [m["position"] for m in stored] == list(range(40))
    for sent, kept in zip(history, stored, strict=True):
        sent_blocks = sent["content"]
        assert [b["type"] for b in kept["blocks"]] == [
            {"tool_use": "tool_call", "tool_result": "tool_result"}.get(b["type"], b["type"])
            for b in sent_blocks
        ]
        for b_sent, b_kept in zip(sent_blocks, kept["blocks"], strict=True):
            if b_sent["type"] == "text":
                assert b_kept["text"] == b_sent["text"]
            elif b_sent["type"] == "tool_use":
                assert (b_kept["tool_name"], b_kept["tool_call_id"]) == (b_sent["name"], b_sent["id"])
                assert b_kept["tool_input"] == b_sent["input"]
            else:
                assert b_kept["tool_call_id"] == b_sent["tool_use_id"] and b_kept["text"] == b_sent["content"]
    answers = [m for m in stored if m["role"] == "assistant"]
    assert all(m["origin"] == "response" and m["complete"] for m in answers)
    assert [m["usage"]["input_tokens"] for m in answers] == [100 + t for t in range(20)]
    assert all(m["model"] == MODEL and m["harness"] for m in stored)

    assert cli.main(["show", session["id"]]) == 0
    shown, _ = capsys.readouterr()
    assert "40 messages stored, 1 branch(es)" in shown
    assert "question 19: explain the flux capacitor part 19" in shown
    assert "-> read_file" in shown and "src/mod17.py" in shown
    assert "Answer 18: the capacitor needs 1.21 gigawatts." in shown

    assert cli.main(["search", "gigawatts", "--json", "--limit", "50"]) == 0
    hits = json.loads(capsys.readouterr()[0])
    assert len(hits) == len([t for t in range(20) if t % 4 != 1])
    assert {h["role"] for h in hits} == {"assistant"} and all(h["session"] == session["id"] for h in hits)
    assert set(hits[0]) >= {"id", "session", "role", "score", "text"}

    # Neither credential reached the store (whatever backend) nor the logs.
    assert API_KEY not in json.dumps(detail) and BEARER not in json.dumps(detail)
    assert API_KEY not in caplog.text and BEARER not in caplog.text


def test_client_disconnect_mid_stream_stores_partial_answer(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream
) -> None:
    server = start_gateway()
    words = [f"word{i}" for i in range(40)]
    fake_upstream.enqueue(Reply(text=" ".join(words), text_chunks=40, chunk_delay=0.05))
    body = {
        "model": MODEL,
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "tell me a long story"}],
    }
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    with httpx.Client(timeout=10) as client:
        with client.stream("POST", server.url + "/v1/messages", json=body, headers=headers) as resp:
            seen = b""
            for chunk in resp.iter_raw():
                seen += chunk
                if seen.count(b"text_delta") >= 5:
                    break  # hang up mid-stream

    def stored_answer() -> dict[str, Any] | None:
        sessions = get_json(f"{server.url}/lore/api/sessions")
        if not sessions:
            return None
        data = get_json(f"{server.url}/lore/api/sessions/{sessions[0]['id']}")
        return next((m for m in data["messages"] if m["role"] == "assistant"), None)

    answer = wait_for(stored_answer)
    assert answer["complete"] is False
    assert answer["text"] and " ".join(words).startswith(answer["text"])
    assert len(answer["text"]) < len(" ".join(words))
    assert "INCOMPLETE" in "\n".join(render_message(answer))


class FailingStore(MemoryStore):
    """A store whose disk is full: every write fails."""

    name = "failing"

    async def write(self, batch: Any) -> int:
        raise OSError(28, "No space left on device")


class FailingStorePlugin:
    @hookimpl
    def lore_register_stores(self, register: Callable[[Any], None]) -> None:
        register(FailingStore)


def test_failing_store_degrades_but_traffic_flows(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="lore.store")
    server = start_gateway(
        config={"store": {"backend": "failing", "flushIntervalMs": 50}}, extra_plugins=(FailingStorePlugin(),)
    )
    client = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0)
    for i in range(5):
        fake_upstream.enqueue(Reply(text=f"still here {i}"))
        answer = client.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": f"ping {i}"}]
        )
        assert answer.content[0].text == f"still here {i}"

    health = wait_for(lambda: (h := get_json(server.url + "/health"))["status"] == "degraded" and h)
    assert "No space left on device" in health["store"]["error"]
    assert health["store"]["queued"] > 0  # kept for a retry, not lost
    time.sleep(0.6)  # several retries happen; they must not repeat the log line
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and "No space left" in r.getMessage()]
    assert len(errors) == 1, [r.getMessage() for r in errors]


def test_memory_backend_is_the_fallback_and_cli_reads_directly(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = start_gateway(config={"store": {"backend": "memory"}})
    client = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0)
    client.messages.create(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hello memory"}])
    health = get_json(server.url + "/health")
    assert health["store"]["backend"] == "memory" and health["status"] == "ok"
    status = get_json(server.url + "/lore/api/status")
    assert status["store"]["messages"] == 2

    # No gateway on the configured port: the CLI opens the (empty, in-memory) store itself.
    from lore_core.testing.net import free_port

    monkeypatch.setenv("LORE_PORT", str(free_port()))
    monkeypatch.setenv("LORE_STORE", "memory")
    assert cli.main(["status"]) == 0
    out, err = capsys.readouterr()
    assert "gateway not running" in err and "gateway: not running" in out
    assert cli.main(["search", "hello"]) == 0
    assert "no matches" in capsys.readouterr()[0]
