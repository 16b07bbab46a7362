"""Registers the built-in curators: the LLM observer, reflector and knowledge curator
(through the worker model) and the deterministic extractive observer (no LLM).

Each factory imports its curator when it is called: the curators load the worker's HTTP
client, which a ``lore`` command that only reads the store must not pay for at start-up.
"""

from __future__ import annotations

from collections.abc import Callable

from lore_core.hookspecs import hookimpl
from lore_core.interfaces import Curator, CuratorContext, CuratorFactory
from lore_core.plugins import Factory


def _llm_observer(ctx: CuratorContext) -> Curator:
    from lore_core.distill.observer import LLMObserver

    # Falls back to the extractive observer whenever the worker is unusable.
    return LLMObserver(ctx.worker, ctx.config.distill.tool_output_max_chars)


def _extractive_observer(ctx: CuratorContext) -> Curator:
    from lore_core.distill.observer import ExtractiveObserver

    return ExtractiveObserver(ctx.config.distill.tool_output_max_chars)


def _llm_knowledge(ctx: CuratorContext) -> Curator | None:
    # Without a worker client nothing is invented: knowledge then comes from people only.
    # Nor with distill.observer "extractive", which means no LLM calls in the background.
    if ctx.worker is None or ctx.config.distill.observer != "llm":
        return None
    from lore_core.knowledge.curator import LLMKnowledgeCurator

    return LLMKnowledgeCurator(ctx.worker, include_sensitive=ctx.config.knowledge.worker_sees_sensitive)


def _llm_reflector(ctx: CuratorContext) -> Curator | None:
    # Without a worker client consolidation waits: an extractive summary of summaries would
    # lose what the logs keep.
    from lore_core.distill.reflector import LLMReflector

    return LLMReflector(ctx.worker) if ctx.worker is not None else None


@hookimpl
def lore_register_curators(register: Callable[[CuratorFactory], None]) -> None:
    register(Factory("llm", _llm_observer, kind="observer"))
    register(Factory("extractive", _extractive_observer, kind="observer"))
    register(Factory("llm", _llm_reflector, kind="reflector"))
    register(Factory("llm", _llm_knowledge, kind="knowledge"))
