"""Codex CLI: recognise its requests, find its session and project, launch it, read its
session files."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from lore_core import hookimpl
from lore_core.builtin.harness_support import header_project
from lore_core.interfaces import (
    ClientSetting,
    Harness,
    HistorySource,
    ImportedSession,
    LaunchPlan,
    RequestContext,
)
from lore_core.model import TEXT, RequestView
from lore_harness_codex import history

# Codex sends an <environment_context> user item: "<cwd>/home/dev/project</cwd>". The
# built-in provider puts it after four developer items, so look further than the first few.
CWD_PATTERN = re.compile(r"<cwd>\s*(/[^<]+?)\s*</cwd>")
MAX_ITEMS_SCANNED = 50
# Every request carries its turn metadata as JSON (header and body): session and workspaces.
TURN_METADATA = "x-codex-turn-metadata"


class CodexHarness(Harness):
    name = "codex"
    display_name = "Codex CLI"
    npm_package = "@openai/codex"

    def recognise(self, ctx: RequestContext) -> int:
        # originator is "codex_exec", "codex_cli_rs", "codex_vscode", ...
        if ctx.headers.get("originator", "").startswith("codex") or TURN_METADATA in ctx.headers:
            return 100
        if ctx.headers.get("user-agent", "").startswith("codex"):
            return 90
        return 0

    def session_id(self, ctx: RequestContext) -> str | None:
        for header in ("session-id", "thread-id"):
            value = ctx.headers.get(header, "").strip()
            if value:
                return value
        raw = ctx.view.raw if ctx.view is not None else {}
        for candidate in (raw.get("prompt_cache_key"), _client_metadata(raw).get("session_id")):
            if isinstance(candidate, str) and candidate:
                return candidate
        session = turn_metadata(ctx).get("session_id")
        return session if isinstance(session, str) and session else None

    def project(self, ctx: RequestContext) -> str | None:
        """``X-Lore-Project``, then the ``<cwd>`` Codex tells the model, then the workspace
        in its turn metadata, then the gateway's working directory."""
        found = header_project(ctx) or find_cwd(ctx.view)
        if found:
            return found
        workspaces = turn_metadata(ctx).get("workspaces")
        if isinstance(workspaces, dict):
            for path in workspaces:
                if isinstance(path, str) and path.startswith("/"):
                    return path
        return ctx.gateway_cwd

    def launch(self, gateway_url: str, args: list[str]) -> LaunchPlan:
        # The built-in OpenAI provider follows openai_base_url (it ignores OPENAI_BASE_URL).
        # It first tries a WebSocket upgrade, which the gateway answers 426 so it falls back
        # to HTTP at once. Codex 0.171 has no switch that turns auto-compaction off:
        # model_auto_compact_token_limit and model_context_window can only lower the
        # threshold (min with 90% of the model's window), so the gateway must keep the usage
        # it reports below it instead.
        return LaunchPlan(argv=["codex", "-c", f"openai_base_url={gateway_url}/v1", *args])

    def setup_settings(self, gateway_url: str) -> list[ClientSetting]:
        # The same key as the launch plan's `-c`, in $CODEX_HOME/config.toml.
        return [ClientSetting(config_path(), ("openai_base_url",), f"{gateway_url}/v1")]

    # Its session files, for `lore import --from codex` (lore_harness_codex.history).
    def history_root(self) -> Path | None:
        return history.history_root()

    def history_sources(self, root: Path) -> list[HistorySource]:
        return history.history_sources(root)

    def read_history(self, source: HistorySource) -> Iterator[ImportedSession]:
        return history.read_history(source)


def config_path() -> Path:
    """Codex's configuration: ``$CODEX_HOME/config.toml`` or ``~/.codex/config.toml``."""
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex") / "config.toml"


def find_cwd(view: RequestView | None) -> str | None:
    """The first ``<cwd>`` in the instructions or the first items of the conversation."""
    if view is None:
        return None
    for text in _texts(view):
        match = CWD_PATTERN.search(text)
        if match:
            return match.group(1)
    return None


def _texts(view: RequestView) -> Iterable[str]:
    for block in view.system:
        if block.type == TEXT:
            yield block.text
    for msg in view.messages[:MAX_ITEMS_SCANNED]:
        for block in msg.blocks:
            if block.type == TEXT and "<cwd>" in block.text:
                yield block.text


def _client_metadata(raw: dict[str, Any]) -> dict[str, Any]:
    value = raw.get("client_metadata")
    return value if isinstance(value, dict) else {}


def turn_metadata(ctx: RequestContext) -> dict[str, Any]:
    """Codex's turn metadata (session, thread, workspaces), from the header or the body."""
    raw = ctx.view.raw if ctx.view is not None else {}
    for text in (ctx.headers.get(TURN_METADATA), _client_metadata(raw).get(TURN_METADATA)):
        if isinstance(text, str) and text:
            try:
                value = json.loads(text)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return {}


@hookimpl
def lore_register_harnesses(register: Callable[[Harness], None]) -> None:
    register(CodexHarness())
