"""The fallback harness: any SDK or client no harness plugin recognises."""

from __future__ import annotations

import re
from collections.abc import Callable

from lore_core.builtin.harness_support import find_project, header_project
from lore_core.hookspecs import hookimpl
from lore_core.interfaces import Harness, LaunchPlan, RequestContext

_CWD_PATTERNS = (
    re.compile(r"[Ww]orking directory:\s*(/[^\s<]+)"),
    re.compile(r"<cwd>\s*(/[^<]+?)\s*</cwd>"),
)


class GenericHarness(Harness):
    name = "generic"
    #: A fallback for requests no client's harness recognises: there is no client to start.
    launches = False

    def recognise(self, ctx: RequestContext) -> int:
        return 0

    def session_id(self, ctx: RequestContext) -> str | None:
        for header in ("x-lore-session", "x-session-id", "session-id"):
            value = ctx.headers.get(header, "").strip()
            if value:
                return value
        return None

    def project(self, ctx: RequestContext) -> str | None:
        return header_project(ctx) or find_project(ctx.view, _CWD_PATTERNS)

    def launch(self, gateway_url: str, args: list[str]) -> LaunchPlan:
        raise LookupError("the generic harness does not launch a client (launches = False)")


@hookimpl
def lore_register_harnesses(register: Callable[[Harness], None]) -> None:
    register(GenericHarness())
