"""Curators come through the plugin hook; .lore.json chooses the observer and reflector."""

from __future__ import annotations

import time

import httpx
import pytest

from lore_core import hookimpl
from lore_core.config import ConfigError, LoreConfig, load_config
from lore_core.distill.prompts import OBSERVER_MARKER
from lore_core.distill.scheduler import build_curators
from lore_core.interfaces import Curator
from lore_core.plugins import Factory, Registry, make_plugin_manager
from lore_core.testing.fake_worker import observer_responder, request_texts


def test_builtin_curators_are_registered_through_the_hook():
    curators = Registry.collect(make_plugin_manager(load_entrypoints=False)).curators
    assert set(curators["observer"]) >= {"llm", "extractive"}
    assert "llm" in curators["reflector"]


def test_an_unknown_curator_name_is_a_config_error_naming_the_key(tmp_path):
    path = tmp_path / "lore.json"
    path.write_text('{"distill": {"observer": "psychic"}}')
    config = load_config(env={"LORE_CONFIG": str(path)})
    curators = Registry.collect(make_plugin_manager(load_entrypoints=False)).curators
    with pytest.raises(ConfigError, match=r"distill\.observer: no observer named 'psychic'.*extractive"):
        build_curators(config, curators, None)


def test_a_plugin_curator_can_be_chosen():
    class Echo(Curator):
        name, kind = "echo", "observer"

    class Plugin:
        @hookimpl
        def lore_register_curators(self, register):
            register(Factory("echo", lambda ctx: Echo(), kind="observer"))

    curators = Registry.collect(make_plugin_manager(load_entrypoints=False, extra=[Plugin()])).curators
    config = LoreConfig()
    config.distill.observer = "echo"
    observer, _ = build_curators(config, curators, None)
    assert isinstance(observer, Echo)


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
