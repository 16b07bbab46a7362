"""The dashboard: the ``/ui`` mount, its routes and pages.

Every page is rendered here from what the gateway's local API answers (the
:class:`~lore_core.interfaces.LocalApi` the kernel hands :meth:`Dashboard.start`): the
dashboard reads and changes memory exactly as ``lore`` commands do, under the same rules.
It never opens the store itself.

Access (:mod:`lore_dashboard.auth`): the kernel checks Host, Origin and peer
(``authenticates_itself``); here, every page but the login and the static files needs the
session cookie, and every POST its CSRF token. Without the cookie a page says how to log in
and shows no memory (401); a POST without it is a 401, one with a wrong CSRF token a 403.
"""

from __future__ import annotations

import datetime
import difflib
import getpass
import json
import logging
import math
import os
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup, escape

from lore_core.context.pricing import ModelInfo, PriceTable
from lore_core.interfaces import (
    MOUNT_AUTH_SCOPE_KEY,
    ASGIReceive,
    ASGIScope,
    ASGISend,
    LocalApi,
    Mount,
    MountAuth,
)
from lore_core.model import Usage
from lore_core.storage.identity import main_branch
from lore_core.storage.records import StoredMessage
from lore_dashboard import auth
from lore_dashboard.web import BadRequest, Request, Response, json_response, redirect

log = logging.getLogger("lore.dashboard")

PREFIX = "/ui"
#: Sessions per page of the list, messages per page of the reader.
SESSIONS_PER_PAGE = 50
MESSAGES_PER_PAGE = 100
#: A text block longer than this is collapsed in the reader (its start stays visible).
LONG_TEXT_CHARS = 1500
#: Deleted knowledge entries the knowledge page lists (most recently deleted first).
DELETED_SHOWN = 50
#: Runs the events page lists (most recently updated first), events a page of a run shows.
RUNS_SHOWN = 50
EVENTS_PER_PAGE = 50
#: Sessions whose messages mention a sessions-list text filter, shown beside the list.
MENTIONS_SHOWN = 10
#: Results per search.
SEARCH_LIMIT = 20
#: What the recall tool accepts as a scope (the dashboard offers the same).
RECALL_SCOPES = ("all", "session", "project", "knowledge")
CATEGORIES = ("decision", "pattern", "preference", "architecture", "gotcha")
SCOPES = ("project", "global")
SENSITIVITIES = ("normal", "sensitive", "restricted")
CONTRADICTION_STATUSES = ("open", "cleared", "kept", "resolved")
#: Session state keys the reader shows: the recall records (lore_core.recall.memory) and the
#: layer floor the context manager keeps (forceMinLayer).
RECALL_STATE_KEY = "recall.restore"
LAYER_STATE_KEY = "forceMinLayer"
#: What the prompt of each context layer holds (docs/context.md), shown beside each answer.
LAYER_MEANINGS = {
    0: "the full conversation",
    1: "older turns distilled",
    2: "older turns distilled, tool outputs before the last 2 turns annotated",
    3: "older turns distilled, tool outputs outside this turn annotated",
    4: "emergency: the newest distillations and a short raw tail",
}
#: The periods the spend page offers, in days.
SPEND_PERIODS = (7, 30, 90)
#: Sessions listed by spend.
SPEND_SESSIONS = 20
#: Messages a redirect may ask a page to show (a fixed set: no text comes from the URL).
NOTICES = {
    "forgotten": "The session was forgotten: its messages, distillations and search entries are gone.",
    "created": "The knowledge entry was added.",
    "edited": "The knowledge entry was changed (a new version).",
    "deleted": "The knowledge entry was deleted (its versions are kept: it can be restored).",
    "restored": "The knowledge entry was restored.",
    "unchanged": "Nothing changed: the entry already said that.",
    "logged-out": "You are logged out.",
    "resolved": "The contradiction is settled.",
    "approved": "Approved: the team shares this text.",
    "entity-edited": "The entity was changed.",
    "entity-merged": "Merged: the other entity's names and relations are this one's now.",
    "entity-deleted": "The entity was deleted, with the relations to it.",
    "rejected": "Rejected: the team does not get this text.",
}
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}

Handler = Callable[[Request, auth.Session], Awaitable[Response]]


def _fmt_time(value: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(float(value)))
    except (TypeError, ValueError, OverflowError):
        return ""


def _fmt_iso(value: Any) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(float(value)))
    except (TypeError, ValueError, OverflowError):
        return ""


def _fmt_duration(seconds: Any) -> str:
    try:
        total = int(float(seconds))
    except (TypeError, ValueError, OverflowError):
        return ""
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s"


def _fmt_duration_ms(value: Any) -> str:
    """Milliseconds as people read them: ms below a second, else as :func:`_fmt_duration`."""
    try:
        ms = float(value)
    except (TypeError, ValueError, OverflowError):
        return ""
    if not math.isfinite(ms):
        return ""
    return f"{round(ms)} ms" if ms < 1000 else _fmt_duration(ms / 1000)


def _fmt_usd(value: Any) -> str:
    """Dollars: cents once there are dollars, four decimals below one."""
    try:
        usd = float(value or 0)
    except (TypeError, ValueError):
        return ""
    return f"${usd:,.2f}" if abs(usd) >= 1 or usd == 0 else f"${usd:.4f}"


def _highlight(text: str, query: str) -> Markup:
    """``text`` escaped, the query's words in it wrapped in ``<mark>``."""
    words = sorted({w for w in re.findall(r"\w{2,}", query.lower())}, key=len, reverse=True)
    if not words:
        return escape(text)
    pattern = re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE)
    out: list[str] = []
    last = 0
    for match in pattern.finditer(text):
        out.append(str(escape(text[last : match.start()])))
        out.append(f"<mark>{escape(match.group(0))}</mark>")
        last = match.end()
    out.append(str(escape(text[last:])))
    return Markup("".join(out))


def text_diff(old: str, new: str) -> list[tuple[str, str]]:
    """Line by line: ``("same" | "removed" | "added", line)``, for showing what changed."""
    out: list[tuple[str, str]] = []
    for line in difflib.ndiff(old.splitlines(), new.splitlines()):
        tag, text = line[:2], line[2:]
        if tag == "  ":
            out.append(("same", text))
        elif tag == "- ":
            out.append(("removed", text))
        elif tag == "+ ":
            out.append(("added", text))
    return out


def version_text(version: Mapping[str, Any]) -> str:
    """What a version says, as its diff compares it: category, title, then the content."""
    if version.get("is_deleted"):
        return ""
    return f"[{version.get('category', '')}] {version.get('title', '')}\n{version.get('content', '')}"


def with_diffs(versions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The versions newest first, each with its diff from the one before (the first: none)."""
    out = []
    for index, version in enumerate(versions):
        before = versions[index - 1] if index else None
        diff = text_diff(version_text(before), version_text(version)) if before is not None else []
        out.append({**version, "diff": diff})
    return out[::-1]


def cache_read_share(row: Mapping[str, Any]) -> float | None:
    """The share of a model's prompt tokens read from the provider's cache (``None``: no
    prompt tokens)."""
    read = float(row.get("cache_read_tokens") or 0)
    prompt = read + float(row.get("input_tokens") or 0) + float(row.get("cache_write_tokens") or 0)
    return read / prompt if prompt else None


def day_bars(days: list[Mapping[str, Any]], width: int = 720, height: int = 160) -> dict[str, Any]:
    """An SVG bar chart's geometry (attributes, not CSS: the policy allows no inline style)
    for dollars per day."""
    top = max((float(d.get("usd") or 0) for d in days), default=0.0)
    slot = width / max(1, len(days))
    bars = []
    for index, day in enumerate(days):
        usd = float(day.get("usd") or 0)
        h = 0.0 if top <= 0 else (height - 20) * usd / top
        bars.append(
            {
                "x": round(index * slot + slot * 0.1, 2),
                "y": round(height - h, 2),
                "w": round(slot * 0.8, 2),
                "h": round(h, 2),
                "day": day.get("day", ""),
                "usd": usd,
            }
        )
    return {"width": width, "height": height, "bars": bars, "top": top}


def layer_label(layer: Any) -> str:
    """What the reader says of the layer an answer's request was sent at."""
    if not isinstance(layer, int) or layer not in LAYER_MEANINGS:
        return "layer unknown"
    return f"layer {layer}: {LAYER_MEANINGS[layer]}"


def spend_over_time(
    answers: list[tuple[float, float]], width: int = 720, height: int = 160
) -> dict[str, Any]:
    """How a session's spend added up: ``answers`` are each priced answer's time and dollars.
    The SVG geometry (attributes, not CSS: the policy allows no inline style) of the running
    total answer by answer, evenly spaced (a steeper stretch is dearer turns: a growing
    prompt, a cache rewritten), at most one point per horizontal unit however many answers;
    and the figures by local hour, for when."""
    answers = sorted(answers)
    if not answers:
        return {"width": width, "height": height, "points": "", "hours": [], "total": 0.0, "answers": 0}
    total = sum(usd for _, usd in answers)
    usable = height - 10  # the top stays clear of the frame
    reached: dict[float, float] = {}
    hours: dict[str, dict[str, Any]] = {}
    # Formatting a local time costs ~10 us: once per quarter of an hour (every time zone's
    # offset is a multiple of one, so a quarter lies within one local hour).
    labels: dict[int, str] = {}
    running = 0.0
    for number, (at, usd) in enumerate(answers, 1):
        running += usd
        reached[round(width * number / len(answers))] = running
        quarter = int(at // 900)
        hour = labels.get(quarter)
        if hour is None:
            hour = labels[quarter] = time.strftime("%Y-%m-%d %H:00", time.localtime(at))
        row = hours.setdefault(hour, {"hour": hour, "answers": 0, "usd": 0.0})
        row["answers"] += 1
        row["usd"] += usd
        row["running"] = running
    points = [(0.0, 0.0), *reached.items()]
    return {
        "width": width,
        "height": height,
        "points": " ".join(
            f"{x:g},{round(height - (usable * r / total if total > 0 else 0.0), 2):g}" for x, r in points
        ),
        "hours": list(hours.values()),
        "total": total,
        "start": answers[0][0],
        "end": answers[-1][0],
        "answers": len(answers),
    }


#: A recall id in text: its kind letter and a store-made key of at least 8 characters (so that
#: words such as "e:g" are left alone).
RECALL_ID = re.compile(r"\b([tdke]):([A-Za-z0-9][A-Za-z0-9_.\-]{7,}(?::\d+)?)")


def _link_ids(text: str) -> Markup:
    """``text`` escaped, every recall id in it a link that opens it (``/ui/open?id=``)."""
    out: list[str] = []
    last = 0
    for match in RECALL_ID.finditer(text):
        out.append(str(escape(text[last : match.start()])))
        rid = match.group(0)
        href = f"{PREFIX}/open?id={urllib.parse.quote(rid, safe='')}"
        out.append(f'<a class="rid" href="{escape(href)}">{escape(rid)}</a>')
        last = match.end()
    out.append(str(escape(text[last:])))
    return Markup("".join(out))


def long_texts(value: Any, least: int = 80) -> list[str]:
    """The text strings of a JSON value at least ``least`` characters long, in order (what a
    recall round sent the model, without the wire's envelope)."""
    if isinstance(value, str):
        return [value] if len(value) >= least else []
    if isinstance(value, dict):
        return [t for item in value.values() for t in long_texts(item, least)]
    if isinstance(value, list):
        return [t for item in value for t in long_texts(item, least)]
    return []


def _pretty_json(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("lore_dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        time=_fmt_time,
        iso=_fmt_iso,
        duration=_fmt_duration,
        duration_ms=_fmt_duration_ms,
        usd=_fmt_usd,
        pretty=_pretty_json,
        highlight=_highlight,
        ids=_link_ids,
        q=lambda v: urllib.parse.quote(str(v), safe=""),
    )
    return env


def _cursor(row: Mapping[str, Any]) -> tuple[float, str]:
    return (float(row.get("updated_at") or 0.0), str(row.get("id") or ""))


def _day_start(value: str, name: str) -> float | None:
    """A ``YYYY-MM-DD`` day's first second in local time, or ``None`` for no value."""
    if not value:
        return None
    try:
        day = datetime.date.fromisoformat(value)
    except ValueError:
        raise BadRequest(f"{name} must be a day: YYYY-MM-DD") from None
    return time.mktime(day.timetuple())


def parse_cursor(value: str) -> tuple[float, str] | None:
    """``"<updated_at>~<id>"`` (the last row of the previous page), or ``None``."""
    if not value:
        return None
    stamp, sep, session_id = value.partition("~")
    try:
        number = float(stamp)
    except ValueError:
        number = math.nan
    if not sep or not session_id or not math.isfinite(number):
        raise BadRequest("after must be <updated_at>~<session id>, as the Next link gives it")
    return number, session_id


class Dashboard(Mount):
    """The web dashboard under ``/ui``."""

    name = "dashboard"
    path = PREFIX
    authenticates_itself = True

    def __init__(self, prices: PriceTable | None = None) -> None:
        self._prices = prices or PriceTable()
        self._api: LocalApi | None = None
        self.gate = auth.Gatekeeper()
        self._env = _environment()
        self._static = resources.files("lore_dashboard") / "static"
        self._pages: dict[tuple[str, str], Handler] = {
            ("GET", ""): self.health_page,
            ("GET", "/projects"): self.projects_page,
            ("GET", "/sessions"): self.sessions_page,
            ("GET", "/open"): self.open_id,
            ("GET", "/session"): self.session_page,
            ("GET", "/session/forget"): self.forget_page,
            ("POST", "/session/forget"): self.forget_action,
            ("GET", "/search"): self.search_page,
            ("GET", "/knowledge"): self.knowledge_page,
            ("GET", "/knowledge/entry"): self.entry_page,
            ("GET", "/knowledge/new"): self.new_entry_page,
            ("POST", "/knowledge/new"): self.create_action,
            ("POST", "/knowledge/edit"): self.edit_action,
            ("POST", "/knowledge/delete"): self.delete_action,
            ("POST", "/knowledge/restore"): self.restore_action,
            ("GET", "/spend"): self.spend_page,
            ("GET", "/review"): self.review_page,
            ("POST", "/review/decide"): self.decide_action,
            ("GET", "/entities"): self.entities_page,
            ("GET", "/entity"): self.entity_page,
            ("POST", "/entity/edit"): self.entity_edit_action,
            ("POST", "/entity/merge"): self.entity_merge_action,
            ("POST", "/entity/delete"): self.entity_delete_action,
            ("GET", "/events"): self.events_page,
            ("GET", "/contradictions"): self.contradictions_page,
            ("POST", "/contradictions/resolve"): self.resolve_action,
            ("POST", "/logout"): self.logout_action,
        }

    async def start(self, api: LocalApi) -> None:
        self._api = api

    async def stop(self) -> None:
        self._api = None

    @property
    def api(self) -> LocalApi:
        if self._api is None:
            raise RuntimeError("the dashboard is not started")
        return self._api

    # -- dispatch ------------------------------------------------------------------------

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        mount_auth = scope.get(MOUNT_AUTH_SCOPE_KEY)
        if not isinstance(mount_auth, MountAuth):
            # Served without the kernel's authenticates_itself contract: refuse everything.
            await Response("the dashboard needs the gateway's mount authentication", 500, "text/plain").send(
                send
            )
            return
        try:
            request = Request(scope, receive)
            response = await self.dispatch(request, mount_auth)
        except BadRequest as exc:
            response = self.render(
                "error.html", None, status=exc.status, title="Bad request", message=str(exc)
            )
        await response.send(send)

    async def dispatch(self, request: Request, mount_auth: MountAuth) -> Response:
        route = request.path[len(PREFIX) :].rstrip("/")
        if route.startswith("/static/"):
            return self.static_file(request, route.removeprefix("/static/"))
        if route == "/login":
            return self.login(request, mount_auth)
        if route == "/login-links":
            return self.mint_link(request, mount_auth)
        methods = {m for (m, r) in self._pages if r == route}
        if not methods:
            return self.render("error.html", None, status=404, title="Not found", message="No such page.")
        if request.method not in methods:
            return Response(
                "method not allowed", 405, "text/plain", headers={"allow": ", ".join(sorted(methods))}
            )
        session = self.gate.session(request.cookies.get(auth.COOKIE_NAME), mount_auth.key)
        if session is None:
            if request.method == "GET":
                notice = request.arg("notice")
                return self.render("login_needed.html", None, status=401, title="Log in", notice=notice)
            return Response("not logged in: open a login link from `lore dashboard`", 401, "text/plain")
        if request.method == "POST":
            form = await request.form()
            if not auth.csrf_ok(session, form.get("csrf")):
                return Response(
                    "refused: the form's CSRF token is missing or wrong (reload the page)", 403, "text/plain"
                )
        return await self._pages[(request.method, route)](request, session)

    def render(
        self, template: str, session: auth.Session | None, status: int = 200, **values: Any
    ) -> Response:
        page = self._env.get_template(template)
        notice = NOTICES.get(values.pop("notice", ""), "")
        html = page.render(
            csrf=session.csrf if session else "", logged_in=session is not None, notice=notice, **values
        )
        return Response(html, status)

    def static_file(self, request: Request, name: str) -> Response:
        suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
        if request.method not in ("GET", "HEAD"):
            return Response("method not allowed", 405, "text/plain", headers={"allow": "GET"})
        if not re.fullmatch(r"[a-z0-9_-]+\.[a-z]+", name) or suffix not in STATIC_TYPES:
            return Response("not found", 404, "text/plain")
        item = self._static / name
        if not item.is_file():
            return Response("not found", 404, "text/plain")
        return Response(item.read_bytes(), 200, STATIC_TYPES[suffix])

    # -- access ----------------------------------------------------------------------------

    def mint_link(self, request: Request, mount_auth: MountAuth) -> Response:
        """``POST /ui/login-links`` with the gateway token (``lore dashboard``): a one-time
        login path."""
        if request.method != "POST":
            return Response("method not allowed", 405, "text/plain", headers={"allow": "POST"})
        if not mount_auth.token_valid:
            return json_response({"error": "the gateway token is missing or wrong (lore token)"}, 401)
        secret = self.gate.mint(mount_auth.key)
        return json_response(
            {"path": f"{PREFIX}/login?t={secret}", "expires_in_seconds": int(auth.LINK_TTL_SECONDS)}, 201
        )

    def login(self, request: Request, mount_auth: MountAuth) -> Response:
        if request.method != "GET":
            return Response("method not allowed", 405, "text/plain", headers={"allow": "GET"})
        opened = self.gate.redeem(request.arg("t"), mount_auth.key)
        if opened is None:
            return self.render("login_needed.html", None, status=403, title="Log in", refused=True)
        cookie, _ = opened
        # The secret leaves the address bar and the history: the browser GETs /ui/.
        return redirect(f"{PREFIX}/", cookies=(auth.session_cookie(cookie),))

    async def logout_action(self, request: Request, session: auth.Session) -> Response:
        self.gate.end(request.cookies.get(auth.COOKIE_NAME))
        return redirect(f"{PREFIX}/sessions?notice=logged-out", cookies=(auth.cleared_cookie(),))

    # -- the local API -----------------------------------------------------------------

    async def _get(self, path: str, params: Mapping[str, str] | None = None) -> tuple[int, Any]:
        answer = await self.api.call("GET", path, params=params)
        return answer.status, answer.body

    def _api_error(self, session: auth.Session, status: int, body: Any, what: str) -> Response:
        reason = body.get("error") if isinstance(body, dict) else None
        shown = status if 400 <= status < 500 else 502
        return self.render(
            "error.html",
            session,
            status=shown,
            title=what,
            message=str(reason or f"the gateway answered {status}"),
        )

    # -- pages -------------------------------------------------------------------------

    async def health_page(self, request: Request, session: auth.Session) -> Response:
        status, body = await self._get("/lore/api/status")
        if status != 200 or not isinstance(body, dict):
            return self._api_error(session, status, body, "Health")
        health = body.get("health") or {}
        return self.render(
            "health.html",
            session,
            title="Health",
            health=health,
            store=body.get("store") or {},
            notice=request.arg("notice"),
        )

    async def sessions_page(self, request: Request, session: auth.Session) -> Response:
        """One keyset page of sessions, newest first. Every filter is applied by the store
        (``/lore/api/sessions``: project, harness, model, since, text, ``before``), which
        reads one page and one row to know whether there are more: the cost of a page does
        not grow with the store."""
        project, harness, text = request.arg("project"), request.arg("harness"), request.arg("q")
        model, since, until = request.arg("model"), request.arg("since"), request.arg("until")
        cursor = parse_cursor(request.arg("after"))
        if project and not project.startswith("/"):
            raise BadRequest("project must be the project's absolute directory")
        since_at, until_at = _day_start(since, "since"), _day_start(until, "until")
        if until_at is not None:
            # Until a day: as if the previous page had ended at the next midnight.
            bound = (until_at + 86400.0, "")
            cursor = bound if cursor is None or bound < cursor else cursor
        params = {"limit": str(SESSIONS_PER_PAGE + 1)}
        for name, value in (("project", project), ("harness", harness), ("model", model), ("q", text)):
            if value:
                params[name] = value
        if since_at is not None:
            params["since"] = repr(since_at)
        if cursor is not None:
            params["before"] = f"{cursor[0]!r}~{cursor[1]}"
        status, rows = await self._get("/lore/api/sessions", params)
        if status != 200 or not isinstance(rows, list):
            return self._api_error(session, status, rows, "Sessions")
        more = len(rows) > SESSIONS_PER_PAGE
        rows = rows[:SESSIONS_PER_PAGE]
        mentions = await self._mentions(text, project) if text and cursor is None else []
        chosen = {
            "project": project,
            "harness": harness,
            "model": model,
            "since": since,
            "until": until,
            "q": text,
        }
        filters = {k: v for k, v in chosen.items() if v}
        newest = "?" + urllib.parse.urlencode(filters) if filters else ""
        following = ""
        if more and rows:
            last = _cursor(rows[-1])
            following = "?" + urllib.parse.urlencode({**filters, "after": f"{last[0]!r}~{last[1]}"})
        return self.render(
            "sessions.html",
            session,
            title="Sessions",
            rows=rows,
            project=project,
            harness=harness,
            model=model,
            since=since,
            until=until,
            text=text,
            following=following,
            newest=newest,
            paged=cursor is not None,
            mentions=mentions,
            notice=request.arg("notice"),
        )

    async def _mentions(self, text: str, project: str) -> list[dict[str, Any]]:
        """The sessions whose messages best match ``text`` in the store's full-text index
        (``/lore/api/search``, BM25 over the passages, as the recall engine searches them):
        the best message of each, best first, at most :data:`MENTIONS_SHOWN` sessions. A
        bounded search, never a scan of the messages."""
        params = {"q": text, "limit": str(MENTIONS_SHOWN * 4)}
        if project:
            params["project"] = project
        status, hits = await self._get("/lore/api/search", params)
        if status != 200 or not isinstance(hits, list):
            return []  # a query of stop words only, or a store without a full-text index
        found: dict[str, dict[str, Any]] = {}
        for hit in hits:
            sid = str(hit.get("session") or "")
            if sid and hit.get("role") != "distillation" and sid not in found:
                found[sid] = hit
        return list(found.values())[:MENTIONS_SHOWN]

    async def _session(self, session_id: str, branches: str = "") -> tuple[int, Any]:
        path = f"/lore/api/sessions/{urllib.parse.quote(session_id, safe='')}"
        return await self._get(path, {"branches": branches} if branches else None)

    async def session_page(self, request: Request, session: auth.Session) -> Response:
        session_id = request.arg("id")
        if not session_id:
            raise BadRequest("missing id: /ui/session?id=<session id>")
        try:
            page = max(1, int(request.arg("page") or 1))
        except ValueError:
            raise BadRequest("page must be a number") from None
        # Every branch: the spend counts the side requests and sub-agents too; the
        # conversation shown is the main branch, as the local API picks it by default.
        status, body = await self._session(session_id, branches="all")
        if status != 200 or not isinstance(body, dict):
            return self._api_error(session, status, body, "Session")
        every = body.get("messages") or []
        costs = self._costs(every)
        chart = spend_over_time(
            [(float(m.get("created_at") or 0.0), costs[m.get("id")]) for m in every if m.get("id") in costs]
        )
        by_id = {m.get("id"): m for m in every}
        messages = [by_id[m.id] for m in main_branch([StoredMessage(**m) for m in every])]
        pages = max(1, math.ceil(len(messages) / MESSAGES_PER_PAGE))
        at = request.arg("at")
        if at:
            # A deep link to one message (a recall id's item): the page that holds it.
            index = next((i for i, m in enumerate(messages) if m.get("id") == at), None)
            if index is not None:
                page = index // MESSAGES_PER_PAGE + 1
        page = min(page, pages)
        shown = messages[(page - 1) * MESSAGES_PER_PAGE : page * MESSAGES_PER_PAGE]
        # The distillations of the session (every generation, archived too) and, for each
        # message, the observation logs made from it.
        code, found = await self._get("/lore/api/distillations", {"session": session_id})
        distillations = found if code == 200 and isinstance(found, list) else []
        covering: dict[str, list[str]] = {}
        for item in distillations:
            if item.get("generation") == 0:
                for source in item.get("source_ids") or []:
                    covering.setdefault(str(source), []).append(f"d:{item.get('id')}")
        shown = [
            {
                **m,
                "covered_by": covering.get(str(m.get("id")), []),
                "cache_share": cache_read_share(m.get("usage") or {}),
                "cost": costs.get(m.get("id")),
                # Only an answer was sent upstream at a layer (the request messages were resent).
                "layer": layer_label(m.get("context_layer")) if m.get("origin") == "response" else None,
            }
            for m in shown
        ]
        # What the session state says of its recalls (the calls the model made and what went
        # upstream for each) and of its layer floor; never its owner (a credential hash).
        raw_state = body.get("state")
        state: dict[str, Any] = raw_state if isinstance(raw_state, dict) else {}
        recalls = [
            {**r, "texts": long_texts(r.get("items"))}
            for r in state.get(RECALL_STATE_KEY) or []
            if isinstance(r, dict)
        ]
        return self.render(
            "session.html",
            session,
            title=str(body["session"].get("title") or session_id),
            info=body["session"],
            recalls=recalls,
            layer_floor=state.get(LAYER_STATE_KEY),
            spend=chart,
            distillations=distillations,
            messages=shown,
            first_number=(page - 1) * MESSAGES_PER_PAGE + 1,
            page=page,
            pages=pages,
            total=len(messages),
            long_text=LONG_TEXT_CHARS,
        )

    def _costs(self, messages: list[dict[str, Any]]) -> dict[Any, float]:
        """The dollars of each answer's usage at the gateway's prices, by message id (the
        messages without usage left out). Each model's prices are looked up once: a lookup
        matches the name against every known prefix, and a long session has thousands of
        answers."""
        prices: dict[Any, ModelInfo] = {}
        fields = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
        costs = {}
        for message in messages:
            usage = message.get("usage")
            if not isinstance(usage, dict) or message.get("role") != "assistant":
                continue
            model = message.get("model")
            if model not in prices:
                prices[model] = self._prices.lookup(model)
            costs[message.get("id")] = prices[model].cost(
                Usage(**{k: int(usage.get(k) or 0) for k in fields})
            )
        return costs

    async def forget_page(self, request: Request, session: auth.Session) -> Response:
        session_id = request.arg("id")
        if not session_id:
            raise BadRequest("missing id: /ui/session/forget?id=<session id>")
        status, body = await self._session(session_id)
        if status != 200 or not isinstance(body, dict):
            return self._api_error(session, status, body, "Forget")
        return self.render("forget.html", session, title="Forget this session?", info=body["session"])

    async def forget_action(self, request: Request, session: auth.Session) -> Response:
        form = await request.form()
        session_id = form.get("id", "")
        if not session_id:
            raise BadRequest("missing id")
        if form.get("confirm") != "yes":
            raise BadRequest("tick the confirmation to forget the session")
        answer = await self.api.call(
            "DELETE", f"/lore/api/sessions/{urllib.parse.quote(session_id, safe='')}"
        )
        if answer.status != 200:
            return self._api_error(session, answer.status, answer.body, "Forget")
        return redirect(f"{PREFIX}/sessions?notice=forgotten")

    async def search_page(self, request: Request, session: auth.Session) -> Response:
        query, scope, project = request.arg("q"), request.arg("scope") or "all", request.arg("project")
        if scope not in RECALL_SCOPES:
            raise BadRequest(f"scope must be one of {', '.join(RECALL_SCOPES)}")
        if project and not project.startswith("/"):
            raise BadRequest("project must be the project's absolute directory")
        result: dict[str, Any] | None = None
        if query:
            params = {"q": query, "scope": scope, "limit": str(SEARCH_LIMIT)}
            if project:
                params["project"] = project
            status, body = await self._get("/lore/api/recall", params)
            if status != 200 or not isinstance(body, dict):
                return self._api_error(session, status, body, "Search")
            result = body
        return self.render(
            "search.html",
            session,
            title="Search",
            query=query,
            scope=scope,
            project=project,
            scopes=RECALL_SCOPES,
            result=result,
        )

    async def knowledge_page(self, request: Request, session: auth.Session) -> Response:
        project, category = request.arg("project"), request.arg("category")
        if project and not project.startswith("/"):
            raise BadRequest("project must be the project's absolute directory")
        if category and category not in CATEGORIES:
            raise BadRequest(f"category must be one of {', '.join(CATEGORIES)}")
        status, entries = await self._get("/lore/api/knowledge", {"project": project} if project else None)
        if status != 200 or not isinstance(entries, list):
            return self._api_error(session, status, entries, "Knowledge")
        by_category: dict[str, list[dict[str, Any]]] = {c: [] for c in CATEGORIES}
        for entry in entries:
            if not category or entry.get("category") == category:
                by_category.setdefault(str(entry.get("category")), []).append(entry)
        for group in by_category.values():
            group.sort(key=lambda e: str(e.get("title", "")).lower())
        # The deleted entries, most recently deleted first, each with a Restore button.
        params = {"deleted": "1", **({"project": project} if project else {})}
        status, deleted = await self._get("/lore/api/knowledge", params)
        if status != 200 or not isinstance(deleted, list):
            return self._api_error(session, status, deleted, "Knowledge")
        deleted = [e for e in deleted if not category or e.get("category") == category]
        return self.render(
            "knowledge.html",
            session,
            title="Knowledge",
            project=project,
            category=category,
            categories=CATEGORIES,
            by_category={c: g for c, g in by_category.items() if g},
            count=sum(len(g) for g in by_category.values()),
            deleted=deleted[:DELETED_SHOWN],
            more_deleted=max(0, len(deleted) - DELETED_SHOWN),
            notice=request.arg("notice"),
        )

    async def _entry(self, entry_id: str) -> tuple[int, Any]:
        return await self._get(f"/lore/api/knowledge/{urllib.parse.quote(entry_id, safe=':')}")

    async def entry_page(self, request: Request, session: auth.Session) -> Response:
        entry_id = request.arg("id")
        if not entry_id:
            raise BadRequest("missing id: /ui/knowledge/entry?id=k:<id>")
        status, body = await self._entry(entry_id)
        if status != 200 or not isinstance(body, dict):
            return self._api_error(session, status, body, "Knowledge entry")
        return self.render(
            "entry.html",
            session,
            title=str(body["entry"].get("title") or entry_id),
            entry=body["entry"],
            versions=with_diffs(body.get("versions") or []),
            categories=CATEGORIES,
            sensitivities=SENSITIVITIES,
            notice=request.arg("notice"),
        )

    async def new_entry_page(self, request: Request, session: auth.Session) -> Response:
        return self.render(
            "entry_new.html",
            session,
            title="New knowledge entry",
            project=request.arg("project"),
            categories=CATEGORIES,
            scopes=SCOPES,
            sensitivities=SENSITIVITIES,
            values={},
            error="",
        )

    @staticmethod
    def _entry_link(body: Any, notice: str) -> str:
        entry_id = body.get("entry", {}).get("id", "") if isinstance(body, dict) else ""
        return f"{PREFIX}/knowledge/entry?" + urllib.parse.urlencode({"id": entry_id, "notice": notice})

    async def create_action(self, request: Request, session: auth.Session) -> Response:
        form = await request.form()
        fields = {
            k: form.get(k, "").strip()
            for k in ("project", "category", "title", "content", "scope", "sensitivity")
        }
        answer = await self.api.call(
            "POST", "/lore/api/knowledge", body={k: v for k, v in fields.items() if v}
        )
        if answer.status in (200, 201):
            status = answer.body.get("status") if isinstance(answer.body, dict) else ""
            return redirect(self._entry_link(answer.body, "created" if status == "created" else "edited"))
        if 400 <= answer.status < 500:
            reason = answer.body.get("error") if isinstance(answer.body, dict) else ""
            return self.render(
                "entry_new.html",
                session,
                status=answer.status,
                title="New knowledge entry",
                project=fields["project"],
                categories=CATEGORIES,
                scopes=SCOPES,
                sensitivities=SENSITIVITIES,
                values=fields,
                error=str(reason or f"refused ({answer.status})"),
            )
        return self._api_error(session, answer.status, answer.body, "New knowledge entry")

    async def _id_from(self, request: Request) -> str:
        form = await request.form()
        entry_id = form.get("id", "").strip()
        if not entry_id:
            raise BadRequest("missing id")
        return entry_id

    async def edit_action(self, request: Request, session: auth.Session) -> Response:
        entry_id = await self._id_from(request)
        form = await request.form()
        fields = {k: form[k].strip() for k in ("category", "title", "content", "sensitivity") if k in form}
        return await self._change(session, entry_id, "PATCH", "", fields, "edited")

    async def delete_action(self, request: Request, session: auth.Session) -> Response:
        entry_id = await self._id_from(request)
        return await self._change(session, entry_id, "DELETE", "", None, "deleted")

    async def restore_action(self, request: Request, session: auth.Session) -> Response:
        entry_id = await self._id_from(request)
        return await self._change(session, entry_id, "POST", "/restore", None, "restored")

    async def _change(
        self, session: auth.Session, entry_id: str, method: str, suffix: str, body: Any, done: str
    ) -> Response:
        path = f"/lore/api/knowledge/{urllib.parse.quote(entry_id, safe=':')}{suffix}"
        answer = await self.api.call(method, path, body=body)
        if answer.status == 200:
            status = answer.body.get("status") if isinstance(answer.body, dict) else ""
            return redirect(self._entry_link(answer.body, "unchanged" if status == "unchanged" else done))
        return self._api_error(session, answer.status, answer.body, "Knowledge entry")

    async def contradictions_page(self, request: Request, session: auth.Session) -> Response:
        project, status = request.arg("project"), request.arg("status") or "open"
        if project and not project.startswith("/"):
            raise BadRequest("project must be the project's absolute directory")
        if status != "all" and status not in CONTRADICTION_STATUSES:
            raise BadRequest(f"status must be all or one of {', '.join(CONTRADICTION_STATUSES)}")
        params = {"project": project} if project else {}
        if status != "all":
            params["status"] = status
        code, pairs = await self._get("/lore/api/knowledge/contradictions", params)
        if code != 200 or not isinstance(pairs, list):
            return self._api_error(session, code, pairs, "Contradictions")
        return self.render(
            "contradictions.html",
            session,
            title="Contradictions",
            pairs=pairs,
            project=project,
            chosen=status,
            statuses=("all", *CONTRADICTION_STATUSES),
            notice=request.arg("notice"),
        )

    async def resolve_action(self, request: Request, session: auth.Session) -> Response:
        """Keep one entry of a pair (the other is deleted, restorable) or both."""
        form = await request.form()
        first, second, keep = form.get("first", ""), form.get("second", ""), form.get("keep", "")
        if not first or not second:
            raise BadRequest("missing first or second (the two entries' ids)")
        if keep == "both":
            body: dict[str, Any] = {"first": first, "second": second, "keep_both": True}
        elif keep in (first, second):
            body = {"first": first, "second": second, "keep": keep}
        else:
            raise BadRequest("keep must be one of the two entries, or both")
        answer = await self.api.call("POST", "/lore/api/knowledge/contradictions/resolve", body=body)
        if answer.status != 200:
            return self._api_error(session, answer.status, answer.body, "Contradictions")
        return redirect(f"{PREFIX}/contradictions?notice=resolved")

    async def review_page(self, request: Request, session: auth.Session) -> Response:
        """A team-bound project's entries waiting for a decision (with what changed since the
        approved text), and the rejected ones."""
        project = request.arg("project")
        if project and not project.startswith("/"):
            raise BadRequest("project must be the project's absolute directory")
        values: dict[str, Any] = {"project": project, "pending": None, "reviewer": _reviewer()}
        if project:
            code, body = await self._get("/lore/api/knowledge/pending", {"project": project})
            if code == 409 and isinstance(body, dict):
                values["unbound"] = str(body.get("error") or "")
            elif code != 200 or not isinstance(body, dict):
                return self._api_error(session, code, body, "Team review")
            else:
                values["team"] = body.get("team") or {}
                values["pending"] = [await self._with_diff(row) for row in body.get("pending") or []]
                values["rejected"] = body.get("rejected") or []
        return self.render(
            "review.html", session, title="Team review", notice=request.arg("notice"), **values
        )

    async def _with_diff(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row with its entry's current text and, when an earlier text was approved, the
        diff from that one."""
        code, body = await self._entry(str(row.get("id", "")))
        if code != 200 or not isinstance(body, dict):
            return {**row, "content": "", "diff": []}
        versions = body.get("versions") or []
        current = body["entry"]
        shared = next((v for v in versions if v.get("version") == row.get("shared_version")), None)
        diff = text_diff(version_text(shared), version_text(current)) if shared is not None else []
        return {**row, "content": current.get("content", ""), "diff": diff}

    async def decide_action(self, request: Request, session: auth.Session) -> Response:
        form = await request.form()
        entry_id, decision, by = form.get("id", ""), form.get("decision", ""), form.get("by", "").strip()
        project = form.get("project", "")
        if not entry_id or decision not in ("approved", "rejected"):
            raise BadRequest("give the entry's id and a decision: approved or rejected")
        body = {"id": entry_id, "decision": decision, "by": by or _reviewer()}
        if project:
            body["project"] = project
        answer = await self.api.call("POST", "/lore/api/knowledge/decisions", body=body)
        if answer.status != 200:
            return self._api_error(session, answer.status, answer.body, "Team review")
        query = urllib.parse.urlencode({"project": project, "notice": decision})
        return redirect(f"{PREFIX}/review?{query}")

    async def spend_page(self, request: Request, session: auth.Session) -> Response:
        """What ``lore spend`` says: dollars by day (a chart), by model with the cache read
        share, by session; the worker's spend today and throttling from the status."""
        raw = request.arg("days") or "7"
        if not raw.isdigit() or int(raw) not in SPEND_PERIODS:
            raise BadRequest(f"days must be one of {', '.join(map(str, SPEND_PERIODS))}")
        code, report = await self._get("/lore/api/spend", {"days": raw})
        if code != 200 or not isinstance(report, dict):
            return self._api_error(session, code, report, "Spend")
        code, status = await self._get("/lore/api/status")
        health = status.get("health", {}) if code == 200 and isinstance(status, dict) else {}
        models = [{**m, "cache_share": cache_read_share(m)} for m in report.get("by_model") or []]
        return self.render(
            "spend.html",
            session,
            title="Spend",
            report=report,
            days=int(raw),
            periods=SPEND_PERIODS,
            chart=day_bars(report.get("by_day") or []),
            models=models,
            sessions=(report.get("by_session") or [])[:SPEND_SESSIONS],
            more_sessions=max(0, len(report.get("by_session") or []) - SPEND_SESSIONS),
            throttle=health.get("throttle") or {},
        )

    async def projects_page(self, request: Request, session: auth.Session) -> Response:
        """Each project with its sessions, messages, knowledge entries, spend and last
        activity: ``/lore/api/projects``, one query of the store (no session is read)."""
        code, projects = await self._get("/lore/api/projects")
        if code != 200 or not isinstance(projects, list):
            return self._api_error(session, code, projects, "Projects")
        code, entries = await self._get("/lore/api/knowledge")
        if code != 200 or not isinstance(entries, list):
            return self._api_error(session, code, entries, "Projects")
        return self.render(
            "projects.html",
            session,
            title="Projects",
            projects=projects,
            global_entries=sum(1 for e in entries if e.get("scope") == "global"),
        )

    async def entities_page(self, request: Request, session: auth.Session) -> Response:
        project = request.arg("project")
        if project and not project.startswith("/"):
            raise BadRequest("project must be the project's absolute directory")
        code, found = await self._get("/lore/api/entities", {"project": project} if project else None)
        if code != 200 or not isinstance(found, list):
            return self._api_error(session, code, found, "Entities")
        found.sort(key=lambda e: (str(e.get("kind", "")), str(e.get("name", "")).lower()))
        return self.render(
            "entities.html",
            session,
            title="Entities",
            entities=found,
            project=project,
            notice=request.arg("notice"),
        )

    async def entity_page(self, request: Request, session: auth.Session) -> Response:
        ref = request.arg("ref")
        if not ref.startswith("e:"):
            raise BadRequest("ref must be an entity id: /ui/entity?ref=e:<id>")
        code, body = await self._get("/lore/api/entities/show", {"ref": ref})
        if code != 200 or not isinstance(body, dict):
            return self._api_error(session, code, body, "Entity")
        entity = body["entity"]
        # Others it may be merged with: the alive entities its project sees.
        params = {"project": entity["project"]} if entity.get("project") else None
        code, others = await self._get("/lore/api/entities", params)
        candidates = [o for o in others if o.get("id") != entity["id"]] if isinstance(others, list) else []
        return self.render(
            "entity.html",
            session,
            title=str(entity.get("name") or ref),
            entity=entity,
            related=body.get("related") or [],
            merged=body.get("merged") or [],
            candidates=sorted(candidates, key=lambda o: str(o.get("name", "")).lower()),
            notice=request.arg("notice"),
        )

    async def _entity_action(
        self, session: auth.Session, action: str, body: dict[str, Any], ref: str, notice: str
    ) -> Response:
        answer = await self.api.call("POST", f"/lore/api/entities/{action}", body=body)
        if answer.status not in (200, 201):
            return self._api_error(session, answer.status, answer.body, "Entity")
        if action == "delete":
            return redirect(f"{PREFIX}/entities?notice={notice}")
        return redirect(f"{PREFIX}/entity?" + urllib.parse.urlencode({"ref": ref, "notice": notice}))

    async def entity_edit_action(self, request: Request, session: auth.Session) -> Response:
        form = await request.form()
        ref = form.get("ref", "")
        if not ref.startswith("e:"):
            raise BadRequest("missing ref (e:<id>)")
        body = {"ref": ref, **{k: form[k].strip() for k in ("name", "kind") if form.get(k, "").strip()}}
        return await self._entity_action(session, "edit", body, ref, "entity-edited")

    async def entity_merge_action(self, request: Request, session: auth.Session) -> Response:
        form = await request.form()
        keep, other = form.get("keep", ""), form.get("other", "")
        if not keep.startswith("e:") or not other.startswith("e:"):
            raise BadRequest("choose the entity to merge into this one")
        return await self._entity_action(
            session, "merge", {"keep": keep, "other": other}, keep, "entity-merged"
        )

    async def entity_delete_action(self, request: Request, session: auth.Session) -> Response:
        form = await request.form()
        ref = form.get("ref", "")
        if not ref.startswith("e:"):
            raise BadRequest("missing ref (e:<id>)")
        if form.get("confirm") != "yes":
            raise BadRequest("tick the confirmation to delete the entity")
        return await self._entity_action(session, "delete", {"ref": ref}, ref, "entity-deleted")

    async def events_page(self, request: Request, session: auth.Session) -> Response:
        """The event log's counters, and a pack preview: what ``POST /v1/pack`` gives an
        agent for a run and a query (coverage, lag, each section)."""
        project, run, query = request.arg("project"), request.arg("run"), request.arg("q")
        budget = request.arg("budget")
        if budget and not budget.isdigit():
            raise BadRequest("the token budget must be a whole number")
        before = request.arg("before")
        if before and not (before.isascii() and before.isdigit()):
            raise BadRequest("before must be an event's seq")
        code, status = await self._get("/lore/api/status")
        counters = (
            status.get("health", {}).get("events", {}) if code == 200 and isinstance(status, dict) else {}
        )
        # The runs (most recently updated first), and the chosen run's newest events.
        code, runs = await self._get(
            "/lore/api/runs", {"limit": str(RUNS_SHOWN), **({"project": project} if project else {})}
        )
        if code != 200 or not isinstance(runs, list):
            runs = []
        chosen: dict[str, Any] | None = None
        older = ""
        if run:
            params = {"run": run, "limit": str(EVENTS_PER_PAGE), "project": project}
            if before:
                params["before"] = before
            code, found = await self._get("/lore/api/runs/events", params)
            if code == 200 and isinstance(found, dict):
                chosen = found
                shown = found.get("events") or []
                if shown and int(shown[-1].get("seq") or 0) > 1:
                    query_args = {"project": project, "run": run, "before": str(shown[-1]["seq"])}
                    older = "?" + urllib.parse.urlencode({k: v for k, v in query_args.items() if v})
        pack: dict[str, Any] | None = None
        error = ""
        if run and query:
            body: dict[str, Any] = {"project": project, "run": run, "query": query}
            if budget:
                body["token_budget"] = int(budget)
            answer = await self.api.call("POST", "/v1/pack", body=body)
            if answer.status == 200 and isinstance(answer.body, dict):
                pack = answer.body
            elif 400 <= answer.status < 500:
                error = str(answer.body.get("error") if isinstance(answer.body, dict) else answer.status)
            else:
                return self._api_error(session, answer.status, answer.body, "Events")
        return self.render(
            "events.html",
            session,
            status=400 if error else 200,
            title="Events",
            counters=counters,
            project=project,
            run=run,
            query=query,
            budget=budget,
            pack=pack,
            error=error,
            runs=runs,
            runs_shown=RUNS_SHOWN,
            chosen=chosen,
            older=older,
            paged=bool(before),
        )

    async def open_id(self, request: Request, session: auth.Session) -> Response:
        """A recall id (``t:``, ``d:``, ``k:``, ``e:``) opened where it lives: a message at its
        place in its session, a knowledge entry or an entity on its page, a distillation (or
        a run memory) on a passage page. A stable link: ids do not change."""
        rid = request.arg("id")
        match = RECALL_ID.fullmatch(rid)
        if match is None:
            raise BadRequest("id must be a recall id: t:, d:, k: or e: and its key")
        kind = match.group(1)
        if kind == "k":
            return redirect(f"{PREFIX}/knowledge/entry?" + urllib.parse.urlencode({"id": rid}))
        if kind == "e":
            return redirect(f"{PREFIX}/entity?" + urllib.parse.urlencode({"ref": rid}))
        code, body = await self._get("/lore/api/recall", {"q": rid, "limit": "1"})
        results = body.get("results") if code == 200 and isinstance(body, dict) else None
        if not results:
            reason = body.get("error") if isinstance(body, dict) else None
            return self.render(
                "error.html",
                session,
                status=404,
                title="Not found",
                message=str(reason or f"nothing is {rid}"),
            )
        found = results[0]
        # A message's id is t:<message id>:<passage>.
        item = str(found.get("item") or match.group(2).split(":", 1)[0])
        if kind == "t" and found.get("session"):
            query = urllib.parse.urlencode({"id": found["session"], "at": item})
            return redirect(f"{PREFIX}/session?{query}#m-{urllib.parse.quote(item, safe='')}")
        return self.render("passage.html", session, title=rid, found=found)


def _reviewer() -> str:
    """Who decides by default, as ``lore knowledge approve`` says: ``LORE_REVIEWER``, else
    the login name the gateway runs under."""
    try:
        return os.environ.get("LORE_REVIEWER") or getpass.getuser()
    except (KeyError, OSError):
        return ""
