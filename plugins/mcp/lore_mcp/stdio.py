"""``lore mcp``: the tools over stdio, for agents that launch MCP servers themselves.

One process holds the store (DuckDB), so this server holds none: it calls the running
gateway's HTTP API with the gateway token, like the other ``lore`` commands do. When no
gateway answers on the configured host and port it starts one the way ``lore run`` does
(detached, shared by every agent; ``--no-start`` fails instead). The project is the
directory it runs in (agents start MCP servers in the project), or ``--project``.

stdout is the MCP channel: logs and messages go to stderr (the SDK also points fd 1 at
stderr while it serves, so a stray print cannot corrupt the stream).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from lore_core.interfaces import ApiAnswer, Command, LocalApi

log = logging.getLogger("lore.mcp")

#: One API call's budget: a recall embeds its query, a pack may wait for its min_seq.
CALL_TIMEOUT_SECONDS = 120.0


class GatewayApi(LocalApi):
    """The running gateway's API over loopback HTTP, with the token read at each call (a
    ``lore token --rotate`` is picked up without restarting the agent)."""

    def __init__(self, url: str, token: Callable[[], str | None]) -> None:
        self.url = url
        self._token = token
        # trust_env=False: an HTTP proxy of the user's must not come between us and loopback.
        self._client = httpx.AsyncClient(base_url=url, trust_env=False, timeout=CALL_TIMEOUT_SECONDS)

    async def call(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Any = None
    ) -> ApiAnswer:
        token = self._token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            response = await self._client.request(
                method, path, params=dict(params or {}), json=body, headers=headers
            )
        except httpx.HTTPError as exc:
            reason = f"{type(exc).__name__}: {exc}".rstrip(": ")
            message = f"the Lore gateway at {self.url} did not answer ({reason}); is it running? (lore serve)"
            return ApiAnswer(503, {"error": message})
        try:
            payload = response.json() if response.content else None
        except ValueError:
            payload = None
        return ApiAnswer(response.status_code, payload)

    async def aclose(self) -> None:
        await self._client.aclose()


class McpCommand(Command):
    name = "mcp"
    help = "serve Lore's memory tools over MCP on stdin/stdout (for agents that launch MCP servers)"
    description = (
        "Serve Lore's memory tools (recall, knowledge, forget_session, ...) over MCP on stdin/stdout,\n"
        "for agents that launch MCP servers themselves. It talks to the running gateway (and starts\n"
        "one as `lore run` does unless --no-start); the gateway also serves MCP over HTTP at /mcp."
    )
    examples = (
        "lore mcp",
        "claude mcp add lore -- lore mcp --project .   # register it with Claude Code",
    )

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--project", help="the project's directory (default: the current directory)")
        parser.add_argument(
            "--no-start",
            action="store_true",
            help="fail when no gateway runs, instead of starting one as `lore run` does",
        )

    def run(self, args: argparse.Namespace) -> int:
        return serve_stdio(args.project, start=not args.no_start, verbose=getattr(args, "verbose", False))


def _fail(message: str, code: int = 1) -> int:
    print(f"lore mcp: {message}", file=sys.stderr, flush=True)
    return code


def serve_stdio(project: str | None, *, start: bool = True, verbose: bool = False) -> int:
    """Run the stdio server until the client closes stdin; the exit status."""
    # Before anything logs (the SDK's server configures logging only when nothing did).
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    directory = os.path.abspath(project or os.getcwd())
    if not os.path.isdir(directory):
        return _fail(f"the project directory {directory} does not exist", 2)

    from lore_core.local_gateway import GatewayUnreachable, reach_gateway
    from lore_core.plugins import bootstrap

    try:
        gateway = reach_gateway(bootstrap().config, start=start)
    except GatewayUnreachable as exc:
        return _fail(str(exc))
    if start:
        print(f"lore mcp: {gateway.status}", file=sys.stderr, flush=True)

    import anyio

    from lore_mcp.tools import build_server, stdio_project

    api = GatewayApi(gateway.url, gateway.token)
    server = build_server(api, stdio_project(directory))

    async def main() -> None:
        try:
            await server.run_stdio_async()
        finally:
            await api.aclose()

    try:
        anyio.run(main)
    except KeyboardInterrupt:
        return 130
    return 0
