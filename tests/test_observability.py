"""Watching the traffic (lore_core/http/metrics.py), through a real gateway and fake
upstreams: one ``lore.requests`` log line per model request, ``/lore/api/metrics`` read by the
Prometheus client library's own parser (behind the token), ``lore spend`` by day, model and
session (through the gateway and from the store once it stopped), OpenTelemetry spans per
phase when tracing is on and none of its work when off."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lore_core.cli import commands as cli
from lore_core.http.metrics import CONTENT_TYPE
from lore_core.testing.fake_upstream import FakeUpstream, Reply
from lore_core.testing.poll import poll
from lore_core.testing.server import ThreadedServer

KEY = "sk-ant-api03-observability-" + "K9" * 12
MODEL = "claude-sonnet-4-5"
SECRET_TEXT = "the-prompt-text-never-logged-5d1c"


def model_request(
    server: ThreadedServer,
    session: str,
    project: Path,
    *,
    stream: bool = False,
    upstream: str | None = None,
) -> httpx.Response:
    headers = {
        "x-api-key": KEY,
        "anthropic-version": "2023-06-01",
        "x-session-id": session,
        "x-lore-project": str(project),
    }
    if upstream:
        headers["x-lore-upstream-url"] = upstream
    body = {
        "model": MODEL,
        "max_tokens": 50,
        "stream": stream,
        "messages": [{"role": "user", "content": SECRET_TEXT}],
    }
    response = httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30)
    response.read()
    return response


def drive(server: ThreadedServer, fake: FakeUpstream, chosen: FakeUpstream, project: Path) -> None:
    """Three model requests: one answered whole, one streamed (both with memory), and one
    naming an upstream of the client's choice without the token (relayed untouched)."""
    fake.enqueue(
        Reply(input_tokens=100, cache_read_tokens=300, cache_write_tokens=0, output_tokens=7),
        Reply(input_tokens=50, cache_read_tokens=0, cache_write_tokens=150, output_tokens=5),
    )
    assert model_request(server, "obs-session-one-0001", project).status_code == 200
    assert model_request(server, "obs-session-two-0002", project, stream=True).status_code == 200
    assert model_request(server, "obs-stranger-0003", project, upstream=chosen.url).status_code == 200


def fields(line: str) -> dict[str, str]:
    """``key=value`` pairs (values without spaces in this test)."""
    return dict(pair.split("=", 1) for pair in line.split())


def request_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "lore.requests"]


def token(server: ThreadedServer) -> str:
    return server.gateway.tokens.current()


def test_one_log_line_per_request_with_its_fields(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="lore.requests")
    project = tmp_path / "shop"
    project.mkdir()
    with FakeUpstream() as chosen:
        server = start_gateway()
        drive(server, fake_upstream, chosen, project)
        lines = poll(
            lambda: (found := request_lines(caplog)) and len(found) >= 3 and found, "three log lines"
        )
        assert len(lines) == 3, lines

    whole, streamed, stranger = (fields(line) for line in lines)
    assert whole["api"] == streamed["api"] == stranger["api"] == "anthropic-messages"
    assert whole["session"] == "obs-session-"  # the first 12 characters
    assert whole["project"] == stranger["project"] == str(project)
    assert (whole["memory"], streamed["memory"], stranger["memory"]) == ("yes", "yes", "no")
    assert whole["layer"].isdigit() and streamed["layer"].isdigit() and stranger["layer"] == "-"
    assert whole["status"] == streamed["status"] == stranger["status"] == "200"
    assert whole["model"] == MODEL
    # The prompt as the upstream counted it (uncached + cache reads + cache writes).
    assert (whole["prompt_tokens"], whole["cache_read_share"]) == ("400", "0.75")
    assert (streamed["prompt_tokens"], streamed["cache_read_share"]) == ("200", "0.00")
    assert (stranger["prompt_tokens"], stranger["cache_read_share"]) == ("-", "-")  # not read
    for line in (whole, streamed, stranger):
        assert 0 <= float(line["added_ms"]) < 5_000
        assert float(line["upstream_ms"]) >= 0
    # Ids, names, counts and times only: never the prompt or the key.
    for line in lines:
        assert SECRET_TEXT not in line and KEY[:20] not in line


def test_request_log_can_be_turned_off(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="lore.requests")
    server = start_gateway({"server": {"logRequests": False}})
    assert model_request(server, "obs-quiet-session", tmp_path).status_code == 200
    with httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {token(server)}"}) as api:
        poll(lambda: "lore_requests_total{" in api.get("/lore/api/metrics").text, "the request counted")
    assert request_lines(caplog) == []


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> (labels, value), as the Prometheus client library parses the text."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        assert family.documentation, f"{family.name} has no HELP"
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def value(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    matching = [v for sample_labels, v in found.get(name, []) if labels.items() <= sample_labels.items()]
    return sum(matching)


def test_metrics_in_prometheus_text_behind_the_token(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    with FakeUpstream() as chosen:
        server = start_gateway()
        drive(server, fake_upstream, chosen, project)

    assert httpx.get(server.url + "/lore/api/metrics").status_code == 401
    wrong = httpx.get(server.url + "/lore/api/metrics", headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401

    def scrape() -> dict[str, list[tuple[dict[str, str], float]]] | None:
        response = httpx.get(
            server.url + "/lore/api/metrics", headers={"authorization": f"Bearer {token(server)}"}
        )
        assert response.status_code == 200
        assert response.headers["content-type"] == CONTENT_TYPE
        found = samples(response.text)
        # The counters are kept once the answers are out: wait for all three.
        return found if value(found, "lore_requests_total") == 3 else None

    found = poll(scrape, "three requests counted")
    assert value(found, "lore_requests_total", api="anthropic-messages", memory="yes", status="200") == 2
    assert value(found, "lore_requests_total", api="anthropic-messages", memory="no", status="200") == 1
    assert value(found, "lore_memory_refused_total", reason="chosen_upstream") == 1
    # Every request has a parse and an added time, and waited for an upstream; the two with
    # memory were composed, at a layer each.
    for phase, count in (("parse", 3), ("added", 3), ("upstream", 3), ("compose", 2)):
        assert value(found, "lore_request_phase_seconds_count", phase=phase) == count
        assert value(found, "lore_request_phase_seconds_bucket", phase=phase, le="+Inf") == count
    assert value(found, "lore_context_layer_total") == 2
    # Tokens of the two exchanges with memory, by model and kind (the stranger's are not read).
    assert value(found, "lore_tokens_total", model=MODEL, kind="input") == 150
    assert value(found, "lore_tokens_total", model=MODEL, kind="cache_read") == 300
    assert value(found, "lore_tokens_total", model=MODEL, kind="cache_write") == 150
    assert value(found, "lore_tokens_total", model=MODEL, kind="output") == 12
    assert value(found, "lore_exchanges_total", model=MODEL) == 2
    assert value(found, "lore_spend_usd_total", model=MODEL) > 0
    assert value(found, "lore_spend_today_usd") == pytest.approx(value(found, "lore_spend_usd_total"))
    assert value(found, "lore_upstream_errors_total") == 0
    assert value(found, "lore_recall_calls_total") == 0
    for gauge in ("lore_indexer_backlog", "lore_distill_backlog", "lore_store_queued_messages"):
        assert gauge in found


def test_upstream_errors_are_counted(
    start_gateway: Callable[..., ThreadedServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lore.requests")
    # An upstream nobody listens on: the gateway answers 502 in the API's shape.
    server = start_gateway(env={"LORE_UPSTREAM_ANTHROPIC": "http://127.0.0.1:1"})
    assert model_request(server, "obs-unreachable-session", tmp_path).status_code == 502
    line = fields(poll(lambda: next(iter(request_lines(caplog)), None), "the log line"))
    assert (line["status"], line["memory"], line["prompt_tokens"]) == ("502", "yes", "-")
    text = httpx.get(
        server.url + "/lore/api/metrics", headers={"authorization": f"Bearer {token(server)}"}
    ).text
    found = samples(text)
    assert value(found, "lore_upstream_errors_total") >= 1
    assert value(found, "lore_requests_total", status="502") == 1


def test_lore_spend_by_day_model_and_session(
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    with FakeUpstream() as chosen:
        server = start_gateway()
        drive(server, fake_upstream, chosen, project)
    monkeypatch.setenv("LORE_PORT", str(server.port))

    def spend(*args: str) -> dict[str, Any]:
        capsys.readouterr()
        assert cli.main(["spend", "--json", *args]) == 0
        return json.loads(capsys.readouterr().out)

    def both_priced() -> dict[str, Any] | None:
        report = spend("--by", "session")
        return report if len(report["rows"]) == 2 else None

    by_session = poll(both_priced, "both sessions priced")
    assert {row["session"] for row in by_session["rows"]} == {"obs-session-one-0001", "obs-session-two-0002"}
    total = by_session["total_usd"]
    assert total > 0 and sum(row["usd"] for row in by_session["rows"]) == pytest.approx(total, abs=1e-5)

    by_model = spend("--by", "model", "--days", "3")
    assert by_model["days"] == 3
    [row] = by_model["rows"]
    assert row["model"] == MODEL and row["exchanges"] == 2
    assert (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"]) == (150, 300, 150)

    by_day = spend()
    assert len(by_day["rows"]) == 7 and by_day["rows"][-1]["usd"] == pytest.approx(total, abs=1e-5)
    assert all(r["usd"] == 0 for r in by_day["rows"][:-1])

    capsys.readouterr()
    assert cli.main(["spend", "--by", "model"]) == 0
    text = capsys.readouterr().out
    assert MODEL in text and "(50%)" in text  # 300 of 600 prompt tokens were cache reads

    # Kept in the store: the same figures once the gateway has stopped (read directly).
    server.stop()
    monkeypatch.setenv("LORE_PORT", "1")  # no gateway there
    again = spend("--by", "model", "--days", "3")
    assert again["rows"] == by_model["rows"] and again["total_usd"] == pytest.approx(total, abs=1e-5)
    assert cli.main(["spend", "--days", "0"]) == 2


def test_opentelemetry_spans_per_phase_only_when_on(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    off = start_gateway()
    assert off.gateway.metrics.tracer is None
    assert off.gateway.metrics.watch("anthropic-messages").spans is None  # nothing kept per phase
    off.stop()

    server = start_gateway({"server": {"traceRequests": True}})
    assert server.gateway.metrics.tracer is not None
    # Where spans go is the SDK's configuration: here, a provider of the test's own.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server.gateway.metrics.tracer = provider.get_tracer("lore")
    assert model_request(server, "obs-traced-session", tmp_path).status_code == 200

    spans = poll(lambda: (found := exporter.get_finished_spans()) and len(found) >= 4 and found, "spans")
    by_name = {span.name: span for span in spans}
    root = by_name["lore.request"]
    assert {"lore.parse", "lore.compose", "lore.upstream"} <= set(by_name)
    for name in ("lore.parse", "lore.compose", "lore.upstream"):
        child = by_name[name]
        assert child.parent is not None and child.parent.span_id == root.context.span_id
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time
    assert root.attributes["lore.memory"] == "yes" and root.attributes["http.status_code"] == 200
    assert root.attributes["lore.prompt_tokens"] == 12
