"""Claude Code: recognise its requests, find its session and project, launch it."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable

from lore_core import hookimpl
from lore_core.harness import resolve_project
from lore_core.interfaces import Harness, LaunchPlan, RequestContext

SESSION_HEADER = "x-claude-code-session-id"
# Claude Code describes its environment in the system prompt:
#   " - Primary working directory: /home/dev/project"
CWD_PATTERNS = (
    re.compile(r"Primary working directory:\s*(/[^\n]+)"),
    re.compile(r"Working directory:\s*(/[^\n]+)"),
)


class ClaudeCodeHarness:
    name = "claude"

    def recognise(self, ctx: RequestContext) -> int:
        if SESSION_HEADER in ctx.headers:
            return 100
        if ctx.headers.get("user-agent", "").startswith("claude-cli/"):
            return 90
        return 0

    def session_id(self, ctx: RequestContext) -> str | None:
        value = ctx.headers.get(SESSION_HEADER, "").strip()
        if value:
            return value
        # metadata.user_id is a JSON string that carries the same session id.
        metadata = (ctx.view.raw.get("metadata") if ctx.view else None) or {}
        try:
            return json.loads(metadata.get("user_id", "")).get("session_id") or None
        except (ValueError, AttributeError):
            return None

    def project(self, ctx: RequestContext) -> str | None:
        return resolve_project(ctx, CWD_PATTERNS)

    def launch(self, gateway_url: str, args: list[str]) -> LaunchPlan:
        exe = shutil.which("claude") or "claude"
        return LaunchPlan(
            argv=[exe, *args],
            env={
                "ANTHROPIC_BASE_URL": gateway_url,
                # Without this Claude Code sends the API key to the provider's own hosts
                # on the side, bypassing the gateway.
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_AUTOUPDATER": "1",
                # Lore manages the context window; the client must not compact on its own.
                "DISABLE_AUTO_COMPACT": "1",
            },
        )


@hookimpl
def lore_register_harnesses(register: Callable[[Harness], None]) -> None:
    register(ClaudeCodeHarness())
