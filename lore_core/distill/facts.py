"""Spotting the facts a distillation must keep: file paths, error lines, identifiers (commit
SHAs, PR and issue numbers, tickets, test names, URLs), commands, test results and
decisions. Shared by the renderer (what a long tool output's annotation keeps) and the
extractive observer (which lines it keeps). The distillation benchmark finds the facts it
counts with patterns of its own, so that it measures this module rather than echoing it.

Deliberately simple regular expressions: cheap enough to run over every message, and
biased towards keeping too much rather than too little.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# File extensions that make a single dotted word a path (``setup.py``), not a sentence end.
_EXTENSIONS = (
    "py|pyi|ipynb|js|mjs|cjs|jsx|ts|tsx|json|jsonl|toml|yaml|yml|ini|cfg|conf|md|rst|txt|csv|lock|"
    "sh|bash|zsh|fish|rs|go|mod|sum|java|kt|swift|c|h|cc|cpp|hpp|cs|rb|php|sql|html|css|scss|vue|"
    "svelte|xml|proto|gradle|env|log|db|duckdb|sqlite|dockerfile|tf|lua|ex|exs|erl|zig|nim|dart|r"
)
_PATH = re.compile(
    r"(?<![\w@:/.<-])"
    r"(?:(?:~/|\.{1,2}/|/)(?:\.?[\w@+-][\w.@+-]*/)*|(?:\.?[\w@+-][\w.@+-]*/)+)[\w.@+-]*\w"  # a slash
    r"|(?<![\w/.-])[\w-]+\.(?:" + _EXTENSIONS + r")\b",  # a bare file name with an extension
    re.IGNORECASE,
)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s<>\"'`)\]]+", re.IGNORECASE)
# ``github.com/org/repo/pkg``: a Go import path or a URL without its scheme, not a file.
_DOMAIN = re.compile(r"^[\w-]+(?:\.[\w-]+)*\.(?:com|org|io|net|dev|in|sh|co|ai|app|cloud|xyz)(?:/|$)", re.I)
# ``file.go:12:3`` (a position), ``file.go-12-`` (a grep context line): the file is the fact.
_POSITION = re.compile(r"^(.*?\.[A-Za-z]\w*)(?:[:-]\d+)+(?:[:-].*)?$")

_ERROR = re.compile(
    r"(?i)(?:\b(?:error|errors|exception|traceback|failed|failure|failing|fatal|panic(?:ked)?|"
    r"segmentation fault|denied|refused|not found|no such file|cannot|can't|unable to|"
    r"timed out|undefined|invalid|warning)\b|^E\s{2,}\S|^\s*\w+(?:Error|Exception):)"
)
# Lines that are an error report whatever tool printed them, not a line that merely
# mentions errors (code that handles them, a log line about retries).
_STRONG_ERROR = re.compile(
    r"^\s*(?:error|fatal|panic|ERROR|FATAL|Error|FAIL|FAILED|E)\b\s*[:!\[]"
    r"|^\s*(?:FAIL|FAILED|ERROR)\s"
    r"|^\s*--- FAIL:"
    r"|^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b(?::|$)"
    r"|^\s*E\s{2,}\S"
    r"|^\S+\.\w+:\d+:\d+: "
    r"|^Traceback \(most recent call last\)"
    r"|^\s*npm ERR!"
    r"|^CONFLICT \("
    r"|^\s*(?:\S+: )?(?:error|fatal)\b"
    r"|\b(?:command not found|[Nn]o such file or directory|[Pp]ermission denied|"
    r"[Oo]peration not permitted|undefined: \w|cannot find package|not found in file|"
    r"[Ss]egmentation fault|[Cc]onnection refused)"
)
# ``file.py:41: message``: an assertion message or a test's log line (the failure's detail).
_POSITIONED = re.compile(r"^\s*\S+\.\w+:\d+: \S")
_COMMAND = re.compile(
    r"(?:^\s*(?:\$|>>>|%|#)\s+\S"
    r"|`(?:git|pytest|python3?|uv|pip|npm|npx|pnpm|yarn|node|bun|deno|cargo|rustc|go|make|cmake|"
    r"docker|kubectl|ruff|mypy|tox|nox|curl|wget|ls|cd|cat|grep|rg|sed|awk|find|bash|sh|lore|gh|"
    r"mise)\b[^`]*`)"
)
_NUMBER = re.compile(r"(?<![\w.])(?:\d+\.\d+|\d{2,})(?:%|ms|s|x|k|K|MB|KB|GB)?(?![\w.])")
_DECISION = re.compile(
    r"(?i)\b(?:decid\w*|decision|chose|choos\w*|chosen|instead of|rather than|going with|"
    r"settled on|opted|prefer\w*|reject\w*|trade-?off|because|root cause|the fix|fixed|fixes|"
    r"switch(?:ed)? to|won't|will not|don't use|do not use|must not|should not|must|never|always|"
    r"agreed|approach)\b"
)
# A sentence of the assistant that states a decision, a plan, a finding or a result: what
# the next turn must know. Narration of the next tool call ("Let me check X") is not one.
_CONCLUSION = re.compile(
    r"(?i)\b(?:decid\w*|decision|chose|chosen|instead of|rather than|going with|go with|"
    r"settled on|opted|reject\w*|trade-?offs?|root cause|(?:the|this|that) (?:fix|issue|problem|bug|"
    r"cause|reason|culprit)\b|because|caused by|fixed|the plan|plan:|next steps?|recommend\w*|"
    r"conclusion|summary|in short|turns out|confirmed|the answer|key (?:finding|point|blocker)|"
    r"(?:all|both|\d+) (?:\w+ )?(?:tests?|checks?|packages?) (?:pass|fail)\w*|tests? pass\w*|"
    r"(?:is|are) (?:now )?(?:clean|green|passing|failing|broken)|committed|pushed|merged|"
    r"(?:PR|pull request) (?:is |was )?(?:opened|created|up)|created (?:PR|branch|issue|ticket)|"
    r"we (?:should|need to|must|can't|cannot|won't)|must not|should not|don't|do not|never|"
    r"i(?:'ll| will) (?:add|change|use|implement|create|update|remove|fix|make|write|keep|move|"
    r"rename|refactor|split|replace|revert|land|do|start with|go)|won't|will not|"
    r"the (?:right|best|simplest|cleanest) (?:fix|way|approach|option)|approach|option \d|"
    r"(?:doesn't|does not|didn't|did not|isn't|is not|wasn't) (?:work|exist|fire|run|match|handle|"
    r"get|happen|pass)\w*)\b"
)
_CHATTER = re.compile(
    r"(?i)^(?:\W*)(?:let me|let's (?:check|look|see|verify|read|run)|now (?:let me|i(?:'ll| will)? "
    r"(?:check|look|read|run|verify|search|update)|let's)|i(?:'ll| will| need to) (?:check|look|read|"
    r"run|verify|search|examine|explore|start by|first|now)|i'm (?:checking|looking|reading|going to "
    r"(?:check|look|read)|pulling|starting)|perfect|great|good|excellent|okay|ok\b|sure|alright|got it|"
    r"thanks|thank you|first,? let me|looking at)"
)
# Test-run summaries ("3 failed, 117 passed in 4.21s", "Tests: 2 failed, 40 total") and
# Go's per-package results ("ok  pkg 0.5s", "FAIL pkg [build failed]").
_TEST_SUMMARY = re.compile(
    r"(?i)\b\d+\s+(?:passed|failed|errors?|skipped|xfailed|xpassed|tests?|examples?|failures?)\b"
    r"|^(?:ok|FAIL|PASS)(?:\s|$)"
)
# Identifiers: commit SHAs (not inside a UUID or a longer word), PR / issue references,
# tickets (ENT-221), test names.
_SHA = re.compile(r"(?<![\w-])[0-9a-f]{7,40}(?![\w-])")
_REF = re.compile(r"(?:(?<![\w&/])#|\bpull/|\bissues/|\bPR\s+#?)(\d{1,6})\b")
_TICKET = re.compile(r"\b([A-Z][A-Z0-9]{1,9}(?:-\d{1,6})+)\b")
_NOT_TICKETS = frozenset({"UTF", "SHA", "ISO", "RFC", "HTTP", "TLS", "AES", "GPT", "P", "V", "X", "CP"})
# Not a path's part: ``tests/test_api.py`` names a file, not a test.
_TEST_NAME = re.compile(r"(?<![\w/.-])(Test[A-Z0-9_]\w*|test_\w+|Benchmark[A-Z]\w*)\b(?!\.\w|/)")
# Lines of a verbose test run about tests that ran and passed: noise, not facts.
_PASSED_LINE = re.compile(
    r"^\s*(?:=== (?:RUN|PAUSE|CONT|NAME)|--- (?:PASS|SKIP)|ok\s|PASS\b|PASSED\b)|::\S+ (?:PASSED|SKIPPED)\b"
)
_DIFF_INDEX = re.compile(r"^index [0-9a-f]{7,40}\.\.[0-9a-f]{7,40}\b")
_BRANCH = re.compile(
    r"(?:checkout -b|switch -c|branch -[mM]|On branch|push (?:-u |--set-upstream )?\w+|"
    r"Switched to (?:a new )?branch)\s+'?([\w][\w./-]*[\w])'?"
)


def find_paths(text: str) -> list[str]:
    """File paths in ``text``, in first-seen order, without duplicates. URLs and Go import
    paths are not paths; ``file.go:12:3`` and grep's ``file.go-12-`` name ``file.go``."""
    text = _URL.sub(" ", text)
    seen: dict[str, None] = {}
    for match in _PATH.finditer(text):
        path = match.group(0).rstrip(".,:;")
        position = _POSITION.match(path)
        if position:
            path = position.group(1)
        if path.startswith(".../"):
            path = path[4:]
        if _plausible_path(path):
            seen.setdefault(path, None)
    return list(seen)


def _plausible_path(path: str) -> bool:
    if not any(c.isalpha() for c in path):
        return False  # 2026/11/30, 3/4
    if _DOMAIN.match(path):
        return False
    if path.startswith(("/", "~/", "./", "../")) or path.count("/") >= 2:
        return True
    last = path.rsplit("/", 1)[-1]
    return "." in last.strip(".")  # one slash needs a file name: src/app.py, not and/or


def find_urls(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for match in _URL.finditer(text):
        seen.setdefault(match.group(0).rstrip(".,:;"), None)
    return list(seen)


def is_error_line(line: str) -> bool:
    return bool(_ERROR.search(line))


def is_strong_error_line(line: str) -> bool:
    """A line that reports an error (an exception, ``error:``, a failed test, a compiler
    message), not one that merely contains the word."""
    return bool(_STRONG_ERROR.search(line))


def error_rank(line: str) -> int:
    """1: reports an error; 2: a message at a file position (a test's assertion or log
    line); 3: mentions an error; 0: none of these."""
    if _STRONG_ERROR.search(line):
        return 1
    if _POSITIONED.match(line):
        return 2
    return 3 if _ERROR.search(line) else 0


def find_error_lines(text: str) -> list[str]:
    """Lines that report an error, stripped, without duplicates, in order."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and is_error_line(line):
            seen.setdefault(stripped, None)
    return list(seen)


def first_error_lines(text: str, limit: int, strong_only: bool = False) -> list[str]:
    """The first ``limit`` error lines of a tool output, in the output's order: lines that
    report an error first, then messages at a file position, then (unless
    ``strong_only``) lines that only mention an error, to fill up."""
    ranked: dict[str, int] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and stripped not in ranked:
            ranked[stripped] = error_rank(stripped)
    picked: set[str] = set()
    for rank in (1, 2) if strong_only else (1, 2, 3):
        for line, line_rank in ranked.items():
            if len(picked) >= limit:
                break
            if line_rank == rank:
                picked.add(line)
    return [line for line in ranked if line in picked]


def has_command(line: str) -> bool:
    return bool(_COMMAND.search(line))


def find_numbers(text: str) -> list[str]:
    """Numbers worth keeping: two or more digits, or with a decimal point (not list markers
    or single digits), in order, without duplicates."""
    seen: dict[str, None] = {}
    for match in _NUMBER.finditer(text):
        seen.setdefault(match.group(0), None)
    return list(seen)


def has_decision(line: str) -> bool:
    return bool(_DECISION.search(line))


_DECISION_STRICT = re.compile(
    r"(?i)\b(?:decid\w*|decision|instead of|rather than|going with|go with|settled on|opted|chose|"
    r"chosen|reject\w*|trade-?offs?|root cause|the (?:real |actual )?(?:issue|problem|bug|cause|fix|culprit) "
    r"(?:is|was)|(?:best|right|simplest|cleanest) (?:approach|fix|option|way)|caused by)\b"
)


def states_decision(sentence: str) -> bool:
    """Stricter than :func:`states_conclusion`: a decision or a root cause (what thinking
    is worth keeping for)."""
    return bool(_DECISION_STRICT.search(sentence))


def states_conclusion(sentence: str) -> bool:
    """Whether an assistant sentence states a decision, plan, finding or result."""
    return bool(_CONCLUSION.search(sentence))


def is_chatter(sentence: str) -> bool:
    """Narration of what comes next ("Let me check..."), acknowledgements ("Perfect!")."""
    return bool(_CHATTER.match(sentence))


def is_test_summary(line: str) -> bool:
    return bool(_TEST_SUMMARY.search(line))


def find_identifiers(text: str) -> list[str]:
    """Identifiers in ``text`` as the log writes them, in first-seen order: commit SHAs,
    ``#123`` (PR and issue references, ``pull/123`` included), tickets, test names (not
    those of a verbose run's passing lines) and branch names."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        if _DIFF_INDEX.match(line):
            continue  # blob hashes of a diff, not commits
        for match in _SHA.finditer(line):
            sha = match.group(0)
            if not sha.isdigit() and not sha.isalpha():
                seen.setdefault(sha, None)
        for match in _REF.finditer(line):
            seen.setdefault("#" + match.group(1), None)
        for match in _TICKET.finditer(line):
            if match.group(1).split("-")[0] not in _NOT_TICKETS:
                seen.setdefault(match.group(1), None)
        if not _PASSED_LINE.search(line):
            for match in _TEST_NAME.finditer(line):
                seen.setdefault(match.group(1), None)
        for match in _BRANCH.finditer(line):
            if "/" in match.group(1) or "-" in match.group(1):
                seen.setdefault(match.group(1), None)
    return list(seen)


# -- prose -----------------------------------------------------------------------------------

SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`*\"'(\[])")
CODE_FENCE = re.compile(r"^\s*```.*?^\s*```[^\n]*$", re.S | re.M)
MARKDOWN_LEAD = re.compile(r"^\s*(?:#{1,6}\s+|[-*+]\s+|\d+[.)]\s+|>\s*)+")


def prose_sentences(text: str) -> Iterable[str]:
    """Sentences of prose, code blocks left out, markdown list and heading markers dropped,
    table rows skipped; a line break ends a sentence. The extractive observer keeps some of
    them; the passages embed them one by one (facets)."""
    for line in CODE_FENCE.sub("", text).splitlines():
        line = MARKDOWN_LEAD.sub("", line).strip()
        if line and not line.startswith("|"):
            yield from (s.strip() for s in SENTENCE_SPLIT.split(line) if s.strip())
