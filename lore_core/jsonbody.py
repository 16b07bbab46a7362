"""A request body's JSON object, parsed with where each of its members lies in the text.

The proxy adds the recall tool to most requests and changes nothing else. Serialising the
whole body again for that was the largest piece of the gateway's own CPU on a large request;
with the position of the ``tools`` array, the tool is spliced into the client's text instead
(:func:`append_to_array`), and every other byte stays as the client sent it.
"""

from __future__ import annotations

import json
import re
from typing import Any

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
    skip = _SPACE.match
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
