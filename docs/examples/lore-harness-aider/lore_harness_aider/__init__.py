"""A minimal Lore harness plugin (the example from docs/writing-a-harness-plugin.md)."""

from __future__ import annotations

import re
import shutil

from lore_core import hookimpl
from lore_core.builtin.harness_support import resolve_project
from lore_core.interfaces import LaunchPlan, RequestContext

CWD_PATTERNS = (re.compile(r"Current working directory:\s*(/\S+)"),)


class AiderHarness:
    name = "aider"

    def recognise(self, ctx: RequestContext) -> int:
        # Higher than the generic fallback (0), lower than a session header match.
        return 80 if ctx.headers.get("user-agent", "").lower().startswith("aider/") else 0

    def session_id(self, ctx: RequestContext) -> str | None:
        # aider sends no session header; None makes Lore fingerprint the first user message.
        return None

    def project(self, ctx: RequestContext) -> str | None:
        return resolve_project(ctx, CWD_PATTERNS)

    def launch(self, gateway_url: str, args: list[str]) -> LaunchPlan:
        exe = shutil.which("aider") or "aider"
        return LaunchPlan(argv=[exe, *args], env={"OPENAI_API_BASE": f"{gateway_url}/v1"})


@hookimpl
def lore_register_harnesses(register):
    register(AiderHarness())
