"""Records of the temporal store, and the rules every backend shares: message identity,
secret masking and turning a proxied exchange into records.

The kernel owns these so that every backend agrees on them: a message resent by any client
to any backend gets the same id, and the same text is indexed for search.

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
  branch is kept;
* consecutive assistant messages are one logical message, because the Responses API resends
  one response as several items (reasoning, message, function calls) that were assembled as
  one assistant message.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
import re
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any

import attrs

from lore_core.model import IMAGE, OTHER, TEXT, THINKING, TOOL_CALL, TOOL_RESULT, Block, Exchange, Message
from lore_core.storage.housekeeping import strip_housekeeping
from lore_core.storage.passages import call_source

#: Bumped when the identity rule changes (it never should: ids are stored forever).
IDENTITY_VERSION = 1
#: Session state key of the persisted minimum context layer (see docs/context.md).
FORCE_MIN_LAYER = "forceMinLayer"

ORIGIN_REQUEST = "request"
ORIGIN_RESPONSE = "response"


class StoreUnavailable(Exception):
    """The store cannot be used (locked, corrupt, unwritable); the message is one line that
    says what and where, fit for the gateway log and ``/health``."""


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


@attrs.define
class Project:
    """A project is identified by the directory (or name) the harness reported."""

    id: str
    name: str = ""
    created_at: float = 0.0
    last_seen_at: float = 0.0


@attrs.define
class Session:
    """One conversation of one client. Upserted on every exchange: ``created_at`` keeps the
    earliest value, ``updated_at``/``model``/``harness`` the latest, ``title`` the first."""

    id: str
    project: str = ""
    harness: str = ""
    model: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    title: str = ""
    # Filled in by the store when read.
    message_count: int = 0
    branch_count: int = 0


@attrs.define
class ProjectSummary:
    """A project as ``/lore/api/projects`` and the dashboard show it (:meth:`Store.project_summaries`):
    its sessions and their messages, its current, alive knowledge entries scoped to it, what
    its sessions spent (the sum of their spend state) and its last activity (its latest
    session's ``updated_at``, else the project's ``last_seen_at``)."""

    project: str
    sessions: int = 0
    messages: int = 0
    knowledge: int = 0
    spend_usd: float = 0.0
    last_activity: float = 0.0


@attrs.define
class StoredMessage:
    """One message, stored once. ``blocks`` keep the structure (block types, tool names and
    ids, tool input); ``text`` is the searchable rendering, with obvious secrets masked."""

    id: str
    session_id: str
    parent_id: str | None
    position: int
    role: str
    blocks: list[dict[str, Any]] = attrs.field(factory=list)
    text: str = ""
    model: str | None = None
    usage: dict[str, int] | None = None
    harness: str = ""
    project: str = ""
    api: str = ""
    created_at: float = 0.0
    # False for a partial assistant message (client disconnect, stream cut, error event).
    complete: bool = True
    # "request" (the client sent it) or "response" (assembled from the upstream's answer).
    origin: str = ORIGIN_REQUEST
    stop_reason: str | None = None
    error: str | None = None
    #: On an answer: the context layer (0-4) its request was sent at. ``None``: not known
    #: (not composed by the gateway, a request message, or stored before the stores kept it).
    context_layer: int | None = None

    @property
    def tool_names(self) -> list[str]:
        return [b["tool_name"] for b in self.blocks if b.get("tool_name")]


@attrs.define
class SearchHit:
    id: str
    session_id: str
    project: str
    role: str
    score: float
    text: str
    position: int = 0
    created_at: float = 0.0
    #: Which passage of the item matched (:mod:`lore_core.storage.passages`): ``text`` is then that
    #: passage, ``start``/``end`` its characters in the item's text and ``tool`` the tool
    #: it came from. ``None`` from a store that searches whole items.
    passage: int | None = None
    start: int | None = None
    end: int | None = None
    tool: str | None = None
    #: The command, path or pattern of the tool call the passage belongs to.
    source: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "session": self.session_id,
            "project": self.project,
            "role": self.role,
            "score": round(float(self.score), 6),
            "text": self.text,
            "position": self.position,
            "created_at": self.created_at,
        }
        if self.passage is not None:
            out["passage"] = self.passage
            out["span"] = [self.start, self.end]
        if self.tool:
            out["tool"] = self.tool
        if self.source:
            out["source"] = self.source
        return out


@attrs.frozen
class PassageRef:
    """A passage a vector search found, before its text is read
    (:meth:`lore_core.interfaces.VectorStore.nearest_passages`): its item's id as stored (a
    distillation's without the ``d:`` prefix: :meth:`~lore_core.interfaces.VectorStore.read_passages`
    tells the kinds apart), the passage's index and the cosine similarity."""

    item: str
    passage: int
    score: float


#: Search hits and ids of distillations carry this prefix (``lore show d:<id>``), so they never
#: collide with message ids and a reader can tell the two apart.
DISTILLATION_PREFIX = "d:"
#: The ``role`` of a search hit that is a distillation.
DISTILLATION_ROLE = "distillation"


@attrs.define
class StoredDistillation:
    """One observation log (generation 0) or meta-distillation (generation 1), append-only.

    ``source_ids`` are the message ids (gen-0) or distillation ids (gen-1) it was made from:
    "undistilled" is derived from them, so a crash between the worker call and the write
    re-does the segment and a repeated write of the same segment is skipped (the id is a
    hash of session, generation and sources). Archived rows were consolidated into a newer
    generation; they stay stored and searchable.
    """

    id: str
    session_id: str
    generation: int
    text: str
    source_ids: list[str] = attrs.field(factory=list)
    project: str = ""
    created_at: float = 0.0
    # Time range of the source messages (epoch seconds).
    start: float = 0.0
    end: float = 0.0
    # "llm" or "extractive".
    method: str = "llm"
    # Estimated tokens of the source as sent, of the input the worker read, of the output.
    source_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    compression_ratio: float = 0.0
    worker_provider: str | None = None
    worker_model: str | None = None
    archived: bool = False

    @property
    def ref(self) -> str:
        """The id as shown to users and search: ``d:<id>``."""
        return DISTILLATION_PREFIX + self.id

    def as_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["ref"] = self.ref
        return out


def distillation_id(session_id: str, generation: int, source_ids: Sequence[str]) -> str:
    """Deterministic: the same sources distilled twice (a retry after a crash) get the same
    id, so the second write is a no-op rather than a duplicate."""
    data = "\x00".join(["d1", session_id, str(generation), *source_ids])
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:24]


# ---------------------------------------------------------------------------------------------
# Vectors
# ---------------------------------------------------------------------------------------------

#: Kinds of items a store embeds (``EmbeddingItem.kind``). Knowledge and entities add theirs
#: here when their tiers arrive; a store then only has to list them in ``pending_embeddings``.
VECTOR_MESSAGE = "message"
VECTOR_DISTILLATION = "distillation"
VECTOR_KINDS = (VECTOR_MESSAGE, VECTOR_DISTILLATION)


@attrs.define
class EmbeddingItem:
    """A stored item that has no vectors yet for some embedding model.

    ``cursor`` is the store's own order (DuckDB: the row's ``seq``): ``pending_embeddings``
    returns items in ascending cursor order, and a store may treat "embedded" as "cursor at
    or below the highest one written", so callers write vectors for a *prefix* of what it
    returned, in order. A message comes with its ``role`` and stored ``blocks``, which its
    passages are cut from (:func:`lore_core.storage.passages.message_passages`); a distillation with
    its ``text``."""

    kind: str
    id: str
    text: str
    session_id: str = ""
    project: str = ""
    created_at: float = 0.0
    cursor: int = 0
    role: str = ""
    blocks: list[dict[str, Any]] = attrs.field(factory=list)


@attrs.define
class ItemVectors:
    """The vectors of one item: one or more per embedded passage (the passage's own and its
    facets'), ``passages[i]`` the index of the passage ``vectors[i]`` belongs to (empty:
    ``0, 1, 2, ...``); none for an item without text (it is still marked embedded)."""

    item: EmbeddingItem
    vectors: list[Sequence[float]] = attrs.field(factory=list)
    passages: list[int] = attrs.field(factory=list)

    def passage_indexes(self) -> list[int]:
        return list(self.passages) if self.passages else list(range(len(self.vectors)))


class VectorDimensionError(ValueError):
    """Vectors of another size than the model's index holds: an index never mixes sizes."""


@attrs.frozen
class SchemaMigration:
    """What a store's :meth:`~lore_core.interfaces.Store.open` found and left: its schema
    version before (0: a new store) and after. ``lore store migrate`` reports it."""

    before: int
    after: int

    @property
    def applied(self) -> list[int]:
        """The versions this open applied, in order."""
        return list(range(self.before + 1, self.after + 1))


@attrs.frozen
class StoreInventory:
    """The keys of what a store holds that no other read lists (``lore store copy`` walks
    them): every session id with state (``""``, the gateway's own, and pseudo-sessions
    included), every run of the event log, every project with a team binding, every team
    with a team-wide policy."""

    state_sessions: tuple[str, ...] = ()
    runs: tuple[tuple[str, str], ...] = ()
    bound_projects: tuple[str, ...] = ()
    policy_teams: tuple[str, ...] = ()


@attrs.define
class WriteBatch:
    """What the writer hands a store in one call; the store applies it in one transaction.

    Applying a batch is idempotent: a message id already stored is skipped (the first
    version stored wins), sessions and projects are upserted.
    """

    projects: list[Project] = attrs.field(factory=list)
    sessions: list[Session] = attrs.field(factory=list)
    messages: list[StoredMessage] = attrs.field(factory=list)

    def __bool__(self) -> bool:
        return bool(self.projects or self.sessions or self.messages)

    def extend(self, other: WriteBatch) -> None:
        self.projects.extend(other.projects)
        self.sessions.extend(other.sessions)
        self.messages.extend(other.messages)

    def merged(self) -> WriteBatch:
        """One record per id: sessions and projects merged, and for a message seen twice the
        response-assembled version wins (it carries usage, model and stop reason)."""
        projects: dict[str, Project] = {}
        for p in self.projects:
            old = projects.get(p.id)
            projects[p.id] = p if old is None else merge_project(old, p)
        sessions: dict[str, Session] = {}
        for s in self.sessions:
            old_s = sessions.get(s.id)
            sessions[s.id] = s if old_s is None else merge_session(old_s, s)
        messages: dict[str, StoredMessage] = {}
        for m in self.messages:
            old_m = messages.get(m.id)
            if old_m is None or (m.origin == ORIGIN_RESPONSE and old_m.origin != ORIGIN_RESPONSE):
                messages[m.id] = m
        return WriteBatch(list(projects.values()), list(sessions.values()), list(messages.values()))


def normal_project(path: str) -> str | None:
    """``path`` as projects are stored: an absolute directory with no ``.`` or ``..``
    segments and no doubled or trailing slashes (:func:`os.path.normpath`); ``None`` when
    it is not an absolute path or holds a NUL. Lexical: symlinks are not resolved, so a
    project keeps the name its harness gives it (``realpath`` would file memory already
    stored under a symlinked path under a second name), and ``..`` climbs the path as
    written. What may be written into the directory is checked where it is written
    (:func:`lore_core.knowledge.lorefile.unsafe_to_write`)."""
    if not path or "\x00" in path or not os.path.isabs(path):
        return None
    normal = os.path.normpath(path)
    # POSIX lets normpath keep a leading "//" (an implementation-defined root): one "/".
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def merge_project(old: Project, new: Project) -> Project:
    return Project(
        id=old.id,
        name=old.name or new.name,
        created_at=min(old.created_at, new.created_at) if old.created_at else new.created_at,
        last_seen_at=max(old.last_seen_at, new.last_seen_at),
    )


def merge_session(old: Session, new: Session) -> Session:
    """The upsert rule every backend applies (``old`` is what is stored)."""
    newer = new.updated_at >= old.updated_at
    return Session(
        id=old.id,
        project=old.project or new.project,
        harness=(new.harness if newer and new.harness else old.harness) or new.harness,
        model=(new.model if newer and new.model else old.model) or new.model,
        created_at=min(old.created_at, new.created_at) if old.created_at else new.created_at,
        updated_at=max(old.updated_at, new.updated_at),
        title=old.title or new.title,
    )


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


# ---------------------------------------------------------------------------------------------
# Secrets
# ---------------------------------------------------------------------------------------------

# Provider and platform key shapes, passwords in URLs and headers, private key blocks and
# bearer headers pasted into content. Deliberately conservative: a false positive only
# masks text in the store, but masking prose or code would make memory worse, so generic
# prefixes (hf_, npm_) need key-like characters and assignments need key-like values.


@attrs.frozen
class _SecretShape:
    kind: str
    pattern: re.Pattern[str]
    #: Substrings the pattern needs (any one), in lower case: the pattern only runs on
    #: texts whose lower-case form has one.
    hints: tuple[str, ...]
    #: Whether a key of this shape may be cut by a line break or a zero-width character
    #: (matched on the text with such breaks removed, see ``_KEY_BREAK``).
    cut: bool


def _shape(kind: str, pattern: str, *hints: str, flags: int = 0, cut: bool = True) -> _SecretShape:
    """A shape whose match is masked; with a group named ``s``, only that group is (the
    password of a URL, the value of an assignment), so the text around it stays readable."""
    return _SecretShape(kind, re.compile(pattern, flags), tuple(h.lower() for h in hints), cut)


def _word(prefix: str, rest: str) -> str:
    """``\\b<prefix><rest>``, written to start with the literal: a pattern that starts with
    one is searched for it at C speed, one that starts with ``\\b`` is tried at every
    position (20 times slower on text without keys)."""
    literal = re.escape(prefix)
    return rf"{literal}(?<!\w{literal}){rest}"


# Earlier shapes win where two overlap (a glpat- token that is also a URL password is
# masked as the GitLab token).
_SECRET_SHAPES: tuple[_SecretShape, ...] = (
    _shape(
        "private-key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY"
        r"(?: BLOCK)?-----",
        "PRIVATE KEY",
        flags=re.S,
    ),
    _shape("anthropic-key", _word("sk-ant-", r"[A-Za-z0-9_\-]{16,}"), "sk-"),
    _shape("openai-key", _word("sk-", r"(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"), "sk-"),
    _shape("groq-key", _word("gsk_", r"[A-Za-z0-9]{20,}"), "gsk_"),
    # hf_ and npm_ start identifiers too (hf_hub_download, npm_config_registry): a token
    # is one run of letters and digits, not all lower case.
    _shape("huggingface-token", _word("hf_", r"(?=[a-z]*[A-Z0-9])[A-Za-z0-9]{20,}(?![A-Za-z0-9_])"), "hf_"),
    _shape("gitlab-token", _word("glpat-", r"[A-Za-z0-9_\-]{20,}"), "glpat-"),
    _shape("npm-token", _word("npm_", r"(?=[a-z]*[A-Z0-9])[A-Za-z0-9]{30,}(?![A-Za-z0-9_])"), "npm_"),
    _shape("aws-access-key", _word("AKIA", r"[0-9A-Z]{16}\b"), "AKIA"),
    _shape("aws-access-key", _word("ASIA", r"[0-9A-Z]{16}\b"), "ASIA"),
    _shape(
        "aws-secret-key",
        r"(?i)secret_?access_?key[\"']?\s*[:=]\s*[\"']?(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        "ecret_access_key", "ecretaccesskey",
    ),
    _shape("github-token", _word("gh", r"(?:[pousr]_[A-Za-z0-9]{30,}|ub_pat_[A-Za-z0-9_]{40,})"),
           "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    _shape("slack-token", _word("xox", r"[abprs]-[A-Za-z0-9\-]{10,}"), "xox"),
    _shape("google-api-key", _word("AIza", r"[0-9A-Za-z_\-]{35}\b"), "AIza"),
    _shape("stripe-key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{20,}", "k_live_", "k_test_"),
    _shape("jwt", _word("eyJ", r"[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), "eyJ"),
    # scheme://user:password@host (postgres, mysql, mongodb+srv, redis, amqp, https, ...):
    # the password only. Not a placeholder ($VAR, ${VAR}, <password>, {pw}, ***, the word
    # "password"), nor what is masked already.
    _shape(
        "url-password",
        r"://[^\s:/@\[\]]*:(?P<s>(?![$<{*\[])(?!(?i:password|passwd|pass|pwd|secret|x+)@)[^\s/@]+)@",
        "://",
        cut=False,
    ),
    _shape(
        "basic-auth",
        r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?basic\s+(?P<s>[A-Za-z0-9+/]{8,}={0,2})",
        "uthorization",
        cut=False,
    ),
    # Azure's api-key header and API_KEY=... assignments: a value of letters and digits
    # with both in it (a function call or a word is not a key).
    _shape(
        "api-key",
        r"(?i)(?<![a-z0-9])api[-_]?key[\"']?\s*[:=]\s*[\"']?"
        r"(?P<s>(?=[a-z]*[0-9])(?=[0-9]*[a-z])[a-z0-9]{20,})(?![a-z0-9_\-])",
        "pi-key", "pi_key", "pikey",
    ),
    _shape("bearer-token", r"(?i)(?<=\bbearer )[A-Za-z0-9_\-\.=+/]{20,}", "earer "),
)  # fmt: skip

# Substrings at least one shape needs, looked for in the text's lower-case form (one
# copy, ~1 ms per MB, halves the hints): most texts contain none, and `in` is far cheaper
# than the regex searches (which were most of the writer's CPU time).
_SECRET_HINTS = tuple(dict.fromkeys(h for shape in _SECRET_SHAPES for h in shape.hints))

# A key cut in two: zero-width characters between two of its characters, or a line break
# (with any zero-width characters around it) followed by a line that is only the rest of
# the key (a hard wrap). Removed before matching, and masked with the key when it is one.
_ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"
_KEY_CHAR = r"[A-Za-z0-9_\-+/=]"
_KEY_BREAK = re.compile(
    rf"(?<={_KEY_CHAR})(?:[{_ZERO_WIDTH}]*\r?\n[{_ZERO_WIDTH}]*"
    rf"(?=(?P<tail>{_KEY_CHAR}+)[ \t\"'`,;)\]}}]*(?:\r?\n|\Z))|[{_ZERO_WIDTH}]+(?={_KEY_CHAR}))"
)


def _key_like(tail: str) -> bool:
    """Whether a line that is one word may be the rest of a key: four characters or more,
    with a digit, a ``_-+/=``, or a capital after a small letter. A word on a line of its
    own after a key ("Done", "ok") is not joined to it."""
    if len(tail) < 4:
        return False
    if not tail.isalpha():
        return True
    return any(a.islower() and b.isupper() for a, b in itertools.pairwise(tail))


def _without_zero_width(text: str) -> str:
    for char in _ZERO_WIDTH:
        if char in text:
            text = text.replace(char, "")
    return text


def _may_hold_secret(text: str) -> bool:
    lowered = _without_zero_width(text.lower())  # a zero-width character may cut a hint
    # A plain loop: ``any()`` over a generator cost more than the scans on the request path.
    for hint in _SECRET_HINTS:
        if hint in lowered:
            return True
    return False


def _without_key_breaks(text: str) -> tuple[str, list[tuple[int, int]]]:
    """``text`` with its key breaks removed, and where each piece of that starts (there, and
    in ``text``): empty when there was nothing to remove."""
    pieces: list[str] = []
    starts: list[tuple[int, int]] = []
    at = flat_at = 0
    for cut in _KEY_BREAK.finditer(text):
        tail = cut.group("tail")
        if tail is not None and not _key_like(tail):
            continue
        pieces.append(text[at : cut.start()])
        starts.append((flat_at, at))
        flat_at += cut.start() - at
        at = cut.end()
    if not pieces:
        return text, []
    pieces.append(text[at:])
    starts.append((flat_at, at))
    return "".join(pieces), starts


def _in_original(starts: list[tuple[int, int]], index: int) -> int:
    piece = bisect.bisect_right(starts, (index, sys.maxsize)) - 1
    return index if piece < 0 else starts[piece][1] + index - starts[piece][0]


def _overlaps(spans: list[tuple[int, int, str]], start: int, end: int) -> bool:
    """Whether ``start:end`` overlaps one of ``spans`` (sorted, not overlapping each other)."""
    at = bisect.bisect_left(spans, (start,))
    return (at > 0 and spans[at - 1][1] > start) or (at < len(spans) and spans[at][0] < end)


def _mask_hinted(text: str) -> str:
    """:func:`mask_secrets` of a text :func:`_may_hold_secret` said yes to."""
    lowered = _without_zero_width(text.lower())
    flat: str | None = None  # the text without key breaks, made when a shape needs it
    starts: list[tuple[int, int]] = []
    spans: list[tuple[int, int, str]] = []  # what to mask, in ``text``, in order
    for shape in _SECRET_SHAPES:
        if not any(hint in lowered for hint in shape.hints):
            continue
        if shape.cut and flat is None:
            flat, starts = _without_key_breaks(text)
        subject = flat if shape.cut and flat is not None else text
        named = "s" in shape.pattern.groupindex
        for match in shape.pattern.finditer(subject):
            start, end = match.span("s") if named else match.span()
            if subject is flat and starts:
                # A match across a break masks the break with the key.
                start, end = _in_original(starts, start), _in_original(starts, end - 1) + 1
            if end > start and not _overlaps(spans, start, end):
                bisect.insort(spans, (start, end, shape.kind))
    if not spans:
        return text
    out: list[str] = []
    at = 0
    for start, end, kind in spans:
        out += [text[at:start], f"[REDACTED:{kind}]"]
        at = end
    out.append(text[at:])
    return "".join(out)


def mask_secrets(text: str) -> str:
    """Replace obvious secrets with ``[REDACTED:<kind>]``. Cheap when there are none."""
    if not text or not _may_hold_secret(text):
        return text
    return _mask_hinted(text)


def map_json(value: Any, leaf: Callable[[Any], Any], drop: frozenset[str] = frozenset()) -> Any:
    """A copy of the JSON ``value`` with ``leaf`` applied to every scalar and the members
    named in ``drop`` left out of every object. Iterative: a request body may nest as deep
    as the JSON parser accepts (~1,000 levels), which a recursive copy cannot follow."""
    if not isinstance(value, list | dict):
        return leaf(value)
    root: Any = [] if isinstance(value, list) else {}
    stack = [(value, root)]
    while stack:
        source, target = stack.pop()
        pairs = enumerate(source) if isinstance(source, list) else source.items()
        for key, item in pairs:
            if isinstance(target, dict) and key in drop:
                continue
            if isinstance(item, list | dict):
                copy: Any = [] if isinstance(item, list) else {}
                stack.append((item, copy))
            else:
                copy = leaf(item)
            if isinstance(target, list):
                target.append(copy)
            else:
                target[key] = copy
    return root


def _mask_scalar(value: Any) -> Any:
    return mask_secrets(value) if isinstance(value, str) else value


def mask_deep(value: Any) -> Any:
    """:func:`mask_secrets` applied to every string inside a JSON value."""
    return map_json(value, _mask_scalar)


# ---------------------------------------------------------------------------------------------
# Identity
# ---------------------------------------------------------------------------------------------

# Keys that carry transport or cache bookkeeping, not content.
_VOLATILE_KEYS = frozenset({"cache_control", "citations", "signature", "status", "id"})


def _strip_volatile(value: Any) -> Any:
    return map_json(value, _same, _VOLATILE_KEYS)


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
# Exchange -> records
# ---------------------------------------------------------------------------------------------

# Inline payloads (base64 images, documents) are not kept: the store keeps the structure.
_MAX_RAW_STRING = 2048


def _elided_and_masked(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _MAX_RAW_STRING:
        return f"[{len(value)} chars elided]"
    return _mask_scalar(value)


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
        out["raw"] = map_json(block.raw, _elided_and_masked, _VOLATILE_KEYS)
    return out


#: The model's recall tool (:mod:`lore_core.recall.tool`). Its results are copies of stored
#: memories: kept in the history, left out of search, so a recall never finds earlier
#: recalls' echoes of what it is looking for.
RECALL_TOOL_NAME = "recall"


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
            if _may_hold_secret(b.text):
                hinted = True
                masked[id(b.text)] = _mask_hinted(b.text)
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
    if hinted or any(_may_hold_secret(p) for p in parts if id(p) not in masked):
        text = _mask_hinted(text)
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
