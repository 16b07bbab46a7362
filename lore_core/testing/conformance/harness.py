"""The harness conformance suite: the contract of :class:`lore_core.interfaces.Harness` as tests.

Every harness plugin subclasses :class:`HarnessConformance` in its own tests, against the
requests captured from its real client (see :mod:`lore_core.testing.captured`), as the
shipped harnesses do (``plugins/harness_*/tests/test_conformance.py``)::

    from lore_core.testing.captured import Captures
    from lore_core.testing.conformance.harness import HarnessConformance

    class TestMyHarness(HarnessConformance):
        captures = Captures(Path(__file__).parent / "fixtures" / "my_client_requests.json")
        # Tags of the captures, one group per session of the client (two groups at least).
        sessions = [["main", "main#1"], ["other-session"]]
        # Tag -> the project directory the request works in (None: it names none).
        projects = {"main": "/home/dev/proj", "main#1": "/home/dev/proj", "other-session": None}

        @pytest.fixture
        def harness(self):
            return MyHarness()

The competing harnesses are every harness installed beside it (the kernel's built-ins and
the ``lore`` entry points), so the suite passes with only ``lore-core`` and the plugin
installed and checks more where more is installed. Other clients' traffic is the suite's own
:data:`SDK_REQUESTS` (plain SDK calls, the generic harness's) plus ``foreign_captures``: other
clients' capture files with the harness that owns them, checked when that harness is
installed and the file exists.

A fallback harness (the kernel's ``generic``) sets ``fallback = True``: it recognises
nothing (score 0), so the gateway picks it only when no harness does. One that cannot start
a client sets ``launches = False``, as the harness itself declares (``Harness.launches``):
``lore run`` then never calls its ``launch`` and says it cannot launch a client.

The session checked is the one the gateway files a request under: ``session_id(ctx)``, or the
kernel's fingerprint of the first user message when that is ``None``
(:func:`lore_core.pipeline.parse.identify`).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from lore_core.builtin.harness_support import fingerprint_session
from lore_core.interfaces import Harness, LaunchPlan, RequestContext
from lore_core.model import TEXT, Block, Message
from lore_core.plugins import Registry, make_plugin_manager
from lore_core.testing.captured import Captures, request_context

#: The gateway's working directory in every request context the suite builds: a project the
#: harness reports must come from the request, not from here.
GATEWAY_CWD = "/srv/lore-conformance/gateway-cwd"

#: Requests as the official SDKs and curl send them (their own headers, nothing a coding
#: client adds): the generic harness's traffic, which no client harness may claim. Written
#: for the suite in the capture format, not captured.
SDK_REQUESTS: list[dict[str, Any]] = [
    {
        "tag": "anthropic-python-sdk",
        "path": "/v1/messages",
        "headers": [
            ["Accept", "application/json"],
            ["Content-Type", "application/json"],
            ["User-Agent", "Anthropic/Python 0.76.0"],
            ["X-Stainless-Lang", "python"],
            ["X-Stainless-Package-Version", "0.76.0"],
            ["X-Stainless-Runtime", "CPython"],
            ["anthropic-version", "2023-06-01"],
            ["x-api-key", "sk-ant-conformance"],
            ["x-lore-session", "sdk-session-1"],
        ],
        "body": {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": "You answer questions about code. Working directory: /home/dev/sdk-app",
            "messages": [{"role": "user", "content": "What does main.py do?"}],
        },
    },
    {
        "tag": "anthropic-python-sdk#1",
        "path": "/v1/messages",
        "headers": [
            ["Accept", "application/json"],
            ["Content-Type", "application/json"],
            ["User-Agent", "Anthropic/Python 0.76.0"],
            ["X-Stainless-Lang", "python"],
            ["anthropic-version", "2023-06-01"],
            ["x-api-key", "sk-ant-conformance"],
            ["x-lore-session", "sdk-session-1"],
        ],
        "body": {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "stream": True,
            "system": "You answer questions about code. Working directory: /home/dev/sdk-app",
            "messages": [
                {"role": "user", "content": "What does main.py do?"},
                {"role": "assistant", "content": [{"type": "text", "text": "It starts the server."}]},
                {"role": "user", "content": "And config.py?"},
            ],
        },
    },
    {
        "tag": "openai-python-sdk-chat",
        "path": "/v1/chat/completions",
        "headers": [
            ["Accept", "application/json"],
            ["Content-Type", "application/json"],
            ["User-Agent", "OpenAI/Python 2.8.1"],
            ["X-Stainless-Lang", "python"],
            ["Authorization", "Bearer sk-conformance"],
        ],
        "body": {
            "model": "gpt-5-mini",
            "messages": [
                {"role": "developer", "content": "Working directory: /home/dev/chat-app"},
                {"role": "user", "content": "List the tests."},
            ],
        },
    },
    {
        "tag": "openai-python-sdk-responses",
        "path": "/v1/responses",
        "headers": [
            ["Accept", "application/json"],
            ["Content-Type", "application/json"],
            ["User-Agent", "OpenAI/Python 2.8.1"],
            ["Authorization", "Bearer sk-conformance"],
            ["X-Lore-Project", "/home/dev/responses-app"],
        ],
        "body": {"model": "gpt-5", "input": "Summarise the README.", "store": False},
    },
    {
        "tag": "curl",
        "path": "/v1/messages",
        "headers": [["User-Agent", "curl/8.5.0"], ["Content-Type", "application/json"]],
        "body": {
            "model": "claude-haiku-4-5",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
        },
    },
]

#: Kernel API paths: where a request with no body or headers may arrive.
API_PATHS = ("/v1/messages", "/v1/chat/completions", "/v1/responses")
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


@functools.cache
def installed_harnesses() -> dict[str, Harness]:
    """Every harness installed in this environment (built-ins and entry points), by name."""
    return dict(Registry.collect(make_plugin_manager(load_entrypoints=True)).harnesses)


@functools.cache
def _kernel_registry() -> Registry:
    return Registry.collect(make_plugin_manager(load_entrypoints=False))


def requests_of(captures: Captures | Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(captures.requests if isinstance(captures, Captures) else captures)


def context(request: dict[str, Any]) -> RequestContext:
    """What the gateway hands a harness for ``request`` (parsed by the kernel's codec)."""
    return request_context(request, gateway_cwd=GATEWAY_CWD)


def next_turn(request: dict[str, Any]) -> dict[str, Any]:
    """The same session's next request: the client resends the history with the answer and
    a new user message appended (rendered by the kernel's codec for the path)."""
    codec = _kernel_registry().codec_for_path(request["path"])
    assert codec is not None, f"no codec for {request['path']}"
    view = context(request).view
    assert view is not None
    view.messages.append(Message("assistant", [Block(TEXT, text="Done: two files changed.")], synthetic=True))
    view.messages.append(Message("user", [Block(TEXT, text="Now run the tests, please.")], synthetic=True))
    view.modified = True
    return {**request, "body": codec.render(view)}


def effective_session(harness: Harness, ctx: RequestContext) -> str:
    """The session the gateway files the request under."""
    return harness.session_id(ctx) or fingerprint_session(ctx.view)


class HarnessConformance:
    """Subclass in a ``test_*.py`` module: set ``captures``, ``sessions`` and ``projects``
    and provide the ``harness`` fixture."""

    #: The client's captured requests (a :class:`~lore_core.testing.captured.Captures` or a
    #: list in its format).
    captures: ClassVar[Captures | Sequence[dict[str, Any]]] = ()
    #: Capture tags grouped by session: every request of a group is one session, the groups
    #: are different sessions. At least two groups.
    sessions: ClassVar[Sequence[Sequence[str]]] = ()
    #: Capture tag -> the project (absolute directory) the request works on, or ``None``
    #: when the request names none (the harness then says ``None`` or the gateway's cwd).
    projects: ClassVar[Mapping[str, str | None]] = {}
    #: Other clients' capture files and the name of the harness that owns them.
    foreign_captures: ClassVar[Sequence[tuple[str, Path]]] = ()
    #: True for a fallback harness that recognises nothing (the kernel's ``generic``).
    fallback: ClassVar[bool] = False
    #: False when the harness cannot start a client (it declares ``launches = False``).
    launches: ClassVar[bool] = True
    #: Checks the harness is known to fail, as ``{"test_name" or "test_name[case id]":
    #: reason}``: run as strict xfails, so a fix turns them into failures to remove here.
    known_failures: ClassVar[Mapping[str, str]] = {}

    @pytest.fixture
    def harness(self) -> Harness:
        raise NotImplementedError("a harness's test class provides the harness fixture")

    # -- parametrisation -------------------------------------------------------------------

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "own_tag" in metafunc.fixturenames:
            tags = [r["tag"] for r in requests_of(self.captures)]
            metafunc.parametrize("own_tag", self._params(tags, tags))
        if "foreign_request" in metafunc.fixturenames:
            cases = self._foreign_cases()
            ids = [f"{owner}:{r['tag']}" for owner, r in cases]
            metafunc.parametrize("foreign_request", self._params(cases, ids))
        if "project_tag" in metafunc.fixturenames:
            metafunc.parametrize("project_tag", self._params(list(self.projects), list(self.projects)))
        if "odd_case" in metafunc.fixturenames:
            labels = list(self.odd_contexts())
            metafunc.parametrize("odd_case", self._params(labels, labels))

    def _params(self, values: Sequence[Any], ids: Sequence[str]) -> list[Any]:
        return [pytest.param(value, id=ident) for value, ident in zip(values, ids, strict=True)]

    @pytest.fixture(autouse=True)
    def _known_failure(self, request: pytest.FixtureRequest) -> None:
        """Mark the checks named in ``known_failures`` as strict xfails."""
        node = request.node
        reason = self.known_failures.get(node.name) or self.known_failures.get(node.originalname)
        if reason is not None:
            node.add_marker(pytest.mark.xfail(reason=reason, strict=True))

    def _foreign_cases(self) -> list[tuple[str, dict[str, Any]]]:
        cases = [("generic", r) for r in SDK_REQUESTS]
        for owner, path in self.foreign_captures:
            if Path(path).is_file():
                cases.extend((owner, r) for r in Captures(Path(path)).requests)
        return cases

    def request(self, tag: str) -> dict[str, Any]:
        matches = [r for r in requests_of(self.captures) if r["tag"] == tag]
        assert len(matches) == 1, f"{len(matches)} captures tagged {tag!r}"
        return matches[0]

    # -- identity ----------------------------------------------------------------------------

    def test_identity(self, harness: Harness) -> None:
        assert isinstance(harness.name, str) and _NAME.fullmatch(harness.name), (
            f"{harness.name!r}: `lore run <name>` and the stored sessions use the name"
        )
        for method in ("recognise", "session_id", "project", "launch"):
            assert callable(getattr(harness, method, None)), f"no {method}()"
        assert requests_of(self.captures), "the suite needs the client's captured requests"
        tags = [r["tag"] for r in requests_of(self.captures)]
        assert len(set(tags)) == len(tags), "capture tags must be unique"
        installed = installed_harnesses().get(harness.name)
        if installed is not None:
            assert type(installed) is type(harness), (
                f"the installed harness named {harness.name!r} is a {type(installed).__name__}"
            )

    # -- recognition -------------------------------------------------------------------------

    def test_recognises_its_clients_traffic(self, harness: Harness, own_tag: str) -> None:
        score = harness.recognise(context(self.request(own_tag)))
        assert isinstance(score, int)
        if self.fallback:
            assert score == 0, "a fallback harness claims nothing: the gateway picks it when nobody does"
        else:
            assert score > 0, f"{harness.name} does not recognise its own client's request {own_tag!r}"

    def test_wins_its_clients_traffic_over_every_installed_harness(
        self, harness: Harness, own_tag: str
    ) -> None:
        ctx = context(self.request(own_tag))
        own = harness.recognise(ctx)
        rivals = {n: h for n, h in installed_harnesses().items() if n != harness.name}
        scores = {name: rival.recognise(copy.deepcopy(ctx)) for name, rival in rivals.items()}
        if self.fallback:
            # Nobody else may claim plain traffic: the gateway then falls back to this one.
            assert all(score <= 0 for score in scores.values()), scores
        else:
            beaten = {name: score for name, score in scores.items() if score >= own}
            assert not beaten, f"{harness.name} scores {own} on {own_tag!r}, others as much: {beaten}"

    def test_does_not_claim_other_clients_traffic(
        self, harness: Harness, foreign_request: tuple[str, dict[str, Any]]
    ) -> None:
        owner_name, request = foreign_request
        if owner_name == harness.name:
            pytest.skip("the harness's own traffic")
        owner = installed_harnesses().get(owner_name)
        if owner is None:
            pytest.skip(f"the {owner_name!r} harness is not installed")
        ctx = context(request)
        score = harness.recognise(ctx)
        owner_score = owner.recognise(copy.deepcopy(ctx))
        assert isinstance(score, int)
        assert score <= 0 or score < owner_score, (
            f"{harness.name} scores {score} on {owner_name}'s request {request['tag']!r} "
            f"(its own harness: {owner_score})"
        )

    # -- sessions ----------------------------------------------------------------------------

    def test_session_is_stable_across_turns(self, harness: Harness, own_tag: str) -> None:
        request = self.request(own_tag)
        first = harness.session_id(context(request))
        assert first is None or (isinstance(first, str) and first.strip()), repr(first)
        later = next_turn(request)
        assert harness.session_id(context(later)) == first
        assert effective_session(harness, context(later)) == effective_session(harness, context(request))
        # Asking again changes nothing (no state kept between calls).
        assert effective_session(harness, context(request)) == effective_session(harness, context(request))

    def test_sessions_are_told_apart(self, harness: Harness) -> None:
        groups = [list(group) for group in self.sessions]
        assert len(groups) >= 2, "declare captures of at least two sessions in `sessions`"
        covered = [tag for group in groups for tag in group]
        assert len(covered) == len(set(covered)), "a capture is in two session groups"
        ids = []
        for group in groups:
            found = {tag: effective_session(harness, context(self.request(tag))) for tag in group}
            assert len(set(found.values())) == 1, f"one session, several ids: {found}"
            ids.append(next(iter(found.values())))
        assert len(set(ids)) == len(ids), (
            f"different sessions share an id: {dict(zip(map(tuple, groups), ids, strict=True))}"
        )

    # -- projects ----------------------------------------------------------------------------

    def test_project_is_found_in_the_request(self, harness: Harness, project_tag: str) -> None:
        expected = self.projects[project_tag]
        found = harness.project(context(self.request(project_tag)))
        if expected is None:
            assert found in (None, GATEWAY_CWD), (
                f"{project_tag!r} names no project, the harness says {found!r}"
            )
        else:
            assert os.path.isabs(expected), "declare projects as absolute paths"
            assert found == expected

    def test_projects_are_absolute_or_none(self, harness: Harness, own_tag: str) -> None:
        found = harness.project(context(self.request(own_tag)))
        assert found is None or (isinstance(found, str) and os.path.isabs(found)), repr(found)

    def test_projects_are_declared(self) -> None:
        assert self.projects, "declare the project of the captures in `projects`"
        assert any(p is not None for p in self.projects.values()), "no capture names its project"
        unknown = set(self.projects) - {r["tag"] for r in requests_of(self.captures)}
        assert not unknown, f"projects of unknown captures: {sorted(unknown)}"

    # -- launching ---------------------------------------------------------------------------

    def test_launch_points_the_client_at_the_gateway(self, harness: Harness) -> None:
        args = ["--verbose", "two words", "-"]
        assert harness.launches is self.launches
        if not self.launches:
            return
        environ = dict(os.environ)
        plans = {}
        for url in ("http://127.0.0.1:8765", "http://[::1]:18080"):
            given = list(args)
            plan = harness.launch(url, given)
            assert given == args, "launch changed the caller's argument list"
            assert isinstance(plan, LaunchPlan)
            assert plan.argv and all(isinstance(a, str) and a for a in plan.argv[:1])
            assert all(isinstance(a, str) for a in plan.argv)
            assert plan.argv[len(plan.argv) - len(args) :] == args, "the user's arguments go last, as given"
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in plan.env.items())
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in plan.files.items())
            plans[url] = plan
        assert dict(os.environ) == environ, "launch changed the process environment"
        for url, plan in plans.items():
            other = next(u for u in plans if u != url)
            wired = [*plan.argv, *plan.env.values(), *plan.files.values()]
            assert any(url in part for part in wired), f"the plan does not point the client at {url}: {plan}"
            assert not any(other in part for part in wired), "the plan keeps another gateway's URL"

    # -- robustness --------------------------------------------------------------------------

    def odd_contexts(self) -> dict[str, RequestContext]:
        """Requests a harness must survive: no headers, no body, empty or junk values."""
        registry = _kernel_registry()
        out: list[tuple[str, RequestContext]] = []
        for path in API_PATHS:
            codec = registry.codec_for_path(path)
            assert codec is not None
            out.append((f"{path}:nothing", RequestContext(path, {}, None, GATEWAY_CWD)))
            out.append((f"{path}:empty-body", RequestContext(path, {}, codec.parse({}, b"{}"), GATEWAY_CWD)))
        for request in requests_of(self.captures):
            codec = registry.codec_for_path(request["path"])
            assert codec is not None
            headers = {k.lower(): v for k, v in request["headers"]}
            tag = request["tag"]
            out.append((f"{tag}:no-body", RequestContext(request["path"], dict(headers), None, GATEWAY_CWD)))
            empty = {k: "" for k in headers}
            out.append(
                (
                    f"{tag}:empty",
                    RequestContext(request["path"], empty, codec.parse({}, b"{}"), GATEWAY_CWD),
                )
            )
            junk_headers = {k: "{not json \x7f" for k in headers}
            body = request["body"]
            junk_body: dict[str, Any] = {k: [None, 42, {"x": []}][i % 3] for i, k in enumerate(body)}
            view = codec.parse(junk_body, json.dumps(junk_body).encode())
            out.append((f"{tag}:junk", RequestContext(request["path"], junk_headers, view, GATEWAY_CWD)))
            no_headers = context({**request, "headers": []})
            out.append((f"{tag}:no-headers", no_headers))
        # A project header that is not an absolute directory is no project.
        first = requests_of(self.captures)[0]
        relative = context({**first, "headers": [*first["headers"], ["X-Lore-Project", "relative/dir"]]})
        out.append((f"{first['tag']}:relative-project", relative))
        return dict(out)

    def test_nothing_raises_on_odd_requests(self, harness: Harness, odd_case: str) -> None:
        ctx = self.odd_contexts()[odd_case]
        score = harness.recognise(ctx)
        assert isinstance(score, int) and score >= 0, score
        session = harness.session_id(ctx)
        assert session is None or (isinstance(session, str) and session.strip()), session
        project = harness.project(ctx)
        assert project is None or (isinstance(project, str) and os.path.isabs(project)), project
        assert harness.compaction_request(ctx) in (True, False)

    def test_plain_requests_are_not_compaction_calls(self, harness: Harness) -> None:
        for request in SDK_REQUESTS:
            assert harness.compaction_request(context(request)) is False, request["tag"]
