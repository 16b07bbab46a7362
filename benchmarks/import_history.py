"""History import on real sessions: import real Claude Code and Codex transcripts as
``lore import --from`` does, then ask the folder's questions of the imported store and of a
store replayed through a gateway, in the same run.

Data: a development folder of real sessions (``--data``, with ``questions.jsonl``,
``sessions/`` and ``SOURCE.json``; see its README). It is not part of this repository and is
never copied into it; every figure this prints is measured on that folder's sessions.

1. **Import.** The folder's ``sessions/`` read by the Claude Code and the Codex harnesses'
   readers (what ``lore import --from claude-code --path DIR`` and ``--from codex`` do: the
   folder holds both clients' files, each reader takes its own) into a fresh DuckDB store,
   through :func:`lore_core.storage.history_import.import_history`: sessions and messages
   imported, time and rate. Then twice more: as a second run does (the done markers: nothing
   read, nothing added), and reading every file again (nothing added: the store holds every
   message id).
2. **Replay.** The same sessions replayed through a real gateway as ``real_sessions.py`` does,
   filed under the session ids and projects the import found (each transcript's own, so both
   stores hold the same sessions), into a second store. The two stores' message ids are
   compared session by session: an import stores what the gateway would have stored.
3. **Questions.** Each store served by a gateway in turn: distilled on demand (the extractive
   observer), indexed by the gateway's own indexer, then asked the folder's questions through
   the model's ``recall`` tool and scored (``real_sessions.ask`` and ``report``).

Run by hand::

    python benchmarks/import_history.py --data SESSIONS_DIR
    python benchmarks/import_history.py --data DIR --no-replay        # the import only (seconds)
    python benchmarks/import_history.py --data DIR --config '{"embedding": {"index": false}}'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from real_sessions import Responder, ask, replay, report, wait_until_indexed
from transcripts import Question, Session, load_questions, load_sessions, supported

from lore_core.gateway import Gateway
from lore_core.plugins import bootstrap
from lore_core.storage.history_import import ImportReport, ProgressBar, import_history, summary
from lore_core.storage.records import normal_project
from lore_core.storage.writer import choose_store
from lore_core.testing.fake_upstream import FakeUpstream
from lore_core.testing.server import ThreadedServer

#: The harnesses whose readers take the folder's files (Claude Code's and Codex's).
HARNESSES = ("claude", "codex")


def _env(workdir: Path, fake_url: str = "http://127.0.0.1:9") -> dict[str, str]:
    return {
        **os.environ,
        "HOME": str(workdir / "home"),
        "LORE_CONFIG": str(workdir / ".lore.json"),
        "LORE_UPSTREAM_ANTHROPIC": fake_url,
        "LORE_UPSTREAM_OPENAI": fake_url,
    }


def _configure(workdir: Path, extra: dict[str, Any]) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "store": {"backend": "duckdb", "path": str(workdir / "store")},
        "distill": {"observer": "extractive"},
    }
    for key, value in extra.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    (workdir / ".lore.json").write_text(json.dumps(config))


# ---------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------


def run_import(workdir: Path, folder: Path, skip_done: bool = True, bar: bool = True) -> list[ImportReport]:
    """One import of ``folder`` by each harness into the store of ``workdir``."""
    boot = bootstrap(env=_env(workdir), cwd=workdir)
    store = choose_store(boot.config, boot.registry.stores)

    async def go() -> list[ImportReport]:
        await store.open()
        try:
            reports = []
            for name in HARNESSES:
                progress = ProgressBar(interval=5.0) if bar else None
                found = await import_history(
                    boot.registry.harnesses[name],
                    boot.registry.codecs,
                    store,
                    root=folder,
                    skip_done=skip_done,
                    progress=progress,
                )
                if progress is not None:
                    progress.finish(found)
                reports.append(found)
            return reports
        finally:
            await store.close()

    return asyncio.run(go())


def imported_sessions(workdir: Path, folder: Path) -> dict[str, tuple[str, str]]:
    """File name (the folder's session id) -> (session id, project) as the import files it."""
    boot = bootstrap(env=_env(workdir), cwd=workdir)
    out: dict[str, tuple[str, str]] = {}
    for name in HARNESSES:
        harness = boot.registry.harnesses[name]
        for source in harness.history_sources(folder):
            for session in harness.read_history(source):
                stem = Path(source.key).name.split(".", 1)[0]
                out[stem] = (session.id, normal_project(session.project) or "")
    return out


def stored_ids(workdir: Path, session_ids: list[str]) -> dict[str, set[str]]:
    boot = bootstrap(env=_env(workdir), cwd=workdir)
    store = choose_store(boot.config, boot.registry.stores)

    async def go() -> dict[str, set[str]]:
        await store.open()
        try:
            return {sid: {m.id for m in await store.session_messages(sid)} for sid in session_ids}
        finally:
            await store.close()

    return asyncio.run(go())


# ---------------------------------------------------------------------------------------------
# A gateway on a store: (replay), distil, index, ask
# ---------------------------------------------------------------------------------------------


def serve_and_ask(
    workdir: Path,
    questions: list[Question],
    by_id: dict[str, Session],
    to_replay: list[Session] | None,
    every: int,
) -> Responder:
    responder = Responder()
    with FakeUpstream() as fake:
        fake.responder = responder
        server = ThreadedServer(Gateway.load(env=_env(workdir, fake.url), cwd=workdir)).start()
        try:
            if to_replay is not None:
                started = time.perf_counter()
                count = replay(server.url, to_replay, responder, every)
                print(f"  replay: {count} requests in {time.perf_counter() - started:.0f} s")
            auth = {"authorization": f"Bearer {server.gateway.tokens.current()}"}
            started = time.perf_counter()
            distilled = httpx.post(server.url + "/lore/api/distill", headers=auth, timeout=3600)
            print(f"  distill: HTTP {distilled.status_code} in {time.perf_counter() - started:.0f} s")
            started = time.perf_counter()
            wait_until_indexed(server)
            print(f"  indexing: {time.perf_counter() - started:.0f} s")
            stats = server.call(server.gateway.store.stats(), timeout=60)
            print(f"  store: {stats.get('sessions')} sessions, {stats.get('messages')} messages")
            ask(server.url, questions, by_id, responder)
        finally:
            server.stop()
    return responder


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def _title(data: Path) -> str:
    readme = data / "README.md"
    if readme.exists():
        for line in readme.read_text(encoding="utf-8").splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    return data.name


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a folder of real sessions with questions")
    parser.add_argument("--every", type=int, default=150, help="items between two replayed requests")
    parser.add_argument("--no-replay", action="store_true", help="measure the import only")
    parser.add_argument("--config", default="{}", help="extra .lore.json for both gateways (JSON)")
    parser.add_argument("--keep", type=Path, help="keep both stores under this directory")
    parser.add_argument("--dump", type=Path, help="write each question's two tool results to this JSONL file")
    args = parser.parse_args()

    folder = args.data / "sessions"
    questions = load_questions(args.data)
    sessions = load_sessions(args.data)
    files = [p for p in folder.iterdir() if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    print(f"data: {args.data} ({_title(args.data)}): {len(files)} session files, {size / 1e6:.1f} MB gzip")
    print(f"      {len(sessions)} sessions with questions, {len(questions)} questions")
    base = args.keep or Path(tempfile.mkdtemp(prefix="lore-import-"))
    extra = json.loads(args.config)
    imported_dir, replayed_dir = base / "imported", base / "replayed"
    for workdir in (imported_dir, replayed_dir):
        shutil.rmtree(workdir, ignore_errors=True)
        _configure(workdir, extra)

    # 1. The import, then a second run, then every file read again.
    print("import (lore import --from claude-code / codex --path <data>/sessions):")
    started = time.perf_counter()
    first = run_import(imported_dir, folder)
    seconds = time.perf_counter() - started
    for found in first:
        print("  " + summary(found).replace("\n", "\n  "))
    sessions_in = sum(r.new_sessions for r in first)
    read = sum(r.messages for r in first)
    added = sum(r.added for r in first)
    spent = sum(r.seconds for r in first)
    print(
        f"  total: {sessions_in} sessions, {added:,} messages stored ({read:,} read) in {spent:.1f} s: "
        f"{read / spent:,.0f} messages/s, {size / 1e6 / spent:.2f} MB/s of gzip "
        f"({seconds:.1f} s with opening and closing the store)"
    )
    second = run_import(imported_dir, folder, bar=False)
    unchanged = " + ".join(str(r.done_before) for r in second)
    print(
        f"second run: {sum(r.read for r in second)} sources read ({unchanged} imported before and "
        f"unchanged), {sum(r.new_sessions for r in second)} sessions and {sum(r.added for r in second)} "
        f"messages added, {sum(r.seconds for r in second):.2f} s"
    )
    third = run_import(imported_dir, folder, skip_done=False, bar=False)
    print(
        f"every file read again: {sum(r.messages for r in third):,} messages read, "
        f"{sum(r.new_sessions for r in third)} sessions and {sum(r.added for r in third)} messages added, "
        f"{sum(r.seconds for r in third):.1f} s"
    )
    if args.no_replay:
        return

    # The replay files each session as the import did: same session id, same project.
    found_sessions = imported_sessions(imported_dir, folder)
    by_id = {s.id: s for s in sessions}
    for session in sessions:
        session.id, session.source_project = found_sessions[session.id]
    print("replay (real_sessions.py's, under the same session ids and projects):")
    replayed = serve_and_ask(replayed_dir, questions, by_id, sessions, args.every)
    print("after the import: the gateway distils, indexes and answers:")
    answers = serve_and_ask(imported_dir, questions, by_id, None, args.every)

    ids = [s.id for s in sessions]
    a, b = stored_ids(imported_dir, ids), stored_ids(replayed_dir, ids)
    both = sum(len(a[s] & b[s]) for s in ids)
    print(
        f"message ids, session by session: {both:,} in both stores, {sum(len(a[s] - b[s]) for s in ids):,} "
        f"only imported, {sum(len(b[s] - a[s]) for s in ids):,} only replayed"
    )

    print(f"questions through the recall tool ({args.data.name}), after the replay:")
    after_replay = report(questions, replayed)
    print(f"questions through the recall tool ({args.data.name}), after the import:")
    after_import = report(questions, answers)
    print(
        f"supported: import {after_import['supported']}/{after_import['questions']}, "
        f"replay {after_replay['supported']}/{after_replay['questions']}"
    )
    differ = [
        q.id
        for q in questions
        if supported(answers.results.get(q.id, ""), q.key_facts)
        != supported(replayed.results.get(q.id, ""), q.key_facts)
    ]
    print(f"questions answered by one store only: {', '.join(differ) or 'none'}")
    if args.dump:
        with open(args.dump, "w", encoding="utf-8") as f:
            for q in questions:
                row: dict[str, Any] = {"id": q.id, "kind": q.kind, "key_facts": q.key_facts}
                for name, store_answers in (("import", answers), ("replay", replayed)):
                    text = store_answers.results.get(q.id, "")
                    row[name] = {"ok": supported(text, q.key_facts), "result": text}
                f.write(json.dumps(row) + "\n")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
