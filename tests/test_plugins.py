"""Plugin loading through the one bootstrap: ``LORE_DISABLE_PLUGINS``, ``LORE_TRACE_PLUGINS``,
plugins that fail to import, ``lore plugins``, and the one registration shape.

Test plugins are tiny distributions (a module plus a ``.dist-info`` with a ``lore`` entry
point) put on ``sys.path``: the kernel finds them exactly as it finds installed ones."""

from __future__ import annotations

import json
import logging
import re
import textwrap
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest

import lore_core
from lore_core import cli, hookimpl
from lore_core.builtin.memory_store import MemoryStore
from lore_core.gateway import Gateway
from lore_core.plugins import Factory, PluginError, Registry, bootstrap, config_sections, make_plugin_manager
from lore_core.testing.net import free_port

TINY_HARNESS = """
from lore_core import hookimpl
from lore_core.interfaces import LaunchPlan


class TinyHarness:
    name = "tiny"

    def recognise(self, ctx):
        return 0

    def session_id(self, ctx):
        return None

    def project(self, ctx):
        return None

    def launch(self, url, args):
        return LaunchPlan(argv=["tiny", *args])


@hookimpl
def lore_register_harnesses(register):
    register(TinyHarness())
"""

BROKEN = """
raise ImportError("libtiny.so: cannot open shared object file")
"""

# A store built from the plugin's own configuration section, as lore_configure saw it.
TINY_STORE = """
import attrs

from lore_core import hookimpl
from lore_core.builtin.memory_store import MemoryStore
from lore_core.plugins import Factory

configured = {}


@attrs.define
class TinySection:
    label: str = "default"


class TinyStore(MemoryStore):
    name = "tiny"

    def __init__(self, label):
        super().__init__()
        self.label = label

    async def stats(self):
        return {**await super().stats(), "label": self.label}


@hookimpl
def lore_config_sections():
    return {"tiny-store": TinySection}


@hookimpl
def lore_configure(config):
    configured["label"] = config.section("tiny-store").label


@hookimpl
def lore_register_stores(register):
    # KeyError unless lore_configure ran first: the bootstrap's order is part of the contract.
    register(Factory("tiny", lambda config: TinyStore(configured["label"])))
"""


def put_on_path(root: Path, monkeypatch: pytest.MonkeyPatch, dist: str, entry: str, source: str) -> None:
    """A distribution ``dist`` whose ``lore`` entry point ``entry`` is a module of ``source``."""
    module = dist.replace("-", "_")
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{module}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[lore]\n{entry} = {module}\n")
    monkeypatch.syspath_prepend(str(root))


@pytest.fixture
def config_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "lore.json").write_text("{}")
    return {"LORE_CONFIG": str(tmp_path / "lore.json")}


# -- LORE_DISABLE_PLUGINS ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["harness-tiny", "lore-harness-tiny", "lore_harness_tiny", " LORE-HARNESS-TINY "]
)
def test_a_disabled_plugin_is_not_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config_env: dict[str, str], name: str
) -> None:
    put_on_path(tmp_path / "site", monkeypatch, "lore-harness-tiny", "harness-tiny", TINY_HARNESS)
    assert "tiny" in bootstrap(env=config_env).registry.harnesses

    boot = bootstrap(env={**config_env, "LORE_DISABLE_PLUGINS": f"other,{name}"})
    assert "tiny" not in boot.registry.harnesses
    assert boot.pm.is_blocked("harness-tiny")
    (row,) = [row for row in boot.pm.report() if row.name == "harness-tiny"]
    assert (row.status, row.distribution, row.version) == ("blocked", "lore-harness-tiny", "0.1.0")


def test_a_disabled_plugin_is_not_even_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config_env: dict[str, str]
) -> None:
    put_on_path(tmp_path / "site", monkeypatch, "lore-broken", "broken", BROKEN)
    pm = bootstrap(env={**config_env, "LORE_DISABLE_PLUGINS": "broken"}).pm
    assert pm.failures == {} and pm.is_blocked("broken")


def test_disabling_a_builtin_removes_its_codecs(config_env: dict[str, str]) -> None:
    boot = bootstrap(
        env={**config_env, "LORE_DISABLE_PLUGINS": "lore_core.builtin.codecs"}, load_entrypoints=False
    )
    assert boot.registry.codecs == {}
    assert boot.registry.codec_for_path("/v1/messages") is None


def test_a_misspelled_disabled_name_is_warned_about(
    config_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap(env={**config_env, "LORE_DISABLE_PLUGINS": "harnes-claude"}, load_entrypoints=False)
    assert "LORE_DISABLE_PLUGINS: no plugin named 'harnes-claude' is installed" in caplog.text


# -- a plugin that fails to import ---------------------------------------------------------------


def test_lore_plugins_reports_loaded_blocked_and_failed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lore_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    put_on_path(tmp_path / "site", monkeypatch, "lore-broken", "broken", BROKEN)
    put_on_path(tmp_path / "site2", monkeypatch, "lore-harness-tiny", "harness-tiny", TINY_HARNESS)
    monkeypatch.setenv("LORE_DISABLE_PLUGINS", "harness-tiny")

    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "lore-core" in out and "lore_core.builtin.codecs" in out
    assert "hooks: lore_register_codecs" in out and "codec 'anthropic-messages'" in out
    blocked, failed = out.split("blocked by LORE_DISABLE_PLUGINS:")[1].split("failed to load:")
    assert "harness-tiny  lore-harness-tiny 0.1.0" in blocked
    assert "broken  lore-broken 0.1.0" in failed
    assert "error: ImportError: libtiny.so: cannot open shared object file" in failed
    assert "plugin 'broken' (lore-broken 0.1.0) failed to load and is skipped" in caplog.text
    assert all(r.levelno == logging.WARNING for r in caplog.records if "failed to load" in r.message)

    assert cli.main(["plugins", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    loaded = {row["name"]: row for row in report["loaded"]}
    assert loaded["lore_core.builtin.generic_harness"]["hooks"] == ["lore_register_harnesses"]
    assert loaded["lore_core.builtin.generic_harness"]["registers"] == ["harness 'generic'"]
    assert loaded["lore_core.builtin.generic_harness"]["distribution"] == "lore-core"
    assert [row["name"] for row in report["blocked"]] == ["harness-tiny"]
    assert report["failed"] == [
        {
            "name": "broken",
            "distribution": "lore-broken",
            "version": "0.1.0",
            "status": "failed",
            "hooks": [],
            "error": "ImportError: libtiny.so: cannot open shared object file",
            "registers": [],
        }
    ]


def test_lore_plugins_lists_the_plugins_when_the_configuration_is_broken(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lore_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A broken .lore.json is when one most needs to see what loaded.
    Path(lore_env["LORE_CONFIG"]).write_text(json.dumps({"server": {"port": 99999}}))
    assert cli.main(["plugins"]) == 2
    captured = capsys.readouterr()
    assert "lore_core.builtin.codecs" in captured.out and "codec 'anthropic-messages'" in captured.out
    assert "server.port: must be between 1 and 65535" in captured.err
    assert cli.main(["plugins", "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert "server.port" in report["config_error"]
    assert any(row["name"] == "lore_core.builtin.codecs" for row in report["loaded"])


def test_the_gateway_starts_with_a_plugin_that_fails_to_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start_gateway: Any
) -> None:
    put_on_path(tmp_path / "site", monkeypatch, "lore-broken", "broken", BROKEN)
    # embed-local is switched off only to keep the test light (no model to load).
    server = start_gateway(env={"LORE_DISABLE_PLUGINS": "embed-local"})
    health = httpx.get(f"{server.url}/health", timeout=10).json()
    assert "lore_core.builtin.codecs" in health["plugins"]
    assert "broken" not in health["plugins"] and "embed-local" not in health["plugins"]
    assert server.gateway.pm.failures["broken"].startswith("ImportError")


# -- LORE_TRACE_PLUGINS --------------------------------------------------------------------------


class SectionPlugin:
    @hookimpl
    def lore_config_sections(self) -> dict[str, type]:
        return {"traced": dict}


def test_tracing_logs_every_hook_call_with_arguments_and_results(
    config_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="lore.plugins"):
        bootstrap(env={**config_env, "LORE_TRACE_PLUGINS": "1"}, load_entrypoints=False)
    traced = "\n".join(r.message for r in caplog.records if r.name == "lore.plugins")
    assert "lore_configure [hook]" in traced and "config: LoreConfig(" in traced
    assert "finish lore_configure --> []" in traced
    # Registration hooks are called plugin by plugin, each with a register of its own.
    assert "register: <function register[lore_core.builtin.codecs]" in traced
    assert "lore_register_curators [hook]" in traced


def test_tracing_shows_what_a_hook_returned(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="lore.plugins"):
        pm = make_plugin_manager(
            load_entrypoints=False, extra=[SectionPlugin()], env={"LORE_TRACE_PLUGINS": "1"}
        )
        config_sections(pm)
    assert "finish lore_config_sections --> [{'traced': <class 'dict'>}]" in caplog.text


def test_tracing_is_off_when_the_switch_says_so(
    config_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="lore.plugins"):
        bootstrap(env={**config_env, "LORE_TRACE_PLUGINS": "0"}, load_entrypoints=False)
    assert "[hook]" not in caplog.text


# -- lore --version ------------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"lore-core {metadata.version('lore-core')}"
    assert lore_core.__version__ == metadata.version("lore-core")


# -- one registration shape, duplicates named ----------------------------------------------------


class Layer:
    def __init__(self, name: str) -> None:
        self.name, self.priority = name, 50

    def compose(self, view: Any, ctx: Any) -> Any:
        return view


class Named:
    def __init__(self, name: str) -> None:
        self.name = name


def plugin_class(hook: str, make: Any) -> type:
    """A plugin class implementing ``hook`` by registering ``make()``."""

    def impl(self: Any, register: Any) -> None:
        register(make())

    impl.__name__ = hook
    return type("Plugin", (), {hook: hookimpl(impl)})


REGISTRATIONS = [
    ("lore_register_harnesses", lambda: Named("twin"), "harness 'twin'"),
    ("lore_register_stores", lambda: Factory("twin", MemoryStore), "store 'twin'"),
    ("lore_register_embedders", lambda: Factory("twin", lambda config: None), "embedder 'twin'"),
    ("lore_register_prompt_layers", lambda: Layer("twin"), "prompt layer 'twin'"),
    (
        "lore_register_curators",
        lambda: Factory("twin", lambda ctx: None, kind="observer"),
        "observer curator 'twin'",
    ),
]


@pytest.mark.parametrize(("hook", "make", "label"), REGISTRATIONS, ids=[r[0] for r in REGISTRATIONS])
def test_the_same_name_from_two_plugins_is_an_error_naming_both(hook: str, make: Any, label: str) -> None:
    first = type("First", (plugin_class(hook, make),), {})()
    second = type("Second", (plugin_class(hook, make),), {})()
    pm = make_plugin_manager(load_entrypoints=False, extra=[first, second], env={})
    with pytest.raises(PluginError, match=f"the {label} is registered twice: by First and by Second"):
        Registry.collect(pm)


def test_a_prompt_layer_may_not_take_a_builtin_layers_name() -> None:
    pm = make_plugin_manager(
        load_entrypoints=False,
        extra=[plugin_class("lore_register_prompt_layers", lambda: Layer("system"))()],
        env={},
    )
    with pytest.raises(
        PluginError, match=re.escape("prompt layer 'system' is registered twice: by lore_core.builtin")
    ):
        Registry.collect(pm)


def test_a_curator_name_is_per_kind() -> None:
    # The kernel registers "llm" as observer and as reflector: one name, two kinds, no clash.
    curators = Registry.collect(make_plugin_manager(load_entrypoints=False, env={})).curators
    assert set(curators["observer"]) == {"llm", "extractive"} and set(curators["reflector"]) == {"llm"}


def test_a_duplicate_codec_names_both_plugins() -> None:
    from lore_core.wire.anthropic.codec import AnthropicMessagesCodec

    pm = make_plugin_manager(
        load_entrypoints=False, extra=[plugin_class("lore_register_codecs", AnthropicMessagesCodec)()], env={}
    )
    twice = "codec 'anthropic-messages' is registered twice: by lore_core.builtin.codecs and by Plugin"
    with pytest.raises(PluginError, match=re.escape(twice)):
        Registry.collect(pm)


def test_the_old_registration_shapes_are_errors_naming_the_plugin() -> None:
    class OldStyle:
        @hookimpl
        def lore_register_stores(self, register: Any) -> None:
            register("old", MemoryStore)

    pm = make_plugin_manager(load_entrypoints=False, extra=[OldStyle()], env={})
    with pytest.raises(PluginError, match="plugin OldStyle failed in lore_register_stores: TypeError"):
        Registry.collect(pm)


def test_a_registration_without_a_name_is_an_error() -> None:
    pm = make_plugin_manager(
        load_entrypoints=False, extra=[plugin_class("lore_register_harnesses", lambda: Named(""))()], env={}
    )
    with pytest.raises(PluginError, match="plugin Plugin registered a harness without a name"):
        Registry.collect(pm)


def test_a_configuration_section_declared_twice_names_both_plugins(config_env: dict[str, str]) -> None:
    class Again:
        @hookimpl
        def lore_config_sections(self) -> dict[str, type]:
            return {"traced": dict}

    with pytest.raises(
        PluginError, match="section 'traced' is declared twice: by SectionPlugin and by Again"
    ):
        bootstrap(env=config_env, load_entrypoints=False, extra_plugins=[SectionPlugin(), Again()])


def test_lore_commands_report_a_plugin_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lore_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    twin = textwrap.dedent(TINY_HARNESS).replace('name = "tiny"', 'name = "claude"')
    put_on_path(tmp_path / "site", monkeypatch, "lore-harness-twin", "harness-twin", twin)
    assert cli.main(["plugins"]) == 2
    assert "lore: plugin error: the harness 'claude' is registered twice" in capsys.readouterr().err


# -- one bootstrap: the CLI honours a plugin's section as the gateway does ------------------------


def test_a_plugins_config_section_reaches_lore_commands_as_it_reaches_the_gateway(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lore_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    put_on_path(tmp_path / "site", monkeypatch, "lore-tiny-store", "tiny-store", TINY_STORE)
    Path(lore_env["LORE_CONFIG"]).write_text(
        json.dumps({"store": {"backend": "tiny"}, "tiny-store": {"label": "from-config"}})
    )
    monkeypatch.setenv("LORE_PORT", str(free_port()))  # no gateway answers there

    gateway = Gateway.load(cwd=tmp_path)
    assert (gateway.store.name, gateway.store.label) == ("tiny", "from-config")

    assert cli.main(["status", "--json"]) == 0
    captured = capsys.readouterr()
    assert "reading the tiny store directly" in captured.err
    store = json.loads(captured.out)["store"]
    assert (store["backend"], store["label"]) == ("tiny", "from-config")

    # An unknown key in the plugin's section is the same error for every command.
    Path(lore_env["LORE_CONFIG"]).write_text(json.dumps({"tiny-store": {"lable": "x"}}))
    assert cli.main(["sessions"]) == 2
    assert "tiny-store.lable: unknown key" in capsys.readouterr().err
