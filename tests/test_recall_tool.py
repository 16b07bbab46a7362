"""The recall tool per wire API, adding it to a request's tools, the marker line, argument
parsing and the bounded tool-result text."""

from __future__ import annotations

import asyncio
import json

import pytest

from lore_core.context.framing import DATA_NOTICE, data_frame
from lore_core.interfaces import Codec
from lore_core.recall import Kind, RecallEngine, RecallResponse, RecallResult, SourceHit
from lore_core.recall.tool import (
    CLOSEST_CHARS,
    CLOSEST_RESULTS,
    INPUT_SCHEMA,
    MAX_OPEN_CHARS,
    MAX_RESULT_CHARS,
    RESULT_CHARS,
    RESULT_LABEL,
    TOOL_LIMIT,
    TOOL_NAME,
    add_recall_tool,
    format_response,
    marker_text,
    parse_arguments,
    recall_tool,
    run_recall,
    tool_name,
)
from lore_core.worker.client import CODECS

ANTHROPIC = "anthropic-messages"
OPENAI_CHAT = "openai-chat"
OPENAI_RESPONSES = "openai-responses"

APIS = [ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES]
CLIENT_TOOL = {
    ANTHROPIC: {"name": "Bash", "description": "run", "input_schema": {"type": "object"}},
    OPENAI_CHAT: {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},
    OPENAI_RESPONSES: {"type": "function", "name": "shell", "parameters": {"type": "object"}},
}


def test_declarations_per_api():
    a = recall_tool(CODECS[ANTHROPIC])
    assert set(a) == {"name", "description", "input_schema"} and a["name"] == "recall"
    c = recall_tool(CODECS[OPENAI_CHAT])
    assert c["type"] == "function" and c["function"]["name"] == "recall"
    assert c["function"]["parameters"] == a["input_schema"]
    r = recall_tool(CODECS[OPENAI_RESPONSES])
    assert r["type"] == "function" and r["name"] == "recall" and r["parameters"] == a["input_schema"]
    assert a["description"] == c["function"]["description"] == r["description"]
    with pytest.raises(ValueError, match="no recall tool"):
        recall_tool(Codec())


def test_schema_names_the_scopes_and_arguments():
    props = INPUT_SCHEMA["properties"]
    # Only what has something to search (entities arrive with the entity graph).
    assert props["scope"]["enum"] == ["session", "project", "knowledge", "all"]
    assert set(props) == {"query", "scope", "id", "limit"}
    json.dumps(INPUT_SCHEMA)  # plain JSON
    # Each call returns a copy: changing one cannot change the next request's tool.
    recall_tool(CODECS[ANTHROPIC])["input_schema"]["properties"]["query"]["type"] = "broken"
    assert recall_tool(CODECS[ANTHROPIC])["input_schema"]["properties"]["query"]["type"] == "string"


@pytest.mark.parametrize("api", APIS)
def test_added_last_without_changing_the_input(api):
    tools = [CLIENT_TOOL[api]]
    out = add_recall_tool(CODECS[api], tools)
    assert out[0] == CLIENT_TOOL[api] and tool_name(out[-1]) == TOOL_NAME and len(out) == 2
    assert tools == [CLIENT_TOOL[api]]


@pytest.mark.parametrize("api", APIS)
def test_not_added_twice_or_over_a_clients_recall(api):
    once = add_recall_tool(CODECS[api], [CLIENT_TOOL[api]])
    assert add_recall_tool(CODECS[api], once) == once
    own = {**recall_tool(CODECS[api]), "description": "the client's own recall"}
    assert add_recall_tool(CODECS[api], [own]) == [own]


def test_requests_without_tools_get_none_unless_asked():
    assert add_recall_tool(CODECS[ANTHROPIC], []) == []
    assert add_recall_tool(CODECS[ANTHROPIC], None) == []
    assert [tool_name(t) for t in add_recall_tool(CODECS[ANTHROPIC], None, only_with_tools=False)] == [
        "recall"
    ]


def test_tool_name_reads_every_shape():
    assert [tool_name(CLIENT_TOOL[a]) for a in APIS] == ["Bash", "bash", "shell"]
    assert tool_name({"type": "web_search_20250305", "name": "web_search"}) == "web_search"
    assert tool_name({"type": "web_search"}) is None
    assert tool_name("recall") is None


@pytest.mark.parametrize("api", APIS)
def test_rendered_request_carries_the_tool(api):
    codec = CODECS[api]
    raw = {"model": "m", "tools": [CLIENT_TOOL[api]]}
    if api == OPENAI_RESPONSES:
        raw["input"] = [{"role": "user", "content": "hi"}]
    else:
        raw["messages"] = [{"role": "user", "content": "hi"}]
        if api == ANTHROPIC:
            raw["max_tokens"] = 10
    view = codec.parse(raw, json.dumps(raw).encode())
    view.tools = add_recall_tool(CODECS[api], view.tools)
    view.modified = True
    rendered = codec.render(view)
    assert [tool_name(t) for t in rendered["tools"]] == [tool_name(CLIENT_TOOL[api]), "recall"]


def test_marker_is_one_bounded_line():
    assert marker_text("websocket reconnect") == 'Searching memory for "websocket reconnect"'
    long = marker_text("why\n\ndoes   it " + "fail " * 100)
    assert "\n" not in long and long.endswith('..."') and len(long) < 110
    assert marker_text(None, "t:abc") == "Opening memory t:abc"
    assert marker_text("", "t:abc") == "Opening memory t:abc"


@pytest.mark.parametrize(
    ("raw", "query", "scope", "rid", "limit"),
    [
        ({"query": "q", "scope": "all", "limit": 5}, "q", "all", None, 5),
        ('{"query": "q", "id": "t:1"}', "q", None, "t:1", TOOL_LIMIT),
        ({"query": 3, "scope": ["x"], "id": "  ", "limit": "7"}, "", None, None, 7),
        ({"limit": True}, "", None, None, TOOL_LIMIT),
        ({"limit": "lots"}, "", None, None, TOOL_LIMIT),
        ("", "", None, None, TOOL_LIMIT),
        (None, "", None, None, TOOL_LIMIT),
    ],
)
def test_parse_arguments(raw, query, scope, rid, limit):
    args = parse_arguments(raw)
    assert (args.error, args.query, args.scope, args.id, args.limit) == (None, query, scope, rid, limit)


def test_unreadable_arguments():
    assert parse_arguments("{not json").error == "recall arguments are not valid JSON"
    assert parse_arguments("[1]").error == "recall arguments must be an object"


def result(i: int, text: str = "text", relevance: float = 0.8) -> RecallResult:
    meta = {"session": "s1", "role": "user", "created_at": 1_790_000_000.0 + 60 * i}
    return RecallResult(f"t:m{i}", "message", 1 / (60 + i), text, meta, relevance)


def test_format_results_lists_ids_sources_and_snippets():
    response = RecallResponse("reconnect", "project", [result(1, "first hit"), result(2, "x" * 5000)])
    text = format_response(response)
    assert text.startswith(
        '2 memories for "reconnect" (scope project), best first (relevance 0-1: how well each matches '
        "the query); open one with recall(id=...) to read on around it:"
    )
    # When each was said (UTC), for questions about "last week" or "before the migration".
    assert "[t:m1] (message, relevance 0.80) 2026-09-21 14:14 UTC session=s1 role=user\nfirst hit" in text
    # A long result is cut around the query's terms, so others still fit beside it.
    assert "[5000 chars, cut]" in text
    assert len(text) < RESULT_CHARS + 600


def test_nothing_relevant_says_so_with_the_closest_few():
    weak = RecallResponse("banana bread", "project", [result(i, "z" * 900, relevance=0.2) for i in range(10)])
    text = format_response(weak)
    assert text.startswith('Nothing in memory matches "banana bread" (scope project)')
    assert text.count("[t:m") == CLOSEST_RESULTS and len(text) < CLOSEST_CHARS + 600


def test_format_is_bounded():
    many = RecallResponse("q", "all", [result(i, "y" * 2000) for i in range(50)])
    assert len(format_response(many)) <= MAX_RESULT_CHARS
    assert len(format_response(many, max_chars=300)) <= 300
    opened = RecallResponse("t:m1", "", [result(1, "z" * 100_000)], opened=True)
    text = format_response(opened)
    assert len(text) <= MAX_OPEN_CHARS
    assert text.startswith("[t:m1] (message) 2026-09-21 14:14 UTC session=s1 role=user\nzzz")


def test_format_errors_empty_results_and_notes():
    assert format_response(RecallResponse(error="empty query: say what")) == "empty query: say what"
    empty = RecallResponse("nothing here", "session", notes=["vector search unavailable (x)"])
    assert format_response(empty) == (
        'No memories found for "nothing here" (scope session).\n\nNote: vector search unavailable (x)'
    )


class Docs:
    name = "docs"

    def __init__(self, docs: dict[str, str]) -> None:
        self.docs = docs

    async def search(self, query, where, limit):
        return [SourceHit(k, 1.0, v) for k, v in self.docs.items() if set(query.split()) <= set(v.split())]

    async def open(self, key):
        return SourceHit(key, 0.0, self.docs[key]) if key in self.docs else None


def test_run_recall_end_to_end():
    engine = RecallEngine()
    docs = Docs({"a": "deploy fails on arm64", "b": "deploy works"})
    engine.add_text_source(Kind.MESSAGE, docs)
    engine.add_opener(Kind.MESSAGE, docs)

    def call(arguments) -> str:
        return asyncio.run(run_recall(engine, arguments, session="s", project="p"))

    assert "[t:a]" in call({"query": "arm64 deploy"})
    # Memory reaches the model as one data frame (security review F9).
    assert call('{"id": "t:b"}') == data_frame("[t:b] (message)\ndeploy works", RESULT_LABEL)
    opened = call({"id": "t:b", "query": "ignored"})  # an id replaces the query
    assert opened.startswith(f"<lore-{RESULT_LABEL}>\n{DATA_NOTICE}\n\n[t:b]")
    assert call({"id": "t:zz"}).startswith("no memory with id t:zz")
    assert call({"query": ""}).startswith("empty query")
    assert call({"query": "x", "scope": "mars"}).startswith("unknown scope 'mars'")
    assert call("{oops") == "recall arguments are not valid JSON"


def test_a_long_result_shows_where_the_query_matches():
    from lore_core.recall.tool import SNIPPET_CHARS, snippet

    listing = " ".join(f"line {i} of a build log with nothing special" for i in range(400))
    text = listing + " ERROR websocket reconnect failed after 3 retries in ws_client.py " + listing
    shown = snippet(text, "why does the websocket reconnect fail?")
    assert "ERROR websocket reconnect failed after 3 retries in ws_client.py" in shown
    assert shown.startswith("... ") and shown.endswith(f"[{len(text)} chars, cut]")
    assert len(shown) <= SNIPPET_CHARS
    # No term in the text (a vector hit on meaning only): its beginning.
    assert snippet(text, "flaky network").startswith("line 0 of a build log")
    # Short texts are whole.
    assert snippet("websocket ok", "websocket") == "websocket ok"


def test_without_query_terms_the_snippet_shows_the_matched_chunk():
    from lore_core.recall.tool import SNIPPET_CHARS, snippet

    head = " ".join(f"line {i} of a build log with nothing special" for i in range(100))
    middle = "the rollout crashed on node seven while draining"
    text = f"{head} {middle} {head}"
    chunk = (text.index(middle) - 300, text.index(middle) + len(middle) + 300)
    shown = snippet(text, "deployment failure", match=chunk)
    assert middle in shown and shown.startswith("... ") and len(shown) <= SNIPPET_CHARS
    # A span past the text's end is clamped: the last window, not an empty one.
    tail = snippet(text, "deployment failure", match=(len(text) - 10, len(text) + 500))
    assert tail.startswith("... ") and tail.endswith("line 99 of a build log with nothing special")
    # Terms that occur win over the chunk: they say why the text matched more precisely.
    with_term = f"{text} and a websocket warning"
    assert snippet(with_term, "websocket failure", match=chunk).endswith("and a websocket warning")
