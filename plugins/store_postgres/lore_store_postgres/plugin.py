"""Registers the ``postgres`` store backend.

Importing this module must stay cheap: ``lore`` loads every plugin at start-up, and psycopg
is imported only when a PostgreSQL store is made.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable

import attrs

from lore_core import hookimpl
from lore_core.config import LoreConfig, default_data_dir
from lore_core.interfaces import Store, StoreFactory
from lore_core.plugins import Factory
from lore_store_postgres.config import SECTION, PostgresConfig


def make_store(config: LoreConfig) -> Store:
    from lore_store_postgres.store import PostgresStore

    settings = _settings(config)
    if not settings.dsn and config.store.path:
        # store.path (LORE_DB_PATH) names where the store is: for this backend, the DSN. The
        # environment variable suits a container or a CI job; the section wins when set.
        settings = attrs.evolve(settings, dsn=config.store.path)
    # The kernel's journal holds what this gateway acknowledged and has not committed: it
    # belongs to the gateway, not to the database: one per database (named by a digest of
    # the DSN, which is not secret but need not appear in a file name) and per port, so two
    # gateways of one machine on one database each keep (and claim) their own, and a
    # gateway restarted on its port replays what it left.
    digest = hashlib.sha256(settings.dsn.encode()).hexdigest()[:12]
    journal = default_data_dir() / f"postgres-{digest}-{config.server.port}.journal"
    # Before the port was part of the name there was one journal per database: what a
    # gateway of that version left unwritten is taken over (and replayed) by the first one
    # to open this database here; the store keeps a message once, whoever replays it.
    earlier = default_data_dir() / f"postgres-{digest}.journal"
    if earlier.exists() and not journal.exists():
        with contextlib.suppress(FileNotFoundError):  # another gateway took it first
            os.replace(earlier, journal)
    return PostgresStore(settings, journal_dir=journal)


def _settings(config: LoreConfig) -> PostgresConfig:
    try:
        return config.section(SECTION)
    except KeyError:  # a configuration loaded without this plugin's sections
        return PostgresConfig()


@hookimpl
def lore_config_sections() -> dict[str, type]:
    return {SECTION: PostgresConfig}


@hookimpl
def lore_register_stores(register: Callable[[StoreFactory], None]) -> None:
    # A factory rather than PostgresStore itself: importing the store module imports psycopg.
    register(Factory("postgres", make_store))
