"""`.lore.json`: strict, every key optional, errors name the key path, env overrides."""

from __future__ import annotations

import json
import typing

import attrs
import pytest

from lore_core.config import ConfigError, LoreConfig, load_config, upstream_env_var
from lore_core.interfaces import Provider
from lore_core.wire.providers import BUILTIN_PROVIDERS


@attrs.define
class PluginSection:
    index_dir: str = "idx"
    batch_size: int = 100


def load(tmp_path, data, env=None, sections=None, providers=BUILTIN_PROVIDERS) -> LoreConfig:
    path = tmp_path / ".lore.json"
    path.write_text(json.dumps(data))
    return load_config(sections, env={"LORE_CONFIG": str(path), **(env or {})}, providers=providers)


def test_defaults_without_any_file(tmp_path):
    config = load_config(
        env={"XDG_CONFIG_HOME": str(tmp_path / "none")}, cwd=tmp_path, providers=BUILTIN_PROVIDERS
    )
    assert config.server.host == "127.0.0.1"
    assert config.server.port == 8377
    assert config.upstream.urls == {
        "anthropic": "https://api.anthropic.com",
        "openai": "https://api.openai.com",
    }


def test_every_declared_provider_has_its_upstream_key_and_variable(tmp_path):
    """``upstream.<name>`` and ``LORE_UPSTREAM_<NAME>`` for any declared provider (the
    kernel holds no list of them); a name no plugin declares is an unknown key."""
    providers = (*BUILTIN_PROVIDERS, Provider("my-vendor"), Provider("gemini", upstream="https://g.example"))
    config = load(
        tmp_path, {"upstream": {"my-vendor": "http://127.0.0.1:1", "openai": "http://o"}}, providers=providers
    )
    assert config.upstream.urls == {
        "anthropic": "https://api.anthropic.com",
        "openai": "http://o",
        "gemini": "https://g.example",
        "my-vendor": "http://127.0.0.1:1",
    }
    config = load(
        tmp_path,
        {},
        env={"LORE_UPSTREAM_MY_VENDOR": "http://v", "LORE_UPSTREAM_GEMINI": "http://g"},
        providers=providers,
    )
    assert (config.upstream.urls["my-vendor"], config.upstream.urls["gemini"]) == ("http://v", "http://g")
    assert upstream_env_var("my-vendor") == "LORE_UPSTREAM_MY_VENDOR"
    with pytest.raises(
        ConfigError, match=r"upstream\.gemni: unknown key .*known: anthropic, gemini, my-vendor, openai"
    ):
        load(tmp_path, {"upstream": {"gemni": "http://g"}}, providers=providers)
    with pytest.raises(ConfigError, match=r"upstream\.gemini"):
        load(tmp_path, {"upstream": {"gemini": 3}}, providers=providers)
    # Without the plugins asked (providers=None), any name is read as it is written.
    assert load(tmp_path, {"upstream": {"gemni": "http://g"}}, providers=None).upstream.urls == {
        "gemni": "http://g"
    }


def test_camel_case_keys_are_read(tmp_path):
    config = load(
        tmp_path, {"server": {"maxBodyBytes": 10}, "upstream": {"byModelPrefix": {"llama": "http://x"}}}
    )
    assert config.server.max_body_bytes == 10
    assert config.upstream.by_model_prefix == {"llama": "http://x"}


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"sever": {}}, "sever: unknown key"),
        ({"server": {"prot": 1}}, "server.prot: unknown key"),
        ({"server": {"port": "eighty"}}, "server.port"),
        ({"server": {"port": True}}, "server.port"),
        ({"upstream": {"maxRetries": 1.5}}, "upstream.maxRetries"),
        ({"upstream": {"byModelPrefix": {"a": 3}}}, "upstream.byModelPrefix.a"),
        ({"server": []}, "server: expected an object"),
    ],
)
def test_unknown_or_mistyped_keys_name_the_path(tmp_path, data, fragment):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, data)
    assert fragment in str(info.value)


def test_invalid_json_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{ nope")
    with pytest.raises(ConfigError, match=r"broken\.json: not valid JSON"):
        load_config(env={"LORE_CONFIG": str(path)})


def test_environment_overrides_the_file(tmp_path):
    config = load(
        tmp_path,
        {"server": {"port": 9000}},
        env={"LORE_PORT": "9100", "LORE_HOST": "0.0.0.0", "LORE_UPSTREAM_OPENAI": "http://o"},
    )
    assert (config.server.port, config.server.host, config.upstream.urls["openai"]) == (
        9100,
        "0.0.0.0",
        "http://o",
    )


def test_bad_environment_value_names_the_variable(tmp_path):
    with pytest.raises(ConfigError, match="LORE_PORT"):
        load(tmp_path, {}, env={"LORE_PORT": "lots"})


def test_plugin_sections_are_structured_strictly(tmp_path):
    config = load(tmp_path, {"my-plugin": {"batchSize": 5}}, sections={"my-plugin": PluginSection})
    assert config.section("my-plugin") == PluginSection(batch_size=5)
    with pytest.raises(ConfigError, match=r"my-plugin\.batchSise: unknown key"):
        load(tmp_path, {"my-plugin": {"batchSise": 5}}, sections={"my-plugin": PluginSection})
    # Without the plugin installed, its section is an unknown key.
    with pytest.raises(ConfigError, match="my-plugin: unknown key"):
        load(tmp_path, {"my-plugin": {}})


def test_project_file_overrides_user_file(tmp_path):
    user_dir = tmp_path / "xdg" / "lore"
    user_dir.mkdir(parents=True)
    (user_dir / ".lore.json").write_text(json.dumps({"server": {"port": 1111, "host": "::1"}}))
    project = tmp_path / "repo" / "sub"
    project.mkdir(parents=True)
    (tmp_path / "repo" / ".lore.json").write_text(json.dumps({"server": {"port": 2222}}))
    config = load_config(env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")}, cwd=project)
    assert (config.server.port, config.server.host) == (2222, "::1")
    assert len(config.sources) == 2


def test_every_config_key_is_documented():
    """docs/configuration.md must mention every key of every core section."""
    from pathlib import Path

    from lore_core.config import CORE_SECTIONS, ENV_OVERRIDES, FLAT_KEY, _camel

    doc = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    missing = []
    for section, cls in CORE_SECTIONS.items():
        # A dict section (``models``) is keyed by a name the user picks: ``models.<prefix>.input``.
        key, cls = (section, cls) if attrs.has(cls) else (f"{section}.<prefix>", typing.get_args(cls)[1])
        missing += [
            f"{key}.{_camel(field.name)}"
            for field in attrs.fields(cls)
            if f"`{key}.{_camel(field.name)}`" not in doc and not field.metadata.get(FLAT_KEY)
        ]
    missing += [var for var in ENV_OVERRIDES if f"`{var}`" not in doc]
    # The providers' upstreams: one key and one variable for any provider's name.
    missing += [name for name in ("`upstream.<provider>`", "`LORE_UPSTREAM_<PROVIDER>`") if name not in doc]
    assert not missing, f"undocumented configuration keys: {missing}"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"server": {"port": 99999}}, "server.port: must be between 1 and 65535, got 99999"),
        ({"server": {"port": 0}}, "server.port: must be between 1 and 65535, got 0"),
        ({"distill": {"metaThreshold": -3}}, "distill.metaThreshold: must be at least 1, got -3"),
        (
            {"distill": {"idleTimeoutSeconds": -1.0}},
            "distill.idleTimeoutSeconds: must be between 0 and 604800",
        ),
        ({"budget": {"clientUsageShare": 1.5}}, "budget.clientUsageShare: must be between 0 and 1, got 1.5"),
        ({"budget": {"maxLayer0Tokens": -1}}, "budget.maxLayer0Tokens: must be at least 0, got -1"),
        ({"models": {"claude-x": {"input": -2.0}}}, "models.claude-x.input: must be at least 0, got -2.0"),
        (
            {"upstream": {"connectTimeoutSeconds": 0}},
            "upstream.connectTimeoutSeconds: must be between 0.01 and 3600",
        ),
    ],
)
def test_numbers_out_of_range_name_the_key_and_the_range(tmp_path, data, message):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, data)
    assert message in str(info.value)


def test_every_range_problem_is_reported_at_once_and_bounds_are_inclusive(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, {"server": {"port": 70000}, "store": {"flushIntervalMs": -5}})
    assert "server.port:" in str(info.value) and "store.flushIntervalMs:" in str(info.value)
    config = load(
        tmp_path, {"server": {"port": 65535}, "budget": {"clientUsageShare": 0, "maxLayer0Tokens": None}}
    )
    assert config.server.port == 65535 and config.budget.max_layer0_tokens is None


def test_an_environment_value_out_of_range_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"server\.port: must be between 1 and 65535, got 123456"):
        load(tmp_path, {}, env={"LORE_PORT": "123456"})


def test_plugin_sections_get_the_same_range_check(tmp_path):
    from lore_core.config import setting

    @attrs.define
    class Ranged:
        pool_size: int = setting(4, low=1, high=64)

    with pytest.raises(ConfigError, match=r"my-plugin\.poolSize: must be between 1 and 64, got 0"):
        load(tmp_path, {"my-plugin": {"poolSize": 0}}, sections={"my-plugin": Ranged})
    assert (
        load(tmp_path, {"my-plugin": {"poolSize": 64}}, sections={"my-plugin": Ranged})
        .section("my-plugin")
        .pool_size
        == 64
    )


def test_every_numeric_setting_has_a_range_and_the_docs_show_it():
    """Each int/float field of a core section declares its range, and the reference's range
    column says the same."""
    import re
    from pathlib import Path

    from lore_core.config import CORE_SECTIONS, _camel, field_range

    doc = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    cells = dict(re.findall(r"^\| `([^`]+)` \| [^|]* \| ([^|]*) \|", doc, flags=re.M))
    wrong = []
    for section, cls in CORE_SECTIONS.items():
        key, cls = (section, cls) if attrs.has(cls) else (f"{section}.<prefix>", typing.get_args(cls)[1])
        for field in attrs.fields(attrs.resolve_types(cls)):
            numeric = any(t in (int, float) for t in (field.type, *typing.get_args(field.type)))
            bounds = field_range(field)
            name = f"{key}.{_camel(field.name)}"
            if numeric and bounds is None:
                wrong.append(f"{name}: no range")
                continue
            if bounds is None:
                continue

            def text(v):
                return f"{v:g}" if isinstance(v, float) else str(v)

            if bounds.low is not None and bounds.high is not None:
                expected = f"{text(bounds.low)} to {text(bounds.high)}"
            elif bounds.low is not None:
                expected = f"≥ {text(bounds.low)}"
            else:
                expected = f"≤ {text(bounds.high)}"
            if cells.get(name, "").strip() != expected:
                wrong.append(f"{name}: docs say {cells.get(name)!r}, code {expected!r}")
    assert not wrong, wrong


def test_lore_serve_with_a_port_out_of_range_says_so_without_a_traceback(tmp_path):
    """`server.port: 99999` used to crash `lore serve` with a traceback at bind time."""
    import subprocess
    import sys

    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"server": {"port": 99999}}))
    env = {"LORE_CONFIG": str(path), "PATH": "", "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "lore_core.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == "lore: configuration error: server.port: must be between 1 and 65535, got 99999"
    )


def test_a_provider_may_not_take_the_name_of_an_upstream_setting(tmp_path):
    from lore_core import hookimpl
    from lore_core.plugins import PluginError, bootstrap

    class Clash:
        @hookimpl
        def lore_register_providers(self, register):
            register(Provider("maxRetries"))

    (tmp_path / ".lore.json").write_text("{}")
    env = {"LORE_CONFIG": str(tmp_path / ".lore.json"), "HOME": str(tmp_path)}
    with pytest.raises(
        PluginError, match=r"declares the provider 'maxRetries': upstream\.maxRetries is a setting"
    ):
        bootstrap(env=env, cwd=tmp_path, load_entrypoints=False, extra_plugins=(Clash(),))
