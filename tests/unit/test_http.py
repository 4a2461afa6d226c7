"""The request as the routes read it from a Function URL (2.0) or REST API (1.0) event, the writer, and what a
route answers to."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from sagestream import http
from sagestream.function_url import build_event
from tests.fakes import RecordingStream

ROOT = Path(__file__).resolve().parents[2]


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


def rest_event(**overrides: Any) -> dict[str, Any]:
    """An API Gateway REST proxy event (payload 1.0), as AWS's guide documents its input format."""
    event: dict[str, Any] = json.loads((ROOT / "events" / "rest-chat.json").read_text())
    event.update(overrides)
    return event


def test_a_rest_event_is_read_as_the_request_it_is_not_as_a_get_of_the_root() -> None:
    event = rest_event()
    request = http.Request.from_event(event)
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.body == event["body"].encode()
    assert request.headers["content-type"] == "application/json" and request.headers["x-api-key"]
    assert all(name == name.lower() for name in request.headers)
    assert request.source_ip == "203.0.113.24" and request.url_request_id == event["requestContext"]["requestId"]
    assert request.api_key_id == "a1b2c3d4e5f6g7" and request.caller == "apikey:a1b2c3d4e5f6g7"
    assert request.query == {}


def test_both_payload_versions_of_one_request_read_alike() -> None:
    rest = rest_event(
        queryStringParameters={"order": "desc", "limit": "2"},
        multiValueQueryStringParameters={"order": ["desc"], "limit": ["1", "2"]},
    )
    url = build_event(
        method="POST",
        raw_path="/v1/chat/completions",
        raw_query="order=desc&limit=1&limit=2",
        headers=[(k, v) for k, v in rest["headers"].items()],
        body=rest["body"].encode(),
        source_ip="203.0.113.24",
    )
    a, b = http.Request.from_event(rest), http.Request.from_event(url)
    assert (a.method, a.path, a.body, a.query, a.source_ip) == (b.method, b.path, b.body, b.query, b.source_ip)
    assert dict(a.headers) == dict(b.headers)
    assert a.query == {"order": "desc", "limit": "1,2"}  # repeated values joined as the Function URL joins them


def test_a_rest_event_prefers_the_multi_value_headers_which_keep_repeats() -> None:
    event = rest_event(
        headers={"Accept": "text/plain", "X-Only-Single": "1"},
        multiValueHeaders={"Accept": ["application/json", "text/plain"]},
    )
    request = http.Request.from_event(event)
    assert request.headers["accept"] == "application/json,text/plain" and request.headers["x-only-single"] == "1"


def test_a_rest_event_path_is_the_one_under_the_api_not_the_domains_base_path() -> None:
    # A custom domain's base path mapping ("/llm") shows in path; the {proxy+} parameter is the API's own path.
    event = rest_event(path="/llm/v1/models", pathParameters={"proxy": "v1/models"}, httpMethod="GET")
    assert http.Request.from_event(event).path == "/v1/models"
    root = rest_event(resource="/", path="/llm", pathParameters=None, httpMethod="GET")
    assert http.Request.from_event(root).path == "/"
    other = rest_event(resource="/health", path="/health", pathParameters=None, httpMethod="get")
    assert (http.Request.from_event(other).method, http.Request.from_event(other).path) == ("GET", "/health")


def test_a_rest_event_carries_the_iam_caller_and_a_base64_body() -> None:
    event = rest_event(body=base64.b64encode(b"\x00\xff").decode(), isBase64Encoded=True)
    event["requestContext"]["identity"].update(userArn="arn:aws:iam::1:user/u", apiKeyId=None, apiKey=None)
    request = http.Request.from_event(event)
    assert request.body == b"\x00\xff"
    assert request.caller == "arn:aws:iam::1:user/u" and request.api_key_id is None


def test_a_rest_event_with_null_maps_reads_as_empty_ones() -> None:
    event = rest_event(headers=None, multiValueHeaders=None, body=None, requestContext={})
    request = http.Request.from_event(event)
    assert (dict(request.headers), request.body, request.query, request.caller) == ({}, b"", {}, None)


def test_a_payload_2_event_is_read_as_one_whatever_else_it_carries() -> None:
    # cargo-lambda's Function URL emulation: a 2.0 event whose serialiser also writes a 1.0 field, httpMethod.
    event = {
        "version": "2.0",
        "httpMethod": "GET",
        "resource": None,
        "rawPath": "/v1/chat/completions",
        "headers": {"content-type": "application/json"},
        "requestContext": {"requestId": "r", "http": {"method": "POST", "path": "/v1/chat/completions"}},
        "body": "{}",
        "isBase64Encoded": False,
    }
    request = http.Request.from_event(event)
    assert (request.method, request.path, request.body) == ("POST", "/v1/chat/completions", b"{}")
