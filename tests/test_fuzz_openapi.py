"""A schema-driven fuzz run against ``/openapi.json`` (schemathesis): every operation the
document describes gets requests generated from its schemas, sent to a real gateway with
the token, and each answer is checked against the document: no 5xx, a documented status, a
documented content type, a body that matches its schema. ``LORE_FUZZ_EXAMPLES`` sets the
examples per operation (``benchmarks/fuzz.py`` runs thousands; CI a few per operation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import given
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from lore_core.http.openapi import document
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.fake_worker import curator_responder
from lore_core.testing.fuzz import FUZZ, Tally, log_problems
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer

# Seconds per test (see the slow marker in lore_core.testing.fixtures).
pytestmark = pytest.mark.slow

SCHEMA = schemathesis.openapi.from_dict(document())
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.mark.parametrize("operation", OPERATIONS, ids=[f"{o.method.upper()} {o.path}" for o in OPERATIONS])
def test_fuzz_openapi_operation(
    operation: Any,
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_upstream.responder = curator_responder(lambda _prompt: [])
    server = start_gateway({"distill": {"observer": "extractive", "idleTimeoutSeconds": 604_800}})
    auth = api_headers()
    with httpx.Client(base_url=server.url, headers=auth, timeout=30) as client:
        # Something to find: events of a run, a knowledge entry.
        client.post(
            "/v1/events",
            json={"project": "/seed", "run": "seed", "events": [{"kind": "note", "content": "hi"}]},
        )
        client.post(
            "/lore/api/knowledge",
            json={
                "project": "/seed",
                "category": "gotcha",
                "title": "Herons",
                "content": "They nest by rivers.",
            },
        )

    @FUZZ
    @given(case=operation.as_strategy())
    def prop(case: Any) -> None:
        tally.case()
        caplog.clear()
        response = case.call(base_url=server.url, headers=auth)
        case.validate_response(response, checks=CHECKS)
        problems = log_problems(caplog.records)
        assert not problems, "\n".join(problems)

    with Tally(f"openapi {operation.method.upper()} {operation.path}") as tally:
        prop()
