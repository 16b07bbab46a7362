"""``.lore.md``: a project's curated knowledge as Markdown at the repository root, so that a
change to what Lore knows shows up as a diff in a pull request (docs/knowledge.md)::

    # Project knowledge

    <!-- Curated by Lore. Edit freely: ... -->

    ## Decisions

    <!-- lore:3f2a9c1d8e7b6a50 -->
    ### Use DuckDB for the store

    We keep DuckDB, not SQLite, because ...

    ## Patterns

    ## Preferences
    ...

:func:`render` is deterministic byte for byte: the five category headings always, in the
fixed order of :data:`~lore_core.storage.knowledge.CATEGORIES` (so the first entry of a
category is still a one-entry diff); entries within a category in
:func:`~lore_core.storage.knowledge.canonical_order`; each preceded by its marker
``<!-- lore:<logical_id> -->`` (``<!-- lore:<logical_id> sensitive -->`` for a sensitive
entry); exactly one blank line between blocks; one final newline. A content line that would
read as structure (``#`` after at most three spaces, or ``<!--`` ``lore:`` anywhere) gets a
backslash after its indentation (``\\# not a heading``); a line already made of backslashes
before such text gets one more, and :func:`parse` removes exactly one, so every content
round-trips. Restricted entries are never rendered.

:func:`parse` tolerates CRLF, trailing spaces, tabs, a missing final newline and a BOM.
Text before the first ``##`` is ignored. ``## X`` selects a category (case-insensitive,
singular or plural). ``### Title`` starts an entry; a marker on the line before it (blank
lines between allowed) gives its id. The content is every line up to the next marker,
``###`` or ``##`` (other heading levels are content), less leading and trailing blank lines.
What cannot be used is reported in ``problems`` with its line, and the rest is kept:

* an entry under an unknown heading, or with no title or no content: skipped;
* a marker with an invalid id (or malformed): the entry is kept **as unmarked**, so importing
  it matches an existing entry by title when only the id was mangled;
* a second marker with an id already used: that entry is kept as unmarked (a copied block
  whose title was changed becomes a new entry);
* a marker not followed by a title, text outside any entry: ignored.

:func:`import_file` writes through :class:`~lore_core.knowledge.book.KnowledgeBook`, so its
refusals apply (death certificates, secrets, validation). It never deletes: an entry absent
from the file is kept. :func:`export` writes atomically and only when the text changed, so a
watcher importing on change does not loop (export after import is a no-op the second time).
"""

from __future__ import annotations

import calendar
import errno
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from lore_core.knowledge.book import (
    CREATED,
    REFUSED,
    UNCHANGED,
    UPDATED,
    KnowledgeBook,
    Provenance,
    WriteResult,
)
from lore_core.knowledge.teams import TeamView
from lore_core.storage.knowledge import (
    AUTHOR_IMPORT,
    CATEGORIES,
    DECISIONS,
    KnowledgeDecision,
    KnowledgeVersion,
    category_rank,
    decision_micros,
    make_decision,
    normalize_title,
    valid_logical_id,
)
from lore_core.storage.masking import mask_secrets

log = logging.getLogger("lore.knowledge")

#: The file's name at the repository root, and the ``source_ref`` of versions it wrote.
FILE_NAME = ".lore.md"

HEADINGS = {
    "decision": "Decisions",
    "pattern": "Patterns",
    "preference": "Preferences",
    "architecture": "Architecture",
    "gotcha": "Gotchas",
}
TITLE = "# Project knowledge"
PREAMBLE = (
    "<!-- Curated by Lore. Edit freely: `lore import` (or the running gateway, when this file "
    "changes) reads your edits back. Keep each entry's lore: marker; an entry without one is "
    "created as new. -->"
)
SENSITIVE_FLAG = "sensitive"

# A heading: at most three spaces of indentation (four make code), then hashes. Levels 2
# and 3 are structure, also without the space after the hashes (``##Gotchas``).
_HEADING = re.compile(r"^ {0,3}(#+)[ \t]*(.*?)[ \t]*$")
# A marker line (stripped): ``<!-- lore:<id> [flags] -->``.
_MARKER_START = re.compile(r"^<!--\s*lore:")
_MARKER = re.compile(r"^<!--\s*lore:\s*(?P<body>.*?)\s*-->$")
# What content must not show unescaped: a superset of what the parser reads as structure.
_STRUCTURE_HEADING = re.compile(r"^ {0,3}#")
_STRUCTURE_MARKER = re.compile(r"<!--\s*lore:")
# A content line split as indentation, backslashes, the rest.
_ESCAPABLE = re.compile(r"^( {0,3})(\\*)(.*)$", re.S)


@attrs.define
class ParsedEntry:
    """One entry read from the file."""

    #: The marker's id; ``None`` for an entry without a (valid, first-seen) marker.
    logical_id: str | None
    category: str
    title: str
    content: str
    #: ``normal`` or ``sensitive`` (the marker's flag).
    sensitivity: str = "normal"
    #: 1-based line of the ``###`` title.
    line: int = 0


@attrs.define
class ParsedFile:
    entries: list[ParsedEntry] = attrs.field(factory=list)
    #: The team's approval decision records (``project`` unset: the importer's).
    decisions: list[KnowledgeDecision] = attrs.field(factory=list)
    #: ``"line N: ..."``, one per thing that was skipped or read differently than written.
    problems: list[str] = attrs.field(factory=list)


@attrs.define
class ExportReport:
    path: Path
    #: Entries in the file.
    written: int = 0
    #: Sensitive entries left out (export without ``include_sensitive``).
    skipped_sensitive: int = 0
    #: Restricted entries left out (always).
    skipped_restricted: int = 0
    #: Entries of a team-bound project whose text the team has not let through.
    skipped_unapproved: int = 0
    #: The team the project is bound to (``None``: not bound) and the decision records the
    #: export carries (every entry's, but a restricted or left-out sensitive one's).
    team: str | None = None
    decisions: list[KnowledgeDecision] = attrs.field(factory=list)
    #: Whether the file was (re)written; ``False`` when its text was already this.
    changed: bool = False


@attrs.define
class ImportReport:
    path: Path
    created: list[KnowledgeVersion] = attrs.field(factory=list)
    updated: list[KnowledgeVersion] = attrs.field(factory=list)
    unchanged: list[KnowledgeVersion] = attrs.field(factory=list)
    #: ``(title, reason)`` of each entry the book refused.
    refused: list[tuple[str, str]] = attrs.field(factory=list)
    #: The parser's problems, then notes on entries imported differently than marked.
    problems: list[str] = attrs.field(factory=list)
    #: Team decision records read that this store did not hold yet.
    decisions: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated)

    def record(self, title: str, result: WriteResult) -> None:
        """File one write's outcome under what it did."""
        if result.status == REFUSED:
            self.refused.append((title, result.reason))
        elif result.version is None:
            return
        elif result.status == CREATED:
            self.created.append(result.version)
        elif result.status == UPDATED:
            self.updated.append(result.version)
        elif result.status == UNCHANGED:
            self.unchanged.append(result.version)

    def log_summary(self, name: str, source: Any) -> None:
        if self.changed or self.refused:
            log.info(
                "%s imported (%s): %d created, %d updated, %d unchanged, %d refused",
                name,
                source,
                len(self.created),
                len(self.updated),
                len(self.unchanged),
                len(self.refused),
            )

    def as_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "created": [v.ref for v in self.created],
            "updated": [v.ref for v in self.updated],
            "unchanged": len(self.unchanged),
            # A title the book refused for holding a secret must not be shown in full either.
            "refused": [{"title": mask_secrets(t), "reason": r} for t, r in self.refused],
            "problems": self.problems,
            "decisions": self.decisions,
        }


# -- rendering ------------------------------------------------------------------------------


def render(
    entries: Sequence[KnowledgeVersion | ParsedEntry],
    *,
    project_name: str = "",
    decisions: Sequence[KnowledgeDecision] = (),
) -> str:
    """The text of ``.lore.md`` holding exactly ``entries`` (the caller chooses them: by
    project and sensitivity) and, after them, the team's ``decisions``, one line each.
    ``project_name``, when given, goes into the first heading. Raises :class:`ValueError`
    for an unknown category or a restricted entry."""
    by_category: dict[str, list[KnowledgeVersion | ParsedEntry]] = {c: [] for c in CATEGORIES}
    for entry in entries:
        if entry.category not in by_category:
            raise ValueError(f"unknown category {entry.category!r} ({entry.title!r})")
        if entry.sensitivity == "restricted":
            raise ValueError(f"a restricted entry is never written to {FILE_NAME} ({entry.title!r})")
        by_category[entry.category].append(entry)
    name = " ".join(project_name.split())
    blocks = [f"{TITLE}: {name}" if name else TITLE, PREAMBLE]
    for category in CATEGORIES:
        blocks.append(f"## {HEADINGS[category]}")
        blocks.extend(_render_entry(e) for e in sorted(by_category[category], key=_order))
    if decisions:
        ordered = sorted(
            decisions, key=lambda d: (d.logical_id, decision_micros(d.decided_at), d.decision_id)
        )
        blocks.append("\n".join(render_decision(d) for d in ordered))
    return "\n\n".join(blocks) + "\n"


# A decision record: ``<!-- lore:decision <id> <approved|rejected> <fingerprint> <time> <who> -->``,
# the time in UTC to the microsecond (the record's id is derived from it).
DECISION_WORD = "decision"
_DECISION_TIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{6})Z$")
_FINGERPRINT = re.compile(r"^[0-9a-f]{8,64}$")


def render_decision(decision: KnowledgeDecision) -> str:
    seconds, micros = divmod(decision_micros(decision.decided_at), 1_000_000)
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"
    return (
        f"<!-- lore:{DECISION_WORD} {decision.logical_id} {decision.decision} {decision.fingerprint} "
        f"{at} {decision.decided_by} -->"
    )


def _read_decision(body: str, line: int, problems: list[str]) -> KnowledgeDecision | None:
    words = body.split(maxsplit=5)
    if len(words) == 6:
        _, logical_id, decision, fingerprint, at, by = words
        when = _DECISION_TIME.match(at)
        if (
            valid_logical_id(logical_id)
            and decision in DECISIONS
            and _FINGERPRINT.match(fingerprint)
            and when is not None
            and "--" not in by
        ):
            y, mo, d, h, mi, sec, us = (int(g) for g in when.groups())
            seconds = calendar.timegm((y, mo, d, h, mi, sec, 0, 0, 0))
            return make_decision(logical_id, fingerprint, decision, by, seconds + us / 1_000_000)
    problems.append(f"line {line}: malformed team decision record: ignored")
    return None


def _order(entry: KnowledgeVersion | ParsedEntry) -> tuple[int, str, str]:
    # canonical_order, for parsed entries too (an unmarked one has no id yet).
    return (category_rank(entry.category), normalize_title(entry.title), entry.logical_id or "")


def _render_entry(entry: KnowledgeVersion | ParsedEntry) -> str:
    lines = []
    if entry.logical_id:
        flag = f" {SENSITIVE_FLAG}" if entry.sensitivity == SENSITIVE_FLAG else ""
        lines.append(f"<!-- lore:{entry.logical_id}{flag} -->")
    lines.append(f"### {' '.join(_split_lines(entry.title)).strip()}")
    lines.append("")
    lines.extend(_escape(line) for line in _trim_blank(_split_lines(entry.content)))
    return "\n".join(lines)


def _split_lines(text: str) -> list[str]:
    # Not str.splitlines(): it also splits on form feeds, U+2028 and others, which content may hold.
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _trim_blank(lines: list[str]) -> list[str]:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def _structural(text: str) -> bool:
    return bool(_STRUCTURE_HEADING.match(text) or _STRUCTURE_MARKER.search(text))


def _escape(line: str) -> str:
    indent, slashes, rest = _split_escapable(line)
    return f"{indent}\\{slashes}{rest}" if _structural(indent + rest) else line


def _unescape(line: str) -> str:
    indent, slashes, rest = _split_escapable(line)
    return f"{indent}{slashes[1:]}{rest}" if slashes and _structural(indent + rest) else line


def _split_escapable(line: str) -> tuple[str, str, str]:
    match = _ESCAPABLE.match(line)
    assert match is not None  # the pattern matches every string
    return match.group(1), match.group(2), match.group(3)


# -- parsing --------------------------------------------------------------------------------


def category_of(heading: str) -> str | None:
    """The category a ``##`` heading names (``Decisions``, ``decision``, ``GOTCHAS:``)."""
    name = normalize_title(heading)
    for category in CATEGORIES:
        if name in (category, category + "s", HEADINGS[category].casefold()):
            return category
    return None


@attrs.define
class _Marker:
    line: int
    logical_id: str | None
    sensitive: bool


@attrs.define
class _Draft:
    line: int
    title: str
    marker: _Marker | None
    category: str | None
    heading: str | None
    lines: list[str] = attrs.field(factory=list)


def parse(text: str) -> ParsedFile:
    """The entries of a ``.lore.md`` text, in file order, and what could not be used."""
    out = ParsedFile()
    seen_ids: dict[str, int] = {}
    heading: str | None = None  # the text of the last ``##``; None before the first
    category: str | None = None
    pending: _Marker | None = None
    draft: _Draft | None = None
    stray = False  # inside a run of text outside any entry (reported once)

    def orphan() -> None:
        nonlocal pending
        if pending is not None:
            out.problems.append(f"line {pending.line}: lore marker not followed by an entry title: ignored")
            pending = None

    def finish() -> None:
        nonlocal draft
        if draft is not None:
            _finish(draft, seen_ids, out)
            draft = None

    for number, raw in enumerate(_split_lines(text.removeprefix("\ufeff")), start=1):
        stripped = raw.strip()
        match = _HEADING.match(raw)
        level = len(match.group(1)) if match else 0
        if level == 2 and match:
            finish()
            orphan()
            stray = False
            heading = match.group(2)
            category = category_of(heading)
        elif level == 3 and match:
            finish()
            stray = False
            draft = _Draft(number, match.group(2).strip(), pending, category, heading)
            pending = None
        elif _MARKER_START.match(stripped):
            if heading is None:
                continue
            finish()
            orphan()
            stray = False
            marker = _MARKER.match(stripped)
            if marker is not None and marker.group("body").split(maxsplit=1)[0:1] == [DECISION_WORD]:
                decision = _read_decision(marker.group("body"), number, out.problems)
                if decision is not None:
                    out.decisions.append(decision)
                continue
            pending = _read_marker(stripped, number, out.problems)
        elif draft is not None:
            draft.lines.append(raw)
        elif not stripped:
            stray = False
        elif heading is not None and not stray and not stripped.startswith("<!--"):
            orphan()
            stray = True
            out.problems.append(f"line {number}: text outside an entry (no ### title above it): ignored")
    finish()
    orphan()
    return out


def _read_marker(text: str, line: int, problems: list[str]) -> _Marker:
    match = _MARKER.match(text)
    if match is None:
        problems.append(f"line {line}: malformed lore marker {text!r}: the entry below is read as unmarked")
        return _Marker(line, None, False)
    words = match.group("body").split()
    logical_id = words[0] if words else ""
    flags = words[1:]
    if not valid_logical_id(logical_id) or len(flags) > 1:
        problems.append(
            f"line {line}: lore marker {match.group('body')!r} does not hold a valid id (4-64 lowercase "
            f"letters, digits, - or _; then at most {SENSITIVE_FLAG!r}): the entry below is read as unmarked"
        )
        # The flag still counts: reading an entry as more sensitive than meant is the safe error.
        return _Marker(line, None, SENSITIVE_FLAG in flags)
    if flags and flags[0] != SENSITIVE_FLAG:
        problems.append(f"line {line}: unknown lore marker flag {flags[0]!r}: ignored")
    return _Marker(line, logical_id, SENSITIVE_FLAG in flags)


def _finish(draft: _Draft, seen_ids: dict[str, int], out: ParsedFile) -> None:
    where = f"line {draft.line}"
    if draft.heading is None:
        out.problems.append(f"{where}: entry {draft.title!r} before any ## category heading: skipped")
        return
    if draft.category is None:
        out.problems.append(
            f"{where}: entry {draft.title!r} under unknown heading {draft.heading!r}: skipped "
            f"(headings: {', '.join(HEADINGS.values())})"
        )
        return
    if not draft.title:
        out.problems.append(f"{where}: entry without a title: skipped")
        return
    content = "\n".join(_unescape(line) for line in _trim_blank(draft.lines))
    if not content:
        out.problems.append(f"{where}: entry {draft.title!r} has no content: skipped")
        return
    logical_id = draft.marker.logical_id if draft.marker else None
    if logical_id is not None:
        if logical_id in seen_ids:
            out.problems.append(
                f"{where}: lore marker {logical_id} already used by the entry at line "
                f"{seen_ids[logical_id]}: {draft.title!r} is read as unmarked"
            )
            logical_id = None
        else:
            seen_ids[logical_id] = draft.line
    sensitive = draft.marker is not None and draft.marker.sensitive
    out.entries.append(
        ParsedEntry(
            logical_id=logical_id,
            category=draft.category,
            title=draft.title,
            content=content,
            sensitivity=SENSITIVE_FLAG if sensitive else "normal",
            line=draft.line,
        )
    )


# -- export and import ----------------------------------------------------------------------


async def export(
    book: KnowledgeBook, project: str, path: Path, *, include_sensitive: bool = False
) -> ExportReport:
    """Write the knowledge of ``project`` (its own entries, not global ones) to ``path``.

    Restricted entries are never written; sensitive ones only with ``include_sensitive``.
    The file is replaced atomically (a temporary file in the same directory, then
    :func:`os.replace`), keeping its permissions, and is not touched at all when its text
    is already the one rendered. The first heading carries no project name: the project is
    a directory path here, which differs between clones and would make a diff of its own.
    """
    text, report = await render_project(book, project, include_sensitive=include_sensitive)
    report.path = path
    report.changed = write_if_changed(path, text.encode("utf-8"))
    if report.changed:
        log.info("%s written: %d entries (%s)", FILE_NAME, report.written, path)
    return report


async def render_project(
    book: KnowledgeBook, project: str, *, include_sensitive: bool = False
) -> tuple[str, ExportReport]:
    """The text :func:`export` would write for ``project``, and its report (no path, not
    written): what ``lore export`` prints or writes elsewhere."""
    chosen, report = await exportable(book, project, include_sensitive=include_sensitive)
    return render(chosen, decisions=report.decisions), report


async def exportable(
    book: KnowledgeBook, project: str, *, include_sensitive: bool = False
) -> tuple[list[KnowledgeVersion], ExportReport]:
    """What any export of ``project`` may hold (``.lore.md``, JSON): its own alive entries,
    never a restricted one, a sensitive one only with ``include_sensitive``; and the report
    counting what was left out. Every export format chooses here, so none can differ.

    Of a project bound to a team, each entry is exported as its team sees it
    (:class:`~lore_core.knowledge.teams.TeamView`): the text last let through, or not at all;
    and the report carries the decision records the export shares."""
    report = ExportReport(path=Path(FILE_NAME))
    view = await TeamView.load(book.store, project)
    chosen: list[KnowledgeVersion] = []
    withheld: set[str] = set()
    for entry in await book.entries(project, include_global=False):
        if entry.scope != "project" or entry.project != project or entry.is_deleted:
            continue
        if entry.sensitivity == "restricted":
            report.skipped_restricted += 1
            withheld.add(entry.logical_id)
        elif entry.sensitivity == SENSITIVE_FLAG and not include_sensitive:
            report.skipped_sensitive += 1
            withheld.add(entry.logical_id)
        elif view is None:
            chosen.append(entry)
        elif (shared := (await view.approval(entry)).shared) is not None:
            chosen.append(shared)
        else:
            report.skipped_unapproved += 1
    if view is not None:
        report.team = view.state.team
        report.decisions = [d for d in view.decisions if d.logical_id not in withheld]
    report.written = len(chosen)
    return chosen, report


def unsafe_to_write(path: Path) -> str | None:
    """Why the gateway must not write the ``.lore.md`` at ``path``, or ``None`` (review F16:
    a client names projects, and upkeep wrote wherever one named). Its directory must exist
    and belong to the OS user the gateway runs as (the directory's real owner, through a
    symlinked path too), and the file must not be a symlink: replacing one would change
    what the link's owner set up, writing through it would write elsewhere."""
    directory = path.parent
    try:
        info = os.stat(directory)
    except OSError as exc:
        return f"{directory} cannot be read ({exc.strerror or exc})"
    if not stat.S_ISDIR(info.st_mode):
        return f"{directory} is not a directory"
    # Windows has no uids: the owner check is POSIX only.
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"{directory} is owned by uid {info.st_uid}, not by the gateway's user (uid {os.getuid()})"
    if path.is_symlink():
        return f"{path} is a symlink: neither replaced nor written through"
    return None


def write_if_changed(path: Path, data: bytes) -> bool:
    """Replace ``path``'s content with ``data`` atomically, unless it is that already;
    whether it wrote."""
    try:
        if path.read_bytes() == data:
            return False
        mode: int | None = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = None
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    # os.open with 0o666: the umask applies, as for any file an editor creates (Lore's is
    # 0o077, lore_core/storage/private.py: a new file is its owner's only). An existing
    # file keeps its mode.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return True


def read_file(path: Path) -> ParsedFile:
    """:func:`parse` of the file at ``path``. Raises :class:`FileNotFoundError` (with the
    path) when there is none, :class:`ValueError` naming the path when it cannot be read or
    is not UTF-8 text."""
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise FileNotFoundError(errno.ENOENT, f"no {FILE_NAME} to import", str(path)) from exc
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (bad byte at offset {exc.start}): not imported") from exc
    return parse(text)


async def import_file(book: KnowledgeBook, project: str, path: Path) -> ImportReport:
    """Read the hand edits of ``path`` back into ``project``'s knowledge, through ``book``.

    For each entry, in file order: a marker naming an entry of this project edits its
    category, title and content (nothing when they are equal; a ``sensitive`` flag added
    by hand makes the entry sensitive, a flag removed never makes it less protected); the
    book refuses when that entry was deleted. A marker with an unknown id creates the entry
    under that id (or edits the alive entry that already has its title, rather than making
    a second one). An unmarked entry is created (or edits the entry with its title). The
    book refuses a title that carries a death certificate, secrets and invalid fields; each
    refusal is in ``refused`` with its reason. A rename onto a title that carries a death
    certificate, or that another entry has, is refused (by the book). A marker naming
    another project's entry creates the entry in this project under a new id (ids are
    global; the other project's entry is not touched) and says so in ``problems``.

    Entries of the store that the file does not hold are **not** deleted: a file from an
    older branch must not delete memories. Deleting is done with ``lore knowledge delete``.
    """
    return await import_parsed(book, project, read_file(path), path)


async def import_parsed(
    book: KnowledgeBook, project: str, parsed: ParsedFile, path: Path, *, allow_global: bool = False
) -> ImportReport:
    """:func:`import_file` of a file already parsed (``path`` names it in the report): the
    local API takes the text of a ``.lore.md`` that ``lore import`` read. A marker naming a
    global entry edits it only with ``allow_global`` (review F15: its text reaches every
    project); without it the entry is created in this project under a new id."""
    report = ImportReport(path=path, problems=list(parsed.problems))
    provenance = Provenance(author=AUTHOR_IMPORT, source_ref=FILE_NAME)
    # Decisions first: an entry arriving with its approval is never pending here.
    await _import_decisions(book, project, parsed.decisions, report)
    view = await TeamView.load(book.store, project)
    for entry in parsed.entries:
        result = await _import_entry(
            book, project, entry, provenance, report, view, allow_global=allow_global
        )
        report.record(entry.title, result)
    report.log_summary(FILE_NAME, path)
    return report


async def _import_decisions(
    book: KnowledgeBook, project: str, decisions: Sequence[KnowledgeDecision], report: ImportReport
) -> None:
    """Add the file's decision records to this project's (union: records are never removed,
    and what stands does not depend on the order they arrived in)."""
    kept = []
    for decision in decisions:
        owner = await book.get(decision.logical_id)
        if owner is not None and (owner.scope != "project" or owner.project != project):
            report.problems.append(
                f"decision record on k:{decision.logical_id}, not this project's entry: ignored"
            )
            continue
        kept.append(attrs.evolve(decision, project=project))
    report.decisions = await book.knowledge_store.record_decisions(kept) if kept else 0
    if report.decisions and await book.knowledge_store.team_binding(project) is None:
        report.problems.append(
            f"{report.decisions} team decision records kept: they apply once this project is bound "
            "to a team (lore team bind <team>)"
        )


async def _import_entry(
    book: KnowledgeBook,
    project: str,
    entry: ParsedEntry,
    provenance: Provenance,
    report: ImportReport,
    view: TeamView | None = None,
    *,
    allow_global: bool = False,
) -> WriteResult:
    logical_id = entry.logical_id
    current = await book.get(logical_id) if logical_id else None
    if current is not None and current.scope == "project" and current.project != project:
        report.problems.append(
            f"line {entry.line}: k:{logical_id} is another project's entry: {entry.title!r} "
            "is created in this project under a new id"
        )
        current, logical_id = None, None
    elif current is not None and current.scope == "global" and not allow_global:
        # An export never writes global entries: a marker naming one was written by hand.
        report.problems.append(
            f"line {entry.line}: k:{logical_id} is a global entry (every project): {entry.title!r} "
            "is created in this project under a new id"
        )
        current, logical_id = None, None
    if current is not None and not current.is_deleted and view is not None:
        shared = (await view.approval(current)).shared
        if (
            shared is not None
            and shared.version != current.version
            and (shared.category, shared.title, shared.content)
            == (entry.category, entry.title, entry.content)
        ):
            # The team's text of an entry whose newer edit waits for approval (what the
            # export wrote): not a hand edit, so the pending edit is not undone.
            return WriteResult(UNCHANGED, current)
    if current is not None:
        # The book refuses a rename onto a title another entry has or a death certificate covers.
        return await book.update(
            current.logical_id,
            provenance=provenance,
            category=entry.category,
            title=entry.title,
            content=entry.content,
            sensitivity=_stricter(entry.sensitivity, current.sensitivity),
        )
    same = await book.by_title(project, entry.title)
    sensitivity = entry.sensitivity
    if same is not None:
        # KnowledgeBook.create edits the entry that has the title (whose id the next export
        # writes), and its edit takes the sensitivity given: never lower it from an unmarked
        # block.
        logical_id = None
        sensitivity = _stricter(entry.sensitivity, same.sensitivity)
    return await book.create(
        project=project,
        category=entry.category,
        title=entry.title,
        content=entry.content,
        sensitivity=sensitivity,
        provenance=provenance,
        logical_id=logical_id,
    )


def _stricter(wanted: str, standing: str) -> str:
    """The file may make an entry more protected, never less (``restricted`` stays)."""
    order = ("normal", SENSITIVE_FLAG, "restricted")
    return max(wanted, standing, key=lambda s: order.index(s) if s in order else len(order))
