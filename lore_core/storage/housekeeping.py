"""Harness housekeeping: what a client puts into a conversation that is not conversation.

Claude Code wraps reminders and local-command caveats in tags, Codex its environment context
and AGENTS.md instructions. None of it is what happened: it is left out of what is
distilled, searched (passages) and taken as a session's title.
"""

from __future__ import annotations

import re

HOUSEKEEPING_TAGS = ("system-reminder", "local-command-caveat", "environment_context", "user_instructions")
_HOUSEKEEPING = re.compile(r"<(" + "|".join(HOUSEKEEPING_TAGS) + r")\b[^>]*>.*?</\1\s*>[ \t]*\n?", re.S)
# An opening tag whose closing tag never came (a cut message): drop to the end.
_HOUSEKEEPING_OPEN = re.compile(r"<(?:" + "|".join(HOUSEKEEPING_TAGS) + r")\b[^>]*>.*\Z", re.S)


def strip_housekeeping(text: str) -> str:
    """Remove harness housekeeping blocks such as ``<system-reminder>...</system-reminder>``."""
    if "<" not in text:
        return text
    text = _HOUSEKEEPING.sub("", text)
    return _HOUSEKEEPING_OPEN.sub("", text)
