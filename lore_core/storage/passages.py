"""Passages: the units everything searchable is indexed and recalled as.

A stored message stays whole (it is the ground truth), but search works on *passages*: each
message, and each distillation, is cut into pieces of bounded size on block, tool-call and
line boundaries. Real tool outputs are 10-50K characters and runs of assistant steps are
stored as one message of 100K+; ranked whole, such an item matches almost any query, and a
snippet of it shows one window of many facts. A passage is small enough that its words are
about one thing, and the result the model reads can hold many of them.

The rules live here, in the kernel, so every backend agrees on them (as on message ids):
full-text and vector indexes both hold passages, keyed ``(item id, passage index)``, so
rank fusion fuses the same units. Changing the rules changes :data:`PASSAGE_RULES`; stores
rebuild their full-text index and the vector index starts over (``lore reindex``). Changing
only the event tags (:mod:`~lore_core.storage.tags`) changes :data:`TAG_RULES`: the full-text
index is rebuilt, vectors stay; changing only which texts get vectors
(:mod:`~lore_core.storage.facets`) changes :data:`FACET_RULES`: the vector index starts over,
full text stays.

Each passage's text starts with a header line saying where it came from::

    [assistant -> Bash] go test ./cmd/entire/cli/strategy/ -run TestFoo
    [tool Bash, exit 1: go test ./cmd/entire/cli/strategy/ -run TestFoo] part 2/3
    --- FAIL: TestFoo (0.00s)

so a passage of a 40K test log still says which command produced it and whether it
failed. The body is a slice of the item's text (:func:`item_text`), which renders tool calls
readably (:mod:`~lore_core.storage.toolcalls`: ``key: value`` lines, never JSON-escaped: an
escaped ``\\n`` before a word glues an ``n`` to it for every tokenizer) and drops harness
housekeeping (``<system-reminder>`` and friends).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from lore_core.model import TEXT, THINKING, TOOL_CALL, TOOL_RESULT
from lore_core.storage.housekeeping import strip_housekeeping
from lore_core.storage.tags import (
    FILE_EDITED,
    TEST_FAILURE,
    TEST_FAILURE_LINE,
    action_tags,
    evidence_tags,
    introduced_tests,
    messages_before,
    outcome_tags,
)
from lore_core.storage.toolcalls import (
    RECALL_TOOL_NAME,
    CallInfo,
    call_source,
    exit_code,
    one_line,
    render_call,
    result_text,
)
from lore_core.toolkinds import DEFAULT_TOOL_KINDS, ToolKind, installed, tool_kind

#: Names the passage rules: where passages are cut, their numbering and their text. Stores
#: keep it beside their indexes; a different value means the indexes were cut by other
#: rules and are rebuilt (vectors too: the store is embedded again).
PASSAGE_RULES = "p1"
#: Names the event-tag rules (the ``#tags`` of passage headers). A full-text index searches
#: tags as words, so it keeps :data:`FULLTEXT_RULES` and is rebuilt when either changes;
#: a vector index keeps :data:`VECTOR_RULES`, without the tags (a tag in a header hardly
#: moves an embedding), so a new tag never makes a store embed everything again.
TAG_RULES = "t3"
FULLTEXT_RULES = f"{PASSAGE_RULES}.{TAG_RULES}"
#: Names the facet rules: which texts of an item get vectors (every passage said, a tool
#: call's or output's first piece: :func:`~lore_core.storage.facets.embedded_body`) and
#: which sentences of a passage get vectors of their own
#: (:func:`~lore_core.storage.facets.facets`). A vector index keeps :data:`VECTOR_RULES`
#: and is embedded again when either changes; an index of other facet rules numbers the
#: same passages, so recall searches it until the new one has caught up.
FACET_RULES = "f2"
VECTOR_RULES = f"{PASSAGE_RULES}.{FACET_RULES}"


def fulltext_rules() -> str:
    """What a full-text index keeps: :data:`FULLTEXT_RULES`, and a digest of the tools the
    plugins added to the tool-kind table (``lore_tool_kinds``), whose tags the index holds:
    installing or removing such a plugin rebuilds the full-text index (vectors stay)."""
    added = sorted(
        (name, kind.value) for name, kind in installed().items() if DEFAULT_TOOL_KINDS.get(name) != kind
    )
    if not added:
        return FULLTEXT_RULES
    return f"{FULLTEXT_RULES}.k{hashlib.sha256(json.dumps(added).encode()).hexdigest()[:8]}"


#: A passage grows line by line to about this many characters ...
TARGET_CHARS = 700
#: ... and never past this (a longer line is cut at a space).
MAX_CHARS = 1000
#: A paragraph break ends a passage once it holds at least this much ...
_PARAGRAPH_MIN = TARGET_CHARS // 2
#: ... and a passage shorter than this takes the next line even past the target (a tool
#: call's name line is not a passage of its own).
_MIN_PIECE = 200

# Codex prints the command a still-running session belongs to at the top of its output.
_RAN_COMMAND = re.compile(r"\ACommand: (.+)")


@attrs.frozen
class Passage:
    """One passage of an item. ``start``/``end`` are the body's characters in
    :func:`item_text` of the item; ``text`` is the header line and the body."""

    index: int
    text: str
    start: int
    end: int
    #: What the body is: ``text``, ``thinking``, ``tool_call``, ``tool_result``,
    #: ``distillation``.
    block: str
    tool: str | None = None
    #: The command, path or pattern of the tool call (for a call and for its result).
    source: str | None = None
    #: Events the passage records (its part's: every passage of one output has them).
    tags: tuple[str, ...] = ()

    @property
    def body(self) -> str:
        return self.text.split("\n", 1)[1] if "\n" in self.text else ""


# ---------------------------------------------------------------------------------------------
# Blocks -> parts
# ---------------------------------------------------------------------------------------------


@attrs.define
class _Part:
    kind: str  # text | thinking | tool_call | tool_result
    body: str
    tool: str | None = None
    source: str | None = None
    is_error: bool = False
    tags: tuple[str, ...] = ()
    code: int | None = None
    #: Test functions a file edit introduces (for the evidence tag of its passages).
    new_tests: frozenset[str] = frozenset()


def _shown(part: _Part, text: str) -> list[str]:
    """The evidence tags of ``text``, a passage of ``part``
    (:func:`~lore_core.storage.tags.evidence_tags`)."""
    return evidence_tags(part.kind, text, part.tool, part.source, part.new_tests)


def _parts(role: str, blocks: Sequence[Mapping[str, Any]], calls: Mapping[str, CallInfo]) -> Iterator[_Part]:
    """The message's parts, one block at a time (a cut that stops early reads no further)."""
    for b in blocks:
        kind = b.get("type")
        if kind in (TEXT, THINKING):
            body = strip_housekeeping(str(b.get("text") or "")).strip()
            if body:
                yield _Part(str(kind), body)
        elif kind == TOOL_CALL:
            tool = str(b.get("tool_name") or "tool")
            tool_input = b.get("tool_input")
            source = call_source(tool_input)
            tags = tuple(dict.fromkeys(action_tags(tool, tool_input, source)))
            new_tests = frozenset(introduced_tests(tool_input)) if FILE_EDITED in tags else frozenset()
            rendered = render_call(tool, tool_input)
            yield _Part(TOOL_CALL, rendered, tool, source, tags=tags, new_tests=new_tests)
        elif kind == TOOL_RESULT:
            # Decided by the record alone, so an item's passages are numbered the same
            # whatever is known of earlier calls.
            if b.get("tool_name") == RECALL_TOOL_NAME:
                continue
            call = calls.get(str(b.get("tool_call_id") or ""))
            # Not ``tool``: that name holds a call's tool (always a string) above.
            result_tool: str | None = b.get("tool_name") or (call.tool if call else None)
            body = strip_housekeeping(result_text(str(b.get("text") or ""))).strip()
            if not body:
                continue
            source = b.get("tool_source") or (call.source if call else None)
            ran = _RAN_COMMAND.match(body)
            if ran and (not source or tool_kind(result_tool) is ToolKind.POLL):
                source = one_line(ran.group(1))  # a poll of a running command says which
            is_error = bool(b.get("is_error"))
            code = exit_code(body)
            tags = tuple(dict.fromkeys(outcome_tags(result_tool, source, is_error, code, body)))
            yield _Part(TOOL_RESULT, body, result_tool, source, is_error, tags, code)


#: Between two parts in :func:`item_text` (a passage's span counts it).
_PART_GAP = "\n\n"


def item_text(
    role: str, blocks: Sequence[Mapping[str, Any]], calls: Mapping[str, CallInfo] | None = None
) -> str:
    """The text passages are cut from (and their spans refer to): the blocks rendered
    readably, one after the other, a blank line between two blocks."""
    return _PART_GAP.join(p.body for p in _parts(role, blocks, calls or {}))


# ---------------------------------------------------------------------------------------------
# Cutting
# ---------------------------------------------------------------------------------------------


def _pieces(body: str) -> list[tuple[int, int]]:
    """``body`` cut into spans of at most :data:`MAX_CHARS`, on line boundaries, growing to
    about :data:`TARGET_CHARS` and ending early at a paragraph break past half of that."""
    spans: list[tuple[int, int]] = []
    start = end = 0
    for line_start, line_end in _line_spans(body):
        size = end - start
        if size:
            grown = line_end - start
            # Whether the line is blank is asked only where it decides (most lines of a long
            # output do not): cutting runs on every stored message and on every recall read.
            if (
                (grown > TARGET_CHARS and size >= _MIN_PIECE)
                or grown > MAX_CHARS
                or (size >= _PARAGRAPH_MIN and not body[line_start:line_end].strip())
            ):
                spans.append((start, end))
                start = line_start
        elif not body[line_start:line_end].strip():
            start = line_end + 1
            end = start
            continue
        end = line_end
    if end > start:
        spans.append((start, end))
    return [(s, e) for s, e in spans if body[s:e].strip()]


def _line_spans(body: str) -> Iterable[tuple[int, int]]:
    """Each line's span (without its newline); a line longer than :data:`TARGET_CHARS`
    comes as several spans cut at spaces (so a short lead and one span still fit in
    :data:`MAX_CHARS`)."""
    at = 0
    for line in body.split("\n"):
        end = at + len(line)
        while end - at > TARGET_CHARS:
            cut = body.rfind(" ", at + TARGET_CHARS // 2, at + TARGET_CHARS)
            cut = cut if cut > at else at + TARGET_CHARS
            yield at, cut
            at = cut + 1 if body[cut : cut + 1] == " " else cut
        yield at, end
        at = end + 1


def prose_header(role: str) -> str:
    """How a passage of a message's own prose (not a tool call, output or reasoning) starts:
    ``[assistant]``, then its part number and tags if any."""
    return f"[{role}]"


def only_recall_calls(text: str) -> bool:
    """Whether a passage is nothing but the model's own recall calls (``[assistant ->
    recall]``): their input is a question asked of memory, not a memory. The passage rules
    index them (leaving them out would renumber every store's passages), so recall drops
    them from its answers."""
    return text.startswith(f"[assistant -> {RECALL_TOOL_NAME}]")


def reasoning_header(role: str) -> str:
    """How a passage of a message's reasoning starts: ``[assistant thinking]``, then its
    part number and tags if any."""
    return f"[{role} thinking]"


def _header(role: str, part: _Part, piece: int, pieces: int, tags: Sequence[str] = ()) -> str:
    where = f" part {piece}/{pieces}" if pieces > 1 else ""
    tags = "".join(f" #{t}" for t in tags)
    if part.kind == TOOL_RESULT:
        status = f", exit {part.code}" if part.code else (", error" if part.is_error else "")
        source = f": {part.source}" if part.source else ""
        return f"[tool {part.tool or 'output'}{status}{source}]{where}{tags}"
    if part.kind == TOOL_CALL:
        return f"[{role} -> {part.tool}]{where}{tags}"
    if part.kind == THINKING:
        return f"{reasoning_header(role)}{where}{tags}"
    return f"{prose_header(role)}{where}{tags}"


def cut(
    role: str,
    blocks: Sequence[Mapping[str, Any]],
    calls: Mapping[str, CallInfo] | None = None,
    until: int | None = None,
) -> list[Passage]:
    """The passages of one message (``blocks`` in the stored record shape).

    Every block starts a new passage, except that short text, thinking and tool-call blocks
    following each other share one (``Now I'll commit`` and the ``git commit`` call read
    best together); a tool result is always passages of its own. ``calls`` names the tool
    calls of earlier messages by id (a result's record usually names its tool itself).
    ``until``: the passages up to that index are enough (reading one passage of a long
    item); the cut stops once they are made, and they are the ones a whole cut makes."""
    parts: list[_Part] = []
    offsets: list[int] = []  # each part's start in item_text
    passages: list[Passage] = []
    # A run of short non-result parts, merged: (first part index, last part index).
    pending: list[int] = []

    def flush() -> None:
        if not pending:
            return
        first, last = pending[0], pending[-1]
        lead = parts[first]
        if first == last:
            pending.clear()
            emit(first)
            return
        start, end = offsets[first], offsets[last] + len(parts[last].body)
        tools = [parts[i] for i in pending if parts[i].kind == TOOL_CALL]
        body = _PART_GAP.join(parts[i].body for i in pending)  # as in item_text: spans hold
        members = [parts[i] for i in pending]
        tags = tuple(dict.fromkeys(t for p in members for t in (*p.tags, *_shown(p, p.body))))
        head = (
            f"[{role} -> {', '.join(dict.fromkeys(str(p.tool) for p in tools))}]"
            + "".join(f" #{t}" for t in tags)
            if tools
            else _header(role, lead, 1, 1)
        )
        passages.append(
            Passage(
                len(passages), f"{head}\n{body}", start, end,
                tools[0].kind if tools else lead.kind,
                tools[0].tool if tools else None, tools[0].source if tools else None, tags,
            )
        )  # fmt: skip
        pending.clear()

    def emit(i: int) -> None:
        part = parts[i]
        spans = _pieces(part.body)
        # With ``until``, the part's passages past it are not made (the tags of the one
        # after the last made still count: see messages_before).
        made = len(spans) if until is None else max(0, min(len(spans), until + 1 - len(passages)))
        # The part's own tags mark its first passage (one event, one candidate); what a
        # passage shows marks that passage.
        tagged = [
            [*(part.tags if n == 0 else ()), *_shown(part, part.body[s:e])]
            for n, (s, e) in enumerate(spans[: made + 1])
        ]
        for n in range(1, len(tagged)):
            if TEST_FAILURE in tagged[n] and TEST_FAILURE not in tagged[n - 1]:
                found = TEST_FAILURE_LINE.search(part.body, spans[n][0], spans[n][1])
                if found is not None and messages_before(part.body, spans[n - 1], spans[n], found):
                    tagged[n - 1].append(TEST_FAILURE)
        for n, (s, e) in enumerate(spans[:made], start=1):
            body = part.body[s:e]
            tags = tuple(dict.fromkeys(tagged[n - 1]))
            head = _header(role, part, n, len(spans), tags)
            passages.append(
                Passage(
                    len(passages), f"{head}\n{body}", offsets[i] + s, offsets[i] + e,
                    part.kind, part.tool, part.source, tags,
                )
            )  # fmt: skip

    size = 0
    at = 0
    for i, part in enumerate(_parts(role, blocks, calls or {})):
        parts.append(part)
        offsets.append(at)
        at += len(part.body) + len(_PART_GAP)
        short = part.kind != TOOL_RESULT and len(part.body) <= TARGET_CHARS
        if short and size + len(part.body) <= TARGET_CHARS:
            pending.append(i)
            size += len(part.body)
            continue
        flush()
        size = 0
        if short:
            pending.append(i)
            size = len(part.body)
        else:
            emit(i)
        if until is not None and len(passages) > until:
            return passages
    flush()
    return passages


def message_passages(
    role: str,
    blocks: Sequence[Mapping[str, Any]],
    text: str = "",
    calls: Mapping[str, CallInfo] | None = None,
    until: int | None = None,
) -> list[Passage]:
    """A stored message's passages: cut from its blocks; a message whose blocks hold no
    text (written by hand, without the records the writer makes) from its ``text``.
    ``until``: at least the passages up to that index (:func:`cut`)."""
    passages = cut(role, blocks, calls, until)
    if not passages and not blocks and text.strip():
        return cut_text(text, label=role)
    return passages


def cut_text(text: str, label: str = "distillation") -> list[Passage]:
    """The passages of a plain text (a distillation): line-bounded pieces, each headed
    ``[label]`` and, where the text has one, the ``## date`` section it falls in."""
    passages: list[Passage] = []
    spans = _pieces(text)
    for n, (s, e) in enumerate(spans, start=1):
        section = text.rfind("\n## ", 0, s + 1)
        date = ""
        if section >= 0 or text.startswith("## "):
            line = text[section + 1 if section >= 0 else 0 :].split("\n", 1)[0]
            if not text[s:e].lstrip().startswith("## "):
                date = " " + line.lstrip("# ").strip()
        where = f" part {n}/{len(spans)}" if len(spans) > 1 else ""
        passages.append(Passage(len(passages), f"[{label}{date}]{where}\n{text[s:e]}", s, e, label))
    return passages


class CallMemo:
    """Tool calls seen, by id, for recent sessions: resolves the tool of a result whose
    record does not name it (stores written before results were annotated), when messages
    are cut in the order they were stored."""

    def __init__(self, max_sessions: int = 64, max_calls: int = 4096) -> None:
        self.max_sessions = max_sessions
        self.max_calls = max_calls
        self._sessions: OrderedDict[str, dict[str, CallInfo]] = OrderedDict()

    def cut(
        self, session_id: str, role: str, blocks: Sequence[Mapping[str, Any]], text: str = ""
    ) -> list[Passage]:
        calls = self._sessions.pop(session_id, {})
        for b in blocks:
            if b.get("type") == TOOL_CALL and b.get("tool_call_id"):
                calls[str(b["tool_call_id"])] = CallInfo(
                    str(b.get("tool_name") or "tool"), call_source(b.get("tool_input"))
                )
        while len(calls) > self.max_calls:
            calls.pop(next(iter(calls)))
        self._sessions[session_id] = calls
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return message_passages(role, blocks, text, calls)


def passage_key(item_id: str, index: int) -> str:
    """The id of one passage in an index: ``<item id>:<index>``."""
    return f"{item_id}:{index}"


def split_key(key: str) -> tuple[str, int | None]:
    """``"abc:3"`` -> ``("abc", 3)``; a key without a passage index -> ``(key, None)``."""
    item, sep, index = key.rpartition(":")
    if sep and index.isdigit() and item:
        return item, int(index)
    return key, None
