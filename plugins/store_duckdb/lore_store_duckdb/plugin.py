"""Registers the ``duckdb`` store backend.

Importing this module must stay cheap: ``lore`` loads every plugin at start-up, and DuckDB
(~0.1 s) and LanceDB (~2.3 s) are imported only when a store is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lore_core import hookimpl
from lore_core.config import LoreConfig, default_data_dir
from lore_core.interfaces import Command, Store, StoreFactory
from lore_core.plugins import Factory
from lore_store_duckdb.compact import CompactCommand
from lore_store_duckdb.config import SECTION, DuckDBConfig

DEFAULT_FILENAME = "lore.duckdb"


def store_path(config: LoreConfig) -> Path:
    """``store.path`` (``LORE_DB_PATH``) or ``<user data dir>/lore.duckdb``. A directory
    (existing, or written with a trailing slash) gets ``lore.duckdb`` inside it."""
    raw = config.store.path
    if not raw:
        return default_data_dir() / DEFAULT_FILENAME
    path = Path(raw).expanduser()
    if raw.endswith(("/", "\\")) or path.is_dir():
        return path / DEFAULT_FILENAME
    return path


def make_store(config: LoreConfig) -> Store:
    from lore_store_duckdb.store import DuckDBStore

    return DuckDBStore(store_path(config), settings=_settings(config))


def _settings(config: LoreConfig) -> DuckDBConfig:
    try:
        return config.section(SECTION)
    except KeyError:  # a configuration loaded without this plugin's sections
        return DuckDBConfig()


@hookimpl
def lore_config_sections() -> dict[str, type]:
    return {SECTION: DuckDBConfig}


@hookimpl
def lore_register_stores(register: Callable[[StoreFactory], None]) -> None:
    # A factory rather than DuckDBStore itself: importing the store module imports DuckDB.
    register(Factory("duckdb", make_store))


@hookimpl
def lore_register_commands(register: Callable[[Command], None]) -> None:
    register(CompactCommand())
