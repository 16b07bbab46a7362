"""Which project a directory belongs to: the repository root it sits in.

A client reports the directory it runs in (a harness finds it in the prompt, an SDK names it
in ``X-Lore-Project``, the CLI takes ``--project`` or the current directory), and that may
be any subdirectory of a repository. Memory is filed per project, so every one of those is
mapped to the same root: the nearest directory, walking up, that holds ``.git`` (a
directory, or a file in a worktree or submodule), ``.lore.md`` or ``.lore.json``.
"""

from __future__ import annotations

import functools
import os

from lore_core.storage.records import normal_project

#: What marks a project's root directory.
ROOT_MARKERS = (".git", ".lore.md", ".lore.json")


def project_root(path: str) -> str:
    """The project ``path`` belongs to: for an absolute directory that exists on this
    machine, the nearest directory at or above it holding one of :data:`ROOT_MARKERS`,
    looked for below the user's home directory and the filesystem root only (a dotfiles
    repository in ``$HOME`` does not swallow every project), else ``path`` itself. A path
    that does not exist here (a transcript from another machine, a remote client) is kept
    as given. Normalised either way (:func:`normal_project`); a value that is not an absolute
    path is returned unchanged.

    Cached (it runs on every request): a marker created after a directory was first seen
    does not move that directory's project while the process lives."""
    return _root(path, os.environ.get("HOME") or os.path.expanduser("~"))


@functools.lru_cache(maxsize=4096)
def _root(given: str, home: str) -> str:
    path = normal_project(given)
    if path is None:
        return given
    try:
        if not os.path.isdir(path):
            return path
        stops = {"/", normal_project(home) or "/"}
        here = path
        while here not in stops:
            if any(os.path.lexists(os.path.join(here, marker)) for marker in ROOT_MARKERS):
                return here
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
    except OSError:  # a directory we may not read: the path as given
        pass
    return path


def forget_roots() -> None:
    """Drop the cached roots (after markers were created or removed, as tests do)."""
    _root.cache_clear()


def cli_project(value: str | None, cwd: str | None = None) -> str:
    """A ``--project`` option as the gateway files it: relative to ``cwd`` (the current
    directory) when relative, ``~`` expanded, trailing slashes and ``.``/``..`` resolved,
    mapped to its repository root; the current directory's project when ``value`` is empty."""
    base = cwd if cwd is not None else os.getcwd()
    raw = os.path.expanduser(value) if value else base
    return project_root(os.path.join(base, raw))
