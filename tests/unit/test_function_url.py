"""The Function URL's wire pieces without a socket: events built and read back, preludes refused or decoded.
(tests/protocol and tests/reliability/test_security.py drive them over real sockets.)"""

from __future__ import annotations

import pytest
from aws_lambda_powertools.utilities.data_classes import LambdaFunctionUrlEvent

from sagestream.function_url import PreludeDecoder, PreludeError, build_event, encode_prelude, event_body


def test_an_event_reads_back_through_powertools_data_class_and_its_body_as_bytes() -> None:
    event = build_event(
        method="POST",
        raw_path="/v1/chat/completions",
        raw_query="a=1",
        headers=[("Content-Type", "application/octet-stream")],
        body=b"\xff\x00bytes",
        source_ip="127.0.0.1",
    )
    parsed = LambdaFunctionUrlEvent(event)
    assert (parsed.raw_path, parsed.request_context.http.method) == ("/v1/chat/completions", "POST")
    assert event_body(event) == b"\xff\x00bytes"


def test_a_prelude_split_anywhere_decodes_once_whole() -> None:
    data = encode_prelude(201, {"x-a": "1"}, ["c=1"]) + b"body"
    for cut in range(1, len(data)):
        decoder = PreludeDecoder()
        first = decoder.feed(data[:cut])
        prelude = first or decoder.feed(data[cut:])
        assert prelude is not None and (prelude.status, prelude.cookies) == (201, ("c=1",)), cut


@pytest.mark.parametrize("headers", [{"x-evil": "a\r\nb: c"}, {"x-nul": "a\x00"}])
def test_a_header_that_could_break_the_prelude_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(PreludeError):
        encode_prelude(200, headers)
