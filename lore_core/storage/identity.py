"""Message identity, the rule every backend shares: a message resent by any client to any
backend gets the same id, so it is stored once.

Message identity is a hash chain over the conversation::

    id[i] = sha256(session, id[i-1], canonical(message[i]))[:32]

``canonical`` is built from the wire-neutral blocks (type, text, tool name and id, tool input
as sorted JSON, is_error), never from raw wire JSON: Claude Code moves its ``cache_control``
marker to the newest block every turn, so the raw JSON of the same message changes between
turns, and the assistant message assembled from a response must get the same id as the same
message resent by the client on the next turn. Consequences:

* a resent history re-derives the same ids, so every message is stored once;
* an edited message (or anything before it) changes every id from that point on: the new
  history is stored as a new branch that forks from the last common message, and the old
  branch is kept (:func:`main_branch` reads the conversation as the client sees it now);
* consecutive assistant messages are one logical message, because the Responses API resends
  one response as several items (reasoning, message, function calls) that were assembled as
  one assistant message.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from lore_core.model import IMAGE, OTHER, Block, Message
from lore_core.storage.masking import map_json
from lore_core.storage.records import StoredMessage

#: Bumped when the identity rule changes (it never should: ids are stored forever).
IDENTITY_VERSION = 1


# Keys that carry transport or cache bookkeeping, not content.
VOLATILE_KEYS = frozenset({"cache_control", "citations", "signature", "status", "id"})


def _strip_volatile(value: Any) -> Any:
    return map_json(value, _same, VOLATILE_KEYS)


def _same(value: Any) -> Any:
    return value


def canonical_block(block: Block) -> dict[str, Any]:
    """The parts of a block that make it the same block, whatever the wire shape."""
    out: dict[str, Any] = {"t": block.type}
    text = block.text.strip()
    if text:
        out["x"] = text
    if block.tool_name:
        out["n"] = block.tool_name
    if block.tool_call_id:
        out["i"] = block.tool_call_id
    if block.tool_input not in (None, {}, ""):
        out["a"] = block.tool_input
    if block.is_error:
        out["e"] = True
    if block.type in (IMAGE, OTHER):
        out["w"] = block.wire_type
        out["r"] = _strip_volatile(block.raw)
    return out


# One encoder for every message: json.dumps with options builds a new encoder per call,
# which was a quarter of the cost of canonicalising a short message. Same output.
_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def canonical_message(role: str, blocks: Sequence[Block]) -> str:
    """Sorted-key JSON of the role and canonical blocks: the hashed content of a message."""
    return _CANONICAL_JSON.encode({"r": role, "b": [canonical_block(b) for b in blocks]})


_ID_PREFIX = f"v{IDENTITY_VERSION}\x00"


def message_id(session_id: str, parent_id: str | None, canonical: str) -> str:
    # The parts, each followed by a NUL, hashed in one call (the same bytes as one update
    # per part, which is how ids were first defined: they are stored forever).
    data = f"{_ID_PREFIX}{session_id}\x00{parent_id or ''}\x00{canonical}\x00"
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@attrs.define
class LogicalMessage:
    """A message as identity sees it: consecutive assistant items coalesced into one.
    Read-only: ``blocks`` may be the item's own list."""

    role: str
    blocks: list[Block]
    # The wire JSON of the items it was made from (``None`` when one of them has none: a
    # message a prompt layer made up). Equal JSON means equal blocks: a resent history is
    # recognised by one comparison in C instead of a key built per block (ChainMemo).
    raws: list[Any] | None = None


def logical_messages(messages: Iterable[Message]) -> list[LogicalMessage]:
    """Conversation messages in order. Items without a role (Codex's ``configuration_update``
    and similar harness housekeeping) are not conversation and never shift identities."""
    out: list[LogicalMessage] = []
    owned = False  # whether out[-1].blocks is a list of its own yet (copied when coalescing)
    for msg in messages:
        if not msg.role:
            continue
        raw = None if msg.synthetic else msg.raw
        if msg.role == "assistant" and out and out[-1].role == "assistant":
            last = out[-1]
            if not owned:
                last.blocks, owned = list(last.blocks), True
            last.blocks.extend(msg.blocks)
            if last.raws is not None:
                if raw is None:
                    last.raws = None
                else:
                    last.raws.append(raw)
        else:
            out.append(LogicalMessage(msg.role, msg.blocks, None if raw is None else [raw]))
            owned = False
    return out


def chain_ids(
    session_id: str, messages: Sequence[LogicalMessage], start: int = 0, parent: str | None = None
) -> list[str]:
    """Ids of ``messages[start:]``, the chain continuing after ``parent``."""
    ids: list[str] = []
    for msg in messages[start:]:
        parent = message_id(session_id, parent, canonical_message(msg.role, msg.blocks))
        ids.append(parent)
    return ids


def block_key(block: Block) -> tuple[Any, ...]:
    """Everything :func:`canonical_block` depends on, compared by value: blocks with equal
    keys have the same canonical form (string equality is a memcmp, far cheaper than
    serialising and hashing the block again)."""
    return (
        block.type,
        block.text,
        block.tool_name,
        block.tool_call_id,
        block.is_error,
        block.wire_type,
        block.tool_input,
        block.raw if block.type in (IMAGE, OTHER) else None,
    )


def message_key(message: Message | LogicalMessage) -> tuple[Any, ...]:
    """Everything a message's identity (and token count) depends on, compared by value: a
    resent history is recognised without hashing it again."""
    return (message.role, tuple(block_key(b) for b in message.blocks))


class ChainMemo:
    """The message ids of each session's last exchanges, with the content they were derived
    from. Every turn resends the whole history, so :meth:`ids` hashes only the messages after
    the part it shares with an earlier exchange of the session. A few chains are kept per
    session (:data:`CHAINS_PER_SESSION`): a harness's sub-agents and side requests share the
    main conversation's session id, and alternating with them must not re-hash the main
    history each time. Not thread-safe: one user at a time (the store writer converts under
    its lock)."""

    CHAINS_PER_SESSION = 4

    def __init__(self, max_sessions: int = 256) -> None:
        self.max_sessions = max_sessions
        # Session -> its chains, most recently used last: (messages, their ids).
        self._sessions: OrderedDict[str, list[tuple[list[LogicalMessage], list[str]]]] = OrderedDict()

    def ids(self, session_id: str, messages: Sequence[LogicalMessage]) -> list[str]:
        """The same as :func:`chain_ids` (``session_id``, ``messages``)."""
        chains = self._sessions.pop(session_id, [])
        best, same = -1, 0
        for index, (old_messages, _) in enumerate(chains):
            shared = shared_history(messages, old_messages)
            if shared > same:
                best, same = index, shared
        old_ids = chains.pop(best)[1] if best >= 0 else []
        parent = old_ids[same - 1] if same else None
        ids = old_ids[:same] + chain_ids(session_id, messages, same, parent)
        chains.append((list(messages), ids))
        del chains[: -self.CHAINS_PER_SESSION]
        self._sessions[session_id] = chains  # most recently used last
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return ids

    def forget(self, session_id: str) -> None:
        """Drop the session's chains (``lore forget``: they hold its messages)."""
        self._sessions.pop(session_id, None)


def _wire(message: Message | LogicalMessage) -> Any:
    """The wire JSON a message was parsed from, or ``None`` (made up by a prompt layer)."""
    if isinstance(message, LogicalMessage):
        return message.raws
    return None if message.synthetic else message.raw


def shared_history(a: Sequence[Message | LogicalMessage], b: Sequence[Message | LogicalMessage]) -> int:
    """How many leading messages ``a`` and ``b`` have in common, by content: the wire JSON
    where both have it (a whole resent history compares in C), the blocks where it differs
    (a client moves its cache breakpoints from message to message: other JSON, same
    content)."""
    limit = min(len(a), len(b))
    same = 0
    while same < limit:
        x, y = a[same], b[same]
        if x.role != y.role:
            break
        wire = _wire(x)
        if wire is None or wire != _wire(y):
            if message_key(x) != message_key(y):
                break
        same += 1
    return same


# ---------------------------------------------------------------------------------------------
# The message tree: the branches the chain makes
# ---------------------------------------------------------------------------------------------


def _parent_links(messages: Sequence[StoredMessage]) -> dict[str, StoredMessage]:
    """Each message's parent among ``messages``, by message id. A parent that was never
    stored (a stretch kept out by ``/lore:amnesia``) is bridged to the latest stored message
    before it, so the conversation reads on across the gap."""
    by_id = {m.id: m for m in messages}
    links: dict[str, StoredMessage] = {}
    ordered: list[StoredMessage] | None = None
    for m in messages:
        if not m.parent_id:
            continue
        parent = by_id.get(m.parent_id)
        if parent is None:
            if ordered is None:
                ordered = sorted(messages, key=lambda x: (x.position, x.created_at, x.id))
            earlier = [x for x in ordered if x.position < m.position]
            parent = earlier[-1] if earlier else None
        if parent is not None:
            links[m.id] = parent
    return links


def main_branch(messages: Sequence[StoredMessage]) -> list[StoredMessage]:
    """The conversation as the client sees it now: the chain ending at the deepest leaf
    (the latest one among equally deep leaves). Side requests (titles, quota probes) and
    abandoned edits are other, shorter or older, branches."""
    links = _parent_links(messages)
    parents = {p.id for p in links.values()}
    leaves = [m for m in messages if m.id not in parents]
    if not leaves:
        return []
    tip: StoredMessage | None = max(leaves, key=lambda m: (m.position, m.created_at, m.id))
    chain: list[StoredMessage] = []
    while tip is not None:
        chain.append(tip)
        tip = links.get(tip.id)
    chain.reverse()
    return chain


def count_branches(messages: Iterable[StoredMessage]) -> int:
    """Leaves of the message tree: 1 for a straight conversation, more after forks."""
    messages = list(messages)
    parents = {p.id for p in _parent_links(messages).values()}
    return sum(1 for m in messages if m.id not in parents)
