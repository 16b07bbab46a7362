"""Every hook is documented, prefixed, and goes through a fresh plugin manager."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from lore_core import hookimpl, hookspecs
from lore_core.interfaces import Harness, PromptLayer
from lore_core.pipeline.parse import identify
from lore_core.plugins import PluginError, Registry, make_plugin_manager


@pytest.mark.parametrize("name", hookspecs.all_hookspec_names())
def test_every_hook_is_documented(name):
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    assert len(doc.split()) >= 15, f"hook {name} needs a docstring stating its contract"


def test_hook_names_carry_the_prefix():
    names = hookspecs.all_hookspec_names()
    assert names and all(n.startswith("lore_") for n in names)


def test_a_misspelled_hook_is_an_error():
    class Typo:
        @hookimpl
        def lore_register_codec(self, register):  # missing "s"
            pass

    with pytest.raises(Exception, match="lore_register_codec"):
        make_plugin_manager(load_entrypoints=False, extra=[Typo()])


def test_duplicate_registrations_are_rejected():
    from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

    class Again:
        @hookimpl
        def lore_register_codecs(self, register):
            register(AnthropicMessagesCodec())

    pm = make_plugin_manager(load_entrypoints=False, extra=[Again()])
    with pytest.raises(PluginError, match="anthropic-messages"):
        Registry.collect(pm)


def test_prompt_layers_run_by_priority_not_registration_order():
    class Layer(PromptLayer):
        def __init__(self, name, priority):
            self.name, self.priority = name, priority

        def compose(self, view, ctx):
            return view

    class Late:
        @hookimpl
        def lore_register_prompt_layers(self, register):
            register(Layer("conversation", 50))

    class Early:
        @hookimpl
        def lore_register_prompt_layers(self, register):
            register(Layer("system", 0))
            register(Layer("ltm", 10))

    for order in ([Late(), Early()], [Early(), Late()]):
        pm = make_plugin_manager(
            load_entrypoints=False, extra=order, block=["lore_core.builtin.context_layers"]
        )
        registry = Registry.collect(pm)
        assert [layer.name for layer in registry.prompt_layers] == ["system", "ltm", "conversation"]


def test_blocking_a_builtin_plugin():
    pm = make_plugin_manager(load_entrypoints=False, block=["lore_core.builtin.codecs"])
    assert Registry.collect(pm).codecs == {}


def test_importing_the_kernel_pulls_in_no_heavy_dependency():
    heavy = ["duckdb", "lancedb", "onnxruntime", "tiktoken", "numpy", "pyarrow", "anthropic", "openai"]
    code = (
        "import sys, lore_core, lore_core.http.app, lore_core.cli.commands, lore_core.gateway;"
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_generic_harness_wins_when_nobody_recognises_a_request(tmp_path):
    from lore_core.gateway import Gateway
    from lore_core.interfaces import LaunchPlan, RequestContext

    class Zed(Harness):
        name = "zzz"

        def recognise(self, ctx):
            return 0

        def session_id(self, ctx):
            return "wrong"

        def project(self, ctx):
            return None

        def launch(self, url, args):
            return LaunchPlan(argv=[])

    class Plugin:
        @hookimpl
        def lore_register_harnesses(self, register):
            register(Zed())

    (tmp_path / "lore.json").write_text("{}")
    env = {"LORE_CONFIG": str(tmp_path / "lore.json")}
    gw = Gateway.load(env=env, load_entrypoints=False, extra_plugins=[Plugin()])
    harness, session, _ = identify(gw, RequestContext("/v1/messages", {"x-session-id": "s-1"}, None))
    assert harness.name == "generic" and session == "s-1"
