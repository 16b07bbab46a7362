"""Load and isolation, small: dozens of concurrent streaming sessions (Claude Code, OpenCode,
Codex and a plain SDK: Messages, Chat Completions and Responses) through a real gateway on
a real socket, with the DuckDB store. Every turn the client received in full is stored
exactly once, under its own session, and no session holds another's text. The same client
and checker as ``benchmarks/soak.py`` (``lore_core/testing/soak.py``); a harness that merges
sessions makes the check fail."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lore_store_duckdb.store import DuckDBStore

from lore_core import hookimpl
from lore_core.interfaces import Harness, RequestContext
from lore_core.testing.fake_upstream import FakeUpstream, echo_responder
from lore_core.testing.server import ThreadedServer
from lore_core.testing.soak import KINDS, Load, Tally, Verdict, read_store_file, run_load, verify

# Seconds per test (see the slow marker in lore_core.testing.fixtures).
pytestmark = pytest.mark.slow

pytest.importorskip("lore_store_duckdb.store")

# Nothing but the proxy and the store: the indexer and distillation only add CPU here.
CONFIG = {"embedding": {"index": False}, "distill": {"idleTimeoutSeconds": 3600}}


def soak(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    load: Load,
    extra_plugins: tuple[object, ...] = (),
) -> tuple[Tally, Verdict]:
    # Several small deltas a few ms apart: the streams overlap in the gateway.
    fake_upstream.responder = echo_responder(text_chunks=4, chunk_delay=0.002)
    db = tmp_path / "store" / "lore.duckdb"
    server = start_gateway(config=CONFIG, env={"LORE_DB_PATH": str(db)}, extra_plugins=extra_plugins)
    tally = asyncio.run(run_load(server.url, load))
    server.stop()  # a clean stop flushes the writer and closes the store
    stored, branches = read_store_file(DuckDBStore, db)
    return tally, verify(tally, stored, branches)


def test_concurrent_streaming_sessions_are_stored_once_and_apart(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    load = Load(sessions=48, min_turns=3, max_turns=3, conversations_per_slot=1)
    tally, verdict = soak(start_gateway, fake_upstream, tmp_path, load)

    assert not tally.errors and not tally.cancelled, tally.errors
    assert len(tally.acknowledged) == 48 * 3
    assert Counter(c.kind for c in tally.conversations.values()) == {kind: 12 for kind in KINDS}
    assert verdict.ok, verdict.summary()
    assert verdict.exactly_once == 48 * 3
    # One stored session per conversation: the ids the clients sent, a fingerprint for the SDK.
    assert verdict.sessions_stored == 48
    for label, conv in tally.conversations.items():
        home = verdict.homes[label]
        assert home == conv.session_id if conv.session_id else home.startswith("fp-")
    # 2 messages per turn, plus OpenCode's system message and Codex's environment item.
    assert verdict.messages_stored == 48 * 3 * 2 + 24
    assert verdict.untagged == 0 and verdict.unacknowledged_stored == 0


class MergingHarness(Harness):
    """A broken harness: every request is one session."""

    name = "merging"

    def recognise(self, ctx: RequestContext) -> int:
        return 1000

    def session_id(self, ctx: RequestContext) -> str | None:
        return "one-session-for-all"

    def project(self, ctx: RequestContext) -> str | None:
        return None

    def launch(self, gateway_url: str, args: list[str]) -> Any:
        raise NotImplementedError


class MergingPlugin:
    @hookimpl
    def lore_register_harnesses(self, register: Callable[[Any], None]) -> None:
        register(MergingHarness())


def test_the_check_fails_when_sessions_are_merged(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    load = Load(sessions=8, min_turns=2, max_turns=2, conversations_per_slot=1)
    tally, verdict = soak(start_gateway, fake_upstream, tmp_path, load, extra_plugins=(MergingPlugin(),))

    assert len(tally.acknowledged) == 8 * 2  # the clients see nothing wrong
    assert not verdict.ok
    assert verdict.sessions_stored == 1
    # One session for all: the credentials of its first request own it, and the conversations
    # sent with the other credentials are strangers to it (relayed, not stored). The Anthropic
    # key carries the 2 Claude Code conversations, the bearer token the other 6.
    (merged,) = verdict.merged
    found = re.search(r"(\d+) conversations", merged)
    assert found is not None and int(found.group(1)) in (2, 6), merged
    stored = int(found.group(1))
    assert len({line.split()[0] for line in verdict.missing}) == 8 - stored
    # Those stored that sent their own session id are filed under another one.
    assert verdict.misfiled
