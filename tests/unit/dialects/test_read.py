"""A container's JSON reads as ``json.loads`` reads it, though msgspec decodes it: same values, same refusals."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sagestream.dialects._read import DecodeError, load

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def same(a: Any, b: Any) -> bool:
    """Equal as JSON values, by type too (1 is not 1.0 nor True), NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def json_loads(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return DecodeError


def loaded(text: str | bytes) -> Any:
    try:
        return load(text)
    except DecodeError:
        return DecodeError


@settings(max_examples=400, deadline=None)
@given(json_values, st.booleans(), st.sampled_from([None, 2]), st.booleans())
def test_any_json_a_server_writes_reads_as_json_loads_reads_it(
    value: Any, ascii_only: bool, indent: int | None, as_bytes: bool
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    data = text.encode() if as_bytes else text
    assert same(loaded(data), json_loads(data))


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=30), st.binary(max_size=30), st.from_regex(r'\A[\[\]{}",:0-9eE.+\- \\u]{0,20}\Z')))
def test_any_bytes_read_or_refused_as_json_loads_does(data: str | bytes) -> None:
    assert same(loaded(data), json_loads(data))


@pytest.mark.parametrize(
    "text",
    ["NaN", "[Infinity, -Infinity]", "1e400", '"\\ud800"', '{"a": 1, "a": 2}', "123456789012345678901234567890"],
)
def test_what_msgspec_refuses_or_reads_its_own_way_reads_as_json_loads_reads_it(text: str) -> None:
    assert same(load(text), json.loads(text))
    assert same(load(text.encode("utf-16")), json.loads(text.encode("utf-16")))


def test_json_nested_past_any_decoders_depth_is_refused_as_not_json() -> None:
    with pytest.raises(DecodeError, match="not JSON"):
        load("[" * 100_000 + "]" * 100_000)
