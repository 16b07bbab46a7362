"""Importing a client's own history (``lore import --from NAME``): the transcripts Claude Code,
Codex or OpenCode keep on this machine become sessions of the store, as if they had gone
through the gateway.

The harness plugin reads its client's format (:meth:`~lore_core.interfaces.Harness.history_sources`,
:meth:`~lore_core.interfaces.Harness.read_history`) and hands over each session as request
bodies of the wire API the client speaks, one per context window. This module parses them
with that API's codec and turns each into records with
:func:`~lore_core.storage.convert.records_from_exchange`, exactly as a proxied request of the
session: the same blocks, masking, titles, and message ids from the same hash chain. So:

* a second import stores nothing (the store skips ids it holds), and a later request of the
  client resending that history through the gateway stores nothing twice;
* each message keeps the time the transcript gives it, and the session its first and last;
* a session that went through the gateway with ``/lore:amnesia`` on keeps those stretches out,
  as every resend of its history does (:mod:`lore_core.storage.amnesia`);
* nothing here indexes or distils: the gateway's background work does that (its indexer
  embeds whatever is not embedded yet; its scheduler distils the sessions it resumes, and
  ``lore distill`` all of them).

**Resuming.** Each source (a transcript file, one session of a database) that was written gets
a done marker, its size and modification time, in the store's own session state (under the
pseudo-session :data:`MARKERS`), written after its records: the store is the truth, so an
emptied store imports everything again, and a run stopped half-way skips what was finished
and reads the rest. A source that changed since (a session that went on) is read again; its
messages already stored are skipped by id.

**One writer.** The import writes the store directly, so it needs the store to itself: with a
gateway running on it (DuckDB lets one process hold the file), ``lore import --from`` refuses
and says to stop the gateway first (:mod:`lore_core.cli.commands`).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import attrs

from lore_core.interfaces import Codec, Harness, HistorySource, ImportedSession, Store
from lore_core.model import Exchange, Message
from lore_core.projects import project_root
from lore_core.storage.amnesia import Amnesia, Range
from lore_core.storage.convert import records_from_exchange
from lore_core.storage.forget import drop_forgotten
from lore_core.storage.records import WriteBatch, normal_project

#: The pseudo-session whose state holds the done markers (key ``<harness>:<source key>``).
#: Not a session of any client: no client sends this id.
MARKERS = "lore:history-import"
#: Messages gathered before one write (one transaction): large enough that a write's fixed
#: cost does not matter, small enough that a stopped run loses little work.
BATCH_MESSAGES = 5_000
#: ... or this many seconds since the last write, so markers follow a slow import closely.
BATCH_SECONDS = 5.0


class HistoryImportError(Exception):
    """The import cannot start (an unknown client, no history to read); one line for the user."""


@attrs.define
class ImportReport:
    """What an import did (and, while it runs, what it has done so far)."""

    harness: str
    root: str
    dry_run: bool = False
    #: Sources found, skipped as imported before (unchanged), skipped by ``since`` without
    #: reading, read (or failed) so far.
    sources: int = 0
    done_before: int = 0
    too_old: int = 0
    read: int = 0
    #: Bytes of the sources to read, and of those read so far (the progress bar and ETA).
    bytes_total: int = 0
    bytes_read: int = 0
    #: Sessions read and kept by the filters; new to the store; left out by the filters.
    sessions: int = 0
    new_sessions: int = 0
    filtered: int = 0
    #: Messages read (as the store counts them: a Responses turn's items are one); new to
    #: the store (0 on a dry run).
    messages: int = 0
    added: int = 0
    #: ``"<source>: <reason>"`` for each source that could not be read.
    failed: list[str] = attrs.field(factory=list)
    started: float = attrs.field(factory=time.monotonic)
    seconds: float = 0.0

    def elapsed(self) -> float:
        return self.seconds or (time.monotonic() - self.started)

    def as_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out.pop("started")
        out["seconds"] = round(self.elapsed(), 3)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], finished: bool) -> ImportReport:
        """The report :meth:`as_json` gave (a gateway's import, polled by ``lore import``):
        its elapsed time runs on here until it is ``finished``."""
        fields = {f.name for f in attrs.fields(cls)} - {"started", "seconds"}
        report = cls(**{k: v for k, v in data.items() if k in fields})
        report.started = time.monotonic() - float(data.get("seconds") or 0.0)
        if finished:
            report.seconds = float(data.get("seconds") or 0.0)
        return report


#: Called after each source with the report so far (the progress bar).
Progress = Callable[[ImportReport], None]


# ---------------------------------------------------------------------------------------------
# Which harness
# ---------------------------------------------------------------------------------------------


def _slug(name: str) -> str:
    return "-".join(name.lower().replace("_", " ").split())


def harness_for(harnesses: Mapping[str, Harness], name: str) -> Harness:
    """The harness ``name`` names: its name (``claude``) or its display name in lower case
    with dashes (``claude-code``, ``codex-cli``)."""
    wanted = _slug(name)
    for harness in harnesses.values():
        if wanted in (_slug(harness.name), _slug(harness.display_name)):
            return harness
    readable = sorted(h.name for h in harnesses.values() if h.history_root() is not None)
    hint = (
        f"clients with a history to import: {', '.join(readable)}"
        if readable
        else "no installed harness reads one"
    )
    raise HistoryImportError(f"no client named {name!r} ({hint})")


# ---------------------------------------------------------------------------------------------
# A session -> records
# ---------------------------------------------------------------------------------------------


def _logical_times(messages: Sequence[Message], times: Sequence[float]) -> list[float]:
    """The time of each message as :func:`~lore_core.storage.identity.logical_messages` counts
    them (role-less items left out, consecutive assistant items one message, timed by the
    first): codecs parse one message per wire message or item, so ``times`` lines up."""
    out: list[float] = []
    previous = ""
    for index, message in enumerate(messages):
        if not message.role:
            continue
        at = times[index] if index < len(times) else 0.0
        if message.role == "assistant" and previous == "assistant":
            if not out[-1]:
                out[-1] = at
        else:
            out.append(at)
        previous = message.role
    return out


def _filled(times: list[float], fallback: float) -> list[float]:
    """Unknown (0) times take the previous known one (the first known for a leading run), or
    ``fallback`` when none is known: every stored message gets a time."""
    known = next((t for t in times if t > 0), fallback)
    out = []
    for at in times:
        known = at if at > 0 else known
        out.append(known)
    return out


def session_records(
    session: ImportedSession,
    harness: str,
    codec: Codec,
    fallback_time: float,
    forget: Sequence[Range] = (),
) -> WriteBatch:
    """The records a gateway would have stored for this session had it proxied it: one
    exchange per context window, no answer (the history holds the answers), each message at
    the transcript's time (``fallback_time`` where the transcript gives none). ``forget``:
    the session's ``/lore:amnesia`` ranges, kept out as the writer keeps them out of every
    resend of the history."""
    batch = WriteBatch()
    # Filed as the gateway files it: its repository root when the directory exists here.
    project = project_root(session.project) if normal_project(session.project) else ""
    path = codec.request_path or (codec.paths[0] if codec.paths else "")
    for window in session.windows:
        view = codec.parse(window.request, b"")
        times = _filled(_logical_times(view.messages, window.times), fallback_time)
        if not times:
            continue
        exchange = Exchange(
            api=codec.api,
            path=path,
            request=view,
            harness=harness,
            session_id=session.id,
            project=project,
            upstream="",
            started_at=min(times),
            finished_at=max(times),
            forget_positions=list(forget),
        )
        records = records_from_exchange(exchange)
        # No answer: every record is a message of the history, ``position`` its index.
        for message in records.messages:
            if message.position < len(times):
                message.created_at = times[message.position]
        batch.extend(records)
    return batch


_AGO = {"h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_since(text: str, now: float | None = None) -> float:
    """``--since``: a date or time (``2026-01-31``, ``2026-01-31T14:00``, local time unless
    it says otherwise), or an age (``12h``, ``30d``, ``2w``), in epoch seconds."""
    value = text.strip()
    unit = _AGO.get(value[-1:].lower())
    if unit is not None and value[:-1].isdigit():
        return (time.time() if now is None else now) - int(value[:-1]) * unit
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(
            f"--since {text!r}: give a date (2026-01-31), a time (2026-01-31T14:00) or an age (30d, 12h, 2w)"
        ) from None


def session_time(session: ImportedSession) -> float:
    """When the session was last active by its transcript (0 when it gives no time)."""
    return max((t for window in session.windows for t in window.times), default=0.0)


def _in_project(project: str, wanted: str) -> bool:
    """``project`` (or the repository root it is filed under) is ``wanted`` or a directory
    under it."""
    normal = normal_project(project) or project
    return any(p == wanted or p.startswith(wanted.rstrip("/") + "/") for p in (normal, project_root(normal)))


# ---------------------------------------------------------------------------------------------
# The import
# ---------------------------------------------------------------------------------------------


def marker_key(harness: str, source: HistorySource) -> str:
    return f"{harness}:{source.key}"


def _marker(source: HistorySource) -> dict[str, Any]:
    return {"size": source.size, "modified": source.modified}


async def import_history(
    harness: Harness,
    codecs: Mapping[str, Codec],
    store: Store | None,
    *,
    root: Path | None = None,
    since: float | None = None,
    project: str | None = None,
    progress: Progress | None = None,
    skip_done: bool = True,
    batch_messages: int = BATCH_MESSAGES,
) -> ImportReport:
    """Import ``harness``'s history under ``root`` (default: its :meth:`history_root`) into
    ``store`` (opened by the caller; ``None``: a dry run that reads and counts only).

    ``since`` (epoch seconds) keeps sessions active since then; ``project`` (an absolute
    directory) keeps sessions of that directory and the directories under it. With
    ``skip_done`` (the default) sources imported before and unchanged since are not read."""
    where = root if root is not None else harness.history_root()
    if where is None:
        raise HistoryImportError(f"{harness.display_name} keeps no history that Lore can read")
    if not where.exists():
        raise HistoryImportError(f"{where} does not exist (is {harness.display_name} used on this machine?)")
    wanted = None
    if project is not None:
        if normal_project(project) is None:
            raise HistoryImportError(f"--project must be an absolute directory, not {project!r}")
        wanted = project_root(project)
    report = ImportReport(harness=harness.name, root=str(where), dry_run=store is None)
    sources = harness.history_sources(where)
    report.sources = len(sources)
    done: dict[str, Any] = {}
    if store is not None and skip_done:
        done = await store.session_state(MARKERS)
    todo: list[HistorySource] = []
    for source in sources:
        if since is not None and source.modified < since:
            report.too_old += 1  # nothing in it is newer than its last change
        elif done.get(marker_key(harness.name, source)) == _marker(source):
            report.done_before += 1
        else:
            todo.append(source)
    report.bytes_total = sum(s.size for s in todo)

    amnesia = Amnesia(store) if store is not None else None
    pending = WriteBatch()
    finished: list[HistorySource] = []  # read, their records in ``pending``
    last_write = time.monotonic()

    async def write() -> None:
        nonlocal pending, finished, last_write
        if store is not None and (pending or finished):
            report.new_sessions += await _new_sessions(store, {s.id for s in pending.sessions})
            report.added += await _uninterrupted(store.write(pending)) if pending else 0
            # After the records: a marker never says done for a source whose records are not stored.
            await store.set_states([(MARKERS, marker_key(harness.name, s), _marker(s)) for s in finished])
        pending, finished, last_write = WriteBatch(), [], time.monotonic()

    for source in todo:
        try:
            batch, complete = await _source_records(harness, codecs, source, report, since, wanted, amnesia)
        except Exception as exc:  # one unreadable transcript must not stop months of others
            report.failed.append(f"{source.key}: {type(exc).__name__}: {_one_line(exc)}")
        else:
            pending.extend(batch)
            if complete:
                # Marked done only when every session of it was taken: one a filter left
                # out must be read by a later import without that filter.
                finished.append(source)
        report.read += 1
        report.bytes_read += source.size
        if len(pending.messages) >= batch_messages or time.monotonic() - last_write >= BATCH_SECONDS:
            await write()
        if progress is not None:
            progress(report)
    await write()
    report.seconds = time.monotonic() - report.started
    return report


async def _source_records(
    harness: Harness,
    codecs: Mapping[str, Codec],
    source: HistorySource,
    report: ImportReport,
    since: float | None,
    project: str | None,
    amnesia: Amnesia | None,
) -> tuple[WriteBatch, bool]:
    """The records of one source's sessions that pass the filters (counted in ``report``),
    and whether that was all of them."""
    batch = WriteBatch()
    sessions = 0
    filtered = 0
    messages = 0
    # Reading and converting a transcript is CPU work: in a thread, so that an import inside
    # the gateway (POST /lore/api/import/history) never holds up the proxy's event loop.
    for session in await asyncio.to_thread(lambda: list(harness.read_history(source))):
        last = session_time(session) or source.modified
        if (since is not None and last < since) or (
            project is not None and not _in_project(session.project, project)
        ):
            filtered += 1
            continue
        codec = codecs.get(session.api)
        if codec is None:
            raise HistoryImportError(f"no codec for the {session.api!r} API is installed")
        # A session that went through the gateway with /lore:amnesia on: its ranges hold
        # for an import as for any resend of its history.
        forget = await amnesia.load(session.id) if amnesia is not None else []
        records = await asyncio.to_thread(
            session_records, session, harness.name, codec, source.modified, forget
        )
        if amnesia is not None:
            # A session the user forgot (lore forget) is not brought back by its transcript:
            # the import is one more resend, dropped as the writer drops one.
            records, _ = drop_forgotten(records, amnesia.forgotten)
        if records.messages:
            sessions += 1
            messages += len(records.messages)
            batch.extend(records)
    # Counted once the whole source was read: a failed source counts nothing.
    report.sessions += sessions
    report.filtered += filtered
    report.messages += messages
    return batch, filtered == 0


async def _uninterrupted(write: Coroutine[Any, Any, int]) -> int:
    """Await a store write that a cancellation (Ctrl-C stops ``asyncio.run`` by cancelling
    it) does not cut short: the write runs in the store's thread whatever happens here, and
    the caller closes the store next, which must not happen under a running transaction."""
    task = asyncio.ensure_future(write)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


async def _new_sessions(store: Store, ids: Iterable[str]) -> int:
    new = 0
    for session_id in ids:
        if await store.get_session(session_id) is None:
            new += 1
    return new


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


# ---------------------------------------------------------------------------------------------
# The progress bar
# ---------------------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds + 0.5))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def progress_line(report: ImportReport, width: int = 24) -> str:
    """``claude [#####-------]  42%  120/286 files  9,312 messages  2,410/s  ETA 0:41``: how
    far by bytes read, the rate in messages read per second, the time left at the rate of
    bytes read so far."""
    share = report.bytes_read / report.bytes_total if report.bytes_total else 1.0
    filled = int(width * share)
    elapsed = report.elapsed()
    rate = report.messages / elapsed if elapsed > 0 else 0.0
    todo = report.sources - report.done_before - report.too_old
    line = (
        f"{report.harness} [{'#' * filled}{'-' * (width - filled)}] {100 * share:3.0f}%  "
        f"{report.read}/{todo} sources  {report.messages:,} messages  {rate:,.0f}/s"
    )
    if 0 < report.bytes_read < report.bytes_total:
        line += f"  ETA {_duration(elapsed * (report.bytes_total - report.bytes_read) / report.bytes_read)}"
    elif report.bytes_read >= report.bytes_total:
        line += f"  in {_duration(elapsed)}"
    return line


class ProgressBar:
    """Draws :func:`progress_line` on a terminal (redrawn in place, at most ten times a
    second), or writes it every ``interval`` seconds to anything else (a log keeps a few
    lines, not thousands)."""

    def __init__(self, stream: TextIO | None = None, interval: float = 10.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.interval = 0.1 if self.tty else interval
        self._last = 0.0

    def __call__(self, report: ImportReport) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        self._draw(report)

    def finish(self, report: ImportReport) -> None:
        """The last state, always drawn, and the line ended."""
        self._draw(report)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self, report: ImportReport) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K" + progress_line(report))
        else:
            self.stream.write(progress_line(report) + "\n")
        self.stream.flush()


def summary(report: ImportReport) -> str:
    """The result in one or two lines, for people."""
    if report.dry_run:
        head = (
            f"{report.harness}: dry run, {report.sessions:,} sessions and {report.messages:,} messages "
            f"in {report.read:,} sources (nothing written)"
        )
    else:
        head = (
            f"{report.harness}: {report.new_sessions:,} new sessions, {report.added:,} new messages "
            f"({report.sessions:,} sessions and {report.messages:,} messages read "
            f"from {report.read:,} sources)"
        )
    seconds = report.elapsed()
    rate = report.messages / seconds if seconds > 0 else 0.0
    notes = [f"{seconds:.1f} s, {rate:,.0f} messages/s"]
    if report.done_before:
        notes.append(f"{report.done_before:,} sources imported before and unchanged")
    if report.too_old:
        notes.append(f"{report.too_old:,} sources unchanged since --since")
    if report.filtered:
        notes.append(f"{report.filtered:,} sessions left out by --since/--project")
    if report.failed:
        notes.append(f"{len(report.failed)} sources could not be read")
    return head + "\n  " + "; ".join(notes)
