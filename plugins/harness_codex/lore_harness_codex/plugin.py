"""Codex CLI: recognise its requests, find its session and project, launch it."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable

from lore_core import hookimpl
from lore_core.harness import resolve_project
from lore_core.interfaces import Harness, LaunchPlan, RequestContext

# Codex sends an <environment_context> user item: "<cwd>/home/dev/project</cwd>".
CWD_PATTERNS = (re.compile(r"<cwd>\s*(/[^<]+?)\s*</cwd>"),)


class CodexHarness:
    name = "codex"

    def recognise(self, ctx: RequestContext) -> int:
        originator = ctx.headers.get("originator", "")
        if originator.startswith("codex"):
            return 100
        if ctx.headers.get("user-agent", "").startswith("codex"):
            return 90
        return 0

    def session_id(self, ctx: RequestContext) -> str | None:
        for header in ("session-id", "thread-id"):
            value = ctx.headers.get(header, "").strip()
            if value:
                return value
        key = ctx.view.raw.get("prompt_cache_key") if ctx.view else None
        return key if isinstance(key, str) and key else None

    def project(self, ctx: RequestContext) -> str | None:
        return resolve_project(ctx, CWD_PATTERNS)

    def launch(self, gateway_url: str, args: list[str]) -> LaunchPlan:
        exe = shutil.which("codex") or "codex"
        return LaunchPlan(argv=[exe, "-c", f"openai_base_url={gateway_url}/v1", *args])


@hookimpl
def lore_register_harnesses(register: Callable[[Harness], None]) -> None:
    register(CodexHarness())
