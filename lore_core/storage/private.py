"""Files only for their owner: what Lore writes (the store and its WAL, the ``.fts``/``.vec``
indexes, the journal, the gateway token, logs, exports) is readable by the user who runs it
and by nobody else, whatever the umask of the shell that started it.

The store holds every prompt and answer of a developer's sessions. On the usual umask
(0o022) every file a process creates is world-readable, so any other account on the machine
could read them all. Two mechanisms:

* :func:`restrict_umask` sets the process umask to 0o077, once, at the start of every
  ``lore`` command (:func:`lore_core.cli.commands.main`, which ``lore serve`` and the gateway
  ``lore run`` starts go through). A umask, not a chmod after the fact, because DuckDB and
  LanceDB create files themselves, at any time, from their own threads (the WAL at a write,
  a temp file when a query spills, a LanceDB fragment, manifest or index file at each
  append): only the umask reaches what the process does not create itself. A program Lore
  starts for the user (the coding client of ``lore run``) gets the user's own umask back
  (:func:`users_umask`): the files it writes are the user's business.
* :func:`private_directory` makes the data directory 0700 at the gateway's start and takes
  the group and other bits off everything under it (:func:`tighten`), so a store made before
  (or by a process with a looser umask) is tightened, with one log line saying how many
  entries were. The DuckDB store does the same with its own files when they live elsewhere
  (``store.path``): it never touches the directory they sit in, which is the user's.

Symbolic links are neither followed nor changed: nothing outside the directory is touched.
On Windows nothing here applies (POSIX modes are not how it grants access).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

log = logging.getLogger("lore.private")

#: The umask of every Lore process: nothing it creates is readable by group or others.
OWNER_ONLY_UMASK = 0o077
#: The permission bits Lore takes off what it finds: group and others, read write and execute.
GROUP_AND_OTHER = 0o077

#: The umask the process had before :func:`restrict_umask` (``None`` until it is called).
_user_umask: int | None = None


def restrict_umask() -> None:
    """Make everything the process creates from now on owner-only (umask 0o077). Idempotent;
    the umask it replaced is kept for :func:`users_umask`."""
    global _user_umask
    previous = os.umask(OWNER_ONLY_UMASK)
    if _user_umask is None:
        _user_umask = previous


@contextlib.contextmanager
def users_umask() -> Iterator[None]:
    """The user's own umask back for the duration: around starting a program of theirs (it
    inherits the umask), so its files are as they would be without Lore. Nothing changes when
    :func:`restrict_umask` was not called."""
    if _user_umask is None:
        yield
        return
    os.umask(_user_umask)
    try:
        yield
    finally:
        os.umask(OWNER_ONLY_UMASK)


def private_directory(directory: Path) -> int:
    """Create ``directory`` (mode 0700), or make an existing one owner-only together with
    everything under it (:func:`tighten`, logged). How many entries were tightened. Raises
    :class:`OSError` when the directory cannot be created."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return tighten([directory], directory)


def tighten(paths: Iterable[Path], where: Path) -> int:
    """Take the group and other bits off each of ``paths`` that exists and, for a directory,
    off everything under it (files become 0600 and directories 0700 when they were 0644 and
    0755). Only what the process's user owns is changed; symbolic links are skipped, never
    followed; an entry that cannot be changed is left as it is (logged at debug level).
    When anything changed, one line names ``where`` and the count. How many entries changed."""
    if os.name != "posix":  # pragma: no cover - Windows
        return 0
    uid = os.geteuid()
    changed = 0
    pending: list[str] = []
    for path in paths:
        try:
            # The root itself may be a link (a data directory moved to another disk): its
            # target is the directory; links under it are never followed.
            st = os.stat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.debug("cannot read the permissions of %s: %s", path, exc)
            continue
        changed += _tighten_one(str(path), st, uid)
        if stat.S_ISDIR(st.st_mode):
            pending.append(str(path))
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as scan:
                entries = list(scan)
        except OSError as exc:
            log.debug("cannot list %s: %s", directory, exc)
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISLNK(st.st_mode):
                continue
            changed += _tighten_one(entry.path, st, uid)
            if stat.S_ISDIR(st.st_mode):
                pending.append(entry.path)
    if changed:
        log.warning(
            "tightened the permissions of %d files and directories in %s to owner-only "
            "(group and other access removed)",
            changed,
            where,
        )
    return changed


def _tighten_one(path: str, st: os.stat_result, uid: int) -> int:
    mode = stat.S_IMODE(st.st_mode)
    if not mode & GROUP_AND_OTHER or st.st_uid != uid:
        return 0
    try:
        os.chmod(path, mode & ~GROUP_AND_OTHER)
    except OSError as exc:
        log.debug("cannot tighten the permissions of %s: %s", path, exc)
        return 0
    return 1
