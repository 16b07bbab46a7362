"""Many concurrent streaming conversations through a gateway, and the check that the store
keeps each one exactly once and apart from the others.

Shared by ``benchmarks/soak.py`` (hundreds of sessions for minutes against ``lore serve``)
and ``tests/test_soak.py`` (a few dozen, in CI), so the test proves the checker the benchmark
relies on. Each conversation looks like a real client's, with the session id its harness
plugin reads:

* ``claude``: Claude Code on the Messages API (``x-claude-code-session-id``, the same id in
  ``metadata.user_id``, its user agent, tools, the cache marker on the newest block);
* ``opencode``: OpenCode on Chat Completions (``x-session-id: ses_...``, its user agent);
* ``codex``: Codex on Responses (``session-id`` and ``prompt_cache_key``, ``originator``,
  its ``<environment_context>`` item first);
* ``sdk``: a plain SDK on Chat Completions with no session id at all: the gateway
  fingerprints the conversation by its first user message.

Every turn resends the whole history and streams (``"stream": true``). Its user text names
the conversation and the turn (``soak-s007-2 turn 4: ...``), and the fake upstream's echo
(:func:`~lore_core.testing.fake_upstream.echo_responder`) answers ``answer to <that text>``:
every stored text says which conversation it belongs to, and a client that gets another
stream's answer notices.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from lore_core.interfaces import Store
from lore_core.testing.fake_upstream import ECHO_PREFIX

KINDS = ("claude", "opencode", "codex", "sdk")
#: The API each kind speaks.
API_OF = {"claude": "anthropic", "opencode": "chat", "codex": "responses", "sdk": "chat"}
PATHS = {"anthropic": "/v1/messages", "chat": "/v1/chat/completions", "responses": "/v1/responses"}
MODELS = {"claude": "claude-sonnet-4-5", "opencode": "gpt-4.1", "codex": "gpt-5-codex", "sdk": "gpt-4o-mini"}
#: Every text a conversation produces carries its label.
LABEL = re.compile(r"soak-([a-z]\d+-\d+)\b")

_WORDS = (
    (
        "refactor the parser so empty bodies fail early, check the writer queue, explain the "
        "flaky test in the journal module, rename the helper, add a type hint, look at the "
        "stack trace, why does the cache miss, split the function, document the flag"
    )
    .replace(",", "")
    .split()
)


@dataclass
class Conversation:
    label: str
    kind: str
    #: The session id the client sends; ``None``: none (the gateway fingerprints it).
    session_id: str | None
    model: str
    #: The wire items resent every turn (the history).
    history: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0

    @property
    def api(self) -> str:
        return API_OF[self.kind]

    @property
    def cwd(self) -> str:
        # The label is in the project path too, so the items it appears in (Codex's
        # environment item, OpenCode's system message) are tagged like the turns.
        return f"/home/dev/soak-{self.label}"


@dataclass
class Turn:
    label: str
    index: int
    user: str
    answer: str


@dataclass
class Tally:
    """What the clients saw."""

    conversations: dict[str, Conversation] = field(default_factory=dict)
    #: Turns whose stream the client received in full, with the answer it expected.
    acknowledged: list[Turn] = field(default_factory=list)
    #: Seconds from the request sent to the first body byte, per acknowledged turn.
    ttfb: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    #: Failed turns by reason (the conversation is abandoned after one).
    errors: Counter[str] = field(default_factory=Counter)
    #: Complete streams whose answer was not the echo of their own question.
    wrong_answers: list[str] = field(default_factory=list)
    #: Response headers that name a session, as the gateway sent them (if it ever does).
    session_headers: Counter[str] = field(default_factory=Counter)
    #: Turns still in flight when the hard deadline cancelled them.
    cancelled: int = 0
    started: float = 0.0
    ended: float = 0.0

    @property
    def seconds(self) -> float:
        return max(self.ended - self.started, 1e-9)


class TurnFailed(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Conversations and their requests
# ---------------------------------------------------------------------------------------------


def new_conversation(label: str, kind: str) -> Conversation:
    if kind == "claude":
        session: str | None = str(uuid.uuid4())
    elif kind == "opencode":
        session = "ses_" + uuid.uuid4().hex[:26]
    elif kind == "codex":
        session = str(uuid.uuid4())
    else:
        session = None
    conv = Conversation(label, kind, session, MODELS[kind])
    if kind == "opencode":
        conv.history.append(
            {
                "role": "system",
                "content": "You are opencode, an interactive CLI agent.\n<env>\n"
                f"  Working directory: {conv.cwd}\n</env>",
            }
        )
    elif kind == "codex":
        env = f"<environment_context>\n  <cwd>{conv.cwd}</cwd>\n</environment_context>"
        conv.history.append(
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": env}]}
        )
    return conv


def user_text(conv: Conversation, rng: random.Random) -> str:
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 30)))
    return f"soak-{conv.label} turn {conv.turns}: {words} #{rng.getrandbits(48):012x}"


def add_user(conv: Conversation, text: str) -> None:
    if conv.api == "anthropic":
        # Claude Code moves its cache marker to the newest block every turn.
        for item in conv.history:
            if isinstance(item["content"], list):
                for block in item["content"]:
                    block.pop("cache_control", None)
        block = {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
        conv.history.append({"role": "user", "content": [block]})
    elif conv.api == "chat":
        conv.history.append({"role": "user", "content": text})
    else:
        conv.history.append(
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        )


def add_answer(conv: Conversation, text: str) -> None:
    """The answer as the client resends it next turn."""
    if conv.api == "anthropic":
        conv.history.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
    elif conv.api == "chat":
        conv.history.append({"role": "assistant", "content": text})
    else:
        conv.history.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    conv.turns += 1


_PATH_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def request_of(conv: Conversation) -> tuple[str, dict[str, str], bytes]:
    """(path, headers, body) of the conversation's next request: its whole history."""
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    body: dict[str, Any]
    if conv.kind == "claude":
        assert conv.session_id is not None
        headers |= {
            "anthropic-version": "2023-06-01",
            "x-api-key": "sk-ant-soak-not-a-real-key",
            "user-agent": "claude-cli/2.1.0 (external, cli)",
            "x-claude-code-session-id": conv.session_id,
        }
        body = {
            "model": conv.model,
            "max_tokens": 4096,
            "stream": True,
            "system": [
                {"type": "text", "text": f"You are Claude Code.\n - Primary working directory: {conv.cwd}\n"}
            ],
            "tools": [{"name": "Read", "description": "Read a file", "input_schema": _PATH_SCHEMA}],
            "messages": conv.history,
            "metadata": {"user_id": json.dumps({"session_id": conv.session_id})},
        }
    elif conv.kind == "opencode":
        assert conv.session_id is not None
        headers |= {
            "authorization": "Bearer sk-soak-not-a-real-key",
            "user-agent": "opencode/1.0.0",
            "x-session-id": conv.session_id,
        }
        tool = {"type": "function", "function": {"name": "read", "parameters": _PATH_SCHEMA}}
        body = {
            "model": conv.model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": conv.history,
            "tools": [tool],
        }
    elif conv.kind == "codex":
        assert conv.session_id is not None
        headers |= {
            "authorization": "Bearer sk-soak-not-a-real-key",
            "originator": "codex_cli_rs",
            "user-agent": "codex_cli_rs/0.171.0",
            "session-id": conv.session_id,
        }
        body = {
            "model": conv.model,
            "instructions": "You are Codex, a coding agent.",
            "input": conv.history,
            "tools": [{"type": "function", "name": "shell", "parameters": _PATH_SCHEMA, "strict": False}],
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "store": False,
            "stream": True,
            "prompt_cache_key": conv.session_id,
        }
    else:
        headers |= {"authorization": "Bearer sk-soak-not-a-real-key", "user-agent": "OpenAI/Python 1.109.1"}
        body = {"model": conv.model, "stream": True, "messages": conv.history}
    return PATHS[conv.api], headers, json.dumps(body).encode()


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


class _Events:
    """The answer text of one SSE stream, and whether it reached its terminal event."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.text: list[str] = []
        self.terminal = False
        self.error: str | None = None
        self._buffer = b""

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data: "):
                self._data(line[6:].strip())

    def _data(self, data: bytes) -> None:
        if data == b"[DONE]":
            self.terminal = self.api == "chat"
            return
        event = json.loads(data)
        kind = event.get("type")
        if self.api == "anthropic":
            if kind == "content_block_delta":
                self.text.append(event["delta"].get("text", ""))
            elif kind == "message_stop":
                self.terminal = True
            elif kind == "error":
                self.error = json.dumps(event.get("error"))
        elif self.api == "chat":
            for choice in event.get("choices") or []:
                self.text.append((choice.get("delta") or {}).get("content") or "")
        elif kind == "response.output_text.delta":
            self.text.append(event.get("delta", ""))
        elif kind == "response.completed":
            self.terminal = True
        elif kind in ("response.failed", "error"):
            self.error = json.dumps(event)


async def stream_turn(
    http: aiohttp.ClientSession, base_url: str, conv: Conversation, tally: Tally
) -> tuple[str, float]:
    """Send the conversation's next request and read its stream: (answer text, TTFB)."""
    path, headers, body = request_of(conv)
    started = time.perf_counter()
    try:
        async with http.post(base_url + path, data=body, headers=headers) as resp:
            tally.statuses[resp.status] += 1
            for name in resp.headers:
                if "session" in name.lower():
                    tally.session_headers[name.lower()] += 1
            if resp.status != 200:
                raise TurnFailed(f"HTTP {resp.status}")
            events = _Events(conv.api)
            ttfb = 0.0
            async for chunk in resp.content.iter_any():
                if not ttfb:
                    ttfb = time.perf_counter() - started
                events.feed(chunk)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TurnFailed(type(exc).__name__) from None
    except ValueError as exc:
        raise TurnFailed(f"unreadable event: {exc}") from None
    if events.error is not None:
        raise TurnFailed("error event")
    if not events.terminal:
        raise TurnFailed("stream ended before its terminal event")
    return "".join(events.text), ttfb


# ---------------------------------------------------------------------------------------------
# Load
# ---------------------------------------------------------------------------------------------


@dataclass
class Load:
    """How the clients behave."""

    sessions: int = 200  # conversations open at once (one per client slot)
    min_turns: int = 5  # each conversation has between these many turns ...
    max_turns: int = 40  # ... then its slot starts a new one
    think: float = 0.0  # up to this many seconds between a slot's turns (tool time)
    conversations_per_slot: int | None = None  # None: new ones until the deadline
    phase: str = "s"  # first letter of the labels
    seed: int = 1
    request_timeout: float = 120.0


async def run_load(
    base_url: str, load: Load, deadline: float | None = None, tally: Tally | None = None
) -> Tally:
    """Drive ``load.sessions`` concurrent conversations against ``base_url`` until each slot
    has had ``load.conversations_per_slot`` of them, or until ``deadline`` (``time.monotonic``)
    has passed: no turn starts after it, turns in flight finish. Cancelling the task (a hard
    deadline) counts the turns in flight as ``cancelled``; pass ``tally`` to keep what was
    counted until then."""
    tally = tally if tally is not None else Tally()
    tally.started = time.monotonic()
    connector = aiohttp.TCPConnector(limit=load.sessions + 8, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=load.request_timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as http:
        try:
            await asyncio.gather(
                *(_slot(http, base_url, load, slot, deadline, tally) for slot in range(load.sessions))
            )
        finally:
            tally.ended = time.monotonic()
    return tally


def _open(deadline: float | None) -> bool:
    return deadline is None or time.monotonic() < deadline


async def _slot(
    http: aiohttp.ClientSession, base_url: str, load: Load, slot: int, deadline: float | None, tally: Tally
) -> None:
    rng = random.Random(f"{load.seed}-{load.phase}-{slot}")
    number = 0
    while _open(deadline) and (load.conversations_per_slot is None or number < load.conversations_per_slot):
        number += 1
        # Kinds rotate by slot and conversation, so all four run at once from the start.
        kind = KINDS[(slot + number - 1) % len(KINDS)]
        conv = new_conversation(f"{load.phase}{slot:03d}-{number}", kind)
        tally.conversations[conv.label] = conv
        for _ in range(rng.randint(load.min_turns, load.max_turns)):
            if not _open(deadline):
                return
            text = user_text(conv, rng)
            add_user(conv, text)
            try:
                answer, ttfb = await stream_turn(http, base_url, conv, tally)
            except TurnFailed as exc:
                tally.errors[str(exc)] += 1
                break  # a client whose turn failed gives up on the conversation
            except asyncio.CancelledError:
                tally.cancelled += 1
                raise
            if answer != ECHO_PREFIX + text:
                tally.wrong_answers.append(f"{conv.label} turn {conv.turns}: got {answer[:80]!r}")
                break
            tally.acknowledged.append(Turn(conv.label, conv.turns, text, answer))
            tally.ttfb.append(ttfb)
            add_answer(conv, answer)
            if load.think:
                await asyncio.sleep(rng.uniform(0, load.think))


# ---------------------------------------------------------------------------------------------
# The store, checked
# ---------------------------------------------------------------------------------------------


@dataclass
class StoredText:
    session_id: str
    position: int
    role: str
    text: str


@dataclass
class Verdict:
    acknowledged: int = 0
    exactly_once: int = 0
    sessions_stored: int = 0
    messages_stored: int = 0
    #: Acknowledged turns whose user message or answer is not in the store.
    missing: list[str] = field(default_factory=list)
    #: ... stored more than once.
    duplicated: list[str] = field(default_factory=list)
    #: Texts of a conversation under a session that is not its own.
    misfiled: list[str] = field(default_factory=list)
    #: Stored sessions holding the texts of several conversations.
    merged: list[str] = field(default_factory=list)
    #: Conversations whose texts are spread over several stored sessions.
    split: list[str] = field(default_factory=list)
    #: Sessions stored with more than one branch (a resent history not recognised).
    forked: list[str] = field(default_factory=list)
    #: Complete streams that carried another question's answer (streams crossed).
    crossed: list[str] = field(default_factory=list)
    #: Stored texts that name no conversation.
    untagged: int = 0
    #: Turns stored although the client never had their whole answer (cut at the deadline).
    unacknowledged_stored: int = 0
    #: Conversation label -> the stored session id it landed in.
    homes: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        problems = (
            self.missing,
            self.duplicated,
            self.misfiled,
            self.merged,
            self.split,
            self.forked,
            self.crossed,
        )
        return self.acknowledged > 0 and not any(problems)

    def summary(self, limit: int = 5) -> str:
        lines = [
            f"acknowledged {self.acknowledged}, stored exactly once {self.exactly_once}; "
            f"{self.sessions_stored} sessions, {self.messages_stored} messages stored",
        ]
        for name in ("missing", "duplicated", "misfiled", "merged", "split", "forked", "crossed"):
            items: list[str] = getattr(self, name)  # this verdict's own fields, by name
            if items:
                lines.append(f"{name}: {len(items)}, e.g. " + "; ".join(items[:limit]))
        return "\n".join(lines)


async def read_store(store: Any) -> tuple[list[StoredText], dict[str, int]]:
    """Every stored message of an open store, and each session's branch count."""
    texts: list[StoredText] = []
    branches: dict[str, int] = {}
    for session in await store.list_sessions(limit=10_000_000):
        branches[session.id] = session.branch_count
        for m in await store.session_messages(session.id):
            texts.append(StoredText(m.session_id, m.position, m.role, m.text))
    return texts, branches


def read_store_file(
    open_store: Callable[[Path], Store], path: Path
) -> tuple[list[StoredText], dict[str, int]]:
    """:func:`read_store` of a store file no gateway has open any more (``open_store``:
    the store plugin's class, e.g. ``DuckDBStore``: the test kit imports no plugin)."""

    async def read() -> tuple[list[StoredText], dict[str, int]]:
        store = open_store(path)
        await store.open()
        try:
            return await read_store(store)
        finally:
            await store.close()

    return asyncio.run(read())


def verify(tally: Tally, stored: list[StoredText], branches: Mapping[str, int]) -> Verdict:
    """Every acknowledged turn stored exactly once (user message and answer) under its
    conversation's session, and every stored text under the session of the conversation it
    names."""
    verdict = Verdict(acknowledged=len(tally.acknowledged), messages_stored=len(stored))
    verdict.crossed = list(tally.wrong_answers)
    verdict.sessions_stored = len(branches)
    verdict.forked = [f"{sid} ({n} branches)" for sid, n in branches.items() if n > 1]
    where: dict[str, list[str]] = defaultdict(list)  # text -> the sessions it is stored under
    sessions_of: dict[str, set[str]] = defaultdict(set)  # label -> stored sessions
    labels_of: dict[str, set[str]] = defaultdict(set)  # stored session -> labels
    for m in stored:
        where[m.text].append(m.session_id)
        labels = set(LABEL.findall(m.text))
        if not labels:
            verdict.untagged += 1
        for label in labels:
            sessions_of[label].add(m.session_id)
            labels_of[m.session_id].add(label)

    for sid, labels in labels_of.items():
        if len(labels) > 1:
            verdict.merged.append(f"{sid}: {len(labels)} conversations ({', '.join(sorted(labels)[:4])} ...)")
    for label, sids in sessions_of.items():
        conv = tally.conversations.get(label)
        if len(sids) > 1:
            verdict.split.append(f"{label}: {len(sids)} sessions")
        expected = conv.session_id if conv is not None else None
        if expected is None:
            # No id sent: the gateway's fingerprint, whichever session holds its texts.
            if len(sids) == 1:
                verdict.homes[label] = next(iter(sids))
        else:
            verdict.homes[label] = expected
            for sid in sids - {expected}:
                verdict.misfiled.append(f"{label} (sent as {expected}) has texts under {sid}")

    acknowledged_texts = set()
    for turn in tally.acknowledged:
        home = verdict.homes.get(turn.label)
        good = True
        for what, text in (("user", turn.user), ("answer", turn.answer)):
            acknowledged_texts.add(text)
            found = where.get(text, [])
            if not found:
                verdict.missing.append(f"{turn.label} turn {turn.index} {what}")
                good = False
            elif len(found) > 1:
                verdict.duplicated.append(f"{turn.label} turn {turn.index} {what} x{len(found)}")
                good = False
            elif home is not None and found[0] != home:
                verdict.misfiled.append(f"{turn.label} turn {turn.index} {what} under {found[0]}")
                good = False
        verdict.exactly_once += good
    verdict.unacknowledged_stored = sum(
        1
        for m in stored
        if m.role == "user"
        and " turn " in m.text
        and LABEL.match(m.text)
        and m.text not in acknowledged_texts
    )
    return verdict
