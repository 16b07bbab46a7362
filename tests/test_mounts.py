"""The kernel's two extension points for lore-mcp, tested with plugins of the test's own:

* ``lore_register_mounts``: an ASGI app under a path of the gateway, reached only past the
  guard (Host, Origin, peer, token), started after the gateway and stopped before it, with
  the gateway's routes in-process (``LocalApi``); bad paths are a ``PluginError``;
* ``lore_register_commands``: a ``lore`` subcommand, loaded only when the command line names
  no built-in one; a clash with a built-in is a ``PluginError``;
* with no plugin serving it, ``/mcp`` is still behind the token, and a 404;
* a mount that ``authenticates_itself`` passes the Host, Origin and peer checks only and is
  told whether the token came, with a key derived from the token (changed by a rotation).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from lore_core import hookimpl
from lore_core.http.access import rotate_token
from lore_core.interfaces import (
    MOUNT_AUTH_SCOPE_KEY,
    ApiAnswer,
    ASGIReceive,
    ASGIScope,
    ASGISend,
    Command,
    LocalApi,
    Mount,
    MountAuth,
)
from lore_core.plugins import PluginError, Registry, make_plugin_manager
from lore_core.testing.net import api_headers
from lore_core.testing.server import ThreadedServer


class Echo(Mount):
    """Answers with what the gateway's own /lore/api/status said in-process."""

    name = "echo"
    path = "/echo"

    def __init__(self) -> None:
        self.api: LocalApi | None = None
        self.calls: list[str] = []
        self.events: list[str] = []

    async def start(self, api: LocalApi) -> None:
        self.api = api
        self.events.append("start")

    async def stop(self) -> None:
        self.events.append("stop")

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        assert self.api is not None
        self.calls.append(scope["path"])
        if scope["path"] == "/echo/boom":
            raise RuntimeError("the mount broke")
        status: ApiAnswer = await self.api.call("GET", "/lore/api/status")
        body = json.dumps({"path": scope["path"], "status": status.status, "gateway": status.body["gateway"]})
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})


def mounting(*mounts: Mount) -> object:
    class Plugin:
        @hookimpl
        def lore_register_mounts(self, register: Callable[[Mount], None]) -> None:
            for mount in mounts:
                register(mount)

    return Plugin()


def test_a_mount_is_served_past_the_guard_with_the_gateway_in_process(
    start_gateway: Callable[..., ThreadedServer],
) -> None:
    echo = Echo()
    server = start_gateway(extra_plugins=(mounting(echo),))
    assert echo.events == ["start"]
    answer = httpx.get(server.url + "/echo/deeper", headers=api_headers())
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"path": "/echo/deeper", "status": 200, "gateway": "running"}

    refused = [
        httpx.get(server.url + "/echo"),
        httpx.get(server.url + "/echo", headers={"Authorization": "Bearer wrong"}),
        httpx.get(server.url + "/echo", headers={**api_headers(), "Host": "rebind.example"}),
        httpx.get(server.url + "/echo", headers={**api_headers(), "Origin": "http://evil.example"}),
    ]
    assert [r.status_code for r in refused] == [401, 401, 421, 403]
    assert all("error" in r.json() for r in refused)
    assert echo.calls == ["/echo/deeper"]

    # A path that only starts like the mount's is not the mount's.
    httpx.get(server.url + "/echoes", headers=api_headers())
    assert echo.calls == ["/echo/deeper"]

    broken = httpx.get(server.url + "/echo/boom", headers=api_headers())
    assert broken.status_code == 500 and "error" in broken.json()
    assert httpx.get(server.url + "/health").status_code == 200

    server.stop()
    assert echo.events == ["start", "stop"]


def test_a_websocket_upgrade_on_a_mount_is_refused_and_runs_nothing(
    start_gateway: Callable[..., ThreadedServer],
) -> None:
    """Mounts speak HTTP only: an upgrade, even with the token, is closed before the handshake
    (the server answers 403) and the mount never sees it."""
    echo = Echo()
    server = start_gateway(extra_plugins=(mounting(echo),))
    token = api_headers()["Authorization"].encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Authorization: " + token + b"\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        status_line = sock.recv(4096).split(b"\r\n", 1)[0]
    assert b" 403 " in status_line, status_line
    assert echo.calls == []
    assert httpx.get(server.url + "/echo", headers=api_headers()).status_code == 200


def test_without_a_plugin_mcp_is_still_behind_the_token(start_gateway: Callable[..., ThreadedServer]) -> None:
    server = start_gateway(env={"LORE_DISABLE_PLUGINS": "mcp"})
    assert "mcp" not in server.gateway.registry.mounts
    assert httpx.post(server.url + "/mcp", json={}).status_code == 401
    answer = httpx.post(server.url + "/mcp", json={}, headers=api_headers())
    assert answer.status_code == 404 and "error" in answer.json()


class SelfAuth(Mount):
    """A mount that checks its own credential: answers what the kernel told it."""

    name = "self-auth"
    path = "/selfauth"
    authenticates_itself = True

    def __init__(self) -> None:
        self.seen: list[MountAuth] = []

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        auth = scope[MOUNT_AUTH_SCOPE_KEY]
        assert isinstance(auth, MountAuth)
        self.seen.append(auth)
        body = json.dumps({"token_valid": auth.token_valid}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def test_a_mount_that_authenticates_itself_gets_the_guard_but_not_the_token_check(
    start_gateway: Callable[..., ThreadedServer],
) -> None:
    """Host, Origin and peer are still the kernel's; the token is the mount's business: it is
    told whether the bearer matched, and gets a key that changes with the token."""
    mount, echo = SelfAuth(), Echo()
    server = start_gateway(extra_plugins=(mounting(mount, echo),))
    assert httpx.get(server.url + "/selfauth").json() == {"token_valid": False}
    assert httpx.get(server.url + "/selfauth", headers={"Authorization": "Bearer wrong"}).json() == {
        "token_valid": False
    }
    assert httpx.get(server.url + "/selfauth/x", headers=api_headers()).json() == {"token_valid": True}
    refused = [
        httpx.get(server.url + "/selfauth", headers={"Host": "rebind.example"}),
        httpx.get(server.url + "/selfauth", headers={"Origin": "http://evil.example"}),
        httpx.post(server.url + "/selfauth", headers={"Origin": "null"}),
    ]
    assert [r.status_code for r in refused] == [421, 403, 403]
    assert len(mount.seen) == 3
    # Another mount (the default) still requires the token itself.
    assert httpx.get(server.url + "/echo").status_code == 401

    # The key is the same while the token is, differs from the token, and changes with it.
    key = mount.seen[0].key
    assert mount.seen[1].key == key and len(key) == 32
    assert server.gateway.tokens.current().encode() not in key
    rotate_token(server.gateway.tokens.path)
    assert httpx.get(server.url + "/selfauth", headers=api_headers()).json() == {"token_valid": True}
    assert mount.seen[-1].key != key


@pytest.mark.parametrize("path", ["/v1", "/lore", "/health", "/a/b", "mcp", "/", "/Upper", ""])
def test_a_mount_on_a_bad_path_is_a_plugin_error(path: str) -> None:
    class Bad(Mount):
        name = "bad"

    bad = Bad()
    bad.path = path
    pm = make_plugin_manager(load_entrypoints=False, extra=[mounting(bad)])
    with pytest.raises(PluginError, match="a mount's path is one"):
        Registry.collect(pm)


def test_two_mounts_on_one_path_is_a_plugin_error() -> None:
    class Other(Echo):
        name = "other"

    pm = make_plugin_manager(load_entrypoints=False, extra=[mounting(Echo()), mounting(Other())])
    with pytest.raises(PluginError, match="mounted twice"):
        Registry.collect(pm)


# -- commands ----------------------------------------------------------------------------------


class Hello(Command):
    name = "hello"
    help = "say hello"

    def configure(self, parser: Any) -> None:
        parser.add_argument("--who", default="world")

    def run(self, args: Any) -> int:
        print(f"hello {args.who}")
        return 7


class Commanding:
    """A plugin registering ``commands``; ``loads`` counts the times it was asked to."""

    def __init__(self, *commands: Command) -> None:
        self.commands = commands
        self.loads = 0

    @hookimpl
    def lore_register_commands(self, register: Callable[[Command], None]) -> None:
        self.loads += 1
        for command in self.commands:
            register(command)


def test_a_plugin_command_runs_and_is_loaded_only_when_needed(capsys: pytest.CaptureFixture[str]) -> None:
    from lore_core.cli.commands import build_parser, main

    plugin = Commanding(Hello())
    assert main(["hello", "--who", "lore"], extra_plugins=[plugin]) == 7
    assert capsys.readouterr().out == "hello lore\n"
    assert plugin.loads == 1
    build_parser(["status"], [plugin])  # a built-in: no plugin is loaded to parse it
    assert plugin.loads == 1
    with pytest.raises(SystemExit):
        main(["--help"], extra_plugins=[plugin])
    assert "say hello" in capsys.readouterr().out


def test_a_plugin_command_named_like_a_builtin_is_a_plugin_error(capsys: pytest.CaptureFixture[str]) -> None:
    from lore_core.cli.commands import main

    class Serve(Hello):
        name = "serve"

    assert main(["--help"], extra_plugins=[Commanding(Serve())]) == 2
    assert "a built-in command" in capsys.readouterr().err


class BodyReader(Mount):
    """Reads the whole body, as the MCP SDK does, and answers with its length."""

    name = "reader"
    path = "/reader"

    def __init__(self) -> None:
        self.bodies: list[int] = []

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ConnectionError("the client went away")
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(len(body))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(len(body)).encode()})


def test_a_mounts_body_is_bounded_by_the_local_apis_limit(
    start_gateway: Callable[..., ThreadedServer],
) -> None:
    reader = BodyReader()
    server = start_gateway(config={"server": {"maxApiBodyBytes": 1000}}, extra_plugins=(mounting(reader),))
    url = server.url + "/reader"
    small = httpx.post(url, content=b"x" * 1000, headers=api_headers())
    assert (small.status_code, small.text) == (200, "1000")
    # Declared too large: refused before the application runs.
    declared = httpx.post(url, content=b"x" * 5000, headers=api_headers())
    assert declared.status_code == 413 and "maxApiBodyBytes" in declared.json()["error"]

    # Chunked, no length declared: cut off once past the limit, then 413.
    def chunks() -> Any:
        for _ in range(50):
            yield b"y" * 500

    streamed = httpx.post(url, content=chunks(), headers=api_headers())
    assert streamed.status_code == 413 and "maxApiBodyBytes" in streamed.json()["error"]
    assert reader.bodies == [1000]
    assert httpx.get(server.url + "/health").status_code == 200
