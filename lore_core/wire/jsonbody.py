"""A request body's JSON object, parsed with where each of its members lies in the text.

The proxy adds the recall tool to most requests and changes nothing else. Serialising the
whole body again for that was the largest piece of the gateway's own CPU on a large request;
with the position of the ``tools`` array, the tool is spliced into the client's text instead
(:func:`append_to_array`), and every other byte stays as the client sent it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, cast

_DECODER = json.JSONDecoder()
# What json itself skips between tokens.
_SPACE = re.compile(r"[ \t\n\r]*")


def loads_object(text: str) -> tuple[dict[str, Any], dict[str, tuple[int, int]]]:
    """``json.loads(text)`` of a JSON object, and the ``(start, end)`` of each member's value
    in ``text``. Each value is parsed by json's own scanner, so the result is the same.

    Raises ``ValueError`` for anything but one well-formed object without repeated keys (where
    the positions would be ambiguous); ``json.loads`` then gives the caller its answer and
    error message.
    """

    # The whitespace pattern matches everywhere (also nothing): never None. A plain bound
    # method, not a wrapper: this runs a dozen times per member of every request body.
    skip = cast(Callable[[str, int], re.Match[str]], _SPACE.match)
    i = skip(text, 0).end()
    if not text.startswith("{", i):
        raise ValueError("not a JSON object")
    i = skip(text, i + 1).end()
    obj: dict[str, Any] = {}
    spans: dict[str, tuple[int, int]] = {}
    if text.startswith("}", i):
        end = i + 1
    else:
        while True:
            if not text.startswith('"', i):
                raise ValueError("expected a member name")
            key, i = _DECODER.raw_decode(text, i)
            i = skip(text, i).end()
            if not text.startswith(":", i):
                raise ValueError("expected ':'")
            start = skip(text, i + 1).end()
            value, i = _DECODER.raw_decode(text, start)
            if key in obj:
                raise ValueError(f"repeated member {key!r}")
            obj[key], spans[key] = value, (start, i)
            i = skip(text, i).end()
            if text.startswith(",", i):
                i = skip(text, i + 1).end()
            elif text.startswith("}", i):
                end = i + 1
                break
            else:
                raise ValueError("expected ',' or '}'")
    if skip(text, end).end() != len(text):
        raise ValueError("extra data after the object")
    return obj, spans


def append_to_array(text: str, span: tuple[int, int], items: list[Any]) -> str:
    """``text`` with ``items`` appended to the non-empty JSON array at ``span`` (as
    :func:`loads_object` reported it)."""
    start, end = span
    assert text[start] == "[" and text[end - 1] == "]", "not the span of an array"
    added = "".join(", " + json.dumps(item, ensure_ascii=False) for item in items)
    return text[: end - 1] + added + text[end - 1 :]


# A lone surrogate (half of a UTF-16 pair) reaches a parsed body as an escape, ``\ud83d``
# (JavaScript's JSON.stringify writes one for a string cut mid-emoji), or as UTF-8-style
# bytes that the "surrogatepass" decoding reads. Python strings hold it, but UTF-8 cannot:
# every hash, journal line and store write of such text raises.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_ENCODED_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def may_hold_lone_surrogates(text: str, data: bytes, encoding: str) -> bool:
    """Whether the JSON ``text`` (decoded from ``data`` as ``encoding``) can parse to a
    string with a lone surrogate. Cheap for UTF-8: two substring checks are what almost
    every body costs (a regular expression over all of ``text`` would cost more than
    parsing it)."""
    if "\\u" in text and _ESCAPED_SURROGATE.search(text):
        return True
    if encoding != "utf-8":
        return _LONE_SURROGATE.search(text) is not None
    return b"\xed" in data and _ENCODED_SURROGATE.search(data) is not None


def clean_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD."""
    return text if text.isascii() else _LONE_SURROGATE.sub("\ufffd", text)


def replace_lone_surrogates(value: Any) -> Any:
    """``value`` (parsed JSON) with each lone surrogate in its strings, member names too,
    replaced by U+FFFD. Containers are changed in place; iterative, so any depth the parser
    accepted works."""
    if isinstance(value, str):
        return clean_text(value)
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for i, item in enumerate(node):
                if isinstance(item, str):
                    node[i] = clean_text(item)
                elif isinstance(item, list | dict):
                    stack.append(item)
        elif isinstance(node, dict):
            renamed = False
            for key, item in list(node.items()):
                if isinstance(item, str):
                    node[key] = clean_text(item)
                elif isinstance(item, list | dict):
                    stack.append(item)
                renamed = renamed or clean_text(key) is not key
            if renamed:  # rare: rebuilt, so that the members keep their order
                items = list(node.items())
                node.clear()
                node.update((clean_text(key), item) for key, item in items)
    return value
