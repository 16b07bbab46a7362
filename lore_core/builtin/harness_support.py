"""Helpers harness plugins share: session fingerprints and finding the project directory."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from lore_core.interfaces import RequestContext
from lore_core.model import TEXT, RequestView
from lore_core.storage.records import normal_project

PROJECT_HEADER = "x-lore-project"


def fingerprint_session(view: RequestView | None) -> str:
    """A stable session id from the first user message, for clients that send none.

    Clients resend the whole history every turn, so the first user message (plus the model)
    identifies the conversation across turns.
    """
    first = ""
    if view is not None:
        for msg in view.messages:
            if msg.role == "user":
                first = msg.text
                break
    digest = hashlib.sha256(f"{view.model if view else ''}\x00{first}".encode()).hexdigest()
    return "fp-" + digest[:24]


def header_project(ctx: RequestContext) -> str | None:
    """The project a client names in ``X-Lore-Project``: an absolute directory, normalised
    (``/a/b/../../etc`` is ``/etc``, review F16), or nothing (a relative or garbled value
    would file the session under a bogus project)."""
    return normal_project(ctx.headers.get(PROJECT_HEADER, "").strip())


def texts_of(view: RequestView | None, max_messages: int = 3) -> Iterable[str]:
    """System text first, then the first few messages: where clients describe their cwd."""
    if view is None:
        return
    for block in view.system:
        if block.type == TEXT:
            yield block.text
    for msg in view.messages[:max_messages]:
        for block in msg.blocks:
            if block.type == TEXT:
                yield block.text


def find_project(view: RequestView | None, patterns: Iterable[re.Pattern[str]]) -> str | None:
    """The first directory one of ``patterns`` (group 1 = the path) finds in the prompt."""
    patterns = list(patterns)
    for text in texts_of(view):
        for pattern in patterns:
            match = pattern.search(text)
            if match:
                found = match.group(1).strip()
                return normal_project(found) or found
    return None


def resolve_project(ctx: RequestContext, patterns: Iterable[re.Pattern[str]] = ()) -> str:
    """Header first, then the prompt, then the gateway's working directory. The gateway then
    maps whatever a harness returns to its repository root
    (:func:`lore_core.projects.project_root`, in :func:`lore_core.pipeline.parse.identify`)."""
    return header_project(ctx) or find_project(ctx.view, patterns) or ctx.gateway_cwd
