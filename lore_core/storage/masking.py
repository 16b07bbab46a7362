"""Secret masking: what the store keeps of a text, with obvious secrets replaced by
``[REDACTED:<kind>]`` (:func:`mask_secrets`, and :func:`mask_deep` for every string of a JSON
value).

Provider and platform key shapes, passwords in URLs and headers, private key blocks and
bearer headers pasted into content. Deliberately conservative: a false positive only masks
text in the store, but masking prose or code would make memory worse, so generic prefixes
(hf_, npm_) need key-like characters and assignments need key-like values.
"""

from __future__ import annotations

import bisect
import itertools
import re
import sys
from collections.abc import Callable
from typing import Any

import attrs


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


def may_hold_secret(text: str) -> bool:
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


def mask_hinted(text: str) -> str:
    """:func:`mask_secrets` of a text :func:`may_hold_secret` said yes to."""
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
    if not text or not may_hold_secret(text):
        return text
    return mask_hinted(text)


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


def mask_scalar(value: Any) -> Any:
    return mask_secrets(value) if isinstance(value, str) else value


def mask_deep(value: Any) -> Any:
    """:func:`mask_secrets` applied to every string inside a JSON value."""
    return map_json(value, mask_scalar)
