"""The ``recall`` tool as each wire API declares it, its marker line, and its result text.

The gateway adds the tool to requests that already offer tools (a request without tools is
a side call such as a title request, where recall makes no sense), runs the model's calls
itself and continues upstream with the result; the client sees at most :func:`marker_text`.
The three declarations carry the same description and JSON schema, so the model sees the
same tool whatever API its client speaks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs

from lore_core.context.framing import data_frame, escape_delimiters, frame_overhead
from lore_core.interfaces import Codec
from lore_core.recall.cascade import query_terms
from lore_core.recall.engine import MAX_LIMIT, RecallEngine, RecallResponse
from lore_core.recall.ids import Scope
from lore_core.recall.ranking import GAP, TEXTS, RecallResult
from lore_core.recall.sources import NEXT, PREVIOUS, REGION
from lore_core.storage.tags import evidence_offset
from lore_core.storage.toolcalls import RECALL_TOOL_NAME

# One name in one place: the store leaves this tool's results out of search.
TOOL_NAME = RECALL_TOOL_NAME
#: The data frame of a tool result: ``<lore-recall>`` (:func:`tool_result_text`).
RESULT_LABEL = "recall"

DESCRIPTION = (
    "Search what this project remembers: its earlier conversations (this session and others: "
    "messages, tool calls and their outputs), the notes distilled from them, its curated "
    "knowledge (decisions, patterns, preferences, architecture, gotchas) and the entities it knows "
    "(people, services, tools, repositories, files; a name also finds their other names). Use it when the "
    "user refers to something from before, or when past decisions, fixes, commands, errors, test "
    "runs or commits would help. Ask in plain words; name another session by its first prompt in "
    "double quotes (in the session that started with \"...\"), and say first, last or after 'X' "
    "when order matters. Each result is a passage with an id (t: message, d: distillation, k: "
    "knowledge entry, e: entity); call recall with that id to read the text around it. Scopes: session "
    "(this conversation), project (default), knowledge (curated entries only), all (project plus "
    "other projects' knowledge)."
)
#: The scopes the tool offers (``knowledge`` searches entities too).
TOOL_SCOPES = (Scope.SESSION.value, Scope.PROJECT.value, Scope.KNOWLEDGE.value, Scope.ALL.value)

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "What to look for: keywords, names, an error message or a question.",
        },
        "scope": {
            "type": "string",
            "enum": list(TOOL_SCOPES),
            "description": "Where to look (default: project).",
        },
        "id": {
            "type": "string",
            "description": "Read around one earlier result by its id (e.g. t:3f2a...:4). Replaces query.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LIMIT,
            "description": "At most this many results (default: as many as fit the answer).",
        },
    },
    "additionalProperties": False,
}

# Bounds of the tool result: it enters the conversation and is paid for on every later
# turn (cached or not), so a search answers with passages and opening one item with the
# region around one passage (the model pages on from there). The text bounds are what
# memory's own text may take; the data frame around it (F9) comes on top, so framing
# costs no evidence (inside the bound it cut a last-failing-test answer at 7,601 of 8,000
# characters on the coding-sessions set).
RESULT_TEXT_CHARS = 8000
OPEN_TEXT_CHARS = 10000
MAX_RESULT_CHARS = RESULT_TEXT_CHARS + frame_overhead(RESULT_LABEL)
MAX_OPEN_CHARS = OPEN_TEXT_CHARS + frame_overhead(RESULT_LABEL)
#: Results a tool call asks the engine for when the model names no limit: more than fit, so
#: the answer is filled (:func:`format_response` packs them best first).
TOOL_LIMIT = 30
#: Longest text one search result shows: a merged run of passages is cut around the
#: query's terms, so one long run cannot take the room of several distinct facts.
RESULT_CHARS = 1600
#: A result shorter than this is not worth cutting down to fit the space left.
MIN_RESULT_CHARS = 240
SNIPPET_CHARS = 500
#: When nothing matches (:attr:`RecallResponse.matched`), the closest results shown, and
#: their room in all.
CLOSEST_RESULTS = 3
CLOSEST_CHARS = 1500
MARKER_QUERY_CHARS = 80


def recall_tool(codec: Codec) -> dict[str, Any]:
    """The tool declaration in ``codec``'s API (a fresh dict: callers may change it)."""
    if codec.recall is None:
        raise ValueError(f"the {codec.api or type(codec).__name__} codec declares no recall tool")
    return codec.recall.tool(TOOL_NAME, DESCRIPTION, json.loads(json.dumps(INPUT_SCHEMA)))


def tool_name(tool: object) -> str | None:
    """The name of a tool entry, ``name`` or ``function.name`` (``None`` when it has none)."""
    if not isinstance(tool, Mapping):
        return None
    function = tool.get("function")
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return function["name"]
    name = tool.get("name")
    return name if isinstance(name, str) else None


def add_recall_tool(codec: Codec, tools: Sequence[Any] | None, *, only_with_tools: bool = True) -> list[Any]:
    """``tools`` with the recall tool appended: a new list, the input is not changed.

    Unchanged (but copied) when a tool named ``recall`` already exists (the client's own
    wins: two tools of one name are rejected by the providers), and, with
    ``only_with_tools``, when the request offers no tools at all. Appended last so the
    client's tools keep their positions and the cached prefix before them stays valid.
    """
    current = list(tools or [])
    if only_with_tools and not current:
        return current
    if any(tool_name(t) == TOOL_NAME for t in current):
        return current
    current.append(recall_tool(codec))
    return current


def _one_line(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def marker_text(query: str | None = None, recall_id: str | None = None) -> str:
    """The one line the client sees while the gateway recalls."""
    if recall_id and not (query and query.strip()):
        return f"Opening memory {_one_line(recall_id, MARKER_QUERY_CHARS)}"
    return f'Searching memory for "{_one_line(query or "", MARKER_QUERY_CHARS)}"'


@attrs.define
class RecallArgs:
    query: str = ""
    scope: str | None = None
    id: str | None = None
    limit: int = TOOL_LIMIT
    #: Set when the arguments could not be read at all.
    error: str | None = None


def parse_arguments(raw: object) -> RecallArgs:
    """Tool-call input as the codecs give it: a dict (Anthropic) or a JSON string (OpenAI
    APIs). Unknown keys are ignored; wrong types become the defaults."""
    if isinstance(raw, str | bytes):
        try:
            raw = json.loads(raw or "{}")
        except ValueError:
            return RecallArgs(error="recall arguments are not valid JSON")
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        return RecallArgs(error="recall arguments must be an object")
    query = raw.get("query")
    scope = raw.get("scope")
    rid = raw.get("id")
    limit = raw.get("limit")
    try:
        limit_value = int(limit) if limit is not None and not isinstance(limit, bool) else TOOL_LIMIT
    except (TypeError, ValueError):
        limit_value = TOOL_LIMIT
    return RecallArgs(
        query=query if isinstance(query, str) else "",
        scope=scope if isinstance(scope, str) else None,
        id=rid if isinstance(rid, str) and rid.strip() else None,
        limit=limit_value,
    )


def nothing_relevant(query: str, scope: str) -> str:
    """The line that says a search matched nothing (every surface says it the same way)."""
    return (
        f'Nothing in memory matches "{_one_line(query, 200)}" (scope {scope}): no result holds most '
        "of its words or means the same. Closest, probably unrelated:"
    )


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    suffix = f" ... [{len(text)} chars, cut]"
    if limit <= len(suffix):
        return text[:limit]
    return text[: limit - len(suffix)].rstrip() + suffix


def snippet(
    text: str,
    query: str,
    limit: int = SNIPPET_CHARS,
    match: tuple[int, int] | None = None,
    focus: int | None = None,
) -> str:
    """At most ``limit`` characters of ``text`` for a result list, where it matched: from a
    little before ``focus`` when given (where the event the question asks about shows);
    else the window where the query's terms are densest (a long tool output's match is
    rarely at its start); when none of them occurs in the text, the middle of ``match`` (a
    ``(start, end)`` span that matched otherwise); else the beginning. Cut points snap to
    whitespace; elided ends are marked ``...``, and the length given."""
    if len(text) <= limit:
        return text
    window = max(limit - 40, limit // 2)  # room for the markers
    start = 0
    densest = focus if focus is not None else _densest_terms(text, query, window)
    if densest is not None:
        start = max(0, densest - window // 5)  # a little context before the first match
    elif match is not None:
        middle = (max(0, match[0]) + min(len(text), match[1])) // 2
        start = max(0, middle - window // 2)
    if start:
        # Snapped to a word boundary, and never past the last full window.
        space = text.rfind(" ", 0, start)
        start = space + 1 if space > start - 40 else start
        start = min(start, max(0, len(text) - window))
    end = min(len(text), start + window)
    if end < len(text):
        space = text.rfind(" ", start, end)
        end = space if space > end - 40 else end
    body = text[start:end].strip()
    return ("... " if start else "") + body + (f" ... [{len(text)} chars, cut]" if end < len(text) else "")


def _densest_terms(text: str, query: str, window: int) -> int | None:
    """Where a ``window`` covering the most occurrences of the query's terms starts (at an
    occurrence); ``None`` when no term occurs."""
    lowered = text.lower()
    positions = sorted(
        m.start() for term in set(query_terms(query)) for m in re.finditer(re.escape(term), lowered)
    )
    if not positions:
        return None
    best, best_count, right = positions[0], 0, 0
    for left, first in enumerate(positions):  # two pointers
        while right < len(positions) and positions[right] < first + window:
            right += 1
        if right - left > best_count:
            best, best_count = first, right - left
    return best


def _meta_line(meta: Mapping[str, Any]) -> str:
    """When the item was stored (UTC, as the observation logs date their events: the model
    needs it for "last week", "before the migration"), then its session, role and title."""
    parts = [f"{k}={meta[k]}" for k in ("session", "role", "title") if meta.get(k)]
    at = meta.get("created_at")
    if isinstance(at, int | float) and at > 0:
        parts.insert(0, datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC"))
    return (" " + " ".join(_one_line(p, 80) for p in parts)) if parts else ""


def _opened(response: RecallResponse) -> str:
    r = response.results[0]
    lines = [f"[{r.id}] ({r.source}){_meta_line(r.meta)}", r.text]
    region = r.meta.get(REGION)
    if isinstance(region, tuple | list) and len(region) == 3 and region[2] > 1:
        first, last, total = region
        paging = [f"passages {first}-{last} of {total}"]
        if r.meta.get(PREVIOUS):
            paging.append(f'before: recall(id="{r.meta[PREVIOUS]}")')
        if r.meta.get(NEXT):
            paging.append(f'after: recall(id="{r.meta[NEXT]}")')
        lines.append("(" + "; ".join(paging) + ")")
    return "\n".join(lines)


def _body(result: RecallResult, query: str, limit: int, events: Sequence[str] = ()) -> str:
    """A result's text in at most about ``limit`` characters: each of its passages (a
    result may hold several of one item) cut to its share, from where an asked event shows
    in it (the FAIL line of a long test log) or else around the query's terms."""
    texts = result.meta.get(TEXTS)
    if not isinstance(texts, list) or len(texts) < 2:
        texts = [result.text]
    elif len(result.text) <= limit:
        return result.text.strip()
    share = max(MIN_RESULT_CHARS, limit // len(texts))
    cut = [snippet(t.strip(), query, share, focus=evidence_offset(t.strip(), events)) for t in texts]
    return f"\n{GAP}\n".join(cut)


def _packed(response: RecallResponse, room: int, per_result: int = RESULT_CHARS) -> list[str]:
    """As many results as fit in ``room`` characters, best first: each headed by its id,
    source, score and when it was stored, then its passage(s). A result that does not fit
    whole is shown cut around the query's terms when enough room is left, else skipped
    for a shorter one further down."""
    blocks: list[str] = []
    intent = response.metadata.get("intent") or {}
    events = list(intent.get("events") or []) if isinstance(intent, dict) else []
    for r in response.results:
        head = f"[{r.id}] ({r.source}, relevance {r.relevance:.2f}){_meta_line(r.meta)}"
        body = _body(r, response.query, per_result, events)
        need = len(head) + 1 + len(body) + 2
        if need > room:
            space = room - len(head) - 3
            if space < MIN_RESULT_CHARS:
                continue
            body = _body(r, response.query, space, events)
            need = len(head) + 1 + len(body) + 2
        blocks.append(f"{head}\n{body}")
        room -= need
    return blocks


def format_response(response: RecallResponse, max_chars: int | None = None) -> str:
    """The tool-result text for a response, at most ``max_chars`` characters."""
    limit = max_chars or (OPEN_TEXT_CHARS if response.opened else RESULT_TEXT_CHARS)
    notes = [f"Note: {n}" for n in response.notes]
    if response.error:
        lines = [response.error]
    elif response.opened and response.results:
        lines = [_opened(response)]
    elif not response.results:
        lines = [f'No memories found for "{_one_line(response.query, 200)}" (scope {response.scope}).']
    elif not response.matched:
        # Nothing clears the floor: say so, and show only the closest few, briefly, so the
        # model neither takes them for an answer nor pays to read a page of unrelated text.
        closest = attrs.evolve(response, results=response.results[:CLOSEST_RESULTS])
        per_result = CLOSEST_CHARS // CLOSEST_RESULTS
        lines = [
            nothing_relevant(response.query, response.scope),
            *_packed(closest, CLOSEST_CHARS, per_result),
        ]
    else:
        intro_room = 320
        room = limit - intro_room - sum(len(n) + 2 for n in notes)
        blocks = _packed(response, room)
        lines = [
            f'{len(blocks)} memories for "{_one_line(response.query, 200)}" (scope {response.scope}), '
            "best first (relevance 0-1: how well each matches the query); open one with "
            "recall(id=...) to read on around it:",
            *blocks,
        ]
    text = "\n\n".join([*lines, *notes])
    return _cut(text, limit)


async def run_recall(
    engine: RecallEngine,
    arguments: object,
    *,
    session: str | None = None,
    project: str | None = None,
    max_chars: int | None = None,
) -> str:
    """Run one recall tool call end to end and return its tool-result text. Never raises
    (but for cancellation): every problem is a sentence for the model."""
    args = parse_arguments(arguments)
    if args.error:
        return args.error
    if args.id:  # opening wins: the schema says an id replaces the query
        response = await engine.open(args.id)
    else:
        response = await engine.search(args.query, args.scope, session, project, args.limit)
    return tool_result_text(response, max_chars)


def tool_result_text(response: RecallResponse, max_chars: int | None = None) -> str:
    """The recall tool's result as the model reads it on every wire API: the formatted
    response in one data frame (F9: what memory holds is reference data, and a planted
    ``</lore-...>`` cannot close the frame), within ``max_chars`` in all (by default the
    text bound plus the frame). A response that holds no memory (an error, nothing found)
    is a plain sentence, escaped."""
    if response.error or not response.results:
        return escape_delimiters(format_response(response, max_chars))
    if max_chars:
        room = max_chars - frame_overhead(RESULT_LABEL)
    else:
        room = OPEN_TEXT_CHARS if response.opened else RESULT_TEXT_CHARS
    # Escaped before the cut: an escape lengthens the text, the bound holds for what is sent.
    body = _cut(escape_delimiters(format_response(response, room)), room)
    return data_frame(body, RESULT_LABEL)
