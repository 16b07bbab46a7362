"""Import lanes: knowledge from ``.lore.md``, other memory tools and agents files, all guarded
the same way, and the JSON export that the ``json`` lane reads back.

Each lane turns a text into :class:`ImportItem` entries plus the problems it met (what it
skipped and why); :func:`apply_items` writes them through
:class:`~lore_core.knowledge.book.KnowledgeBook`, the only writer, so one guard covers every
lane: an entry whose id (when the lane has one) or normalised title carries a death
certificate is refused with the reason, and so are secrets and invalid fields. No lane
deletes anything: an entry absent from the text stays.

* ``lore-md``: ``.lore.md`` (:func:`~lore_core.knowledge.lorefile.import_parsed`); its
  markers are the ids.
* ``mem0``: a mem0 export, ``{"results": [...]}`` (or ``"memories"``) or a bare list of
  memories ``{"id", "memory", "metadata", "categories", ...}``. ``memory`` is the content; the
  title is made from it (:func:`derive_title`); the category is the first of ``categories``
  and ``metadata.category`` that names a Lore category (``user_preferences`` counts as
  ``preference``), else :data:`DEFAULT_CATEGORY`. The mem0 id is the lane's key: it is the
  provenance (``source_ref`` ``mem0:<id>``) and, with the project, gives the entry a stable
  id (:func:`keyed_id`), because a death certificate is found by id or title only, never by
  an earlier version's provenance. A memory is about a person, so it enters ``sensitive``
  (injected, not written to ``.lore.md``) unless ``metadata.sensitivity`` says otherwise.
* ``json``: a list of ``{"title", "content", "category", "scope", "sensitivity", "id"}``
  (only ``content`` required; ``id`` a Lore id, ``k:`` optional): what
  ``lore export --format json`` writes and ``lore knowledge list --json`` prints.
* ``agents``: an agents file (``CLAUDE.md``, ``AGENTS.md``), see :func:`parse_agents`. It has
  no ids: titles are the key.

A re-import edits the entries it finds (by id, else by title) to what the text says, never
lowering their sensitivity; a title or a category Lore made up (from the content, a mem0
category, a heading) is used to create an entry, never to rename or re-categorise one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from lore_core.knowledge import lorefile
from lore_core.knowledge.book import (
    MAX_TITLE_CHARS,
    UNPAIRED_SURROGATE,
    KnowledgeBook,
    Provenance,
    WriteResult,
    is_text,
)
from lore_core.knowledge.lorefile import ExportReport, ImportReport, category_of
from lore_core.storage.knowledge import (
    AUTHOR_IMPORT,
    SENSITIVITIES,
    normalize_title,
    valid_logical_id,
)
from lore_core.storage.masking import mask_secrets

log = logging.getLogger("lore.knowledge")

LORE_MD, MEM0, JSON, AGENTS = "lore-md", "mem0", "json", "agents"
#: What ``lore import --format`` and ``POST /lore/api/knowledge/import?format=`` take.
FORMATS = (LORE_MD, MEM0, JSON, AGENTS)
#: What ``lore export --format`` and ``GET /lore/api/knowledge/file?format=`` take.
EXPORT_FORMATS = (LORE_MD, JSON)
#: File names read as agents files when no format is given (compared case-insensitively).
AGENTS_FILES = ("claude.md", "agents.md")
#: The category of an entry whose lane names none: other tools' memories and agents files
#: are mostly how the developer wants the agent to work.
DEFAULT_CATEGORY = "preference"
#: Words of a title made from content.
TITLE_WORDS = 8
#: Longest id of another tool kept as the lane's key (mem0's are UUIDs).
MAX_KEY_CHARS = 200


class ImportFormatError(ValueError):
    """A text that is not of the format it is read as (the message says what was expected)."""


@attrs.define
class ImportItem:
    """One entry a lane read, before the book sees it."""

    title: str
    content: str
    #: The category the text states (``json``); ``None``: it states none, and an edit keeps
    #: the entry's.
    category: str | None = None
    #: The category Lore inferred (a mem0 category, an agents file's heading): used only to
    #: create, else :data:`DEFAULT_CATEGORY`.
    guessed_category: str | None = None
    #: ``None``: the lane does not say (``project`` on create, kept on an edit).
    scope: str | None = None
    #: Never lowers an existing entry's.
    sensitivity: str = "normal"
    #: A Lore id the lane carries (``json``).
    logical_id: str | None = None
    #: The other tool's id (``mem0:<id>``): the provenance, and the entry's id through
    #: :func:`keyed_id`.
    key: str | None = None
    #: The title was made from the content: used to create, never to rename.
    derived_title: bool = False
    #: Where the item is in the text (``entry 3``, ``line 12``), for problems.
    where: str = ""


@attrs.define
class ParsedImport:
    items: list[ImportItem] = attrs.field(factory=list)
    #: ``"<where>: ..."``, one per thing that was skipped or read differently than written.
    problems: list[str] = attrs.field(factory=list)


# -- helpers --------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def derive_title(text: str) -> str:
    """A title for an entry that has none: the first sentence of its first non-blank line,
    cut to :data:`TITLE_WORDS` words (``...`` marks the cut), without final punctuation."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    words = _SENTENCE_END.split(first, maxsplit=1)[0].split()
    title = " ".join(words[:TITLE_WORDS]).rstrip(".,;:")
    if len(words) > TITLE_WORDS:
        title += "..."
    return title if len(title) <= MAX_TITLE_CHARS else title[: MAX_TITLE_CHARS - 3] + "..."


def keyed_id(project: str, key: str) -> str:
    """The logical id of the entry another tool's item becomes in ``project``: the same on
    every import, so deleting the entry makes the next import of that item find its death
    certificate by id. The project is part of it: ids are global, and another project's
    import of the same item is another entry."""
    return hashlib.sha256(f"{project}\0{key}".encode()).hexdigest()[:16]


def _lore_category(names: Sequence[Any]) -> str | None:
    """The first of ``names`` that names a Lore category, whole or by one of its words."""
    for name in names:
        if not isinstance(name, str):
            continue
        for candidate in (name, *re.split(r"[^a-zA-Z]+", name)):
            found = category_of(candidate) if candidate else None
            if found:
                return found
    return None


def _trim_blank(lines: list[str]) -> list[str]:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def _load_json(text: str, what: str) -> Any:
    try:
        data = json.loads(text.removeprefix("\ufeff"))
    except RecursionError:
        raise ImportFormatError(f"not a {what}: the JSON nests too deeply") from None
    except json.JSONDecodeError as exc:
        raise ImportFormatError(
            f"not a {what}: the text is not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not is_text(data):
        # No store can keep it: refused here, with the reason, not by the store (review F17).
        raise ImportFormatError(f"not a {what}: {UNPAIRED_SURROGATE}")
    return data


def _not_a_string(raw: dict[str, Any], names: Sequence[str]) -> str | None:
    """The first of ``names`` whose value is neither absent, null nor a string."""
    return next((n for n in names if raw.get(n) is not None and not isinstance(raw[n], str)), None)


# -- lanes ----------------------------------------------------------------------------------


def parse_mem0(text: str) -> ParsedImport:
    """The memories of a mem0 export (see the module's docstring)."""
    data = _load_json(text, "mem0 export")
    memories: Any = data
    if isinstance(data, dict):
        memories = next((data[k] for k in ("results", "memories") if isinstance(data.get(k), list)), None)
    if not isinstance(memories, list):
        raise ImportFormatError(
            'not a mem0 export: expected a JSON object with a "results" (or "memories") list, '
            "or a list of memories"
        )
    out = ParsedImport()
    for index, raw in enumerate(memories, start=1):
        where = f"memory {index}"
        if not isinstance(raw, dict):
            out.problems.append(f"{where}: not a JSON object: skipped")
            continue
        memory = raw.get("memory")
        if not isinstance(memory, str) or not memory.strip():
            out.problems.append(f'{where}: no "memory" text: skipped')
            continue
        ident = raw.get("id")
        if isinstance(ident, int) and not isinstance(ident, bool):
            ident = str(ident)
        if not isinstance(ident, str) or not ident.strip():
            if ident is not None:
                out.problems.append(f"{where}: id {ident!r} is not a string: matched by title only")
            ident = None
        elif len(ident) > MAX_KEY_CHARS or mask_secrets(ident) != ident:
            # It would be stored as provenance: no secrets there, and no essays.
            out.problems.append(
                f"{where}: the id is not a mem0 id (too long, or a secret): matched by title only"
            )
            ident = None
        metadata: dict[str, Any] = raw["metadata"] if isinstance(raw.get("metadata"), dict) else {}
        categories = raw.get("categories")
        names = [*(categories if isinstance(categories, list) else [categories]), metadata.get("category")]
        sensitivity = metadata.get("sensitivity")
        out.items.append(
            ImportItem(
                title=derive_title(memory),
                content=memory.strip(),
                guessed_category=_lore_category(names),
                sensitivity=sensitivity if sensitivity in SENSITIVITIES else "sensitive",
                key=f"mem0:{ident.strip()}" if ident else None,
                derived_title=True,
                where=where,
            )
        )
    return out


_JSON_FIELDS = ("title", "content", "category", "scope", "sensitivity", "id")


def parse_json(text: str) -> ParsedImport:
    """The entries of a JSON list (see the module's docstring)."""
    data = _load_json(text, "JSON list of entries")
    if not isinstance(data, list):
        raise ImportFormatError('not a JSON list of entries: expected [{"title": ..., "content": ...}, ...]')
    out = ParsedImport()
    for index, raw in enumerate(data, start=1):
        where = f"entry {index}"
        if not isinstance(raw, dict):
            out.problems.append(f"{where}: not a JSON object: skipped")
            continue
        wrong = _not_a_string(raw, _JSON_FIELDS)
        if wrong is not None:
            out.problems.append(f"{where}: {wrong!r} is not a string: skipped")
            continue
        content = (raw.get("content") or "").strip()
        if not content:
            out.problems.append(f'{where}: no "content": skipped')
            continue
        title = (raw.get("title") or "").strip()
        ident = (raw.get("id") or "").strip().removeprefix("k:") or None
        if ident is not None and not valid_logical_id(ident):
            out.problems.append(
                f"{where}: id {raw['id']!r} is not a Lore id (k:<4-64 lowercase letters, digits, - or _>): "
                "matched by title only"
            )
            ident = None
        category = raw.get("category")
        out.items.append(
            ImportItem(
                title=title or derive_title(content),
                content=content,
                # "Decisions" or "GOTCHA" mean a category; the book refuses what names none.
                category=(category_of(category) or category) if category else None,
                scope=raw.get("scope") or None,
                sensitivity=raw.get("sensitivity") or "normal",
                logical_id=ident,
                derived_title=not title,
                where=where,
            )
        )
    return out


_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_MD_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
# A top-level list item: at most one space before the marker (nested items are indented).
_BULLET = re.compile(r"^ ?(?:[-*+]|\d{1,9}[.)])[ \t]+(\S.*)$")


def parse_agents(text: str) -> ParsedImport:
    """The entries of an agents file (``CLAUDE.md``, ``AGENTS.md``): Markdown read simply.

    * Each top-level list item (``-``, ``*``, ``+``, ``1.``) is an entry, with its indented
      lines and nested items; its title is made from its first line (:func:`derive_title`).
    * The rest of a section's text (paragraphs, code blocks) is one entry titled with the
      section's heading (or, before any heading, made from the text).
    * The category is the one the nearest heading above that names one says (``## Gotchas``,
      ``## Decision``), else :data:`DEFAULT_CATEGORY`. Headings and list markers inside code fences are text.
    """
    out = ParsedImport()
    heading: str | None = None
    heading_line = 0
    # (level, text) of the headings above the current line, outermost first.
    headings: list[tuple[int, str]] = []
    body: list[str] = []
    body_line = 0
    bullet: list[str] | None = None
    bullet_line = 0
    fence = ""  # the open fence's marker, "" outside a code block
    blank_before = False

    def category() -> str | None:
        # The nearest heading that names a category (### Deep under ## Gotchas: a gotcha).
        return next((c for _, text in reversed(headings) if (c := category_of(text))), None)

    def flush_bullet() -> None:
        nonlocal bullet
        if bullet is not None:
            rest = textwrap.dedent("\n".join(bullet[1:])).split("\n")
            content = "\n".join(_trim_blank([bullet[0], *rest]))
            out.items.append(
                ImportItem(
                    title=derive_title(content),
                    content=content,
                    guessed_category=category(),
                    derived_title=True,
                    where=f"line {bullet_line}",
                )
            )
            bullet = None

    def flush_body() -> None:
        content = "\n".join(_trim_blank(body))
        if content:
            out.items.append(
                ImportItem(
                    title=heading or derive_title(content),
                    content=content,
                    guessed_category=category(),
                    derived_title=not heading,
                    where=f"line {heading_line if heading else body_line}",
                )
            )
        body.clear()

    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for number, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        if fence:
            (bullet if bullet is not None else body).append(raw)
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = ""
            continue
        opens = _FENCE.match(raw)
        heading_match = None if opens else _MD_HEADING.match(raw)
        bullet_match = None if opens or heading_match else _BULLET.match(raw)
        if heading_match:
            flush_bullet()
            flush_body()
            heading, heading_line = (heading_match.group(2) or "").strip() or None, number
            level = len(heading_match.group(1))
            headings = [h for h in headings if h[0] < level] + [(level, heading or "")]
        elif bullet_match:
            flush_bullet()
            bullet, bullet_line = [bullet_match.group(1)], number
        elif bullet is not None and (not stripped or raw[:1] in " \t" or not blank_before):
            bullet.append(raw)  # blank, indented, or a continuation line right below
        else:
            flush_bullet()
            if stripped and not any(line.strip() for line in body):
                body_line = number
            body.append(raw)
        if opens:
            fence = opens.group(1)
        blank_before = not stripped
    flush_bullet()
    flush_body()
    return out


def parse(fmt: str, text: str) -> ParsedImport:
    """The items of ``text`` read as ``fmt`` (any of :data:`FORMATS` but ``lore-md``)."""
    lanes = {MEM0: parse_mem0, JSON: parse_json, AGENTS: parse_agents}
    if fmt not in lanes:
        raise ImportFormatError(f"unknown import format {fmt!r} (formats: {', '.join(FORMATS)})")
    return lanes[fmt](text)


def guess_format(name: str, text: str) -> str:
    """The format of a file from its name, then its content: ``.lore.md``, an agents file by
    name, JSON (mem0 when it looks like a mem0 export) by name or when it parses as JSON,
    else ``lore-md`` (what ``lore import`` always read)."""
    base = Path(name).name.casefold()
    if base == lorefile.FILE_NAME:
        return LORE_MD
    if base in AGENTS_FILES:
        return AGENTS
    try:
        data = json.loads(text.removeprefix("\ufeff"))
    except (ValueError, RecursionError):
        return JSON if base.endswith(".json") else LORE_MD
    if isinstance(data, dict) and any(isinstance(data.get(k), list) for k in ("results", "memories")):
        return MEM0
    memories = isinstance(data, list) and any(
        isinstance(i, dict) and "memory" in i and "content" not in i for i in data
    )
    return MEM0 if memories else JSON


# -- applying -------------------------------------------------------------------------------


def _stricter(wanted: str, standing: str) -> str:
    """An import may make an entry more protected, never less (an unknown value is left for
    the book to refuse)."""
    rank = {s: i for i, s in enumerate(SENSITIVITIES)}
    return max(wanted, standing, key=lambda s: rank.get(s, len(rank)))


async def apply_items(
    book: KnowledgeBook,
    project: str,
    parsed: ParsedImport,
    path: Path,
    *,
    source: str,
    allow_global: bool = False,
) -> ImportReport:
    """Write ``parsed`` into ``project`` through ``book``, item by item, and report what each
    did. ``source`` is the provenance (``source_ref``) of items without a key of their own.

    A global entry reaches every project's prompt, so an import makes or edits one only with
    ``allow_global`` (review F15): without it, an item marked global is imported into
    ``project``, and one naming a global entry's id is created in ``project`` under a new
    id; ``problems`` say so.

    An item with an id (its own, or :func:`keyed_id` of its key) that names an alive entry of
    this project edits it; one that names a deleted entry is refused by the book, as is a
    new item whose title carries a death certificate. Otherwise the book creates the entry
    (under that id) or edits the alive one with its title. A second item with a title
    already used in this text is skipped (it would silently edit the first)."""
    report = ImportReport(path=path, problems=list(parsed.problems))
    seen: dict[str, str] = {}
    for item in parsed.items:
        title = normalize_title(item.title)
        if title in seen:
            shown = mask_secrets(item.title)
            report.problems.append(f"{item.where}: {shown!r} has the title of {seen[title]}: skipped")
            continue
        seen[title] = item.where
        if item.scope == "global" and not allow_global:
            report.problems.append(
                f"{item.where}: {mask_secrets(item.title)!r} is marked global (every project): imported "
                "into this project (allowGlobal=true, lore import --global, imports it as global)"
            )
            item = attrs.evolve(item, scope=None)
        result = await _apply_item(book, project, item, source, report, allow_global=allow_global)
        report.record(item.title, result)
    report.log_summary(path.name, source)
    return report


async def _apply_item(
    book: KnowledgeBook,
    project: str,
    item: ImportItem,
    source: str,
    report: ImportReport,
    *,
    allow_global: bool,
) -> WriteResult:
    provenance = Provenance(author=AUTHOR_IMPORT, source_ref=item.key or source)
    logical_id = item.logical_id or (keyed_id(project, item.key) if item.key else None)
    current = await book.get(logical_id) if logical_id else None
    if current is not None and current.scope == "project" and current.project != project:
        report.problems.append(
            f"{item.where}: k:{logical_id} is another project's entry: {item.title!r} "
            "is created in this project under a new id"
        )
        current, logical_id = None, None
    elif current is not None and current.scope == "global" and not allow_global:
        report.problems.append(
            f"{item.where}: k:{logical_id} is a global entry (every project): {item.title!r} "
            "is created in this project under a new id (allowGlobal=true edits the global one)"
        )
        current, logical_id = None, None
    if current is not None and not current.is_deleted:
        # The book refuses a rename onto a title that was deleted or that another entry has.
        return await book.update(
            current.logical_id,
            provenance=provenance,
            category=item.category,
            title=None if item.derived_title else item.title,
            content=item.content,
            scope=item.scope,
            sensitivity=_stricter(item.sensitivity, current.sensitivity),
        )
    # The guard: with the id of a deleted entry, or a title that carries a death certificate,
    # the book refuses. With the title of an alive entry it edits that one (never lowering
    # its sensitivity), so the category of that entry is kept when the text states none.
    scope = item.scope or "project"
    same = await book.by_title(project, item.title, scope) if item.category is None else None
    return await book.create(
        project=project,
        category=item.category or (same.category if same else item.guessed_category or DEFAULT_CATEGORY),
        title=item.title,
        content=item.content,
        scope=scope,
        sensitivity=item.sensitivity,
        provenance=provenance,
        logical_id=logical_id,
    )


async def import_text(
    book: KnowledgeBook, project: str, text: str, fmt: str, path: Path, *, allow_global: bool = False
) -> ImportReport:
    """Import ``text`` read as ``fmt`` (one of :data:`FORMATS`) into ``project``; ``path``
    names it in the report (and, by its file name, in the provenance); ``allow_global``: see
    :func:`apply_items`. Raises :class:`ImportFormatError` for an unknown format or a text
    that is not of it."""
    if fmt == LORE_MD:
        parsed_file = lorefile.parse(text)
        return await lorefile.import_parsed(book, project, parsed_file, path, allow_global=allow_global)
    parsed = parse(fmt, text)
    return await apply_items(book, project, parsed, path, source=path.name or fmt, allow_global=allow_global)


# -- export ---------------------------------------------------------------------------------


async def export_text(
    book: KnowledgeBook, project: str, fmt: str, *, include_sensitive: bool = False
) -> tuple[str, ExportReport]:
    """The text of an export of ``project`` as ``fmt`` (one of :data:`EXPORT_FORMATS`), and its
    report. Both formats hold what :func:`~lore_core.knowledge.lorefile.exportable` chooses:
    never a restricted entry, a sensitive one only with ``include_sensitive``. ``json`` is a
    list the ``json`` lane reads back (ids kept, so a deleted entry stays deleted)."""
    if fmt == LORE_MD:
        return await lorefile.render_project(book, project, include_sensitive=include_sensitive)
    if fmt != JSON:
        raise ImportFormatError(f"unknown export format {fmt!r} (formats: {', '.join(EXPORT_FORMATS)})")
    chosen, report = await lorefile.exportable(book, project, include_sensitive=include_sensitive)
    rows = [
        {
            "id": e.ref,
            "category": e.category,
            "title": e.title,
            "content": e.content,
            "scope": e.scope,
            "sensitivity": e.sensitivity,
        }
        for e in chosen
    ]
    return json.dumps(rows, indent=2, ensure_ascii=False) + "\n", report
