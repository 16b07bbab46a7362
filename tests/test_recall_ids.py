"""Recall ids (t:/d:/k:/e:) and scopes: parsing, formatting and the errors the model sees."""

from __future__ import annotations

import pytest

from lore_core.recall.ids import (
    DEFAULT_SCOPE,
    Kind,
    RecallId,
    RecallIdError,
    Scope,
    ScopeError,
    format_id,
    is_valid_id,
    parse_id,
    parse_scope,
)


@pytest.mark.parametrize(
    ("text", "kind", "key"),
    [
        ("t:3f2a9c", Kind.MESSAGE, "3f2a9c"),
        ("d:obs-12", Kind.DISTILLATION, "obs-12"),
        ("k:auth.tokens", Kind.KNOWLEDGE, "auth.tokens"),
        ("e:42", Kind.ENTITY, "42"),
        ("  `t:abc`  ", Kind.MESSAGE, "abc"),  # models wrap ids in backticks or quotes
        ('"K:abc"', Kind.KNOWLEDGE, "abc"),  # prefix case is forgiven
        ("t:a:b", Kind.MESSAGE, "a:b"),  # only the first colon separates
    ],
)
def test_parse_valid(text, kind, key):
    rid = parse_id(text)
    assert rid == RecallId(kind, key)
    assert str(rid) == f"{kind.value}:{key}"
    assert is_valid_id(text)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("abc123", "expected a prefix"),
        ("x:abc", "unknown prefix 'x'"),
        ("t:", "nothing after the prefix"),
        ("t:has space", "only letters"),
        ("t:-leading", "only letters"),
        ("t:" + "a" * 201, "longer than 200"),
        (None, "must be a string"),
        (42, "must be a string"),
    ],
)
def test_parse_invalid_says_why(text, fragment):
    with pytest.raises(RecallIdError) as info:
        parse_id(text)
    assert fragment in str(info.value)
    assert not is_valid_id(text)


def test_unknown_prefix_error_lists_the_valid_ones():
    with pytest.raises(RecallIdError) as info:
        parse_id("q:1")
    message = str(info.value)
    for prefix in ("t:", "d:", "k:", "e:"):
        assert prefix in message


def test_error_for_a_huge_id_stays_short():
    with pytest.raises(RecallIdError) as info:
        parse_id("zz" * 50_000)
    assert len(str(info.value)) < 300


def test_format_round_trips():
    for kind in Kind:
        assert parse_id(format_id(kind, "ab_1")) == RecallId(kind, "ab_1")
    assert format_id("k", "x") == "k:x"
    with pytest.raises(RecallIdError, match="unknown recall id kind"):
        format_id("z", "x")
    with pytest.raises(RecallIdError):
        format_id(Kind.MESSAGE, "")


def test_kind_labels():
    assert [k.label for k in Kind] == ["message", "distillation", "knowledge", "entity"]


@pytest.mark.parametrize(
    ("value", "scope"),
    [
        ("session", Scope.SESSION),
        (" Project ", Scope.PROJECT),
        ("KNOWLEDGE", Scope.KNOWLEDGE),
        ("all", Scope.ALL),
        (None, DEFAULT_SCOPE),
        ("", DEFAULT_SCOPE),
        (Scope.ALL, Scope.ALL),
    ],
)
def test_parse_scope(value, scope):
    assert parse_scope(value) is scope


@pytest.mark.parametrize("value", ["everything", "sessions", 3, ["all"]])
def test_unknown_scope_names_the_valid_ones(value):
    with pytest.raises(ScopeError) as info:
        parse_scope(value)
    assert "session | project | knowledge | all" in str(info.value)


def test_scope_kinds_and_cross_project_rule():
    assert Scope.SESSION.kinds == (Kind.MESSAGE, Kind.DISTILLATION)
    assert Scope.KNOWLEDGE.kinds == (Kind.KNOWLEDGE, Kind.ENTITY)
    assert set(Scope.PROJECT.kinds) == set(Kind) == set(Scope.ALL.kinds)
    # Only knowledge, and only under `all`, leaves the current project.
    crossing = {(s, k) for s in Scope for k in Kind if s.crosses_projects(k)}
    assert crossing == {(Scope.ALL, Kind.KNOWLEDGE)}
