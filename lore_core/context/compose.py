"""The layer engine of the gradient context manager (docs/context.md): which messages and
which distillations make up the prompt at layers 0-4.

Everything here is pure and works on the wire-neutral view; :mod:`lore_core.context.manager`
holds the per-session state and does the I/O, and the prompt layers of
:mod:`lore_core.builtin.context_layers` place the parts on the wire.

Rules every layer keeps:

- the *head* (the harness's own preamble: system/developer messages, housekeeping-only
  user messages at the start) is never touched;
- the raw window starts at a *cut point*: a turn start (a user message that carries no tool
  result) or, inside a turn, the start of a model call (an assistant message after the results
  of the calls before it), never between a tool call and its result. A turn within the tail
  budget stays whole; a longer one (a real agent's turn runs to 100K tokens and more) may be
  cut at a model call, and then keeps its opening message (the user's request) before the
  window;
- what a layer changes is pinned when it is chosen (the raw-window cut-off, the point before
  which tool outputs are stripped, the rendered distilled prefix), so the following turns
  only append: the prompt's prefix stays byte-identical and the provider's cache keeps
  hitting until the next re-composition.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from lore_core.context.framing import DATA_NOTICE, escape_delimiters
from lore_core.context.tokens import MESSAGE_OVERHEAD, REQUEST_OVERHEAD, TokenCounter
from lore_core.distill.render import annotate_output, clean, strip_housekeeping
from lore_core.model import TEXT, TOOL_CALL, TOOL_RESULT, Block, Message, RequestView
from lore_core.storage.identity import canonical_message, message_id, shared_history
from lore_core.storage.records import StoredDistillation

#: Layer 2 keeps the tool outputs of this many newest turns.
PROTECTED_TURNS = 2
#: Layer 3 keeps only this many of the newest generation-0 distillations ...
LAYER3_DISTILLATIONS = 5
#: ... and layer 4 this many of the newest distillations.
LAYER4_DISTILLATIONS = 2
#: Layer 4's raw tail: clamp(usable x share, min, max) tokens.
LAYER4_TAIL_SHARE = 0.25
LAYER4_TAIL_MIN = 2_000
LAYER4_TAIL_MAX = 8_000
#: A stripped tool output becomes an annotation of at most this many characters; outputs
#: shorter than that are kept (stripping them would save nothing).
ANNOTATION_CHARS = 600
#: Roles that belong to the harness's preamble, not to the conversation.
PREAMBLE_ROLES = frozenset({"system", "developer"})

#: The distilled prefix is a synthetic user turn: its header frames the logs below as
#: reference data (F9), and each log's text has Lore's delimiters escaped (:func:`render_part`).
PREFIX_HEADER = (
    "[Lore memory] The earlier part of this conversation is not repeated here: Lore distilled "
    "it into the observation logs below (oldest first). The raw messages are stored; the recall "
    "tool, when offered, searches them. " + DATA_NOTICE
)
PREFIX_ACK = (
    "Understood. I have the distilled record of our earlier conversation, as reference data, and "
    "continue from the messages that follow."
)


def tail_budget(usable: int) -> int:
    """Layer 4's raw tail: ``clamp(usable x 0.25, 2K, 8K)`` tokens."""
    return int(min(max(usable * LAYER4_TAIL_SHARE, LAYER4_TAIL_MIN), LAYER4_TAIL_MAX))


# ---------------------------------------------------------------------------------------------
# Analysis of one request
# ---------------------------------------------------------------------------------------------


def _housekeeping_only(msg: Message) -> bool:
    texts = [b for b in msg.blocks if b.type == TEXT]
    return (
        bool(texts)
        and len(texts) == len(msg.blocks)
        and all(not strip_housekeeping(b.text).strip() for b in texts)
    )


def head_length(messages: Sequence[Message]) -> int:
    """How many leading messages are the harness's preamble (kept as they are)."""
    i = 0
    while i < len(messages):
        msg = messages[i]
        if (
            msg.role
            and msg.role not in PREAMBLE_ROLES
            and not (msg.role == "user" and _housekeeping_only(msg))
        ):
            break
        i += 1
    return i


def is_turn_start(msg: Message) -> bool:
    """A user message that answers no tool call: a cut before it splits nothing."""
    return msg.role == "user" and not any(b.type == TOOL_RESULT for b in msg.blocks)


def view_message_ids(session_id: str, messages: Sequence[Message]) -> list[str | None]:
    """The store's id of every message of the view (``None`` for items without a role):
    the same hash chain as :func:`lore_core.storage.identity.chain_ids`, mapped back to view indices
    (consecutive assistant items are one stored message)."""
    return _chain(session_id, messages, 0, None)


@attrs.define
class Analysis:
    """One request, measured: per-message tokens and ids, the head and the turn starts."""

    messages: list[Message]
    ids: list[str | None]
    tokens: list[int]
    #: System prompt, tool definitions and request framing.
    fixed: int
    head: int
    turn_starts: list[int]
    #: Where a raw window may start: the turn starts and the model calls inside turns
    #: (:func:`cut_points`), ascending.
    cuts: list[int] = attrs.field(factory=list)

    @property
    def raw_total(self) -> int:
        return self.fixed + sum(self.tokens)

    @property
    def current_turn(self) -> int:
        """Index of the current turn's first message (the head's end when there is none)."""
        return self.turn_starts[-1] if self.turn_starts else self.head

    @property
    def current_call(self) -> int:
        """Index of the latest cut point: the model call the newest messages answer (or the
        current turn's start); a raw window always keeps what follows it."""
        return max(self.cuts[-1] if self.cuts else self.head, self.current_turn)

    def turn_of(self, index: int) -> int | None:
        """The turn start at or before ``index`` (``None``: before the first turn)."""
        found = None
        for start in self.turn_starts:
            if start > index:
                break
            found = start
        return found

    def index_of(self, message_id: str | None, hint: int = -1) -> int | None:
        if message_id is None:
            return None
        if 0 <= hint < len(self.ids) and self.ids[hint] == message_id:
            return hint
        for i, ident in enumerate(self.ids):
            if ident == message_id:
                return i
        return None


@attrs.define
class Memo:
    """The previous request of a session, measured: a request that resends it unchanged (the
    common case: the client appends a turn) reuses its ids and token counts."""

    messages: list[Message] = attrs.field(factory=list)
    ids: list[str | None] = attrs.field(factory=list)
    tokens: list[int] = attrs.field(factory=list)
    starts: list[bool] = attrs.field(factory=list)  # is_turn_start of each message
    #: The tool definitions and their token count: a session resends the same list on every
    #: turn, and comparing it by value is far cheaper than serialising each tool to count it.
    tools: list[Any] = attrs.field(factory=list)
    tools_tokens: int | None = None


def _tools_tokens(view: RequestView, counter: TokenCounter, memo: Memo | None) -> int:
    if memo is not None and memo.tools_tokens is not None and view.tools == memo.tools:
        return memo.tools_tokens
    tokens = counter.tools(view.tools)
    if memo is not None:
        # A copy: a layer may later replace the view's list (it never changes a tool in place).
        memo.tools, memo.tools_tokens = list(view.tools), tokens
    return tokens


def analyse(view: RequestView, session_id: str, counter: TokenCounter, memo: Memo | None = None) -> Analysis:
    """Measure a request. With ``memo`` (the session's previous request), only the messages
    after the part it shares with it are hashed and counted; ``memo`` is updated."""
    messages = list(view.messages)
    head = head_length(messages)
    fixed = REQUEST_OVERHEAD + (counter.blocks(view.system, "system") if view.system else 0)
    fixed += _tools_tokens(view, counter, memo)
    if memo is None:
        ids = view_message_ids(session_id, messages)
        tokens = [counter.message(m) for m in messages]
        starts = [is_turn_start(m) for m in messages]
    else:
        same = shared_history(messages, memo.messages)
        # A changed message may extend an assistant group that began earlier (consecutive
        # assistant items are one stored message): re-derive from that group's start.
        if same < len(messages):
            while same > 0 and messages[same - 1].role in ("assistant", ""):
                same -= 1
        parent = next((memo.ids[i] for i in range(same - 1, -1, -1) if memo.ids[i] is not None), None)
        ids = memo.ids[:same] + _chain(session_id, messages, same, parent)
        tokens = memo.tokens[:same] + [counter.message(m) for m in messages[same:]]
        starts = memo.starts[:same] + [is_turn_start(m) for m in messages[same:]]
        memo.messages, memo.ids, memo.tokens, memo.starts = messages, ids, tokens, starts
    return Analysis(
        messages=messages,
        ids=ids,
        tokens=tokens,
        fixed=fixed,
        head=head,
        turn_starts=[i for i in range(head, len(messages)) if starts[i]],
        cuts=cut_points(messages, head, starts),
    )


def cut_points(messages: Sequence[Message], head: int, starts: Sequence[bool] | None = None) -> list[int]:
    """Indices where a raw window may start: every turn start, and every model call inside a
    turn (an assistant message whose nearest predecessor with a role is not one), provided no
    tool result at or after it answers a call before it (a call is never separated from its
    result, whatever order a client sends parallel results in). ``starts``: each message's
    :func:`is_turn_start`, when known."""
    n = len(messages)
    if starts is None:
        starts = [is_turn_start(m) for m in messages]
    calls: dict[str, int] = {}
    # +1 from just after a call to its result: candidates there would split the pair.
    delta = [0] * (n + 1)
    candidate = [False] * n
    previous_role = ""
    for i in range(head, n):
        msg = messages[i]
        if msg.role:
            if starts[i] or (msg.role == "assistant" and previous_role != "assistant"):
                candidate[i] = True
            previous_role = msg.role
        for block in msg.blocks:
            if block.type == TOOL_CALL and block.tool_call_id:
                calls[block.tool_call_id] = i
            elif block.type == TOOL_RESULT and block.tool_call_id:
                call = calls.get(block.tool_call_id)
                if call is not None and call < i:
                    delta[call + 1] += 1
                    delta[i + 1] -= 1
    out = []
    open_pairs = 0
    for i in range(n):
        open_pairs += delta[i]
        if candidate[i] and open_pairs == 0:
            out.append(i)
    return out


def _chain(session_id: str, messages: Sequence[Message], start: int, parent: str | None) -> list[str | None]:
    """Ids of ``messages[start:]``, continuing the chain after ``parent``."""
    tail = messages[start:]
    groups: list[tuple[str, list[Block], list[int]]] = []
    for i, msg in enumerate(tail):
        if not msg.role:
            continue
        if msg.role == "assistant" and groups and groups[-1][0] == "assistant":
            groups[-1][1].extend(msg.blocks)
            groups[-1][2].append(i)
        else:
            groups.append((msg.role, list(msg.blocks), [i]))
    ids: list[str | None] = [None] * len(tail)
    for role, blocks, indices in groups:
        parent = message_id(session_id, parent, canonical_message(role, blocks))
        for i in indices:
            ids[i] = parent
    return ids


# ---------------------------------------------------------------------------------------------
# Distillations
# ---------------------------------------------------------------------------------------------


@attrs.frozen
class PrefixPart:
    """One distillation as rendered into the prefix (rendered once, then kept byte-stable)."""

    id: str
    generation: int
    end: float
    text: str
    #: Message ids it covers (a meta-distillation: those of the logs it consolidated).
    covers: frozenset[str]
    #: Consolidated into a meta-distillation: kept in a prefix already sent, never added anew.
    archived: bool = False


def render_part(d: StoredDistillation) -> str:
    kind = "meta-distillation" if d.generation >= 1 else "observation log"
    # Escaped: a log quotes tool output, which must not close its tag or open a Lore block.
    return f'<distillation id="{d.ref}" kind="{kind}">\n{escape_delimiters(clean(d.text))}\n</distillation>'


def prefix_parts(
    distillations: Sequence[StoredDistillation], rendered: dict[str, str] | None = None
) -> list[PrefixPart]:
    """Every distillation of a session (archived ones included) as a part, with the message
    ids each covers resolved through the generations, oldest first. ``rendered`` caches the
    rendered texts by id across calls (distillations are immutable)."""
    rendered = {} if rendered is None else rendered
    by_id = {d.id: d for d in distillations}
    memo: dict[str, frozenset[str]] = {}

    def covers(d: StoredDistillation, depth: int = 0) -> frozenset[str]:
        if d.id in memo:
            return memo[d.id]
        if d.generation == 0 or depth > 8:
            out = frozenset(d.source_ids)
        else:
            found: set[str] = set()
            for source in d.source_ids:
                child = by_id.get(source)
                found |= covers(child, depth + 1) if child is not None else {source}
            out = frozenset(found)
        memo[d.id] = out
        return out

    parts = []
    for d in distillations:
        text = rendered.get(d.id)
        if text is None:
            text = rendered[d.id] = render_part(d)
        parts.append(PrefixPart(d.id, d.generation, d.end or d.created_at, text, covers(d), d.archived))
    return sorted(parts, key=lambda p: (p.end, p.generation, p.id))


# ---------------------------------------------------------------------------------------------
# Compositions
# ---------------------------------------------------------------------------------------------


@attrs.define
class Composition:
    """The plan of one turn's prompt, top to bottom (docs/context.md)."""

    layer: int
    #: Reason the layer was chosen ("fits", "pinned", "overflow", "cost", "forced", ...).
    reason: str = ""
    head: list[Message] = attrs.field(factory=list)
    ltm_baseline: str = ""
    ltm_context: str = ""
    prefix: list[PrefixPart] = attrs.field(factory=list)
    #: Knowledge changes, each to be placed right after its request message (the first).
    deltas: list[tuple[Message, Message]] = attrs.field(factory=list)
    conversation: list[Message] = attrs.field(factory=list)
    #: Local estimate of the whole prompt (uncorrected).
    tokens: int = 0
    # Pinned points (message ids), for the next turn.
    cut_id: str | None = None
    cut_index: int = 0
    strip_before_id: str | None = None
    strip_before_index: int = 0
    #: A window cut inside a turn keeps that turn's opening message (the user's request)
    #: before it: its id and index (``None``: the window starts at a turn start).
    anchor_id: str | None = None
    anchor_index: int | None = None
    #: Raw messages dropped (layer 4) or covered by the prefix.
    dropped: int = 0
    stripped: int = 0

    @property
    def modified(self) -> bool:
        """Whether the prompt differs from the client's: a compressed layer, or knowledge
        added (at layer 0 too: the client's messages as they are, plus the knowledge)."""
        return self.layer > 0 or bool(self.ltm_baseline or self.ltm_context or self.deltas)


def prefix_messages(parts: Sequence[PrefixPart]) -> list[Message]:
    """The synthetic user/assistant pair carrying the distilled prefix: one text block per
    distillation, so appending one leaves the blocks before it byte-identical."""
    if not parts:
        return []
    blocks = [Block(TEXT, text=PREFIX_HEADER)] + [Block(TEXT, text=p.text) for p in parts]
    return [
        Message(role="user", blocks=blocks, synthetic=True),
        Message(role="assistant", blocks=[Block(TEXT, text=PREFIX_ACK)], synthetic=True),
    ]


def prefix_tokens(parts: Sequence[PrefixPart], counter: TokenCounter) -> int:
    """Tokens of the prefix pair, counted part by part (each part's count is cached, so a
    prefix that grows by one part tokenises only that part)."""
    if not parts:
        return 0
    head, ack = _frame()
    return (
        counter.message(head)
        + counter.message(ack)
        + sum(counter.blocks([Block(TEXT, text=p.text)]) - MESSAGE_OVERHEAD for p in parts)
    )


def _frame() -> list[Message]:
    """The prefix pair without parts (the header and the acknowledgement)."""
    return [
        Message(role="user", blocks=[Block(TEXT, text=PREFIX_HEADER)], synthetic=True),
        Message(role="assistant", blocks=[Block(TEXT, text=PREFIX_ACK)], synthetic=True),
    ]


def tool_names(messages: Sequence[Message]) -> dict[str, str]:
    return {
        b.tool_call_id: b.tool_name
        for m in messages
        for b in m.blocks
        if b.type == TOOL_CALL and b.tool_call_id and b.tool_name
    }


def _annotation(block: Block, names: dict[str, str]) -> str | None:
    """The annotation replacing a long tool output, or ``None`` to keep it."""
    if len(block.text) <= ANNOTATION_CHARS:
        return None
    tool = block.tool_name or names.get(block.tool_call_id or "", "tool")
    note = annotate_output(tool, clean(block.text), block.is_error, ANNOTATION_CHARS - 60)
    return f"{note}\n[stripped by Lore; recall can search the full output]"


def _strippable(wire_type: str | None) -> bool:
    # Client tool results only: a server tool's result (Anthropic's web search) belongs to
    # the assistant's own turn and is left alone.
    return wire_type is None or wire_type == "tool_result" or wire_type.endswith("call_output")


def strip_tool_outputs(msg: Message, names: dict[str, str]) -> Message:
    """``msg`` with its long tool outputs replaced by annotations (same tool ids, so every
    call keeps its result). Unchanged messages are returned as they are."""
    notes: dict[int, str] = {}
    for index, block in enumerate(msg.blocks):
        if block.type == TOOL_RESULT and _strippable(block.wire_type):
            note = _annotation(block, names)
            if note is not None:
                notes[index] = note
    if not notes:
        return msg
    blocks = [
        attrs.evolve(b, text=notes[i], raw=_stripped_block_raw(b, notes[i])) if i in notes else b
        for i, b in enumerate(msg.blocks)
    ]
    return Message(role=msg.role, blocks=blocks, raw=_stripped_message_raw(msg, notes), synthetic=False)


def _stripped_block_raw(block: Block, note: str) -> Any:
    raw = block.raw
    if isinstance(raw, dict) and raw.get("type") == "tool_result":  # Anthropic
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": raw.get("tool_use_id"), "content": note}
        if raw.get("is_error"):
            out["is_error"] = True
        return out
    return None if isinstance(raw, dict) and "text" in raw else raw


def _stripped_message_raw(msg: Message, notes: dict[int, str]) -> Any:
    """The wire JSON of a message with stripped outputs, in the message's own shape (the
    codec renders a non-synthetic message from ``raw``, keeping fields it does not know)."""
    raw = msg.raw
    if not isinstance(raw, dict):
        return raw
    note = next(iter(notes.values()))
    if isinstance(raw.get("content"), list) and msg.role == "user":  # Anthropic user message
        content = list(raw["content"])
        for index, text in notes.items():
            if index < len(content):
                content[index] = _stripped_block_raw(msg.blocks[index], text)
        return {**raw, "content": content}
    if msg.role == "tool" and "content" in raw:  # OpenAI Chat tool message
        return {**raw, "content": note}
    if "output" in raw:  # Responses function_call_output and friends
        return {**raw, "output": note}
    return raw


def _turns_back(an: Analysis, count: int) -> int:
    """Index of the start of the ``count``-th newest turn (the head's end if fewer)."""
    if count <= 0:
        return len(an.messages)
    starts = an.turn_starts
    return starts[-count] if len(starts) >= count else an.head


def conversation(
    an: Analysis,
    cut: int,
    strip_before: int,
    counter: TokenCounter,
    names: dict[str, str] | None = None,
    anchor: int | None = None,
) -> tuple[list[Message], int, int]:
    """The raw window ``messages[cut:]`` (after the turn's opening message ``anchor`` when
    the window starts inside a turn) with tool outputs before ``strip_before`` stripped;
    returns (messages, tokens, how many were stripped)."""
    out: list[Message] = [an.messages[anchor]] if anchor is not None else []
    total = an.tokens[anchor] if anchor is not None else 0
    stripped = 0
    if strip_before > cut and names is None:
        names = tool_names(an.messages)
    for i in range(cut, len(an.messages)):
        msg = an.messages[i]
        if i < strip_before:
            new = strip_tool_outputs(msg, names or {})
            if new is not msg:
                stripped += 1
                out.append(new)
                total += counter.message(new)
                continue
        out.append(msg)
        total += an.tokens[i]
    return out, total, stripped


def covered_cut(an: Analysis, covered: frozenset[str] | set[str], whole_turn_tokens: int = 0) -> int:
    """The latest cut point up to which every message is covered by ``covered`` ids (never
    past the current call): the raw window may start there without losing anything. A cut
    inside a turn moves back to the turn's start when the window from there holds at most
    ``whole_turn_tokens``: a short turn is kept whole, only a long one is cut."""
    k = an.head
    n = len(an.messages)
    while k < n and (an.ids[k] is None or an.ids[k] in covered):
        k += 1
    best = an.head
    last = an.current_call
    for start in an.cuts:
        if start <= k and start <= last:
            best = start
        else:
            break
    turn = an.turn_of(best)
    if turn is not None and turn >= an.head and turn != best and sum(an.tokens[turn:]) <= whole_turn_tokens:
        best = turn
    return best


def anchor_of(an: Analysis, cut: int) -> int | None:
    """The opening message kept before a window that starts inside a turn (``None`` when it
    starts at a turn start, or before any turn)."""
    if cut >= len(an.messages) or is_turn_start(an.messages[cut]):
        return None
    turn = an.turn_of(cut)
    return turn if turn is not None and an.head <= turn < cut else None


def choose_parts(
    parts: Sequence[PrefixPart], an: Analysis, layer: int, previous: Sequence[PrefixPart] = ()
) -> list[PrefixPart]:
    """The distillations in the prefix at ``layer``.

    Layers 1-2: the previous prefix kept as it was (append-only) plus the live distillations
    of this branch that cover something it does not; layer 3: only the newest gen-0 logs;
    layer 4: the newest two."""
    on_branch = {i for i in an.ids if i is not None}
    mine = [p for p in parts if not p.archived and p.covers & on_branch]
    if layer >= 4:
        return sorted(mine, key=lambda p: (p.end, p.id))[-LAYER4_DISTILLATIONS:]
    if layer == 3:
        gen0 = [p for p in mine if p.generation == 0]
        return sorted(gen0, key=lambda p: (p.end, p.id))[-LAYER3_DISTILLATIONS:]
    kept = list(previous)
    seen: set[str] = set()
    for p in kept:
        seen |= p.covers
    for p in mine:
        if p.covers - seen:
            kept.append(p)
            seen |= p.covers
    return kept


def covered_ids(parts: Sequence[PrefixPart]) -> frozenset[str]:
    out: set[str] = set()
    for p in parts:
        out |= p.covers
    return frozenset(out)


def plan_layer(
    layer: int,
    an: Analysis,
    parts: Sequence[PrefixPart],
    counter: TokenCounter,
    *,
    usable: int,
    previous_prefix: Sequence[PrefixPart] = (),
    extra_tokens: int = 0,
) -> Composition:
    """A fresh composition at ``layer`` (1-4) for this request.

    ``parts`` are the session's distillations (:func:`prefix_parts`, archived included: a
    gen-0 log archived into a meta-distillation still covers its messages);
    ``previous_prefix`` the prefix pinned so far, kept append-only at layers 1-2;
    ``extra_tokens`` what other parts (LTM blocks) add."""
    live = list(parts)
    if layer <= 2:
        prefix = choose_parts(live, an, layer, previous_prefix)
        if previous_prefix:
            # The append-only prefix keeps the blocks already sent byte-identical (a cache
            # hit up to the first new one); it is rebuilt from the newest state, meta-
            # distillations in place of the logs they consolidated, once that is at most
            # half its size or it outgrew half the window.
            rebuilt = choose_parts(live, an, layer)
            appended_tokens = prefix_tokens(prefix, counter)
            if appended_tokens > usable // 2 or 2 * prefix_tokens(rebuilt, counter) <= appended_tokens:
                prefix = rebuilt
    else:
        prefix = choose_parts(live, an, layer)
    names = tool_names(an.messages)
    whole = tail_budget(usable)
    if layer <= 3:
        covered = covered_ids(prefix) if layer <= 2 else covered_ids(choose_parts(live, an, 2))
        cut = covered_cut(an, covered, whole)
        if layer == 1:
            strip_before = cut
        elif layer == 2:
            strip_before = max(cut, _turns_back(an, PROTECTED_TURNS))
        else:
            strip_before = max(cut, an.current_turn)
    else:
        # Emergency: whole turns from the newest back while they fit the tail budget. A
        # current turn larger than the budget keeps its opening message and, from its newest
        # model call back, the calls that fit (the newest always, whatever its size).
        budget = whole
        cut = an.current_turn
        size = sum(an.tokens[cut:])
        if size > budget:
            cut = an.current_call
            size = sum(an.tokens[cut:]) + (an.tokens[an.current_turn] if cut > an.current_turn else 0)
            for start in reversed([c for c in an.cuts if an.current_turn < c < an.current_call]):
                add = sum(an.tokens[start:cut])
                if size + add > budget:
                    break
                size += add
                cut = start
        else:
            for start in reversed(an.turn_starts[:-1]):
                add = sum(an.tokens[start:cut])
                if size + add > budget:
                    break
                size += add
                cut = start
        strip_before = cut
    anchor = anchor_of(an, cut)
    convo, convo_tokens, stripped = conversation(an, cut, strip_before, counter, names, anchor)
    head = an.messages[: an.head]
    total = (
        an.fixed + sum(an.tokens[: an.head]) + prefix_tokens(prefix, counter) + convo_tokens + extra_tokens
    )
    return Composition(
        layer=layer,
        head=list(head),
        prefix=list(prefix),
        conversation=convo,
        tokens=total,
        cut_id=an.ids[cut] if cut < len(an.ids) else None,
        cut_index=cut,
        strip_before_id=an.ids[strip_before] if strip_before < len(an.ids) else None,
        strip_before_index=strip_before,
        anchor_id=an.ids[anchor] if anchor is not None else None,
        anchor_index=anchor,
        dropped=cut - an.head - (1 if anchor is not None else 0),
        stripped=stripped,
    )


def replay_pinned(
    pinned: Composition, an: Analysis, counter: TokenCounter, *, extra_tokens: int = 0
) -> Composition | None:
    """The pinned composition of an earlier turn applied to this request: the same prefix,
    the same cut-off and strip point, the new messages appended. ``None`` when the request
    is not a continuation of it (another branch, a side request)."""
    cut = an.index_of(pinned.cut_id, pinned.cut_index)
    if cut is None or cut < an.head:
        return None
    if pinned.strip_before_id is None:
        strip_before = cut
    else:
        found = an.index_of(pinned.strip_before_id, pinned.strip_before_index + (cut - pinned.cut_index))
        if found is None:
            return None
        strip_before = found
    anchor = None
    if pinned.anchor_id is not None:
        hint = (pinned.anchor_index or 0) + (cut - pinned.cut_index)
        anchor = an.index_of(pinned.anchor_id, hint)
        if anchor is None or anchor >= cut:
            return None
    convo, convo_tokens, stripped = conversation(an, cut, strip_before, counter, anchor=anchor)
    total = (
        an.fixed
        + sum(an.tokens[: an.head])
        + prefix_tokens(pinned.prefix, counter)
        + convo_tokens
        + extra_tokens
    )
    return attrs.evolve(
        pinned,
        reason="pinned",
        head=an.messages[: an.head],
        conversation=convo,
        tokens=total,
        cut_index=cut,
        strip_before_index=strip_before,
        anchor_index=anchor,
        dropped=cut - an.head - (1 if anchor is not None else 0),
        stripped=stripped,
    )


def raw_composition(an: Analysis, reason: str = "fits") -> Composition:
    """Layer 0: the request as the client sent it."""
    return Composition(
        layer=0,
        reason=reason,
        head=an.messages[: an.head],
        conversation=an.messages[an.head :],
        tokens=an.raw_total,
    )


def unchanged_start_tokens(
    an: Analysis, current: Composition, candidate: Composition, counter: TokenCounter
) -> int:
    """Tokens at the start of ``candidate`` that are byte-identical to ``current``, so the
    provider reads them from the cache when the prompt changes: the system prompt, tools and
    head messages, and the distilled prefix when ``candidate`` keeps ``current``'s as it was
    (layers 1-2 append to it)."""
    kept = an.fixed + sum(an.tokens[: an.head])
    if current.prefix and candidate.prefix[: len(current.prefix)] == current.prefix:
        kept += prefix_tokens(current.prefix, counter)
    return kept


def least_layer(
    an: Analysis,
    parts: Sequence[PrefixPart],
    counter: TokenCounter,
    *,
    usable: int,
    fits: Callable[[int], bool],
    min_layer: int = 1,
    previous_prefix: Sequence[PrefixPart] = (),
    extra_tokens: int = 0,
) -> Composition:
    """The least compression (from ``min_layer``, at least 1) whose composition fits; layer
    4 when none does (the emergency layer is sent whatever its size)."""
    plan: Composition | None = None
    for layer in range(max(min_layer, 1), 5):
        plan = plan_layer(
            layer,
            an,
            parts,
            counter,
            usable=usable,
            previous_prefix=previous_prefix,
            extra_tokens=extra_tokens,
        )
        if fits(plan.tokens):
            return plan
    assert plan is not None
    return plan
