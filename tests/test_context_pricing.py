"""The model price table: shipped data, longest-prefix match, defaults, .lore.json overrides."""

from __future__ import annotations

import json

import attrs
import pytest

from lore_core.config import ConfigError, ModelConfig, load_config
from lore_core.context import pricing
from lore_core.context.pricing import ModelInfo, PriceTable, normalise_model_name
from lore_core.model import Usage

TABLE = PriceTable()


def shipped_prefixes() -> list[str]:
    return sorted(pricing.shipped_table()[1])


@pytest.mark.parametrize("prefix", shipped_prefixes())
def test_every_shipped_entry_is_complete_and_sane(prefix):
    info = TABLE.lookup(prefix)
    assert info.prefix == prefix
    assert 0 < info.cache_read <= info.input <= info.cache_write
    assert info.output >= info.input
    assert info.cache_write_hour is None or info.cache_write_hour >= info.cache_write
    assert 0 < info.max_input_tokens <= info.context_window
    assert 0 < info.max_output_tokens
    assert info.cache_ttl_seconds == 300


def test_the_table_covers_current_claude_and_openai_families():
    wanted = [
        "claude-opus-4-5",
        "claude-opus-4-1",
        "claude-sonnet-4-5",
        "claude-sonnet-4",
        "claude-haiku-4-5",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5-nano",
        "gpt-4.1",
        "gpt-4.1-mini",
        "o3",
        "o4-mini",
    ]
    assert set(wanted) <= set(shipped_prefixes())


@pytest.mark.parametrize(
    ("model", "prefix", "input_price", "cache_read"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 3.0, 0.3),
        ("claude-sonnet-4-20250514", "claude-sonnet-4", 3.0, 0.3),
        ("claude-opus-4-5-20251101", "claude-opus-4-5", 5.0, 0.5),
        ("claude-opus-4-1-20250805", "claude-opus-4-1", 15.0, 1.5),
        ("claude-opus-4-20250514", "claude-opus-4", 15.0, 1.5),
        ("claude-haiku-4-5-20251001", "claude-haiku-4-5", 1.0, 0.1),
        ("claude-3-5-haiku-20241022", "claude-3-5-haiku", 0.8, 0.08),
        ("claude-sonnet-5", "claude-sonnet", 3.0, 0.3),  # a newer Sonnet: its family's prices
        ("gpt-5", "gpt-5", 1.25, 0.125),
        ("gpt-5.1-codex", "gpt-5", 1.25, 0.125),
        ("gpt-5-mini-2025-08-07", "gpt-5-mini", 0.25, 0.025),
        ("gpt-4.1-2025-04-14", "gpt-4.1", 2.0, 0.5),
        ("gpt-4.1-nano", "gpt-4.1-nano", 0.1, 0.025),
        ("o3", "o3", 2.0, 0.5),
        ("o3-mini-2025-01-31", "o3-mini", 1.1, 0.55),
        ("o4-mini", "o4-mini", 1.1, 0.275),
    ],
)
def test_models_match_their_longest_prefix(model, prefix, input_price, cache_read):
    info = TABLE.lookup(model)
    assert (info.prefix, info.input, info.cache_read) == (prefix, input_price, cache_read)


@pytest.mark.parametrize(
    ("name", "normal"),
    [
        ("anthropic/claude-opus-4.5", "claude-opus-4-5"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5-20250929-v1:0"),
        ("GPT-5-Mini", "gpt-5-mini"),
        ("openai/gpt-4.1", "gpt-4.1"),
    ],
)
def test_router_and_cloud_model_names_are_normalised(name, normal):
    assert normalise_model_name(name) == normal


def test_an_unknown_model_gets_the_conservative_default():
    for model in ("llama3.3:70b", "", None):
        info = TABLE.lookup(model)
        assert info.prefix == ""
        assert (info.input, info.output, info.cache_read, info.cache_write) == (15.0, 75.0, 1.5, 18.75)
        assert (info.context_window, info.max_input_tokens) == (128_000, 128_000)
    # Conservative: no shipped model has a smaller window, and none but the premium reasoning
    # models ("-pro") charges more for input, output or cache writes.
    default = TABLE.lookup(None)
    for prefix in shipped_prefixes():
        info = TABLE.lookup(prefix)
        if not prefix.endswith("-pro"):
            assert info.input <= default.input and info.output <= default.output
            assert info.cache_write <= default.cache_write
        assert info.max_input_tokens >= default.max_input_tokens


def test_providers_without_a_one_hour_ttl_keep_it_null():
    assert TABLE.lookup("gpt-5").cache_write_hour is None
    assert TABLE.lookup("claude-sonnet-4-5").cache_write_hour == 6.0


def test_overrides_change_single_fields_of_a_shipped_prefix():
    table = PriceTable({"claude-sonnet-4-5": ModelConfig(cache_read=0.25, context_window=1_000_000)})
    info = table.lookup("claude-sonnet-4-5-20250929")
    assert (info.cache_read, info.context_window, info.input) == (0.25, 1_000_000, 3.0)
    assert table.lookup("claude-sonnet-4-20250514").cache_read == 0.3, "other entries unchanged"


def test_a_new_prefix_inherits_from_the_longest_shipped_prefix():
    table = PriceTable({"Claude-Sonnet-4-5-Custom": ModelConfig(output=20.0)})
    info = table.lookup("claude-sonnet-4-5-custom-1")
    assert info.prefix == "claude-sonnet-4-5-custom"
    assert (info.output, info.input, info.cache_write_hour) == (20.0, 3.0, 6.0)
    local = PriceTable({"qwen3": ModelConfig(input=0, output=0, cache_read=0, cache_write=0)}).lookup(
        "qwen3:32b"
    )
    assert (local.input, local.cache_read, local.context_window) == (0.0, 0.0, 128_000)


def test_the_empty_prefix_overrides_the_default():
    table = PriceTable({"": ModelConfig(context_window=32_768, max_input_tokens=32_000)})
    assert (table.lookup("mystery").context_window, table.lookup("mystery").max_input_tokens) == (
        32_768,
        32_000,
    )
    assert table.lookup("gpt-5").max_input_tokens == 272_000


def test_overrides_come_from_lore_json(tmp_path):
    path = tmp_path / ".lore.json"
    path.write_text(
        json.dumps({"models": {"my-model": {"input": 1, "cacheRead": 0.1, "maxInputTokens": 50000}}})
    )
    config = load_config(env={"LORE_CONFIG": str(path)})
    info = PriceTable.from_config(config).lookup("my-model-v2")
    assert (info.input, info.cache_read, info.max_input_tokens) == (1.0, 0.1, 50_000)


@pytest.mark.parametrize(
    ("models", "fragment"),
    [
        ({"x": {"cacheRed": 1}}, "models.x.cacheRed: unknown key"),
        ({"x": {"input": "3"}}, "models.x.input"),
        ({"x": {"contextWindow": 1.5}}, "models.x.contextWindow"),
        ({"gpt-4.1": {"output": True}}, "models.gpt-4.1.output"),
        ({"x": 3}, "models.x"),
        ([], "models: expected an object"),
    ],
)
def test_model_overrides_are_strict(tmp_path, models, fragment):
    path = tmp_path / ".lore.json"
    path.write_text(json.dumps({"models": models}))
    with pytest.raises(ConfigError) as info:
        load_config(env={"LORE_CONFIG": str(path)})
    assert fragment in str(info.value)


def test_shipped_data_is_validated_strictly():
    with pytest.raises(ConfigError, match="cacheRed: unknown key"):
        pricing._partial_from_json({"cacheRed": 1}, "models.json: models.x")


def test_cost_of_a_response():
    sonnet = TABLE.lookup("claude-sonnet-4-5")
    usage = Usage(input_tokens=1_000, output_tokens=500, cache_read_tokens=100_000, cache_write_tokens=2_000)
    assert sonnet.cost(usage) == pytest.approx((1_000 * 3 + 500 * 15 + 100_000 * 0.3 + 2_000 * 3.75) / 1e6)
    # Half the writes with the 1-hour TTL.
    assert sonnet.cost(usage, cache_write_hour_tokens=1_000) == pytest.approx(
        (1_000 * 3 + 500 * 15 + 100_000 * 0.3 + 1_000 * 3.75 + 1_000 * 6) / 1e6
    )
    # More 1-hour tokens than writes cannot be billed.
    assert sonnet.cost(usage, cache_write_hour_tokens=10**9) == sonnet.cost(
        usage, cache_write_hour_tokens=2_000
    )
    gpt = TABLE.lookup("gpt-5")
    assert gpt.cost(Usage(input_tokens=1_000_000, cache_read_tokens=1_000_000)) == pytest.approx(1.25 + 0.125)
    assert gpt.cost(Usage(cache_write_tokens=1000), cache_write_hour_tokens=1000) == pytest.approx(1.25e-3)
    assert TABLE.lookup("claude-opus-4-5").cost(Usage()) == 0


def test_model_info_is_immutable_and_per_token_prices_are_per_token():
    info = TABLE.lookup("claude-sonnet-4-5")
    assert info.cache_read_per_token == pytest.approx(0.3e-6)
    assert info.cache_write_per_token == pytest.approx(3.75e-6)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        info.input = 0  # type: ignore[misc]
    assert isinstance(info, ModelInfo)
