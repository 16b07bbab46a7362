"""Anthropic prompt caching: ``cache_control`` breakpoints on the gateway's stable blocks
(the LTM system blocks, the end of the distilled prefix) and the conversation's tail, never
more than four counting the client's own: the client's least useful ones (markers on older
messages, then on its system prompt and tools) give way."""

from __future__ import annotations

from typing import Any

import attrs

from lore_core.model import RequestView

#: Anthropic accepts at most this many ``cache_control`` breakpoints per request.
MAX_BREAKPOINTS = 4
EPHEMERAL = {"type": "ephemeral"}
EPHEMERAL_HOUR = {"type": "ephemeral", "ttl": "1h"}


def _has_marker(raw: Any) -> bool:
    return isinstance(raw, dict) and "cache_control" in raw


def _without_marker(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k != "cache_control"}


def place_breakpoints(view: RequestView, plan: Any) -> None:
    """``plan``: the turn's :class:`~lore_core.context.compose.Composition`."""
    gateway: list[tuple[str, int, int]] = []  # (where, message/system index, block index)
    n_client_system = len(view.system) - sum(1 for t in (plan.ltm_baseline, plan.ltm_context) if t)
    for index in range(n_client_system, len(view.system)):
        gateway.append(("system", index, -1))
    prefix_at = next(
        (i for i, m in enumerate(view.messages) if m.synthetic and m.role == "user" and len(m.blocks) > 1),
        None,
    )
    if prefix_at is not None:
        gateway.append(("message", prefix_at, len(view.messages[prefix_at].blocks) - 1))

    # The client's markers, most useful first: the newest message's, then system and tools,
    # then older messages' (the newest marker supersedes them).
    client_messages: list[tuple[str, int, int]] = []
    for mi, msg in enumerate(view.messages):
        if msg.synthetic:
            continue
        raw = msg.raw
        if _has_marker(raw):
            client_messages.append(("message-raw", mi, -1))
        content = raw.get("content") if isinstance(raw, dict) else None
        if isinstance(content, list):
            for bi, part in enumerate(content):
                if _has_marker(part):
                    client_messages.append(("message", mi, bi))
    client_messages.reverse()
    client_other = [("system", i, -1) for i in range(n_client_system) if _has_marker(view.system[i].raw)]
    client_other += [("tool", i, -1) for i, tool in enumerate(view.tools) if _has_marker(tool)]
    client = client_messages[:1] + client_other[::-1] + client_messages[1:]
    tail_needed = not client_messages and view.messages and not view.messages[-1].synthetic
    room = MAX_BREAKPOINTS - len(gateway) - (1 if tail_needed else 0)
    drop = client[max(room, 0) :]
    if len(gateway) > MAX_BREAKPOINTS:
        gateway = gateway[-MAX_BREAKPOINTS:]
    kept = client[: max(room, 0)]
    for where, index, block in drop:
        _set_marker(view, where, index, block, None)
    # Anthropic wants 1-hour breakpoints before 5-minute ones: when a message marker the
    # client keeps (after the gateway's) has the 1-hour TTL, so do the gateway's.
    later_hour = any(
        _marker_ttl(view, where, index, block) == "1h"
        for where, index, block in kept
        if where.startswith("message")
    )
    # The knowledge baseline is frozen for the session: it takes the 1-hour TTL. Anthropic
    # wants 1-hour breakpoints before 5-minute ones, so the client's markers on its tools and
    # system prompt (before the baseline) take it too: they mark prefixes at least as stable.
    baseline_hour = bool(plan.ltm_baseline) and any(
        where == "system" and index == n_client_system for where, index, _ in gateway
    )
    if baseline_hour:
        for where, index, block in kept:
            if where in ("system", "tool"):
                _set_marker(view, where, index, block, EPHEMERAL_HOUR)
    for where, index, block in gateway:
        hour = later_hour or (baseline_hour and where == "system" and index == n_client_system)
        _set_marker(view, where, index, block, EPHEMERAL_HOUR if hour else EPHEMERAL)
    if tail_needed and room >= 0:
        last = view.messages[-1]
        content = last.raw.get("content") if isinstance(last.raw, dict) else None
        if isinstance(content, list) and content:
            _set_marker(view, "message", len(view.messages) - 1, len(content) - 1, EPHEMERAL)
        elif isinstance(content, str):
            raw = {**last.raw, "content": [{"type": "text", "text": content, "cache_control": EPHEMERAL}]}
            view.messages[-1] = attrs.evolve(last, raw=raw)


def _marker_ttl(view: RequestView, where: str, index: int, block: int) -> str | None:
    raw = view.messages[index].raw
    if where == "message":
        content = raw.get("content") if isinstance(raw, dict) else None
        raw = content[block] if isinstance(content, list) else None
    marker = raw.get("cache_control") if isinstance(raw, dict) else None
    return marker.get("ttl") if isinstance(marker, dict) else None


def _set_marker(view: RequestView, where: str, index: int, block: int, marker: dict[str, Any] | None) -> None:
    """Add (``marker``) or remove (``None``) a breakpoint, copying the JSON it changes: the
    client's parsed body stays as it was."""
    if where == "tool":
        tool = view.tools[index]
        view.tools = list(view.tools)
        view.tools[index] = _without_marker(tool) if marker is None else {**tool, "cache_control": marker}
        return
    if where == "system":
        b = view.system[index]
        raw = b.raw if isinstance(b.raw, dict) else {"type": "text", "text": b.text}
        raw = _without_marker(raw) if marker is None else {**raw, "cache_control": marker}
        view.system = list(view.system)
        view.system[index] = attrs.evolve(b, raw=raw)
        return
    msg = view.messages[index]
    if msg.synthetic:
        blocks = list(msg.blocks)
        target = blocks[block]
        raw = target.raw if isinstance(target.raw, dict) else {"type": "text", "text": target.text}
        blocks[block] = attrs.evolve(
            target, raw=_without_marker(raw) if marker is None else {**raw, "cache_control": marker}
        )
        view.messages[index] = attrs.evolve(msg, blocks=blocks)
        return
    raw = dict(msg.raw)
    if where == "message-raw":
        raw = _without_marker(raw)
    else:
        content = list(raw["content"])
        part = content[block]
        if isinstance(part, dict):
            content[block] = _without_marker(part) if marker is None else {**part, "cache_control": marker}
        raw["content"] = content
    view.messages[index] = attrs.evolve(msg, raw=raw)
