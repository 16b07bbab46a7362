"""Testing a harness plugin against requests captured from its real client.

A plugin keeps its captures as a JSON list of ``{"tag", "path", "headers": [[name, value],
...], "body"}`` objects (headers as sent, long texts cut down). These helpers turn one into
what the gateway hands a harness, replay it through a real gateway, and record what the
gateway made of it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lore_core import hookimpl
from lore_core.interfaces import RequestContext
from lore_core.model import Exchange
from lore_core.plugins import Registry, make_plugin_manager
from lore_core.testing.poll import poll

#: Headers a replay must not send as captured: the HTTP client sets its own.
REPLAY_SKIPPED_HEADERS = frozenset({"host", "content-length", "connection"})


class Captures:
    """The captured requests of one client, by tag."""

    def __init__(self, path: Path) -> None:
        self.requests: list[dict[str, Any]] = json.loads(path.read_text())

    @property
    def tags(self) -> list[str]:
        return [r["tag"] for r in self.requests]

    def __getitem__(self, tag: str) -> dict[str, Any]:
        return next(r for r in self.requests if r["tag"] == tag)


def request_context(request: dict[str, Any], gateway_cwd: str = "/srv/gateway") -> RequestContext:
    """What the gateway hands a harness for ``request``: parsed by the kernel's own codec."""
    registry = Registry.collect(make_plugin_manager(load_entrypoints=False))
    codec = registry.codec_for_path(request["path"])
    assert codec is not None, f"no codec for {request['path']}"
    raw = copy.deepcopy(request["body"])  # tests change the view; the captures stay as they were
    headers = {k.lower(): v for k, v in request["headers"]}
    return RequestContext(request["path"], headers, codec.parse(raw, json.dumps(raw).encode()), gateway_cwd)


def captured_header(request: dict[str, Any], name: str) -> str:
    """The value of header ``name`` (lower case) as the client sent it."""
    return next(v for k, v in request["headers"] if k.lower() == name)


def replay_headers(request: dict[str, Any]) -> list[tuple[str, str]]:
    """The captured headers to send again, in order, without the transport's own."""
    return [(k, v) for k, v in request["headers"] if k.lower() not in REPLAY_SKIPPED_HEADERS]


class ExchangeRecorder:
    """A test plugin (``extra_plugins=(recorder,)``): keeps every exchange the gateway finishes."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []

    @hookimpl
    def lore_exchange_complete(self, app: Any, exchange: Exchange) -> None:
        self.exchanges.append(exchange)

    def wait(self, count: int) -> Sequence[Exchange]:
        """The exchanges, once at least ``count`` were finished (fails the test otherwise)."""
        poll(lambda: len(self.exchanges) >= count, f"{count} finished exchange(s)", interval=0.02)
        return self.exchanges
