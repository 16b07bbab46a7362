"""A worker model for tests: answers observer, reflector and knowledge-curator prompts
through the fake upstream.

    fake = FakeUpstream().start()
    fake.responder = observer_responder()

Requests whose system prompt carries the observer or reflector marker (the first line of the
prompt files) get a canned but well-formed answer built from the request itself: a dated
event log with one bullet per transcript event of the segment (so a test can see which
messages reached the observer), or a meta-distillation with the four required sections.
Every other request returns ``None``, so the fake's queue or default answer applies. Works for
all three wire APIs: the reply text is put in each API's shape by the fake.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from lore_core.distill.facts import find_paths
from lore_core.distill.prompts import OBSERVER_MARKER, REFLECTOR_MARKER
from lore_core.knowledge.prompts import CONTRADICTION_MARKER, CURATOR_MARKER
from lore_core.testing.fake_upstream import RecordedRequest, Reply

_EVENT = re.compile(r"^\[(\d\d:\d\d):\d\d\] (.+)$")
_DATE = re.compile(r"^## (\d{4}-\d\d-\d\d)$")
_OBSERVATION = re.compile(r'<observation from="([^"]*)" to="([^"]*)">\n(.*?)\n</observation>', re.S)
# Events echoed per segment; enough for tests to check which messages were sent.
MAX_EVENTS = 40


def _texts(value: Any) -> list[str]:
    """Every text of a system / instructions / content value, whatever its wire shape."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        out: list[str] = []
        for part in value:
            if isinstance(part, dict):
                out += _texts(part.get("text")) + _texts(part.get("content"))
            else:
                out += _texts(part)
        return out
    return []


def request_texts(body: dict[str, Any]) -> tuple[str, str]:
    """(system text, user text) of a worker request in any of the three APIs."""
    system = _texts(body.get("system")) + _texts(body.get("instructions"))
    user: list[str] = []
    for item in body.get("messages") or body.get("input") or []:
        if not isinstance(item, dict):
            continue
        if item.get("role") in ("system", "developer"):
            system += _texts(item.get("content"))
        else:
            user += _texts(item.get("content"))
    if isinstance(body.get("input"), str):
        user.append(body["input"])
    return "\n".join(system), "\n".join(user)


def fake_observation(user: str) -> str:
    """A dated event log of the ``<conversation_segment>`` in ``user``."""
    match = re.search(r"<conversation_segment[^>]*>\n(.*)\n</conversation_segment>", user, re.S)
    segment = match.group(1) if match else ""
    out: list[str] = []
    events = 0
    lines = segment.splitlines()
    for index, line in enumerate(lines):
        if date := _DATE.match(line):
            out.append(f"## {date.group(1)}")
        elif (event := _EVENT.match(line)) and events < MAX_EVENTS:
            events += 1
            what = event.group(2)
            if what.endswith(":") and index + 1 < len(lines):
                # A tool output starts on the next line; its first line says what it was.
                what += " " + lines[index + 1]
            out.append(f"- {event.group(1)} {what[:160]}")
    if not events:
        out.append("- nothing worth recording in this segment")
    return "\n".join(out)


def fake_meta_distillation(user: str) -> str:
    """A meta-distillation with the four sections, built from the ``<observation>`` logs."""
    observations = _OBSERVATION.findall(user)
    bullets = [line for _, _, text in observations for line in text.splitlines() if line.startswith("- ")]
    decisions = [b for b in bullets if "decision" in b.lower()] or ["- (no decisions recorded)"]
    paths: list[str] = []
    for _, _, text in observations:
        paths += [p for p in find_paths(text) if p not in paths]
    timeline = [
        f"- {start[:10]} {start[11:16]} observation log ({end[11:16]})" for start, end, _ in observations
    ]
    return "\n".join(
        [
            "## Current state",
            f"- Consolidated {len(observations)} observation logs ({len(bullets)} events).",
            "",
            "## Key decisions",
            *decisions,
            "",
            "## Technical changes",
            *([f"- touched {p}" for p in paths[:20]] or ["- (no files recorded)"]),
            "",
            "## Timeline",
            *(timeline or ["- (no dated observations)"]),
        ]
    )


def _worker_texts(req: RecordedRequest) -> tuple[str, str] | None:
    """(system, user) of a worker request, ``None`` when the body is not a JSON object."""
    try:
        body = req.json
    except ValueError:
        return None
    return request_texts(body) if isinstance(body, dict) else None


def _answer(req: RecordedRequest, text: str) -> Reply:
    return Reply(text=text, input_tokens=max(1, len(req.body) // 4), output_tokens=max(1, len(text) // 4))


def observer_responder(
    fallback: Callable[[RecordedRequest], Reply | None] | None = None,
) -> Callable[[RecordedRequest], Reply | None]:
    """A ``FakeUpstream.responder`` answering observer and reflector prompts; other requests
    go to ``fallback`` (or return ``None``: the fake's queue or default answer)."""

    def respond(req: RecordedRequest) -> Reply | None:
        texts = _worker_texts(req)
        if texts is not None:
            system, user = texts
            if OBSERVER_MARKER in system:
                return _answer(req, fake_observation(user))
            if REFLECTOR_MARKER in system:
                return _answer(req, fake_meta_distillation(user))
        return fallback(req) if fallback else None

    return respond


def curator_responder(
    script: Callable[[str], list[dict[str, Any]]],
    fallback: Callable[[RecordedRequest], Reply | None] | None = None,
    entities: Callable[[str], Any] | None = None,
) -> Callable[[RecordedRequest], Reply | None]:
    """A ``FakeUpstream.responder`` answering knowledge-curator prompts with the operations
    ``script(user_text)`` returns (as the JSON the curator asks for) and, with ``entities``,
    the ``entities`` value it returns (a list of ``{"name", "kind", "aliases",
    "relations"}``, or anything else to test the lenient parser); observer and reflector
    prompts as :func:`observer_responder` does; other requests go to ``fallback``."""
    observe = observer_responder(fallback)

    def respond(req: RecordedRequest) -> Reply | None:
        texts = _worker_texts(req)
        if texts is not None and CURATOR_MARKER in texts[0]:
            answer: dict[str, Any] = {"operations": script(texts[1])}
            if entities is not None:
                answer["entities"] = entities(texts[1])
            return _answer(req, json.dumps(answer))
        return observe(req)

    return respond


def contradiction_responder(
    opposite: Callable[[str], bool],
    fallback: Callable[[RecordedRequest], Reply | None] | None = None,
) -> Callable[[RecordedRequest], Reply | None]:
    """A ``FakeUpstream.responder`` answering contradiction-judge prompts: a contradiction
    when ``opposite(user_text)`` (the two entries, as the judge shows them); other requests
    go to ``fallback``."""

    def respond(req: RecordedRequest) -> Reply | None:
        texts = _worker_texts(req)
        if texts is not None and CONTRADICTION_MARKER in texts[0]:
            verdict = opposite(texts[1])
            reason = "they cannot both be followed" if verdict else "both can stand"
            return _answer(req, json.dumps({"contradiction": verdict, "reason": reason}))
        return fallback(req) if fallback else None

    return respond
