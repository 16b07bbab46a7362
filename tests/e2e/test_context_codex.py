"""Real Codex through a real gateway: Codex has no switch for its own auto-compaction, so the
usage it is shown is scaled (``budget.clientUsageShare``) and it never compacts (the control
case, with the real usage shown, does); a stream the upstream fails as too long is sent again
at a higher layer before Codex sees the failure."""

from __future__ import annotations

from pathlib import Path

import pytest
from lore_e2e_support import CODEX_EXEC, codex_provider_env, find_client, run_client

from lore_core.testing.fake_upstream import FakeUpstream, Reply

pytestmark = pytest.mark.e2e


def compaction_requests(fake: FakeUpstream) -> list[bytes]:
    """Codex's own compaction call: a Responses request whose turn metadata says
    ``"compaction": {"trigger": "auto", "reason": "context_limit", ...}``."""
    return [r.body for r in fake.api_requests() if b"context_limit" in r.body and b"compaction" in r.body]


@pytest.mark.parametrize("usage_share", [0.5, 0.0], ids=["scaled", "real-usage"])
def test_codex_never_compacts_on_scaled_usage(
    tmp_path: Path, start_gateway, fake_upstream: FakeUpstream, usage_share: float
) -> None:
    """gpt-5-codex: Codex compacts before a turn once the last usage passed its limit
    (~245K). 300K prompt tokens really used; shown scaled to half of the 400K window, Codex
    goes on; shown as they are (``clientUsageShare: 0``), it compacts."""
    codex = find_client("codex")
    gateway = start_gateway({"budget": {"clientUsageShare": usage_share}})
    env = codex_provider_env(tmp_path, f"{gateway.url}/v1")
    fake_upstream.enqueue(Reply(text="pong", input_tokens=20_000, cache_read_tokens=280_000))
    result = run_client([codex, *CODEX_EXEC, "say pong"], env, cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    fake_upstream.responder = lambda req: Reply(text="pong again")
    result = run_client([codex, *CODEX_EXEC, "resume", "--last", "say pong again"], env, cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    assert "pong again" in result.stdout, result.describe()
    if usage_share:
        assert compaction_requests(fake_upstream) == []
        assert len(fake_upstream.api_requests()) == 2
    else:
        assert len(compaction_requests(fake_upstream)) == 1


def test_codex_turn_survives_a_stream_failed_as_too_long(
    tmp_path: Path, start_gateway, fake_upstream: FakeUpstream
) -> None:
    """The upstream fails the started stream as too long (HTTP 200, response.failed with
    context_length_exceeded). Codex would stop the turn ("ran out of room in the model's
    context window"); the gateway sees the failure before relaying anything and sends the
    request again at a higher layer, so Codex prints the answer."""
    codex = find_client("codex")
    gateway = start_gateway()
    env = codex_provider_env(tmp_path, f"{gateway.url}/v1")
    failure = {
        "code": "context_length_exceeded",
        "message": "Your input exceeds the context window of this model. Please adjust your input.",
    }
    fake_upstream.enqueue(Reply(stream_failure=failure), Reply(text="pong after the retry"))
    result = run_client([codex, *CODEX_EXEC, "say pong"], env, cwd=tmp_path)
    assert result.returncode == 0, result.describe()
    assert "pong after the retry" in result.stdout, result.describe()
    assert "ran out of room" not in result.stderr
    assert gateway.gateway.stats["overflow_retries"] == 1
