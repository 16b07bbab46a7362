"""``lore_config_sections`` and ``lore_configure``: what the bootstrap does with them
(docs/hooks.md, "Configuration")."""

from __future__ import annotations

import json

import attrs
import pytest

from lore_core import hookimpl
from lore_core.config import ConfigError
from lore_core.plugins import PluginError, bootstrap


@attrs.define
class GreetingConfig:
    greeting: str = "hello"
    times: int = 1


class Greeter:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.configured = None

    @hookimpl
    def lore_config_sections(self):
        self.calls.append("sections")
        return {"greeter": GreetingConfig}

    @hookimpl
    def lore_configure(self, config):
        self.calls.append("configure")
        self.configured = config.section("greeter")

    @hookimpl
    def lore_register_harnesses(self, register):
        self.calls.append("register")


class Silent:
    """``None`` from ``lore_config_sections`` declares nothing."""

    @hookimpl
    def lore_config_sections(self):
        return None


def boot(tmp_path, body, *plugins):
    path = tmp_path / ".lore.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    env = {"LORE_CONFIG": str(path), "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    return bootstrap(env=env, cwd=tmp_path, load_entrypoints=False, extra_plugins=plugins)


def test_a_section_reaches_configure_before_any_registration(tmp_path):
    greeter = Greeter()
    booted = boot(tmp_path, {"greeter": {"greeting": "hi", "times": 2}}, greeter, Silent())
    assert greeter.calls == ["sections", "configure", "register"]
    assert greeter.configured == GreetingConfig("hi", 2)
    assert booted.config.section("greeter") is greeter.configured


def test_an_absent_section_has_its_defaults(tmp_path):
    greeter = Greeter()
    boot(tmp_path, {}, greeter)
    assert greeter.configured == GreetingConfig()


def test_unknown_keys_of_a_section_are_rejected_with_their_path(tmp_path):
    with pytest.raises(ConfigError, match=r"greeter\.nope"):
        boot(tmp_path, {"greeter": {"nope": 1}}, Greeter())


def test_a_section_declared_twice_names_both_plugins(tmp_path):
    class Again:
        @hookimpl
        def lore_config_sections(self):
            return {"greeter": GreetingConfig}

    with pytest.raises(PluginError, match=r"'greeter' is declared twice: by \S+ and by \S+"):
        boot(tmp_path, {}, Greeter(), Again())


def test_a_failing_configure_stops_the_bootstrap(tmp_path):
    class Broken:
        @hookimpl
        def lore_configure(self, config):
            raise RuntimeError("no")

    with pytest.raises(RuntimeError, match="no"):
        boot(tmp_path, {}, Broken())
