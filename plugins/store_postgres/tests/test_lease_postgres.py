"""The distillation lease on PostgreSQL: two stores on one database (two gateways' pools),
one scheduler each; the session is distilled by one of them, the other skips it while the
lease runs; a lease left by a holder that never released it (a crash) holds until it
expires on the server's clock, then the other scheduler takes over."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from lore_store_postgres.config import PostgresConfig
from lore_store_postgres.store import PostgresStore

from lore_core.config import DistillConfig
from lore_core.distill.inputs import Distillation, DistillInput
from lore_core.distill.observer import Observer
from lore_core.distill.scheduler import CLAIMED_ELSEWHERE, DistillScheduler, lease_key
from lore_core.testing.builders import answer, batch_of, exchange, text

CONFIG = DistillConfig(first_segment_min_messages=1, first_segment_min_tokens=1)


class HeldObserver:
    def __init__(self) -> None:
        self.inner = Observer(None)
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def observe(
        self,
        messages: Sequence[DistillInput],
        previous: str = "",
        *,
        session_id: str | None = None,
        tool_names: Mapping[str, str] | None = None,
    ) -> Distillation:
        self.entered.set()
        await self.go.wait()
        return await self.inner.observe(messages, previous, session_id=session_id, tool_names=tool_names)


def stores(dsn: str) -> tuple[PostgresStore, PostgresStore]:
    return (
        PostgresStore(PostgresConfig(dsn=dsn, pool_size=2), journal_dir=None),
        PostgresStore(PostgresConfig(dsn=dsn, pool_size=2), journal_dir=None),
    )


def test_two_gateways_one_distillation(pg_dsn: str) -> None:
    async def main() -> None:
        one, two = stores(pg_dsn)
        await one.open()
        await two.open()
        try:
            history = [text("user", "look at src/parser.py: the build fails on empty input")]
            await one.write(batch_of(exchange(history, answer("fixed the parser"), session="s-1")))
            held = HeldObserver()
            a = DistillScheduler(one, CONFIG, None, observer=held)
            b = DistillScheduler(two, CONFIG, None)
            run_a = asyncio.create_task(a.distill_session("s-1"))
            await held.entered.wait()
            assert (await b.distill_session("s-1")).notes == [CLAIMED_ELSEWHERE]
            held.go.set()
            assert sum((await run_a).observed.values()) == 1
            again = await b.distill_session("s-1")
            assert CLAIMED_ELSEWHERE not in again.notes and not again.observed
            assert len(await two.list_distillations("s-1")) == 1

            # A gateway claims the session and dies (its store closed, the lease never
            # released): the other waits for the expiry, then distils.
            more = [*history, text("assistant", "fixed the parser"), text("user", "and the lexer?")]
            await one.write(batch_of(exchange(more, answer("the lexer too"), session="s-1")))
            assert await one.claim_lease(lease_key("s-1"), "crashed", 1.0)
            await one.close()
            assert (await b.distill_session("s-1")).notes == [CLAIMED_ELSEWHERE]
            await asyncio.sleep(1.2)
            report = await b.distill_session("s-1")
            assert CLAIMED_ELSEWHERE not in report.notes and sum(report.observed.values()) == 1
        finally:
            await one.close()
            await two.close()

    asyncio.run(main())
