"""Strict JSON bodies: the table of what is refused, and where the refusal points."""

from __future__ import annotations

import json

import pytest

from coda.service.jsonguard import MAX_DEPTH, JSONBodyError, strict_loads


@pytest.mark.parametrize("raw", [
    '{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '[1e400]', '{"a": -1e999}',
    '{"a": 1' + "0" * 5000 + "}",  # past Python's int-from-string limit
    '{"a": }', "[1, 2", "\xff", b"\xff\xfe{", "",
])
def test_non_standard_or_broken_json_is_refused(raw: str | bytes) -> None:
    with pytest.raises(JSONBodyError) as err:
        strict_loads(raw)
    assert err.value.kind == "json_invalid"
    assert err.value.loc[0] == "body"


@pytest.mark.parametrize(("raw", "loc"), [
    ('{"name": "a\\u0000b"}', ("body", "name")),
    ('{"tasks": [{"instruction": "x"}, {"instruction": "a\\u0000"}]}',
     ("body", "tasks", 1, "instruction")),
    ('{"payload": {"k\\u0000": 1}}', ("body", "payload")),
    ('{"name": "a\\ud800b"}', ("body", "name")),
    ('{"name": "a\\udfffb"}', ("body", "name")),
    ('["ok", ["\\ud83d"]]', ("body", 1, 0)),
])
def test_unstorable_strings_are_refused_with_their_field(raw: str, loc: tuple) -> None:
    with pytest.raises(JSONBodyError) as err:
        strict_loads(raw)
    assert err.value.loc == loc
    assert err.value.kind == "string_invalid"
    json.dumps(err.value.to_error(), ensure_ascii=False).encode()  # the error itself encodes


def test_cesu8_surrogate_bytes_are_refused() -> None:
    with pytest.raises(JSONBodyError):
        strict_loads(b'{"a": "\xed\xa0\x80"}')


@pytest.mark.parametrize("raw", [
    '{"a": 1.5, "b": [1, 2, {"c": null}], "d": "x\\ty", "e": 1e308, "f": -0.0}',
    '{"emoji": "\\ud83d\\ude00", "text": "caf\\u00e9"}',
    '{"big": 9223372036854775808}',
])
def test_standard_json_passes_unchanged(raw: str) -> None:
    assert strict_loads(raw) == json.loads(raw)


def test_depth_is_bounded_without_recursion_errors() -> None:
    ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert strict_loads(ok) is not None
    for depth in (MAX_DEPTH + 2, 1_000, 100_000):
        with pytest.raises(JSONBodyError) as err:
            strict_loads("[" * depth + "]" * depth)
        assert "nest" in err.value.message
