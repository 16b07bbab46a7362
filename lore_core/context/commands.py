"""Slash commands the gateway answers itself: ``/lore:status``, ``/lore:amnesia on|off``.

A command is the whole text of the last user message (harness housekeeping such as
``<system-reminder>`` blocks aside). Claude Code sends a custom command it knows as
``<command-name>/lore:status</command-name><command-args>...</command-args>``; both shapes are
read. The gateway answers through the request's codec, with no upstream call, so a command
costs nothing and never reaches the model.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from lore_core.distill.render import strip_housekeeping
from lore_core.model import TEXT, TOOL_RESULT, RequestView

PREFIX = "/lore:"

#: name -> (argument synopsis, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "status": ("", "this session's context layer, tokens, cost and cache hit rate"),
    "amnesia": ("on|off", "stop (on) or resume (off) storing this session; no argument shows the state"),
    "help": ("", "this list"),
}

_COMMAND_TAGS = re.compile(
    r"<command-name>\s*(?P<name>[^<]*?)\s*</command-name>(?:.*?<command-args>(?P<args>.*?)</command-args>)?",
    re.S,
)


@attrs.frozen
class SlashCommand:
    name: str
    args: tuple[str, ...] = ()


def find_command(view: RequestView) -> SlashCommand | None:
    """The ``/lore:`` command the last user message consists of, or ``None``."""
    if not view.messages:
        return None
    last = view.messages[-1]
    if last.role != "user" or any(block.type == TOOL_RESULT for block in last.blocks):
        return None
    text = strip_housekeeping("\n".join(b.text for b in last.blocks if b.type == TEXT and b.text)).strip()
    tagged = _COMMAND_TAGS.search(text)
    if tagged:
        text = f"{tagged.group('name')} {tagged.group('args') or ''}".strip()
    if not text.lower().startswith(PREFIX) or "\n" in text:
        return None
    words = text[len(PREFIX) :].split()
    if not words:
        return SlashCommand("help")
    return SlashCommand(words[0].lower(), tuple(words[1:]))


def help_text(problem: str | None = None) -> str:
    lines = [problem, ""] if problem else []
    lines.append("Lore commands (answered by the gateway, never sent to the model):")
    for name, (synopsis, summary) in COMMANDS.items():
        usage = f"{PREFIX}{name}" + (f" {synopsis}" if synopsis else "")
        lines.append(f"  {usage:<22} {summary}")
    return "\n".join(lines)


def _money(value: float) -> str:
    return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def _tokens(value: Any) -> str:
    return f"{int(value):,}" if isinstance(value, int | float) else "-"


def status_text(status: dict[str, Any]) -> str:
    """A short plain-text report for ``/lore:status`` from the gateway's session status."""
    context = status.get("context") or {}
    spend = status.get("spend") or {}
    throttle = status.get("throttle") or {}
    lines = [f"Lore - session {status.get('session_id', '?')}"]
    if status.get("amnesia"):
        lines.append("  amnesia:   ON (this session is not being stored)")
    if context:
        layer = context.get("layer")
        forced = context.get("force_min_layer") or 0
        shown = "-" if layer is None else str(layer)
        if forced:
            shown += f" (at least {forced} after an overflow)"
        lines.append(f"  layer:     {shown}")
        lines.append(
            f"  tokens:    {_tokens(context.get('prompt_tokens'))} in the last prompt"
            + (f" (layer-0 cap {_tokens(context.get('cap'))})" if context.get("cap") else "")
        )
        rate = context.get("cache_hit_rate")
        if isinstance(rate, int | float):
            lines.append(f"  cache:     {rate:.0%} of input tokens read from the prompt cache")
    else:
        lines.append("  layer:     no turn composed yet")
    session_usd, today_usd = _money(spend.get("session_usd", 0.0)), _money(spend.get("today_usd", 0.0))
    lines.append(f"  cost:      {session_usd} this session, {today_usd} today")
    budget = spend.get("daily_budget_usd") or 0
    if budget:
        projected = _money(spend.get("projected_today_usd", 0.0))
        lines.append(f"  budget:    {_money(budget)} a day, projected {projected}")
    if throttle.get("throttle.events"):
        seconds = throttle["throttle.totalDelayMs"] / 1000
        lines.append(f"  throttle:  {throttle['throttle.events']} delays, {seconds:.1f} s in all")
    stored = status.get("stored_messages")
    if stored is not None:
        lines.append(f"  stored:    {stored} messages, {status.get('distillations', 0)} distillations")
    return "\n".join(lines)
