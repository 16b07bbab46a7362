"""The cost rules of MISSION section 6: layer-0 cap, bust vs continue, busts, budget, throttle."""

from __future__ import annotations

import datetime as dt
import json
import math
import tracemalloc

import pytest

from lore_core.config import BudgetConfig, ConfigError, ModelConfig, load_config
from lore_core.context import economics as ec
from lore_core.context.economics import (
    BudgetPressure,
    CacheState,
    CostTracker,
    Layer0Cap,
    Throttle,
    bust_threshold,
    compression_pays,
    decide_compression,
    is_cache_bust,
    layer0_cap,
    throttle_delay,
)
from lore_core.context.pricing import PriceTable
from lore_core.model import Usage

TABLE = PriceTable(
    {
        # MISSION's example prices Sonnet's prompt at $3/Mtok: 33K, so the 40K floor wins.
        "example-3-dollar-input": ModelConfig(input=3.0, cache_read=0.30, cache_write=3.75),
        "example-30-cent-input": ModelConfig(input=0.30, cache_read=0.03),
        "free-local": ModelConfig(input=0, output=0, cache_read=0, cache_write=0),
    }
)
SONNET = TABLE.lookup("claude-sonnet-4-5-20250929")
DEFAULT = BudgetConfig()


def cap(model: str, budget: BudgetConfig = DEFAULT, **kwargs) -> Layer0Cap:
    kwargs.setdefault("calibrated", True)
    return layer0_cap(TABLE.lookup(model), budget, **kwargs)


# ---------------------------------------------------------------------------------------------
# Layer-0 cap
# ---------------------------------------------------------------------------------------------


def test_the_default_target_is_ten_cents_per_turn():
    assert DEFAULT.target_cache_read_cost_per_turn == 0.10
    assert DEFAULT.max_layer0_tokens is None


def test_the_sonnet_example_gives_33k_so_the_40k_floor_wins():
    assert cap("example-3-dollar-input") == Layer0Cap(40_000, "floor")
    # The shipped table's Sonnet: $3/Mtok input (its cache reads are $0.30).
    assert (SONNET.input, SONNET.cache_read) == (3.0, 0.30)
    assert layer0_cap(SONNET, DEFAULT, calibrated=True) == Layer0Cap(40_000, "floor")


def test_a_thirty_cent_model_gives_333k():
    assert cap("example-30-cent-input") == Layer0Cap(333_333, "cost")


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        ("claude-opus-4-1", 40_000),  # $15 input: 6,666, floored
        ("claude-opus-4-5", 40_000),  # $5: 20,000, floored
        ("gpt-4.1", 50_000),  # $2
        ("gpt-5", 80_000),  # $1.25
        ("claude-haiku-4-5", 100_000),  # $1
        ("gpt-5-mini", 400_000),  # $0.25: more than its 272K window, never binds
    ],
)
def test_the_cap_follows_the_input_price(model, tokens):
    assert cap(model).tokens == tokens


def test_the_floor_boundary():
    just_above = PriceTable({"m": ModelConfig(input=2.4)}).lookup("m")  # 41,666 tokens
    just_below = PriceTable({"m": ModelConfig(input=2.6)}).lookup("m")  # 38,461 tokens
    assert layer0_cap(just_above, DEFAULT, calibrated=True) == Layer0Cap(41_666, "cost")
    assert layer0_cap(just_below, DEFAULT, calibrated=True) == Layer0Cap(40_000, "floor")


def test_the_target_is_configurable():
    assert cap("claude-sonnet-4-5", BudgetConfig(target_cache_read_cost_per_turn=0.30)).tokens == 100_000
    assert cap("claude-sonnet-4-5", BudgetConfig(target_cache_read_cost_per_turn=0.0)).tokens == 40_000


def test_an_uncalibrated_first_turn_multiplies_the_cap_by_0_7():
    assert cap("claude-sonnet-4-5", calibrated=False) == Layer0Cap(28_000, "floor", uncalibrated=True)
    assert cap("example-30-cent-input", calibrated=False) == Layer0Cap(233_333, "cost", uncalibrated=True)


def test_max_layer0_tokens_pins_the_cap_and_zero_disables_it():
    pinned = BudgetConfig(max_layer0_tokens=50_000)
    for kwargs in (
        {"calibrated": True},
        {"calibrated": False},
        {"calibrated": True, "zero_cache_write_turns": 9},
    ):
        assert cap("claude-sonnet-4-5", pinned, **kwargs) == Layer0Cap(50_000, "pinned")
    assert cap("claude-sonnet-4-5", BudgetConfig(max_layer0_tokens=0)) == Layer0Cap(None, "disabled")


def test_three_turns_without_cache_writes_make_the_cap_65_percent_of_max_input():
    assert cap("claude-sonnet-4-5", zero_cache_write_turns=2) == Layer0Cap(40_000, "floor")
    assert cap("claude-sonnet-4-5", zero_cache_write_turns=3) == Layer0Cap(130_000, "no-cache-writes")
    assert cap("gpt-5", zero_cache_write_turns=7) == Layer0Cap(176_800, "no-cache-writes")


def test_a_free_model_has_no_cost_cap():
    assert cap("free-local") == Layer0Cap(None, "free-input")


def test_budget_pressure_lowers_the_cap():
    over = BudgetPressure(budget=10.0, spent=8.0, projected=20.0)
    assert over.over_budget and over.pressure == 0.8
    # cap x (1 - 0.5 x 0.8): 80K -> 48K for gpt-5 ...
    assert cap("gpt-5", pressure=over).tokens == 48_000
    under = BudgetPressure(budget=10.0, spent=8.0, projected=9.5)
    assert cap("gpt-5", pressure=under).tokens == 80_000
    # ... and below the floor too: a budget running out makes small prompts worth compressing.
    assert cap("claude-sonnet-4-5", pressure=over) == Layer0Cap(24_000, "floor")


def test_budget_section_from_lore_json_and_environment(tmp_path):
    path = tmp_path / ".lore.json"
    path.write_text(json.dumps({"budget": {"targetCacheReadCostPerTurn": 0.2, "maxLayer0Tokens": None}}))
    config = load_config(env={"LORE_CONFIG": str(path), "LORE_DAILY_BUDGET": "25"})
    assert config.budget == BudgetConfig(target_cache_read_cost_per_turn=0.2, daily_budget_usd=25.0)
    path.write_text(json.dumps({"budget": {"maxLayerZeroTokens": 1}}))
    with pytest.raises(ConfigError, match=r"budget\.maxLayerZeroTokens: unknown key"):
        load_config(env={"LORE_CONFIG": str(path)})
    with pytest.raises(ConfigError, match="LORE_DAILY_BUDGET"):
        load_config(env={"LORE_CONFIG": str(path), "LORE_DAILY_BUDGET": "lots"})


# ---------------------------------------------------------------------------------------------
# Bust vs continue
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "threshold"),
    [(0, 3.0), (199_999, 3.0), (200_000, 5.0), (499_999, 5.0), (500_000, 8.0), (2_000_000, 8.0)],
)
def test_the_threshold_steps_at_200k_and_500k(size, threshold):
    assert bust_threshold(size) == threshold


@pytest.mark.parametrize(
    ("current", "pays", "does_not_pay"),
    [
        # Sonnet: write $3.75, read $0.30. Compress iff compressed x 3.75 < current x 0.30 x t.
        (150_000, 35_000, 37_000),  # t = 3: break-even at 36,000
        (300_000, 115_000, 125_000),  # t = 5: break-even at 120,000
        (600_000, 380_000, 390_000),  # t = 8: break-even at 384,000
    ],
)
def test_compression_pays_on_one_side_of_the_threshold_only(current, pays, does_not_pay):
    assert compression_pays(current, pays, SONNET)
    assert not compression_pays(current, does_not_pay, SONNET)


def test_the_rule_tightens_as_the_window_fills():
    # The same 30% compression does not pay at 150K but does at 300K and 600K.
    assert not compression_pays(150_000, 45_000, SONNET)
    assert compression_pays(300_000, 90_000, SONNET)
    assert compression_pays(600_000, 180_000, SONNET)


def test_the_part_that_stays_cached_is_read_not_written():
    # 60K tokens, 22K of them system prompt and tools that a re-composition leaves as they
    # were: compressing to 30K writes 8K and reads 22K again.
    assert not compression_pays(60_000, 30_000, SONNET)  # 30K x 3.75 > 60K x 0.30 x 3
    assert compression_pays(60_000, 30_000, SONNET, kept_cached_tokens=22_000)
    # 8K x 3.75 + 22K x 0.30 = 36.6K < 54K; the break-even is the rule's own.
    assert not compression_pays(40_000, 30_000, SONNET, kept_cached_tokens=22_000)  # 36.6K > 36K
    # What is kept can never exceed the compressed prompt.
    assert compression_pays(60_000, 30_000, SONNET, kept_cached_tokens=90_000)


def test_decide_compression():
    past = 400_000
    c = Layer0Cap(333_333, "cost")
    assert decide_compression(300_000, 10_000, SONNET, c, CacheState()) == ec.CompressionDecision(
        False, "under-cap"
    )
    assert decide_compression(333_333, 10_000, SONNET, c, CacheState()).reason == "under-cap"
    assert (
        decide_compression(past, 10_000, SONNET, Layer0Cap(None, "disabled"), CacheState()).reason == "no-cap"
    )
    assert decide_compression(past, 100_000, SONNET, c, CacheState()) == ec.CompressionDecision(
        True, "pays", 5.0
    )
    assert decide_compression(past, 200_000, SONNET, c, CacheState()) == ec.CompressionDecision(
        False, "does-not-pay", 5.0
    )
    assert decide_compression(past, 100_000, SONNET, c, CacheState(holding=True)).reason == "holding"
    # With 150K of the 200K compressed prompt unchanged it pays after all.
    assert decide_compression(past, 200_000, SONNET, c, CacheState(), 150_000).compress


# ---------------------------------------------------------------------------------------------
# Cache busts and the zero-write streak
# ---------------------------------------------------------------------------------------------


def anthropic(read: int, write: int, uncached: int = 50) -> Usage:
    return Usage(input_tokens=uncached, cache_read_tokens=read, cache_write_tokens=write, output_tokens=100)


def test_is_cache_bust():
    assert is_cache_bust(100_000, anthropic(read=40_000, write=60_000))
    assert not is_cache_bust(100_000, anthropic(read=60_000, write=5_000))
    assert not is_cache_bust(1_000, anthropic(read=0, write=2_000)), "nothing worth caching before"
    assert not is_cache_bust(0, anthropic(read=0, write=50_000))


def test_two_consecutive_busts_stop_compressing_until_released():
    state = CacheState()
    assert not state.observe(anthropic(read=0, write=100_000))  # first turn: nothing cached before
    assert not state.observe(anthropic(read=100_000, write=2_000))
    assert state.observe(anthropic(read=5_000, write=40_000))  # compressed: bust 1
    assert not state.holding
    assert state.observe(anthropic(read=5_000, write=40_000))  # compressed again: bust 2
    assert state.holding and state.consecutive_busts == 2
    # Holding survives cache hits: the prompt keeps growing uncompressed.
    assert not state.observe(anthropic(read=45_000, write=3_000))
    assert state.holding
    c = Layer0Cap(40_000, "floor")
    assert decide_compression(48_000, 5_000, SONNET, c, state).reason == "holding"
    # The prompt stopped fitting and had to be compressed: the hold ends.
    state.release()
    assert not state.holding and state.consecutive_busts == 0
    assert decide_compression(48_000, 5_000, SONNET, c, state).compress


def test_a_single_bust_followed_by_a_hit_does_not_hold():
    state = CacheState()
    state.observe(anthropic(read=0, write=100_000))
    state.observe(anthropic(read=5_000, write=40_000))
    state.observe(anthropic(read=45_000, write=1_000))
    state.observe(anthropic(read=5_000, write=40_000))
    assert state.consecutive_busts == 1 and not state.holding


def test_zero_cache_write_streak_feeds_the_65_percent_rule():
    state = CacheState()
    openai = Usage(input_tokens=2_000, cache_read_tokens=50_000)
    for _ in range(3):
        state.observe(openai)
    assert state.zero_write_turns == 3
    gpt5 = TABLE.lookup("gpt-5")
    assert layer0_cap(
        gpt5, DEFAULT, calibrated=True, zero_cache_write_turns=state.zero_write_turns
    ).reason == ("no-cache-writes")
    state.observe(Usage())  # a response without usage says nothing
    assert state.zero_write_turns == 3
    state.observe(anthropic(read=50_000, write=10))
    assert state.zero_write_turns == 0


# ---------------------------------------------------------------------------------------------
# Throttle
# ---------------------------------------------------------------------------------------------


def test_the_throttle_formula():
    expected = 30 * 0.5**2 * math.tanh(1.5 / 3)
    got = throttle_delay(0.5, 1.5, max_delay_seconds=30, ttl_seconds=300, idle_seconds=None)
    assert got == pytest.approx(expected)
    assert throttle_delay(
        1.0, 1e9, max_delay_seconds=30, ttl_seconds=300, idle_seconds=None
    ) == pytest.approx(30)
    assert throttle_delay(
        7.0, 3.0, max_delay_seconds=30, ttl_seconds=300, idle_seconds=None
    ) == pytest.approx(30 * math.tanh(1)), "pressure is at most 1"


@pytest.mark.parametrize(
    ("pressure", "overshoot", "max_delay"),
    [(0.0, 2.0, 30.0), (0.9, 0.0, 30.0), (0.9, 2.0, 0.0), (0.9, -1.0, 30.0)],
)
def test_no_delay_without_pressure_overshoot_or_max_delay(pressure, overshoot, max_delay):
    assert (
        throttle_delay(pressure, overshoot, max_delay_seconds=max_delay, ttl_seconds=300, idle_seconds=0) == 0
    )


def test_the_delay_grows_with_pressure_and_overshoot():
    delays = [
        throttle_delay(p, o, max_delay_seconds=60, ttl_seconds=300, idle_seconds=None)
        for p, o in [(0.2, 1.0), (0.5, 1.0), (0.5, 2.0), (1.0, 2.0)]
    ]
    assert delays == sorted(delays) and len(set(delays)) == 4


def test_the_delay_keeps_the_request_inside_the_cache_ttl():
    full = 60 * math.tanh(1)
    kw = {"max_delay_seconds": 60, "ttl_seconds": 300}
    assert throttle_delay(1.0, 3.0, idle_seconds=10, **kw) == pytest.approx(full)
    # 280 s since the last request: 300 - 280 - 15 s margin = 5 s left.
    assert throttle_delay(1.0, 3.0, idle_seconds=280, **kw) == pytest.approx(5.0)
    assert throttle_delay(1.0, 3.0, idle_seconds=290, **kw) == 0.0
    # Already expired: nothing to keep warm, the full delay applies.
    assert throttle_delay(1.0, 3.0, idle_seconds=301, **kw) == pytest.approx(full)


def test_throttle_counters():
    throttle = Throttle(max_delay_seconds=30)
    over = BudgetPressure(budget=10.0, spent=10.0, projected=40.0)  # pressure 1, overshoot 3
    first = throttle.delay(over, ttl_seconds=300, idle_seconds=None)
    assert first == pytest.approx(30 * math.tanh(1))
    assert (
        throttle.delay(BudgetPressure(budget=10.0, spent=1.0, projected=5.0), ttl_seconds=300, idle_seconds=0)
        == 0
    )
    capped = throttle.delay(over, ttl_seconds=300, idle_seconds=275)
    assert capped == pytest.approx(10.0)
    assert throttle.counters() == {
        "throttle.events": 2,
        "throttle.totalDelayMs": round(first * 1000) + 10_000,
    }


# ---------------------------------------------------------------------------------------------
# Cost tracking
# ---------------------------------------------------------------------------------------------


def at(hour: int, minute: int = 0, day: int = 30) -> float:
    return dt.datetime(2026, 11, day, hour, minute, tzinfo=dt.UTC).timestamp()


def one_dollar_on_sonnet() -> Usage:
    return Usage(input_tokens=200_000, output_tokens=26_666)  # $0.60 + $0.39999 ~ $1


def tracker(budget: float = 0.0, now: float = at(12)) -> CostTracker:
    return CostTracker(TABLE, budget, clock=lambda: now, tz=dt.UTC)


def test_costs_add_up_per_session_and_per_day():
    t = tracker()
    sonnet, opus = "claude-sonnet-4-5", "claude-opus-4-1"
    u = Usage(input_tokens=1_000, output_tokens=1_000, cache_read_tokens=100_000, cache_write_tokens=10_000)
    c1 = t.record("s1", sonnet, u, at=at(9))
    c2 = t.record("s2", opus, u, at=at(10))
    c3 = t.record("s1", sonnet, u, at=at(11, day=29))
    assert c1 == pytest.approx(SONNET.cost(u)) and c2 == pytest.approx(TABLE.lookup(opus).cost(u))
    assert c2 == pytest.approx(5 * c1), "Opus 4.1 costs five times Sonnet"
    assert t.session_cost("s1") == pytest.approx(c1 + c3)
    assert t.session_cost("s2") == pytest.approx(c2)
    assert t.session_cost("nobody") == 0
    assert t.day_cost() == pytest.approx(c1 + c2)
    assert t.day_cost(at(23, day=29)) == pytest.approx(c3)


def test_one_hour_cache_writes_are_billed_at_their_price():
    t = tracker()
    u = Usage(cache_write_tokens=1_000_000)
    assert t.record(
        "s", "claude-sonnet-4-5", u, cache_write_hour_tokens=1_000_000, at=at(9)
    ) == pytest.approx(6.0)


def test_the_day_is_projected_at_the_recent_rate():
    t = tracker(budget=20.0)
    # $2 at 8:00 (outside the trailing hour at 10:00), $3 at 9:30, $3 at 9:50.
    for when, dollars in ((at(8), 2), (at(9, 30), 3), (at(9, 50), 3)):
        t.record("s", "example", Usage(input_tokens=dollars * 1_000_000 // 15), at=when)
    now = at(10)
    assert t.day_cost(now) == pytest.approx(8.0)
    assert t.rate_per_second(now) == pytest.approx(6.0 / 3600)
    # $6/h for the 4-hour horizon.
    assert t.projected_day_cost(now) == pytest.approx(8.0 + 24.0)
    p = t.pressure(now)
    assert (p.spent, p.pressure) == (pytest.approx(8.0), pytest.approx(0.4))
    assert p.overshoot == pytest.approx(32.0 / 20.0 - 1)


def test_recent_spend_takes_bounded_memory_at_any_request_rate():
    # A busy gateway records hundreds of responses a second and nothing need ask for the
    # rate (no budget): what the trailing window keeps must not grow with the responses.
    t = tracker()
    start = at(9)
    for second in range(3600):
        t.record("s", "example", Usage(input_tokens=1_000), at=start + second)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(20_000):
            t.record("s", "example", Usage(input_tokens=1_000), at=start + 3600 + i / 100)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 50_000  # one entry a response held ~2 MB here
    # The trailing hour holds the last 20,000 responses and ~3,400 of the first 3,600, at
    # $0.015 each (the window's oldest minute counts whole).
    rate = t.rate_per_second(start + 3800)
    assert 23_300 * 0.015 / 3600 <= rate <= 23_460 * 0.015 / 3600


def test_the_projection_stops_at_midnight():
    t = tracker(budget=20.0)
    t.record("s", "example", Usage(input_tokens=1_000_000), at=at(23, 15))  # $15
    assert t.projected_day_cost(at(23, 30)) == pytest.approx(15.0 + 15.0 / 3600 * 1800)


def test_no_budget_means_no_pressure():
    t = tracker(budget=0.0)
    t.record("s", "example", Usage(input_tokens=10_000_000), at=at(11))
    p = t.pressure(at(12))
    assert (p.pressure, p.overshoot, p.over_budget) == (0.0, 0.0, False)
    assert Throttle(30).delay(p, ttl_seconds=300, idle_seconds=None) == 0


def test_projected_overspend_throttles_and_compresses_earlier():
    t = tracker(budget=10.0)
    for minute in (0, 20, 40):
        t.record("s", "example", Usage(input_tokens=200_000), at=at(11, minute))  # $3 each
    p = t.pressure(at(11, 50))
    assert p.spent == pytest.approx(9.0) and p.over_budget
    # $9 in the last hour, projected 4 more hours: 9 + 36 = 45 against 10.
    assert p.overshoot == pytest.approx(3.5)
    delay = Throttle(30).delay(p, ttl_seconds=300, idle_seconds=None)
    assert delay == pytest.approx(30 * 0.9**2 * math.tanh(3.5 / 3))
    assert layer0_cap(SONNET, DEFAULT, calibrated=True, pressure=p).tokens < 40_000


def test_the_daily_budget_comes_from_the_environment(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "LORE_DAILY_BUDGET": "12.5"}
    config = load_config(env=env, cwd=tmp_path)
    assert CostTracker(TABLE, config.budget.daily_budget_usd).daily_budget_usd == 12.5
