"""The ``embed-local`` entry point: registers the ``local`` embedder and its config section."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from lore_core import hookimpl
from lore_core.plugins import Factory
from lore_embed_local.config import SECTION, EmbedLocalConfig
from lore_embed_local.embedder import LocalEmbedder

if TYPE_CHECKING:
    from lore_core.config import LoreConfig
    from lore_core.interfaces import EmbedderFactory


@hookimpl
def lore_config_sections() -> dict[str, type]:
    return {SECTION: EmbedLocalConfig}


@hookimpl
def lore_register_embedders(register: Callable[[EmbedderFactory], None]) -> None:
    register(Factory(LocalEmbedder.name, make_embedder))


def make_embedder(config: LoreConfig) -> LocalEmbedder:
    """Build the embedder from the ``embed-local`` section; loads nothing yet."""
    return LocalEmbedder(_settings(config))


def _settings(config: LoreConfig) -> EmbedLocalConfig:
    try:
        return config.section(SECTION)
    except KeyError:  # a configuration loaded without this plugin's sections
        return EmbedLocalConfig()
