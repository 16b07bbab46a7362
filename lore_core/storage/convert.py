"""An exchange turned into records (:func:`records_from_exchange`): its project and session,
the messages of its request not stored yet and its answer, each with its id
(:mod:`~lore_core.storage.identity`), its blocks as stored and its search text, secrets
masked (:mod:`~lore_core.storage.masking`). The kernel does this for every backend, so the
same text is indexed for search whatever the store.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Container, Sequence
from typing import Any

from lore_core.model import IMAGE, OTHER, TEXT, THINKING, TOOL_CALL, TOOL_RESULT, Block, Exchange
from lore_core.storage.housekeeping import strip_housekeeping
from lore_core.storage.identity import (
    VOLATILE_KEYS,
    ChainMemo,
    LogicalMessage,
    canonical_message,
    chain_ids,
    logical_messages,
    message_id,
)
from lore_core.storage.masking import (
    map_json,
    mask_deep,
    mask_hinted,
    mask_scalar,
    mask_secrets,
    may_hold_secret,
)
from lore_core.storage.records import ORIGIN_RESPONSE, Project, Session, StoredMessage, WriteBatch
from lore_core.storage.toolcalls import RECALL_TOOL_NAME, call_source

# Inline payloads (base64 images, documents) are not kept: the store keeps the structure.
_MAX_RAW_STRING = 2048


def _elided_and_masked(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _MAX_RAW_STRING:
        return f"[{len(value)} chars elided]"
    return mask_scalar(value)


def block_record(block: Block, masked_text: str | None = None) -> dict[str, Any]:
    """The stored form of a block (secrets masked, inline payloads elided). ``masked_text``
    is ``mask_secrets(block.text)`` when the caller already has it."""
    out: dict[str, Any] = {"type": block.type}
    if block.wire_type:
        out["wire_type"] = block.wire_type
    if block.text:
        out["text"] = mask_secrets(block.text) if masked_text is None else masked_text
    if block.tool_name:
        out["tool_name"] = block.tool_name
    if block.tool_call_id:
        out["tool_call_id"] = block.tool_call_id
    if block.tool_input is not None:
        out["tool_input"] = mask_deep(block.tool_input)
    if block.is_error:
        out["is_error"] = True
    if block.type in (IMAGE, OTHER) and block.raw is not None:
        out["raw"] = map_json(block.raw, _elided_and_masked, VOLATILE_KEYS)
    return out


def _search_parts(blocks: Sequence[Block], hidden_results: Container[str] = frozenset()) -> list[str]:
    parts: list[str] = []
    for b in blocks:
        if b.type == TOOL_RESULT and b.tool_call_id in hidden_results:
            continue
        if b.type in (TEXT, THINKING, TOOL_RESULT) and b.text:
            parts.append(b.text)
        elif b.type == TOOL_CALL:
            args = b.tool_input if isinstance(b.tool_input, str) else json.dumps(b.tool_input, sort_keys=True)
            parts.append(f"{b.tool_name or 'tool'} {args}")
    return parts


def search_text(blocks: Sequence[Block]) -> str:
    """What full-text search sees of a message: text, thinking, tool calls as
    ``name {input}``, tool results; secrets masked."""
    return mask_secrets("\n".join(_search_parts(blocks)))


def _masked_message(
    blocks: Sequence[Block], hidden_results: Container[str] = frozenset()
) -> tuple[list[dict[str, Any]], str]:
    """``[block_record(b) ...]`` and ``search_text(blocks)``, scanning each text for secrets
    once instead of twice (the scan was the largest cost of turning a message into a row)."""
    masked: dict[int, str] = {}  # block text by id(): the same str feeds both outputs
    hinted = False
    for b in blocks:
        if b.text and id(b.text) not in masked:
            if may_hold_secret(b.text):
                hinted = True
                masked[id(b.text)] = mask_hinted(b.text)
            else:
                masked[id(b.text)] = b.text
    records = [block_record(b, masked.get(id(b.text))) for b in blocks]
    parts = _search_parts(blocks, hidden_results)
    if not hinted and len(parts) == 1 and id(parts[0]) in masked:
        return records, parts[0]  # the common case: one text block, no secret
    # Hints never contain a newline, so no hint can straddle two joined parts: when no
    # part has one, the joined text has none. Otherwise mask the whole joined text, as
    # search_text does (a private key block may span parts).
    text = "\n".join(parts)
    if hinted or any(may_hold_secret(p) for p in parts if id(p) not in masked):
        text = mask_hinted(text)
    return records, text


# A user item that is one tagged block (Codex's <environment_context>, <turn_aborted>,
# <subagent_notification>) or injected instructions is the harness talking, not the user.
_HARNESS_ITEM = re.compile(r"\A\s*(?:<([\w-]+)\b[^>]*>.*</\1>\s*\Z|# AGENTS\.md instructions\b)", re.S)


def _title(messages: Sequence[LogicalMessage]) -> str:
    """The session's first prompt: its first user text that is not harness housekeeping."""
    for msg in messages:
        if msg.role == "user":
            text = strip_housekeeping(" ".join(b.text for b in msg.blocks if b.type == TEXT and b.text))
            if text.strip() and not _HARNESS_ITEM.match(text):
                # Masked before the whitespace is folded: a key cut by a line break is
                # only recognised with its break (hostile_local.py found it in titles).
                return " ".join(mask_secrets(text).split())[:120]
    return ""


def records_from_exchange(
    exchange: Exchange, skip_ids: Container[str] = frozenset(), memo: ChainMemo | None = None
) -> WriteBatch:
    """The records one exchange produces: its project and session (upserted), every request
    message (skipped when its id is in ``skip_ids``: already stored), and the assistant
    answer with model, usage, stop reason and the ``complete`` flag. ``memo`` spares hashing
    the history the session's previous exchange already had."""
    now = exchange.finished_at or time.time()
    started = exchange.started_at or now
    response = exchange.response
    model = (response.model if response else None) or exchange.request.model
    logical = logical_messages(exchange.request.messages)
    if memo is None:
        ids = chain_ids(exchange.session_id, logical)
    else:
        ids = memo.ids(exchange.session_id, logical)
    # Each tool result's record names the tool and the command or path of its call (the
    # call is earlier in the same history), so its passages can say where they came from;
    # results of recall's own calls are left out of the search text. Only the new messages'
    # results need the calls: the history is scanned for them once, when one is recorded.
    history_calls: dict[str, Block] | None = None
    recall_calls: set[str] = set()

    def calls_in_history() -> dict[str, Block]:
        nonlocal history_calls
        if history_calls is None:
            history_calls = {}
            for msg in logical:
                for b in msg.blocks:
                    if b.type == TOOL_CALL and b.tool_call_id and b.tool_name:
                        history_calls[b.tool_call_id] = b
                        if b.tool_name == RECALL_TOOL_NAME:
                            recall_calls.add(b.tool_call_id)
        return history_calls

    def forgotten(position: int) -> bool:
        return bool(exchange.forget_positions) and any(
            s <= position and (e is None or position < e) for s, e in exchange.forget_positions
        )

    batch = WriteBatch()
    project_name = exchange.project.rstrip("/").rsplit("/", 1)[-1] if exchange.project else ""
    batch.projects.append(Project(exchange.project, project_name, started, now))
    batch.sessions.append(
        Session(
            id=exchange.session_id,
            project=exchange.project,
            harness=exchange.harness,
            model=model,
            created_at=started,
            updated_at=now,
            # Nothing said under /lore:amnesia reaches the store, its title included.
            title=_title([m for p, m in enumerate(logical) if not forgotten(p)]),
        )
    )

    def record(
        position: int,
        parent: str | None,
        ident: str,
        msg: LogicalMessage,
        model: str | None = exchange.request.model,
        created_at: float = started,
        **extra: Any,
    ) -> StoredMessage:
        calls = calls_in_history() if any(b.type == TOOL_RESULT for b in msg.blocks) else {}
        blocks, text = _masked_message(msg.blocks, recall_calls)
        for out in blocks:
            call_id = out.get("tool_call_id")
            call = calls.get(call_id) if out["type"] == TOOL_RESULT and isinstance(call_id, str) else None
            if call is not None:
                out.setdefault("tool_name", call.tool_name)
                source = call_source(mask_deep(call.tool_input))
                if source:
                    out["tool_source"] = source
        return StoredMessage(
            id=ident,
            session_id=exchange.session_id,
            parent_id=parent,
            position=position,
            role=msg.role,
            blocks=blocks,
            text=text,
            model=model,
            harness=exchange.harness,
            project=exchange.project,
            api=exchange.api,
            created_at=created_at,
            **extra,
        )

    parent: str | None = None
    for position, (ident, msg) in enumerate(zip(ids, logical, strict=True)):
        if ident not in skip_ids and not forgotten(position):
            batch.messages.append(record(position, parent, ident, msg))
        parent = ident

    answer_position = len(logical) - 1 if logical and logical[-1].role == "assistant" else len(logical)
    if response is not None and (response.blocks or response.error) and not forgotten(answer_position):
        # The answer continues the chain, exactly as the client will resend it next turn.
        answer = LogicalMessage("assistant", list(response.blocks))
        if logical and logical[-1].role == "assistant":
            # A prefilled assistant turn: the answer is resent merged into it.
            answer = LogicalMessage("assistant", logical[-1].blocks + list(response.blocks))
            parent = ids[-2] if len(ids) > 1 else None
        position = answer_position
        ident = message_id(exchange.session_id, parent, canonical_message("assistant", answer.blocks))
        complete = bool(response.complete) and not exchange.client_disconnected
        batch.messages.append(
            record(
                position,
                parent,
                ident,
                answer,
                model=model,
                usage=response.usage.as_dict(),
                created_at=now,
                complete=complete,
                origin=ORIGIN_RESPONSE,
                stop_reason=response.stop_reason,
                error=mask_secrets(response.error) if response.error else None,
                context_layer=exchange.context_layer,
            )
        )
    return batch
