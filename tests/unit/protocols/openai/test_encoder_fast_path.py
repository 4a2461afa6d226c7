"""A text-only delta takes a prebuilt template; every delta's bytes are still exactly the general path's.

The encoder's fast path fills the text into an event cut from the general path's own output. These tests
run an encoder and its twin (same id, same settings) through the same deltas, one by ``encode`` and one by
the general path only, and ask for the same bytes, whatever the text, the model name or the other fields
(tool call fragments, reasoning, refusal, logprobs, unknown fields, usage, finish reasons) a delta carries.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sagestream.delta import Delta, Usage
from sagestream.protocols.openai.encoder import ChunkEncoder

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
_maybe_text = st.none() | st.text(max_size=12)


@st.composite
def deltas(draw: st.DrawFn) -> Delta:
    plain = draw(st.booleans())  # most deltas in a stream are text and nothing else
    content = draw(st.text(max_size=20))
    if plain:
        return Delta(content)
    usage = draw(st.none() | st.builds(Usage, st.integers(0, 99), st.integers(0, 99), st.integers(0, 199)))
    return Delta(
        content,
        finish_reason=draw(st.none() | st.sampled_from(["stop", "length", "tool_calls", "content_filter"])),
        usage=usage,
        tool_calls=draw(st.none() | st.lists(st.dictionaries(st.text(max_size=6), _json, max_size=3), max_size=2)),
        reasoning_content=draw(_maybe_text),
        reasoning=draw(_maybe_text),
        refusal=draw(_maybe_text),
        logprobs=draw(st.none() | st.dictionaries(st.text(max_size=6), _json, max_size=2)),
        extra=draw(st.dictionaries(st.sampled_from(["audio", "annotations", "x_vendor"]), _json, max_size=2)),
    )


def _twins(kind: str, model: str, include_usage: bool, pad_bytes: int) -> tuple[ChunkEncoder, ChunkEncoder]:
    args: dict[str, Any] = {"model": model, "kind": kind, "include_usage": include_usage, "pad_bytes": pad_bytes}
    return ChunkEncoder(**args, id="chatcmpl-twin", created=1), ChunkEncoder(**args, id="chatcmpl-twin", created=1)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["chat", "completion"]),
    st.text(max_size=16),
    st.booleans(),
    st.sampled_from([0, 5, 64]),
    st.lists(deltas(), min_size=1, max_size=12),
)
def test_every_delta_gives_the_general_paths_bytes(
    kind: str, model: str, include_usage: bool, pad_bytes: int, stream: list[Delta]
) -> None:
    fast, general = _twins(kind, model, include_usage, pad_bytes)
    for delta in stream:
        assert fast.encode(delta) == general._encode(delta)
    assert fast.usage == general.usage
    assert fast.done() == general.done()


def test_text_deltas_after_the_first_take_the_template() -> None:
    fast, _ = _twins("chat", "m", include_usage=True, pad_bytes=0)
    fast.encode(Delta("Hi"))  # the first chunk names the role: general path, and nothing cut yet
    assert not fast._text_cut
    event = fast.encode(Delta('a "quoted" \\ line\n and é 👋'))
    assert fast._text_event is not None
    head, tail = fast._text_event
    assert event.startswith(head) and event.endswith(tail)
    chunk = json.loads(event[6:])
    assert chunk["choices"] == [
        {"index": 0, "delta": {"content": 'a "quoted" \\ line\n and é 👋'}, "logprobs": None, "finish_reason": None}
    ]
    assert chunk["usage"] is None


def test_a_model_named_like_the_marker_leaves_every_delta_to_the_general_path() -> None:
    fast, general = _twins("chat", "\x00", include_usage=False, pad_bytes=0)
    for delta in (Delta("a"), Delta("b"), Delta("", finish_reason="stop")):
        assert fast.encode(delta) == general._encode(delta)
    assert fast._text_cut and fast._text_event is None
