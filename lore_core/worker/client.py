"""The worker model client: background LLM calls (observer, reflector, curator, query
expansion, judges), off the request path.

Where a call goes, first match wins:

1. a configured worker (``worker.upstream`` or ``worker.apiKey`` in ``.lore.json``, or
   ``LORE_WORKER_UPSTREAM`` / ``LORE_WORKER_API_KEY``);
2. the credentials of the session that produced the data, remembered in memory by
   :meth:`WorkerClient.remember_credentials` (only the authorization headers are kept, never
   written anywhere);
3. nowhere: the call raises :class:`NoWorker` at once and the skip is counted for
   ``/health``.

Every call is bounded (a semaphore), retried with exponential backoff on 408/409/429/5xx,
connect errors and timeouts (a ``Retry-After`` header wins over the backoff), and guarded by
a circuit breaker per target (upstream and credentials): after ``circuitBreakerThreshold``
consecutive failed calls to it, its calls fail fast with :class:`CircuitOpen` for
``circuitBreakerCooldownSeconds``, then one trial call is let through. One provider down or
one session's key revoked does not stop the others' work. A 400, 413 or 422 says the one
request was wrong (a prompt too long for the worker model, say), not the target: it fails
that call only. Nothing is ever retried in a tight loop. Spend is counted per UTC day from the
reported usage and a ``price_for(model, usage)`` callable.

Requests are built with the built-in codecs' ``render`` from a tiny synthetic view, and
answers read with their ``parse_response``, so the worker speaks exactly the wire shapes the
gateway does.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import attrs
import httpx

from lore_core.config import UpstreamConfig, WorkerConfig
from lore_core.interfaces import Codec, Provider
from lore_core.model import Usage
from lore_core.pipeline.upstream import join_url, validate_base_url
from lore_core.storage.masking import mask_secrets
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.openai_chat.codec import OpenAIChatCodec
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec
from lore_core.wire.providers import BUILTIN_PROVIDERS
from lore_core.worker.errors import CircuitOpen, NoWorker, WorkerError, WorkerUnavailable

log = logging.getLogger("lore.worker")

# Statuses worth another attempt: timeouts, conflicts, rate limits, overload and server errors
# (529 is Anthropic's "overloaded").
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
# A Retry-After longer than this is not slept through holding a concurrency slot: the call
# fails and the breaker opens for that long instead.
MAX_RETRY_AFTER_SECONDS = 60.0
# Sessions whose credentials are remembered at once (oldest forgotten first).
MAX_REMEMBERED_SESSIONS = 256
# Answers that blame the request, not the target: they never open a breaker.
REQUEST_ERROR_STATUSES = frozenset({400, 413, 422})

#: The wire APIs a worker speaks when the gateway does not hand it the registered codecs
#: (tools and tests building a client alone), by API name.
CODECS: dict[str, Codec] = {
    codec.api: codec for codec in (AnthropicMessagesCodec(), OpenAIChatCodec(), OpenAIResponsesCodec())
}
#: ... and the providers those speak, by name.
PROVIDERS: dict[str, Provider] = {provider.name: provider for provider in BUILTIN_PROVIDERS}

PriceFor = Callable[[str, Usage], float]


@attrs.define
class WorkerResult:
    """One successful worker call."""

    text: str
    usage: Usage
    model: str
    api: str
    provider: str
    # Scheme and host of the upstream that answered (never a path, query or credential).
    upstream: str
    cost: float = 0.0
    attempts: int = 1
    seconds: float = 0.0


@attrs.define(repr=False)
class _Credentials:
    """Authorization headers of one session, held in memory only.

    ``repr`` is redacted so that an accidental ``log.debug("%r", ...)`` or a traceback with
    locals never prints a key.
    """

    provider: str
    api: str
    upstream: str
    headers: dict[str, str]
    model: str | None = None
    seen_at: float = 0.0

    def __repr__(self) -> str:
        return (
            f"<credentials {self.provider} {_origin(self.upstream)} ({len(self.headers)} headers, redacted)>"
        )


@attrs.define(repr=False)
class _Target:
    """Where one call goes; carries credentials, so it is never logged whole."""

    api: str
    provider: str
    url: str
    model: str
    headers: dict[str, str]
    source: str  # "configured" | "session"

    @property
    def breaker_key(self) -> str:
        """Which circuit breaker guards calls here: one per upstream and credentials (a
        digest, never the key itself)."""
        auth = "\n".join(f"{k}:{v}" for k, v in sorted(self.headers.items()))
        return f"{_origin(self.url)} {hashlib.sha256(auth.encode()).hexdigest()[:16]}"

    def __repr__(self) -> str:
        return f"<worker target {self.api} {self.model} {_origin(self.url)} ({self.source})>"


@attrs.define
class _Breaker:
    """Consecutive failures of one target, and whether its circuit is open."""

    failures: int = 0
    opened_at: float | None = None
    open_for: float = 0.0
    trial_in_flight: bool = False
    last_error: str | None = None

    def cooldown_left(self, now: float) -> float:
        """Seconds until an open circuit lets a trial call through (0: closed, or cooled)."""
        if self.opened_at is None:
            return 0.0
        return max(0.0, self.open_for - (now - self.opened_at))


@attrs.define
class _Spend:
    day: str = ""
    cost: float = 0.0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, or ``Retry-After`` as seconds or an HTTP
    date (RFC 9110 section 10.2.3); ``None`` when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


_PRICE_TABLE: Any = None


def default_price_for(model: str, usage: Usage) -> float:
    """Dollars for one call from the kernel's price table (``lore_core.context.pricing``)
    when it is installed, else 0 (spend is then counted in tokens only). The gateway should
    pass a ``price_for`` built from the configured table instead; this default only knows
    the shipped prices. Any failure counts as 0: pricing must never fail a worker call."""
    global _PRICE_TABLE
    try:
        if _PRICE_TABLE is None:
            from lore_core.context.pricing import PriceTable

            _PRICE_TABLE = PriceTable()
        value = _PRICE_TABLE.lookup(model).cost(usage)
    except Exception:
        return 0.0
    return float(value) if isinstance(value, int | float) else 0.0


class WorkerClient:
    """Bounded, retrying, circuit-broken client for the worker model. Async; one per gateway.

    ``price_for(model, usage) -> float`` prices a call in dollars for the spend counter.
    ``clock`` (monotonic seconds) and ``sleep`` are parameters so the breaker and retries can
    be driven by tests; production uses the real ones.
    """

    def __init__(
        self,
        config: WorkerConfig | None = None,
        upstream: UpstreamConfig | None = None,
        *,
        price_for: PriceFor | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = asyncio.sleep,
        transport: httpx.AsyncBaseTransport | None = None,
        codecs: Mapping[str, Codec] | None = None,
        providers: Mapping[str, Provider] | None = None,
    ) -> None:
        self.config = config or WorkerConfig()
        self.providers = PROVIDERS if providers is None else providers
        # The APIs the worker can speak: those whose codec renders a one-turn request.
        self.codecs = {
            api: codec
            for api, codec in (CODECS if codecs is None else codecs).items()
            if codec.worker_request("model", "", "", 1) is not None
        }
        self.upstream = upstream or UpstreamConfig(
            urls={p.name: p.upstream for p in self.providers.values() if p.upstream}
        )
        self.price_for = price_for or default_price_for
        self._clock = clock
        self._sleep = sleep
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._sessions: OrderedDict[str, _Credentials] = OrderedDict()
        # One circuit breaker per target (Target.breaker_key), least recently used first.
        self._breakers: OrderedDict[str, _Breaker] = OrderedDict()
        # Counters for /health and tests.
        self.in_flight = 0
        self.peak_in_flight = 0
        self.counts: dict[str, int] = {"calls": 0, "ok": 0, "failed": 0, "retries": 0, "skipped": 0}
        self.skipped_by_purpose: dict[str, int] = {}
        self._spend = _Spend()

    def __repr__(self) -> str:
        # Deliberately no headers, no key: only what /health shows.
        return f"<WorkerClient {self.status()['state']} sessions={len(self._sessions)}>"

    __str__ = __repr__

    # -- lifecycle ---------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            cfg = self.config
            timeout = httpx.Timeout(cfg.timeout_seconds, connect=min(10.0, cfg.timeout_seconds))
            self._client = httpx.AsyncClient(
                timeout=timeout, follow_redirects=False, transport=self._transport
            )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- credentials -------------------------------------------------------------------------

    def remember_credentials(
        self,
        session_id: str,
        provider: str,
        upstream_url: str,
        headers: Mapping[str, str] | list[tuple[str, str]],
        *,
        model: str | None = None,
        api: str | None = None,
    ) -> None:
        """Keep a session's credentials in memory so its background work can use them.

        Only the credential headers of the session's provider are kept
        (:meth:`credential_headers`); nothing is logged or stored. ``api`` is the session's
        wire API (default: the provider's usual one), ``model`` its model.
        """
        items = headers.items() if isinstance(headers, Mapping) else headers
        wanted = self.credential_headers(provider)
        kept = {k.lower(): v for k, v in items if k.lower() in wanted}
        if api not in self.codecs:
            api = self._default_api(provider)
        self._sessions[session_id] = _Credentials(
            provider=self.codecs[api].provider,
            api=api,
            upstream=validate_base_url(upstream_url),
            headers=kept,
            model=model,
            seen_at=time.time(),
        )
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > MAX_REMEMBERED_SESSIONS:
            self._sessions.popitem(last=False)

    def credential_headers(self, provider: str) -> frozenset[str]:
        """The headers kept from a session of ``provider``: what authenticates the call
        (``Authorization``, the key header the provider declares), and what the provider needs
        to accept those credentials (API version, OAuth beta flag, organisation, project,
        account: :attr:`Provider.credential_headers`)."""
        declared = self.providers.get(provider) or Provider(provider)
        return frozenset({"authorization", declared.key_header, *declared.credential_headers})

    def forget_credentials(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def _target(self, session_id: str | None) -> _Target:
        cfg = self.config
        latest = next(reversed(self._sessions.values())) if self._sessions else None
        # A session's work is billed to its own credentials only, never to another
        # session's: a process could otherwise have its text sent under someone else's key.
        # Work not tied to one session (query expansion, ...) uses the latest seen.
        creds = self._sessions.get(session_id) if session_id else latest
        if cfg.upstream or cfg.api_key:
            # The configured worker's own key; a session only lends its model's name.
            creds = creds or latest
            model = cfg.model or (creds.model if creds else None) or ""
            if not model:
                raise NoWorker("worker.model is not set (needed with worker.upstream / worker.apiKey)")
            api = cfg.api or (creds.api if creds and not cfg.upstream else self._guess_api(model))
            if api not in self.codecs:
                raise NoWorker(f"worker.api {api!r}: no codec for it can make worker requests")
            provider = self.codecs[api].provider
            base = cfg.upstream or self.upstream.urls.get(provider, "")
            if not base:
                raise NoWorker(
                    f"no upstream for the provider {provider!r}: set worker.upstream or upstream.{provider}"
                )
            url = validate_base_url(base)
            headers: dict[str, str] = {}
            if cfg.api_key:
                # How the provider takes a key (x-api-key, or Authorization: Bearer).
                declared = self.providers.get(provider) or Provider(provider)
                headers[declared.key_header] = declared.key_prefix + cfg.api_key
            return _Target(api, provider, url, model, headers, "configured")
        if creds is None:
            if session_id and self._sessions:
                raise NoWorker(
                    "the session's credentials are not known to this gateway run (kept in memory "
                    "only, from its requests): its work waits for its next request"
                )
            raise NoWorker("no worker configured and no session credentials seen yet")
        model = cfg.model or creds.model or ""
        if not model:
            raise NoWorker("the session's model is unknown and worker.model is not set")
        api = cfg.api or creds.api
        if api not in self.codecs:
            raise NoWorker(f"worker.api {api!r}: no codec for it can make worker requests")
        return _Target(api, self.codecs[api].provider, creds.upstream, model, dict(creds.headers), "session")

    def _default_api(self, provider: str) -> str:
        """The API the worker speaks to a provider when a session's own is unknown: the
        first registered codec of that provider that is its default for worker calls."""
        for api, codec in self.codecs.items():
            if codec.provider == provider and codec.worker_default:
                return api
        return next((api for api, c in self.codecs.items() if c.worker_default), next(iter(self.codecs)))

    def _guess_api(self, model: str) -> str:
        """The API for a configured upstream with no ``worker.api``: that of the provider
        whose :attr:`~Provider.model_prefixes` the model has (``claude*``: Anthropic's),
        else of the default provider (OpenAI's Chat Completions: what local servers speak)."""
        name = model.lower()
        providers = self.providers.values()
        claimed = next((p for p in providers if name.startswith(p.model_prefixes)), None)
        chosen = claimed or next((p for p in providers if p.default), None)
        return self._default_api(chosen.name if chosen else "")

    # -- the call ----------------------------------------------------------------------------

    async def complete(
        self,
        system: str,
        prompt: str,
        *,
        session_id: str | None = None,
        purpose: str = "worker",
        max_tokens: int | None = None,
    ) -> WorkerResult:
        """One non-streamed completion: ``system`` instructions, one user ``prompt``.

        Raises :class:`NoWorker` / :class:`CircuitOpen` (both :class:`WorkerUnavailable`)
        without touching the network, or :class:`WorkerError` when the call failed.
        """
        try:
            target = self._target(session_id)
            body = self.codecs[target.api].worker_request(
                target.model, system, prompt, max_tokens or self.config.max_output_tokens
            )
            if body is None:
                raise NoWorker(f"the {target.api} codec makes no worker requests")
            breaker = self._breaker(target)
            self._admit(breaker)
        except WorkerUnavailable:
            self.counts["skipped"] += 1
            self.skipped_by_purpose[purpose] = self.skipped_by_purpose.get(purpose, 0) + 1
            raise
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(max(1, self.config.max_concurrency))
        started = time.monotonic()
        try:
            async with self._semaphore:
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                self.counts["calls"] += 1
                try:
                    result = await self._attempts(target, body, purpose)
                finally:
                    self.in_flight -= 1
        except WorkerError as exc:
            self.counts["failed"] += 1
            if exc.status in REQUEST_ERROR_STATUSES:
                breaker.trial_in_flight = False  # the target answered: not its failure
            else:
                self._record_failure(breaker, exc.reason, exc.open_for)
            raise
        except BaseException:
            # Cancelled (shutdown, a caller's timeout): not the worker's fault, but a
            # half-open trial must not stay "in flight" forever and block every later call.
            breaker.trial_in_flight = False
            raise
        result.seconds = time.monotonic() - started
        self.counts["ok"] += 1
        self._record_success(breaker)
        self._count_spend(result)
        return result

    async def _attempts(self, target: _Target, body: dict[str, Any], purpose: str) -> WorkerResult:
        cfg = self.config
        codec = self.codecs[target.api]
        url = join_url(target.url, codec.request_path or codec.paths[0], "")
        headers = {"content-type": "application/json", "accept": "application/json", **target.headers}
        for name, value in codec.worker_headers:
            headers.setdefault(name, value)
        origin = _origin(target.url)
        attempts = max(0, cfg.max_retries) + 1
        for attempt in range(attempts):
            retry_after: float | None = None
            try:
                response = await self._http().post(url, json=body, headers=headers)
            except httpx.TimeoutException as exc:
                reason, status = f"timed out ({exc.__class__.__name__})", None
            except httpx.TransportError as exc:
                # The message of a transport error names host and port at most, never headers.
                reason, status = f"cannot connect ({exc.__class__.__name__})", None
            else:
                status = response.status_code
                if status == 200:
                    return self._result(target, response, origin, attempt + 1)
                reason = f"HTTP {status}: {_error_message(response)}"
                if status not in RETRY_STATUSES:
                    raise WorkerError(reason, status)
                retry_after = parse_retry_after(response.headers)
            if attempt == attempts - 1:
                raise WorkerError(reason, status)
            if retry_after is not None and retry_after > MAX_RETRY_AFTER_SECONDS:
                raise WorkerError(f"{reason}; asked to retry in {retry_after:.0f}s", status, retry_after)
            if retry_after is not None:
                delay = retry_after
            else:
                delay = cfg.retry_backoff_seconds * (2**attempt) * (0.5 + random.random())
            self.counts["retries"] += 1
            log.warning(
                "worker %s (%s) at %s: %s; retry %d/%d in %.2fs",
                purpose,
                target.model,
                origin,
                reason,
                attempt + 1,
                attempts - 1,
                delay,
            )
            await self._sleep(delay)
        raise AssertionError("unreachable")

    def _result(self, target: _Target, response: httpx.Response, origin: str, attempts: int) -> WorkerResult:
        try:
            data = response.json()
        except ValueError as exc:
            raise WorkerError("answer is not JSON", 200) from exc
        if not isinstance(data, dict):
            raise WorkerError("answer is not a JSON object", 200)
        message = self.codecs[target.api].parse_response(data)
        if message.error or not message.complete:
            raise WorkerError(f"answer reports an error: {message.error or 'incomplete'}", 200)
        text = message.text.strip()
        if not text:
            raise WorkerError("empty answer", 200)
        model = message.model or target.model
        try:
            cost = float(self.price_for(model, message.usage))
        except Exception:
            log.exception("price_for(%s) failed; counting 0", model)
            cost = 0.0
        return WorkerResult(
            text=text,
            usage=message.usage,
            model=model,
            api=target.api,
            provider=target.provider,
            upstream=origin,
            cost=cost,
            attempts=attempts,
        )

    # -- circuit breaker ---------------------------------------------------------------------

    def _breaker(self, target: _Target) -> _Breaker:
        key = target.breaker_key
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = self._breakers[key] = _Breaker()
            while len(self._breakers) > MAX_REMEMBERED_SESSIONS:
                self._breakers.popitem(last=False)
        self._breakers.move_to_end(key)
        return breaker

    def _admit(self, breaker: _Breaker) -> None:
        """Let a call through, or raise :class:`CircuitOpen`. After the cooldown exactly one
        trial call passes (half-open); the others keep failing fast until it succeeds."""
        if breaker.opened_at is None:
            return
        left = breaker.cooldown_left(self._clock())
        if left > 0:
            reason = f"worker circuit open after repeated failures (last: {breaker.last_error})"
            raise CircuitOpen(reason, left)
        if breaker.trial_in_flight:
            raise CircuitOpen("worker circuit half-open: a trial call is in flight", 0.0)
        breaker.trial_in_flight = True

    def _record_success(self, breaker: _Breaker) -> None:
        if breaker.opened_at is not None:
            log.info("worker circuit closed: the trial call succeeded")
        breaker.failures = 0
        breaker.opened_at = None
        breaker.trial_in_flight = False
        breaker.last_error = None

    def _record_failure(self, breaker: _Breaker, reason: str, open_for: float | None = None) -> None:
        breaker.failures += 1
        breaker.last_error = reason
        was_trial = breaker.trial_in_flight
        breaker.trial_in_flight = False
        if (
            was_trial
            or open_for is not None
            or breaker.failures >= max(1, self.config.circuit_breaker_threshold)
        ):
            breaker.opened_at = self._clock()
            breaker.open_for = max(open_for or 0.0, self.config.circuit_breaker_cooldown_seconds)
            log.warning(
                "worker circuit open for %.0fs after %d consecutive failures (last: %s)",
                breaker.open_for,
                breaker.failures,
                reason,
            )

    # -- spend -------------------------------------------------------------------------------

    def _count_spend(self, result: WorkerResult) -> None:
        today = datetime.now(UTC).date().isoformat()
        if self._spend.day != today:
            self._spend = _Spend(day=today)
        spend = self._spend
        spend.calls += 1
        spend.cost += result.cost
        spend.input_tokens += result.usage.input_tokens
        spend.output_tokens += result.usage.output_tokens
        spend.cache_read_tokens += result.usage.cache_read_tokens
        spend.cache_write_tokens += result.usage.cache_write_tokens

    def spend_today(self) -> dict[str, Any]:
        """Calls, tokens and dollars spent on worker calls since 00:00 UTC."""
        today = datetime.now(UTC).date().isoformat()
        spend = self._spend if self._spend.day == today else _Spend(day=today)
        out = attrs.asdict(spend)
        out["cost"] = round(spend.cost, 6)
        return out

    def available(self, session_id: str | None = None) -> bool:
        """Whether a call for ``session_id``'s work would be attempted now (a target exists
        and its circuit is not open; half-open counts as available)."""
        try:
            target = self._target(session_id)
        except NoWorker:
            return False
        breaker = self._breakers.get(target.breaker_key)
        if breaker is None or breaker.opened_at is None:
            return True
        return breaker.cooldown_left(self._clock()) == 0 and not breaker.trial_in_flight

    # -- reporting ---------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """For ``/health`` and ``lore status``: ``state`` is ``"available"``,
        ``"circuit_open"``, ``"half_open"`` or ``"no_worker"``, with a ``reason``."""
        target: _Target | None = None
        try:
            target = self._target(None)
        except NoWorker as exc:
            state, reason = "no_worker", exc.reason
        else:
            state, reason = "available", ""
        # The breaker of the default target (the configured worker, else the latest session's).
        breaker = self._breakers.get(target.breaker_key) if target is not None else None
        breaker = breaker or _Breaker()
        now = self._clock()
        if target is not None and breaker.opened_at is not None:
            remaining = breaker.cooldown_left(now)
            if remaining > 0:
                state = "circuit_open"
                reason = (
                    f"{breaker.failures} consecutive failures (last: {breaker.last_error}); "
                    f"retry in {remaining:.0f}s"
                )
            else:
                state, reason = (
                    "half_open",
                    f"cooldown over; next call is a trial (last: {breaker.last_error})",
                )
        out: dict[str, Any] = {
            "state": state,
            "available": state in ("available", "half_open"),
            "reason": reason,
            "consecutive_failures": breaker.failures,
            # Targets (other sessions' credentials, say) whose circuit is open now.
            "open_circuits": sum(1 for b in self._breakers.values() if b.cooldown_left(now) > 0),
            "sessions_with_credentials": len(self._sessions),
            "in_flight": self.in_flight,
            "counts": dict(self.counts),
            "skipped_by_purpose": dict(self.skipped_by_purpose),
            "spend_today": self.spend_today(),
        }
        if target is not None:
            out["target"] = {
                "source": target.source,
                "api": target.api,
                "model": target.model,
                "upstream": _origin(target.url),
            }
        return out


def _error_message(response: httpx.Response) -> str:
    """A short error text from an error body of any of the three APIs, secrets masked (some
    providers echo part of a rejected key back)."""
    return mask_secrets(_raw_error_message(response))


def _raw_error_message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:200]
        if isinstance(error, str):
            return error[:200]
    return response.reason_phrase or "error"
