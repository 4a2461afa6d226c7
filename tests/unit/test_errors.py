"""The one error shape: OpenAI's four fields, the type each status implies, and the headers that go with it."""

from __future__ import annotations

import json

import pytest

from sagestream.errors import APIError


def test_the_body_has_exactly_openais_four_fields() -> None:
    err = APIError.invalid_request("bad", param="messages", code="invalid_type")
    assert json.loads(err.json_bytes()) == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "messages", "code": "invalid_type"}
    }


@pytest.mark.parametrize(
    ("status", "type"), [(400, "invalid_request_error"), (429, "rate_limit_error"), (502, "server_error")]
)
def test_an_upstream_errors_type_follows_its_status(status: int, type: str) -> None:
    assert APIError.upstream(status, "x", code="c").type == type


def test_the_constructors_fix_status_code_and_headers() -> None:
    assert APIError.unauthorized().headers == {"WWW-Authenticate": "Bearer"}
    refused = APIError.method_not_allowed("GET", "/v1/chat/completions", "POST")
    assert (refused.status, refused.code, refused.headers) == (405, "method_not_allowed", {"Allow": "POST"})
    assert (APIError.internal().status, APIError.internal().code) == (500, "internal_error")
    assert APIError.not_found("gone").status == 404
