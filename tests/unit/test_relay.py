"""The pump itself: PayloadPart bytes in, (delta, bytes) out, each delta before the next part is asked for,
and faults as stream items once the answer has started."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from sagestream.delta import Delta
from sagestream.dialects import DecodeError, dialect_named
from sagestream.errors import APIError
from sagestream.faults import DeadlineReached
from sagestream.lines import LineTooLong
from sagestream.protocols.openai.encoder import DONE, ChunkEncoder, error_event
from sagestream.relay import KEEPALIVE, KEEPALIVE_EVENT, relay
from sagestream.upstream import SILENCE
from tests.fakes import LMI, RECORDED, TGI, VLLM_CHAT, Recorded


def encoder(kind: Any = "chat", include_usage: bool = False) -> ChunkEncoder:
    return ChunkEncoder(model="m", kind=kind, include_usage=include_usage, id="chatcmpl-1", created=0)


def chunk(text: str = "", finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}
    return b"data: " + json.dumps({"choices": [choice]}, ensure_ascii=False).encode() + b"\n\n"


def events(data: bytes) -> list[Any]:
    return [json.loads(e[6:]) if e != b"data: [DONE]" else "[DONE]" for e in data.split(b"\n\n") if e]


@pytest.mark.parametrize("recorded", RECORDED, ids=lambda r: r.name)
def test_a_recorded_stream_yields_its_deltas_then_done(recorded: Recorded) -> None:
    items = list(relay([recorded.body], dialect_named(recorded.dialect).stream_decoder(), encoder()))
    assert [item for item, _ in items[:-1]] == recorded.deltas
    assert items[-1] == (None, DONE)


def test_each_delta_is_yielded_before_the_next_part_is_asked_for() -> None:
    asked: list[int] = []

    def parts() -> Iterator[bytes]:
        for n, text in enumerate(["a", "b", "c"]):
            asked.append(n)
            yield chunk(text)

    seen: list[tuple[str, list[int]]] = []
    for item, _ in relay(parts(), dialect_named("openai").stream_decoder(), encoder()):
        if isinstance(item, Delta) and item.content:
            seen.append((item.content, list(asked)))
    assert seen == [("a", [0]), ("b", [0, 1]), ("c", [0, 1, 2])]


def test_a_delta_split_across_parts_and_inside_a_character_comes_whole_with_the_part_that_ends_it() -> None:
    body = chunk("Grüß 🙂")
    cut = body.index("🙂".encode()) + 2
    items = relay([body[:cut], body[cut:]], dialect_named("openai").stream_decoder(), encoder())
    first, data = next(items)
    assert isinstance(first, Delta) and first.content == "Grüß 🙂"
    assert events(data)[0]["choices"][0]["delta"] == {"role": "assistant", "content": "Grüß 🙂"}


def test_a_stream_that_never_says_why_it_ended_gets_a_stop_chunk() -> None:
    items = list(relay([chunk("hi")], dialect_named("openai").stream_decoder(), encoder()))
    stop, data = items[-2]
    assert stop == Delta(finish_reason="stop")
    assert events(data)[0]["choices"][0]["finish_reason"] == "stop"
    assert items[-1] == (None, DONE)


def test_an_empty_answer_still_closes_with_a_chunk_and_done() -> None:
    items = list(relay([], dialect_named("tgi").stream_decoder(), encoder("completion")))
    assert [item for item, _ in items] == [Delta(finish_reason="stop"), None]
    assert all(data for _, data in items), "every item of an empty answer writes something"


def test_a_usage_only_delta_yields_no_bytes_and_the_usage_chunk_comes_before_done() -> None:
    items = list(relay([VLLM_CHAT.body], dialect_named("openai").stream_decoder(), encoder(include_usage=True)))
    usage_only = [(item, data) for item, data in items if isinstance(item, Delta) and item.usage is not None]
    assert usage_only and usage_only[0][1] == b""
    last = events(items[-1][1])
    assert last[-1] == "[DONE]" and last[0]["usage"]["completion_tokens"] == 3


def test_nothing_after_the_dialects_end_is_read() -> None:
    def parts() -> Iterator[bytes]:
        yield TGI.body
        raise AssertionError("a part after the end was asked for")

    items = list(relay(parts(), dialect_named("tgi").stream_decoder(), encoder()))
    assert items[-1] == (None, DONE)


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        (DeadlineReached(), "deadline_exceeded"),
        (LineTooLong(8), "upstream_line_too_long"),
        (APIError.upstream(502, "boom", code="model_stream_error"), "model_stream_error"),
    ],
    ids=["deadline", "line", "upstream"],
)
def test_a_fault_before_any_bytes_is_raised_with_its_status(fault: Exception, code: str) -> None:
    def parts() -> Iterator[bytes]:
        yield b": keep-alive\n\n"
        raise fault

    with pytest.raises(APIError) as info:
        list(relay(parts(), dialect_named("openai").stream_decoder(), encoder()))
    assert info.value.code == code


def test_a_fault_after_the_first_bytes_is_the_last_item_and_no_done_follows() -> None:
    def parts() -> Iterator[bytes]:
        yield chunk("partial")
        raise APIError.upstream(502, "The model failed while streaming: boom", code="model_stream_error")

    items = list(relay(parts(), dialect_named("openai").stream_decoder(), encoder()))
    err, data = items[-1]
    assert isinstance(err, APIError) and err.code == "model_stream_error"
    assert data == error_event(err)
    assert all(data != DONE for _, data in items)


def test_the_endpoints_silence_is_a_keepalive_comment_and_starts_the_response() -> None:
    def parts() -> Iterator[bytes]:
        yield SILENCE
        yield SILENCE
        raise APIError.upstream(502, "The model failed while streaming: boom", code="model_stream_error")

    items = list(relay(parts(), dialect_named("openai").stream_decoder(), encoder()))
    assert items[:2] == [(KEEPALIVE, KEEPALIVE_EVENT)] * 2
    # After a keep-alive the status is sent: the fault is the stream's error event, not a raised status.
    err, data = items[-1]
    assert isinstance(err, APIError) and data == error_event(err) and len(items) == 3


def test_a_parser_fault_mid_stream_travels_as_its_error_event() -> None:
    items = list(relay([chunk("ok"), b"data: {not json\n\n"], dialect_named("openai").stream_decoder(), encoder()))
    err, data = items[-1]
    assert isinstance(err, APIError) and err.code == "upstream_decode_error" and err.status == 502
    assert events(data) == [err.body()]


def test_the_deadline_mid_stream_ends_the_answer_with_length_then_its_error() -> None:
    def parts() -> Iterator[bytes]:
        yield LMI.body.split(b"\n")[0] + b"\n"
        raise DeadlineReached()

    items = list(relay(parts(), dialect_named("lmi").stream_decoder(), encoder("completion")))
    (cut, cut_data), (err, err_data) = items[-2:]
    assert cut == Delta(finish_reason="length")
    assert events(cut_data)[0]["choices"][0]["finish_reason"] == "length"
    assert isinstance(err, APIError) and err.code == "deadline_exceeded" and err.status == 504
    assert events(err_data) == [err.body()]


def test_the_decoders_own_exception_never_escapes_unmapped() -> None:
    with pytest.raises(APIError) as info:
        list(relay([b"data: [1]\n\n"], dialect_named("openai").stream_decoder(), encoder()))
    assert not isinstance(info.value, DecodeError) and info.value.code == "upstream_decode_error"
