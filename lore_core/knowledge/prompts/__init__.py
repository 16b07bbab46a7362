"""The knowledge prompts (the curator's, the contradiction judge's), Markdown files beside
this module (as the distillation prompts are): the first line of each is the marker that
identifies it in recorded requests."""

from __future__ import annotations

from functools import cache
from importlib import resources

CURATOR_MARKER = "lore:curator-prompt"
CONTRADICTION_MARKER = "lore:contradiction-prompt"


@cache
def load_prompt(name: str) -> str:
    """The text of ``<name>.md`` in this package."""
    return resources.files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8")
