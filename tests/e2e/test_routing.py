"""SageMaker routing and request correlation end to end: what the simulated endpoint saw (the headers botocore
made of the function's parameters) for each route, dialect and answer shape; the refusals; the log record;
and the first-token effect of a repeated ``prompt_cache_key`` through the openai SDK."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sagestream_local.endpoint import Record
from sagestream_local.measure import measure
from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.client import StreamedResponse, request
from tests.e2e.conftest import GetStack
from tests.e2e.test_relay import DIALECT_ENV
from tests.e2e.test_telemetry import Captured, _captured, logs

openai = pytest.importorskip("openai")

ROUTED = {"PREFIX_AWARE_ROUTING": "true"}
ROUTES = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me about rivers"}]}),
    "completion": ("/v1/completions", {"prompt": "Once upon a time"}),
}
KEY = "conversation-42"


def call(stack: LocalStack, route: str, stream: bool, **fields: Any) -> tuple[StreamedResponse, list[Record]]:
    assert stack.endpoint is not None
    stack.endpoint.clear_records()
    path, body = ROUTES[route]
    resp = request(stack.url, "POST", path, {**body, "stream": stream, "max_tokens": 4, **fields})
    return resp, stack.endpoint.records


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_with_routing_on_each_call_carries_the_request_id_and_the_prompt_cache_key(
    stack_for: GetStack, dialect: str, stream: bool
) -> None:
    stack = stack_for(**DIALECT_ENV[dialect], **ROUTED)
    resp, (record,) = call(stack, "chat", stream, prompt_cache_key=KEY)
    assert resp.status == 200, resp.body
    assert record.operation == ("InvokeEndpointWithResponseStream" if stream else "InvokeEndpoint")
    assert record.inference_id == resp.header("x-request-id") and record.inference_id
    assert record.prefix_aware_id == KEY
    # Still in the body where the container understands it (OpenAI's field); a generate request has no such field.
    assert ("prompt_cache_key" in json.loads(record.body)) == (dialect == "openai")
    if dialect == "openai":
        assert json.loads(record.body)["prompt_cache_key"] == KEY
    # Completions have no prompt_cache_key in OpenAI's API: the request id alone.
    resp, (record,) = call(stack, "completion", stream)
    assert resp.status == 200, resp.body
    assert (record.inference_id, record.prefix_aware_id) == (resp.header("x-request-id"), None)


@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_with_routing_off_the_request_id_still_goes_and_prompt_cache_key_is_as_before(
    stack_for: GetStack, dialect: str
) -> None:
    stack = stack_for(**DIALECT_ENV[dialect])
    resp, records = call(stack, "chat", True, prompt_cache_key=KEY)
    if dialect == "openai":
        (record,) = records
        assert resp.status == 200
        assert (record.inference_id, record.prefix_aware_id) == (resp.header("x-request-id"), None)
        assert json.loads(record.body)["prompt_cache_key"] == KEY
    else:
        assert resp.status == 400 and resp.json()["error"]["param"] == "prompt_cache_key"
        assert records == []
    resp, (record,) = call(stack, "chat", False)
    assert (record.inference_id, record.prefix_aware_id) == (resp.header("x-request-id"), None)


@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_a_key_sagemaker_cannot_take_is_refused_by_name_before_the_endpoint(stack_for: GetStack, dialect: str) -> None:
    stack = stack_for(**DIALECT_ENV[dialect], **ROUTED)
    for key, code in (("k" * 65, "string_above_max_length"), ("café", "invalid_value"), ("", "invalid_value")):
        resp, records = call(stack, "chat", True, prompt_cache_key=key)
        assert resp.status == 400, (key, resp.body)
        error = resp.json()["error"]
        assert (error["param"], error["code"], error["type"]) == ("prompt_cache_key", code, "invalid_request_error")
        assert records == [], "a refused request does not reach the endpoint"


def test_each_model_may_turn_routing_on_or_off_against_the_global_setting(stack_for: GetStack) -> None:
    models = {"routed": {"endpoint": "llm-a"}, "plain": {"endpoint": "llm-b", "prefix_aware_routing": False}}
    stack = stack_for(MODELS=json.dumps(models), SAGEMAKER_ENDPOINT_NAME="", **ROUTED)
    _, (routed,) = call(stack, "chat", True, model="routed", prompt_cache_key=KEY)
    _, (plain,) = call(stack, "chat", True, model="plain", prompt_cache_key=KEY)
    assert (routed.endpoint, routed.prefix_aware_id) == ("llm-a", KEY)
    assert (plain.endpoint, plain.prefix_aware_id) == ("llm-b", None)
    assert json.loads(plain.body)["prompt_cache_key"] == KEY, "forwarded in the body, as without routing"


# --- the log record --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def routed_log() -> Iterator[Captured]:
    yield from _captured(ROUTED)


def test_the_log_record_names_the_ids_sagemaker_recorded_the_call_by(routed_log: Captured) -> None:
    assert routed_log.stack.endpoint is not None
    routed_log.stack.endpoint.clear_records()
    body = {"messages": [{"role": "user", "content": "Hi"}], "stream": True, "prompt_cache_key": KEY}
    resp, lines = routed_log.call(body=body)
    (record,) = logs(lines)
    (seen,) = routed_log.stack.endpoint.records
    request_id = resp.header("x-request-id")
    assert record.data["function_request_id"] == record.data["inference_id"] == seen.inference_id == request_id
    assert record.data["prefix_aware_id"] == seen.prefix_aware_id == KEY
    # A request refused before any call names no ids SageMaker never saw.
    resp, lines = routed_log.call(body={**body, "prompt_cache_key": "café"})
    (refused,) = logs(lines)
    assert resp.status == 400 and refused.data["error_code"] == "invalid_value"
    assert "inference_id" not in refused.data and "prefix_aware_id" not in refused.data
    assert refused.data["function_request_id"] == resp.header("x-request-id")


# --- the effect, through the openai SDK ------------------------------------------------------------------


def test_the_sdks_prompt_cache_key_routes_a_conversations_next_turn_to_its_cached_prefix(stack_for: GetStack) -> None:
    stack = stack_for(**ROUTED)
    assert stack.endpoint is not None and stack.url.startswith("http://127.0.0.1:")
    # A slow prefill for a new prefix, a fast one for a cached prefix: far apart, so load cannot blur them.
    miss_ms = 600.0
    stack.endpoint.set_scenario(ttft_ms=miss_ms, prefix_hit_ttft_ms=20.0, tokens=4)
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused-in-iam-mode", max_retries=0)
    client.chat.completions.create(model=SIM_ENDPOINT_NAME, messages=[{"role": "user", "content": "warm up"}])
    stack.endpoint.clear_records()
    ttft_ms = []
    for _turn in range(2):
        started = time.monotonic()
        with client.chat.completions.create(
            model=SIM_ENDPOINT_NAME,
            messages=[{"role": "user", "content": "Hi"}],
            stream=True,
            prompt_cache_key="thread-9",
        ) as stream:
            first = None
            for chunk in stream:
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.monotonic()
        assert first is not None
        ttft_ms.append((first - started) * 1000)
    new, repeated = stack.endpoint.records
    assert (new.prefix_aware_id, repeated.prefix_aware_id) == ("thread-9", "thread-9")
    assert (new.prefix_hit, repeated.prefix_hit) == (False, True)
    assert ttft_ms[0] >= miss_ms
    assert ttft_ms[1] < ttft_ms[0], ttft_ms
    print(f"time to first token through the function: new prefix {ttft_ms[0]:.1f} ms, repeated {ttft_ms[1]:.1f} ms")


def test_make_measure_sends_one_prompt_cache_key_in_every_run(stack_for: GetStack) -> None:
    stack = stack_for(**ROUTED)
    assert stack.endpoint is not None
    runs = measure(stack.url, runs=3, max_tokens=4, prompt_cache_key="measured")
    assert [r.status for r in runs] == [200, 200, 200]
    assert [(r.prefix_aware_id, r.prefix_hit) for r in stack.endpoint.records] == [
        ("measured", False),
        ("measured", True),
        ("measured", True),
    ]
    assert [r.inference_id for r in stack.endpoint.records] == [r.request_id for r in runs]
