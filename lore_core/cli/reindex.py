"""``lore reindex``: embed what the store holds and has not embedded yet for the embedding
model (resumable), with no gateway running (a running one embeds in the background)."""

from __future__ import annotations

import argparse
import sys

from lore_core.cli.api_client import gateway_url
from lore_core.cli.common import ProgressBar, cli_bootstrap, described, print_json
from lore_core.interfaces import Command


def cmd_reindex(args: argparse.Namespace) -> int:
    """Embed what is stored and not yet embedded for the embedding model (resumable)."""
    import asyncio
    import time

    from lore_core.interfaces import EmbedderUnavailable, VectorStore, tier_of
    from lore_core.recall.indexer import VectorIndexer
    from lore_core.recall.sources import choose_embedder, vector_index_name
    from lore_core.storage.writer import choose_store

    boot = cli_bootstrap(args)
    config, registry = boot.config, boot.registry
    url = gateway_url(config.server.host, config.server.port)
    if url is not None:
        # The gateway holds the store (DuckDB allows one process) and already embeds in
        # the background: its /health shows the indexer's progress.
        print(
            f"lore: a gateway is running at {url}: it embeds new and pending items itself "
            "(see 'lore status'); stop it to reindex directly",
            file=sys.stderr,
        )
        return 3
    if args.provider:
        config.embedding.provider = args.provider
    embedder = choose_embedder(config, registry.embedders)
    if embedder is None:
        from lore_core.install import plugin_hint

        hint = plugin_hint("lore-embed-local")
        print(f"lore: no embedding provider is installed; add lore-embed-local with: {hint}", file=sys.stderr)
        return 3
    store = choose_store(config, registry.stores)
    model = vector_index_name(embedder)
    bar = ProgressBar(f"embedding for {model}")
    last_drawn = [0.0]

    def progress(done: int, total: int) -> None:
        # A redraw per batch would be thousands of lines when stderr is not a terminal.
        now = time.monotonic()
        if done == 0 or done >= total or now - last_drawn[0] >= (0.2 if bar.tty else 2.0):
            last_drawn[0] = now
            bar(done, total)

    async def main() -> int:
        try:
            await store.open()
        except Exception as exc:
            print(f"lore: cannot open the store: {exc}", file=sys.stderr)
            return 3
        indexer = VectorIndexer(
            store,
            embedder,
            batch_size=config.embedding.batch_size,
            max_chunks=config.embedding.max_chunks_per_item,
        )
        try:
            await embedder.load()
            # The full-text index first: after an upgrade of the passage rules it is rebuilt.
            search_bar = ProgressBar("search index")
            drawn = [0.0]

            def search_progress(done: int, total: int) -> None:
                now = time.monotonic()
                if done == 0 or done >= total or now - drawn[0] >= (0.2 if search_bar.tty else 2.0):
                    drawn[0] = now
                    search_bar(done, total)

            indexed = await store.sync_search_index(search_progress)
            search_bar.finish()
            if indexed:
                print(f"lore: {indexed} items cut into passages for full-text search", file=sys.stderr)
            vectors = tier_of(store, VectorStore)
            if vectors is None:
                print(f"lore: the {store.name} store has no vector index", file=sys.stderr)
                return 3
            if args.full:
                await vectors.reset_vectors(model)
            print(f"lore: embedding the {store.name} store's items for {model}", file=sys.stderr)
            done = await indexer.run_until_idle(progress)
            bar.finish()
            stats = (await vectors.vector_stats(model)).get(model, {})
            summary = {"model": model, "embedded": done, **stats}
            if args.json:
                print_json(summary)
            else:
                print(
                    f"{done} items embedded; the {model} index holds {stats.get('vectors', 0)} vectors, "
                    f"{stats.get('pending', 0)} items pending"
                )
            return 0
        except EmbedderUnavailable as exc:
            print(f"lore: the embedding model cannot be used: {exc.reason}", file=sys.stderr)
            return 3
        except asyncio.CancelledError:
            bar.finish()
            print(
                f"lore: interrupted after {indexer.items_indexed} items; what was embedded is kept, "
                "run 'lore reindex' again to continue",
                file=sys.stderr,
            )
            raise
        finally:
            await store.close()
            await embedder.close()

    return asyncio.run(main())


class Reindex(Command):
    name = "reindex"
    help = (
        "embed every stored message and distillation not yet embedded for the embedding model "
        "(resumable, progress on stderr; the gateway does this in the background while it runs)"
    )
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--provider",
            "--model",
            dest="provider",
            default=None,
            help="the embedding provider to index for (default: embedding.provider, else the on-device one)",
        )
        parser.add_argument(
            "--full", action="store_true", help="drop this model's vectors first and embed everything again"
        )
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_reindex(args)
