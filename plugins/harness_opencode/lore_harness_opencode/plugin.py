"""OpenCode: recognise its requests, find its session and project, launch it, read its
session storage."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lore_core import hookimpl
from lore_core.builtin.harness_support import resolve_project
from lore_core.interfaces import (
    ClientSetting,
    Harness,
    HistorySource,
    ImportedSession,
    LaunchPlan,
    RequestContext,
)
from lore_harness_opencode import history

# OpenCode's system prompt has an <env> block: "  Working directory: /home/dev/project".
CWD_PATTERNS = (re.compile(r"Working directory:\s*(/[^\n<]+)"),)
# Its own session id ("ses_..."), sent on every request of the session, the title request
# to the small model included.
SESSION_HEADERS = ("x-session-id", "x-session-affinity", "session-id")
# Providers whose upstreams the gateway knows; OpenCode appends the API path to baseURL.
GATEWAY_PROVIDERS = ("anthropic", "openai")
CONFIG_ENV = "OPENCODE_CONFIG_CONTENT"

# What `lore run opencode` sets besides the provider configuration. OpenCode applies these
# after every configuration file: Lore manages the context window, so OpenCode must neither
# summarise the conversation (compaction.auto) nor drop old tool outputs from it
# (compaction.prune), which would also rewrite history the provider has cached.
LAUNCH_ENV = {
    "OPENCODE_DISABLE_AUTOCOMPACT": "1",
    "OPENCODE_DISABLE_PRUNE": "1",
}


class OpenCodeHarness(Harness):
    name = "opencode"
    display_name = "OpenCode"
    npm_package = "opencode-ai"

    def recognise(self, ctx: RequestContext) -> int:
        if ctx.headers.get("user-agent", "").startswith("opencode/"):
            return 100
        if ctx.headers.get("originator") == "opencode":
            return 90
        return 0

    def session_id(self, ctx: RequestContext) -> str | None:
        for header in SESSION_HEADERS:
            value = ctx.headers.get(header, "").strip()
            if value:
                return value
        key = ctx.view.raw.get("prompt_cache_key") if ctx.view else None
        return key if isinstance(key, str) and key else None

    def project(self, ctx: RequestContext) -> str | None:
        return resolve_project(ctx, CWD_PATTERNS)

    def launch(self, gateway_url: str, args: list[str]) -> LaunchPlan:
        # OpenCode merges OPENCODE_CONFIG_CONTENT over its global and project configuration
        # files, so the providers point at the gateway whatever opencode.json says.
        config = gateway_config(gateway_url, os.environ.get(CONFIG_ENV))
        return LaunchPlan(argv=["opencode", *args], env={CONFIG_ENV: config, **LAUNCH_ENV})

    def setup_settings(self, gateway_url: str) -> list[ClientSetting]:
        # The global opencode.json, which OpenCode merges under a project's own: the providers
        # at the gateway, and LAUNCH_ENV's two switches as the settings they stand for.
        path = config_path()
        return [
            *(ClientSetting(path, ("provider", name, "options", "baseURL"), f"{gateway_url}/v1")
              for name in GATEWAY_PROVIDERS),
            ClientSetting(path, ("compaction", "auto"), False),
            ClientSetting(path, ("compaction", "prune"), False),
        ]  # fmt: skip

    # Its session storage, for `lore import --from opencode` (lore_harness_opencode.history).
    def history_root(self) -> Path | None:
        return history.history_root()

    def history_sources(self, root: Path) -> list[HistorySource]:
        return history.history_sources(root)

    def read_history(self, source: HistorySource) -> Iterator[ImportedSession]:
        return history.read_history(source)


def config_path() -> Path:
    """OpenCode's global configuration: ``$XDG_CONFIG_HOME/opencode/opencode.json`` (by
    default ``~/.config/opencode/opencode.json``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "opencode" / "opencode.json"


def gateway_config(gateway_url: str, existing: str | None = None) -> str:
    """``OPENCODE_CONFIG_CONTENT`` with the gateway's providers, merged over the user's own
    inline configuration when there is one (their keys and models survive)."""
    try:
        base = json.loads(existing) if existing else {}
    except ValueError:
        base = {}
    if not isinstance(base, dict):
        base = {}
    ours: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {name: {"options": {"baseURL": f"{gateway_url}/v1"}} for name in GATEWAY_PROVIDERS},
    }
    return json.dumps(_merge(base, ours))


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


@hookimpl
def lore_register_harnesses(register: Callable[[Harness], None]) -> None:
    register(OpenCodeHarness())
