"""The cost rules of the gradient context manager (docs/context.md), as small pure pieces.

The layer engine calls these on every turn:

- :func:`layer0_cap`: how large the raw conversation (layer 0) may grow before compressing is
  even considered;
- :func:`decide_compression`: past the cap, whether rewriting the prompt cache with a
  compressed prompt is cheaper than continuing to read the whole one ("bust vs continue"),
  and :class:`CacheState`, which stops compressing after repeated cache busts;
- :class:`CostTracker`, :func:`throttle_delay` and :class:`Throttle`: spend per session and
  per day from real usage, and the delay added when a daily budget is projected to overrun.

Nothing here does I/O or keeps time itself (clocks are parameters), so every rule is
testable at its boundaries.
"""

from __future__ import annotations

import collections
import datetime as dt
import math
import time
from collections.abc import Callable
from typing import Any

import attrs

from lore_core.config import BudgetConfig
from lore_core.context.pricing import ModelInfo, PriceTable
from lore_core.context.tokens import prompt_tokens
from lore_core.model import Usage

# ---------------------------------------------------------------------------------------------
# The layer-0 cap
# ---------------------------------------------------------------------------------------------

#: The cap never goes below this: smaller prompts are cheap whatever the price, and
#: compressing them loses more than it saves.
LAYER0_FLOOR_TOKENS = 40_000
#: On a session's first turn no usage has been reported yet, so the local estimate may be
#: low by the tokenizer difference; the cap leaves this much room for it.
UNCALIBRATED_CAP_FACTOR = 0.7
#: Turns in a row with zero cache writes after which caching is taken to be free or absent ...
NO_CACHE_WRITE_TURNS = 3
#: ... and the cap becomes this share of the model's max input (reads cost the full input
#: price every turn or nothing at all, so the cost target says nothing; keep headroom).
NO_CACHE_CAP_SHARE = 0.65
#: Under daily-budget pressure the cap shrinks by up to this share ("compress earlier"):
#: cap x (1 - share x pressure). It applies below the 40K floor too: the floor says small
#: prompts are not worth compressing for cost, and a budget running out says they are.
PRESSURE_CAP_RELIEF = 0.5


@attrs.frozen
class Layer0Cap:
    """The cap for one turn. ``tokens is None`` means no cap (layer 0 until it no longer
    fits); ``reason`` says which rule set it, for ``lore status`` and logs."""

    tokens: int | None
    #: "disabled", "pinned", "no-cache-writes", "free-input", "cost" or "floor".
    reason: str
    #: Whether the uncalibrated-first-turn factor was applied.
    uncalibrated: bool = False


def layer0_cap(
    model: ModelInfo,
    budget: BudgetConfig,
    *,
    calibrated: bool,
    zero_cache_write_turns: int = 0,
    pressure: BudgetPressure | None = None,
) -> Layer0Cap:
    """``maxLayer0Tokens = max(target / price_per_token, 40K)`` (docs/context.md).

    - ``target`` is ``budget.targetCacheReadCostPerTurn`` (default $0.10) and the price is
      the model's *input* price: what reading the prompt costs when the cache does not serve
      it. The design's worked example (docs/context.md) prices the read so
      ("Sonnet at $3/Mtok read gives 33K, so
      the 40K floor wins": $3 is Sonnet's input price, its cache reads cost $0.30), and so
      does the issue's ("the Sonnet example gives 40K, a $0.30/Mtok model gives 333K"). At
      the cache-read price the default would give Sonnet 333K, more than its 200K window: the
      cap would never bind, and ``benchmarks/context_cost.py`` shows Lore then costs more
      than a harness's own compaction. Priced at the input rate the target also bounds what
      a turn costs once its cache entry has expired (a 5-minute TTL) or been busted.
    - ``budget.maxLayer0Tokens`` pins the cap; ``0`` disables it.
    - On an uncalibrated first turn the cap is multiplied by 0.7.
    - When the upstream reported zero cache writes for 3+ turns in a row (free or absent
      caching), the cap is 65% of the model's max input instead.
    - A model whose input is free (a local model) has no cost cap.
    - Under budget pressure (spend projected past the daily budget) the cap shrinks by up to
      half, so compression starts earlier.

    The cap can exceed the model's window (a $0.30/Mtok model's 333K against 200K): then it
    never binds and only overflows compress.
    """
    pinned = budget.max_layer0_tokens
    if pinned is not None:
        return Layer0Cap(None, "disabled") if pinned <= 0 else Layer0Cap(pinned, "pinned")
    if zero_cache_write_turns >= NO_CACHE_WRITE_TURNS:
        return Layer0Cap(int(NO_CACHE_CAP_SHARE * model.max_input_tokens), "no-cache-writes")
    price = model.input_per_token
    if price <= 0:
        return Layer0Cap(None, "free-input")
    by_cost = max(budget.target_cache_read_cost_per_turn, 0.0) / price
    if by_cost >= LAYER0_FLOOR_TOKENS:
        tokens, reason = by_cost, "cost"
    else:
        tokens, reason = float(LAYER0_FLOOR_TOKENS), "floor"
    if pressure is not None and pressure.over_budget:
        tokens *= 1 - PRESSURE_CAP_RELIEF * pressure.pressure
    if not calibrated:
        return Layer0Cap(int(tokens * UNCALIBRATED_CAP_FACTOR), reason, uncalibrated=True)
    return Layer0Cap(int(tokens), reason)


# ---------------------------------------------------------------------------------------------
# Bust vs continue
# ---------------------------------------------------------------------------------------------

#: Threshold of the bust-vs-continue rule by prompt size, as (from tokens, threshold), largest
#: first. The threshold is how many turns of reading the current prompt one cache rewrite may
#: cost: compressing also makes every later turn cheaper, and past ~200K and ~500K tokens the
#: model's answers get worse, so the bar for compressing drops (the rule tightens) as the
#: window fills. With Anthropic's prices (write = 12.5 x read) a threshold of 3 compresses
#: when the compressed prompt is under 24% of the current one; 5: 40%; 8: 64%.
BUST_THRESHOLDS: tuple[tuple[int, float], ...] = ((500_000, 8.0), (200_000, 5.0), (0, 3.0))
#: Consecutive cache busts after which compressing stops ("keep growing") until the prompt
#: no longer fits.
MAX_CONSECUTIVE_BUSTS = 2
#: A turn is a cache bust when it read less than this share of what the previous turn had
#: cached (read + written) ...
BUST_READ_SHARE = 0.5
#: ... provided that was at least this much (providers do not cache shorter prefixes).
MIN_CACHEABLE_TOKENS = 1_024
#: A conversation idle this long has lost its prompt cache entry (Anthropic's default TTL is
#: 5 minutes; OpenAI keeps prefixes 5-10 minutes, at most an hour). Its next request is
#: written in full whatever is sent, so it is no bust of Lore's making, and compressing then
#: costs no cache rewrite (:func:`decide_compression`).
CACHE_TTL_SECONDS = 300.0
#: ... or this long when the client marks its prompt for Anthropic's 1-hour cache.
CACHE_TTL_HOUR_SECONDS = 3600.0


def cache_ttl(raw: Any) -> float:
    """How long a request's cached prompt lives: an hour when the client marked a block
    ``"ttl": "1h"`` (looked for where clients put their markers: the system prompt, the
    tools and the last messages), else :data:`CACHE_TTL_SECONDS`."""
    if not isinstance(raw, dict):
        return CACHE_TTL_SECONDS
    places: list[Any] = []
    for key in ("system", "tools"):
        if isinstance(raw.get(key), list):
            places += raw[key]
    messages = raw.get("messages")
    if isinstance(messages, list):
        for msg in messages[-4:]:
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list):
                places += content
    for block in places:
        marker = block.get("cache_control") if isinstance(block, dict) else None
        if isinstance(marker, dict) and marker.get("ttl") == "1h":
            return CACHE_TTL_HOUR_SECONDS
    return CACHE_TTL_SECONDS


def bust_threshold(current_tokens: int) -> float:
    """The threshold for a prompt of ``current_tokens`` (see :data:`BUST_THRESHOLDS`)."""
    for start, threshold in BUST_THRESHOLDS:
        if current_tokens >= start:
            return threshold
    return BUST_THRESHOLDS[-1][1]


def compression_pays(
    current_tokens: int, compressed_tokens: int, model: ModelInfo, kept_cached_tokens: int = 0
) -> bool:
    """``compressed_size x cache_write_price < current_size x cache_read_price x threshold``
    (docs/context.md): writing the compressed prompt once costs less than reading the current one
    ``threshold`` more times.

    ``kept_cached_tokens``: how much of the compressed prompt's start is byte-identical to
    the current one (system prompt, tool definitions, the messages before the conversation,
    an append-only distilled prefix kept as it was). The provider still reads that part from
    the cache; only the rest is written. Claude Code's system prompt and tools alone are
    ~20K tokens: counting them as a write would make compressing look 12.5x dearer than it is
    for that part and keep a session at layer 0 far past the cap."""
    kept = min(max(kept_cached_tokens, 0), compressed_tokens)
    write = (compressed_tokens - kept) * model.cache_write_per_token + kept * model.cache_read_per_token
    read = current_tokens * model.cache_read_per_token * bust_threshold(current_tokens)
    return write < read


def is_cache_bust(previous_cached_tokens: int, usage: Usage) -> bool:
    """Whether a response shows the prompt cache was lost: the previous turn left at least
    :data:`MIN_CACHEABLE_TOKENS` cached and this one read less than half of them back."""
    return (
        previous_cached_tokens >= MIN_CACHEABLE_TOKENS
        and usage.cache_read_tokens < BUST_READ_SHARE * previous_cached_tokens
    )


@attrs.define
class CacheState:
    """What one session's responses say about the prompt cache.

    - ``zero_write_turns``: responses in a row that reported no cache writes (feeds the 65%
      rule of :func:`layer0_cap`);
    - ``consecutive_busts`` and ``holding``: after :data:`MAX_CONSECUTIVE_BUSTS` busts in a
      row compressing for cost stops (docs/context.md: "stop compressing and keep growing"). The
      hold lasts until :meth:`release`, which the engine calls when it has to compress
      because the prompt no longer fits: a hold that ended at the next cache hit would let
      compress-bust-bust-hit repeat forever.
    """

    zero_write_turns: int = 0
    consecutive_busts: int = 0
    holding: bool = False
    # Tokens the previous response read from or wrote to the cache.
    last_cached_tokens: int = 0

    def observe(self, usage: Usage, expired: bool = False) -> bool:
        """Record one response's usage; returns whether it was a cache bust. Responses that
        report no usage at all (errors, cut streams) are ignored. ``expired``: the request
        came after the cache's TTL (:data:`CACHE_TTL_SECONDS`), so reading nothing back is
        the entry's expiry, not a bust: it neither counts towards holding nor continues a
        run of busts (a session with a few pauses would otherwise hold after two of them
        and grow uncompressed to the window)."""
        if prompt_tokens(usage) <= 0:
            return False
        self.zero_write_turns = self.zero_write_turns + 1 if usage.cache_write_tokens == 0 else 0
        busted = not expired and is_cache_bust(self.last_cached_tokens, usage)
        self.consecutive_busts = self.consecutive_busts + 1 if busted else 0
        if self.consecutive_busts >= MAX_CONSECUTIVE_BUSTS:
            self.holding = True
        self.last_cached_tokens = usage.cache_read_tokens + usage.cache_write_tokens
        return busted

    def release(self) -> None:
        """End a hold: the prompt had to be compressed to fit, the cache starts afresh."""
        self.holding = False
        self.consecutive_busts = 0


@attrs.frozen
class CompressionDecision:
    compress: bool
    #: "no-cap", "under-cap", "holding", "pays", "does-not-pay", "expired" or
    #: "expired-no-smaller".
    reason: str
    threshold: float = 0.0


def decide_compression(
    current_tokens: int,
    compressed_tokens: int,
    model: ModelInfo,
    cap: Layer0Cap,
    cache: CacheState,
    kept_cached_tokens: int = 0,
    expired: bool = False,
) -> CompressionDecision:
    """Whether to leave layer 0 for cost reasons while the raw prompt still fits (docs/context.md):
    only past the cap, never while holding after repeated busts, and only when
    :func:`compression_pays`. Compressing because the prompt does not fit is not decided
    here: it is not optional.

    ``expired``: the cache entry has expired (the conversation was idle past
    :data:`CACHE_TTL_SECONDS`), so this turn writes its whole prompt whatever it is: bust vs
    continue compares a write with a write, and any smaller prompt pays, holding or not."""
    if cap.tokens is None:
        return CompressionDecision(False, "no-cap")
    if current_tokens <= cap.tokens:
        return CompressionDecision(False, "under-cap")
    threshold = bust_threshold(current_tokens)
    if expired:
        if compressed_tokens < current_tokens:
            return CompressionDecision(True, "expired", threshold)
        return CompressionDecision(False, "expired-no-smaller", threshold)
    if cache.holding:
        return CompressionDecision(False, "holding", threshold)
    if compression_pays(current_tokens, compressed_tokens, model, kept_cached_tokens):
        return CompressionDecision(True, "pays", threshold)
    return CompressionDecision(False, "does-not-pay", threshold)


# ---------------------------------------------------------------------------------------------
# Daily budget and throttling
# ---------------------------------------------------------------------------------------------

#: Spend in this trailing window sets the rate that projects the day's spend.
RATE_WINDOW_SECONDS = 3600.0
#: Recent spend is summed per bucket of this many seconds: memory stays at a window's worth of
#: buckets at any request rate (one entry per response was ~110 bytes each, 80 MB an hour at
#: 200 responses/s), and the window's oldest bucket counts whole (within 1/60 of the window).
RATE_BUCKET_SECONDS = 60.0
#: Sessions whose total the tracker keeps in memory (most recently used); the rest are in
#: the store and read back when their session returns.
MAX_TRACKED_SESSIONS = 10_000
#: The projection looks this far ahead at most (not to midnight: a burst at 9:00 says little
#: about 23:00).
PROJECTION_HORIZON_SECONDS = 4 * 3600.0
#: A delayed request must reach the upstream this long before its cache entry expires
#: (request upload and queueing).
TTL_MARGIN_SECONDS = 15.0


@attrs.frozen
class BudgetPressure:
    """Today's spend against the daily budget.

    ``pressure`` is the share of the budget already spent (0..1); ``overshoot`` how far the
    projected spend exceeds the budget, in budgets (projected $30 against $20 is 0.5).
    Without a budget both are 0.
    """

    budget: float
    spent: float
    projected: float

    @property
    def pressure(self) -> float:
        return min(max(self.spent / self.budget, 0.0), 1.0) if self.budget > 0 else 0.0

    @property
    def overshoot(self) -> float:
        return max(self.projected / self.budget - 1.0, 0.0) if self.budget > 0 else 0.0

    @property
    def over_budget(self) -> bool:
        return self.overshoot > 0


def throttle_delay(
    pressure: float,
    overshoot: float,
    *,
    max_delay_seconds: float,
    ttl_seconds: float,
    idle_seconds: float | None,
) -> float:
    """``delay = MAX_DELAY x pressure^2 x tanh(overshoot / 3)`` seconds (docs/context.md), capped
    so the request still lands inside the cache TTL.

    ``idle_seconds`` is the time since the session's previous upstream request, which
    refreshed its cache entry; the delay never takes it past ``ttl_seconds`` minus
    :data:`TTL_MARGIN_SECONDS`. When the entry has already expired (or there was no previous
    request, ``None``) there is nothing to keep warm and the delay is not capped.
    """
    if max_delay_seconds <= 0 or pressure <= 0 or overshoot <= 0:
        return 0.0
    pressure = min(pressure, 1.0)
    delay = max_delay_seconds * pressure**2 * math.tanh(overshoot / 3)
    if idle_seconds is not None and idle_seconds < ttl_seconds:
        delay = min(delay, max(ttl_seconds - idle_seconds - TTL_MARGIN_SECONDS, 0.0))
    return delay


@attrs.define
class Throttle:
    """Applies :func:`throttle_delay` and keeps the counters shown to the user."""

    max_delay_seconds: float
    events: int = 0
    total_delay_ms: int = 0

    def delay(self, pressure: BudgetPressure, *, ttl_seconds: float, idle_seconds: float | None) -> float:
        """Seconds to wait before the next upstream call (0 when not over budget)."""
        seconds = throttle_delay(
            pressure.pressure,
            pressure.overshoot,
            max_delay_seconds=self.max_delay_seconds,
            ttl_seconds=ttl_seconds,
            idle_seconds=idle_seconds,
        )
        if seconds > 0:
            self.events += 1
            self.total_delay_ms += round(seconds * 1000)
        return seconds

    def counters(self) -> dict[str, int]:
        return {"throttle.events": self.events, "throttle.totalDelayMs": self.total_delay_ms}


class CostTracker:
    """Spend per session and per local day, from the usage upstreams report and the price
    table, with an optional daily budget (``budget.dailyBudgetUsd`` / ``LORE_DAILY_BUDGET``).

    The day's spend is projected forward at the rate of the last :data:`RATE_WINDOW_SECONDS`
    for at most :data:`PROJECTION_HORIZON_SECONDS` (never past midnight). ``clock`` and
    ``tz`` (``None``: the machine's local time zone) are parameters for testing.
    """

    def __init__(
        self,
        prices: PriceTable,
        daily_budget_usd: float = 0.0,
        *,
        clock: Callable[[], float] = time.time,
        tz: dt.tzinfo | None = None,
    ) -> None:
        self.prices = prices
        self.daily_budget_usd = max(daily_budget_usd, 0.0)
        self._clock = clock
        self._tz = tz
        # Each session's total, most recently used last, at most MAX_TRACKED_SESSIONS; and
        # which of them already hold the spend an earlier run saved (SpendBook loads it once).
        self._sessions: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._saved_loaded: set[str] = set()
        self._days: dict[dt.date, float] = collections.defaultdict(float)
        # Spend per RATE_BUCKET_SECONDS bucket: [bucket start, USD], oldest first.
        self._recent: collections.deque[list[float]] = collections.deque()
        # Spent since the last save to the store (see lore_core.context.spend).
        self._unsaved_sessions: dict[str, float] = collections.defaultdict(float)
        self._unsaved_days: dict[dt.date, float] = collections.defaultdict(float)

    def _day(self, at: float) -> dt.date:
        return dt.datetime.fromtimestamp(at, self._tz).date()

    def today(self) -> dt.date:
        return self._day(self._clock())

    def record(
        self,
        session_id: str,
        model: str | None,
        usage: Usage,
        *,
        cache_write_hour_tokens: int = 0,
        at: float | None = None,
    ) -> float:
        """Add one response's cost; returns it in USD."""
        at = self._clock() if at is None else at
        cost = self.prices.lookup(model).cost(usage, cache_write_hour_tokens)
        self._add_to_session(session_id, cost)
        self._days[self._day(at)] += cost
        self._unsaved_sessions[session_id] += cost
        self._unsaved_days[self._day(at)] += cost
        self._add_recent(at, cost)
        return cost

    def _add_recent(self, at: float, cost: float) -> None:
        bucket = at - at % RATE_BUCKET_SECONDS
        if self._recent and bucket <= self._recent[-1][0]:
            self._recent[-1][1] += cost  # this bucket (or a response recorded late)
        else:
            self._recent.append([bucket, cost])
            self._drop_old_buckets(at)

    def _drop_old_buckets(self, now: float) -> None:
        while self._recent and self._recent[0][0] + RATE_BUCKET_SECONDS <= now - RATE_WINDOW_SECONDS:
            self._recent.popleft()

    # -- persistence (the store side is lore_core.context.spend.SpendBook) --------------------

    def add_saved(self, *, usd: float, day: dt.date | None = None, session_id: str | None = None) -> None:
        """Add spend saved by an earlier run (to the day's and/or the session's total)."""
        if day is not None:
            self._days[day] += usd
        if session_id is not None:
            self._add_to_session(session_id, usd)
            self._saved_loaded.add(session_id)

    def holds_saved(self, session_id: str) -> bool:
        """Whether the session's total includes what an earlier run saved (add_saved)."""
        return session_id in self._saved_loaded

    def _add_to_session(self, session_id: str, usd: float) -> None:
        self._sessions[session_id] = self._sessions.pop(session_id, 0.0) + usd
        if len(self._sessions) > MAX_TRACKED_SESSIONS:
            # The least recently used: its saved total is read again if it comes back.
            gone, _ = self._sessions.popitem(last=False)
            self._saved_loaded.discard(gone)

    def take_unsaved(self) -> tuple[dict[dt.date, float], dict[str, float]]:
        """The spend recorded since the last call, per day and per session; cleared."""
        days, sessions = dict(self._unsaved_days), dict(self._unsaved_sessions)
        self._unsaved_days.clear()
        self._unsaved_sessions.clear()
        return days, sessions

    def unsaved_day(self, day: dt.date, usd: float) -> None:
        """Give back a day's increment that could not be saved (saved next time)."""
        self._unsaved_days[day] += usd

    def unsaved_session(self, session_id: str, usd: float) -> None:
        self._unsaved_sessions[session_id] += usd

    def session_cost(self, session_id: str) -> float:
        return self._sessions.get(session_id, 0.0)

    def day_cost(self, at: float | None = None) -> float:
        """Spend of the local day containing ``at`` (default: now)."""
        return self._days.get(self._day(self._clock() if at is None else at), 0.0)

    def rate_per_second(self, now: float | None = None) -> float:
        """USD per second over the trailing window."""
        now = self._clock() if now is None else now
        self._drop_old_buckets(now)
        return sum(cost for start, cost in self._recent if start <= now) / RATE_WINDOW_SECONDS

    def projected_day_cost(self, now: float | None = None) -> float:
        now = self._clock() if now is None else now
        day = self._day(now)
        midnight = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), self._tz).timestamp()
        horizon = min(max(midnight - now, 0.0), PROJECTION_HORIZON_SECONDS)
        return self.day_cost(now) + self.rate_per_second(now) * horizon

    def pressure(self, now: float | None = None) -> BudgetPressure:
        now = self._clock() if now is None else now
        return BudgetPressure(self.daily_budget_usd, self.day_cost(now), self.projected_day_cost(now))
