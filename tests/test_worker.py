"""The worker model client against the real loopback fake upstream: three wire APIs, session
credentials, retries (503, 429 with Retry-After), the circuit breaker, bounded concurrency,
the spend counter, keys never shown, and skipping when there is no worker."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from email.utils import formatdate

import pytest

from lore_core.config import WorkerConfig
from lore_core.model import Usage
from lore_core.testing.fake_upstream import FakeUpstream, Reply
from lore_core.testing.net import free_port
from lore_core.worker.client import (
    CircuitOpen,
    NoWorker,
    WorkerClient,
    WorkerError,
    default_price_for,
    parse_retry_after,
)

KEY = "sk-ant-api03-" + "K3y" * 12  # looks like a real key, so masking rules apply too


def worker_for(fake: FakeUpstream, **overrides) -> WorkerClient:
    settings = {
        "upstream": fake.url,
        "model": "worker-model",
        "api_key": KEY,
        "api": "anthropic-messages",
        "retry_backoff_seconds": 0.01,
        **overrides,
    }
    return WorkerClient(WorkerConfig(**settings))


def run(coro):
    return asyncio.run(coro)


async def call_and_close(worker: WorkerClient, *args, **kwargs):
    try:
        return await worker.complete(*args, **kwargs)
    finally:
        await worker.close()


# -- the three APIs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "path", "auth_header", "auth_value"),
    [
        ("anthropic-messages", "/v1/messages", "x-api-key", KEY),
        ("openai-chat", "/v1/chat/completions", "authorization", f"Bearer {KEY}"),
        ("openai-responses", "/v1/responses", "authorization", f"Bearer {KEY}"),
    ],
)
def test_each_api_round_trip(fake_upstream, api, path, auth_header, auth_value):
    fake_upstream.enqueue(Reply(text="- 10:00 ran tests", input_tokens=40, output_tokens=7))
    worker = worker_for(fake_upstream, api=api)
    result = run(call_and_close(worker, "SYSTEM-INSTRUCTIONS", "the prompt", purpose="observer"))

    assert result.text == "- 10:00 ran tests"
    assert (result.api, result.model, result.attempts) == (api, "worker-model", 1)
    assert result.usage.input_tokens == 40 and result.usage.output_tokens == 7
    [req] = fake_upstream.api_requests()
    assert req.path == path
    assert req.header(auth_header) == auth_value
    body = req.json
    assert body["model"] == "worker-model" and body.get("stream") is not True
    # The system prompt sits where each API expects it.
    if api == "anthropic-messages":
        assert body["system"][0]["text"] == "SYSTEM-INSTRUCTIONS"
        assert body["messages"][0]["content"][0]["text"] == "the prompt"
        assert req.header("anthropic-version")
    elif api == "openai-chat":
        assert body["messages"][0] == {"role": "system", "content": "SYSTEM-INSTRUCTIONS"}
        assert body["messages"][1] == {"role": "user", "content": "the prompt"}
    else:
        assert body["instructions"] == "SYSTEM-INSTRUCTIONS"
        assert body["input"][0]["content"][0]["text"] == "the prompt"
        assert body["store"] is False


def test_session_credentials_are_used_and_only_auth_headers_kept(fake_upstream):
    worker = WorkerClient(WorkerConfig())
    worker.remember_credentials(
        "s1",
        "anthropic",
        fake_upstream.url,
        [
            ("Authorization", "Bearer sess-token"),
            ("anthropic-version", "2023-06-01"),
            ("Cookie", "tracking=1"),
            ("User-Agent", "claude-cli/1.0"),
            ("x-lore-upstream-url", "http://elsewhere"),
        ],
        model="claude-session-model",
    )
    result = run(call_and_close(worker, "sys", "hello", session_id="s1"))
    assert result.model == "claude-session-model"
    [req] = fake_upstream.api_requests()
    assert req.path == "/v1/messages"
    assert req.header("authorization") == "Bearer sess-token"
    assert req.header("cookie") is None
    assert req.header("user-agent") != "claude-cli/1.0"
    assert req.header("x-lore-upstream-url") is None
    assert worker.status()["target"]["source"] == "session"


def test_configured_model_overrides_the_sessions(fake_upstream):
    worker = WorkerClient(WorkerConfig(model="cheap-model"))
    worker.remember_credentials("s1", "openai", fake_upstream.url, {"authorization": "Bearer t"}, model="big")
    result = run(call_and_close(worker, "sys", "hello", session_id="s1"))
    assert result.model == "cheap-model"
    assert fake_upstream.api_requests()[0].path == "/v1/chat/completions"


# -- retries -------------------------------------------------------------------------------------


def test_retries_a_503_then_succeeds(fake_upstream):
    fake_upstream.enqueue(Reply(status=503), Reply(text="ok"))
    worker = worker_for(fake_upstream)
    result = run(call_and_close(worker, "sys", "p"))
    assert result.text == "ok" and result.attempts == 2
    assert len(fake_upstream.api_requests()) == 2
    assert worker.counts["retries"] == 1 and worker.status()["consecutive_failures"] == 0


def test_429_waits_at_least_retry_after(fake_upstream):
    # Backoff alone would wait ~10 ms; the header asks for a full second.
    fake_upstream.enqueue(Reply(status=429, headers={"retry-after": "1"}), Reply(text="ok"))
    worker = worker_for(fake_upstream)
    started = time.monotonic()
    result = run(call_and_close(worker, "sys", "p"))
    waited = time.monotonic() - started
    assert result.text == "ok" and result.attempts == 2
    assert waited >= 1.0, f"retried after {waited:.3f}s, Retry-After said 1s"


def test_retry_after_as_http_date_and_milliseconds():
    now = 1_800_000_000.0
    assert parse_retry_after({"retry-after": formatdate(now + 30, usegmt=True)}, now=now) == pytest.approx(30)
    assert parse_retry_after({"retry-after": formatdate(now - 30, usegmt=True)}, now=now) == 0
    assert parse_retry_after({"retry-after": "2.5"}) == 2.5
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_client_errors_are_not_retried(fake_upstream):
    fake_upstream.enqueue(Reply(status=400))
    worker = worker_for(fake_upstream)
    with pytest.raises(WorkerError) as info:
        run(call_and_close(worker, "sys", "p"))
    assert info.value.status == 400
    assert len(fake_upstream.api_requests()) == 1


def test_connect_errors_are_retried_then_fail():
    dead = f"http://127.0.0.1:{free_port()}"
    worker = WorkerClient(WorkerConfig(upstream=dead, model="m", max_retries=2, retry_backoff_seconds=0.01))
    with pytest.raises(WorkerError, match="cannot connect"):
        run(call_and_close(worker, "sys", "p"))
    assert worker.counts["retries"] == 2 and worker.counts["failed"] == 1


def test_a_very_long_retry_after_opens_the_breaker_instead_of_sleeping(fake_upstream):
    fake_upstream.enqueue(Reply(status=429, headers={"retry-after": "3600"}))
    worker = worker_for(fake_upstream, circuit_breaker_threshold=5)
    with pytest.raises(WorkerError, match="retry in 3600s"):
        run(call_and_close(worker, "sys", "p"))
    status = worker.status()
    assert status["state"] == "circuit_open"
    with pytest.raises(CircuitOpen) as info:
        run(call_and_close(worker, "sys", "p"))
    assert info.value.retry_in > 3000
    assert len(fake_upstream.api_requests()) == 1


# -- circuit breaker -----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_circuit_breaker_opens_fails_fast_and_half_opens(fake_upstream):
    clock = Clock()
    fake_upstream.responder = lambda req: Reply(status=500)
    worker = WorkerClient(
        WorkerConfig(
            upstream=fake_upstream.url,
            model="m",
            max_retries=0,
            circuit_breaker_threshold=3,
            circuit_breaker_cooldown_seconds=60,
        ),
        clock=clock,
    )

    async def scenario():
        for _ in range(3):
            with pytest.raises(WorkerError):
                await worker.complete("sys", "p")
        assert worker.status()["state"] == "circuit_open"
        sent = len(fake_upstream.api_requests())
        # Open: fail fast, nothing reaches the network.
        with pytest.raises(CircuitOpen):
            await worker.complete("sys", "p", purpose="observer")
        assert len(fake_upstream.api_requests()) == sent
        assert worker.status()["skipped_by_purpose"] == {"observer": 1}

        # After the cooldown: half-open, one trial. It fails: open again at once.
        clock.now += 61
        assert worker.status()["state"] == "half_open"
        with pytest.raises(WorkerError):
            await worker.complete("sys", "p")
        assert worker.status()["state"] == "circuit_open"
        with pytest.raises(CircuitOpen):
            await worker.complete("sys", "p")

        # Next cooldown: the trial succeeds and closes the breaker.
        clock.now += 61
        fake_upstream.responder = None
        fake_upstream.enqueue(Reply(text="back"))
        assert (await worker.complete("sys", "p")).text == "back"
        status = worker.status()
        assert status["state"] == "available" and status["consecutive_failures"] == 0
        await worker.close()

    run(scenario())


def test_a_bad_request_fails_that_call_only(fake_upstream):
    """A 400 says the request was wrong (a prompt too long for the worker model, say), not
    that the upstream is down: it never opens the breaker."""
    worker = one_failure_breaker(fake_upstream, Clock())

    async def scenario():
        for _ in range(3):
            fake_upstream.enqueue(Reply(status=400))
            with pytest.raises(WorkerError) as err:
                await worker.complete("sys", "p")
            assert err.value.status == 400
        assert worker.status()["state"] == "available"
        fake_upstream.enqueue(Reply(text="fine"))
        assert (await worker.complete("sys", "p")).text == "fine"
        await worker.close()

    run(scenario())


def test_one_sessions_revoked_key_does_not_stop_the_others_work(fake_upstream):
    clock = Clock()
    worker = WorkerClient(
        WorkerConfig(max_retries=0, circuit_breaker_threshold=2, circuit_breaker_cooldown_seconds=60),
        clock=clock,
    )
    worker.remember_credentials(
        "revoked", "openai", fake_upstream.url, {"authorization": "Bearer old"}, model="m"
    )
    worker.remember_credentials(
        "fine", "openai", fake_upstream.url, {"authorization": "Bearer new"}, model="m"
    )
    fake_upstream.responder = lambda req: (
        Reply(status=401) if req.header("authorization") == "Bearer old" else Reply(text="ok")
    )

    async def scenario():
        for _ in range(2):
            with pytest.raises(WorkerError):
                await worker.complete("sys", "p", session_id="revoked")
        with pytest.raises(CircuitOpen):
            await worker.complete("sys", "p", session_id="revoked")
        # The other session's credentials have a breaker of their own.
        assert (await worker.complete("sys", "p", session_id="fine")).text == "ok"
        assert not worker.available("revoked") and worker.available("fine")
        status = worker.status()  # the default target is the latest session's: "fine"
        assert status["state"] == "available" and status["open_circuits"] == 1
        await worker.close()

    run(scenario())
    assert len(fake_upstream.api_requests()) == 3


def one_failure_breaker(fake: FakeUpstream, clock: Clock) -> WorkerClient:
    """A worker without retries whose breaker opens on one failure, for 10 s of ``clock``."""
    config = WorkerConfig(
        upstream=fake.url,
        model="m",
        max_retries=0,
        circuit_breaker_threshold=1,
        circuit_breaker_cooldown_seconds=10,
    )
    return WorkerClient(config, clock=clock)


def test_half_open_lets_exactly_one_trial_through(fake_upstream):
    clock = Clock()
    worker = one_failure_breaker(fake_upstream, clock)

    async def scenario():
        fake_upstream.enqueue(Reply(status=502))
        with pytest.raises(WorkerError):
            await worker.complete("sys", "p")
        clock.now += 11
        fake_upstream.enqueue(Reply(text="trial ok", delay_headers=0.3))
        results = await asyncio.gather(
            worker.complete("sys", "p"), worker.complete("sys", "p"), return_exceptions=True
        )
        assert sorted(type(r).__name__ for r in results) == ["CircuitOpen", "WorkerResult"]
        await worker.close()

    run(scenario())
    assert len(fake_upstream.api_requests()) == 2


def test_a_cancelled_trial_does_not_block_the_breaker_forever(fake_upstream):
    clock = Clock()
    worker = one_failure_breaker(fake_upstream, clock)

    async def scenario():
        fake_upstream.enqueue(Reply(status=503))
        with pytest.raises(WorkerError):
            await worker.complete("sys", "p")
        clock.now += 11
        fake_upstream.enqueue(Reply(text="too late", delay_headers=2), Reply(text="next"))
        trial = asyncio.ensure_future(worker.complete("sys", "p"))
        await asyncio.sleep(0.3)
        trial.cancel()
        with pytest.raises(asyncio.CancelledError):
            await trial
        assert (await worker.complete("sys", "p")).text == "next"
        await worker.close()

    run(scenario())


# -- concurrency and spend -----------------------------------------------------------------------


def test_concurrency_is_bounded(fake_upstream):
    arrivals: list[float] = []

    def slow(req):
        arrivals.append(time.monotonic())
        return Reply(text="ok", delay_headers=0.4)

    fake_upstream.responder = slow
    worker = worker_for(fake_upstream, max_concurrency=2)

    async def scenario():
        try:
            return await asyncio.gather(*(worker.complete("sys", f"p{i}") for i in range(6)))
        finally:
            await worker.close()

    results = run(scenario())
    assert len(results) == 6 and worker.peak_in_flight == 2
    arrivals.sort()
    # The third request can only leave once one of the first two was answered (>= 0.4 s).
    assert arrivals[2] - arrivals[0] >= 0.35
    assert arrivals[1] - arrivals[0] < arrivals[2] - arrivals[0]


def test_spend_counter_uses_price_for(fake_upstream):
    def price_for(model: str, usage: Usage) -> float:
        assert model == "worker-model"
        return usage.input_tokens * 0.001 + usage.output_tokens * 0.002

    fake_upstream.enqueue(*(Reply(text="ok", input_tokens=100, output_tokens=50) for _ in range(2)))
    worker = worker_for(fake_upstream)
    worker.price_for = price_for

    async def scenario():
        await worker.complete("sys", "a")
        result = await worker.complete("sys", "b")
        await worker.close()
        return result

    result = run(scenario())
    assert result.cost == pytest.approx(0.2)
    spend = worker.status()["spend_today"]
    assert spend["cost"] == pytest.approx(0.4)
    assert (spend["calls"], spend["input_tokens"], spend["output_tokens"]) == (2, 200, 100)
    assert spend["day"] == time.strftime("%Y-%m-%d", time.gmtime())


def test_a_broken_price_never_fails_a_call_and_the_default_never_raises(fake_upstream):
    def broken(model, usage):
        raise KeyError(model)

    fake_upstream.enqueue(Reply(text="ok"))
    priced = worker_for(fake_upstream)
    priced.price_for = broken
    result = run(call_and_close(priced, "sys", "p"))
    assert result.cost == 0 and priced.spend_today()["calls"] == 1
    # The default uses the kernel's price table when there is one, else 0.
    for model in ("claude-sonnet-4-5", "no-such-model", ""):
        cost = default_price_for(model, Usage(input_tokens=1000, output_tokens=100))
        assert isinstance(cost, float) and cost >= 0


# -- secrets -------------------------------------------------------------------------------------


def test_keys_never_appear_in_logs_repr_status_or_errors(fake_upstream, caplog):
    session_key = "sk-proj-" + "S3ss10n" * 6
    caplog.set_level(logging.DEBUG)
    # A 503 (logged retry), then a 401 whose body echoes the key, as some providers do.
    fake_upstream.enqueue(
        Reply(status=503),
        Reply(status=401, error_body={"error": {"message": f"Incorrect API key provided: {KEY}"}}),
        Reply(text="ok"),
    )
    worker = worker_for(fake_upstream)
    worker.remember_credentials("s", "openai", fake_upstream.url, {"authorization": f"Bearer {session_key}"})
    with pytest.raises(WorkerError) as info:
        run(call_and_close(worker, "sys", "p"))
    run(call_and_close(worker, "sys", "p"))

    shown = [
        caplog.text,
        repr(worker),
        str(worker),
        json.dumps(worker.status()),
        repr(worker.config),
        str(info.value),
        repr(info.value),
        repr(worker._sessions),
    ]
    for text in shown:
        assert KEY not in text and session_key not in text
    assert "retry 1/3" in caplog.text  # the retry was logged, just not the key


# -- no worker -----------------------------------------------------------------------------------


def test_no_worker_configured_is_skipped_and_reported(fake_upstream):
    worker = WorkerClient(WorkerConfig())
    status = worker.status()
    assert status["state"] == "no_worker" and not status["available"]
    assert "no session credentials" in status["reason"]
    with pytest.raises(NoWorker):
        run(call_and_close(worker, "sys", "p", purpose="reflector"))
    status = worker.status()
    assert status["counts"]["skipped"] == 1 and status["skipped_by_purpose"] == {"reflector": 1}
    assert fake_upstream.api_requests() == []


def test_configured_upstream_without_a_model_is_no_worker(fake_upstream):
    worker = WorkerClient(WorkerConfig(upstream=fake_upstream.url))
    assert worker.status()["state"] == "no_worker"
    assert "worker.model" in worker.status()["reason"]
    with pytest.raises(NoWorker):
        run(call_and_close(worker, "sys", "p"))


def test_config_api_key_alone_goes_to_the_providers_default_upstream(fake_upstream):
    from lore_core.config import UpstreamConfig

    worker = WorkerClient(
        WorkerConfig(api_key=KEY, model="claude-haiku-x"),
        UpstreamConfig(urls={"anthropic": fake_upstream.url, "openai": "http://127.0.0.1:9"}),
    )
    assert run(call_and_close(worker, "sys", "p")).api == "anthropic-messages"
    assert fake_upstream.api_requests()[0].header("x-api-key") == KEY


def test_a_session_keeps_the_credential_headers_its_provider_declares(fake_upstream):
    """What the worker keeps of a session's headers comes from its provider's declaration
    (interfaces.Provider), for the built-in providers and a plugin's alike."""
    from lore_core.interfaces import Provider
    from lore_core.worker.client import PROVIDERS

    gemini = Provider("gemini", key_header="x-goog-api-key", credential_headers=("x-goog-user-project",))
    worker = WorkerClient(providers={**PROVIDERS, "gemini": gemini})
    assert worker.credential_headers("gemini") == {"authorization", "x-goog-api-key", "x-goog-user-project"}
    assert worker.credential_headers("anthropic") == {
        "authorization",
        "x-api-key",
        "anthropic-version",
        "anthropic-beta",
    }
    assert "openai-organization" in worker.credential_headers("openai")
    assert worker.credential_headers("undeclared") == {"authorization"}

    worker.remember_credentials(
        "s1",
        "anthropic",
        fake_upstream.url,
        {"X-Api-Key": KEY, "anthropic-version": "2023-06-01", "cookie": "c", "user-agent": "claude-cli"},
        model="claude-haiku-x",
    )
    assert run(call_and_close(worker, "sys", "p", session_id="s1")).api == "anthropic-messages"
    sent = fake_upstream.api_requests()[0]
    assert sent.header("x-api-key") == KEY and sent.header("anthropic-version") == "2023-06-01"
    assert sent.header("cookie") is None
