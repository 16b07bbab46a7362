"""Claude Code: recognise its requests, find its session and project, launch it, read its
transcripts."""

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
from lore_harness_claude import history

SESSION_HEADER = "x-claude-code-session-id"
USER_AGENT_PREFIX = "claude-cli/"
# Claude Code describes its environment in the system prompt:
#   " - Primary working directory: /home/dev/project"
CWD_PATTERNS = (
    re.compile(r"Primary working directory:\s*(/[^\n]+)"),
    re.compile(r"^\s*-?\s*Working directory:\s*(/[^\n]+)", re.MULTILINE),
)
# Before metadata.user_id became a JSON string it read "user_<hash>_account_<id>_session_<uuid>".
_LEGACY_SESSION = re.compile(r"_session_([0-9a-fA-F-]{36})\b")

# What `lore run claude` sets, and why.
LAUNCH_ENV = {
    # Without this Claude Code also sends the user's API key straight to the provider's own
    # hosts (bootstrap, metrics, event logging), bypassing the gateway.
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    # Lore manages the context window; Claude Code must not summarise the conversation on its
    # own (proactively, or reactively after "prompt is too long"). Its check reads
    # `if (isTruthy(process.env.DISABLE_AUTO_COMPACT)) return false` before the
    # autoCompactEnabled setting; the e2e tests prove it holds against the real client.
    "DISABLE_AUTO_COMPACT": "1",
}


# The instruction Claude Code (2.1.x) sends when it compacts a conversation on its own.
COMPACTION_MARKER = "create a detailed summary of the conversation so far"


class ClaudeCodeHarness(Harness):
    name = "claude"
    display_name = "Claude Code"
    npm_package = "@anthropic-ai/claude-code"

    def recognise(self, ctx: RequestContext) -> int:
        if SESSION_HEADER in ctx.headers:
            return 100
        if ctx.headers.get("user-agent", "").startswith(USER_AGENT_PREFIX):
            return 90
        return 0

    def session_id(self, ctx: RequestContext) -> str | None:
        value = ctx.headers.get(SESSION_HEADER, "").strip()
        if value:
            return value
        # metadata.user_id carries the same id: a JSON string in current versions.
        raw = ctx.view.raw if ctx.view is not None else {}
        metadata = raw.get("metadata")
        user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
        return session_from_user_id(user_id)

    def project(self, ctx: RequestContext) -> str | None:
        return resolve_project(ctx, CWD_PATTERNS)

    def compaction_request(self, ctx: RequestContext) -> bool:
        """Claude Code's compaction call: its last user message asks for a summary."""
        if ctx.view is None or not ctx.view.messages or ctx.view.messages[-1].role != "user":
            return False
        return COMPACTION_MARKER in ctx.view.messages[-1].text

    def launch(self, gateway_url: str, args: list[str]) -> LaunchPlan:
        return LaunchPlan(argv=["claude", *args], env={"ANTHROPIC_BASE_URL": gateway_url, **LAUNCH_ENV})

    def setup_settings(self, gateway_url: str) -> list[ClientSetting]:
        # settings.json's "env" is applied to every Claude Code session, however started.
        settings = settings_path()
        env = {"ANTHROPIC_BASE_URL": gateway_url, **LAUNCH_ENV}
        return [ClientSetting(settings, ("env", name), value) for name, value in env.items()]

    # Its transcripts, for `lore import --from claude-code` (lore_harness_claude.history).
    def history_root(self) -> Path | None:
        return history.history_root()

    def history_sources(self, root: Path) -> list[HistorySource]:
        return history.history_sources(root)

    def read_history(self, source: HistorySource) -> Iterator[ImportedSession]:
        return history.read_history(source)


def settings_path() -> Path:
    """Claude Code's user settings: ``$CLAUDE_CONFIG_DIR/settings.json`` or
    ``~/.claude/settings.json``."""
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude") / "settings.json"


def session_from_user_id(user_id: Any) -> str | None:
    """The session id inside Claude Code's ``metadata.user_id`` (either format), or None."""
    if not isinstance(user_id, str) or not user_id:
        return None
    try:
        decoded = json.loads(user_id)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        session = decoded.get("session_id")
        return session if isinstance(session, str) and session else None
    match = _LEGACY_SESSION.search(user_id)
    return match.group(1) if match else None


@hookimpl
def lore_register_harnesses(register: Callable[[Harness], None]) -> None:
    register(ClaudeCodeHarness())
