"""Ownership: whether a model request may reach memory (docs/security.md, "Memory follows
its owner").

The model routes serve plain clients that only changed their base URL, without the gateway
token. Memory reaches such a request (knowledge, the distilled prefix, recall, ``/lore:``
commands, compaction answers; and the request is stored, distilled and curated) only when
all of these hold:

1. ``server.requireTokenForMemory`` is off;
2. it goes to an upstream the configuration names, not one the client chose with
   ``X-Lore-Upstream-URL`` (``upstream.allowedUrls`` lists more): otherwise any local
   process could have the session's memory sent to a server of its own;
3. its loopback client runs as the gateway's own OS user, when the kernel can tell
   (:mod:`lore_core.http.peers`): another account on the machine, or a container running
   as another user, is not the owner;
4. its credentials own the session (:class:`lore_core.http.access.SessionOwners`): a
   process naming a session it did not open gets nothing of it.

A request with the gateway token in ``X-Lore-Token`` passes whatever it names. Any other
request is relayed to its upstream untouched and leaves no trace in memory; ``/lore:``
commands in it are refused.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from quart import request

from lore_core.http.access import TOKEN_HEADER, MemoryAccess, upstream_allowed
from lore_core.pipeline.turn import Turn
from lore_core.pipeline.upstream import UPSTREAM_URL_HEADER
from lore_core.storage.identity import chain_ids, logical_messages

if TYPE_CHECKING:
    from lore_core.gateway import Gateway

log = logging.getLogger("lore.access")


NEEDS_TOKEN = MemoryAccess(False, "server.requireTokenForMemory is on and the request has no gateway token")
CHOSEN_UPSTREAM = MemoryAccess(False, "X-Lore-Upstream-URL names an upstream outside upstream.allowedUrls")
OTHER_USER = MemoryAccess(False, "the client runs as another OS user")
UNKNOWN_USER = MemoryAccess(False, "the kernel could not say which OS user runs the client")
OTHER_OWNER = MemoryAccess(False, "the session belongs to other credentials")


def note_stranger(gateway: Gateway, access: MemoryAccess) -> None:
    """A model request that may not reach memory was relayed untouched: counted on
    ``/health`` by reason, logged once per reason (never the request's content)."""
    gateway.stats["memory_refused"] += 1
    key = f"memory_refused: {access.why_not}"
    if key not in gateway.stats:
        log.warning("relaying a model request without memory: %s", access.why_not)
    gateway.stats[key] += 1


async def decide(gateway: Gateway, turn: Turn) -> MemoryAccess:
    """Whether ``turn`` may reach memory (the rules above, in order)."""
    headers = turn.headers
    if gateway.tokens.matches(headers.get(TOKEN_HEADER)):
        # The gateway's owner: a session seen first here becomes these credentials'.
        await gateway.owners.claim(turn.session_id, headers, lambda: carries_its_answers(gateway, turn))
        return MemoryAccess.ALLOWED
    if gateway.config.server.require_token_for_memory:
        return NEEDS_TOKEN
    if not upstream_allowed(headers.get(UPSTREAM_URL_HEADER), gateway.allowed_upstreams):
        return CHOSEN_UPSTREAM
    refused = peer_refusal(gateway)
    if refused is not None:
        return refused
    if not await gateway.owners.claim(turn.session_id, headers, lambda: carries_its_answers(gateway, turn)):
        return OTHER_OWNER
    return MemoryAccess.ALLOWED


def peer_refusal(gateway: Gateway) -> MemoryAccess | None:
    """Why the client's OS user may not reach memory, or ``None``. A request without a TCP
    peer (the gateway's own process, in-process tests) is the owner's; where the kernel
    cannot be asked at all the gateway said so at start and every loopback client counts
    as its user."""
    client, server = request.scope.get("client"), request.scope.get("server")
    if not client or not server or server[1] is None or not gateway.peer_users.available:
        return None  # no TCP peer (a Unix socket, the app called in-process)
    uid = gateway.peer_users.uid_of((client[0], client[1]), (server[0], server[1]))
    if uid is None:
        return UNKNOWN_USER if gateway.peer_users.available else None
    return None if uid == os.getuid() else OTHER_USER


async def carries_its_answers(gateway: Gateway, turn: Turn) -> bool:
    """Whether the request's history holds an answer the gateway stored for this session:
    message ids chain the whole history before them (and the session id), so only a client
    that received the session's answers can send one. Other credentials take a session over
    with it (an OAuth token refreshed mid-session)."""
    logical = logical_messages(turn.view.messages)
    ids = chain_ids(turn.session_id, logical)
    answers = [mid for mid, msg in zip(ids, logical, strict=True) if msg.role == "assistant"]
    if not answers:
        return False
    if gateway.writer.knows_any(answers):
        return True
    stored = await gateway.store.get_messages(answers)
    return any(msg.role == "assistant" and msg.session_id == turn.session_id for msg in stored)
