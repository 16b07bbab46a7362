"""The dashboard in a real headless browser (Playwright driving the system's Chromium; no
browser is downloaded): log in through the link ``lore dashboard`` mints, visit every page
at 1280 and 390 px, forget a session and add, delete and restore a knowledge entry through
the forms, and see each action in the local API afterwards; a page without the cookie shows
no memory; the Content-Security-Policy reports no violation (no inline script or style).

Skipped when Playwright or a Chromium is missing (a plugin installed alone); ``.ci/run``
installs both and sets ``LORE_REQUIRE_BROWSER=1``, which turns the skip into a failure.
Screenshots go to ``LORE_SCREENSHOTS`` when set, else to the test's temporary directory.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lore_dashboard.app import LAYER_MEANINGS

from lore_core.testing.fake_upstream import FakeUpstream, Reply
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
SECRET_WORD = "zanzibarquux"


def _chromium() -> str | None:
    configured = os.environ.get("LORE_CHROMIUM")
    if configured:
        return configured
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed"
    if _chromium() is None:
        return "no chromium on PATH (apt-get install chromium)"
    return None


@pytest.fixture
def browser() -> Iterator[Any]:
    why = _missing()
    if why is not None:
        if os.environ.get("LORE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"LORE_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=_chromium(), headless=True, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def _send(
    server: ThreadedServer, fake: FakeUpstream, session: str, project: Path, history: list[Any]
) -> None:
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "x-session-id": session,
               "X-Lore-Project": str(project)}  # fmt: skip
    body = {"model": "claude-test", "max_tokens": 50, "messages": history}
    httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30).raise_for_status()


def _replay(server: ThreadedServer, fake: FakeUpstream, project: Path) -> None:
    # Usage as a coding agent's turns report it: the prompt written to the cache, then read back.
    fake.enqueue(
        Reply(text="I will read the billing module first.", input_tokens=2_400, cache_write_tokens=18_000,
              output_tokens=120)
    )  # fmt: skip
    fake.enqueue(
        Reply(text=f"The {SECRET_WORD} refund path double-counts the fee; fixed in ledger.py.",
              input_tokens=900, cache_read_tokens=18_000, cache_write_tokens=6_500, output_tokens=310)
    )  # fmt: skip
    fake.enqueue(Reply(text="Added exponential backoff to the webhook handler."))
    first = [{"role": "user", "content": f"Why does the {SECRET_WORD} refund test fail?"}]
    _send(server, fake, "s-billing", project, first)
    second = [
        *first,
        {"role": "assistant", "content": [
            {"type": "text", "text": "I will read the billing module first."},
            {"type": "tool_use", "id": "call-1", "name": "read_file", "input": {"path": "src/ledger.py"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call-1",
             "content": "".join(f"{n:4}  def line_{n}(): return {n}\n" for n in range(200))},
        ]},
    ]  # fmt: skip
    # As after an overflow: the context manager sends the second turn at layer 2.
    server.call(server.gateway.context.force_min_layer("s-billing", 2))
    _send(server, fake, "s-billing", project, second)
    _send(server, fake, "s-webhook", project, [{"role": "user", "content": "Add retries to the webhook."}])


def _in_conflict(server: ThreadedServer, api: httpx.Client, project: Path) -> tuple[str, str]:
    """Two entries and the judge's verdict on them (recorded as the judge does: it needs a model)."""
    from lore_core.storage.knowledge import KnowledgeContradiction, pair_ids

    made = {}
    for title, content in (("Tabs", "Indent with tabs."), ("Spaces", "Indent with four spaces, never tabs.")):
        body = {"project": str(project), "category": "preference", "title": title, "content": content}
        made[title] = api.post("/knowledge", json=body).json()["entry"]
    first, second = pair_ids(made["Tabs"]["logical_id"], made["Spaces"]["logical_id"])
    judgement = KnowledgeContradiction(
        first_id=first, second_id=second, project=made["Tabs"]["project"], status="open",
        first_fingerprint="a", second_fingerprint="b", judged_at=time.time(), judged_by="worker:test/judge",
        reason="tabs against spaces",
    )  # fmt: skip
    server.call(server.gateway.store.record_contradiction(judgement))
    return made["Tabs"]["id"], made["Spaces"]["id"]


def _mint(server: ThreadedServer) -> str:
    answer = httpx.post(server.url + "/ui/login-links", headers=api_headers())
    assert answer.status_code == 201, answer.text
    return server.url + answer.json()["path"]


# Slow: a Chromium started and every page visited at two widths (test_dashboard.py checks each
# page and action over HTTP in the fast run).
@pytest.mark.slow
def test_the_dashboard_in_a_browser(
    browser: Any,
    start_gateway: Callable[..., ThreadedServer],
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A project path of no machine in particular: it shows in the screenshots (docs/images).
    from playwright.sync_api import expect

    project = Path("/home/dev/shop")
    monkeypatch.setenv("LORE_REVIEWER", "dev")
    server = start_gateway()
    _replay(server, fake_upstream, project)
    api = httpx.Client(base_url=server.url + "/lore/api", headers=api_headers(), timeout=30)
    shots = Path(os.environ.get("LORE_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)

    # Without the cookie: how to log in, no memory.
    page.goto(server.url + "/ui/sessions")
    assert "lore dashboard" in page.content() and SECRET_WORD not in page.content()
    page.screenshot(path=str(shots / "login-needed.png"))

    page.goto(_mint(server))
    assert page.url == server.url + "/ui/"
    cookie = next(c for c in context.cookies() if c["name"] == "lore_dashboard")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert page.get_by_role("heading", name="Health").is_visible()
    page.screenshot(path=str(shots / "health.png"), full_page=True)

    # Keyboard: the skip link is the first stop and leads to the content.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"

    page.get_by_role("link", name="Sessions").click()
    expect(page.get_by_role("row")).to_have_count(3)  # the header and two sessions
    page.screenshot(path=str(shots / "sessions.png"), full_page=True)
    # "/" focuses the first filter field (the script's one enhancement).
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.name") == "project"
    page.keyboard.press("Escape")
    page.get_by_label("Text").fill("webhook")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("row")).to_have_count(2)

    page.goto(server.url + "/ui/sessions")
    page.get_by_role("link", name=f"Why does the {SECRET_WORD} refund test fail?").click()
    call = page.locator("details.tool", has_text="Tool call: read_file")
    expect(call).to_have_count(1)
    assert "src/ledger.py" in (call.text_content() or "")
    # The answer says the layer its request went upstream at, and what that layer holds (the
    # assistant message before it is the client's own, as it resent it: no layer).
    layer = page.locator(".message.assistant .tag.layer")
    expect(layer).to_have_text(f"layer 2: {LAYER_MEANINGS[2]}")
    expect(layer).to_be_visible()
    # The session's spend as it added up: a line over time, its figures by hour.
    expect(page.get_by_role("heading", name="Spend over time")).to_be_visible()
    expect(page.locator("figure.chart svg polyline.line")).to_be_visible()
    page.get_by_text("The figures by hour", exact=True).click()
    expect(page.get_by_role("row", name=re.compile(r"^\d{4}-\d\d-\d\d \d\d:00 2 "))).to_have_count(1)
    page.screenshot(path=str(shots / "session.png"), full_page=True)
    tool = page.locator("details.tool", has_text="Tool result of read_file")
    assert not tool.evaluate("d => d.open")
    tool.locator("summary").first.click()
    assert tool.evaluate("d => d.open")

    page.get_by_role("link", name="Search").click()
    page.get_by_label("Query").fill(SECRET_WORD)
    page.get_by_label("Query").press("Enter")
    assert page.locator("mark").first.inner_text().lower() == SECRET_WORD
    page.screenshot(path=str(shots / "search.png"), full_page=True)

    page.get_by_role("link", name="Projects").click()
    expect(page.get_by_role("row", name="/home/dev/shop")).to_be_visible()
    page.screenshot(path=str(shots / "projects.png"), full_page=True)

    # Entities: rename one through its form.
    body = {"project": str(project), "name": "billing-service", "kind": "service", "aliases": ["billing"]}
    entity = api.post("/entities/add", json=body).json()["entity"]["id"]
    api.post("/entities/add", json={"project": str(project), "name": "ledger.py", "kind": "file"})
    api.post("/entities/relate", json={"ref": entity, "predicate": "owns", "target": "ledger.py",
                                       "project": str(project)})  # fmt: skip
    page.get_by_role("link", name="Entities").click()
    page.get_by_role("link", name="billing-service").click()
    page.get_by_text("Rename").click()
    page.get_by_label("Name", exact=True).fill("billing")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("entity was changed")
    assert api.get("/entities/show", params={"ref": entity}).json()["entity"]["name"] == "billing"
    page.screenshot(path=str(shots / "entity.png"), full_page=True)

    page.get_by_role("link", name="Spend").click()
    expect(page.locator("svg rect.bar")).to_have_count(7)
    expect(page.get_by_role("row", name="claude-test")).to_be_visible()
    page.screenshot(path=str(shots / "spend.png"), full_page=True)

    # Knowledge: add, delete, restore through the forms.
    page.get_by_role("link", name="Knowledge").first.click()
    page.get_by_role("link", name="Add an entry").click()
    page.get_by_label("Project (its absolute directory)").fill(str(project))
    page.get_by_label("Category").select_option("gotcha")
    page.get_by_label("Title").fill("Refund fees are counted once")
    page.get_by_label("Content").fill("ledger.refund() must not add the fee again: the charge already did.")
    page.get_by_role("button", name="Add the entry").click()
    expect(page.get_by_role("status")).to_contain_text("was added")
    entry_id = page.locator("dl.meta code").first.inner_text()
    assert api.get(f"/knowledge/{entry_id}").json()["entry"]["title"] == "Refund fees are counted once"
    page.get_by_role("button", name="Delete this entry").click()
    expect(page.get_by_role("status")).to_contain_text("was deleted")
    assert api.get(f"/knowledge/{entry_id}").json()["entry"]["is_deleted"] is True
    page.get_by_role("button", name="Restore this entry").click()
    expect(page.get_by_role("status")).to_contain_text("was restored")
    assert api.get(f"/knowledge/{entry_id}").json()["entry"]["is_deleted"] is False
    page.screenshot(path=str(shots / "entry.png"), full_page=True)
    page.goto(server.url + f"/ui/knowledge?project={project}")
    page.screenshot(path=str(shots / "knowledge.png"), full_page=True)

    # A cross-site page posting the forget form (with a guessed token): the browser sends
    # its Origin and, SameSite=Strict, no cookie; the gateway refuses, nothing is forgotten.
    attacker = (
        f'<form method="post" action="{server.url}/ui/session/forget">'
        '<input name="id" value="s-webhook"><input name="confirm" value="yes">'
        '<input name="csrf" value="guessed"><button>Win a prize</button></form>'
    )
    context.route(
        "http://attacker.test/", lambda route: route.fulfill(content_type="text/html", body=attacker)
    )
    page.goto("http://attacker.test/")
    with page.expect_response(lambda r: r.url.endswith("/ui/session/forget")) as refused:
        page.get_by_role("button", name="Win a prize").click()
    assert refused.value.status == 403
    assert api.get("/sessions/s-webhook").status_code == 200

    # Forget, with its confirmation.
    page.goto(server.url + "/ui/sessions")
    page.get_by_role("link", name="Add retries to the webhook.").click()
    page.get_by_role("link", name="Forget this session…").click()
    page.screenshot(path=str(shots / "forget.png"))
    page.get_by_role("button", name="Forget the session").click()
    assert api.get("/sessions/s-webhook").status_code == 200  # the box is not ticked: nothing sent
    page.get_by_label("Yes, forget this session for good").check()
    page.get_by_role("button", name="Forget the session").click()
    expect(page.get_by_role("status")).to_contain_text("was forgotten")
    assert api.get("/sessions/s-webhook").status_code == 404

    # A contradiction, settled by keeping one side.
    tabs, spaces = _in_conflict(server, api, project)
    page.get_by_role("link", name="Contradictions").click()
    expect(page.get_by_text("tabs against spaces")).to_be_visible()
    page.screenshot(path=str(shots / "contradictions.png"), full_page=True)
    page.get_by_role("button", name="Keep “Spaces”").click()
    expect(page.get_by_role("status")).to_contain_text("is settled")
    assert api.get(f"/knowledge/{tabs}").json()["entry"]["is_deleted"] is True
    assert api.get(f"/knowledge/{spaces}").json()["entry"]["is_deleted"] is False

    # Team review: a manual team's new entry waits; approving it is recorded.
    api.post("/team", json={"project": str(project), "action": "bind", "team": "core", "policy": "manual"})
    body = {"project": str(project), "category": "decision", "title": "Squash merges", "content": "Squash."}
    api.post("/knowledge", json=body).raise_for_status()
    page.get_by_role("link", name="Team review").click()
    page.get_by_label("Project (bound to a team)").fill(str(project))
    page.get_by_role("button", name="Show").click()
    # Every entry of the project waits now (manual: nothing is shared before a decision).
    expect(page.get_by_role("heading", name="Waiting for a decision (3)")).to_be_visible()
    page.screenshot(path=str(shots / "review.png"), full_page=True)
    page.get_by_role("region", name="Squash merges").get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status")).to_contain_text("Approved")
    waiting = api.get("/knowledge/pending", params={"project": str(project)}).json()["pending"]
    assert "Squash merges" not in [w["title"] for w in waiting] and len(waiting) == 2

    # Narrow: every page still renders without sideways scrolling.
    phone = browser.new_context(viewport={"width": 390, "height": 844}, storage_state=context.storage_state())
    small = phone.new_page()
    narrow = {
        "health": "/ui/",
        "sessions": "/ui/sessions",
        "search": f"/ui/search?q={SECRET_WORD}",
        "knowledge": "/ui/knowledge",
        "session": "/ui/session?id=s-billing",
        "contradictions": "/ui/contradictions?status=all",
        "review": f"/ui/review?project={project}",
        "spend": "/ui/spend",
        "projects": "/ui/projects",
        "entities": "/ui/entities",
        "events": "/ui/events",
    }
    for name, path in narrow.items():
        small.goto(server.url + path)
        assert small.url.startswith(server.url + "/ui"), small.url
        wide = small.evaluate("document.documentElement.scrollWidth")
        assert wide <= 390, (name, wide)
        small.screenshot(path=str(shots / f"{name}-390.png"), full_page=True)
    phone.close()

    # Logging out ends the session in this browser.
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("status")).to_contain_text("logged out")
    page.goto(server.url + "/ui/knowledge")
    assert "Refund fees" not in page.content()
    context.close()
    assert not [p for p in problems if "Content Security Policy" in p], problems
