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
only the event tags changes :data:`TAG_RULES`: the full-text index is rebuilt, vectors stay;
changing only which sentences get vectors of their own (:func:`facets`) changes
:data:`FACET_RULES`: the vector index starts over, full text stays.

Each passage's text starts with a header line saying where it came from::

    [assistant -> Bash] go test ./cmd/entire/cli/strategy/ -run TestFoo
    [tool Bash, exit 1: go test ./cmd/entire/cli/strategy/ -run TestFoo] part 2/3
    --- FAIL: TestFoo (0.00s)

so a passage of a 40K test log still says which command produced it and whether it
failed. The body is a slice of the item's text (:func:`item_text`), which renders tool calls
readably (``key: value`` lines, never JSON-escaped: an escaped ``\\n`` before a word glues
an ``n`` to it for every tokenizer) and drops harness housekeeping (``<system-reminder>``
and friends).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from lore_core.distill.facts import prose_sentences, states_decision
from lore_core.model import TEXT, THINKING, TOOL_CALL, TOOL_RESULT
from lore_core.storage.housekeeping import strip_housekeeping
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
#: call's or output's first piece: :func:`embedded_body`) and which sentences of a passage
#: get vectors of their own (:func:`facets`). A vector index keeps :data:`VECTOR_RULES`
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
#: A FAIL line this close to a passage's start has its messages in the passage before.
_FAILURE_LEAD = 200
#: Longest "source" (command, path, pattern) a header repeats.
SOURCE_CHARS = 200

#: The recall tool's own results are copies of other memories: never indexed (see
#: :data:`lore_core.storage.convert.RECALL_TOOL_NAME`).
_RECALL_TOOL = "recall"

# Keys of a tool call's input that say what it did, best first.
SOURCE_KEYS = (
    "command", "cmd", "file_path", "path", "filePath", "notebook_path", "pattern", "url",
    "query", "description", "subject", "title", "prompt", "name",
)  # fmt: skip
# Input keys that are plumbing, not content (Codex's exec limits, Claude Code's timeouts).
_NOISE_KEYS = frozenset(
    {"yield_time_ms", "max_output_tokens", "timeout", "run_in_background", "session_id", "login", "shell"}
)
# The files a patch (Codex's apply_patch) touches.
_PATCH_FILE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", re.M)
# A shell tool's exit status as harnesses print it ("Exit code 1", Codex's "Process exited
# with code 1").
_EXIT = re.compile(r"^(?:Exit code|Process exited with code)\s+(-?\d+)\s*$", re.M)


# ---------------------------------------------------------------------------------------------
# Facets: the sentences of what a person wrote, embedded one by one
# ---------------------------------------------------------------------------------------------
#
# People state facts in passing: "I'm looking for workout playlists ... By the way, I take
# Zumba on Tuesdays and Thursdays". One vector of the whole passage is about its main topic
# (playlists); a question about the aside ("how many fitness classes do I attend?") ranks it
# far down. So a passage the user wrote also gets one vector per sentence, each stored under
# the passage's key: the passage is found as well as its best sentence matches (the vector
# index keeps a passage's best hit). Measured on LongMemEval (benchmarks/README.md): evidence
# turns the vectors ranked 15th-194th by the whole passage come first by a sentence. Only
# user text: it is short next to tool output (what a coding session mostly stores), so the
# cost is small, and the assistant's long answers would multiply it.

#: A sentence shorter than this is joined to the next one ("Thanks!" says nothing alone).
FACET_MIN_CHARS = 40
#: Sentences embedded per passage at most (the first ones: a pasted log's lines are not
#: sentences worth a vector each) ...
MAX_FACETS = 12
#: ... and per item (a long paste in a user message is many passages).
MAX_FACETS_PER_ITEM = 24


def sentences(text: str, min_chars: int = FACET_MIN_CHARS) -> list[str]:
    """The prose sentences of ``text`` (:func:`~lore_core.distill.facts.prose_sentences`:
    code blocks and table rows left out), each at least ``min_chars`` long (short ones
    joined to the next; a short tail to the last)."""
    out: list[str] = []
    current = ""
    for piece in prose_sentences(text):
        current = f"{current} {piece}" if current else piece
        if len(current) >= min_chars:
            out.append(current)
            current = ""
    if current:
        if out:
            out[-1] = f"{out[-1]} {current}"
        else:
            out.append(current)
    return out


def _prose(sentence: str) -> bool:
    """Words rather than markup or data: not a tag (a client's ``<command-name>`` echo), at
    least half of it letters (a pasted log line of numbers and ids, or a path, is not; a
    pasted line of code often is, and gets its vector)."""
    letters = sum(c.isalpha() for c in sentence)
    return not sentence.startswith("<") and letters * 2 >= len(sentence)


#: A tool call's or output's first piece is embedded up to this many characters: its
#: header and first lines say what it is; the rest is found by its words.
TOOL_EMBED_CHARS = 600
_PIECE = re.compile(r" part (\d+)/\d+")


def embedded_body(passage: Passage) -> str | None:
    """The text of ``passage`` that gets a vector, ``None`` for none. What was said (the
    user's and assistant's words, reasoning, distillations) is embedded whole. A tool call
    or output is embedded by its first piece only, cut to :data:`TOOL_EMBED_CHARS`: they are
    62% of what real coding sessions store, their meaning is in their header and first
    lines, and a question about the rest names its words (a path, an error, a number),
    which full-text search finds. Leaving the later pieces out changed none of 262
    real-session answers and embeds about 2.3 times less (docs/recall.md, "Indexing")."""
    if passage.block not in (TOOL_CALL, TOOL_RESULT):
        return passage.text
    piece = _PIECE.search(passage.text.split("\n", 1)[0])
    if piece is not None and int(piece.group(1)) > 1:
        return None
    return passage.text[:TOOL_EMBED_CHARS]


def facets(role: str, passage: Passage) -> list[str]:
    """The texts embedded beside ``passage``'s own, under its key: the sentences of a
    passage of the user's text when it has more than one, those that are prose, at most
    :data:`MAX_FACETS`. Tool output, tool calls, the assistant's words and distillations
    have none."""
    if role != "user" or passage.block != TEXT:
        return []
    found = sentences(passage.body)
    if len(found) < 2:
        return []
    return [s for s in found if _prose(s)][:MAX_FACETS]


# ---------------------------------------------------------------------------------------------
# Events: what a tool call did, what its output shows
# ---------------------------------------------------------------------------------------------
#
# A passage of a tool call or result is tagged with the events it records, as ``#tag`` words
# in its header: "which test failed first", "what did we commit after X", "which file did we
# create" are questions about events, which word overlap with the question rarely finds (a
# test log never says "the first test to fail"). Recall reads the tags back
# (:mod:`lore_core.recall.intent`). Tags are single tokens, so a full-text search for one
# finds exactly the passages that carry it.

TEST_FAILURE = "testfailure"
FAILED_COMMAND = "failedcommand"
LINT_FINDING = "lintfinding"
BUILD_ERROR = "builderror"
GIT_COMMIT = "gitcommit"
DIFFSTAT = "diffstat"
PULL_REQUEST = "pullrequest"
BRANCH_CREATED = "branchcreated"
FILE_EDITED = "fileedited"
FILE_CREATED = "filecreated"
TEST_WRITTEN = "testwritten"
TASK_PLAN = "taskplan"
SUBAGENT = "subagent"
WEB_LOOKUP = "weblookup"
CODE_SEARCH = "codesearch"
TICKET = "ticketcreated"
#: What was said states a decision or a root cause ("we go with X instead of Y").
DECISION = "decision"
#: ``exitcode<N>`` tags the output of a command that exited with status N (N != 0).
EXIT_CODE = "exitcode"

_TAG = re.compile(r"#([a-z0-9]+)")
_TEST_FAILURE = re.compile(
    r"^[ \t]*--- FAIL: \S+|^FAIL[ \t]+\S+|^FAILED[ \t]+\S+|^[ \t]*✕ |^E[ \t]+AssertionError|"
    r"^[ \t]*\d+ failed\b|\bTest\w+ FAILED\b|^[ \t]*\u25cf .+ \u203a ",  # jest: a bullet, "suite > test"
    re.M,
)
# path:line:col: message (linter) — golangci-lint, ruff, flake8, eslint (compact) and friends.
_LINT_LINE = re.compile(r"^[^\s:]+\.\w+:\d+(?::\d+)?:? [^\n]* \(([a-z][\w-]*)\)[ \t]*$", re.M)
_LINT_TOOLS = re.compile(r"lint|ruff|flake8|pylint|eslint|mypy|staticcheck|\bvet\b|clippy|shellcheck")
# A compiler's error line: path:line:col: message (go, tsc, rustc/gcc style), or a marker.
_COMPILE_LINE = re.compile(
    r"^[^\s:]+\.(?:go|ts|tsx|js|jsx|rs|java|kt|c|cc|cpp|h|hpp|cs|swift):\d+:\d+: \S|"
    r"\berror(?:\[E\d+\]| TS\d+): |^SyntaxError: |\[build failed\]",
    re.M,
)
# What the patterns above need to match at all.
_FAILURE_HINTS = ("FAIL", "\u2715", "AssertionError", " failed", "\u25cf")
# Go: a failing test's "--- FAIL: TestX" line, and the "x_test.go:NN: message" lines its run
# printed before it.
_GO_FAIL = re.compile(r"[ \t]*--- FAIL: (\S+)")
_GO_TEST_LINE = re.compile(r"^[ \t]+\w+_test\.go:\d+: ", re.M)
_LOCATION = re.compile(r":\d+:")
_COMMIT_RESULT = re.compile(r"^\[[^\]\s]+(?: \([^)]*\))? [0-9a-f]{7,40}\] ", re.M)
_DIFFSTAT = re.compile(r"\b\d+ files? changed\b")
# A test function's name where it is defined: Go, Python, Rust (#[test] fn is not matched).
_TEST_NAME = re.compile(r"\bfunc (?:\([^)]*\)\s*)?(Test\w+|Benchmark\w+|Fuzz\w+)\(|\bdef (test_\w+)\(")
_GIT_COMMIT = re.compile(r"\bgit\b[^|;&\n]*\bcommit\b")
_PR_CREATE = re.compile(r"\bgh pr create\b|\bhub pull-request\b")
_NEW_BRANCH = re.compile(r"\bgit (?:checkout|switch) (?:-b|-c|--create)\b|\bgit branch (?!-)[\w./-]+")
# Codex prints the command a still-running session belongs to at the top of its output.
_RAN_COMMAND = re.compile(r"\ACommand: (.+)")
_SHELL_SEARCH = re.compile(r"(?:^|[;&|(]\s*)(?:rg|grep|ag|ack|git grep)\s")


def _new_tests(tool_input: Any) -> set[str]:
    """Test functions a file edit introduces: defined in what it writes and not in what it
    replaces (an edit of an existing test is not a new test)."""
    if isinstance(tool_input, str):  # a patch: its added lines
        added = "\n".join(line[1:] for line in tool_input.splitlines() if line.startswith("+"))
        removed = "\n".join(line[1:] for line in tool_input.splitlines() if line.startswith("-"))
    elif isinstance(tool_input, Mapping):
        added = "\n".join(str(tool_input.get(k) or "") for k in ("new_string", "content", "new_str", "code"))
        edits = tool_input.get("edits")
        if isinstance(edits, list):
            added += "\n".join(str(e.get("new_string") or "") for e in edits if isinstance(e, Mapping))
        removed = "\n".join(str(tool_input.get(k) or "") for k in ("old_string", "old_str"))
        if isinstance(edits, list):
            removed += "\n".join(str(e.get("old_string") or "") for e in edits if isinstance(e, Mapping))
    else:
        return set()
    return _test_names(added) - _test_names(removed)


def _test_names(code: str) -> set[str]:
    return {go or py for go, py in _TEST_NAME.findall(code)}


def _action_tags(tool: str, tool_input: Any, source: str | None) -> list[str]:
    """What a tool call did (tags of its first passage)."""
    name = tool.lower()
    kind = tool_kind(name)
    patch = tool_input if isinstance(tool_input, str) and kind is ToolKind.PATCH else ""
    tags: list[str] = []
    if kind is ToolKind.WRITE or "*** Add File" in patch:
        tags += [FILE_CREATED, FILE_EDITED]  # creating a file is editing it, too
    elif kind is ToolKind.EDIT or "*** Update File" in patch:
        tags.append(FILE_EDITED)
    if kind in (ToolKind.PLAN, ToolKind.TODO):
        tags.append(TASK_PLAN)
    if kind is ToolKind.AGENT:
        tags.append(SUBAGENT)
    if kind is ToolKind.WEB or "web_search" in name:
        tags.append(WEB_LOOKUP)
    if kind is ToolKind.SEARCH:
        tags.append(CODE_SEARCH)
    if _creates_ticket(name):
        tags.append(TICKET)
    command = source or ""
    if command:
        if _PR_CREATE.search(command):
            tags.append(PULL_REQUEST)
        if _NEW_BRANCH.search(command):
            tags.append(BRANCH_CREATED)
        if _SHELL_SEARCH.search(command):
            tags.append(CODE_SEARCH)
    return tags


def _creates_ticket(tool: str) -> bool:
    """An issue tracker's create call (Linear's and Jira's MCP servers, and the like)."""
    return ("linear" in tool or "jira" in tool) and ("create" in tool or "save" in tool)


def _outcome_tags(
    tool: str | None, source: str | None, is_error: bool, code: int | None, body: str
) -> list[str]:
    """How a command ended (tags of its output's first passage)."""
    tags: list[str] = []
    if code or is_error:
        tags.append(FAILED_COMMAND)
        if code:
            tags.append(f"{EXIT_CODE}{abs(code)}")
    elif tool and _creates_ticket(tool.lower()):
        tags.append(TICKET)  # the output names the ticket (ENT-163): the call does not
    command = (source or "").lower()
    if _PR_CREATE.search(command) or (source is None and "/pull/" in body and "github.com" in body):
        tags.append(PULL_REQUEST)
    return tags


def _evidence_tags(part: _Part, text: str) -> list[str]:
    """What one passage of a part shows: a test failing, a lint finding, a compile error, a
    commit being made, a new test being written. Only the passages holding the evidence
    carry these (a 40K log's failing test is in one of its passages)."""
    tags: list[str] = []
    if part.kind in (TEXT, THINKING):
        if states_decision(text):
            tags.append(DECISION)
    elif part.kind == TOOL_RESULT:
        command = (part.source or "").lower()
        if tool_kind(part.tool) in (ToolKind.READ, ToolKind.SEARCH) or _SHELL_SEARCH.search(command):
            return tags  # file contents and search hits show code, not events
        # Each pattern behind a cheap test of a substring it needs: cutting runs on every
        # stored message (the regexes alone were three quarters of the cost).
        if any(hint in text for hint in _FAILURE_HINTS) and _TEST_FAILURE.search(text):
            tags.append(TEST_FAILURE)
        located = _LOCATION.search(text) is not None
        linted = _LINT_TOOLS.search(command) or not command
        if located and ")" in text and linted and _LINT_LINE.search(text):
            tags.append(LINT_FINDING)
        elif (located or "rror" in text or "[build failed]" in text) and _COMPILE_LINE.search(text):
            if not _LINT_TOOLS.search(command):
                tags.append(BUILD_ERROR)
        if "] " in text and ("\n[" in text or text.startswith("[")) and _COMMIT_RESULT.search(text):
            tags.append(GIT_COMMIT)
            if _DIFFSTAT.search(text):
                tags.append(DIFFSTAT)
    elif part.kind == TOOL_CALL and part.new_tests:
        if any(re.search(rf"\b{re.escape(name)}\(", text) for name in part.new_tests):
            tags.append(TEST_WRITTEN)
    return tags


def _messages_before(
    body: str, before: tuple[int, int], span: tuple[int, int], failure: re.Match[str]
) -> bool:
    """Whether the passage ``before`` holds the messages of the ``failure`` found in
    ``span``. A test runner prints a failure's messages before its FAIL line: so when that
    line opens its passage; and in Go's layout when the failing test's run began in an
    earlier passage (its ``=== RUN   TestX`` is not in this one) and the passage before
    holds ``x_test.go:NN: message`` lines (seen on real sessions: long log lines pushed the
    FAIL line deep into the next passage, and the failure was shown without the message
    that said why)."""
    if failure.start() - span[0] < _FAILURE_LEAD:
        return True
    go = _GO_FAIL.match(failure.group(0))
    if go is None or f"=== RUN   {go.group(1)}" in body[span[0] : failure.start()]:
        return False
    return _GO_TEST_LINE.search(body, before[0], before[1]) is not None


_EVIDENCE = {
    TEST_FAILURE: _TEST_FAILURE,
    LINT_FINDING: _LINT_LINE,
    BUILD_ERROR: _COMPILE_LINE,
    GIT_COMMIT: _COMMIT_RESULT,
    DIFFSTAT: _DIFFSTAT,
}


def evidence_offset(text: str, events: Iterable[str]) -> int | None:
    """Where in a passage's text the first of ``events`` that it shows is (the FAIL line of
    a test log, the commit line of git's output); ``None`` when none shows or the event is
    not one a line shows."""
    wanted = [e for e in events if e in _EVIDENCE and e in tags_of(text)]
    found = [m.start() for e in wanted if (m := _EVIDENCE[e].search(text)) is not None]
    return min(found) if found else None


def tags_of(text: str) -> list[str]:
    """The event tags in a passage's header line."""
    header = text.split("\n", 1)[0]
    return _TAG.findall(header) if header.startswith("[") else []


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


@attrs.frozen
class CallInfo:
    """What a tool result needs to know of the call that produced it."""

    tool: str
    source: str | None = None


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def _one_line(text: str, limit: int = SOURCE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def call_source(tool_input: Any) -> str | None:
    """The part of a call's input that says what it did: the command, the path, ..."""
    if isinstance(tool_input, str):
        patched = _PATCH_FILE.search(tool_input)
        if patched:  # a patch: the files it touches
            files = list(dict.fromkeys(m.group(1).strip() for m in _PATCH_FILE.finditer(tool_input)))
            return _one_line(", ".join(files))
        first = next((line for line in tool_input.splitlines() if line.strip()), "")
        return _one_line(first) if first else None
    if isinstance(tool_input, Mapping):
        for key in SOURCE_KEYS:
            value = tool_input.get(key)
            if isinstance(value, str) and value.strip():
                return _one_line(value)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                return _one_line(" ".join(value))
    return None


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def render_call(tool: str, tool_input: Any) -> str:
    """A tool call as readable text: ``tool: source`` then the other input fields as
    ``key: value`` lines (multi-line values on their own lines), plumbing keys left out."""
    if tool_input is None or tool_input == {} or tool_input == "":
        return tool
    if not isinstance(tool_input, Mapping):
        text = _value_text(tool_input)
        return f"{tool}:\n{text}" if "\n" in text else f"{tool}: {text}"
    lines = [tool]
    lead = None
    for key in SOURCE_KEYS:
        value = tool_input.get(key)
        if isinstance(value, str) and value.strip():
            lead = key
            lines[0] = f"{tool}: {value}" if "\n" not in value else f"{tool}:\n{value}"
            break
    for key in sorted(tool_input):
        if key == lead or key in _NOISE_KEYS:
            continue
        text = _value_text(tool_input[key])
        if text == "":
            continue
        lines.append(f"{key}:\n{text}" if "\n" in text else f"{key}: {text}")
    return "\n".join(lines)


def result_text(text: str) -> str:
    """A tool output as its reader saw it: a JSON envelope ``{"output": "...", ...}`` (how
    some harnesses wrap a tool's output) is unwrapped to the output itself."""
    stripped = text.lstrip()
    if stripped.startswith("{") and '"output"' in stripped[:4000]:
        try:
            value = json.loads(stripped)
        except ValueError:
            return text
        if isinstance(value, dict) and isinstance(value.get("output"), str):
            meta = value.get("metadata")
            code = meta.get("exit_code") if isinstance(meta, dict) else None
            head = f"Exit code {code}\n" if isinstance(code, int) and code != 0 else ""
            return head + value["output"]
    return text


def exit_code(text: str) -> int | None:
    """The exit status a shell tool's output reports, if any."""
    match = _EXIT.search(text[:2000])
    if match is None:
        tail = text[-2000:]
        match = _EXIT.search(tail)
    return int(match.group(1)) if match else None


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
            tags = tuple(dict.fromkeys(_action_tags(tool, tool_input, source)))
            new_tests = frozenset(_new_tests(tool_input)) if FILE_EDITED in tags else frozenset()
            rendered = render_call(tool, tool_input)
            yield _Part(TOOL_CALL, rendered, tool, source, tags=tags, new_tests=new_tests)
        elif kind == TOOL_RESULT:
            # Decided by the record alone, so an item's passages are numbered the same
            # whatever is known of earlier calls.
            if b.get("tool_name") == _RECALL_TOOL:
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
                source = _one_line(ran.group(1))  # a poll of a running command says which
            is_error = bool(b.get("is_error"))
            code = exit_code(body)
            tags = tuple(dict.fromkeys(_outcome_tags(result_tool, source, is_error, code, body)))
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
    return text.startswith(f"[assistant -> {_RECALL_TOOL}]")


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
        tags = tuple(dict.fromkeys(t for p in members for t in (*p.tags, *_evidence_tags(p, p.body))))
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
        # after the last made still count: see _messages_before).
        made = len(spans) if until is None else max(0, min(len(spans), until + 1 - len(passages)))
        # The part's own tags mark its first passage (one event, one candidate); what a
        # passage shows marks that passage.
        tagged = [
            [*(part.tags if n == 0 else ()), *_evidence_tags(part, part.body[s:e])]
            for n, (s, e) in enumerate(spans[: made + 1])
        ]
        for n in range(1, len(tagged)):
            if TEST_FAILURE in tagged[n] and TEST_FAILURE not in tagged[n - 1]:
                found = _TEST_FAILURE.search(part.body, spans[n][0], spans[n][1])
                if found is not None and _messages_before(part.body, spans[n - 1], spans[n], found):
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
