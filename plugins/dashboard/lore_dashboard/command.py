"""``lore dashboard``: a one-time login link to the running gateway's dashboard.

The link is minted by the gateway itself (``POST /ui/login-links`` with the gateway token,
as every ``lore`` command reaches the local API), so it works with a gateway started in the
background by ``lore run``; when none runs, one is started the same way (``--no-start``
fails instead). ``--open`` opens the link in the default browser.
"""

from __future__ import annotations

import argparse
import sys
import webbrowser

import httpx

from lore_core.interfaces import Command

#: How long the gateway may take to answer the mint.
MINT_TIMEOUT_SECONDS = 10.0


class DashboardCommand(Command):
    name = "dashboard"
    help = "print (or --open) a one-time login link to the web dashboard of the running gateway"
    description = (
        "Print a one-time login link to the dashboard the gateway serves at /ui (sessions, search,\n"
        "knowledge, forget), or open it in the browser with --open. The link works once, for a short\n"
        "while; it starts a gateway in the background as `lore run` does unless --no-start."
    )
    examples = ("lore dashboard --open", "lore dashboard --no-start   # only if a gateway runs")

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--open", action="store_true", help="open the link in the default web browser")
        parser.add_argument(
            "--no-start",
            action="store_true",
            help="fail when no gateway runs, instead of starting one as `lore run` does",
        )

    def run(self, args: argparse.Namespace) -> int:
        return login_link(open_it=args.open, start=not args.no_start)


def _fail(message: str, code: int = 1) -> int:
    print(f"lore dashboard: {message}", file=sys.stderr, flush=True)
    return code


def login_link(*, open_it: bool = False, start: bool = True) -> int:
    from lore_core.local_gateway import GatewayUnreachable, reach_gateway
    from lore_core.plugins import bootstrap

    try:
        gateway = reach_gateway(bootstrap().config, start=start)
    except GatewayUnreachable as exc:
        return _fail(str(exc))
    if gateway.started:
        print(f"lore dashboard: {gateway.status}", file=sys.stderr, flush=True)
    url, token = gateway.url, gateway.token()
    if not token:
        return _fail("no gateway token found (the gateway writes it at its first start; see `lore token`)")
    try:
        with httpx.Client(base_url=url, trust_env=False, timeout=MINT_TIMEOUT_SECONDS) as client:
            answer = client.post("/ui/login-links", headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        return _fail(f"the gateway at {url} did not answer ({type(exc).__name__}: {exc})")
    if answer.status_code == 404:
        return _fail(
            f"the gateway at {url} does not serve the dashboard: it was started before lore-dashboard "
            "was installed, or the plugin is disabled (LORE_DISABLE_PLUGINS); restart it"
        )
    if answer.status_code == 401:
        return _fail(f"the gateway at {url} refused the token (is it another data directory's gateway?)")
    try:
        payload = answer.json()
        link = url + str(payload["path"])
        ttl = int(payload["expires_in_seconds"])
    except (ValueError, KeyError, TypeError):
        return _fail(f"the gateway at {url} answered {answer.status_code}: {answer.text[:200]}")
    print(f"Open this link within {ttl} seconds; it works once:")
    print(f"  {link}", flush=True)
    if open_it and not webbrowser.open(link):
        return _fail("no web browser could be opened here: open the link above yourself")
    return 0
