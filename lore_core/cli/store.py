"""``lore store migrate`` and ``lore store copy``: operations on a whole store.

``migrate`` opens the configured store, which applies its pending schema migrations, and
reports the versions. ``copy`` moves an existing memory into another store through the
:class:`~lore_core.interfaces.Store` protocol of both (:mod:`lore_core.storage.copy`), with a
progress display and a count check per tier at the end.

A store is named on the command line as (``--from`` / ``--to``):

- ``postgresql://...`` (or ``postgres://``): the ``postgres`` backend at that DSN;
- ``BACKEND:LOCATION`` (``duckdb:/data/lore.duckdb``, ``postgres:host=db dbname=lore``);
- a bare backend name (``duckdb``, ``postgres``, ``memory``): the configured store when it
  is the configured backend, else that backend at its default location;
- a file ending in ``.json``: a Lore configuration file; its ``store`` section and the
  plugins' sections describe the store;
- any other path: a DuckDB file.

A store named by its location gets its backend's default settings besides that location
(a DSN carries its own ``sslmode`` and the like); give a configuration file for others.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import attrs

from lore_core.cli.help_texts import HELP
from lore_core.config import ConfigError, LoreConfig, load_config
from lore_core.interfaces import Command, Store, StoreFactory

#: Environment variables that would override a configuration file's store section.
_STORE_ENV = ("LORE_DB_PATH", "LORE_STORE")


class StoreSpecError(ValueError):
    """A --from / --to that names no store: the message says why."""


class StoreCommand(Command):
    """``lore store migrate|copy``."""

    name = "store"
    help = "store operations: apply schema migrations, copy a memory to another store"
    description, examples = HELP[name][0], tuple(HELP[name][1])

    def configure(self, parser: argparse.ArgumentParser) -> None:
        ssub = parser.add_subparsers(dest="store_command", metavar="ACTION")
        ssub.required = True
        migrate = ssub.add_parser("migrate", help="apply the configured store's pending schema migrations")
        migrate.add_argument(
            "--json", action="store_true", help="print {backend, location, before, after, applied}"
        )
        copy = ssub.add_parser(
            "copy",
            help="copy every tier of one store into another (progress, then a count check per tier)",
        )
        copy.add_argument(
            "--from",
            dest="source",
            default=None,
            metavar="STORE",
            help="the store to read (default: the configured one): a DSN, BACKEND:LOCATION, a backend "
            "name, a .json configuration file, or a DuckDB file",
        )
        copy.add_argument(
            "--to", dest="destination", required=True, metavar="STORE", help="the store to write, as --from"
        )
        copy.add_argument(
            "--merge",
            action="store_true",
            help="copy into a destination that already holds data (a copy cut short, or another memory): "
            "what it holds stays, what it lacks is added",
        )
        copy.add_argument(
            "--json", action="store_true", help="print the report (tiers, counts, failures) as JSON"
        )

    def run(self, args: argparse.Namespace) -> int:
        return cmd_store_migrate(args) if args.store_command == "migrate" else cmd_store_copy(args)


# -- naming a store ---------------------------------------------------------------------------


def _defaults(config: LoreConfig, backend: str, location: str) -> LoreConfig:
    """``config`` with the store at ``location`` and every plugin section at its defaults
    (a section's own location, such as a DSN, must not win over the one given)."""
    sections = {key: type(value)() for key, value in config.plugin_sections.items()}
    store = attrs.evolve(config.store, backend=backend, path=location)
    return attrs.evolve(config, store=store, plugin_sections=sections)


def store_config(
    spec: str | None, config: LoreConfig, stores: dict[str, StoreFactory], sections: dict[str, type]
) -> tuple[LoreConfig, bool]:
    """The configuration of the store ``spec`` names (``None``: the configured one), and
    whether the spec named a file that must exist already."""
    if spec is None:
        return config, False
    spec = spec.strip()
    if not spec:
        raise StoreSpecError("an empty store name")
    configured = config.store.backend or ("duckdb" if "duckdb" in stores else "memory")
    if spec.startswith(("postgresql://", "postgres://")):
        return _defaults(config, "postgres", spec), False
    name, sep, location = spec.partition(":")
    if sep and name in stores:
        if not location.strip():
            raise StoreSpecError(f"{spec!r}: no location after {name}:")
        path_like = "://" not in location and "=" not in location
        if path_like:
            location = str(Path(location).expanduser().absolute())
        return _defaults(config, name, location), path_like
    if spec in stores:
        if spec == configured:
            return config, False
        return _defaults(config, spec, ""), False
    if spec.endswith(".json"):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise StoreSpecError(f"{spec}: no such configuration file")
        env = {k: v for k, v in os.environ.items() if k not in _STORE_ENV}
        env["LORE_CONFIG"] = str(path)
        return load_config(sections, env=env), False
    if "/" in spec or spec.endswith(".duckdb") or Path(spec).exists():
        if "duckdb" not in stores:
            raise StoreSpecError(f"{spec}: a DuckDB file, and lore-store-duckdb is not installed")
        return _defaults(config, "duckdb", str(Path(spec).expanduser().absolute())), True
    known = ", ".join(sorted(stores))
    raise StoreSpecError(
        f"{spec!r} names no store: give a DSN (postgresql://...), BACKEND:LOCATION, a backend name "
        f"({known}), a .json configuration file or a DuckDB file path"
    )


# -- lore store migrate -------------------------------------------------------------------------


def _gateway_note(config: LoreConfig) -> str:
    from lore_core.cli.api_client import gateway_url

    url = gateway_url(config.server.host, config.server.port)
    return f" (a gateway is running at {url}: stop it first with 'lore stop')" if url else ""


def cmd_store_migrate(args: argparse.Namespace) -> int:
    from lore_core.plugins import bootstrap
    from lore_core.storage.writer import choose_store

    boot = bootstrap()
    store = choose_store(boot.config, boot.registry.stores)

    async def main() -> int:
        try:
            await store.open()
        except Exception as exc:
            print(
                f"lore: cannot open the {store.name} store: {exc}{_gateway_note(boot.config)}",
                file=sys.stderr,
            )
            return 3
        try:
            migration = store.migration
            where = f"{store.name} store" + (f" at {store.location}" if store.location else "")
            report: dict[str, Any] = {"backend": store.name, "location": store.location}
            if migration is None:
                report |= {"versioned": False, "before": None, "after": None, "applied": []}
                line = f"lore: the {where} has no versioned schema: up to date"
            else:
                report |= {
                    "versioned": True,
                    "before": migration.before,
                    "after": migration.after,
                    "applied": migration.applied,
                }
                if not migration.applied:
                    line = f"lore: the {where} is up to date: schema version {migration.after}"
                elif migration.before == 0:
                    line = f"lore: the {where} was new: schema made at version {migration.after}"
                else:
                    applied = ", ".join(str(v) for v in migration.applied)
                    line = (
                        f"lore: the {where} migrated from schema version {migration.before} to "
                        f"{migration.after} (applied {applied})"
                    )
            if args.json:
                print(json.dumps(report))
            else:
                print(line)
            return 0
        finally:
            await store.close()

    return asyncio.run(main())


# -- lore store copy ----------------------------------------------------------------------------


class _Progress:
    """One line per tier on stderr: redrawn in place on a terminal, else a line every 2 s."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.tier = ""
        self.started = time.monotonic()
        self.drawn = 0.0

    def __call__(self, tier: str, done: int, total: int) -> None:
        now = time.monotonic()
        first = tier != self.tier
        if first and self.tier and self.tty:
            print(file=sys.stderr)
        if not (first or done >= total or now - self.drawn >= (0.2 if self.tty else 2.0)):
            return
        self.tier, self.drawn = tier, now
        width = 30
        filled = width * done // total if total else width
        rate = ""
        if tier == "messages" and done:
            rate = f" {done / max(now - self.started, 1e-6):,.0f}/s"
        line = f"copying {tier:<14} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}{rate}"
        print(("\r" if self.tty else "") + line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self.tty and self.tier:
            print(file=sys.stderr)


def cmd_store_copy(args: argparse.Namespace) -> int:
    from lore_core.plugins import bootstrap, config_sections
    from lore_core.storage.copy import copy_store, count_tiers, holds_anything, same_store, tier_lines
    from lore_core.storage.writer import choose_store

    boot = bootstrap()
    stores = dict(boot.registry.stores)
    sections = config_sections(boot.pm)
    try:
        source_config, source_must_exist = store_config(args.source, boot.config, stores, sections)
        destination_config, _ = store_config(args.destination, boot.config, stores, sections)
    except StoreSpecError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 2
    if source_must_exist and not Path(source_config.store.path).exists():
        print(f"lore: --from {args.source}: no such file", file=sys.stderr)
        return 2
    try:
        source = choose_store(source_config, stores)
        destination = choose_store(destination_config, stores)
    except ConfigError as exc:
        print(f"lore: {exc}", file=sys.stderr)
        return 2
    if same_store(source, destination):
        print(f"lore: --from and --to are the same store ({source.name} {source.location})", file=sys.stderr)
        return 2

    async def main() -> int:
        opened: list[Store] = []
        try:
            for role, store in (("source", source), ("destination", destination)):
                try:
                    await store.open()
                except Exception as exc:
                    note = _gateway_note(boot.config)
                    print(f"lore: cannot open the {role} ({store.name} store): {exc}{note}", file=sys.stderr)
                    return 3
                opened.append(store)
            before, _ = await count_tiers(destination)
            holds = holds_anything(before)
            if holds and not args.merge:
                shown = ", ".join(f"{n} {tier}" for tier, n in before.items() if n)
                print(
                    f"lore: the destination already holds data ({shown}); --merge copies into it "
                    "(what it holds stays; a copy cut short goes on)",
                    file=sys.stderr,
                )
                return 2
            print(
                f"lore: copying the {_where(source)} into the {_where(destination)}",
                file=sys.stderr,
            )
            progress = _Progress()
            try:
                report = await copy_store(source, destination, merged=holds, progress=progress)
            finally:
                progress.finish()
        finally:
            for store in opened:
                await store.close()
        if args.json:
            print(json.dumps(report.as_dict()))
        else:
            for line in tier_lines(report):
                print(line)
            print(
                "vectors: not copied; the destination's indexer embeds every item (a gateway on it, "
                "or 'lore reindex')"
            )
            print(f"copied in {report.seconds:.1f} s")
        for failure in report.failures:
            print(f"lore: {failure}", file=sys.stderr)
        if not report.ok:
            bad = [t.tier for t in report.tiers if not t.matches(report.merged)]
            if bad:
                print(f"lore: count check failed for: {', '.join(bad)}", file=sys.stderr)
            return 1
        source_total = sum(t.source for t in report.tiers)
        if source_total == 0:
            print("lore: the source holds nothing: nothing was copied", file=sys.stderr)
            return 1
        return 0

    return asyncio.run(main())


def _where(store: Store) -> str:
    return f"{store.name} store at {store.location}" if store.location else f"{store.name} store"
