"""What the context manager keeps of a session (:class:`SessionContext`) and of each of its
conversations (:class:`ThreadState`): a harness's sub-agents and side requests share the
session id but not the conversation, so each conversation, keyed by its first message
(:func:`thread_key`), keeps its own pinned composition and prompt cache, and one of them is
the session's main conversation (:func:`elect_main`), the one ``lore status`` reports.
"""

from __future__ import annotations

import asyncio
import hashlib

import attrs

from lore_core.context.compose import Composition, Memo, PrefixPart, head_length
from lore_core.context.economics import CacheState, Layer0Cap
from lore_core.context.tokens import Calibration
from lore_core.model import RequestView
from lore_core.storage.identity import canonical_message

#: A thread with fewer than this share of the main thread's messages is a side thread (a
#: title, a quota probe, a sub-agent) for ``lore status`` ...
SIDE_REQUEST_SHARE = 0.5
#: ... until this many requests in a row came from side threads: then the latest becomes the
#: session's main conversation (the client compacted or started over under the same id).
SIDE_TURNS_TO_ADOPT = 3
#: Threads kept per session (least recently seen dropped first).
MAX_THREADS = 32


def thread_key(view: RequestView) -> str:
    """Which conversation of its session a request continues: a hash of its first message
    after the harness's preamble (every later request of that conversation resends it)."""
    messages = view.messages
    head = head_length(messages)
    first = messages[head] if head < len(messages) else None
    if first is None:
        return ""
    text = canonical_message(first.role, first.blocks)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


@attrs.define
class ThreadState:
    """One conversation of a session, keyed by its first message: a harness's sub-agents
    and side requests (titles, quota probes) share the session id but not the conversation,
    and each keeps its own pinned composition and prompt cache."""

    key: str
    #: The pinned composition of layers 1-4 (``None``: layer 0).
    pinned: Composition | None = None
    #: The thread's last request, measured (ids and token counts reused by the next).
    memo: Memo = attrs.field(factory=Memo)
    cache: CacheState = attrs.field(factory=CacheState)
    layer: int = 0
    reason: str = ""
    model: str | None = None
    cap: Layer0Cap | None = None
    #: Local estimate of the last composed prompt (corrected) and the real count reported.
    estimated_tokens: int = 0
    real_tokens: int = 0
    #: Messages of its last request.
    messages: int = 0
    turns: int = 0
    recompositions: int = 0
    busts: int = 0
    last_seen: float = 0.0


@attrs.define
class SessionContext:
    """What the context manager knows of one session."""

    session_id: str
    calibration: Calibration = attrs.field(factory=Calibration)
    force_min_layer: int = 0
    force_loaded: bool = False
    threads: dict[str, ThreadState] = attrs.field(factory=dict)
    #: The thread ``lore status`` reports: the session's main conversation.
    main: str | None = None
    # Requests in a row from a thread smaller than the main one (see SIDE_TURNS_TO_ADOPT).
    side_turns: int = 0
    turns: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    # Distillations as prefix parts, and when / at which distiller version they were read.
    parts: list[PrefixPart] | None = None
    parts_read_at: float = 0.0
    parts_version: int = -1
    refreshing: asyncio.Task[None] | None = None
    last_seen: float = 0.0
    #: Distillations rendered as prefix parts, by id (they never change).
    rendered: dict[str, str] = attrs.field(factory=dict)

    def thread(self, key: str, now: float = 0.0) -> ThreadState:
        found = self.threads.get(key)
        if found is None:
            found = self.threads[key] = ThreadState(key)
            if len(self.threads) > MAX_THREADS:
                others = [t for t in self.threads.values() if t.key not in (key, self.main)]
                del self.threads[min(others, key=lambda t: t.last_seen).key]
        found.last_seen = max(now, found.last_seen)
        return found

    @property
    def main_thread(self) -> ThreadState:
        """The main conversation's state (an empty one before the first request)."""
        found = self.threads.get(self.main) if self.main is not None else None
        return found if found is not None else self.thread(self.main or "")

    # The main thread's figures, as attributes of the session.
    @property
    def pinned(self) -> Composition | None:
        return self.main_thread.pinned

    @pinned.setter
    def pinned(self, value: Composition | None) -> None:
        self.main_thread.pinned = value

    @property
    def cache(self) -> CacheState:
        return self.main_thread.cache

    @property
    def layer(self) -> int:
        return self.main_thread.layer


def elect_main(state: SessionContext, thread: ThreadState) -> None:
    """Make ``thread``, which the session's latest request continued, its main conversation
    unless it is a side thread (:data:`SIDE_REQUEST_SHARE`) and fewer than
    :data:`SIDE_TURNS_TO_ADOPT` requests in a row came from side threads."""
    main = state.threads.get(state.main) if state.main is not None else None
    if main is None or thread is main or thread.messages >= SIDE_REQUEST_SHARE * main.messages:
        state.main, state.side_turns = thread.key, 0
        return
    state.side_turns += 1
    if state.side_turns >= SIDE_TURNS_TO_ADOPT:
        state.main, state.side_turns = thread.key, 0
