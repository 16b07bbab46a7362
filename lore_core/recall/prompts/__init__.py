"""Recall's worker prompts, as Markdown beside this module (read and diffed as prose).

Each file's first line is an HTML comment marker that identifies the prompt in recorded
requests, so a test upstream can recognise a recall expansion request.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

EXPAND_MARKER = "lore:recall-expand-prompt"


@cache
def load_prompt(name: str) -> str:
    """The text of ``<name>.md`` in this package."""
    return resources.files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8")
