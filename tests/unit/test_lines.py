"""Lines are cut from bytes wherever PayloadParts fall, and only whole lines become text."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sagestream.errors import APIError
from sagestream.faults import error_from
from sagestream.lines import LineSplitter, LineTooLong, UndecodableLine, decode_line, sse_data


def split_all(parts: list[bytes], max_line_bytes: int = 1 << 20) -> list[bytes]:
    splitter = LineSplitter(max_line_bytes)
    lines = [line for part in parts for line in splitter.feed(part)]
    return lines + splitter.finish()


def reference_split(whole: bytes) -> list[bytes]:
    """Splitting with the whole stream in hand: LF ends a line, a CR right before it goes with it."""
    *complete, tail = whole.split(b"\n")
    lines = [line.removesuffix(b"\r") for line in complete]
    return [*lines, tail] if tail else lines


def cut(data: bytes, points: list[int]) -> list[bytes]:
    bounds = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def test_lf_and_crlf_end_lines_and_the_terminator_is_dropped() -> None:
    assert split_all([b"one\ntwo\r\nthree\n"]) == [b"one", b"two", b"three"]


def test_a_lone_cr_is_content_not_a_line_end() -> None:
    assert split_all([b"a\rb\n\r\n"]) == [b"a\rb", b""]


def test_a_crlf_split_across_parts_is_still_one_terminator() -> None:
    assert split_all([b"line\r", b"\nnext\n"]) == [b"line", b"next"]


def test_feed_returns_only_the_lines_completed_by_that_part() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"par") == []
    assert splitter.feed(b"tial\nnext") == [b"partial"]
    assert splitter.feed(b"\n\n") == [b"next", b""]
    assert splitter.finish() == []


def test_finish_gives_an_unterminated_last_line_once() -> None:
    splitter = LineSplitter()
    splitter.feed(b"done\nleft")
    assert splitter.finish() == [b"left"]
    assert splitter.finish() == []


def test_a_multibyte_character_split_across_parts_arrives_whole() -> None:
    encoded = "é🙂".encode()
    parts = [b'data: "', encoded[:1], encoded[1:3], encoded[3:], b'"\n']
    lines = split_all(parts)
    assert [decode_line(line) for line in lines] == ['data: "é🙂"']


def test_a_line_at_the_cap_passes_and_one_byte_more_raises() -> None:
    assert split_all([b"x" * 8 + b"\n"], max_line_bytes=8) == [b"x" * 8]
    with pytest.raises(LineTooLong) as info:
        split_all([b"x" * 9 + b"\n"], max_line_bytes=8)
    assert error_from(info.value).status == 502
    assert error_from(info.value).code == "upstream_line_too_long"


def test_an_unterminated_line_past_the_cap_raises_before_its_end_arrives() -> None:
    splitter = LineSplitter(max_line_bytes=8)
    splitter.feed(b"x" * 8)
    with pytest.raises(LineTooLong):
        splitter.feed(b"x")


def test_the_cr_of_a_crlf_does_not_count_against_the_cap() -> None:
    splitter = LineSplitter(max_line_bytes=4)
    assert splitter.feed(b"abcd\r") == []
    assert splitter.feed(b"\n") == [b"abcd"]


def test_the_cap_is_per_line_not_per_stream() -> None:
    line = b'data: {"token": "' + b"y" * 50 + b'"}\n'
    lines = split_all([line] * 2000, max_line_bytes=len(line))
    assert len(lines) == 2000


@pytest.mark.timeout(20)
def test_a_long_line_fed_byte_by_byte_takes_linear_time() -> None:
    # Rescanning or copying the buffer on each feed would make this ~10^10 byte operations.
    size = 200_000
    splitter = LineSplitter()
    data = b"z" * size
    for i in range(size):
        assert not splitter.feed(data[i : i + 1])
    assert splitter.feed(b"\n") == [data]


def test_errors_are_plain_exceptions_the_upstream_table_gives_a_status() -> None:
    assert not issubclass(LineTooLong, APIError)
    assert not issubclass(UndecodableLine, APIError)
    assert isinstance(error_from(LineTooLong(8)), APIError)
    assert isinstance(error_from(UndecodableLine("x")), APIError)


def test_invalid_utf8_raises_undecodable_line() -> None:
    with pytest.raises(UndecodableLine) as info:
        decode_line(b"ok \xff\xfe")
    assert error_from(info.value).status == 502
    assert "byte 3" in error_from(info.value).message


def test_a_truncated_multibyte_character_in_a_complete_line_is_undecodable() -> None:
    with pytest.raises(UndecodableLine):
        decode_line("é".encode()[:1])


@pytest.mark.parametrize(
    ("line", "record"),
    [
        ('data: {"a":1}', '{"a":1}'),
        ('data:{"a":1}', '{"a":1}'),
        ("data:  two spaces", " two spaces"),
        ("data: [DONE]", "[DONE]"),
        ("data:", ""),
        ("data", ""),
        ("", None),
        (": keep-alive", None),
        (":", None),
        ("event: message", None),
        ("event", None),
        ("id: 7", None),
        ("retry: 3000", None),
        ('{"token": {"text": "a"}}', '{"token": {"text": "a"}}'),
        ("[DONE]", "[DONE]"),
    ],
)
def test_sse_data_gives_the_record_a_line_carries(line: str, record: str | None) -> None:
    assert sse_data(line) == record


def test_max_line_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_line_bytes"):
        LineSplitter(0)


# Bytes that matter to the splitter, and pieces of multi-byte characters, weighted to come up often.
_interesting = st.sampled_from([b"\n", b"\r", b"\r\n", b"a", b"data: ", "é".encode(), "🙂".encode(), b"\xff"])
_contents = st.lists(st.one_of(_interesting, st.binary(max_size=8)), max_size=40).map(b"".join)


@settings(max_examples=200, deadline=None)
@given(whole=_contents, data=st.data())
def test_any_chunking_splits_like_the_whole_stream(whole: bytes, data: st.DataObject) -> None:
    points = data.draw(st.lists(st.integers(0, len(whole)), max_size=12))
    assert split_all(cut(whole, points)) == reference_split(whole)


@settings(max_examples=50, deadline=None)
@given(whole=_contents)
def test_byte_by_byte_splits_like_the_whole_stream(whole: bytes) -> None:
    assert split_all([whole[i : i + 1] for i in range(len(whole))]) == reference_split(whole)
