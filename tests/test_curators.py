"""Curators come through the plugin hook; .lore.json chooses the observer, the reflector and
the knowledge curator; a curator is one of the kernel's kinds (its class inherits from the
kind's) or it is refused with the reason."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import httpx
import pytest

from lore_core import hookimpl
from lore_core.config import ConfigError, LoreConfig, load_config
from lore_core.curation import Curation, Operation
from lore_core.distill.observer import ExtractiveObserver
from lore_core.distill.prompts import OBSERVER_MARKER
from lore_core.interfaces import Curator, KnowledgeCurator
from lore_core.plugins import Factory, Registry, make_plugin_manager
from lore_core.storage.entities import Entity
from lore_core.storage.knowledge import KnowledgeVersion
from lore_core.storage.records import StoredDistillation
from lore_core.testing.fake_worker import observer_responder, request_texts


def _registry(*plugins: object) -> Registry:
    return Registry.collect(make_plugin_manager(load_entrypoints=False, extra=list(plugins)))


class _Registers:
    """A plugin registering the given curator factories."""

    def __init__(self, *factories: Factory) -> None:
        self.factories = factories

    @hookimpl
    def lore_register_curators(self, register):
        for factory in self.factories:
            register(factory)


class Remembering(KnowledgeCurator):
    """A third-party knowledge curator: one create operation per call, no LLM."""

    name = "remembering"

    def __init__(self) -> None:
        self.calls = 0

    async def curate(
        self,
        observations: Sequence[StoredDistillation],
        entries: Sequence[KnowledgeVersion],
        *,
        session_id: str | None = None,
        entities: Sequence[Entity] = (),
    ) -> Curation:
        self.calls += 1
        op = Operation(
            "create", category="pattern", title="Logs are curated", content="by a plugin", source="observed"
        )
        return Curation([op], [])


def test_builtin_curators_are_registered_through_the_hook():
    curators = _registry().curators
    assert set(curators["observer"]) >= {"llm", "extractive"}
    assert "llm" in curators["reflector"]


def test_an_unknown_curator_name_is_a_config_error_naming_the_key(tmp_path):
    path = tmp_path / "lore.json"
    path.write_text('{"distill": {"observer": "psychic"}}')
    config = load_config(env={"LORE_CONFIG": str(path)})
    with pytest.raises(ConfigError, match=r"distill\.observer: no observer named 'psychic'.*extractive"):
        _registry().choose_curators(config, None)
    config = LoreConfig()
    config.knowledge.curator = "oracle"
    with pytest.raises(ConfigError, match=r"knowledge\.curator: no knowledge named 'oracle'.*llm"):
        _registry().choose_curators(config, None)


def test_a_plugin_curator_can_be_chosen():
    class Echo(ExtractiveObserver):
        name = "echo"

    config = LoreConfig()
    config.distill.observer = "echo"
    chosen = _registry(_Registers(Factory("echo", lambda ctx: Echo(), kind="observer"))).choose_curators(
        config, None
    )
    assert isinstance(chosen.observer, Echo)
    # Without a worker the LLM reflector and knowledge curator cannot work: none.
    assert chosen.reflector is None and chosen.knowledge is None


def test_a_curator_that_is_not_of_its_kind_is_refused_with_the_reason():
    class Shapeless(Curator):  # says "observer" but has no observe()
        name, kind = "shapeless", "observer"

    config = LoreConfig()
    config.distill.observer = "shapeless"
    registry = _registry(_Registers(Factory("shapeless", lambda ctx: Shapeless(), kind="observer")))
    with pytest.raises(
        ConfigError, match=r"distill\.observer: .*Shapeless, not a lore_core\.interfaces\.Observer"
    ):
        registry.choose_curators(config, None)


def test_a_curator_of_a_kind_the_kernel_does_not_run_is_refused_with_the_reason(caplog):
    with caplog.at_level(logging.WARNING, logger="lore.plugins"):
        registry = _registry(_Registers(Factory("tidy", lambda ctx: None, kind="summarizer")))
    assert "summarizer" not in registry.curators
    assert (
        "curator 'tidy' of kind 'summarizer'" in caplog.text
        and "observer, reflector, knowledge" in caplog.text
    )


def test_a_plugin_knowledge_curator_curates_through_the_gateway(start_gateway):
    curator = Remembering()
    plugin = _Registers(Factory("remembering", lambda ctx: curator, kind="knowledge"))
    # distill.observer "extractive": no LLM anywhere, and the plugin's curator still runs.
    config = {"distill": {"observer": "extractive"}, "knowledge": {"curator": "remembering"}}
    server = start_gateway(config, extra_plugins=(plugin,))
    upkeep = server.gateway.knowledge_upkeep
    assert upkeep.curator is curator
    server.call(
        server.gateway.store.write_distillation(
            StoredDistillation(id="log-1", session_id="s-1", generation=0, text="- notes", project="/p")
        )
    )
    report = server.call(upkeep.curate_session("s-1", "/p"))
    assert curator.calls == 1 and not report.skipped and report.applied["created"] == 1
    titles = [e.title for e in server.call(server.gateway.knowledge.entries("/p"))]
    assert titles == ["Logs are curated"]


def test_the_extractive_observer_can_be_chosen_even_with_a_worker(start_gateway, fake_upstream):
    fake_upstream.responder = observer_responder()
    distill = {
        "idleTimeoutSeconds": 0.3,
        "firstSegmentMinMessages": 2,
        "firstSegmentMinTokens": 4,
        "observer": "extractive",
    }
    server = start_gateway({"distill": distill})
    history = []
    for text in ["open src/app.py", "pytest failed: AssertionError in tests/test_app.py"]:
        history.append({"role": "user", "content": text})
        body = {"model": "claude-test", "max_tokens": 20, "messages": history}
        headers = {"x-api-key": "k", "x-session-id": "extractive-1"}
        reply = httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30).json()
        history.append({"role": "assistant", "content": reply["content"]})
    # On a loaded machine the second request may come after the idle timeout, so the first
    # message can be distilled on its own: wait for a log that holds the second.
    deadline = time.monotonic() + 120
    rows = []
    while not any("tests/test_app.py" in d.text for d in rows) and time.monotonic() < deadline:
        rows = server.call(server.gateway.store.list_distillations("extractive-1"))
        time.sleep(0.1)
    assert rows and all(d.method == "extractive" for d in rows)
    assert any("tests/test_app.py" in d.text for d in rows), [d.text for d in rows]
    observer_calls = [r for r in fake_upstream.api_requests() if OBSERVER_MARKER in request_texts(r.json)[0]]
    assert observer_calls == []
