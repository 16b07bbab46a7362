"""LLMObserver and reflector calls with the loopback fake upstream acting as the worker."""

from __future__ import annotations

import asyncio
import re

import pytest

from lore_core.config import WorkerConfig
from lore_core.curation import DistillInput, ObservationInput
from lore_core.distill.observer import LLMObserver
from lore_core.distill.prompts import OBSERVER_MARKER, REFLECTOR_MARKER, load_prompt
from lore_core.distill.reflector import SECTIONS, LLMReflector, missing_sections
from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT, Block
from lore_core.testing.fake_upstream import Reply
from lore_core.testing.fake_worker import observer_responder, request_texts
from lore_core.worker.client import NoWorker, WorkerClient, WorkerError

T0 = 1_790_000_000.0  # 2026-09-21 14:13:20 UTC
APIS = ["anthropic-messages", "openai-chat", "openai-responses"]


def segment() -> list[DistillInput]:
    return [
        DistillInput(
            "m0", "user", T0, [Block(TEXT, text="<system-reminder>R</system-reminder>fix tests/test_a.py")]
        ),
        DistillInput(
            "m1",
            "assistant",
            T0 + 5,
            [Block(TOOL_CALL, tool_name="Bash", tool_call_id="c", tool_input={"command": "pytest"})],
        ),
        DistillInput(
            "m2",
            "user",
            T0 + 9,
            [Block(TOOL_RESULT, tool_call_id="c", text="x" * 9000 + "\n2 failed", is_error=True)],
        ),
        DistillInput(
            "m3", "assistant", T0 + 30, [Block(TEXT, text="Decided to mock the clock instead of sleeping.")]
        ),
    ]


def worker(fake, api: str = "anthropic-messages") -> WorkerClient:
    return WorkerClient(
        WorkerConfig(upstream=fake.url, model="worker-model", api=api, retry_backoff_seconds=0.01)
    )


def test_prompts_are_package_files_with_markers():
    observer, reflector = load_prompt("observer"), load_prompt("reflector")
    assert OBSERVER_MARKER in observer.splitlines()[0] and REFLECTOR_MARKER in reflector.splitlines()[0]
    for must in ("timestamped", "problem / root cause / fix / outcome", "User says:", "secrets"):
        assert must in observer, must
    for section in SECTIONS:
        assert f"## {section}" in reflector


@pytest.mark.parametrize("api", APIS)
def test_observer_through_the_fake_worker(fake_upstream, api):
    fake_upstream.responder = observer_responder()
    client = worker(fake_upstream, api)

    async def go():
        try:
            return await LLMObserver(client).observe(segment(), previous="- 13:00 earlier event")
        finally:
            await client.close()

    result = asyncio.run(go())
    text, prov = result.text, result.provenance
    # A dated event log echoing the rendered segment: one bullet per event.
    assert text.splitlines()[0] == "## 2026-09-21"
    assert re.match(r"- 14:13 user: fix tests/test_a\.py", text.splitlines()[1])
    assert "long output of Bash omitted" in text
    assert (prov.method, prov.generation, prov.worker_model, prov.worker_api) == (
        "llm",
        0,
        "worker-model",
        api,
    )
    assert prov.source_ids == ["m0", "m1", "m2", "m3"]
    assert prov.usage.input_tokens > 0 and prov.compression_ratio > 1
    # What the worker was sent: the prompt file as system, the rendered segment as data.
    [req] = fake_upstream.api_requests()
    system, user = request_texts(req.json)
    assert system == load_prompt("observer")
    assert "<previous_observations>\n- 13:00 earlier event\n</previous_observations>" in user
    assert "R</system-reminder>" not in user and 'messages="4"' in user


@pytest.mark.parametrize("api", APIS)
def test_reflector_through_the_fake_worker(fake_upstream, api):
    fake_upstream.responder = observer_responder()
    client = worker(fake_upstream, api)
    observations = [
        ObservationInput(
            "d1", "## 2026-09-21\n- 14:13 Decision: mock the clock in tests/test_a.py", T0, T0 + 60
        ),
        ObservationInput(
            "d2", "## 2026-09-21\n- 15:00 fixed lore_core/worker/client.py retry", T0 + 2000, T0 + 2600
        ),
    ]

    async def go():
        try:
            return await LLMReflector(client).reflect(observations)
        finally:
            await client.close()

    result = asyncio.run(go())
    assert missing_sections(result.text) == [] and result.provenance.warnings == []
    assert "Consolidated 2 observation logs" in result.text
    assert "Decision: mock the clock" in result.text and "lore_core/worker/client.py" in result.text
    prov = result.provenance
    assert (prov.generation, prov.source_ids, prov.method) == (1, ["d1", "d2"], "llm")
    assert (prov.start, prov.end) == (T0, T0 + 2600)


def test_fake_worker_passes_other_requests_through(fake_upstream):
    fake_upstream.responder = observer_responder()
    fake_upstream.enqueue(Reply(text="queued answer"))
    client = worker(fake_upstream)

    async def go():
        try:
            return await client.complete("an unrelated system prompt", "hi")
        finally:
            await client.close()

    assert asyncio.run(go()).text == "queued answer"


def test_observer_falls_back_to_extractive_without_a_worker(fake_upstream):
    client = WorkerClient(WorkerConfig())  # nothing configured, no session seen
    result = asyncio.run(LLMObserver(client).observe(segment()))
    assert result.provenance.method == "extractive"
    assert "no session credentials" in (result.provenance.fallback_reason or "")
    assert "-> $ pytest" in result.text and "2 failed" in result.text
    assert client.status()["skipped_by_purpose"] == {"observer": 1}
    assert fake_upstream.api_requests() == []
    with pytest.raises(NoWorker):
        asyncio.run(LLMObserver(client, fallback=False).observe(segment()))


def test_observer_failure_is_raised_not_papered_over(fake_upstream):
    # An attempted call that failed is for the scheduler to retry later; storing an
    # extractive log instead would make the weaker log permanent.
    fake_upstream.responder = lambda req: Reply(status=400)
    client = worker(fake_upstream)

    async def go():
        try:
            return await LLMObserver(client).observe(segment())
        finally:
            await client.close()

    with pytest.raises(WorkerError):
        asyncio.run(go())


def test_an_answer_that_is_not_a_log_never_becomes_one(fake_upstream):
    # A refusal or a chat reply would stand in for the conversation in later prompts. The
    # same segment would most likely get the same answer again: the extractive observer
    # writes this segment's log instead (a caller without fallback gets the error).
    fake_upstream.responder = lambda req: Reply(text="I'm sorry, I can't help with that.")

    async def go(fallback: bool):
        client = worker(fake_upstream)
        try:
            return await LLMObserver(client, fallback=fallback).observe(segment())
        finally:
            await client.close()

    result = asyncio.run(go(fallback=True))
    assert result.provenance.method == "extractive"
    assert "not an observation log" in (result.provenance.fallback_reason or "")
    assert "I'm sorry" not in result.text and "2 failed" in result.text
    with pytest.raises(WorkerError, match="not an observation log"):
        asyncio.run(go(fallback=False))


def reflect_answered(fake_upstream, answer: str):
    """The reflector's result when the worker answers ``answer``."""
    fake_upstream.responder = lambda req: Reply(text=answer)
    client = worker(fake_upstream)

    async def go():
        try:
            return await LLMReflector(client).reflect([ObservationInput("d1", "- 10:00 x", T0, T0)])
        finally:
            await client.close()

    return asyncio.run(go())


def test_a_reflector_answer_that_is_not_a_meta_distillation_is_an_error(fake_upstream):
    # Stored, it would replace the logs it consolidates; they stay, and it is tried later.
    with pytest.raises(WorkerError, match="not a meta-distillation"):
        reflect_answered(fake_upstream, "Sure! The session went well overall.")


def test_reflector_flags_missing_sections(fake_upstream):
    result = reflect_answered(fake_upstream, "```\n## Current state\n- ok\n```")
    assert result.text == "## Current state\n- ok"  # code fence stripped
    assert result.provenance.warnings == [f"missing section: {s}" for s in SECTIONS[1:]]
