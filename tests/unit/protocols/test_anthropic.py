"""The Anthropic API's routes through the app: refusals in its shape, its request-id header, count_tokens."""

from __future__ import annotations

import json
from typing import Any

from sagestream_local.endpoint import Scenario, exception_frame, payload_part_frame
from tests.fakes import Upstream, event_stream_response
from tests.unit.protocols.anthropic.test_encoder import (
    ASK,
    ASK_BODY,
    accumulated,
    anthropic_error,
    dialects_answer,
    events,
    messages_app,
)
from tests.unit.test_app import run


def test_every_refusal_on_the_route_has_anthropics_shape_and_status() -> None:
    keyed = messages_app(AUTH_MODE="api_key", API_KEYS="k-1")
    assert anthropic_error(run(keyed, "POST", "/v1/messages", ASK_BODY))[:2] == (401, "authentication_error")
    for key in ({"x-api-key": "k-1"}, {"authorization": "Bearer k-1"}):  # what the SDK sends for api_key, auth_token
        ok = run(
            keyed, "POST", "/v1/messages", {**ASK_BODY, "stream": False}, {**key, "anthropic-version": "2023-06-01"}
        )
        assert ok.status == 200 and json.loads(ok.body)["type"] == "message"
    open_app = messages_app()
    assert anthropic_error(run(open_app, "POST", "/v1/messages", {**ASK_BODY, "model": "nope"}))[:2] == (
        404,
        "not_found_error",
    )
    huge = {**ASK_BODY, "messages": [{"role": "user", "content": "x" * 7_000_000}]}
    assert anthropic_error(run(open_app, "POST", "/v1/messages", huge))[:2] == (413, "request_too_large")
    assert anthropic_error(run(open_app, "GET", "/v1/messages"))[:2] == (405, "invalid_request_error")
    # Any beta is accepted (Claude Code sends eight): only a body field using what the relay lacks is refused.
    betas = "claude-code-20250219,context-management-2025-06-27,effort-2025-11-24,context-1m-2025-08-07"
    assert run(open_app, "POST", "/v1/messages", ASK_BODY, {"anthropic-beta": betas}).status == 200
    status, kind, message = anthropic_error(
        run(open_app, "POST", "/v1/messages", {**ASK_BODY, "container": "c-1"}, {"anthropic-beta": betas})
    )
    assert (status, kind) == (400, "invalid_request_error") and "'container'" in message
    # The OpenAI routes keep OpenAI's shape.
    assert "error" in json.loads(run(open_app, "POST", "/v1/chat/completions", {"messages": "x"}).body)


def test_an_anthropic_path_this_endpoint_lacks_is_refused_in_anthropics_shape() -> None:
    # client.messages.batches.create() and the like: the SDK's user gets Anthropic's error, key check first.
    keyed = messages_app(AUTH_MODE="api_key", API_KEYS="k-1")
    assert anthropic_error(run(keyed, "POST", "/v1/messages/batches", {}))[:2] == (401, "authentication_error")
    status, kind, message = anthropic_error(run(keyed, "POST", "/v1/messages/batches", {}, {"x-api-key": "k-1"}))
    assert (status, kind) == (404, "not_found_error") and "/v1/messages/batches" in message


def test_the_anthropic_sdk_finds_the_request_id_under_its_own_header() -> None:
    # The SDK reads request-id (message._request_id, APIStatusError.request_id), not x-request-id: the id a
    # user quotes to find the log record must reach it there, on answers and refusals alike.
    from anthropic import APIStatusError

    handler = messages_app()
    for method, path, body in (
        ("POST", "/v1/messages", {**ASK_BODY, "stream": False}),
        ("POST", "/v1/messages", {**ASK_BODY, "stream": True}),
        ("POST", "/v1/messages", {**ASK_BODY, "max_tokens": 0}),
        ("POST", "/v1/messages/count_tokens", {"model": "unit-llm", "messages": ASK}),
        ("POST", "/v1/messages/batches", {}),
    ):
        resp = run(handler, method, path, body)
        assert resp.headers["x-request-id"] and resp.headers.get("request-id") == resp.headers["x-request-id"], path
    refused = run(handler, "POST", "/v1/messages", {**ASK_BODY, "max_tokens": 0})
    import httpx

    err = APIStatusError(
        "refused",
        response=httpx.Response(refused.status, headers=refused.headers, request=httpx.Request("POST", "http://x")),
        body=json.loads(refused.body),
    )
    assert err.request_id == refused.headers["x-request-id"]
    # The OpenAI routes keep their one header.
    assert "request-id" not in run(handler, "POST", "/v1/chat/completions", {"messages": ASK}).headers


def test_a_stream_through_the_app_is_one_write_per_delta_and_ends_with_message_stop() -> None:
    upstream = Upstream(scenario=Scenario(ttft_ms=0, cadence_ms=0, tokens=5, non_ascii=0))
    stream = run(messages_app(upstream), "POST", "/v1/messages", {**ASK_BODY, "stream": True})
    assert stream.status == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    data = b"".join(stream.writes)
    message = accumulated(data)
    assert message.stop_reason == "end_turn" and message.usage.output_tokens == 5
    text_writes = [w for w in stream.writes if w.startswith(b"event: content_block_delta")]
    assert len(text_writes) >= 4  # one write per delta after the first
    sent = json.loads(upstream.calls[-1][3])
    assert sent["stream_options"] == {"include_usage": True}


def test_a_fault_after_the_first_byte_is_anthropics_error_event_and_no_message_stop() -> None:
    token = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    failure = exception_frame("ModelStreamError", {"Message": "the model died", "ErrorCode": "ModelError"})

    def fail_after_one_token(operation: str, payload: Any) -> Any:
        return event_stream_response([payload_part_frame(token), failure])

    stream = run(
        messages_app(Upstream(override=fail_after_one_token)), "POST", "/v1/messages", {**ASK_BODY, "stream": True}
    )
    parsed = events(b"".join(stream.writes))
    assert parsed[-1][0] == "error" and parsed[-1][1]["type"] == "error"
    assert "message_stop" not in [name for name, _ in parsed]


def test_count_tokens_is_the_containers_own_prompt_count() -> None:
    upstream = Upstream()
    resp = run(messages_app(upstream), "POST", "/v1/messages/count_tokens", {"model": "unit-llm", "messages": ASK})
    assert resp.status == 200
    sent = json.loads(upstream.calls[-1][3])
    assert sent["max_tokens"] == 1 and sent["stream"] is False
    whole = json.loads(dialects_answer(upstream))
    assert json.loads(resp.body) == {"input_tokens": whole["usage"]["prompt_tokens"]}


def test_count_tokens_notes_the_inference_id_its_call_carried_in_the_log_record() -> None:
    upstream = Upstream()
    handler = messages_app(upstream)
    records: list[Any] = []
    finish = handler.telemetry.finish
    handler.telemetry.finish = lambda record, **kw: (records.append(record), finish(record, **kw))
    resp = run(handler, "POST", "/v1/messages/count_tokens", {"model": "unit-llm", "messages": ASK})
    assert resp.status == 200
    sent = upstream.calls[-1][2]["X-Amzn-SageMaker-Inference-Id"]  # as the stub keeps it: str() of the bytes
    assert records[-1].inference_id is not None and sent == str(records[-1].inference_id.encode())


def test_count_tokens_takes_the_sdks_count_params_only() -> None:
    from anthropic.types import message_count_tokens_params, message_create_params

    count_only = set(message_count_tokens_params.MessageCountTokensParams.__annotations__)
    create = set(message_create_params.MessageCreateParamsBase.__annotations__) | {"stream", "temperature", "top_k"}
    for field in sorted(create - count_only):
        body = {"model": "unit-llm", "messages": ASK, field: None}
        status, _, message = anthropic_error(run(messages_app(), "POST", "/v1/messages/count_tokens", body))
        assert status == 400 and message == f"{field}: Extra inputs are not permitted"


def test_count_tokens_says_why_when_the_container_reports_no_prompt_count() -> None:
    upstream = Upstream(scenario=Scenario(ttft_ms=0, cadence_ms=0, tokens=3, dialect="tgi"))
    tgi = messages_app(upstream, UPSTREAM_FORMAT="tgi", PROMPT_TEMPLATE="chatml")
    status, kind, message = anthropic_error(
        run(tgi, "POST", "/v1/messages/count_tokens", {"model": "unit-llm", "messages": ASK})
    )
    assert (status, kind) == (501, "api_error") and "does not estimate" in message
