"""Distillation: turning conversation segments into observation logs (gen-0, the observer)
and consolidating those into meta-distillations (gen-1, the reflector).

* :mod:`~lore_core.distill.render`: messages -> the observer's input text;
* :mod:`~lore_core.distill.segment`: where segments start and end;
* :mod:`~lore_core.distill.extractive`: the deterministic observer (no LLM);
* :mod:`~lore_core.distill.observer` / :mod:`~lore_core.distill.reflector`: the worker calls.

Everything here works on :class:`~lore_core.curation.DistillInput` and friends, not on
the store's records, so it can be tested and benchmarked without a store.
"""

from __future__ import annotations

from lore_core.curation import Distillation, DistillInput, ObservationInput, Provenance

__all__ = ["DistillInput", "Distillation", "ObservationInput", "Provenance"]
