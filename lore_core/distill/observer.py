"""The observer (generation 0): one segment of conversation in, one observation log out.

:class:`LLMObserver` asks the worker model (prompt: ``prompts/observer.md``); when no worker is
usable it falls back to the :mod:`extractive <lore_core.distill.extractive>` observer and
says so in the provenance. :class:`ExtractiveObserver` is the extractive one on its own, for
setups without any worker and for benchmarks.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from lore_core.context.framing import worker_data
from lore_core.curation import Distillation, DistillInput, Provenance
from lore_core.distill.extractive import extractive_observe
from lore_core.distill.prompts import load_prompt
from lore_core.distill.render import DEFAULT_TOOL_OUTPUT_MAX_CHARS, render_segment
from lore_core.distill.segment import TokenEstimate, estimate_tokens
from lore_core.interfaces import Observer
from lore_core.worker.client import WorkerClient, WorkerError, WorkerUnavailable

log = logging.getLogger("lore.distill")

# How much of the previous observations goes into the prompt (their tail: the newest part
# is what the new segment continues). About 3K tokens.
PREVIOUS_MAX_CHARS = 12_000


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts > 0 else ""


def observer_prompt(rendered: str, previous: str, start: float, end: float, count: int) -> str:
    """The user turn of an observer call: data only, the instructions are the system prompt."""
    if len(previous) > PREVIOUS_MAX_CHARS:
        cut = previous[-PREVIOUS_MAX_CHARS:]
        previous = "[... earlier observations cut ...]\n" + cut[cut.find("\n") + 1 :]
    previous = worker_data(previous.strip()) or "(none yet)"
    return (
        f"<previous_observations>\n{previous}\n</previous_observations>\n\n"
        f'<conversation_segment from="{_iso(start)}" to="{_iso(end)}" messages="{count}">\n'
        f"{worker_data(rendered)}\n</conversation_segment>"
    )


def strip_fences(text: str) -> str:
    """Models sometimes wrap the whole answer in a code fence despite being asked not to."""
    lines = text.strip().splitlines()
    if len(lines) >= 2 and lines[0].startswith("```") and lines[-1].strip() == "```":
        return "\n".join(lines[1:-1]).strip()
    return text.strip()


_BULLET = re.compile(r"^\s*[-*] +\S", re.M)


def has_bullets(text: str) -> bool:
    """Whether a worker's answer has the shape both curator prompts ask for: bullet lines.
    One without any (a refusal, a chat reply, another model's idea of a summary) must not
    stand in for the conversation in later prompts."""
    return bool(_BULLET.search(text))


def _source_tokens(messages: Sequence[DistillInput], estimate: TokenEstimate) -> int:
    return sum(estimate(m.raw_text) for m in messages)


class ExtractiveObserver(Observer):
    """The deterministic observer: no LLM, no network, same output shape."""

    name = "extractive-observer"
    kind = "observer"

    def __init__(
        self,
        tool_output_max_chars: int = DEFAULT_TOOL_OUTPUT_MAX_CHARS,
        estimate: TokenEstimate = estimate_tokens,
    ) -> None:
        self.tool_output_max_chars = tool_output_max_chars
        self.estimate = estimate

    async def observe(
        self,
        messages: Sequence[DistillInput],
        previous: str = "",
        *,
        session_id: str | None = None,
        tool_names: Mapping[str, str] | None = None,
        fallback_reason: str | None = None,
    ) -> Distillation:
        text = extractive_observe(messages, previous, tool_names)
        rendered = render_segment(messages, self.tool_output_max_chars, tool_names)
        return Distillation(
            text,
            _provenance(
                messages, rendered, text, self.estimate, "extractive", fallback_reason=fallback_reason
            ),
        )


class LLMObserver(Observer):
    """The LLM observer, the default. Falls back to the extractive observer when the worker is
    unavailable (none configured, circuit open); a call that was attempted and failed raises
    :class:`~lore_core.worker.client.WorkerError`, so the caller can try the segment again later
    rather than store a weaker log for good."""

    name = "observer"
    kind = "observer"

    def __init__(
        self,
        worker: WorkerClient | None,
        tool_output_max_chars: int = DEFAULT_TOOL_OUTPUT_MAX_CHARS,
        estimate: TokenEstimate = estimate_tokens,
        fallback: bool = True,
    ) -> None:
        self.worker = worker
        self.tool_output_max_chars = tool_output_max_chars
        self.estimate = estimate
        self.fallback = fallback
        self.extractive = ExtractiveObserver(tool_output_max_chars, estimate)
        self._warned_not_a_log = False

    async def observe(
        self,
        messages: Sequence[DistillInput],
        previous: str = "",
        *,
        session_id: str | None = None,
        tool_names: Mapping[str, str] | None = None,
    ) -> Distillation:
        if not messages:
            raise ValueError("nothing to observe: the segment is empty")
        if self.worker is None:
            if not self.fallback:
                raise WorkerUnavailable("no worker client")
            return await self.extractive.observe(
                messages, previous, tool_names=tool_names, fallback_reason="no worker client"
            )
        rendered = render_segment(messages, self.tool_output_max_chars, tool_names)
        prompt = observer_prompt(
            rendered, previous, messages[0].timestamp, messages[-1].timestamp, len(messages)
        )
        try:
            result = await self.worker.complete(
                load_prompt("observer"), prompt, session_id=session_id, purpose="observer"
            )
        except WorkerUnavailable as exc:
            if not self.fallback:
                raise
            return await self.extractive.observe(
                messages, previous, tool_names=tool_names, fallback_reason=exc.reason
            )
        text = strip_fences(result.text)
        if not has_bullets(text):
            # Nothing is logged of the answer itself: it may quote the conversation.
            reason = "the worker's answer was not an observation log (no bullet lines)"
            if not self.fallback:
                raise WorkerError(reason, 200)
            # Once: a worker that answers so tends to do it for every segment.
            say = log.debug if self._warned_not_a_log else log.warning
            self._warned_not_a_log = True
            say("observer: %s; the extractive observer wrote the segment's log", reason)
            return await self.extractive.observe(
                messages, previous, tool_names=tool_names, fallback_reason=reason
            )
        prov = _provenance(messages, rendered, text, self.estimate, "llm")
        prov.worker_provider, prov.worker_model, prov.worker_api = result.provider, result.model, result.api
        prov.usage, prov.cost = result.usage, result.cost
        return Distillation(text, prov)


def _provenance(
    messages: Sequence[DistillInput],
    rendered: str,
    text: str,
    estimate: TokenEstimate,
    method: str,
    fallback_reason: str | None = None,
) -> Provenance:
    source = _source_tokens(messages, estimate)
    output = estimate(text)
    return Provenance(
        source_ids=[m.id for m in messages],
        generation=0,
        method=method,
        start=messages[0].timestamp if messages else 0.0,
        end=messages[-1].timestamp if messages else 0.0,
        source_tokens=source,
        input_tokens=estimate(rendered),
        output_tokens=output,
        compression_ratio=round(source / output, 2) if output else 0.0,
        fallback_reason=fallback_reason,
    )
