"""pytest fixtures for Lore and its plugins (installed as the ``lore`` pytest plugin).

* ``fake_upstream``: a :class:`~lore_core.testing.fake_upstream.FakeUpstream` on loopback.
* ``lore_env``: an isolated environment (config, data and cache dirs under ``tmp_path``)
  with both upstreams pointed at the fake.
* ``start_gateway(config=None, env=None, extra_plugins=())``: a real gateway on a real
  socket, stopped at the end of the test.
* ``gateway``: ``start_gateway()`` with the defaults.
* ``shared_gateway`` and ``shared_upstream``: one gateway and its fake upstream for all the
  tests of a module that use them (``shared_gateway_config`` configures it), for tests that
  only read from the gateway or keep to sessions and projects of their own: each test gets
  the gateway's environment and a fake upstream with nothing queued or recorded
  (``shared_gateway_config`` and ``shared_gateway_plugins`` set it up).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from lore_core.gateway import Gateway
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.server import ThreadedServer


def pytest_configure(config: pytest.Config) -> None:
    # Registered here, where every test run of the kernel and of each plugin alone loads it.
    config.addinivalue_line(
        "markers",
        "slow: takes seconds (fuzzing, kill -9, long sessions, installs); the everyday run "
        "leaves it out with -m 'not slow and not e2e', CI runs everything",
    )


@pytest.fixture
def fake_upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


def gateway_env(root: Path, upstream_url: str) -> dict[str, str]:
    """The environment of a gateway under test: its config, data and cache under ``root``
    (with an empty configuration file), both upstreams at ``upstream_url``."""
    home = root / "home"
    env = {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        # Not named .lore.json: that marks a project's root (lore_core.projects), and the
        # tests' projects are folders under tmp_path.
        "LORE_CONFIG": str(root / "lore.json"),
        "LORE_UPSTREAM_ANTHROPIC": upstream_url,
        "LORE_UPSTREAM_OPENAI": upstream_url,
    }
    (root / "lore.json").write_text("{}")
    return env


def start_server(
    env: Mapping[str, str],
    cwd: Path,
    config: Mapping[str, Any] | None = None,
    extra_plugins: tuple[object, ...] = (),
) -> ThreadedServer:
    """A gateway with ``config`` (written to the environment's configuration file), serving."""
    Path(env["LORE_CONFIG"]).write_text(json.dumps(dict(config or {})))
    gateway = Gateway.load(env=dict(env), cwd=cwd, extra_plugins=extra_plugins)
    return ThreadedServer(gateway).start()


@pytest.fixture
def lore_env(tmp_path: Path, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment for a gateway under test; also applied to ``os.environ`` for the test."""
    env = gateway_env(tmp_path, fake_upstream.url)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def start_gateway(tmp_path: Path, lore_env: dict[str, str]) -> Iterator[Callable[..., ThreadedServer]]:
    servers: list[ThreadedServer] = []

    def start(
        config: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        extra_plugins: tuple[object, ...] = (),
    ) -> ThreadedServer:
        server = start_server({**lore_env, **(env or {})}, tmp_path, config, extra_plugins)
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        server.stop()


@pytest.fixture
def gateway(start_gateway: Callable[..., ThreadedServer]) -> ThreadedServer:
    return start_gateway()


# -- one gateway for a module's tests ------------------------------------------------------------

#: What the shared gateway is configured with unless a module says otherwise: no background
#: model call while its tests run (one would reach the fake upstream during a later test and
#: add to what the store holds). Its sessions never go idle, as a gateway of a test's own
#: never lives the 60 s either, and the knowledge curator does not run every 20 turns of a
#: session, which tests sending the same first message add up to.
SHARED_GATEWAY_DEFAULTS: dict[str, Any] = {
    "distill": {"idleTimeoutSeconds": 86_400},
    "knowledge": {"curateEveryTurns": 100_000},
}


@pytest.fixture(scope="module")
def shared_gateway_config() -> dict[str, Any]:
    """The configuration of the module's shared gateway, over :data:`SHARED_GATEWAY_DEFAULTS`
    (a module overrides this fixture for another)."""
    return {}


@pytest.fixture(scope="module")
def shared_gateway_plugins() -> tuple[object, ...]:
    """Plugins the module's shared gateway loads besides the installed ones (``extra_plugins``
    of ``start_gateway``); a module overrides this fixture to add some."""
    return ()


@attrs.frozen
class SharedGateway:
    """A module's gateway, its fake upstream and its environment."""

    server: ThreadedServer
    upstream: FakeUpstream
    env: dict[str, str]


@pytest.fixture(scope="module")
def module_gateway(
    tmp_path_factory: pytest.TempPathFactory,
    shared_gateway_config: dict[str, Any],
    shared_gateway_plugins: tuple[object, ...],
) -> Iterator[SharedGateway]:
    """The gateway all of a module's tests share (tests use ``shared_gateway``; this one is for
    module fixtures that set the stage once, e.g. traffic every test reads)."""
    root = tmp_path_factory.mktemp("shared-gateway")
    config = {
        **SHARED_GATEWAY_DEFAULTS,
        **{
            key: {**SHARED_GATEWAY_DEFAULTS.get(key, {}), **value} if isinstance(value, dict) else value
            for key, value in shared_gateway_config.items()
        },
    }
    with FakeUpstream() as fake, pytest.MonkeyPatch.context() as patch:
        env = gateway_env(root, fake.url)
        for key, value in env.items():
            patch.setenv(key, value)  # while it starts, as a test's own gateway has it
        server = start_server(env, root, config, shared_gateway_plugins)
        patch.undo()
        try:
            yield SharedGateway(server, fake, env)
        finally:
            server.stop()


@pytest.fixture
def shared_gateway(module_gateway: SharedGateway, monkeypatch: pytest.MonkeyPatch) -> ThreadedServer:
    """The module's gateway, its environment applied to ``os.environ`` for the test (the CLI
    and ``api_headers()`` find it), its fake upstream reset."""
    for key, value in module_gateway.env.items():
        monkeypatch.setenv(key, value)
    module_gateway.upstream.reset()
    return module_gateway.server


@pytest.fixture
def shared_upstream(module_gateway: SharedGateway, shared_gateway: ThreadedServer) -> FakeUpstream:
    """The fake upstream of the module's gateway, with nothing queued or recorded."""
    return module_gateway.upstream
