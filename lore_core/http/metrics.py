"""Watching the traffic: one log line per model request, the counters behind
``GET /lore/api/metrics`` (Prometheus text), and OpenTelemetry spans when asked for.

The request path pays for this with a few integer additions: :func:`lore_core.pipeline.request.handle`
fills a :class:`RequestWatch` (``time.perf_counter`` readings at phase boundaries) and hands
it to :meth:`Metrics.finish`, which defers the rest (histograms, the log line, spans) to the
event loop's next turn with ``call_soon``. The log line is formatted only when the
``lore.requests`` logger is enabled for INFO and ``server.logRequests`` is on; the
exposition text is written only when ``/lore/api/metrics`` is read. Histograms are fixed
buckets of plain ints (no client library at run time: the format is a few lines of text).

What a request's times mean (the log line's ``added_ms`` and the ``phase`` histogram):

* ``parse``: from the pipeline getting the request to the ownership decision and the
  interception check done: reading the body from the client, decoding and parsing it,
  identifying client, session and project, deciding whose memory it may reach;
* ``compose``: preparing the request and composing the prompt (every attempt's, when an
  overflow makes the gateway compose it again);
* ``upstream``: waiting for the upstream: from sending the request to its response headers
  (the overflow check's reading of an error body, and a budget throttle's wait before the
  send, count here too; the answer's body does not);
* ``added``: the gateway's own time on the request: from the pipeline getting it to the
  relay of the answer starting, less ``upstream``. Not counted: the HTTP server's parsing
  before the pipeline, and the relay of the answer's bytes (``benchmarks/proxy_overhead.py``
  measures the whole from outside). A request the gateway answers itself (a ``/lore:``
  command, a refusal) counts whole.

Nothing here logs or counts content, headers or keys: only sizes, times, ids and names.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lore_core.gateway import Gateway
    from lore_core.model import Exchange, Usage
    from lore_core.pipeline.turn import Turn

log = logging.getLogger("lore.metrics")
#: The request log: one INFO line per model request (``server.logRequests``).
REQUEST_LOG = logging.getLogger("lore.requests")

#: The content type of the Prometheus text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Upper bounds (seconds) of the phase histograms' buckets: sub-millisecond for the gateway's
#: own phases, minutes for an upstream's first byte.
BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
PHASES = ("parse", "compose", "upstream", "added")
#: Models counted by name; more distinct names (a client can send any) count as "other", so
#: a scrape stays small.
MAX_MODELS = 64
#: The status counted for a request whose client went away before its answer was over.
CLIENT_CLOSED = 499
#: The characters of a session id the log line shows (enough to find it with ``lore sessions``).
SESSION_CHARS = 12

#: gateway.stats counters exported as they are: name -> (metric, help).
STATS_COUNTERS = {
    "upstream_errors": (
        "lore_upstream_errors_total",
        "Upstream calls that failed: not reached, or an answer broken off.",
    ),
    "client_disconnects": (
        "lore_client_disconnects_total",
        "Exchanges whose client went away before the answer was over.",
    ),
    "context_overflows": (
        "lore_context_overflows_total",
        "Prompts an upstream refused as too long (the session's layer was raised).",
    ),
    "overflow_retries": (
        "lore_overflow_retries_total",
        "Requests composed again at a higher layer after an overflow.",
    ),
    "layer_errors": ("lore_layer_errors_total", "Compositions that failed (the request went unchanged)."),
    "requests_refused": (
        "lore_requests_refused_total",
        "Requests refused before any route (host, origin, peer or token).",
    ),
    "commands_answered": ("lore_commands_answered_total", "/lore: commands the gateway answered."),
}


class Histogram:
    """Counts per bucket (not cumulative: summed when written) and the sum of the values."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # the last one: above every bound (+Inf)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        # bisect_left: a value equal to a bound falls in that bound's bucket ("le").
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds


class ModelTally:
    """What one model's exchanges used and cost since the gateway started."""

    __slots__ = ("cache_read", "cache_write", "exchanges", "input", "output", "usd")

    def __init__(self) -> None:
        self.exchanges = 0
        self.input = 0
        self.output = 0
        self.cache_read = 0
        self.cache_write = 0
        self.usd = 0.0


class RequestWatch:
    """One model request, as :func:`~lore_core.pipeline.request.handle` saw it: times in
    seconds (``time.perf_counter``), and the turn and exchange the log line reads when the
    request is over. ``spans`` (phase, start, end) only while tracing is on."""

    __slots__ = (
        "added",
        "api",
        "compose",
        "done",
        "exchange",
        "parse",
        "spans",
        "start",
        "status",
        "turn",
        "upstream",
        "waits_for_exchange",
        "wall_ns",
    )

    def __init__(self, api: str, tracing: bool) -> None:
        self.start = time.perf_counter()
        self.api = api
        self.parse = -1.0  # -1: the phase did not run
        self.compose = 0.0
        self.upstream = -1.0
        self.added = -1.0
        self.turn: Turn | None = None
        self.exchange: Exchange | None = None
        self.status = 0
        # Streamed answers are over when their exchange finishes, after handle() returned.
        self.waits_for_exchange = False
        self.done = False
        self.spans: list[tuple[str, float, float]] | None = [] if tracing else None
        self.wall_ns = time.time_ns() if tracing else 0

    def parsed(self) -> None:
        now = time.perf_counter()
        self.parse = now - self.start
        if self.spans is not None:
            self.spans.append(("parse", self.start, now))

    def composed(self, began: float) -> None:
        now = time.perf_counter()
        self.compose += now - began
        if self.spans is not None:
            self.spans.append(("compose", began, now))

    def waited(self, began: float) -> None:
        """The upstream was waited for since ``began``."""
        now = time.perf_counter()
        self.upstream = max(self.upstream, 0.0) + now - began
        if self.spans is not None:
            self.spans.append(("upstream", began, now))

    def relaying(self) -> None:
        """The relay of the answer starts: the gateway's added time is known."""
        self.added = time.perf_counter() - self.start - max(self.upstream, 0.0)


class Metrics:
    """The gateway's traffic counters (``gateway.metrics``); the figures other parts keep
    already (``gateway.stats``, spend, backlogs) are read when the metrics are."""

    def __init__(self, log_requests: bool = True) -> None:
        self.log_requests = log_requests
        #: An OpenTelemetry tracer (:func:`opentelemetry_tracer`) or ``None``: no spans.
        self.tracer: Any = None
        #: (api, memory "yes"/"no", status) -> requests.
        self.requests: Counter[tuple[str, str, str]] = Counter()
        self.phases = {phase: Histogram() for phase in PHASES}
        #: Requests by the context layer their prompt was sent at.
        self.layers: Counter[int] = Counter()
        self.models: dict[str, ModelTally] = {}
        #: Recall tool calls the gateway ran for models.
        self.recall_calls = 0

    # -- the request path ----------------------------------------------------------------------

    def watch(self, api: str) -> RequestWatch:
        return RequestWatch(api, self.tracer is not None)

    def finish(self, watch: RequestWatch, status: int, exchange: Exchange | None = None) -> None:
        """The request is over (``exchange``: its first upstream exchange, finished). Called
        when handle() returns (ignored while a streamed answer is still relayed) and when the
        exchange finishes; the first call that counts wins."""
        if watch.done or (exchange is None and watch.waits_for_exchange):
            return
        watch.done = True
        if watch.added < 0:  # no relay: answered by the gateway, refused, or passed through
            watch.added = time.perf_counter() - watch.start - max(watch.upstream, 0.0)
        watch.status = status
        watch.exchange = exchange
        try:
            # Off the request path: the answer's last bytes go out first.
            asyncio.get_running_loop().call_soon(self._record, watch)
        except RuntimeError:  # no running loop (a synchronous caller): now
            self._record(watch)

    def _record(self, watch: RequestWatch) -> None:
        try:
            turn, exchange = watch.turn, watch.exchange
            status = CLIENT_CLOSED if exchange is not None and exchange.client_disconnected else watch.status
            # Decided by the ownership check; a request that was not parsed reached none.
            memory = "yes" if turn is not None and turn.access.allowed else "no"
            self.requests[(watch.api, memory, str(status))] += 1
            phases = self.phases
            if watch.parse >= 0:
                phases["parse"].observe(watch.parse)
            if watch.compose > 0:
                phases["compose"].observe(watch.compose)
            if watch.upstream >= 0:
                phases["upstream"].observe(watch.upstream)
            phases["added"].observe(watch.added)
            layer = _layer(turn)
            if layer is not None:
                self.layers[layer] += 1
            if self.log_requests and REQUEST_LOG.isEnabledFor(logging.INFO):
                REQUEST_LOG.info("%s", _request_line(watch, memory, status, layer))
            if self.tracer is not None:
                _spans(self.tracer, watch, memory, status, layer)
        except Exception:
            log.exception("could not count a request")

    # -- exchanges (gateway._after_exchange: already off the request path) --------------------

    def exchange(self, model: str | None, usage: Usage, usd: float) -> None:
        """An upstream exchange's usage and cost, by model."""
        name = model or "unknown"
        tally = self.models.get(name)
        if tally is None:
            if len(self.models) >= MAX_MODELS:
                name = "other"
                tally = self.models.get(name)
            if tally is None:
                tally = self.models[name] = ModelTally()
        tally.exchanges += 1
        tally.input += usage.input_tokens
        tally.output += usage.output_tokens
        tally.cache_read += usage.cache_read_tokens
        tally.cache_write += usage.cache_write_tokens
        tally.usd += usd


def _layer(turn: Turn | None) -> int | None:
    """The context layer the request's prompt was sent at; ``None`` when not composed."""
    if turn is None or turn.composing is None:
        return None
    plan = turn.composing.composition
    layer = getattr(plan, "layer", None)
    return layer if isinstance(layer, int) else None


def _value(text: str) -> str:
    """A log value: quoted when it holds a space, a quote or an equals sign."""
    if not text:
        return "-"
    if any(c in text for c in ' "=\t\n\r'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def _request_line(watch: RequestWatch, memory: str, status: int, layer: int | None) -> str:
    """``key=value`` pairs, in a fixed order (see docs/observability.md)."""
    turn, exchange = watch.turn, watch.exchange
    session = turn.session_id[:SESSION_CHARS] if turn is not None else ""
    project = turn.project if turn is not None else ""
    model = ""
    prompt = cache_share = "-"
    if exchange is not None:
        response = exchange.response
        model = (response.model if response is not None else "") or exchange.request.model or ""
        if response is not None:
            usage = response.usage
            tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
            if tokens > 0:
                prompt = str(tokens)
                cache_share = f"{usage.cache_read_tokens / tokens:.2f}"
    elif turn is not None:
        model = turn.view.model or ""
    upstream = f"{watch.upstream * 1000:.1f}" if watch.upstream >= 0 else "-"
    return (
        f"api={_value(watch.api)} session={_value(session)} project={_value(project)} memory={memory}"
        f" layer={'-' if layer is None else layer} model={_value(model)} status={status}"
        f" prompt_tokens={prompt} cache_read_share={cache_share}"
        f" added_ms={watch.added * 1000:.2f} upstream_ms={upstream}"
    )


# -- OpenTelemetry (optional) ----------------------------------------------------------------


def opentelemetry_tracer() -> Any:
    """The tracer spans go to (``server.traceRequests``), or ``None`` when the OpenTelemetry
    API is not installed. Where they are exported is the OpenTelemetry SDK's configuration
    (``opentelemetry-instrument lore serve`` and the ``OTEL_*`` variables); without an SDK
    the API's tracer drops them."""
    try:
        from opentelemetry import trace
    except ImportError:
        log.warning(
            "server.traceRequests is on but OpenTelemetry is not installed "
            "(pip install opentelemetry-sdk opentelemetry-exporter-otlp): no spans"
        )
        return None
    from lore_core import __version__

    return trace.get_tracer("lore", __version__)


def _spans(tracer: Any, watch: RequestWatch, memory: str, status: int, layer: int | None) -> None:
    """The request's span and one child per phase, from the times the request recorded
    (made after the fact: the request path only appends three floats per phase)."""
    from opentelemetry import trace

    def ns(at: float) -> int:
        return watch.wall_ns + int((at - watch.start) * 1e9)

    turn = watch.turn
    attributes: dict[str, Any] = {"lore.api": watch.api, "lore.memory": memory, "http.status_code": status}
    if turn is not None:
        attributes["lore.session"] = turn.session_id[:SESSION_CHARS]
    if layer is not None:
        attributes["lore.layer"] = layer
    exchange = watch.exchange
    if exchange is not None and exchange.response is not None:
        usage = exchange.response.usage
        attributes["lore.prompt_tokens"] = (
            usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        )
        attributes["lore.cache_read_tokens"] = usage.cache_read_tokens
    root = tracer.start_span("lore.request", start_time=watch.wall_ns, attributes=attributes)
    context = trace.set_span_in_context(root)
    for phase, began, ended in watch.spans or ():
        tracer.start_span(f"lore.{phase}", context=context, start_time=ns(began)).end(end_time=ns(ended))
    root.end(end_time=ns(time.perf_counter()))


# -- the exposition --------------------------------------------------------------------------


def _refusal_reasons() -> dict[str, str]:
    """``MemoryAccess.why_not`` of each refusal -> the metric's ``reason`` label."""
    from lore_core.pipeline import ownership

    return {
        ownership.NEEDS_TOKEN.why_not: "needs_token",
        ownership.CHOSEN_UPSTREAM.why_not: "chosen_upstream",
        ownership.OTHER_USER.why_not: "other_user",
        ownership.UNKNOWN_USER.why_not: "unknown_user",
        ownership.OTHER_OWNER.why_not: "other_owner",
    }


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


class _Text:
    """Prometheus text exposition format 0.0.4, family by family."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, **labels: str) -> None:
        if labels:
            inner = ",".join(f'{key}="{_label(str(v))}"' for key, v in labels.items())
            self.lines.append(f"{name}{{{inner}}} {_number(value)}")
        else:
            self.lines.append(f"{name} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def exposition(gateway: Gateway) -> str:
    """Everything ``/lore/api/metrics`` shows, as Prometheus text."""
    metrics: Metrics = gateway.metrics
    out = _Text()
    out.family("lore_build_info", "gauge", "The running gateway's version (always 1).")
    from lore_core import __version__

    out.sample("lore_build_info", 1, version=__version__)
    out.family("lore_uptime_seconds", "gauge", "Seconds since the gateway started.")
    out.sample("lore_uptime_seconds", round(time.time() - gateway.started_at, 3))

    out.family(
        "lore_requests_total",
        "counter",
        "Model requests by wire API, whether they reached memory, and the status the client got "
        "(499: the client went away).",
    )
    for (api, memory, status), count in sorted(metrics.requests.items()):
        out.sample("lore_requests_total", count, api=api, memory=memory, status=status)

    out.family(
        "lore_request_phase_seconds",
        "histogram",
        "Time of each phase of a model request (docs/observability.md): parse, compose, "
        "upstream (to the response headers), added (the gateway's own time).",
    )
    for phase in PHASES:
        histogram = metrics.phases[phase]
        cumulative = 0
        for bound, count in zip((*BUCKETS, float("inf")), histogram.counts, strict=True):
            cumulative += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.sample("lore_request_phase_seconds_bucket", cumulative, phase=phase, le=le)
        out.sample("lore_request_phase_seconds_sum", histogram.total, phase=phase)
        out.sample("lore_request_phase_seconds_count", cumulative, phase=phase)

    out.family(
        "lore_memory_refused_total",
        "counter",
        "Model requests relayed untouched because they may not reach memory, by reason.",
    )
    reasons = _refusal_reasons()
    refused: Counter[str] = Counter()
    for key, count in gateway.stats.items():
        if key.startswith("memory_refused: "):  # ownership.note_stranger counts them by why_not
            refused[reasons.get(key.removeprefix("memory_refused: "), "other")] += count
    for reason, count in sorted(refused.items()):
        out.sample("lore_memory_refused_total", count, reason=reason)

    for key, (name, help_text) in STATS_COUNTERS.items():
        out.family(name, "counter", help_text)
        out.sample(name, gateway.stats.get(key, 0))

    out.family(
        "lore_context_layer_total",
        "counter",
        "Composed requests by the context layer their prompt was sent at.",
    )
    for layer, count in sorted(metrics.layers.items()):
        out.sample("lore_context_layer_total", count, layer=str(layer))

    out.family(
        "lore_tokens_total",
        "counter",
        "Tokens upstreams reported for the gateway's exchanges, by model and kind "
        "(input: the prompt's uncached tokens).",
    )
    models = sorted(metrics.models.items())
    for model, tally in models:
        out.sample("lore_tokens_total", tally.input, model=model, kind="input")
        out.sample("lore_tokens_total", tally.output, model=model, kind="output")
        out.sample("lore_tokens_total", tally.cache_read, model=model, kind="cache_read")
        out.sample("lore_tokens_total", tally.cache_write, model=model, kind="cache_write")
    out.family("lore_exchanges_total", "counter", "Upstream exchanges that reported usage, by model.")
    for model, tally in models:
        out.sample("lore_exchanges_total", tally.exchanges, model=model)
    out.family(
        "lore_spend_usd_total", "counter", "USD the exchanges cost since start (the price table's), by model."
    )
    for model, tally in models:
        out.sample("lore_spend_usd_total", round(tally.usd, 9), model=model)
    out.family("lore_spend_today_usd", "gauge", "USD the sessions' exchanges cost today (local day).")
    out.sample("lore_spend_today_usd", round(gateway.costs.day_cost(), 9))
    out.family("lore_daily_budget_usd", "gauge", "budget.dailyBudgetUsd (0: no budget).")
    out.sample("lore_daily_budget_usd", float(gateway.costs.daily_budget_usd))
    out.family(
        "lore_worker_spend_today_usd", "gauge", "USD the background worker's calls cost today (UTC day)."
    )
    out.sample("lore_worker_spend_today_usd", float(gateway.worker.spend_today().get("cost") or 0.0))

    out.family("lore_recall_calls_total", "counter", "Recall tool calls the gateway ran for models.")
    out.sample("lore_recall_calls_total", metrics.recall_calls)

    out.family(
        "lore_indexer_backlog",
        "gauge",
        "Items waiting to be embedded for the vector index (0 without one; -1: not counted yet).",
    )
    indexer = gateway.indexer
    if indexer is None:
        pending = 0
    else:
        pending = -1 if indexer.pending is None else indexer.pending
    out.sample("lore_indexer_backlog", pending)
    distill = gateway.distiller.health()
    out.family(
        "lore_distill_backlog",
        "gauge",
        "Sessions with turns waiting to be distilled (tracked by the scheduler until a run takes them).",
    )
    out.sample("lore_distill_backlog", int(distill.get("tracked_sessions") or 0))
    out.family("lore_distill_running", "gauge", "Distillation runs under way.")
    out.sample("lore_distill_running", int(distill.get("running") or 0))
    out.family("lore_store_queued_messages", "gauge", "Messages submitted to the store, not written yet.")
    out.sample("lore_store_queued_messages", int(gateway.writer.queued or 0))
    return out.text()
