"""Splitting undistilled messages into segments the observer distils one call at a time.

A segment ends where the conversation paused for long (``gap_seconds``: the next message
starts a new episode of work) or where adding the next message would push the rendered input
past ``max_tokens``. Sizes are measured on the *rendered* message (long tool outputs already
annotated), because that is what the observer reads.

The first distillation of a session waits for a minimum (``first_min_messages`` and
``first_min_tokens``): distilling a two-line exchange costs a worker call and says nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs

from lore_core.curation import DistillInput
from lore_core.distill.render import DEFAULT_TOOL_OUTPUT_MAX_CHARS, render_message, tool_names_of

TokenEstimate = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    """About four characters per token: the usual rule of thumb for English and code."""
    return (len(text) + 3) // 4


@attrs.define
class SegmentPolicy:
    # Largest rendered segment, in (estimated) tokens.
    max_tokens: int = 16_000
    # A pause at least this long between two messages ends a segment.
    gap_seconds: float = 30 * 60.0
    # The first segment of a session needs at least this many messages and tokens.
    first_min_messages: int = 5
    first_min_tokens: int = 64
    tool_output_max_chars: int = DEFAULT_TOOL_OUTPUT_MAX_CHARS


def message_sizes(
    messages: Sequence[DistillInput],
    policy: SegmentPolicy,
    tool_names: Mapping[str, str] | None = None,
    *,
    estimate: TokenEstimate = estimate_tokens,
) -> list[int]:
    """Estimated tokens of each message as the observer reads it (rendered): what segments
    are measured in. ``tool_names`` may name tools of calls made before ``messages``."""
    names = {**(tool_names or {}), **tool_names_of(messages)}
    return [estimate(render_message(m, names, policy.tool_output_max_chars)) for m in messages]


@attrs.define
class Segment:
    messages: list[DistillInput]
    # Estimated tokens of the rendered messages.
    tokens: int
    # Why it ended: "gap", "cap" or "end" (the messages ran out).
    reason: str

    @property
    def ids(self) -> list[str]:
        return [m.id for m in self.messages]

    @property
    def start(self) -> float:
        return self.messages[0].timestamp if self.messages else 0.0

    @property
    def end(self) -> float:
        return self.messages[-1].timestamp if self.messages else 0.0


def split_segments(
    messages: Sequence[DistillInput],
    policy: SegmentPolicy | None = None,
    *,
    first: bool = True,
    estimate: TokenEstimate = estimate_tokens,
) -> list[Segment]:
    """Segments of ``messages`` (undistilled, in conversation order).

    ``first`` says the session has no distillation yet: then nothing is returned until the
    first segment can meet the minimum, and a long pause does not end a first segment that
    is still below it (the messages around it are distilled together).
    """
    policy = policy or SegmentPolicy()
    sizes = message_sizes(messages, policy, estimate=estimate)

    def meets_minimum(count: int, tokens: int) -> bool:
        return count >= policy.first_min_messages and tokens >= policy.first_min_tokens

    if first and not meets_minimum(len(messages), sum(sizes)):
        return []
    segments: list[Segment] = []
    current: list[DistillInput] = []
    tokens = 0
    for msg, size in zip(messages, sizes, strict=True):
        if current:
            pending_first = first and not segments
            gap = msg.timestamp - current[-1].timestamp
            if gap >= policy.gap_seconds and (not pending_first or meets_minimum(len(current), tokens)):
                segments.append(Segment(current, tokens, "gap"))
                current, tokens = [], 0
            elif tokens + size > policy.max_tokens:
                segments.append(Segment(current, tokens, "cap"))
                current, tokens = [], 0
        current.append(msg)
        tokens += size
    if current:
        segments.append(Segment(current, tokens, "end"))
    return segments
