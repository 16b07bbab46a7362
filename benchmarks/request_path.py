"""What the request path spends on a real session's resent history, request by request.

Every turn of a coding agent resends the whole conversation, and two steps of the gateway
look at all of it before the client has its answer: the context manager measures the
request (``lore_core.context.compose.analyse``: ids, token counts, cut points) and the store
writer turns the finished exchange into records (``records_from_exchange``: which messages
are new, their ids, masking) so that the journal holds them before the last byte goes out.
Both keep a memo of the session's previous request so that only what was added costs much.

This replays the real sessions of ``--data`` (see ``transcripts.py``; the folder is never
part of this repository) as their clients sent them, cumulative request by request (one
request every ``--every`` items), parses each with the product's codec, and times those two
steps in this process, nothing else::

    python benchmarks/request_path.py --data SESSIONS_DIR              # ~1 minute
    PYTHONPATH=/tmp/before python benchmarks/request_path.py --data SESSIONS_DIR   # another tree

(``/tmp/before`` a ``git worktree`` of an earlier commit: its ``lore_core`` is imported
instead of the installed one.) It prints the mean time per request of each step per
session and overall, and which ``lore_core`` it measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import lore_core
from lore_core.context.compose import Memo, analyse
from lore_core.context.tokens import TokenCounter
from lore_core.model import TEXT, AssistantMessage, Block, Exchange, Usage
from lore_core.storage.convert import records_from_exchange
from lore_core.storage.identity import ChainMemo
from lore_core.wire.anthropic.codec import AnthropicMessagesCodec
from lore_core.wire.jsonbody import loads_object
from lore_core.wire.openai_responses.codec import OpenAIResponsesCodec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transcripts import CLAUDE, load_sessions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the coding-sessions folder")
    parser.add_argument("--every", type=int, default=3, help="one request every this many items")
    args = parser.parse_args()
    if not (args.data / "questions.jsonl").is_file():
        parser.error(f"--data {args.data}: no questions.jsonl there")

    counter = TokenCounter()
    print("Lore request-path benchmark. REAL DATA: the coding sessions of", args.data)
    print("lore_core measured:", Path(lore_core.__file__).parent)
    total = {"analyse": 0.0, "records": 0.0}
    requests = messages = 0
    for session in load_sessions(args.data):
        codec = AnthropicMessagesCodec() if session.agent == CLAUDE else OpenAIResponsesCodec()
        known: dict[str, None] = {}
        chains, memo = ChainMemo(), Memo()
        spent = {"analyse": 0.0, "records": 0.0}
        count = 0
        for window in session.windows:
            for end in range(1, len(window.items) + 1, args.every):
                wire = [item.wire for item in window.items[:end]]
                if session.agent == CLAUDE:
                    if window.items[end - 1].role != "user":
                        continue  # Messages requests end with the client's turn
                    body = {"model": "m", "max_tokens": 8, "messages": wire}
                else:
                    body = {"model": "m", "input": wire}
                text = json.dumps(body)
                raw, _ = loads_object(text)
                view = codec.parse(raw, text.encode())

                started = time.perf_counter()
                analyse(view, session.id, counter, memo)
                spent["analyse"] += time.perf_counter() - started

                exchange = Exchange(
                    api=codec.api,
                    path="/v1",
                    request=view,
                    harness=session.agent,
                    session_id=session.id,
                    project=session.project,
                    upstream="loopback",
                    status=200,
                    response=AssistantMessage(
                        blocks=[Block(TEXT, text=f"answer {end}")],
                        usage=Usage(),
                        stop_reason="end_turn",
                        model="m",
                        complete=True,
                    ),
                    started_at=1.0,
                )
                exchange.finished_at = 2.0
                started = time.perf_counter()
                batch = records_from_exchange(exchange, known, chains)
                spent["records"] += time.perf_counter() - started
                known.update((m.id, None) for m in batch.messages)  # stored, as the writer does
                count += 1
                messages += len(view.messages)
        if not count:
            continue
        requests += count
        for step in total:
            total[step] += spent[step]
        analysed, recorded = (spent[step] / count * 1e6 for step in ("analyse", "records"))
        print(
            f"  {session.id[:12]:12} {session.agent:11} {count:4} requests: "
            f"analyse {analysed:6.0f} us, records {recorded:6.0f} us"
        )
    print(
        f"all: {requests} requests, {messages / max(requests, 1):.0f} messages each on average: "
        f"analyse {total['analyse'] / max(requests, 1) * 1e6:.0f} us, "
        f"records {total['records'] / max(requests, 1) * 1e6:.0f} us per request"
    )


if __name__ == "__main__":
    main()
