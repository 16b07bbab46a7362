"""The local API's routes on a store no gateway serves, called in this process.

A ``lore`` command reads and changes the store through the local API's routes
(:mod:`lore_core.http.api`) in every case: over HTTP when a gateway runs (DuckDB lets one
process hold the store), else here: the same blueprint on a Quart app of its own, whose
gateway is a :class:`StoreOnlyGateway` (the store and what the routes build on it; no proxy,
upstream, token or background work) and which nothing listens for: :class:`StoreApi` calls
it through Quart's test client. One implementation answers a command either way.

Only what a route needs is imported, when it needs it: this module is on the path of every
command run while no gateway runs.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from quart import Quart
from quart.testing import QuartClient

from lore_core.config import LoreConfig
from lore_core.interfaces import ApiAnswer, LocalApi, Store
from lore_core.plugins import Registry


class _NoWriteQueue:
    """What the routes ask of the gateway's writer: nothing is queued in this process
    (every write is the route's own), so the store is always settled."""

    async def wait_idle(self, timeout: float | None = None) -> None:
        return None


class _NoSpendBook:
    """Spend is recorded by a gateway; this process has nothing unsaved."""

    async def save(self) -> None:
        return None


class _LocalDays:
    """The day the spend report ends on: today, in local time (as a gateway counts days)."""

    def __init__(self, daily_budget_usd: float) -> None:
        self.daily_budget_usd = daily_budget_usd

    def today(self) -> dt.date:
        return dt.date.today()


class _NoExports:
    """A gateway rewrites a project's ``.lore.md`` after a knowledge or team change; here the
    next ``lore export`` or gateway start does."""

    def export_due(self, project: str) -> None:
        return None


class StoreOnlyGateway:
    """What the local API's routes use of a :class:`~lore_core.gateway.Gateway`, on an opened
    store that no gateway serves. Each part is built on first use."""

    def __init__(self, store: Store, config: LoreConfig, registry: Registry) -> None:
        self.store = store
        self.config = config
        self.registry = registry
        self.writer = _NoWriteQueue()
        self.spend = _NoSpendBook()
        self.costs = _LocalDays(config.budget.daily_budget_usd)
        self.knowledge_upkeep = _NoExports()

    def health(self, private: bool = False) -> dict[str, Any]:
        return {"status": "not running"}

    @functools.cached_property
    def knowledge(self) -> Any:
        from lore_core.knowledge.book import KnowledgeBook

        return KnowledgeBook(self.store)

    @functools.cached_property
    def entities(self) -> Any:
        from lore_core.knowledge.entities import EntityBook

        return EntityBook(self.store)

    @functools.cached_property
    def contradictions(self) -> Any:
        from lore_core.knowledge.contradictions import ContradictionFinder

        # No judge: judging needs the worker, which runs in a gateway.
        return ContradictionFinder(self.knowledge, None)

    @functools.cached_property
    def recall(self) -> Any:
        from lore_core.recall.sources import choose_embedder
        from lore_core.recall.store_engine import store_recall_engine

        # The embedder a gateway would use: its vectors are what the store indexed.
        return store_recall_engine(self.store, embedder=choose_embedder(self.config, self.registry.embedders))

    @functools.cached_property
    def worker(self) -> Any:
        from lore_core.worker.client import WorkerClient

        # No session credentials outside a gateway: only a configured worker (worker.*) is
        # usable, else the extractive observer writes the logs.
        return WorkerClient(self.config.worker, self.config.upstream)

    @functools.cached_property
    def distiller(self) -> Any:
        from lore_core.distill.scheduler import DistillScheduler

        chosen = self.registry.choose_curators(self.config, self.worker)
        return DistillScheduler(
            self.store, self.config.distill, self.worker, observer=chosen.observer, reflector=chosen.reflector
        )

    async def forget_session(self, session_id: str) -> Any:
        """``lore forget`` with no gateway: the journal a stopped gateway left, the forget mark
        and the store's own forget (a gateway started later reads the mark and drops what a
        client resends)."""
        from lore_core.gateway import ForgetFailed
        from lore_core.storage.amnesia import Amnesia
        from lore_core.storage.forget import forget_stored_session, scrub_journal
        from lore_core.storage.journal import JournalError

        try:
            journaled = scrub_journal(self.store.journal_dir, session_id)
        except JournalError as exc:
            raise ForgetFailed(str(exc)) from None
        return await forget_stored_session(
            self.store, Amnesia(self.store), session_id, time.time(), journaled
        )

    async def close(self) -> None:
        if "worker" in self.__dict__:
            await self.worker.close()


def store_app(gateway: StoreOnlyGateway) -> Quart:
    """A Quart app with the local API's routes only, on ``gateway``."""
    from lore_core.http.api import api

    app = Quart(__name__)
    app.extensions["lore"] = gateway
    app.register_blueprint(api)
    return app


class StoreApi(LocalApi):
    """The local API's routes on a store, called in this process (no socket, no token: the
    caller owns the store). Its calls run on the event loop the store was opened on."""

    def __init__(self, gateway: StoreOnlyGateway) -> None:
        self.gateway = gateway
        self._client = QuartClient(store_app(gateway))

    async def call(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Any = None
    ) -> ApiAnswer:
        """``method path`` (its query in the path, or ``params``); ``body``: bytes as they
        are, anything else as JSON."""
        headers: dict[str, str] = {}
        if body is None or isinstance(body, bytes):
            data = body or b""
        else:
            data, headers = json.dumps(body).encode(), {"Content-Type": "application/json"}
        parts = urlsplit(path)
        # What an ASGI server hands the app: the path decoded, the query as it came.
        target = unquote(parts.path) + (f"?{parts.query}" if parts.query else "")
        response = await self._client.open(
            target,
            method=method,
            data=data,
            headers=headers,
            query_string=dict(params) if params else None,
        )
        raw = await response.get_data()
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = None
        return ApiAnswer(response.status_code, payload)
