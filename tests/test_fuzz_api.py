"""Property-based fuzzing of the gateway's local API, ``/lore/api/...`` (hypothesis).

Each test starts one gateway (real socket, the default DuckDB store and every installed
plugin, distillation by the extractive observer so no example calls a model), seeds it
through the proxy with three sessions (one per wire API, one long enough to distil) and one
distillation, then sends generated requests: every route of ``lore_core/http/api.py`` and unknown
paths under ``/lore/api``, with random methods, path parameters (stored ids, unicode,
``..``, slashes, NULs, 4,000 characters), query strings (huge and negative numbers,
non-numbers, unicode, repeated keys, raw percent-escapes that are not UTF-8) and bodies (JSON
or not, any Content-Type).

With the gateway token, every answer:

* is not a 5xx, and is JSON (``HEAD``: no body), never an HTML page;
* has the status the route gives that input: 200, 400 (``/search`` without ``q``) or 404
  (an id not stored, a path or method no route takes), 405 for a method no route knows;
* leaves no error and no traceback in the log, changes no stored message (only ``POST
  /distill`` writes: distillations), and sends nothing to the provider: paths under
  ``/lore/api`` are never proxied (``/lore/api/v1/models`` was, with the gateway token).

Without the token, or with a wrong one, every request is a 401 with a JSON ``error`` and
changes nothing: no stored message, no distillation, no provider call.

``LORE_FUZZ_EXAMPLES`` sets the examples per property (``benchmarks/fuzz.py`` runs
thousands).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, unquote

import attrs
import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.fuzz import FUZZ, Tally, json_values, log_problems, texts
from lore_core.testing.server import ThreadedServer

# Seconds per test (see the slow marker in lore_core.testing.fixtures).
pytestmark = pytest.mark.slow

#: What an HTTP request of a fuzz case is: method, path (already quoted), query pairs or a
#: raw query string, body bytes and headers.
Case = tuple[str, str, list[tuple[str, str]] | str, bytes | None, dict[str, str]]

#: The methods some route takes (Quart answers 405 for any other).
ROUTED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@attrs.define
class Seeded:
    server: ThreadedServer
    token: str
    sessions: list[str]
    distillations: list[str]
    result_ids: list[str]
    knowledge: list[str] = attrs.field(factory=list)
    entities: list[str] = attrs.field(factory=list)


def _turns(api: str, session: str, texts: list[str]) -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
    """The requests of a conversation of ``texts`` user turns (the fake answers "pong")."""
    history: list[dict[str, Any]] = []
    for text in texts:
        history.append({"role": "user", "content": text})
        if api == "anthropic":
            body = {"model": "claude-seed", "max_tokens": 50, "messages": list(history)}
            yield "/v1/messages", body, {"x-claude-code-session-id": session}
        elif api == "chat":
            yield (
                "/v1/chat/completions",
                {"model": "gpt-seed", "messages": list(history)},
                {"session-id": session},
            )
        else:
            body = {"model": "gpt-seed", "input": list(history), "prompt_cache_key": session}
            yield "/v1/responses", body, {"originator": "codex_cli_rs"}
        history.append({"role": "assistant", "content": "pong"})


@pytest.fixture
def seeded(start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream) -> Seeded:
    server = start_gateway(
        config={
            "distill": {"observer": "extractive", "idleTimeoutSeconds": 604_800, "firstSegmentMinTokens": 0}
        }
    )
    token = server.gateway.tokens.current()
    conversations = {
        "seed-heron": (
            "anthropic",
            ["the heron nests by the river", "fix the bug in parser.py", "run the tests"],
        ),
        "seed-otter": ("chat", ["otters hold hands while sleeping", "and then?"]),
        "seed-kestrel": ("responses", ["a kestrel hovers over the field"]),
    }
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for session, (api, turns) in conversations.items():
            for path, body, headers in _turns(api, session, turns):
                assert client.post(path, json=body, headers=headers).status_code == 200
        auth = {"authorization": f"Bearer {token}"}
        assert (
            client.post("/lore/api/distill", params={"session": "seed-heron"}, headers=auth).status_code
            == 200
        )
        sessions = [s["id"] for s in client.get("/lore/api/sessions", headers=auth).json()]
        distillations = [d["id"] for d in client.get("/lore/api/distillations", headers=auth).json()]
        found = client.get("/lore/api/recall", params={"q": "heron river"}, headers=auth).json()["results"]
        entry = client.post(
            "/lore/api/knowledge",
            json={
                "project": "/seed",
                "category": "gotcha",
                "title": "Herons",
                "content": "They nest by rivers.",
            },
            headers=auth,
        ).json()["entry"]
        entity = client.post(
            "/lore/api/entities/add",
            json={"project": "/seed", "name": "Heron", "kind": "other", "aliases": ["grey heron"]},
            headers=auth,
        ).json()["entity"]
    assert len(sessions) == 3 and distillations and found
    fake_upstream.reset()
    return Seeded(
        server, token, sessions, distillations, [r["id"] for r in found], [entry["id"]], [entity["id"]]
    )


@pytest.fixture
def client(seeded: Seeded) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=seeded.server.url, timeout=60) as c:
        yield c


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

numbers = st.integers(-(10**30), 10**30).map(str)
odd_strings = st.sampled_from(
    ["", " ", "0", "-1", "1e9", "NaN", "inf", "1_000", " 7 ", "0x10", "٣", "9" * 5000, "all", "true", "null"]
)
query_values = numbers | odd_strings | texts(30) | st.floats().map(str)
random_keys = texts(8)
headers_values = st.text(st.characters(codec="ascii", min_codepoint=32, max_codepoint=126), max_size=40)


def query(known: list[str]) -> st.SearchStrategy[list[tuple[str, str]] | str]:
    """Query pairs (a route's own parameters and others, repeated keys included), or a raw
    query string of percent-escapes that need not decode as UTF-8."""
    pairs = (
        st.lists(st.tuples(st.sampled_from(known) | random_keys, query_values), max_size=5)
        if known
        else (st.lists(st.tuples(random_keys, query_values), max_size=3))
    )
    raw = st.lists(
        st.tuples(
            st.sampled_from([*known, "x"]),
            st.binary(max_size=6).map(lambda b: "".join(f"%{c:02X}" for c in b))
            | st.sampled_from(["%", "%zz", "%f"]),
        ),
        min_size=1,
        max_size=3,
    ).map(lambda kv: "&".join(f"{k}={v}" for k, v in kv))
    return pairs | raw


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bytes | None, dict[str, str]]:
    kind = draw(st.sampled_from(["none", "json", "text", "bytes"]))
    if kind == "none":
        return None, {}
    body = {
        "json": lambda: json.dumps(draw(json_values())).encode(),
        "text": lambda: draw(texts(60)).encode(),
        "bytes": lambda: draw(st.binary(max_size=80)),
    }[kind]()
    content_type = draw(
        st.sampled_from(
            [
                None,
                "application/json",
                "text/plain",
                "application/x-www-form-urlencoded",
                "multipart/form-data; boundary=zz",
                "application/octet-stream",
            ]
        )
    )
    return body, ({"content-type": content_type} if content_type else {})


def path_params(stored: list[str]) -> st.SearchStrategy[str]:
    """A path parameter, quoted for the URL: a stored id, or anything."""
    raw = st.one_of(
        st.sampled_from(stored) if stored else st.nothing(),
        texts(40),
        st.sampled_from(["..", "../status", "a/b", "/", " ", "\x00", "%", "seed-heron/", "t:1", "d:x"]),
        st.integers(1, 4000).map(lambda n: "x" * n),
    )
    # Dots escaped too: a "." or ".." segment would be resolved by the client, not sent.
    return st.builds(
        lambda text, slashes: quote(text, safe="/" if slashes else "").replace(".", "%2E"), raw, st.booleans()
    )


def methods(own: str | tuple[str, ...]) -> st.SearchStrategy[str]:
    other = st.sampled_from([*ROUTED_METHODS, "HEAD", "TRACE", "PURGE", "BREW"])
    mine = [own] if isinstance(own, str) else list(own)
    return st.sampled_from(mine * 3) | other


@st.composite
def route_cases(draw: st.DrawFn, route: str, seeded: Seeded) -> Case:
    """A request to one route of ``lore_core/http/api.py``."""
    own, path, known = {
        "status": ("GET", "/lore/api/status", []),
        "sessions": (
            "GET",
            "/lore/api/sessions",
            ["project", "limit", "before", "since", "harness", "model", "q"],
        ),
        "projects": ("GET", "/lore/api/projects", []),
        "runs": ("GET", "/lore/api/runs", ["project", "limit"]),
        "run_events": ("GET", "/lore/api/runs/events", ["project", "run", "before", "limit"]),
        "session": ("GET", None, ["branches"]),
        "search": ("GET", "/lore/api/search", ["q", "session", "project", "limit"]),
        "recall": ("GET", "/lore/api/recall", ["q", "scope", "session", "project", "limit"]),
        "distillations": ("GET", "/lore/api/distillations", ["session", "archived"]),
        "distillation": ("GET", None, []),
        "distill": ("POST", "/lore/api/distill", ["session"]),
        "knowledge": (("GET", "POST"), "/lore/api/knowledge", ["project", "global", "deleted"]),
        "knowledge_entry": (("GET", "PATCH", "DELETE"), None, []),
        "knowledge_file": ("GET", "/lore/api/knowledge/file", ["project", "sensitive", "format"]),
        "knowledge_import": ("POST", "/lore/api/knowledge/import", ["project", "path", "format"]),
        "contradictions": ("GET", "/lore/api/knowledge/contradictions", ["project", "status"]),
        "contradictions_scan": ("POST", "/lore/api/knowledge/contradictions/scan", ["project"]),
        "contradictions_resolve": ("POST", "/lore/api/knowledge/contradictions/resolve", []),
        "team": (("GET", "POST"), "/lore/api/team", ["project"]),
        "knowledge_pending": ("GET", "/lore/api/knowledge/pending", ["project"]),
        "knowledge_decisions": ("POST", "/lore/api/knowledge/decisions", []),
        "entities": ("GET", "/lore/api/entities", ["project", "global", "merged"]),
        "entity_show": ("GET", "/lore/api/entities/show", ["ref", "project"]),
        "entity_change": ("POST", None, []),
    }[route]
    if route == "knowledge_entry":
        path = "/lore/api/knowledge/" + draw(path_params(seeded.knowledge))
        tail = unquote(path).removeprefix("/lore/api/knowledge/").strip("/")
        if tail in ("file", "import", "pending", "decisions") or tail.startswith("contradictions"):
            path += "x"
    elif route == "entity_change":
        actions = ["add", "alias", "relate", "merge", "edit"]
        path = "/lore/api/entities/" + draw(st.sampled_from(actions) | path_params([]))
        if unquote(path).removeprefix("/lore/api/entities/") == "show":
            path += "x"  # the GET route: not this one
    elif route == "session":
        path = "/lore/api/sessions/" + draw(path_params(seeded.sessions))
    elif route == "distillation":
        path = "/lore/api/distillations/" + draw(path_params(seeded.distillations))
    params = draw(query(known))
    routes_with_real_values = (
        "search",
        "recall",
        "distill",
        "distillations",
        "knowledge_file",
        "knowledge_import",
        "contradictions",
        "contradictions_scan",
        "team",
        "knowledge_pending",
        "entities",
        "entity_show",
    )
    if route in routes_with_real_values and isinstance(params, list):
        # Real values too, so the routes find something: stored sessions, result ids, scopes,
        # the seeded project and every import lane / export format.
        extra = {
            "search": st.tuples(st.just("q"), st.sampled_from(["heron", "otter river", "parser.py"])),
            "recall": st.tuples(
                st.sampled_from(["q", "scope"]),
                st.sampled_from(["heron", *seeded.result_ids, "session", "project", "all", "global"]),
            ),
            "distill": st.tuples(st.just("session"), st.sampled_from(seeded.sessions)),
            "distillations": st.tuples(st.just("session"), st.sampled_from(seeded.sessions)),
            "knowledge_file": st.tuples(st.just("format"), st.sampled_from(["lore-md", "json"]))
            | st.tuples(st.just("project"), st.just("/seed")),
            "knowledge_import": st.tuples(
                st.just("format"), st.sampled_from(["lore-md", "mem0", "json", "agents"])
            )
            | st.tuples(st.just("path"), st.sampled_from(["CLAUDE.md", "mem0.json", ".lore.md"]))
            | st.tuples(st.just("project"), st.just("/seed")),
            "contradictions": st.tuples(st.just("status"), st.sampled_from(["open", "cleared,kept", "x"]))
            | st.tuples(st.just("project"), st.just("/seed")),
            "contradictions_scan": st.tuples(st.just("project"), st.just("/seed")),
            "team": st.tuples(st.just("project"), st.sampled_from(["/seed", "/seed/other", "seed"])),
            "knowledge_pending": st.tuples(st.just("project"), st.sampled_from(["/seed", "/unbound"])),
            "entities": st.tuples(
                st.sampled_from(["project", "merged"]), st.sampled_from(["/seed", "1", "x"])
            ),
            "entity_show": st.tuples(
                st.sampled_from(["ref", "project"]),
                st.sampled_from([*seeded.entities, "Heron", "grey heron", "e:nope", "/seed"]),
            ),
        }[route]
        params = draw(st.lists(extra, max_size=2)) + params
    body, headers = draw(bodies())
    if route == "knowledge_import" and draw(st.booleans()):
        body = draw(st.sampled_from(IMPORT_BODIES))  # a real text of each lane, read as any
    if route == "contradictions_resolve" and draw(st.booleans()):
        ids = st.sampled_from([f"k:{i}" for i in seeded.knowledge] + ["k:nope-nope", "", 3])
        fields = st.fixed_dictionaries(
            {"first": ids, "second": ids},
            optional={"keep": ids, "keep_both": st.sampled_from([True, False, "yes"])},
        )
        body = json.dumps(draw(fields)).encode()
    if route == "team" and draw(st.booleans()):
        team_fields = st.fixed_dictionaries(
            {
                "project": st.sampled_from(["/seed", "/seed/other", "seed", 3]),
                "action": st.sampled_from(["bind", "unbind", "policy", "approve", 1]),
            },
            optional={
                "team": st.sampled_from(["core", "two words", "", "a" * 120, None]),
                "policy": st.sampled_from(["auto", "manual", "sometimes", None]),
                "team_wide": st.sampled_from([True, False, "yes"]),
            },
        )
        body = json.dumps(draw(team_fields)).encode()
    if route == "knowledge_decisions" and draw(st.booleans()):
        ids = st.sampled_from([f"k:{i}" for i in seeded.knowledge] + ["k:nope-nope", "", 3])
        decision_fields = st.fixed_dictionaries(
            {"id": ids, "decision": st.sampled_from(["approved", "rejected", "maybe", None])},
            optional={
                "by": st.sampled_from(["Ana Lima", "-->", "", "x" * 200]),
                "project": st.sampled_from(["/seed", "/elsewhere"]),
            },
        )
        body = json.dumps(draw(decision_fields)).encode()
    if route == "entity_change" and draw(st.booleans()):
        refs = st.sampled_from([*seeded.entities, "Heron", "grey heron", "e:0000", "", 3, None])
        entity_fields = st.fixed_dictionaries(
            {},
            optional={
                "project": st.sampled_from(["/seed", "seed", "/other", 3]),
                "name": st.sampled_from(["Kestrel", "heron", "", "a\nb", "x" * 130, 1]),
                "kind": st.sampled_from(["tool", "person", "planet", None]),
                "aliases": st.sampled_from([["hawk"], ["grey heron"], "hawk", [1], []]),
                "ref": refs,
                "keep": refs,
                "other": refs,
                "alias": st.sampled_from(["hawk", "Heron", "", "sk-ant-api03-" + "x" * 40]),
                "predicate": st.sampled_from(["eats", "Lives In", "!!", ""]),
                "target": refs,
                "remove": st.sampled_from([True, False, "yes"]),
                "global": st.sampled_from([True, False, 0]),
            },
        )
        body = json.dumps(draw(entity_fields)).encode()
    return draw(methods(own)), path, params, body, headers


#: One text of each import lane: a mem0 export, a JSON list, an agents file, a .lore.md.
IMPORT_BODIES = [
    json.dumps(
        {"results": [{"id": "m1", "memory": "Herons nest by rivers.", "categories": ["misc"]}]}
    ).encode(),
    json.dumps([{"title": "Herons", "content": "They nest by rivers.", "id": "k:0000aaaa"}]).encode(),
    b"# Guide\n\n## Gotchas\n\n- Herons nest by rivers.\n",
    b"## Gotchas\n\n<!-- lore:0000bbbb -->\n### Herons\n\nThey nest by rivers.\n",
]


ROUTE_PATHS = frozenset(
    f"/lore/api/{name}"
    for name in (
        "status", "sessions", "search", "recall", "distillations", "distill", "knowledge", "team", "entities",
        "metrics", "spend",  # read-only, fuzzed from /openapi.json (tests/test_fuzz_openapi.py)
    )
)  # fmt: skip


def is_route(path: str) -> bool:
    return path in ROUTE_PATHS or path.startswith(
        ("/lore/api/sessions/", "/lore/api/distillations/", "/lore/api/knowledge/", "/lore/api/entities/")
    )


@st.composite
def unknown_cases(draw: st.DrawFn) -> Case:
    """A path under /lore/api that no route takes (provider paths included)."""
    tail = draw(
        st.sampled_from(["", "/", "x", "/v1/models", "/v1/messages", "/v1/chat/completions", "/status/x"])
        | path_params([]).map(lambda p: "/" + p)
    )
    path = "/lore/api" + tail
    if is_route(path):
        path = path.replace("/lore/api/", "/lore/api/not-", 1)
    body, headers = draw(bodies())
    method = draw(st.sampled_from([*ROUTED_METHODS, "HEAD", "TRACE"]))
    return method, path, draw(query([])), body, headers


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------


def send(client: httpx.Client, case: Case, auth: dict[str, str]) -> httpx.Response:
    method, path, params, body, headers = case
    url = path + ("?" + params if isinstance(params, str) else "")
    request = client.build_request(
        method, url, params=params if isinstance(params, list) else None, content=body, headers=headers | auth
    )
    return client.send(request)


def first(params: list[tuple[str, str]] | str, key: str) -> str | None:
    """The first value of ``key``, as the route reads it (``None``: raw query strings)."""
    if isinstance(params, str):
        return None
    return next((value for name, value in params if name == key), "")


def stored(server: ThreadedServer) -> dict[str, int]:
    server.call(server.gateway.writer.wait_idle(10.0))
    stats = server.call(server.gateway.store.stats())
    return {"messages": int(stats["messages"]), "sessions": int(stats["sessions"])}


def check(
    response: httpx.Response,
    method: str,
    expected: set[int],
    seeded: Seeded,
    caplog: pytest.LogCaptureFixture,
) -> Any:
    """The rules every authorised answer keeps; returns its JSON (``None`` for HEAD)."""
    assert response.status_code < 500, response.text[:500]
    problems = log_problems(caplog.records)
    assert not problems, "\n".join(problems)
    assert seeded.server.gateway.writer.error is None
    if method == "HEAD":
        assert response.content == b""
        assert response.status_code in expected
        return None
    assert response.headers["content-type"].startswith("application/json"), response.text[:300]
    payload = response.json()
    assert response.status_code in expected, (response.status_code, response.text[:300])
    if response.status_code >= 400:
        assert isinstance(payload, dict) and isinstance(payload.get("error"), str) and payload["error"]
    return payload


def unroutable(path: str) -> bool:
    """A path no route matches, whatever the method: Werkzeug's ``path`` converter (the
    catch-all's too) takes no newline."""
    return "\n" in unquote(path)


def expected_statuses(route: str, case: Case, seeded: Seeded) -> set[int]:
    method, path, params, _, _ = case
    if unroutable(path):
        return {404}
    owns = {
        "distill": ("POST",),
        "knowledge_import": ("POST",),
        "contradictions_scan": ("POST",),
        "contradictions_resolve": ("POST",),
        "knowledge_decisions": ("POST",),
        "team": ("GET", "POST"),
        "knowledge": ("GET", "POST"),
        "knowledge_entry": ("GET", "PATCH", "DELETE"),
        "entity_change": ("POST",),
    }.get(route, ("GET",))
    own = method if method in owns else owns[0]
    if method == "HEAD":
        if route in (
            "knowledge_import",
            "contradictions_scan",
            "contradictions_resolve",
            "knowledge_decisions",
        ):
            # No GET here: the entry route answers, for an entry of that id (none).
            return {404}
        # A GET route answers HEAD as GET, without the body; elsewhere the gateway's own HEAD
        # route answers the probes clients send before their first request: 200.
        method = "GET" if own == "GET" else method
        if method == "HEAD":
            return {200}
    if method != own:
        return {404} if method in ROUTED_METHODS else {405}
    if route == "search":
        q = first(params, "q")
        return {200, 400} if q is None else ({200} if q.strip() else {400})
    if route in ("session", "distillation"):
        return {200, 404}
    if route == "run_events":
        return {200, 400, 404}  # 400: no run, or a before that is not a seq; 404: no such run
    if route == "sessions":
        return {200, 400}  # 400: a before or since that is not a page's row or a time
    if route == "knowledge" and method == "POST":
        return {201, 200, 400, 409}  # a valid entry is added (an invented one: refused or added)
    if route == "knowledge_entry":
        return {"GET": {200, 404}, "PATCH": {200, 400, 404, 409}, "DELETE": {200, 404}}[method]
    if route in ("knowledge_file", "knowledge_import"):
        return {200, 400}  # 400: no absolute project directory, or a body that is not UTF-8
    if route == "contradictions":
        return {200, 400}  # 400: an unknown status
    if route == "contradictions_scan":
        return {200, 400, 409, 503}  # 400: no absolute project; 409: no judge; 503: no worker yet
    if route == "contradictions_resolve":
        return {200, 400, 404}  # 404: an entry that does not exist
    if route == "team":
        # 400: no absolute project, or bad fields; 409: unbinding or setting the policy of an
        # unbound project.
        return {200, 400} if method == "GET" else {200, 400, 409}
    if route == "knowledge_pending":
        return {200, 400, 409}  # 409: the project is not bound to a team
    if route == "knowledge_decisions":
        return {200, 400, 404, 409}  # 409: not bound, or an entry that cannot be shared
    if route == "entities":
        return {200, 400}  # 400: a project that is not an absolute directory
    if route == "entity_show":
        return {200, 400, 404}  # 400: no ref, or a relative project; 404: no such entity
    if route == "entity_change":
        # 201: added; 400: malformed fields (the error names one); 404: an unknown action or
        # entity; 409: the rules refused it (a name another entity has, a merge into itself).
        return {200, 201, 400, 404, 409}
    if route == "distill":
        session = first(params, "session")
        if session is None:
            return {200, 404}
        return {200} if not session or session in seeded.sessions else {404}
    return {200}


ROUTES = [
    "status", "sessions", "projects", "runs", "run_events", "session", "search", "recall", "distillations",
    "distillation", "distill", "knowledge", "knowledge_entry", "knowledge_file", "knowledge_import",
    "contradictions", "contradictions_scan", "contradictions_resolve", "team", "knowledge_pending",
    "knowledge_decisions", "entities", "entity_show", "entity_change",
]  # fmt: skip


@pytest.mark.parametrize("route", ROUTES)
def test_fuzz_api_route(
    route: str,
    seeded: Seeded,
    fake_upstream: FakeUpstream,
    client: httpx.Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = {"authorization": f"Bearer {seeded.token}"}
    before = stored(seeded.server)

    @FUZZ
    @given(case=route_cases(route, seeded))
    # Found by this test: Quart answered these in HTML (405 page; OPTIONS: an empty 200).
    @example(case=("TRACE", "/lore/api/status", [], None, {}))
    @example(case=("OPTIONS", "/lore/api/sessions", [], None, {}))
    def prop(case: Case) -> None:
        tally.case()
        caplog.clear()
        fake_upstream.reset()
        response = send(client, case, auth)
        payload = check(response, case[0], expected_statuses(route, case, seeded), seeded, caplog)
        if response.status_code == 200 and payload is not None:
            lists = (
                "sessions",
                "projects",
                "runs",
                "search",
                "distillations",
                "knowledge",
                "contradictions",
                "entities",
            )
            assert isinstance(payload, list if route in lists and case[0] == "GET" else dict)
        if route != "contradictions_scan":  # judging calls the worker (the fake)
            assert fake_upstream.requests == []
        assert stored(seeded.server) == before

    with Tally(f"/lore/api {route}") as tally:
        prop()


def test_fuzz_api_unknown_routes(
    seeded: Seeded, fake_upstream: FakeUpstream, client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    auth = {"authorization": f"Bearer {seeded.token}"}
    before = stored(seeded.server)

    @FUZZ
    @given(case=unknown_cases())
    # Found by this test: proxied to the provider, the gateway token in Authorization.
    @example(case=("GET", "/lore/api/v1/models", [], None, {}))
    @example(case=("POST", "/lore/api/v1/messages", [], b'{"model": "m", "messages": []}', {}))
    def prop(case: Case) -> None:
        tally.case()
        caplog.clear()
        fake_upstream.reset()
        response = send(client, case, auth)
        method = case[0]
        if unroutable(case[1]):
            expected = {404}
        else:
            expected = {200} if method == "HEAD" else {404} if method in ROUTED_METHODS else {405}
        check(response, method, expected, seeded, caplog)
        assert fake_upstream.requests == []
        assert stored(seeded.server) == before

    with Tally("/lore/api unknown routes") as tally:
        prop()


@st.composite
def bad_credentials(draw: st.DrawFn, token: str) -> dict[str, str]:
    """No token, or not this one: a wrong token, a cut one, another scheme, another header."""
    # A header value cannot start or end with white space (h11 refuses to send it).
    wrong = headers_values.map(str.strip).filter(lambda t: t != token)
    return draw(
        st.one_of(
            st.just({}),
            wrong.map(lambda t: {"authorization": f"Bearer {t}".strip()}),
            st.just({"authorization": f"Bearer {token[:-1]}"}),
            st.just({"authorization": f"Bearer {token}x"}),
            st.just({"authorization": token}),
            st.just({"authorization": f"Basic {token}"}),
            st.just({"authorization": "Bearer"}),
            st.just({"x-lore-token": token}),
            wrong.map(lambda t: {"authorization": t}),
        )
    )


def test_fuzz_api_without_the_token(
    seeded: Seeded, fake_upstream: FakeUpstream, client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    before = stored(seeded.server)
    distillations = len(seeded.distillations)
    cases = st.one_of(*(route_cases(route, seeded) for route in ROUTES), unknown_cases())

    @FUZZ
    @given(case=cases, auth=bad_credentials(seeded.token))
    def prop(case: Case, auth: dict[str, str]) -> None:
        tally.case()
        caplog.clear()
        fake_upstream.reset()
        response = send(client, case, auth)
        assert response.status_code == 401, response.text[:300]
        if case[0] != "HEAD":
            assert response.headers["content-type"].startswith("application/json")
            assert "gateway token" in response.json()["error"]
        assert not log_problems(caplog.records)
        assert fake_upstream.requests == []
        assert stored(seeded.server) == before

    with Tally("/lore/api without the token") as tally:
        prop()
    # Nothing was distilled either.
    auth = {"authorization": f"Bearer {seeded.token}"}
    assert len(client.get("/lore/api/distillations", headers=auth).json()) == distillations
