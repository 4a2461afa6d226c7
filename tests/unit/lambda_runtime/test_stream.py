"""The streamed response's rules that need no Runtime API (tests/protocol/test_runtime.py sends real ones)."""

from __future__ import annotations

import http.client

import pytest

from sagestream.lambda_runtime.stream import StreamingResponse, _chunk


def _never(timeout: float | None) -> http.client.HTTPConnection:
    raise AssertionError("no connection is made for this")


def test_a_write_before_start_is_refused_and_nothing_is_sent() -> None:
    response = StreamingResponse(_never, "/2018-06-01/runtime/invocation/r/response", "r")
    assert not response.started
    with pytest.raises(RuntimeError, match="before start"):
        response.write(b"x")


def test_a_bad_header_is_refused_before_any_connection() -> None:
    response = StreamingResponse(_never, "/p", "r")
    with pytest.raises(ValueError):
        response.start(200, {"x-a": "one\r\ntwo"})
    assert not response.started


def test_a_chunk_is_its_length_in_hex_then_the_bytes() -> None:
    assert _chunk(b"x" * 26) == b"1a\r\n" + b"x" * 26 + b"\r\n"
