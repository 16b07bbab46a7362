"""Knowledge written by another gateway on a shared store (``Store.shared``).

A gateway keeps the project's knowledge it injects in memory and reads it again after its
own writes (its books tell the injector). On a store other gateways write as well, their
writes must be noticed too: every knowledge or entity write on a shared store also sets a
change mark (a new random token in the gateway-wide session state, ``""``), and an injector
reads the mark at each new session and at most every :data:`MARK_REFRESH_SECONDS` within
one: a changed mark means "read the entries again". One small read per new session; none
at all on a store only one gateway writes (DuckDB).
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from lore_core.interfaces import Store

log = logging.getLogger("lore.knowledge")

#: The state key (of the gateway-wide session ``""``) holding the mark.
MARK_KEY = "knowledgeChanged"
#: How stale a session already under way may see another gateway's knowledge, at most.
MARK_REFRESH_SECONDS = 5.0


async def mark_changed(store: Store) -> None:
    """Tell the other gateways on a shared store that knowledge or entities changed. A
    failure is logged, never raised: the write it follows stands."""
    if not store.shared:
        return
    try:
        await store.set_state("", MARK_KEY, secrets.token_hex(8))
    except Exception as exc:
        log.warning("knowledge: could not mark the change for the other gateways: %s", exc)


async def read_mark(store: Store) -> Any:
    """The mark as it stands (``None`` when knowledge never changed)."""
    return await store.get_state("", MARK_KEY)
