"""The reflector (generation 1): many observation logs in, one meta-distillation out, with the
sections current state, key decisions, technical changes and timeline (prompt:
``prompts/reflector.md``).

This module makes the call; choosing which observations to consolidate (all but the newest
few once there are enough) and archiving them is the scheduler's and the store's job. There
is no extractive fallback: without a worker, consolidation waits (the gen-0 logs stay
usable as they are), so :class:`~lore_core.worker.client.WorkerUnavailable` propagates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

from lore_core.context.framing import worker_data
from lore_core.curation import Distillation, ObservationInput, Provenance
from lore_core.distill.observer import has_bullets, strip_fences
from lore_core.distill.prompts import load_prompt
from lore_core.distill.segment import TokenEstimate, estimate_tokens
from lore_core.interfaces import Reflector
from lore_core.worker.client import WorkerClient, WorkerError

SECTIONS = ("Current state", "Key decisions", "Technical changes", "Timeline")


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts > 0 else ""


def reflector_prompt(observations: Sequence[ObservationInput], previous_meta: str = "") -> str:
    """The user turn of a reflector call: the logs, oldest first, and the previous
    consolidation."""
    parts = [
        f"<previous_meta_distillation>\n{worker_data(previous_meta.strip()) or '(none yet)'}\n"
        "</previous_meta_distillation>\n",
        "<observations>",
    ]
    for obs in sorted(observations, key=lambda o: (o.start, o.end)):
        text = worker_data(obs.text.strip())
        parts.append(f'<observation from="{_iso(obs.start)}" to="{_iso(obs.end)}">\n{text}\n</observation>')
    parts.append("</observations>")
    return "\n".join(parts)


def missing_sections(text: str) -> list[str]:
    """The required section headings a meta-distillation lacks."""
    return [name for name in SECTIONS if not re.search(rf"(?im)^#+\s*{re.escape(name)}\s*$", text)]


class LLMReflector(Reflector):
    name = "reflector"
    kind = "reflector"

    def __init__(self, worker: WorkerClient, estimate: TokenEstimate = estimate_tokens) -> None:
        self.worker = worker
        self.estimate = estimate

    async def reflect(
        self,
        observations: Sequence[ObservationInput],
        previous_meta: str = "",
        *,
        session_id: str | None = None,
    ) -> Distillation:
        if not observations:
            raise ValueError("nothing to reflect on")
        prompt = reflector_prompt(observations, previous_meta)
        result = await self.worker.complete(
            load_prompt("reflector"), prompt, session_id=session_id, purpose="reflector"
        )
        text = strip_fences(result.text)
        missing = missing_sections(text)
        if len(missing) == len(SECTIONS) and not has_bullets(text):
            # It would replace the logs it consolidates in later prompts: keep those instead
            # (they stay as they are; consolidation is tried again later).
            raise WorkerError("the answer is not a meta-distillation (none of its sections, no bullets)", 200)
        source = sum(self.estimate(o.text) for o in observations) + self.estimate(previous_meta)
        output = self.estimate(text)
        prov = Provenance(
            source_ids=[o.id for o in observations],
            generation=1,
            method="llm",
            start=min(o.start for o in observations),
            end=max(o.end for o in observations),
            source_tokens=source,
            input_tokens=self.estimate(prompt),
            output_tokens=output,
            compression_ratio=round(source / output, 2) if output else 0.0,
            worker_provider=result.provider,
            worker_model=result.model,
            worker_api=result.api,
            usage=result.usage,
            cost=result.cost,
            warnings=[f"missing section: {name}" for name in missing],
        )
        return Distillation(text, prov)
