"""The ``lore`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from lore_core.config import ConfigError


def _configure_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from lore_core.gateway import Gateway
    from lore_core.server import serve_forever

    _configure_logging(args.verbose)
    gateway = Gateway.load()
    host = args.host or gateway.config.server.host
    port = args.port if args.port is not None else gateway.config.server.port

    def listening(url: str) -> None:
        print(f"Lore gateway listening on {url}", flush=True)
        print(f"  Anthropic clients: ANTHROPIC_BASE_URL={url}", flush=True)
        print(f"  OpenAI clients:    OPENAI_BASE_URL={url}/v1", flush=True)

    try:
        serve_forever(gateway, host, port, listening)
    except OSError as exc:
        print(f"lore: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from lore_core.plugins import installed_plugins

    rows = installed_plugins()
    width = max(len(p.name) for p in rows)
    for p in rows:
        print(f"{p.name:<{width}}  {p.distribution} {p.version}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from lore_core.launcher import run_agent

    _configure_logging(args.verbose)
    return run_agent(args.agent, list(args.agent_args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lore", description="Lore: a memory layer for AI coding agents.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    serve = sub.add_parser("serve", help="run the gateway in the foreground")
    serve.add_argument("--host", default=None, help="address to bind (default 127.0.0.1, env LORE_HOST)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8377, env LORE_PORT)")
    serve.set_defaults(func=cmd_serve)

    run = sub.add_parser("run", help="start (or reuse) a gateway and launch a coding agent wired to it")
    run.add_argument("agent", help="claude, codex, opencode, or any installed harness")
    run.add_argument("agent_args", nargs=argparse.REMAINDER, help="arguments passed to the agent")
    run.set_defaults(func=cmd_run)

    plugins = sub.add_parser("plugins", help="list installed plugins with their versions")
    plugins.set_defaults(func=cmd_plugins)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"lore: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
