"""``lore spend``: what the sessions' model calls cost, by day, model or session.

Read from what the gateway keeps in the store (:mod:`lore_core.context.spend`): through the
running gateway's local API (``GET /lore/api/spend``, which saves today's latest figures
first), or from the same route on the store in this process when no gateway runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lore_core.interfaces import Command

BY = ("day", "model", "session")


class SpendCommand(Command):
    """``lore spend``."""

    name = "spend"
    help = "what the model calls cost, by day, model or session (--days, --by)"
    description = (
        "Spend of the sessions' model calls over the last days (local days, today "
        "included), priced from the usage upstreams report and the price table. By model and by "
        "session from the day this was first recorded on; the background worker's spend of today "
        "is shown apart."
    )
    examples = ("lore spend", "lore spend --days 30 --by model", "lore spend --by session --limit 0 --json")

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--days", type=int, default=7, help="how many days, today included (default 7)")
        parser.add_argument(
            "--by", choices=BY, default="day", help="one row per day (default), model or session"
        )
        parser.add_argument(
            "--limit",
            type=int,
            default=20,
            help="rows by model or session, most first (0: all; default 20)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace) -> int:
        return cmd_spend(args)


def _rows(report: dict[str, Any], by: str, limit: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = report[f"by_{by}"]
    return rows if by == "day" or limit <= 0 else rows[:limit]


def cmd_spend(args: argparse.Namespace) -> int:
    from lore_core.cli.api_client import ApiClient, with_client
    from lore_core.cli.common import print_json

    if args.days < 1:
        print("lore: --days must be at least 1", file=sys.stderr)
        return 2

    def action(client: ApiClient) -> int:
        report: dict[str, Any] = client.get("/spend", days=args.days)
        rows = _rows(report, args.by, args.limit)
        if args.json:
            summary = {key: value for key, value in report.items() if not key.startswith("by_")}
            print_json({**summary, "by": args.by, "rows": rows})
            return 0
        budget = report.get("daily_budget_usd") or 0
        print(
            f"spend {report['since']} to {report['until']}: ${report['total_usd']:.4f}"
            + (f" (daily budget ${budget:g})" if budget else "")
        )
        if args.by == "day":
            for row in rows:
                print(f"  {row['day']}  ${row['usd']:.4f}")
        elif not rows:
            print(f"  nothing recorded by {args.by} in these days")
        elif args.by == "model":
            print(f"  {'model':<32} {'USD':>10} {'calls':>7} {'input':>10} {'output':>9} {'cache read':>11}")
            for row in rows:
                prompt = row["input_tokens"] + row["cache_read_tokens"] + row["cache_write_tokens"]
                share = f" ({row['cache_read_tokens'] / prompt:.0%})" if prompt else ""
                print(
                    f"  {row['model']:<32} {row['usd']:>10.4f} {row['exchanges']:>7}"
                    f" {row['input_tokens']:>10} {row['output_tokens']:>9}"
                    f" {row['cache_read_tokens']:>11}{share}"
                )
        else:
            for row in rows:
                print(f"  {row['session']:<40} ${row['usd']:.4f}")
        shown = len(rows)
        total_rows = len(report[f"by_{args.by}"])
        if shown < total_rows:
            print(f"  ... {total_rows - shown} more (--limit 0 shows all)")
        worker = report.get("worker_today") or {}
        if worker.get("calls"):
            print(f"background worker today (UTC): ${worker.get('cost', 0):.4f} in {worker['calls']} calls")
        return 0

    return with_client(args, action)
