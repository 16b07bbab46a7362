"""The local API's routes on a store no gateway serves (``lore_core.http.store_api``): what
a ``lore`` command gets without a gateway is what a client of the API gets from one."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lore_core.builtin.memory_store import MemoryStore
from lore_core.http.store_api import StoreApi, StoreOnlyGateway
from lore_core.plugins import bootstrap
from lore_core.testing.builders import answer, batch_of, exchange, text


def test_the_routes_answer_in_process_as_a_server_would(lore_env: dict[str, str], tmp_path: Path) -> None:
    boot = bootstrap(load_entrypoints=False, cwd=tmp_path)

    async def main() -> None:
        store = MemoryStore()
        await store.open()
        await store.write(
            batch_of(exchange([text("user", "the flaky test")], answer("rerun it"), session="a/b"))
        )
        api = StoreApi(StoreOnlyGateway(store, boot.config, boot.registry))
        # The path decoded as an ASGI server hands it over: an id with a slash, quoted.
        found = await api.call("GET", "/lore/api/sessions/a%2Fb")
        assert found.status == 200 and found.body["session"]["id"] == "a/b"
        missing = await api.call("GET", "/lore/api/sessions/no%2Fsuch")
        assert (missing.status, missing.body) == (404, {"error": "no session 'no/such'"})
        hits = await api.call("GET", "/lore/api/search", params={"q": "flaky"})
        assert [h["session"] for h in hits.body] == ["a/b"]
        # A JSON body, and the route's own refusal of a bad one.
        refused = await api.call("POST", "/lore/api/knowledge", body={"title": "t"})
        assert refused.status == 400 and "missing" in refused.body["error"]
        await store.close()

    asyncio.run(main())
