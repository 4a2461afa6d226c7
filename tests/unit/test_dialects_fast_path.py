"""A text-only chunk is read by a short path; every chunk still decodes to exactly the general path's deltas.

The OpenAI stream decoder reads the commonest chunk (one piece of text, nothing else) with a few type
checks instead of the general per-field reading. These tests decode random chunks, plain and otherwise
(roles, finish reasons, usage, logprobs, tool calls, unknown fields, errors, wrong types), once as the
decoder does and once with the short path turned off, and ask for the same deltas or the same refusal.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sagestream.delta import Delta
from sagestream.dialects import openai as openai_dialect
from sagestream.dialects.openai import OpenAIStreamDecoder

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-9, 9) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=4,
)
# A field is mostly what it should be, sometimes absent, null or the wrong type.
_odd = st.just(None) | _json


@st.composite
def chunks(draw: st.DrawFn) -> dict[str, Any]:
    delta: dict[str, Any] = {"content": draw(st.text(max_size=12) | _odd)}
    for key in draw(st.lists(st.sampled_from(["role", "tool_calls", "reasoning", "refusal", "x_vendor"]), max_size=2)):
        delta[key] = draw(st.just("assistant") | _odd)
    choice: dict[str, Any] = {"index": 0, "delta": draw(st.just(delta) | _odd) if draw(st.booleans()) else delta}
    if draw(st.booleans()):
        choice["finish_reason"] = draw(st.none() | st.sampled_from(["stop", "length", "eos_token"]) | _odd)
    if draw(st.booleans()):
        choice["logprobs"] = draw(st.none() | _json)
    chunk: dict[str, Any] = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunk["choices"] = [choice] if draw(st.integers(0, 5)) else draw(_odd)
    if draw(st.booleans()):
        chunk["usage"] = draw(st.none() | st.fixed_dictionaries({"completion_tokens": st.integers(0, 9)}) | _odd)
    if not draw(st.integers(0, 9)):
        chunk["error"] = draw(_json)
    return chunk


def _decode(record: str) -> list[Delta] | tuple[type[Exception], str]:
    try:
        return OpenAIStreamDecoder().decode(record)
    except Exception as exc:
        return type(exc), str(exc)


@settings(max_examples=400, deadline=None)
@given(chunks())
def test_every_chunk_gives_the_general_paths_deltas(chunk: dict[str, Any]) -> None:
    record = json.dumps(chunk)
    short = _decode(record)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(openai_dialect, "_text_only", lambda chunk: None)
        general = _decode(record)
    assert short == general


def test_a_plain_text_chunk_takes_the_short_path() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"role": None, "content": "Hé"}, "finish_reason": None}]}
    assert openai_dialect._text_only(chunk) == Delta("Hé")
    assert openai_dialect._text_only({"choices": [{"delta": {"content": "a", "tool_calls": []}}]}) is None
