"""The local REST front (``make run FRONT=rest``), on real sockets: the function behind it gets API Gateway's
payload 1.0 event and streams through it as through the Function URL; API Gateway's own 403 and 429 come
before the function runs; the function reads the 1.0 event into the same request and logs the key's id."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import APIGatewayProxyEventModel
from tests.client import gaps_ms, request
from tests.conftest import PYTHONPATH
from tests.e2e.conftest import FAST

from sagestream.http import Request
from sagestream_local.function_url import FunctionURL
from sagestream_local.rest_front import ApiGateway, UsagePlan, key_id, rest_front
from sagestream_local.runtime_api import Pool
from sagestream_local.stack import LocalStack

KEY_A, KEY_B = "sk-rest-aaaaaaaa", "sk-rest-bbbbbbbb"  # made up for these tests


@pytest.fixture
def behind_gateway() -> Iterator[Callable[..., FunctionURL]]:
    """A test handler in real runtime processes behind the local REST front: ``behind_gateway(handler, ...)``."""
    with ExitStack() as stack:

        def start(handler: str, keys: tuple[str, ...] = (), rate: float = 100.0, burst: int = 100) -> FunctionURL:
            pool = stack.enter_context(
                Pool(
                    size=1,
                    timeout_s=30.0,
                    env={"_HANDLER": handler, "PYTHONPATH": PYTHONPATH},
                    command=[sys.executable, "-m", "sagestream.lambda_runtime"],
                )
            )
            gateway = ApiGateway(keys, UsagePlan(rate, burst), stage="dev")
            return stack.enter_context(rest_front(pool, gateway, port=0))

        yield start


def test_the_function_gets_api_gateways_payload_1_0_event(behind_gateway: Callable[..., FunctionURL]) -> None:
    front = behind_gateway("tests.handlers.echo", keys=(KEY_A,))
    body = {"messages": [{"role": "user", "content": "hi"}]}
    response = request(
        front.url, "POST", "/v1/chat/completions?a=1&a=2&b=", body, headers={"x-api-key": KEY_A, "X-Two": "1"}
    )
    assert response.status == 200
    event = response.json()["event"]
    parsed = APIGatewayProxyEventModel.model_validate(event)
    assert (parsed.httpMethod, parsed.resource, parsed.path) == ("POST", "/{proxy+}", "/v1/chat/completions")
    assert parsed.pathParameters == {"proxy": "v1/chat/completions"}
    assert parsed.requestContext.stage == "dev" and parsed.requestContext.path == "/dev/v1/chat/completions"
    assert parsed.multiValueQueryStringParameters == {"a": ["1", "2"], "b": [""]}
    assert parsed.queryStringParameters == {"a": "2", "b": ""}  # API Gateway keeps the last of repeated values
    assert event["headers"]["X-Two"] == "1"  # names keep their case in a 1.0 event
    assert parsed.requestContext.identity.apiKeyId == key_id(KEY_A) and parsed.requestContext.identity.sourceIp
    request_seen = Request.from_event(event)  # and the function reads it into the request the URL would give
    assert (request_seen.method, request_seen.path, json.loads(request_seen.body)) == (
        "POST",
        "/v1/chat/completions",
        body,
    )
    assert request_seen.query == {"a": "1,2", "b": ""} and request_seen.headers["x-two"] == "1"
    assert request_seen.caller == f"apikey:{key_id(KEY_A)}"
    root = request(front.url, "GET", "/", headers={"x-api-key": KEY_A}).json()["event"]
    assert (root["resource"], root["pathParameters"], Request.from_event(root).path) == ("/", None, "/")


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "sk-rest-wrong"}, {"authorization": f"Bearer {KEY_A}"}])
def test_a_missing_or_wrong_key_is_api_gateways_403_and_never_reaches_the_function(
    behind_gateway: Callable[..., FunctionURL], headers: dict[str, str]
) -> None:
    front = behind_gateway("tests.handlers.echo", keys=(KEY_A,))
    for path in ("/v1/models", "/health", "/"):  # every method requires the key (ApiKeyRequired on ANY)
        response = request(front.url, "GET", path, headers=headers)
        assert (response.status, response.body) == (403, b'{"message":"Forbidden"}')
        assert response.header("x-amzn-ErrorType") == "ForbiddenException"
        assert response.header("x-echo") is None  # the function did not answer
    assert request(front.url, "GET", "/v1/models", headers={"x-api-key": KEY_A}).status == 200  # served after


def test_past_the_usage_plans_rate_a_key_gets_api_gateways_429_and_another_key_does_not(
    behind_gateway: Callable[..., FunctionURL],
) -> None:
    front = behind_gateway("tests.handlers.echo", keys=(KEY_A, KEY_B), rate=2.0, burst=3)
    statuses = [request(front.url, "GET", "/x", headers={"x-api-key": KEY_A}).status for _ in range(6)]
    # Six requests within a fraction of a second: the burst of three, perhaps one more refilled token, then 429s.
    assert statuses[:3] == [200, 200, 200] and statuses.count(429) >= 2, statuses
    refused = request(front.url, "GET", "/x", headers={"x-api-key": KEY_A})
    assert (refused.status, refused.body) == (429, b'{"message":"Too Many Requests"}')
    assert refused.header("x-amzn-ErrorType") == "TooManyRequestsException"
    assert request(front.url, "GET", "/x", headers={"x-api-key": KEY_B}).status == 200  # a bucket per key
    time.sleep(1.0)  # two tokens back at two a second
    assert request(front.url, "GET", "/x", headers={"x-api-key": KEY_A}).status == 200


def test_without_keys_the_front_is_open_and_the_event_names_no_key(behind_gateway: Callable[..., FunctionURL]) -> None:
    front = behind_gateway("tests.handlers.echo")
    event = request(front.url, "GET", "/v1/models", headers={"x-api-key": "anything"}).json()["event"]
    assert event["requestContext"]["identity"]["apiKeyId"] is None
    assert Request.from_event(event).caller is None


# --- the product behind it: make run FRONT=rest --------------------------------------------------------------


@pytest.fixture(scope="module")
def rest_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, Path]]:
    log = tmp_path_factory.mktemp("rest") / "runtime.log"
    with log.open("w") as out:
        stack = LocalStack(
            port=0,
            concurrency=1,
            timeout_s=60.0,
            env={"PYTHONPATH": PYTHONPATH, "API_KEYS": f"{KEY_A},{KEY_B}", "UPSTREAM_MAX_ATTEMPTS": "1"},
            scenario=FAST.replace(ttft_ms=5, cadence_ms=20, tokens=12),
            upstream="simulated",
            front="rest",
            stdout=out,
        )
        stack.start()
        try:
            yield stack, log
        finally:
            stack.stop()


def _record_with(log: Path, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if request_id in line and '"message":"invocation"' in line:
                record: dict[str, Any] = json.loads(line)
                return record
        time.sleep(0.05)
    raise AssertionError(f"no invocation record for {request_id}")


def test_a_chat_streams_through_the_rest_front_delta_by_delta(
    rest_stack: tuple[LocalStack, Path],
) -> None:
    stack, log = rest_stack
    assert stack.env["API_KEY_SOURCE"] == "gateway"  # as the template sets it with Front=RestApi
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    response = request(stack.url, "POST", "/v1/chat/completions", body, headers={"x-api-key": KEY_B})
    assert response.status == 200 and (response.header("content-type") or "").startswith("text/event-stream")
    events = response.data_events()
    assert events[-1] == "[DONE]" and len(events) >= 12
    # Delta by delta at the endpoint's 20 ms cadence, not one buffered burst: most gaps are well above 1 ms.
    gaps = gaps_ms(response.events()[1:-2])
    assert sum(g > 5 for g in gaps) >= len(gaps) // 2, gaps
    assert KEY_B not in log.read_text()  # the key itself is never logged


def test_the_invocation_record_names_api_gateways_key_id(rest_stack: tuple[LocalStack, Path]) -> None:
    stack, log = rest_stack
    response = request(stack.url, "GET", "/v1/models", headers={"x-api-key": KEY_B})
    assert response.status == 200
    record = _record_with(log, response.header("x-request-id") or "")
    assert record["caller"] == f"apikey:{key_id(KEY_B)}"


def test_the_function_behind_the_rest_front_refuses_bad_input_in_its_own_shape(
    rest_stack: tuple[LocalStack, Path],
) -> None:
    stack, _ = rest_stack
    json_type = {"x-api-key": KEY_A, "content-type": "application/json"}
    bad = request(stack.url, "POST", "/v1/chat/completions", b"{not json", headers=json_type)
    assert bad.status == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    messages = request(stack.url, "POST", "/v1/messages", {"model": "x"}, headers={"x-api-key": KEY_A})  # unknown model
    assert messages.status == 404 and messages.json()["type"] == "error"  # Anthropic's shape on /v1/messages
    assert request(stack.url, "GET", "/v1/models", headers={"x-api-key": KEY_A}).status == 200
    assert request(stack.url, "GET", "/v1/models").body == b'{"message":"Forbidden"}'
