"""OpenCode: recognise its requests, find its session and project, launch it."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable

from lore_core import hookimpl
from lore_core.harness import resolve_project
from lore_core.interfaces import Harness, LaunchPlan, RequestContext

# OpenCode's system prompt has an <env> block: "  Working directory: /home/dev/project".
CWD_PATTERNS = (re.compile(r"Working directory:\s*(/[^\n<]+)"),)


class OpenCodeHarness:
    name = "opencode"

    def recognise(self, ctx: RequestContext) -> int:
        if ctx.headers.get("user-agent", "").startswith("opencode/"):
            return 100
        if ctx.headers.get("originator") == "opencode":
            return 90
        return 0

    def session_id(self, ctx: RequestContext) -> str | None:
        for header in ("x-session-id", "session-id"):
            value = ctx.headers.get(header, "").strip()
            if value:
                return value
        key = ctx.view.raw.get("prompt_cache_key") if ctx.view else None
        return key if isinstance(key, str) and key else None

    def project(self, ctx: RequestContext) -> str | None:
        return resolve_project(ctx, CWD_PATTERNS)

    def launch(self, gateway_url: str, args: list[str]) -> LaunchPlan:
        exe = shutil.which("opencode") or "opencode"
        # OpenCode reads extra configuration from OPENCODE_CONFIG_CONTENT; point every
        # provider it knows at the gateway.
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                "anthropic": {"options": {"baseURL": f"{gateway_url}/v1"}},
                "openai": {"options": {"baseURL": f"{gateway_url}/v1"}},
            },
        }
        return LaunchPlan(argv=[exe, *args], env={"OPENCODE_CONFIG_CONTENT": json.dumps(config)})


@hookimpl
def lore_register_harnesses(register: Callable[[Harness], None]) -> None:
    register(OpenCodeHarness())
