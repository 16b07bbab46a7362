"""Event tags: what a tool call did, what its output shows.

A passage of a tool call or result is tagged with the events it records, as ``#tag`` words in
its header: "which test failed first", "what did we commit after X", "which file did we
create" are questions about events, which word overlap with the question rarely finds (a
test log never says "the first test to fail"). Recall reads the tags back
(:mod:`lore_core.recall.intent`). Tags are single tokens, so a full-text search for one finds
exactly the passages that carry it. Changing these rules changes
:data:`lore_core.storage.passages.TAG_RULES`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from lore_core.distill.facts import states_decision
from lore_core.model import TEXT, THINKING, TOOL_CALL, TOOL_RESULT
from lore_core.toolkinds import ToolKind, tool_kind

#: A FAIL line this close to a passage's start has its messages in the passage before.
_FAILURE_LEAD = 200


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
TEST_FAILURE_LINE = re.compile(
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


_SHELL_SEARCH = re.compile(r"(?:^|[;&|(]\s*)(?:rg|grep|ag|ack|git grep)\s")


def introduced_tests(tool_input: Any) -> set[str]:
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


def action_tags(tool: str, tool_input: Any, source: str | None) -> list[str]:
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


def outcome_tags(
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


def evidence_tags(
    kind: str,
    text: str,
    tool: str | None = None,
    source: str | None = None,
    new_tests: frozenset[str] = frozenset(),
) -> list[str]:
    """What one passage of a part (of ``kind``, from ``tool``, with the call's ``source``)
    shows: a test failing, a lint finding, a compile error, a commit being made, a new test
    being written (one of ``new_tests``, the test functions the edit introduces). Only the
    passages holding the evidence carry these (a 40K log's failing test is in one of its
    passages)."""
    tags: list[str] = []
    if kind in (TEXT, THINKING):
        if states_decision(text):
            tags.append(DECISION)
    elif kind == TOOL_RESULT:
        command = (source or "").lower()
        if tool_kind(tool) in (ToolKind.READ, ToolKind.SEARCH) or _SHELL_SEARCH.search(command):
            return tags  # file contents and search hits show code, not events
        # Each pattern behind a cheap test of a substring it needs: cutting runs on every
        # stored message (the regexes alone were three quarters of the cost).
        if any(hint in text for hint in _FAILURE_HINTS) and TEST_FAILURE_LINE.search(text):
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
    elif kind == TOOL_CALL and new_tests:
        if any(re.search(rf"\b{re.escape(name)}\(", text) for name in new_tests):
            tags.append(TEST_WRITTEN)
    return tags


def messages_before(
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
    TEST_FAILURE: TEST_FAILURE_LINE,
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
