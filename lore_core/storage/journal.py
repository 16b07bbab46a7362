"""The store's write-ahead journal: what clients were answered, until the store has it.

The store writer batches writes (``store.flushIntervalMs``), so an exchange whose response
the client already has can wait in memory for a moment; a ``kill -9`` (or a crash, an OOM
kill) in that moment would lose it. So the writer appends each finished exchange's records
here when it is submitted, which is before the client has the end of its response (see
``pipeline/relay.py``: a stream's terminal event is relayed only after its exchange finished), and
replays the journal into the store at the next start. Segments whose records the store has
committed are deleted.

Layout: a directory of segment files ``<number>.log``; the newest takes appends. Each
record is a frame: ``b"LJ1 "``, the payload's length and CRC-32 (little-endian u32 each),
then the payload (JSON of one :class:`~lore_core.storage.records.WriteBatch`). A frame cut short by a
crash, or one that does not check out, ends its segment's replay (counted and logged).

Appends go to the operating system's page cache, which survives the process: without
``store.fsync`` a process crash loses nothing, a power loss can lose the last moments. With
it each append is flushed to the disk before the response completes (a few milliseconds on
most disks).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import attrs
import orjson

from lore_core.storage.records import Project, Session, StoredMessage, WriteBatch

log = logging.getLogger("lore.journal")

MAGIC = b"LJ1 "
_HEADER = struct.Struct("<4sII")
SUFFIX = ".log"
LOCK_FILE = "lock"


class JournalError(RuntimeError):
    """The journal directory cannot be used; the message says which and why."""


# Written out: ``attrs.asdict`` took longer than the encoding itself.
_PROJECT_FIELDS = tuple(f.name for f in attrs.fields(Project))
_SESSION_FIELDS = tuple(f.name for f in attrs.fields(Session))
_MESSAGE_FIELDS = tuple(f.name for f in attrs.fields(StoredMessage))


def _as_dict(record: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(record, name) for name in fields}


def encode(batch: WriteBatch) -> bytes:
    """One frame. Runs on the request path for every exchange: ``orjson`` takes ~1.5 us
    where ``json.dumps`` took ~16 (a small exchange). What orjson refuses (an integer past
    64 bits, a lone surrogate in a tool's input) is written by ``json``, escaped as ASCII;
    both read back with :func:`decode`."""
    data = {
        "projects": [_as_dict(p, _PROJECT_FIELDS) for p in batch.projects],
        "sessions": [_as_dict(s, _SESSION_FIELDS) for s in batch.sessions],
        "messages": [_as_dict(m, _MESSAGE_FIELDS) for m in batch.messages],
    }
    try:
        payload = orjson.dumps(data)
    except TypeError:  # orjson.JSONEncodeError
        payload = json.dumps(data, separators=(",", ":")).encode("ascii")
    return _HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def decode(payload: bytes) -> WriteBatch:
    # ``json``, not orjson: read once at start-up, and it takes every frame either wrote.
    data: dict[str, Any] = json.loads(payload)
    return WriteBatch(
        projects=[Project(**p) for p in data.get("projects", [])],
        sessions=[Session(**s) for s in data.get("sessions", [])],
        messages=[StoredMessage(**m) for m in data.get("messages", [])],
    )


def read_segment(path: Path) -> tuple[list[WriteBatch], int]:
    """The batches of one segment, and how many bytes at its end could not be read."""
    data = path.read_bytes()
    batches: list[WriteBatch] = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        magic, length, crc = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        payload = data[start : start + length]
        if magic != MAGIC or len(payload) < length or zlib.crc32(payload) != crc:
            break
        try:
            batches.append(decode(payload))
        except (ValueError, TypeError) as exc:
            log.error("journal %s: a record at byte %d cannot be read (%s); skipped", path, offset, exc)
        offset = start + length
    return batches, len(data) - offset


class Journal:
    """Append-only segments of records acknowledged to clients and not yet committed.

    Not thread-safe: the store writer uses it from the event loop only.
    """

    def __init__(self, directory: Path, fsync: bool = False) -> None:
        self.directory = directory
        self.fsync = fsync
        self._fd: int | None = None
        self._opened = False
        self._lock_fd: int | None = None
        self._segment = 0
        self.stats: dict[str, int] = {
            "appended": 0,
            "replayed_batches": 0,
            "torn_bytes": 0,
            "segment_bytes": 0,
        }

    def _segments(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            try:
                found.append((int(path.stem), path))
            except ValueError:
                continue
        return sorted(found)

    def open(self) -> list[WriteBatch]:
        """Read what earlier runs left (to replay), and start a new segment for appends.
        One gateway at a time: a second one on the same store gets a :class:`JournalError`."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            reason = exc.strerror or exc
            raise JournalError(f"cannot use the journal directory {self.directory}: {reason}") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise JournalError(f"another gateway is using the journal {self.directory}") from None
        segments = self._segments()
        batches: list[WriteBatch] = []
        for _, path in segments:
            try:
                found, torn = read_segment(path)
            except OSError as exc:
                log.error("journal %s cannot be read: %s", path, exc.strerror or exc)
                continue
            batches += found
            if torn:
                self.stats["torn_bytes"] += torn
                log.warning("journal %s: %d bytes at its end were cut short by a crash; ignored", path, torn)
        self.stats["replayed_batches"] = len(batches)
        self._segment = segments[-1][0] if segments else 0
        self._opened = True
        self._start_segment()
        return batches

    def _start_segment(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._segment += 1
        path = self.directory / f"{self._segment:08d}{SUFFIX}"
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            self._fd = None
            raise JournalError(f"cannot create the journal segment {path}: {exc.strerror or exc}") from None
        self.stats["segment_bytes"] = 0

    def append(self, batch: WriteBatch) -> None:
        """Append one batch (one ``write`` call; flushed to disk with ``fsync``). A failed
        append (disk full, say) leaves no part of its frame behind: frames appended after it,
        once the disk has room again, must not sit behind a torn one that ends the replay."""
        if self._fd is None:
            if not self._opened:
                raise JournalError("the journal is not open")
            self._start_segment()  # the last one could not be created or was given up
        assert self._fd is not None
        frame = encode(batch)
        try:
            written = 0
            while written < len(frame):
                written += os.write(self._fd, frame[written:])
            if self.fsync:
                os.fsync(self._fd)
        except OSError:
            self._cut_back()
            raise
        self.stats["appended"] += 1
        self.stats["segment_bytes"] += len(frame)

    def _cut_back(self) -> None:
        """Undo a failed append: truncate the segment to its last whole frame, or, when even
        that fails, leave the segment (its replay stops at the torn frame, after every whole
        one) and append to a new one from the next append on."""
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, self.stats["segment_bytes"])
        except OSError:
            os.close(self._fd)
            self._fd = None

    def seal(self) -> int:
        """End the current segment (the next append starts a fresh one); returns its number.
        :meth:`release` deletes it once everything in it is committed."""
        sealed = self._segment
        if self.stats["segment_bytes"]:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self.stats["segment_bytes"] = 0
        else:
            sealed -= 1  # the current segment is empty: nothing to seal
        return sealed

    def release(self, upto: int) -> None:
        """Delete the segments numbered ``upto`` and below: the store has their records."""
        for number, path in self._segments():
            if number > upto or (number == self._segment and self._fd is not None):
                continue  # the segment still taking appends
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.error("journal segment %s could not be deleted: %s", path, exc.strerror or exc)

    def close(self, committed: bool) -> None:
        """Stop appending; ``committed``: the store has every record, delete every segment
        (else they stay for the next start to replay)."""
        self._opened = False
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if committed:
            self.release(self._segment)
            (self.directory / f"{self._segment:08d}{SUFFIX}").unlink(missing_ok=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None

    def health(self) -> dict[str, Any]:
        return {"path": str(self.directory), "fsync": self.fsync, "segment": self._segment, **self.stats}
