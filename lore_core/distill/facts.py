"""Spotting the facts a distillation must keep: file paths, error lines, commands, numbers
and decisions. Shared by the renderer (what a long tool output's annotation keeps), the
extractive observer (which lines it keeps) and the distillation benchmark (what it counts).

Deliberately simple regular expressions: cheap enough to run over every message, and
biased towards keeping too much rather than too little.
"""

from __future__ import annotations

import re

# File extensions that make a single dotted word a path (``setup.py``), not a sentence end.
_EXTENSIONS = (
    "py|pyi|ipynb|js|mjs|cjs|jsx|ts|tsx|json|jsonl|toml|yaml|yml|ini|cfg|conf|md|rst|txt|csv|lock|"
    "sh|bash|zsh|fish|rs|go|java|kt|swift|c|h|cc|cpp|hpp|cs|rb|php|sql|html|css|scss|vue|svelte|"
    "xml|proto|gradle|env|log|db|duckdb|sqlite|dockerfile|tf|lua|ex|exs|erl|zig|nim|dart|r"
)
_PATH = re.compile(
    r"(?<![\w@:/.<-])"
    r"(?:(?:~/|\.{1,2}/|/)(?:[\w@+-][\w.@+-]*/)*|(?:[\w@+-][\w.@+-]*/)+)[\w.@+-]*\w"  # a slash
    r"|(?<![\w/.-])[\w-]+\.(?:" + _EXTENSIONS + r")\b",  # a bare file name with an extension
    re.IGNORECASE,
)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)

_ERROR = re.compile(
    r"(?i)(?:\b(?:error|errors|exception|traceback|failed|failure|failing|fatal|panic(?:ked)?|"
    r"segmentation fault|denied|refused|not found|no such file|cannot|can't|unable to|"
    r"timed out|undefined|invalid|warning)\b|^E\s{2,}\S|^\s*\w+(?:Error|Exception):)"
)
_COMMAND = re.compile(
    r"(?:^\s*(?:\$|>>>|%|#)\s+\S"
    r"|`(?:git|pytest|python3?|uv|pip|npm|npx|pnpm|yarn|node|bun|deno|cargo|rustc|go|make|cmake|"
    r"docker|kubectl|ruff|mypy|tox|nox|curl|wget|ls|cd|cat|grep|rg|sed|awk|find|bash|sh|lore)\b[^`]*`)"
)
_NUMBER = re.compile(r"(?<![\w.])(?:\d+\.\d+|\d{2,})(?:%|ms|s|x|k|K|MB|KB|GB)?(?![\w.])")
_DECISION = re.compile(
    r"(?i)\b(?:decid\w*|decision|chose|choos\w*|chosen|instead of|rather than|going with|"
    r"settled on|opted|prefer\w*|reject\w*|trade-?off|because|root cause|the fix|fixed|fixes|"
    r"switch(?:ed)? to|won't|will not|don't use|do not use|must not|should not|must|never|always|"
    r"agreed|approach)\b"
)
# Test-run summaries ("3 failed, 117 passed in 4.21s", "Tests: 2 failed, 40 total").
_TEST_SUMMARY = re.compile(
    r"(?i)\b\d+\s+(?:passed|failed|errors?|skipped|xfailed|xpassed|tests?|examples?|failures?)\b"
)


def find_paths(text: str) -> list[str]:
    """File paths in ``text``, in first-seen order, without duplicates. URLs are not paths."""
    text = _URL.sub(" ", text)
    seen: dict[str, None] = {}
    for match in _PATH.finditer(text):
        path = match.group(0).rstrip(".,:;")
        if _plausible_path(path):
            seen.setdefault(path, None)
    return list(seen)


def _plausible_path(path: str) -> bool:
    if not any(c.isalpha() for c in path):
        return False  # 2026/11/30, 3/4
    if path.startswith(("/", "~/", "./", "../")) or path.count("/") >= 2:
        return True
    last = path.rsplit("/", 1)[-1]
    return "." in last.strip(".")  # one slash needs a file name: src/app.py, not and/or


def is_error_line(line: str) -> bool:
    return bool(_ERROR.search(line))


def find_error_lines(text: str) -> list[str]:
    """Lines that report an error, stripped, without duplicates, in order."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and is_error_line(line):
            seen.setdefault(stripped, None)
    return list(seen)


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


def is_test_summary(line: str) -> bool:
    return bool(_TEST_SUMMARY.search(line))
