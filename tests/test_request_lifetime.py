"""A finished request is not kept alive by the gateway's own tasks: work a request starts
in the background (reading a session's distillations, an urgent distillation) runs outside
the request's context, which holds Quart's request with its whole body. Such tasks stay
referenced from the session's state after they are done."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import time
import types
from typing import Any

import httpx
import pytest
from quart.ctx import RequestContext
from quart.wrappers.request import Request

from lore_core.testing.fake_upstream import FakeUpstream

# Seconds per test (see the slow marker in lore_core.testing.fixtures).
pytestmark = pytest.mark.slow

SESSIONS = 4
# What lies between a request and a task whose context holds it.
_CONTEXT_CHAIN = (RequestContext, contextvars.Context)
_HAMT = ("hamt", "hamt_bitmap_node", "hamt_array_node", "hamt_collision_node")


def tasks_keeping(request: Request) -> list[asyncio.Task[Any]]:
    """Tasks whose context holds ``request`` (a request is kept by its context, through
    Quart's request context and the context's internal map)."""
    frontier: list[object] = [request]
    seen = {id(request)}
    tasks: list[asyncio.Task[Any]] = []
    for _ in range(8):
        following: list[object] = []
        for obj in frontier:
            for holder in gc.get_referrers(obj):
                if isinstance(holder, types.FrameType | list) or id(holder) in seen:
                    continue
                seen.add(id(holder))
                if isinstance(holder, asyncio.Task):
                    tasks.append(holder)
                elif isinstance(holder, _CONTEXT_CHAIN) or type(holder).__name__ in _HAMT:
                    following.append(holder)
        frontier = following
    return tasks


def test_no_task_of_the_gateway_keeps_a_finished_request(
    start_gateway: Any, fake_upstream: FakeUpstream
) -> None:
    server = start_gateway()
    tools = [{"name": "read_file", "description": "read a file", "input_schema": {"type": "object"}}]
    for i in range(SESSIONS):
        body = {
            "model": "claude-sonnet-4-6",
            "max_tokens": 20,
            "messages": [{"role": "user", "content": f"question {i} " + "padding " * 2000}],
            "tools": tools,
        }
        headers = {"x-api-key": "k", "x-session-id": f"lifetime-{i}"}
        assert (
            httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30).status_code == 200
        )
    context = server.gateway.context
    refreshes = [context.sessions[f"lifetime-{i}"].refreshing for i in range(SESSIONS)]
    assert all(task is not None for task in refreshes)  # each session's distillations were read
    deadline = time.monotonic() + 10
    while not all(task.done() for task in refreshes if task is not None):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    gc.collect()
    requests = [o for o in gc.get_objects() if isinstance(o, Request)]
    assert requests  # the test can see them (a cancelled timer may still hold one for a while)
    for request in requests:
        assert tasks_keeping(request) == [], request.headers.get("x-session-id")
