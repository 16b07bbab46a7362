"""``lore status``: is the gateway up; the store's size and counts; the gateway's worker,
distillation, spend and indexer when one runs. Through the local API (``GET /status``)."""

from __future__ import annotations

import argparse

from lore_core.cli.api_client import ApiClient, with_client
from lore_core.cli.common import described, print_json
from lore_core.interfaces import Command


def cmd_status(args: argparse.Namespace) -> int:
    def action(client: ApiClient) -> int:
        data = client.get("/status")
        if client.url is None:  # the routes ran here: no gateway to report on
            data = {"gateway": "not running", "store": data["store"]}
        if args.json:
            print_json(data)
            return 0
        store = data.get("store") or {}
        if client.url is not None:
            health = data["health"]
            print(f"gateway: running at {client.url} ({health['status']}, up {health['uptime_seconds']} s)")
            for problem in health.get("degraded") or []:
                print(f"DEGRADED {problem}")
            worker = health.get("worker") or {}
            target = worker.get("target") or {}
            where = (
                f" ({target.get('model')} at {target.get('upstream')}, {target.get('source')})"
                if target
                else ""
            )
            reason = f": {worker['reason']}" if worker.get("reason") else ""
            print(f"worker:  {worker.get('state', 'unknown')}{where}{reason}")
            distill = health.get("distill") or {}
            if distill:
                counts = distill.get("counts") or {}
                print(
                    f"distill: {counts.get('gen0_llm', 0)} LLM and "
                    f"{counts.get('gen0_extractive', 0)} extractive observation logs, "
                    f"{counts.get('gen1', 0)} meta-distillations since start; "
                    f"{len(distill.get('running') or [])} running"
                    + (f"; last error: {distill['last_error']}" if distill.get("last_error") else "")
                )
            spend = health.get("spend") or {}
            throttle = health.get("throttle") or {}
            if spend:
                budget = spend.get("daily_budget_usd") or 0
                print(
                    f"spend:   ${spend.get('today_usd', 0):.4f} today"
                    + (f" of a ${budget:g} daily budget" if budget else " (no daily budget)")
                    + f"; throttle.events {throttle.get('throttle.events', 0)},"
                    f" throttle.totalDelayMs {throttle.get('throttle.totalDelayMs', 0)}"
                )
        else:
            print("gateway: not running")
        if "error" in store:
            print(f"store:   unavailable: {store['error']}")
            return 3
        size = store.get("size_bytes") or 0
        print(f"store:   {store.get('backend')} at {store.get('path') or '(memory)'} ({size / 1e6:.1f} MB)")
        print(
            f"         {store.get('projects', 0)} projects, {store.get('sessions', 0)} sessions, "
            f"{store.get('messages', 0)} messages, {store.get('distillations', 0)} distillations "
            f"(schema v{store.get('schema_version')})"
        )
        for advice in store.get("advice") or []:
            print(f"         note: {advice}")
        for model, v in sorted((store.get("vectors") or {}).items()):
            print(f"vectors: {model}: {v.get('vectors', 0)} vectors, {v.get('pending', 0)} items pending")
        indexer = (data.get("health") or {}).get("indexer") or {}
        if client.url is not None and indexer:
            error = f": {indexer['error']}" if indexer.get("error") else ""
            print(f"indexer: {indexer.get('state')}{error}")
        return 0

    return with_client(args, action)


class Status(Command):
    name = "status"
    help = "is the gateway up; store path, size and counts"
    description, examples = described(name)

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_status(args)
