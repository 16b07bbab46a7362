"""Recall result ids and search scopes.

Every recall result carries an id whose prefix names the tier it came from, so a follow-up
``recall`` call can open it in full without saying where to look:

* ``t:<message id>``      a temporal message (tier 1)
* ``d:<distillation id>`` a distillation (observation log entry)
* ``k:<knowledge id>``    a knowledge entry
* ``e:<entity id>``       an entity

Ids travel through a model and back, so parsing is strict and its errors say exactly what
was wrong: the text of a :class:`RecallIdError` is shown to the model as a tool result.
"""

from __future__ import annotations

import re
from enum import StrEnum

import attrs


class Kind(StrEnum):
    """What a result is; the value is its id prefix."""

    MESSAGE = "t"
    DISTILLATION = "d"
    KNOWLEDGE = "k"
    ENTITY = "e"

    @property
    def label(self) -> str:
        """The word shown to the model (``message``, ``distillation``, ...)."""
        return self.name.lower()


class RecallIdError(ValueError):
    """A recall id that cannot be used; the message is fit to show the model."""


class ScopeError(ValueError):
    """An unknown scope; the message lists the valid ones."""


# Keys are store-made (hex hashes, numbers, slugs); anything else in them is a model typo
# or an injection attempt, and refusing it early gives a clearer answer than "not found".
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]*")
MAX_KEY_CHARS = 200
_PREFIXES = ", ".join(f"{k.value}: ({k.label})" for k in Kind)


@attrs.frozen
class RecallId:
    kind: Kind
    key: str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.key}"


def _check_key(key: str, shown: str) -> None:
    if not key:
        raise RecallIdError(f"invalid recall id {shown!r}: nothing after the prefix")
    if len(key) > MAX_KEY_CHARS:
        raise RecallIdError(f"invalid recall id: longer than {MAX_KEY_CHARS} characters")
    if not _KEY.fullmatch(key):
        raise RecallIdError(
            f"invalid recall id {shown!r}: only letters, digits and _ . : - are allowed after the prefix"
        )


def format_id(kind: Kind | str, key: str) -> str:
    """``format_id(Kind.MESSAGE, "ab12")`` -> ``"t:ab12"``. Raises :class:`RecallIdError`."""
    try:
        kind = Kind(kind)
    except ValueError:
        raise RecallIdError(f"unknown recall id kind {kind!r}; expected one of {_PREFIXES}") from None
    _check_key(key, f"{kind.value}:{key}"[:80])
    return f"{kind.value}:{key}"


def parse_id(text: object) -> RecallId:
    """Parse ``"t:ab12"``; surrounding whitespace and backticks/quotes (models add them) are
    ignored. Raises :class:`RecallIdError` with a message fit for the model."""
    if not isinstance(text, str):
        raise RecallIdError(f"a recall id must be a string, got {type(text).__name__}")
    cleaned = text.strip().strip("`'\"").strip()
    shown = cleaned if len(cleaned) <= 80 else cleaned[:77] + "..."
    if not cleaned:
        raise RecallIdError("empty recall id")
    prefix, sep, key = cleaned.partition(":")
    if not sep:
        raise RecallIdError(f"invalid recall id {shown!r}: expected a prefix, one of {_PREFIXES}")
    try:
        kind = Kind(prefix.lower())
    except ValueError:
        raise RecallIdError(
            f"invalid recall id {shown!r}: unknown prefix {prefix[:20]!r}; expected one of {_PREFIXES}"
        ) from None
    _check_key(key, shown)
    return RecallId(kind, key)


def is_valid_id(text: object) -> bool:
    try:
        parse_id(text)
    except RecallIdError:
        return False
    return True


class Scope(StrEnum):
    """Where a recall looks.

    * ``session``: this session's messages and distillations;
    * ``project``: everything this project remembers (messages, distillations, its knowledge
      and entities);
    * ``knowledge``: this project's knowledge and entities only;
    * ``all``: ``project`` plus knowledge from every other project. Only ``all`` crosses
      projects, so one project's notes never leak into another's answers unasked.
    """

    SESSION = "session"
    PROJECT = "project"
    KNOWLEDGE = "knowledge"
    ALL = "all"

    @property
    def kinds(self) -> tuple[Kind, ...]:
        if self is Scope.SESSION:
            return (Kind.MESSAGE, Kind.DISTILLATION)
        if self is Scope.KNOWLEDGE:
            return (Kind.KNOWLEDGE, Kind.ENTITY)
        return (Kind.MESSAGE, Kind.DISTILLATION, Kind.KNOWLEDGE, Kind.ENTITY)

    def crosses_projects(self, kind: Kind) -> bool:
        """Whether ``kind`` is searched without the project filter in this scope."""
        return self is Scope.ALL and kind is Kind.KNOWLEDGE


DEFAULT_SCOPE = Scope.PROJECT


def parse_scope(value: object, default: Scope = DEFAULT_SCOPE) -> Scope:
    """A scope from tool input: ``None``/empty gives ``default``; case and surrounding
    whitespace are ignored. Raises :class:`ScopeError` naming the valid scopes."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    if isinstance(value, Scope):
        return value
    valid = " | ".join(s.value for s in Scope)
    if not isinstance(value, str):
        raise ScopeError(f"scope must be a string, one of {valid}")
    try:
        return Scope(value.strip().lower())
    except ValueError:
        raise ScopeError(f"unknown scope {value.strip()[:40]!r}; expected one of {valid}") from None
