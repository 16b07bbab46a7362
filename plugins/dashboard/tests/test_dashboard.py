"""The dashboard over HTTP against a real gateway on loopback with real traffic replayed
into it (the in-memory store, or DuckDB when installed):

* access: a login link minted with the gateway token works once; an expired, reused,
  unknown or pre-rotation link is refused; the session cookie is HttpOnly, SameSite=Strict,
  Path=/ui; a token rotation logs out; without the cookie a page shows no memory (401)
  and an action is refused (401); a POST with a missing or wrong CSRF token (403) or from
  a foreign Origin (403, the kernel's check) changes nothing;
* every answer carries the strict Content-Security-Policy and the other headers;
* pages: health, sessions (filters, keyset pages), the reader (tool calls collapsed),
  search (the recall engine), knowledge (by category, versions);
* actions: forget, knowledge add / edit / delete / restore, each reflected by the local
  API (what the CLI reads) afterwards;
* ``lore dashboard`` prints a link that logs in; client mistakes are 4xx, never a 500.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lore_dashboard import auth
from lore_dashboard.app import LAYER_MEANINGS

from lore_core.http.access import rotate_token
from lore_core.testing.builders import answer, batch_of, exchange, text
from lore_core.testing.fake_upstream import FakeUpstream, Reply, ToolCall
from lore_core.testing.fixtures import SharedGateway
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer

SECRET_WORD = "zanzibarquux"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


def send_turn(
    server: ThreadedServer,
    fake: FakeUpstream,
    session: str,
    project: Path,
    history: list[dict[str, Any]],
    reply: Reply,
) -> list[dict[str, Any]]:
    """One model request through the gateway, as a coding client sends it; the history with
    the answer appended."""
    fake.enqueue(reply)
    headers = {
        "x-api-key": "k",
        "anthropic-version": "2023-06-01",
        "x-session-id": session,
        "X-Lore-Project": str(project),
    }
    body = {"model": "claude-test", "max_tokens": 50, "messages": history}
    answer = httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30)
    answer.raise_for_status()
    return [*history, {"role": "assistant", "content": answer.json()["content"]}]


def replay_traffic(server: ThreadedServer, fake: FakeUpstream, project: Path) -> None:
    """Two sessions: one with a tool call and a long tool output, one short."""
    history: list[dict[str, Any]] = [{"role": "user", "content": f"Plan the {SECRET_WORD} migration"}]
    history = send_turn(server, fake, "s-tools", project, history, Reply(text="Let me read the file first."))
    history.append(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "here is the file"},
                {"type": "tool_result", "tool_use_id": "call-1", "content": "line of output\n" * 300},
            ],
        }
    )
    send_turn(server, fake, "s-tools", project, history, Reply(text=f"The {SECRET_WORD} plan is ready."))
    send_turn(
        server,
        fake,
        "s-short",
        project,
        [{"role": "user", "content": "say hello"}],
        Reply(text="hello there"),
    )


def local_api(server: ThreadedServer) -> httpx.Client:
    return httpx.Client(base_url=server.url + "/lore/api", headers=api_headers(), timeout=30)


def mint(server: ThreadedServer) -> str:
    answer = httpx.post(server.url + "/ui/login-links", headers=api_headers())
    assert answer.status_code == 201, answer.text
    return str(answer.json()["path"])


def login(server: ThreadedServer) -> httpx.Client:
    """A browser-like client logged in through a fresh link."""
    client = httpx.Client(base_url=server.url, timeout=30)
    answer = client.get(mint(server))
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/"
    return client


def cli(server: ThreadedServer, *args: str) -> Any:
    """``lore <args> --json`` against the test's gateway, its output parsed: what a user's
    CLI says after the dashboard acted."""
    import json

    done = subprocess.run(
        [sys.executable, "-m", "lore_core.cli", *args, "--json"],
        env={**os.environ, "LORE_PORT": str(server.port)},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page has no CSRF field"
    return html.unescape(found.group(1))


def post(client: httpx.Client, path: str, data: dict[str, str], **headers: str) -> httpx.Response:
    return client.post(path, data=data, headers=headers)


@pytest.fixture
def served(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, project: Path
) -> Iterator[ThreadedServer]:
    """A gateway of the test's own with the traffic replayed: for tests that change what
    others would read (forget, knowledge, a token rotation, more traffic)."""
    server = start_gateway()
    replay_traffic(server, fake_upstream, project)
    yield server


@pytest.fixture(scope="module")
def replayed(module_gateway: SharedGateway, tmp_path_factory: pytest.TempPathFactory) -> SharedGateway:
    project = tmp_path_factory.mktemp("shared") / "proj"
    project.mkdir()
    replay_traffic(module_gateway.server, module_gateway.upstream, project)
    return module_gateway


@pytest.fixture
def seen(replayed: SharedGateway, shared_gateway: ThreadedServer) -> ThreadedServer:
    """The module's one gateway with the traffic replayed once, for the tests that only read
    what it holds (a login or a logout changes nothing another test reads)."""
    return shared_gateway


# -- access ------------------------------------------------------------------------------------


def test_a_login_link_works_once_and_sets_a_strict_session_cookie(seen: ThreadedServer) -> None:
    path = mint(seen)
    assert re.fullmatch(r"/ui/login\?t=[A-Za-z0-9_-]{40,}", path)
    browser = httpx.Client(base_url=seen.url)
    first = browser.get(path)
    assert first.status_code == 303
    cookie = first.headers["set-cookie"]
    assert cookie.startswith(f"{auth.COOKIE_NAME}=")
    for part in ("HttpOnly", "SameSite=Strict", "Path=/ui"):
        assert part in cookie
    assert browser.get("/ui/").status_code == 200

    # The same link again, in another browser: refused, and it logs nobody in.
    other = httpx.Client(base_url=seen.url)
    again = other.get(path)
    assert again.status_code == 403 and "not valid" in again.text
    assert "set-cookie" not in again.headers
    assert other.get("/ui/sessions").status_code == 401


def test_an_expired_unknown_or_pre_rotation_link_is_refused(
    served: ThreadedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    browser = httpx.Client(base_url=served.url)
    assert browser.get("/ui/login?t=made-up").status_code == 403
    assert browser.get("/ui/login").status_code == 403

    path = mint(served)
    dashboard = served.gateway.registry.mounts["dashboard"]
    later = dashboard.gate._clock() + auth.LINK_TTL_SECONDS + 1
    with monkeypatch.context() as patched:
        patched.setattr(dashboard.gate, "_clock", lambda: later)
        assert browser.get(path).status_code == 403
    # The expired link is gone for good, even back in its time.
    assert browser.get(path).status_code == 403

    path = mint(served)
    rotate_token(served.gateway.tokens.path)
    assert browser.get(path).status_code == 403
    # A link minted after the rotation works.
    fresh = httpx.Client(base_url=served.url)
    assert fresh.get(mint(served)).status_code == 303
    assert fresh.get("/ui/sessions").status_code == 200


def test_minting_a_link_needs_the_gateway_token(seen: ThreadedServer) -> None:
    assert httpx.post(seen.url + "/ui/login-links").status_code == 401
    wrong = httpx.post(seen.url + "/ui/login-links", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert httpx.get(seen.url + "/ui/login-links", headers=api_headers()).status_code == 405


def test_a_token_rotation_logs_out(served: ThreadedServer) -> None:
    browser = login(served)
    assert browser.get("/ui/sessions").status_code == 200
    rotate_token(served.gateway.tokens.path)
    page = browser.get("/ui/sessions")
    assert page.status_code == 401 and SECRET_WORD not in page.text


@pytest.mark.parametrize(
    "path",
    [
        "/ui/",
        "/ui/sessions",
        "/ui/session?id=s-tools",
        "/ui/search?q=" + SECRET_WORD,
        "/ui/knowledge",
        "/ui/knowledge/entry?id=k:x",
        "/ui/session/forget?id=s-tools",
        "/ui/contradictions",
        "/ui/entities",
        "/ui/projects",
        "/ui/spend",
        "/ui/review?project=/x",
    ],
)
def test_without_the_cookie_a_page_says_how_to_log_in_and_shows_no_memory(
    seen: ThreadedServer, path: str
) -> None:
    for cookies in ({}, {auth.COOKIE_NAME: "forged"}):
        page = httpx.get(seen.url + path, cookies=cookies)
        assert page.status_code == 401
        assert "lore dashboard" in page.text
        assert SECRET_WORD not in page.text and "s-tools" not in page.text.replace(path, "")


def test_without_the_cookie_an_action_is_refused_and_changes_nothing(seen: ThreadedServer) -> None:
    answer = httpx.post(
        seen.url + "/ui/session/forget", data={"id": "s-tools", "confirm": "yes", "csrf": "x"}
    )
    assert answer.status_code == 401
    assert local_api(seen).get("/sessions/s-tools").status_code == 200


def test_a_cross_site_post_is_refused(served: ThreadedServer, project: Path) -> None:
    browser = login(served)
    page = browser.get("/ui/session/forget?id=s-tools")
    token = csrf_of(page.text)
    form = {"id": "s-tools", "confirm": "yes"}
    refused = [
        post(browser, "/ui/session/forget", form),  # no CSRF token
        post(browser, "/ui/session/forget", {**form, "csrf": "wrong"}),
        post(browser, "/ui/session/forget", {**form, "csrf": token}, origin="http://evil.example"),
        post(browser, "/ui/session/forget", {**form, "csrf": token}, origin="null"),
    ]
    assert [r.status_code for r in refused] == [403, 403, 403, 403]
    # Another session's CSRF token is not this one's.
    other = login(served)
    other_token = csrf_of(other.get("/ui/").text)
    assert other_token != token
    assert post(browser, "/ui/session/forget", {**form, "csrf": other_token}).status_code == 403
    assert local_api(served).get("/sessions/s-tools").status_code == 200
    # The same form with its token, from the page's own origin, goes through.
    done = post(browser, "/ui/session/forget", {**form, "csrf": token}, origin=served.url)
    assert done.status_code == 303


def test_every_answer_carries_the_security_headers(seen: ThreadedServer) -> None:
    browser = login(seen)
    for path in ("/ui/", "/ui/sessions", "/ui/static/dashboard.css", "/ui/nowhere"):
        answer = browser.get(path)
        csp = answer.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "same-origin"
    # No inline script or style anywhere.
    for path in ("/ui/", "/ui/sessions", "/ui/session?id=s-tools", "/ui/knowledge"):
        text = browser.get(path).text
        assert (
            not re.search(r"<script(?![^>]*\bsrc=)", text) and "<style" not in text and " style=" not in text
        )
        assert not re.search(r"\son[a-z]+=", text)


# -- pages -----------------------------------------------------------------------------------


def test_health_shows_what_the_status_route_says(seen: ThreadedServer) -> None:
    page = login(seen).get("/ui/").text
    status = local_api(seen).get("/status").json()
    assert "<h1>Health</h1>" in page
    assert f"version {status['health']['version']}" in page
    assert f"{status['store']['sessions']} sessions" in page
    assert status["health"]["stats"]["exchanges"] == 3
    assert '<p class="big">3</p>' in page  # the exchanges replayed


def test_sessions_list_filters_and_keyset_pages(
    served: ThreadedServer,
    fake_upstream: FakeUpstream,
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    browser = login(served)
    page = browser.get("/ui/sessions").text
    assert "s-tools" in page and "s-short" in page and SECRET_WORD in page
    assert "s-short" not in browser.get("/ui/sessions", params={"q": SECRET_WORD}).text
    assert "s-tools" in browser.get("/ui/sessions", params={"q": SECRET_WORD}).text
    assert "No session matches" in browser.get("/ui/sessions", params={"harness": "no-such"}).text
    # A word only a message says: no title, id, model or project holds it, the full-text
    # index finds the message, linked at its place in its session.
    mention = browser.get("/ui/sessions", params={"q": "file"}).text
    assert "No session matches" in mention and '<h2 id="mentions">' in mention
    found = mention[mention.index('<h2 id="mentions">') :]
    assert "<mark>file</mark>" in found and "/ui/session?id=s-tools&amp;at=" in found
    assert "s-short" not in found
    # A word no message holds (the index matches any one word: "no-such-word-here" found "here").
    assert '<h2 id="mentions">' not in browser.get("/ui/sessions", params={"q": "qzxjvwkq"}).text
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert "No session matches" in browser.get("/ui/sessions", params={"project": str(elsewhere)}).text
    assert "s-tools" in browser.get("/ui/sessions", params={"project": str(project)}).text
    assert "s-tools" in browser.get("/ui/sessions", params={"model": "claude-test"}).text
    assert "No session matches" in browser.get("/ui/sessions", params={"model": "other-model"}).text
    today = time.strftime("%Y-%m-%d")
    tomorrow = time.strftime("%Y-%m-%d", time.localtime(time.time() + 86400))
    yesterday = time.strftime("%Y-%m-%d", time.localtime(time.time() - 86400))
    assert "s-tools" in browser.get("/ui/sessions", params={"since": today, "until": today}).text
    assert "No session matches" in browser.get("/ui/sessions", params={"since": tomorrow}).text
    assert "No session matches" in browser.get("/ui/sessions", params={"until": yesterday}).text
    assert browser.get("/ui/sessions", params={"since": "yesterday"}).status_code == 400

    # Keyset pages: with two rows a page, the second page starts after the first's last row
    # and a session arriving meanwhile does not shift it.
    import lore_dashboard.app as app

    monkeypatch.setattr(app, "SESSIONS_PER_PAGE", 1)
    first = browser.get("/ui/sessions").text
    following = re.search(r'href="(/ui/sessions\?after=[^"]+)" rel="next"', first)
    assert following, first
    newest = re.findall(r"/ui/session\?id=([\w-]+)", first)
    send_turn(
        served, fake_upstream, "s-new", project, [{"role": "user", "content": "newer"}], Reply(text="ok")
    )
    second = browser.get(html.unescape(following.group(1))).text
    shown = re.findall(r"/ui/session\?id=([\w-]+)", second)
    assert shown and shown[0] not in newest and "s-new" not in shown
    assert {newest[0], shown[0]} == {"s-tools", "s-short"}
    assert browser.get("/ui/sessions", params={"after": "garbage"}).status_code == 400


def test_the_reader_shows_the_conversation_with_tool_output_collapsed(seen: ThreadedServer) -> None:
    page = login(seen).get("/ui/session", params={"id": "s-tools"}).text
    assert f"Plan the {SECRET_WORD} migration" in page
    assert f"The {SECRET_WORD} plan is ready." in page
    assert re.search(r"<details class=\"tool\"><summary>Tool result[^<]*\(\d+ characters\)", page)
    assert page.count("line of output") >= 300  # all of it, inside the <details>
    # Each answer's cost at the gateway's prices: together, what spend says of the session.
    costs = [float(c) for c in re.findall(r'<span class="muted">\$([0-9.]+)</span>', page)]
    spent = {s["session"]: s["usd"] for s in local_api(seen).get("/spend").json()["by_session"]}
    assert len(costs) == 2 and abs(sum(costs) - spent["s-tools"]) < 0.0002, (costs, spent)
    assert "Forget this session" in page


def answer_item(page: str, message_id: str) -> str:
    """The reader's list item of one message."""
    found = re.search(rf'<li class="message [a-z]+" id="m-{re.escape(message_id)}">(.*?)</li>', page, re.S)
    assert found, message_id
    return found.group(1)


def test_the_reader_shows_the_layer_each_answer_was_sent_at(
    served: ThreadedServer, fake_upstream: FakeUpstream, project: Path
) -> None:
    # The context manager starts this session at layer 2 (as after an overflow) and says so.
    assert served.call(served.gateway.context.force_min_layer("s-layer", 2))
    asked = [{"role": "user", "content": "go on"}]
    history = send_turn(served, fake_upstream, "s-layer", project, asked, Reply(text="going on"))
    assert served.gateway.context.session_status("s-layer")["layer"] == 2
    assert history[-1]["content"][0]["text"] == "going on"

    messages = local_api(served).get("/sessions/s-layer").json()["messages"]
    assert [(m["text"], m["origin"], m["context_layer"]) for m in messages] == [
        ("go on", "request", None),
        ("going on", "response", 2),
    ]
    browser = login(served)
    page = browser.get("/ui/session", params={"id": "s-layer"}).text
    sent = answer_item(page, messages[1]["id"])
    assert f'<span class="tag layer">layer 2: {LAYER_MEANINGS[2]}</span>' in sent
    assert LAYER_MEANINGS[2] == "older turns distilled, tool outputs before the last 2 turns annotated"
    assert "layer" not in answer_item(page, messages[0]["id"])  # a request message was not sent at one
    # The other sessions' turns were sent as they were.
    tools = local_api(served).get("/sessions/s-tools").json()["messages"]
    page = browser.get("/ui/session", params={"id": "s-tools"}).text
    answers = [m for m in tools if m["origin"] == "response"]
    assert len(answers) == 2
    for m in answers:
        assert m["context_layer"] == 0
        assert '<span class="tag layer">layer 0: the full conversation</span>' in answer_item(page, m["id"])


def test_the_reader_says_unknown_for_an_answer_stored_without_its_layer(served: ThreadedServer) -> None:
    old = exchange([text("user", "an old question")], answer("an old answer"), session="s-old", at=1e9)
    served.call(served.gateway.store.write(batch_of(old)))
    messages = local_api(served).get("/sessions/s-old").json()["messages"]
    assert [m["context_layer"] for m in messages] == [None, None]
    page = login(served).get("/ui/session", params={"id": "s-old"}).text
    assert '<span class="tag layer">layer unknown</span>' in answer_item(page, messages[1]["id"])
    assert "layer" not in answer_item(page, messages[0]["id"])


def test_search_runs_the_recall_engine(seen: ThreadedServer) -> None:
    browser = login(seen)
    page = browser.get("/ui/search", params={"q": SECRET_WORD}).text
    api = local_api(seen).get("/recall", params={"q": SECRET_WORD, "scope": "all", "limit": "20"}).json()
    assert api["results"]
    # The passages that hold the word are on the page, by their recall ids (the vector index
    # fills in the background, so the looser neighbours may differ between two calls).
    shown = re.findall(r'<code class="rid">([^<]+)</code>', page)
    holding = {r["id"] for r in api["results"] if SECRET_WORD in r["text"]}
    assert len(holding) == 2 and holding <= set(shown), (shown, api["results"])
    assert f"<mark>{SECRET_WORD}</mark>" in page
    # Each message result opens the session at its message (a deep link that finds its page).
    import lore_dashboard.app as app

    link = re.search(r'href="(/ui/session\?id=s-tools&amp;at=(\w+)#m-\w+)"', page)
    assert link, page
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(app, "MESSAGES_PER_PAGE", 1)
        reader = browser.get(html.unescape(link.group(1))).text
    assert f'id="m-{link.group(2)}"' in reader
    assert browser.get("/ui/search", params={"q": "x", "scope": "nowhere"}).status_code == 400


# -- actions ---------------------------------------------------------------------------------


def test_forget_from_the_session_page(served: ThreadedServer) -> None:
    browser = login(served)
    confirm = browser.get("/ui/session/forget", params={"id": "s-tools"})
    assert confirm.status_code == 200 and "for good" in confirm.text
    token = csrf_of(confirm.text)
    # Without the confirmation ticked: refused, nothing forgotten.
    unticked = post(browser, "/ui/session/forget", {"id": "s-tools", "csrf": token})
    assert unticked.status_code == 400
    assert local_api(served).get("/sessions/s-tools").status_code == 200

    hits = local_api(served).get("/search", params={"q": SECRET_WORD}).json()
    assert hits and {h["session"] for h in hits} == {"s-tools"}
    done = post(browser, "/ui/session/forget", {"id": "s-tools", "csrf": token, "confirm": "yes"})
    assert done.status_code == 303 and done.headers["location"] == "/ui/sessions?notice=forgotten"
    api = local_api(served)
    assert api.get("/sessions/s-tools").status_code == 404
    assert api.get("/search", params={"q": SECRET_WORD}).json() == []
    listed = browser.get(done.headers["location"]).text
    assert "was forgotten" in listed and "s-tools" not in listed
    assert [s["id"] for s in cli(served, "sessions")] == ["s-short"]
    # Forgetting it again: the API's 404, shown as such.
    again = post(browser, "/ui/session/forget", {"id": "s-tools", "csrf": token, "confirm": "yes"})
    assert again.status_code == 404


def test_knowledge_add_edit_delete_restore(served: ThreadedServer, project: Path) -> None:
    browser = login(served)
    token = csrf_of(browser.get("/ui/knowledge/new").text)
    api = local_api(served)

    created = post(
        browser,
        "/ui/knowledge/new",
        {
            "csrf": token,
            "project": str(project),
            "category": "decision",
            "title": "Use keyset pages",
            "content": "OFFSET scans every skipped row.",
            "scope": "project",
            "sensitivity": "normal",
        },
    )
    assert created.status_code == 303, created.text
    entry_url = created.headers["location"]
    entry_id = urllib.parse.parse_qs(urllib.parse.urlsplit(entry_url).query)["id"][0]
    stored = api.get(f"/knowledge/{entry_id}").json()
    assert stored["entry"]["title"] == "Use keyset pages" and stored["entry"]["source_ref"] == "api"
    listing = browser.get("/ui/knowledge", params={"project": str(project)}).text
    assert "Decision" in listing and "Use keyset pages" in listing

    edited = post(
        browser,
        "/ui/knowledge/edit",
        {
            "csrf": token,
            "id": entry_id,
            "title": "Use keyset pages",
            "category": "decision",
            "sensitivity": "normal",
            "content": "OFFSET scans every skipped row; a cursor does not.",
        },
    )
    assert edited.status_code == 303
    assert api.get(f"/knowledge/{entry_id}").json()["entry"]["version"] == 2
    page = browser.get(edited.headers["location"]).text
    assert "a new version" in page and "v2" in page and "v1" in page
    assert "What changed from the version before" in page
    assert '<span class="added">+ OFFSET scans every skipped row; a cursor does not.</span>' in page

    deleted = post(browser, "/ui/knowledge/delete", {"csrf": token, "id": entry_id})
    assert deleted.status_code == 303
    assert api.get(f"/knowledge/{entry_id}").json()["entry"]["is_deleted"] is True
    assert entry_id not in [e["id"] for e in api.get("/knowledge", params={"project": str(project)}).json()]
    assert "Restore this entry" in browser.get(deleted.headers["location"]).text
    # Listed as deleted (the local API and the knowledge page), with a Restore button.
    gone = api.get("/knowledge", params={"project": str(project), "deleted": "1"}).json()
    assert [e["id"] for e in gone] == [entry_id] and gone[0]["title"] == "Use keyset pages"
    listing = browser.get("/ui/knowledge", params={"project": str(project)}).text
    section = listing[listing.index('<h2 id="deleted">') :]
    assert "Use keyset pages" in section and f'name="id" value="{entry_id}"' in section
    assert 'action="/ui/knowledge/restore"' in section
    assert "Use keyset pages" not in browser.get("/ui/knowledge", params={"category": "gotcha"}).text

    restored = post(browser, "/ui/knowledge/restore", {"csrf": token, "id": entry_id})
    assert restored.status_code == 303
    now = api.get(f"/knowledge/{entry_id}").json()["entry"]
    assert now["is_deleted"] is False and now["version"] == 4
    shown = cli(served, "knowledge", "show", entry_id)
    assert shown["entry"]["is_deleted"] is False and len(shown["versions"]) == 4
    assert entry_id in [e["id"] for e in api.get("/knowledge", params={"project": str(project)}).json()]
    assert api.get("/knowledge", params={"project": str(project), "deleted": "1"}).json() == []
    assert '<h2 id="deleted">' not in browser.get("/ui/knowledge").text


def test_a_refused_knowledge_entry_says_why_and_keeps_the_form(seen: ThreadedServer) -> None:
    browser = login(seen)
    token = csrf_of(browser.get("/ui/knowledge/new").text)
    answer = post(
        browser,
        "/ui/knowledge/new",
        {"csrf": token, "project": "relative/dir", "category": "decision", "title": "T", "content": "C"},
    )
    assert answer.status_code == 400
    assert "absolute" in answer.text and 'value="T"' in answer.text
    assert local_api(seen).get("/knowledge").json() == []


@pytest.mark.parametrize(
    "method, path, data",
    [
        ("GET", "/ui/session", None),
        ("GET", "/ui/session?id=no-such", None),
        ("GET", "/ui/session?id=s-tools&page=x", None),
        ("GET", "/ui/knowledge/entry?id=k:nope", None),
        ("GET", "/ui/knowledge?category=nope", None),
        ("GET", "/ui/sessions?project=relative", None),
        ("GET", "/ui/search?q=x&project=relative", None),
        ("GET", "/ui/static/../app.py", None),
        ("GET", "/ui/static/nothing.css", None),
        ("GET", "/ui/no/such/page", None),
        ("PUT", "/ui/sessions", None),
        ("POST", "/ui/knowledge/edit", {"id": "k:nope", "title": "x"}),
        ("POST", "/ui/knowledge/delete", {}),
        ("POST", "/ui/knowledge/restore", {"id": "k:nope"}),
        ("POST", "/ui/session/forget", {"id": "no-such", "confirm": "yes"}),
        ("GET", "/ui/sessions?q=%ff", None),
        ("GET", "/ui/sessions?until=2026-13-01", None),
        ("GET", "/ui/open?id=k:", None),
        ("GET", "/ui/spend?days=0", None),
        ("GET", "/ui/events?run=r&q=x&budget=-1", None),
        ("GET", "/ui/entity?ref=e:0000000000000000", None),
        ("GET", "/ui/review?project=relative", None),
        ("POST", "/ui/review/decide", {"id": "k:nope", "decision": "approved", "by": "x"}),
        ("POST", "/ui/review/decide", {"id": "k:nope", "decision": "approved", "by": "<script>"}),
        ("POST", "/ui/entity/merge", {"keep": "e:x"}),
        ("POST", "/ui/entity/edit", {"ref": "e:0000000000000000", "name": "x"}),
        ("POST", "/ui/contradictions/resolve", {"first": "k:a"}),
        ("POST", "/ui/contradictions/resolve", {"first": "k:a", "second": "k:b", "keep": "both"}),
        ("POST", "/ui/knowledge/new", {"title": "x"}),
    ],
)
def test_client_mistakes_are_never_a_500(
    seen: ThreadedServer, method: str, path: str, data: dict[str, str] | None
) -> None:
    browser = login(seen)
    if data is not None:
        data = {**data, "csrf": csrf_of(browser.get("/ui/").text)}
    answer = browser.request(method, path, data=data)
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text[:300])


def test_a_form_that_is_not_urlencoded_is_refused(seen: ThreadedServer) -> None:
    browser = login(seen)
    answer = browser.post(
        "/ui/logout", content=b'{"csrf": "x"}', headers={"content-type": "application/json"}
    )
    assert answer.status_code == 415


def test_logout_ends_the_session(seen: ThreadedServer) -> None:
    browser = login(seen)
    token = csrf_of(browser.get("/ui/").text)
    answer = post(browser, "/ui/logout", {"csrf": token})
    assert answer.status_code == 303 and "Max-Age=0" in answer.headers["set-cookie"]
    assert browser.get("/ui/sessions").status_code == 401


# -- lore dashboard ----------------------------------------------------------------------------


def test_lore_dashboard_prints_a_link_that_logs_in(seen: ThreadedServer) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lore_core.cli", "dashboard", "--no-start"],
        env={**os.environ, "LORE_PORT": str(seen.port)},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    link = re.search(r"(http://\S+/ui/login\?t=\S+)", done.stdout)
    assert link, done.stdout
    browser = httpx.Client()
    assert browser.get(link.group(1), follow_redirects=True).status_code == 200
    assert "s-tools" in browser.get(seen.url + "/ui/sessions").text


def test_lore_dashboard_without_a_gateway_says_so(lore_env: dict[str, str]) -> None:
    from lore_core.testing.net import free_port

    done = subprocess.run(
        [sys.executable, "-m", "lore_core.cli", "dashboard", "--no-start"],
        env={**os.environ, "LORE_PORT": str(free_port())},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert "no Lore gateway answers" in done.stderr and "lore serve" in done.stderr


# -- contradictions ----------------------------------------------------------------------------


def _two_entries_in_conflict(server: ThreadedServer, project: Path) -> tuple[str, str]:
    """Two entries, and the judge's verdict that they contradict (recorded as the worker's
    judge records it: the judge itself needs a model)."""
    from lore_core.storage.knowledge import KnowledgeContradiction, pair_ids

    api = local_api(server)
    ids = []
    for title, content in (("Tabs", "Indent with tabs."), ("Spaces", "Indent with four spaces, never tabs.")):
        body = {"project": str(project), "category": "preference", "title": title, "content": content}
        answer = api.post("/knowledge", json=body)
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["entry"]["id"])
    first, second = pair_ids(ids[0].removeprefix("k:"), ids[1].removeprefix("k:"))
    stored = api.get("/knowledge", params={"project": str(project)}).json()
    project_key = stored[0]["project"]
    judgement = KnowledgeContradiction(
        first_id=first, second_id=second, project=project_key, status="open", first_fingerprint="a",
        second_fingerprint="b", judged_at=1.0, judged_by="worker:test/judge", reason="tabs against spaces",
    )  # fmt: skip
    server.call(server.gateway.store.record_contradiction(judgement))
    return f"k:{first}", f"k:{second}"


def test_contradictions_keep_one_or_both(served: ThreadedServer, project: Path) -> None:
    first, second = _two_entries_in_conflict(served, project)
    browser = login(served)
    page = browser.get("/ui/contradictions")
    assert page.status_code == 200
    assert (
        "tabs against spaces" in page.text and "Indent with tabs." in page.text and "Keep both" in page.text
    )
    token = csrf_of(page.text)
    api = local_api(served)

    # Neither of the pair, or no CSRF token: refused, nothing changes.
    assert post(browser, "/ui/contradictions/resolve", {"csrf": token, "first": first, "second": second,
                                                        "keep": "k:other"}).status_code == 400  # fmt: skip
    form = {"first": first, "second": second, "keep": second}
    assert post(browser, "/ui/contradictions/resolve", form).status_code == 403
    assert api.get("/knowledge/contradictions", params={"status": "open"}).json()

    done = post(browser, "/ui/contradictions/resolve", {**form, "csrf": token})
    assert done.status_code == 303
    assert api.get("/knowledge/contradictions", params={"status": "open"}).json() == []
    resolved = api.get("/knowledge/contradictions", params={"status": "resolved"}).json()
    assert [r["kept"] for r in resolved] == [second]
    assert [
        r["kept"] for r in cli(served, "knowledge", "contradictions", "--all", "--status", "resolved")
    ] == [second]
    assert api.get(f"/knowledge/{first}").json()["entry"]["is_deleted"] is True
    assert api.get(f"/knowledge/{second}").json()["entry"]["is_deleted"] is False
    assert "No open contradiction" in browser.get(done.headers["location"]).text
    assert "Kept:" in browser.get("/ui/contradictions", params={"status": "all"}).text


def test_contradictions_keep_both(served: ThreadedServer, project: Path) -> None:
    first, second = _two_entries_in_conflict(served, project)
    browser = login(served)
    token = csrf_of(browser.get("/ui/contradictions").text)
    done = post(browser, "/ui/contradictions/resolve", {"csrf": token, "first": first, "second": second,
                                                        "keep": "both"})  # fmt: skip
    assert done.status_code == 303
    api = local_api(served)
    assert [r["status"] for r in api.get("/knowledge/contradictions").json()] == ["kept"]
    assert not any(api.get(f"/knowledge/{i}").json()["entry"]["is_deleted"] for i in (first, second))
    assert browser.get("/ui/contradictions", params={"status": "nope"}).status_code == 400


# -- team review -------------------------------------------------------------------------------


def test_team_review_approve_then_reject_a_change(served: ThreadedServer, project: Path) -> None:
    api = local_api(served)
    browser = login(served)
    unbound = browser.get("/ui/review", params={"project": str(project)})
    assert unbound.status_code == 200 and "not bound to a team" in unbound.text

    bound = api.post(
        "/team", json={"project": str(project), "action": "bind", "team": "core", "policy": "manual"}
    )
    assert bound.status_code == 200, bound.text
    body = {
        "project": str(project),
        "category": "decision",
        "title": "Squash merges",
        "content": "Squash on merge.",
    }
    entry_id = api.post("/knowledge", json=body).json()["entry"]["id"]
    page = browser.get("/ui/review", params={"project": str(project)})
    assert "Squash merges" in page.text and "Team <strong>core</strong>" in page.text and ">new<" in page.text
    token = csrf_of(page.text)

    form = {"csrf": token, "id": entry_id, "project": str(project), "by": "ana", "decision": "approved"}
    assert post(browser, "/ui/review/decide", {**form, "decision": "maybe"}).status_code == 400
    assert post(browser, "/ui/review/decide", {**form, "csrf": "wrong"}).status_code == 403
    assert api.get("/knowledge/pending", params={"project": str(project)}).json()["pending"]

    done = post(browser, "/ui/review/decide", form)
    assert done.status_code == 303
    assert "Approved" in browser.get(done.headers["location"]).text
    pending = api.get("/knowledge/pending", params={"project": str(project)}).json()
    assert pending["pending"] == [] and pending["rejected"] == []
    said = cli(served, "knowledge", "pending", "--project", str(project))
    assert said["pending"] == [] and said["team"]["team"] == "core"

    # A change waits again, shown as a diff from the approved text; rejected, it is listed so.
    changed = api.patch(f"/knowledge/{entry_id}", json={"content": "Rebase, then merge."})
    assert changed.status_code == 200, changed.text
    page = browser.get("/ui/review", params={"project": str(project)}).text
    assert "changed since approval" in page
    assert '<span class="removed">- Squash on merge.</span>' in page
    assert '<span class="added">+ Rebase, then merge.</span>' in page
    rejected = post(browser, "/ui/review/decide", {**form, "decision": "rejected", "by": "bo"})
    assert rejected.status_code == 303
    pending = api.get("/knowledge/pending", params={"project": str(project)}).json()
    assert pending["pending"] == [] and [r["id"] for r in pending["rejected"]] == [entry_id]
    assert pending["rejected"][0]["decision"]["decided_by"] == "bo"
    assert "Rejected (1)" in browser.get("/ui/review", params={"project": str(project)}).text


# -- spend -------------------------------------------------------------------------------------


def test_spend_by_day_model_and_session(seen: ThreadedServer) -> None:
    browser = login(seen)
    report = local_api(seen).get("/spend", params={"days": "7"}).json()
    page = browser.get("/ui/spend")
    assert page.status_code == 200
    text = page.text
    # A bar per day, with its figure in the bar's title and in the table.
    assert text.count('<rect class="bar"') == 7 == len(report["by_day"])
    for day in report["by_day"]:
        assert f"<title>{day['day']}: ${day['usd']:.4f}</title>" in text
    assert report["by_model"], report
    for model in report["by_model"]:
        assert f'<th scope="row">{model["model"]}</th>' in text
        assert f'<td class="num" data-label="Exchanges">{model["exchanges"]}</td>' in text
    assert browser.get("/ui/spend", params={"days": "30"}).text.count('<rect class="bar"') == 30
    assert browser.get("/ui/spend", params={"days": "5"}).status_code == 400
    assert browser.get("/ui/spend", params={"days": "x"}).status_code == 400


def test_a_sessions_spend_over_time_on_its_page(
    served: ThreadedServer, fake_upstream: FakeUpstream, project: Path
) -> None:
    # A side request of the same session (a title, say): another branch, spent all the same.
    side = [{"role": "user", "content": "name it"}]
    send_turn(served, fake_upstream, "s-tools", project, side, Reply(text="T"))
    spent = {s["session"]: s["usd"] for s in local_api(served).get("/spend").json()["by_session"]}
    page = login(served).get("/ui/session", params={"id": "s-tools"}).text
    assert "Spend over time" in page
    points = re.search(r'<polyline class="line" points="([^"]+)"', page)
    assert points, page
    ys = [float(p.split(",")[1]) for p in points.group(1).split()]
    # From nothing up to the total, answer by answer.
    assert len(ys) == 4 and ys == sorted(ys, reverse=True) and ys[0] == 160 and ys[-1] == 10
    # Every answer priced, side request included: what spend says of the session.
    total = re.search(r"<figcaption class=\"muted\">\$([0-9.]+) over 3 answers \(every branch\)", page)
    assert total and abs(float(total.group(1)) - spent["s-tools"]) < 0.0002, (total, spent)
    rows = re.findall(r'"Answers">(\d+)</td><td class="num" data-label="Dollars">([0-9.]+)</td>', page)
    assert sum(int(n) for n, _ in rows) == 3
    assert abs(sum(float(d) for _, d in rows) - spent["s-tools"]) < 0.0002
    # The conversation shown is still the main branch.
    assert "name it" not in page and f"The {SECRET_WORD} plan is ready." in page


def test_spend_over_time_adds_up_answer_by_answer() -> None:
    from lore_dashboard.app import spend_over_time

    chart = spend_over_time([(7200.0, 1.0), (0.0, 3.0), (7300.0, 0.0)], width=300, height=110)
    # In time order, one answer per 100 units: up by 3, then by 1, then flat.
    assert chart["points"] == "0,110 100,35 200,10 300,10"
    assert chart["total"] == 4.0 and chart["answers"] == 3
    # By hour: the first answer's, then two hours later the other two.
    assert [(h["answers"], h["usd"], h["running"]) for h in chart["hours"]] == [(1, 3.0, 3.0), (2, 1.0, 4.0)]
    # However many answers, at most one point per unit of width (and the start).
    many = spend_over_time([(i / 10, 0.01) for i in range(5000)], width=100)
    assert len(many["points"].split()) <= 102 and many["points"].endswith(" 100,10")
    assert spend_over_time([])["points"] == ""
    assert spend_over_time([(5.0, 0.0)])["points"] == "0,160 720,160"


def test_the_cache_read_share() -> None:
    from lore_dashboard.app import cache_read_share, day_bars

    assert cache_read_share({"input_tokens": 10, "cache_read_tokens": 30, "cache_write_tokens": 60}) == 0.3
    assert cache_read_share({"input_tokens": 0}) is None
    chart = day_bars([{"day": "a", "usd": 1.0}, {"day": "b", "usd": 0.5}, {"day": "c", "usd": 0}], height=120)
    heights = [b["h"] for b in chart["bars"]]
    assert heights == [100.0, 50.0, 0.0] and chart["top"] == 1.0
    assert all(b["y"] + b["h"] == 120 for b in chart["bars"])


def test_projects_with_their_sessions_knowledge_and_spend(served: ThreadedServer, project: Path) -> None:
    api = local_api(served)
    body = {"project": str(project), "category": "decision", "title": "T", "content": "C"}
    api.post("/knowledge", json=body).raise_for_status()
    page = login(served).get("/ui/projects")
    assert page.status_code == 200
    row = re.search(r'<th scope="row" class="path">([^<]+)</th>(.*?)</tr>', page.text, re.S)
    assert row and row.group(1) == api.get("/sessions").json()[0]["project"]
    cells = re.findall(r'data-label="([^"]+)">(?:<a [^>]+>)?([^<]+)', row.group(2))
    found = dict(cells)
    sessions = api.get("/sessions").json()
    assert found["Sessions"] == str(len(sessions)) == "2"
    assert found["Messages"] == str(sum(s["message_count"] for s in sessions))
    assert found["Knowledge"] == "1"
    # Every session spent today: all they ever spent is the week's spend.
    spent = sum(s["usd"] for s in api.get("/spend", params={"days": "7"}).json()["by_session"])
    assert 0 < spent < 1 and found["Spend"] == f"${spent:.4f}"
    # The figures of the store's own query, as the local API gives them.
    (listed,) = [p for p in api.get("/projects").json() if p["project"] == row.group(1)]
    assert (listed["sessions"], listed["knowledge"]) == (2, 1)
    assert found["Messages"] == str(listed["messages"]) and found["Spend"] == f"${listed['spend_usd']:.4f}"


# -- entities ----------------------------------------------------------------------------------


def _entity(api: httpx.Client, project: Path, name: str, kind: str, aliases: list[str]) -> str:
    body = {"project": str(project), "name": name, "kind": kind, "aliases": aliases}
    answer = api.post("/entities/add", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["entity"]["id"])


def test_entities_rename_merge_delete(served: ThreadedServer, project: Path) -> None:
    api = local_api(served)
    billing = _entity(api, project, "billing-service", "service", ["billing"])
    payments = _entity(api, project, "payments", "service", ["pay-svc"])
    browser = login(served)
    listing = browser.get("/ui/entities").text
    assert "billing-service" in listing and "pay-svc" in listing
    page = browser.get("/ui/entity", params={"ref": billing})
    assert page.status_code == 200 and "billing-service" in page.text
    token = csrf_of(page.text)

    renamed = post(
        browser, "/ui/entity/edit", {"csrf": token, "ref": billing, "name": "ledger", "kind": "service"}
    )
    assert renamed.status_code == 303
    assert api.get("/entities/show", params={"ref": billing}).json()["entity"]["name"] == "ledger"

    merged = post(browser, "/ui/entity/merge", {"csrf": token, "keep": billing, "other": payments})
    assert merged.status_code == 303
    shown = api.get("/entities/show", params={"ref": billing}).json()
    assert shown["merged"] == [payments] and "pay-svc" in shown["entity"]["aliases"]
    assert "Merged into it" in browser.get(merged.headers["location"]).text

    unticked = post(browser, "/ui/entity/delete", {"csrf": token, "ref": billing})
    assert unticked.status_code == 400
    assert post(browser, "/ui/entity/delete", {"ref": billing, "confirm": "yes"}).status_code == 403
    deleted = post(browser, "/ui/entity/delete", {"csrf": token, "ref": billing, "confirm": "yes"})
    assert deleted.status_code == 303
    assert api.get("/entities/show", params={"ref": billing}).status_code == 404
    assert api.get("/entities").json() == []
    assert browser.get("/ui/entity", params={"ref": billing}).status_code == 404
    assert browser.get("/ui/entity", params={"ref": "nope"}).status_code == 400


# -- events ------------------------------------------------------------------------------------


def test_events_counters_and_a_pack_preview(served: ThreadedServer, project: Path) -> None:
    events = [
        {"kind": "note", "content": f"the {SECRET_WORD} deploy failed on the migration step"},
        {"kind": "fact", "content": "staging runs postgres 16", "working": True, "key": "db"},
    ]
    body = {"project": str(project), "run": "deploy-1", "events": events}
    written = httpx.post(served.url + "/v1/events", json=body, headers=api_headers(), timeout=30)
    assert written.status_code == 200, written.text
    browser = login(served)
    page = browser.get("/ui/events")
    assert page.status_code == 200 and '<h3>Events written</h3><p class="big">2</p>' in page.text

    params = {"project": str(project), "run": "deploy-1", "q": SECRET_WORD}
    preview = browser.get("/ui/events", params=params)
    assert preview.status_code == 200, preview.text
    # What /v1/pack answers, shown: the run's coverage, the live working fact, the text the
    # agent gets (the distilled section's passages depend on the search's time budget).
    assert re.search(r"through event \d of 2", preview.text)
    assert "<code>db</code>: staging runs postgres 16" in preview.text
    assert "LORE MEMORY PACK" in preview.text and "run deploy-1: events 1-2" in preview.text
    bad = browser.get("/ui/events", params={**params, "run": "not a run!"})
    assert bad.status_code == 400 and "body.run" in bad.text
    assert browser.get("/ui/events", params={**params, "budget": "x"}).status_code == 400


def test_events_lists_the_runs_and_a_runs_events(served: ThreadedServer, project: Path) -> None:
    for run, count in (("deploy-2", 3), ("lint", 1)):
        events = [{"kind": "note", "content": f"{run} step {i}"} for i in range(1, count + 1)]
        body = {"project": str(project), "run": run, "events": events}
        written = httpx.post(served.url + "/v1/events", json=body, headers=api_headers(), timeout=30)
        assert written.status_code == 200, written.text
    browser = login(served)
    page = browser.get("/ui/events").text
    runs = page[page.index('<h2 id="runs">') : page.index("<h2>Pack preview</h2>")]
    # Every run (their order, most recently updated first, moves with the pipeline's
    # checkpoints too), each linking to its events.
    assert {"deploy-2", "lint"} <= set(re.findall(r"<code>([\w-]+)</code></a></th>", runs))
    assert {r["run"]: r["last_seq"] for r in local_api(served).get("/runs").json()}["deploy-2"] == 3
    query = urllib.parse.urlencode({"project": str(project), "run": "deploy-2"}, quote_via=urllib.parse.quote)
    assert f'href="/ui/events?{html.escape(query)}#run"' in runs
    shown = browser.get("/ui/events", params={"project": str(project), "run": "deploy-2"})
    assert shown.status_code == 200
    text = shown.text[shown.text.index('<h2 id="run">') :]
    assert text.index("deploy-2 step 3") < text.index("deploy-2 step 1")  # newest first
    # Pages of events: with one a page, the older link goes on from the last one shown.
    import lore_dashboard.app as app

    original = app.EVENTS_PER_PAGE
    app.EVENTS_PER_PAGE = 1
    try:
        first = browser.get("/ui/events", params={"project": str(project), "run": "deploy-2"}).text
        older = re.search(r'href="(/ui/events\?[^"]+)#run" rel="next"', first)
        assert older and "deploy-2 step 3" in first and "deploy-2 step 2" not in first
        second = browser.get(html.unescape(older.group(1))).text
        assert "deploy-2 step 2" in second and "deploy-2 step 3" not in second
    finally:
        app.EVENTS_PER_PAGE = original
    missing = browser.get("/ui/events", params={"project": str(project), "run": "no-such-run"})
    assert missing.status_code == 200 and "No run <code>no-such-run</code>" in missing.text
    assert browser.get("/ui/events", params={"run": "deploy-2", "before": "x"}).status_code == 400


# -- recall ids open where they live ---------------------------------------------------------------


def test_a_recall_id_opens_where_it_lives(served: ThreadedServer, project: Path) -> None:
    api = local_api(served)
    browser = login(served)
    message = api.get("/recall", params={"q": SECRET_WORD, "scope": "all"}).json()["results"][0]
    assert message["id"].startswith("t:")
    opened = browser.get("/ui/open", params={"id": message["id"]})
    assert opened.status_code == 303
    location = opened.headers["location"]
    assert location.endswith(f"#m-{message['item']}") and "at=" in location
    assert f'id="m-{message["item"]}"' in browser.get(location.split("#")[0]).text

    body = {"project": str(project), "category": "gotcha", "title": "Ids", "content": "k ids open entries"}
    entry = api.post("/knowledge", json=body).json()["entry"]["id"]
    assert browser.get("/ui/open", params={"id": entry}).headers["location"] == (
        "/ui/knowledge/entry?" + urllib.parse.urlencode({"id": entry})
    )
    assert browser.get("/ui/open", params={"id": "garbage"}).status_code == 400
    assert browser.get("/ui/open", params={"id": "t:00000000000000000000000000000000:0"}).status_code == 404

    # A run memory (d:) opens on a passage page with its text.
    events = [{"kind": "note", "content": f"the {SECRET_WORD} rollout paused"}]
    write = {"project": str(project), "run": "rollout", "events": events}
    assert httpx.post(served.url + "/v1/events", json=write, headers=api_headers()).status_code == 200
    asked = {"project": str(project), "run": "rollout", "query": SECRET_WORD}
    memory = None
    for _ in range(100):
        pack = httpx.post(served.url + "/v1/pack", json=asked, headers=api_headers(), timeout=30).json()
        items = next(s["items"] for s in pack["sections"] if s["name"] == "distilled")
        memory = next((i["id"] for i in items if i["id"].startswith("d:")), None)
        if memory:
            break
        time.sleep(0.1)
    assert memory, pack
    passage = browser.get("/ui/open", params={"id": memory})
    assert passage.status_code == 200 and f"the {SECRET_WORD} rollout paused" in passage.text


def test_recall_ids_in_text_become_links() -> None:
    from lore_dashboard.app import _link_ids

    html_out = str(_link_ids("see t:0123456789abcdef:2 and e:g, <b>k:fedcba9876543210</b>"))
    assert html_out.count('<a class="rid"') == 2
    assert 'href="/ui/open?id=t%3A0123456789abcdef%3A2">t:0123456789abcdef:2</a>' in html_out
    assert "&lt;b&gt;" in html_out and "e:g" in html_out


def test_the_reader_shows_the_distillations_and_what_each_covers(
    start_gateway: Callable[..., ThreadedServer], fake_upstream: FakeUpstream, project: Path
) -> None:
    # The extractive observer (no model), and a first segment as small as this session.
    config = {"distill": {"observer": "extractive", "firstSegmentMinMessages": 1, "firstSegmentMinTokens": 0}}
    served = start_gateway(config=config)
    replay_traffic(served, fake_upstream, project)
    api = local_api(served)
    distilled = api.post("/distill", params={"session": "s-tools"})
    assert distilled.status_code == 200, distilled.text
    found = api.get("/distillations", params={"session": "s-tools"}).json()
    assert found, distilled.json()
    browser = login(served)
    page = browser.get("/ui/session", params={"id": "s-tools"}).text
    assert f"Distillations ({len(found)})" in page
    first = next(d for d in found if d["generation"] == 0)
    for source in first["source_ids"]:
        message = re.search(rf'<li class="message [a-z]+" id="m-{re.escape(source)}">(.*?)</li>', page, re.S)
        assert message and f"/ui/open?id=d%3A{first['id']}" in message.group(1)
    opened = browser.get("/ui/open", params={"id": f"d:{first['id']}"})
    assert opened.status_code == 200 and first["text"][:40] in html.unescape(opened.text)


def test_the_reader_shows_the_recall_calls_and_what_the_model_got(
    served: ThreadedServer, fake_upstream: FakeUpstream, project: Path
) -> None:
    fake_upstream.enqueue(
        Reply(text="", tool_calls=[ToolCall("recall", {"query": SECRET_WORD})]), Reply(text="Found the plan.")
    )
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "x-session-id": "s-recall",
               "X-Lore-Project": str(project)}  # fmt: skip
    body = {
        "model": "claude-test",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "what was the plan?"}],
        "tools": [{"name": "read_file", "description": "read a file", "input_schema": {"type": "object"}}],
    }
    answer = httpx.post(served.url + "/v1/messages", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    stored = local_api(served).get("/sessions/s-recall").json()
    state = stored["state"]
    assert state.get("recall.restore"), state
    # The follow-up went upstream as the composed request plus the recall turn: its layer.
    followed = [m for m in stored["messages"] if m["text"] == "Found the plan."]
    assert [m["context_layer"] for m in followed] == [0], stored["messages"]
    page = login(served).get("/ui/session", params={"id": "s-recall"}).text
    assert "Recall calls (1)" in page and SECRET_WORD in page
    # The results the model got carry their recall ids, each a link that opens it.
    got = page[page.index("What the model got") : page.index("As sent")]
    assert "Plan the zanzibarquux migration" in got
    assert re.search(r'<a class="rid" href="/ui/open\?id=t%3A', got)
    assert "credential" not in page
