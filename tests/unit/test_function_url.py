"""The Function URL's wire pieces without a socket: events built and read back, preludes refused or decoded.
(tests/protocol and tests/reliability/test_security.py drive them over real sockets.)"""

from __future__ import annotations

import pytest
from aws_lambda_powertools.utilities.data_classes import LambdaFunctionUrlEvent
from aws_lambda_powertools.utilities.parser.models import APIGatewayProxyEventModel

from sagestream.function_url import (
    PreludeDecoder,
    PreludeError,
    build_event,
    build_rest_event,
    encode_prelude,
    event_body,
)


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


def test_a_rest_event_is_api_gateways_payload_1_0_and_its_body_reads_back_as_bytes() -> None:
    event = build_rest_event(
        method="post",
        raw_path="/v1/files",
        raw_query="",
        headers=[("Content-Type", "application/octet-stream"), ("Accept", "a"), ("Accept", "b")],
        body=b"\xff\x00bytes",
        source_ip="127.0.0.1",
        stage="prod",
        api_key="sk-x",
        api_key_id="abc123",
    )
    parsed = APIGatewayProxyEventModel.model_validate(event)
    assert (parsed.httpMethod, parsed.requestContext.path, parsed.requestContext.identity.apiKeyId) == (
        "POST",
        "/prod/v1/files",
        "abc123",
    )
    assert event["headers"]["Accept"] == "b" and event["multiValueHeaders"]["Accept"] == ["a", "b"]
    assert event["queryStringParameters"] is None and event["multiValueQueryStringParameters"] is None
    assert event["isBase64Encoded"] is True and event_body(event) == b"\xff\x00bytes"
    empty = build_rest_event(method="GET", raw_path="/", raw_query="", headers=[], body=b"", source_ip="::1")
    assert (empty["body"], empty["headers"], empty["resource"], empty["pathParameters"]) == (None, None, "/", None)
