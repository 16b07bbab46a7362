"""The request body parsed with its members' positions, and the recall tool spliced in."""

from __future__ import annotations

import json

import pytest

from lore_core.wire.jsonbody import append_to_array, loads_object


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        " \n{ }\t",
        '{"a":1}',
        '{ "model" : "m", "tools":[ {"name":"Read"} ] ,\n'
        '"x": [1, 2.5e3, null, true, "\\u00e9\\ud83d\\ude00"], "é": {"n": {}} }',
        '{"nan": NaN, "big": 123456789012345678901234567890}',
    ],
)
def test_the_object_and_where_each_member_lies(text):
    obj, spans = loads_object(text)
    assert obj == json.loads(text) or "NaN" in text  # NaN != NaN
    assert list(obj) == list(json.loads(text))
    for key, (start, end) in spans.items():
        assert json.loads(text[start:end]) == obj[key] or key == "nan"


@pytest.mark.parametrize(
    "text",
    ["", "[]", '"s"', "{", '{"a" 1}', '{"a":1,}', '{"a":1} x', "{a:1}", '{"a":1, "a":2}', '{"a":1}{}'],
)
def test_anything_else_is_left_to_json_loads(text):
    with pytest.raises(ValueError):
        loads_object(text)


def test_items_are_appended_to_the_array_and_nothing_else_changes():
    text = '{"tools": [ {"name": "Read"}\n ], "messages":[{"role":"user","content":"h\\u00e9"}],"z":1}'
    _, spans = loads_object(text)
    out = append_to_array(text, spans["tools"], [{"name": "recall", "d": "é"}])
    assert json.loads(out) == {**json.loads(text), "tools": [{"name": "Read"}, {"name": "recall", "d": "é"}]}
    end = spans["tools"][1]
    assert out.startswith(text[: end - 1]) and out.endswith(text[end - 1 :])
