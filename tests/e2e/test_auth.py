"""Access control and CORS through the local chain: keys checked before anything goes upstream, and the
Function URL's CORS answers from ALLOWED_ORIGINS."""

from __future__ import annotations

import pytest

from sagestream_local.stack import LocalStack
from tests.client import StreamedResponse, request
from tests.e2e.conftest import GetStack

CHAT = "/v1/chat/completions"
# Obviously fake keys, made up for these tests.
KEYS = {"API_KEYS": "sk-test-local-one,sk-test-local-two"}
BODY = {"messages": [{"role": "user", "content": "Hello"}], "stream": True}
ORIGIN = "https://chat.example.com"


def chat(stack: LocalStack, headers: dict[str, str] | None = None) -> StreamedResponse:
    return request(stack.url, "POST", CHAT, BODY, headers=headers)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer sk-test-wrong"},
        {"x-api-key": "sk-test-local-on"},
        {"Authorization": "Basic sk-test-local-one"},
    ],
    ids=["missing", "wrong-bearer", "wrong-x-api-key", "not-bearer"],
)
def test_a_missing_or_wrong_key_is_401_and_nothing_goes_upstream(stack_for: GetStack, headers: dict[str, str]) -> None:
    stack = stack_for(**KEYS)
    resp = chat(stack, headers)
    assert resp.status == 401
    assert resp.header("www-authenticate") == "Bearer"
    error = resp.json()["error"]
    assert (error["type"], error["code"]) == ("authentication_error", "invalid_api_key")
    assert set(error) == {"message", "type", "param", "code"}
    assert stack.endpoint is not None and stack.endpoint.records == []


@pytest.mark.parametrize(
    "headers",
    [{"Authorization": "Bearer sk-test-local-one"}, {"x-api-key": "sk-test-local-two"}],
    ids=["bearer", "x-api-key"],
)
def test_a_good_key_streams(stack_for: GetStack, headers: dict[str, str]) -> None:
    stack = stack_for(**KEYS)
    resp = chat(stack, headers)
    assert resp.status == 200
    assert resp.data_events()[-1] == "[DONE]"
    assert stack.endpoint is not None and len(stack.endpoint.records) == 1


def test_every_v1_route_needs_the_key_health_and_the_page_do_not(stack_for: GetStack) -> None:
    stack = stack_for(**KEYS)
    for path in ("/v1/models", "/v1/models/sagestream-sim", "/v1/nothing-here"):
        assert request(stack.url, "GET", path).status == 401, path
    assert request(stack.url, "GET", "/v1/models", headers={"x-api-key": "sk-test-local-one"}).status == 200
    assert request(stack.url, "GET", "/health").status == 200
    page = request(stack.url, "GET", "/")
    assert page.status == 200 and b"api_key" in page.body, "the page is told the auth mode"


def test_without_keys_the_local_default_asks_for_none(stack: LocalStack) -> None:
    assert chat(stack).status == 200  # AUTH_MODE=iam: the Function URL would have checked the signature


# --- CORS --------------------------------------------------------------------------------------------------


def test_a_preflight_from_an_allowed_origin_is_answered_before_the_function(stack_for: GetStack) -> None:
    stack = stack_for(ALLOWED_ORIGINS=f"{ORIGIN},https://other.example.com")
    resp = request(
        stack.url,
        "OPTIONS",
        CHAT,
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert resp.status == 200
    assert resp.header("access-control-allow-origin") == ORIGIN
    assert resp.header("access-control-allow-methods") == "GET, POST"
    assert resp.header("access-control-allow-headers") == "authorization, content-type"
    assert resp.header("access-control-max-age") == "86400"
    assert stack.endpoint is not None and stack.endpoint.records == []


def test_a_preflight_for_the_openai_js_sdks_headers_allows_every_one(stack_for: GetStack) -> None:
    stack = stack_for(ALLOWED_ORIGINS=ORIGIN)
    sdk = "authorization, content-type, x-stainless-lang, x-stainless-os, x-stainless-retry-count, openai-project"
    resp = request(
        stack.url,
        "OPTIONS",
        CHAT,
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": sdk},
    )
    assert resp.header("access-control-allow-headers") == sdk


def test_a_preflight_from_another_origin_gets_no_cors_headers(stack_for: GetStack) -> None:
    stack = stack_for(ALLOWED_ORIGINS=ORIGIN)
    resp = request(
        stack.url,
        "OPTIONS",
        CHAT,
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert resp.header("access-control-allow-origin") is None


def test_streamed_responses_carry_the_allowed_origin(stack_for: GetStack) -> None:
    stack = stack_for(ALLOWED_ORIGINS=ORIGIN)
    resp = chat(stack, {"Origin": ORIGIN})
    assert resp.status == 200 and resp.data_events()[-1] == "[DONE]"
    assert resp.header("access-control-allow-origin") == ORIGIN
    assert resp.header("vary") == "Origin"
    exposed = {h.strip() for h in (resp.header("access-control-expose-headers") or "").split(",")}
    assert {"x-request-id", "x-should-retry", "retry-after", "retry-after-ms"} <= exposed
    other = chat(stack, {"Origin": "https://evil.example"})
    assert other.header("access-control-allow-origin") is None
    assert chat(stack).header("access-control-allow-origin") is None, "no Origin, no CORS headers"


def test_errors_carry_it_too_so_a_browser_can_read_the_401(stack_for: GetStack) -> None:
    stack = stack_for(ALLOWED_ORIGINS=ORIGIN, **KEYS)
    resp = chat(stack, {"Origin": ORIGIN})
    assert resp.status == 401 and resp.header("access-control-allow-origin") == ORIGIN


def test_the_template_default_allows_any_origin(stack: LocalStack) -> None:
    assert chat(stack, {"Origin": ORIGIN}).header("access-control-allow-origin") == "*"
