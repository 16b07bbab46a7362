"""``lore serve``, ``lore run``, ``lore plugins`` and ``lore token``: the gateway, a client
wired to it, what it loads and the token its API needs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lore_core.cli.api_client import extra_plugins
from lore_core.cli.common import cli_bootstrap, configure_logging, described, print_json
from lore_core.config import ConfigError
from lore_core.interfaces import Command


def cmd_serve(args: argparse.Namespace) -> int:
    from lore_core.cli.launcher import forget_serving, gateway_url, record_serving
    from lore_core.cli.lifecycle import startup_lines
    from lore_core.gateway import Gateway, StoreHeld, claim_store
    from lore_core.http.serve import CannotListen, serve_forever, tune_malloc

    configure_logging(args.verbose)
    tune_malloc()  # before the gateway starts its threads
    gateway = Gateway.load(extra_plugins=extra_plugins(args))
    host = args.host or gateway.config.server.host
    port = args.port if args.port is not None else gateway.config.server.port
    try:
        # One gateway per store: a second one would store nothing (lore_core/gateway.py).
        claim = claim_store(gateway.store, gateway_url(host, port))
    except StoreHeld as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 1
    for line in startup_lines(gateway):
        print(line, flush=True)

    def listening(url: str) -> None:
        record_serving(port)  # lore stop finds it by its pid file
        print(f"Lore gateway listening on {url}", flush=True)
        print(f"  Anthropic clients: ANTHROPIC_BASE_URL={url}", flush=True)
        print(f"  OpenAI clients:    OPENAI_BASE_URL={url}/v1", flush=True)

    try:
        serve_forever(gateway, host, port, listening)
    except CannotListen as exc:
        print(f"lore: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    finally:
        forget_serving(port)
        if claim is not None:
            claim.release()
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    """What the plugin manager loaded (with its hooks and what it registered), what
    ``LORE_DISABLE_PLUGINS`` blocked and what failed to import."""
    import attrs

    from lore_core.plugins import Registry, make_plugin_manager

    # A broken .lore.json is when one most needs to see what loaded: the plugins are listed
    # without it (registration reads no configuration), then the error is reported.
    config_error: ConfigError | None = None
    try:
        boot = cli_bootstrap(args)
        pm, registry = boot.pm, boot.registry
    except ConfigError as exc:
        config_error = exc
        pm = make_plugin_manager(extra=extra_plugins(args))
        registry = Registry.collect(pm)
    registered: dict[str, list[str]] = {}
    for label, plugin in registry.owners.items():
        registered.setdefault(plugin, []).append(label)
    groups: dict[str, list[dict[str, Any]]] = {"loaded": [], "blocked": [], "failed": []}
    for row in pm.report():
        entry = attrs.asdict(row)
        entry["registers"] = registered.get(row.name, [])
        groups[row.status].append(entry)
    if args.json:
        print_json({**groups, "config_error": str(config_error) if config_error else None})
        return 2 if config_error else 0
    headings = {"loaded": "", "blocked": "blocked by LORE_DISABLE_PLUGINS:", "failed": "failed to load:"}
    for status, group in groups.items():
        if group and headings[status]:
            print(headings[status])
        for entry in group:
            print(f"{entry['name']}  {entry['distribution']} {entry['version']}")
            if status == "loaded":
                print(f"    hooks: {', '.join(entry['hooks']) or 'none'}")
            if entry["registers"]:
                print(f"    registers: {', '.join(entry['registers'])}")
            if entry["error"]:
                print(f"    error: {entry['error']}")
    if config_error is not None:
        print(f"lore: configuration error: {config_error}", file=sys.stderr)
        return 2
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from lore_core.cli.launcher import run_agent

    configure_logging(args.verbose)
    return run_agent(args.agent, list(args.agent_args))


def cmd_token(args: argparse.Namespace) -> int:
    """Print the gateway token (made when there is none yet), or replace it."""
    import json

    from lore_core.http import access
    from lore_core.http.token import configured_token, token_path

    config = cli_bootstrap(args).config
    fixed = configured_token(config)
    if fixed is not None:
        if args.rotate:
            print(
                "lore: the token is configured (server.token or LORE_TOKEN): change it there", file=sys.stderr
            )
            return 2
        print(
            json.dumps({"token": fixed, "rotated": False, "source": "configuration"}) if args.json else fixed
        )
        return 0
    path = token_path()
    try:
        token = access.rotate_token(path) if args.rotate else access.load_or_create_token(path)
    except access.TokenError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps({"token": token, "rotated": args.rotate, "source": str(path)}))
    else:
        print(token)
    if args.rotate:
        print(
            f"lore: a new token is in {path}; clients using the old one are refused from now on",
            file=sys.stderr,
        )
    return 0


class Serve(Command):
    name = "serve"
    help = "run the gateway in the foreground"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--host", default=None, help="address to bind (default 127.0.0.1, env LORE_HOST)")
        parser.add_argument("--port", type=int, default=None, help="port (default 8377, env LORE_PORT)")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_serve(args)


class Run(Command):
    name = "run"
    help = "start (or reuse) a gateway and launch a coding agent wired to it"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("agent", help="claude, codex, opencode, or any installed harness")
        parser.add_argument("agent_args", nargs=argparse.REMAINDER, help="arguments passed to the agent")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_run(args)


class Plugins(Command):
    name = "plugins"
    help = "list the plugins loaded (with their hooks), blocked and failed to import"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON: loaded, blocked, failed")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_plugins(args)


class Token(Command):
    name = "token"
    help = "print the gateway token the local API and remote clients need"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--rotate",
            action="store_true",
            help="replace it by a new one (a running gateway takes it at once)",
        )
        parser.add_argument("--json", action="store_true", help='print {"token": ..., "rotated": ...}')

    def run(self, args: argparse.Namespace) -> int:
        return cmd_token(args)
