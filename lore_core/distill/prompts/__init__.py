"""The worker prompts, kept as Markdown files beside this module (not inline strings) so
they can be read, reviewed and diffed as prose.

Each file's first line is an HTML comment marker (``<!-- lore:observer-prompt v1 -->``): it
identifies the prompt in recorded requests, and the test fake worker recognises requests by
it (:mod:`lore_core.testing.fake_worker`).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

OBSERVER_MARKER = "lore:observer-prompt"
REFLECTOR_MARKER = "lore:reflector-prompt"


@cache
def load_prompt(name: str) -> str:
    """The text of ``<name>.md`` in this package."""
    return resources.files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8")
