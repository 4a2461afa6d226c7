"""The request as the routes read it from a Function URL event, the writer, and what a route answers to."""

from __future__ import annotations

import base64

from sagestream import http
from sagestream.function_url import build_event
from tests.fakes import RecordingStream


def test_a_function_url_event_is_read_into_one_request() -> None:
    event = build_event(
        method="POST",
        raw_path="/v1/chat/completions",
        raw_query="x=1",
        headers=[("Content-Type", "application/json")],
        body=b'{"a":1}',
        source_ip="127.0.0.1",
    )
    event["requestContext"]["authorizer"] = {"iam": {"userArn": "arn:aws:iam::1:user/u"}}
    request = http.Request.from_event(event)
    assert (request.method, request.path, request.body) == ("POST", "/v1/chat/completions", b'{"a":1}')
    assert request.headers["content-type"] == "application/json" and request.query == {"x": "1"}
    assert request.caller == "arn:aws:iam::1:user/u" and request.url_request_id == event["requestContext"]["requestId"]


def test_a_base64_body_is_decoded_and_an_empty_event_is_a_get_of_the_root() -> None:
    event = {"rawPath": "/x", "body": base64.b64encode(b"\x00\xff").decode(), "isBase64Encoded": True}
    assert http.Request.from_event(event).body == b"\x00\xff"
    empty = http.Request.from_event({})
    assert (empty.method, empty.path, empty.body, dict(empty.headers)) == ("GET", "/", b"", {})


def test_every_get_route_answers_head_too() -> None:
    assert http.Route("/health", ("GET",), lambda app, call: None).methods == ("GET", "HEAD")
    assert http.Route("/v1/x", ("POST",), lambda app, call: None).methods == ("POST",)


def test_the_response_starts_only_with_the_first_bytes() -> None:
    stream = RecordingStream()
    writer = http.Writer(stream, "r-1")
    writer.write(b"")
    assert not stream.started
    writer.write(b"data: x\n\n", 200, http.SSE_HEADERS)
    writer.write(b"data: y\n\n", 500, {})  # status and headers are fixed by the first write
    assert stream.status == 200 and stream.headers["x-request-id"] == "r-1"
    assert stream.writes == [b"data: x\n\n", b"data: y\n\n"]
