"""The product end to end: HTTP client → local Function URL → runtime → handler → real boto3 → simulated endpoint."""

from __future__ import annotations

import http.client
import json
import time

import pytest

from sagestream_local.stack import LocalStack
from tests.client import StreamedResponse, gaps_ms, request
from tests.e2e.conftest import GetStack

CHAT = "/v1/chat/completions"


def chat(stack: LocalStack, content: str = "Tell me about rivers", **extra: object) -> StreamedResponse:
    body = {"messages": [{"role": "user", "content": content}], "stream": True, **extra}
    return request(stack.url, "POST", CHAT, body)


def content_of(resp: StreamedResponse) -> str:
    return "".join(
        (e["choices"][0].get("delta", {}).get("content") or e["choices"][0].get("text") or "")
        for e in resp.data_events()
        if isinstance(e, dict) and e.get("choices")
    )


def model_text(stack: LocalStack) -> str:
    """What the simulated model generated for the last request: the tokens it sent, special ones dropped."""
    assert stack.endpoint is not None
    last = stack.endpoint.records[-1]
    # The relay may end at the model's last event before the endpoint's thread has noted that token's send.
    record = stack.endpoint.wait_for_record(lambda r: r is last and r.outcome != "streaming")
    return "".join(t.text for t in record.tokens if not t.special)


def assert_good_stream(resp: StreamedResponse) -> list[dict]:
    assert resp.status == 200, resp.body
    assert resp.header("content-type") == "text/event-stream; charset=utf-8"
    assert resp.header("cache-control") == "no-cache"
    assert resp.header("x-accel-buffering") == "no"
    assert resp.header("x-content-type-options") == "nosniff"
    events = resp.data_events()
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]][-1] is chunks[-1]
    assert len({c["id"] for c in chunks}) == 1
    return chunks


# --- dialects, splits and framings ---------------------------------------------------------------------

DIALECT_ENV = {
    "openai": {},
    "tgi": {"UPSTREAM_FORMAT": "tgi", "PROMPT_TEMPLATE": "chatml"},
    "lmi": {"UPSTREAM_FORMAT": "lmi", "PROMPT_TEMPLATE": "llama3"},
}


@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_every_dialect_split_and_framing_gives_the_models_text_exactly(stack_for: GetStack, dialect: str) -> None:
    stack = stack_for(**DIALECT_ENV[dialect])
    assert stack.endpoint is not None
    seen: dict[tuple[str, str], str] = {}
    for framing in ("chunked", "close"):
        for split in ("none", "midline", "utf8", "coalesce", "bytes"):
            stack.endpoint.set_scenario(split=split, framing=framing)
            resp = chat(stack, "Describe the café and 日本語 text")
            chunks = assert_good_stream(resp)
            text = content_of(resp)
            assert text == model_text(stack), (framing, split)
            assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
            seen[(framing, split)] = text
    assert len(set(seen.values())) == 1, "the same prompt must give the same text however the bytes are cut"
    assert any(ord(c) > 127 for c in next(iter(seen.values()))), "the stream should exercise multi-byte UTF-8"


@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_non_streaming_chat_matches_the_streamed_text(stack_for: GetStack, dialect: str) -> None:
    stack = stack_for(**DIALECT_ENV[dialect])
    streamed = content_of(chat(stack, "Same words please"))
    resp = request(stack.url, "POST", CHAT, {"messages": [{"role": "user", "content": "Same words please"}]})
    assert resp.status == 200
    body = resp.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": streamed, "refusal": None}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert stack.endpoint is not None and stack.endpoint.records[-1].operation == "InvokeEndpoint"


def test_max_tokens_gives_finish_reason_length_and_usage_when_asked(stack: LocalStack) -> None:
    resp = chat(stack, max_tokens=4, stream_options={"include_usage": True})
    events = resp.data_events()
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 4
    finals = [e for e in events[:-2] if e["choices"][0]["finish_reason"]]
    assert [f["choices"][0]["finish_reason"] for f in finals] == ["length"]


def test_completions_route_streams_text_completion_chunks_on_a_native_endpoint(stack_for: GetStack) -> None:
    stack = stack_for(**DIALECT_ENV["tgi"])
    resp = request(stack.url, "POST", "/v1/completions", {"prompt": "Once upon a time", "stream": True})
    events = resp.data_events()
    assert events[-1] == "[DONE]"
    assert all(e["object"] == "text_completion" for e in events[:-1])
    assert content_of(resp) == model_text(stack)
    assert stack.endpoint is not None
    assert stack.endpoint.records[-1].request["inputs"] == "Once upon a time"
    whole = request(stack.url, "POST", "/v1/completions", {"prompt": "Once upon a time"}).json()
    assert whole["object"] == "text_completion" and whole["choices"][0]["text"] == content_of(resp)


def test_chat_on_a_native_endpoint_without_a_prompt_template_is_a_400_that_says_so(stack_for: GetStack) -> None:
    stack = stack_for(UPSTREAM_FORMAT="tgi")
    resp = chat(stack)
    assert resp.status == 400
    error = resp.json()["error"]
    assert error["code"] == "prompt_template_required" and "PROMPT_TEMPLATE" in error["message"]
    assert stack.endpoint is not None and stack.endpoint.records == []


def test_component_and_variant_are_the_configured_ones(stack_for: GetStack) -> None:
    stack = stack_for(INFERENCE_COMPONENT_NAME="ic-llama", TARGET_VARIANT="blue")
    assert chat(stack).status == 200
    assert stack.endpoint is not None
    record = stack.endpoint.records[-1]
    assert (record.endpoint, record.inference_component, record.target_variant) == (
        "sagestream-sim",
        "ic-llama",
        "blue",
    )
    assert record.content_type == "application/json" and record.accept == "application/json"


# --- timing over real sockets ---------------------------------------------------------------------------


def test_eighty_tokens_at_an_eight_ms_cadence_arrive_as_eighty_separate_arrivals(stack: LocalStack) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(tokens=80, cadence_ms=8, ttft_ms=50, non_ascii=0.0)
    together_per_try = []
    # The machine is shared: a neighbour can stall this process for a few ms and let two deltas meet.
    # A relay that holds deltas back fails every try; one clean try shows that this one does not.
    for _ in range(3):
        resp = chat(stack)
        assert_good_stream(resp)
        content_events = [e for e in resp.events() if b'"content":"' in e.data and b'"content":""' not in e.data]
        assert len(content_events) == 80
        together = [g for g in gaps_ms(content_events) if g < 1.0]
        together_per_try.append(len(together))
        if not together:
            break
    assert together_per_try[-1] == 0, f"deltas that arrived within 1 ms of the one before, per try: {together_per_try}"


def test_close_delimited_upstream_is_not_held_back(stack: LocalStack) -> None:
    """botocore's own iteration reads 64 KiB blocks; on a close-delimited body that holds every frame."""
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(tokens=20, cadence_ms=25, ttft_ms=20, framing="close", non_ascii=0.0)
    resp = chat(stack)
    assert_good_stream(resp)
    arrivals = [e for e in resp.events() if b'"content":"' in e.data]
    spread_ms = (arrivals[-1].at - arrivals[0].at) * 1000
    assert spread_ms > 0.6 * 19 * 25, f"deltas arrived within {spread_ms:.0f} ms: held back"
    assert sum(1 for g in gaps_ms(arrivals) if g < 1.0) <= 1


# --- errors before the first byte ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [
        ("http_400", 404, "endpoint_not_found"),  # what SageMaker says of an endpoint that is not there
        ("http_424", 400, "model_error"),  # the container's own 4xx stays a 4xx
        ("throttling", 429, "rate_limited"),
        ("http_429", 503, "model_not_ready"),  # ModelNotReadyException: a model still loading
        ("http_503", 503, "service_unavailable"),
        ("http_500", 502, "upstream_error"),
        ("model_stream_error", 502, "model_stream_error"),
        ("internal_stream_failure", 502, "internal_stream_failure"),
        ("reset", 502, "upstream_connection_error"),
        ("corrupt_crc", 502, "upstream_stream_corrupt"),
        ("stall", 504, "upstream_timeout"),
    ],
)
def test_a_fault_before_the_first_byte_gets_its_status_and_the_next_request_is_served(
    stack: LocalStack, fault: str, status: int, code: str
) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(fault=fault, fault_after=0)
    resp = chat(stack)
    assert resp.status == status, resp.body
    assert resp.header("content-type") == "application/json"
    error = resp.json()["error"]
    assert error["code"] == code and error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    if status == 429:
        assert resp.header("retry-after") == "1"
    if fault == "http_424":
        assert "simulated" in error["message"].lower() or error["message"].startswith("The model container")
    stack.endpoint.reset_scenario()
    assert_good_stream(chat(stack))


def test_an_unknown_endpoint_is_a_404_that_names_neither_account_nor_endpoint(stack: LocalStack) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(endpoint_names=("some-other-endpoint",))
    resp = chat(stack)
    assert resp.status == 404
    error = resp.json()["error"]
    assert error["code"] == "endpoint_not_found"
    assert "sagestream-sim" not in error["message"] and "123456789012" not in error["message"]


# --- errors after the first byte ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        ("model_stream_error", "model_stream_error"),
        ("internal_stream_failure", "internal_stream_failure"),
        ("reset", "upstream_connection_error"),
        ("corrupt_crc", "upstream_stream_corrupt"),
        ("stall", "upstream_timeout"),
    ],
)
def test_a_fault_after_the_first_byte_is_one_error_event_after_intact_deltas(
    stack: LocalStack, fault: str, code: str
) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(fault=fault, fault_after=5, non_ascii=0.0)
    resp = chat(stack)
    assert resp.status == 200 and resp.complete, "the stream must end cleanly"
    events = resp.data_events()
    assert "[DONE]" not in events
    last = events[-1]
    assert set(last) == {"error"} and last["error"]["code"] == code
    sent = "".join(t.text for t in stack.endpoint.records[-1].tokens[:5])
    assert content_of(resp) == sent, "what reached the client before the fault is exactly what the model sent"
    stack.endpoint.reset_scenario()
    assert_good_stream(chat(stack))


def test_the_lambda_deadline_ends_the_stream_with_length_and_an_error_event(stack_for: GetStack) -> None:
    stack = stack_for(concurrency=1, timeout_s=4.0, DEADLINE_MARGIN_MS="2500", UPSTREAM_READ_TIMEOUT_S="30")
    assert stack.endpoint is not None
    # One process, warmed: the timed request must not pay an init (Lambda does not count it either).
    assert_good_stream(chat(stack))
    stack.endpoint.clear_records()
    stack.endpoint.set_scenario(tokens=400, cadence_ms=20, ttft_ms=10)
    started = time.monotonic()
    resp = chat(stack)
    assert time.monotonic() - started < 4.0, "it must stop before Lambda would kill it"
    assert resp.status == 200 and resp.complete
    events = resp.data_events()
    assert "[DONE]" not in events
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["error"]["code"] == "deadline_exceeded"
    assert 5 < len(events) < 400
    record = stack.endpoint.wait_for_record(lambda r: r.outcome != "streaming", timeout=3)
    assert record.outcome == "client_closed"
    stack.endpoint.reset_scenario()
    assert_good_stream(chat(stack))


# --- the client going away ----------------------------------------------------------------------------


def test_a_client_that_leaves_closes_the_upstream_within_500_ms(stack: LocalStack) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(tokens=2000, cadence_ms=10, ttft_ms=10)
    resp = request(
        stack.url, "POST", CHAT, {"messages": [{"role": "user", "content": "go"}], "stream": True}, stop_after=4
    )
    left = time.monotonic_ns()
    record = stack.endpoint.wait_for_record(lambda r: r.outcome != "streaming", timeout=5)
    assert len(resp.chunks) == 4
    assert record.outcome == "client_closed"
    assert record.ended_monotonic_ns is not None
    assert (record.ended_monotonic_ns - left) / 1e6 < 500
    assert len(record.tokens) < 200
    stack.endpoint.reset_scenario()
    assert_good_stream(chat(stack))


# --- routes and validation ----------------------------------------------------------------------------


def test_models_health_and_unknown_routes(stack: LocalStack) -> None:
    models = request(stack.url, "GET", "/v1/models")
    assert models.status == 200
    assert models.json()["data"][0]["id"] == "sagestream-sim"
    assert request(stack.url, "GET", "/health").json()["status"] == "ok"
    missing = request(stack.url, "GET", "/v2/anything")
    assert missing.status == 404 and missing.json()["error"]["code"] == "unknown_url"
    wrong = request(stack.url, "GET", CHAT)
    assert wrong.status == 405 and wrong.header("allow") == "POST"
    assert wrong.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("body", "headers", "status", "param"),
    [
        (b"{not json", {"Content-Type": "application/json"}, 400, None),
        (b'{"messages": []}', {"Content-Type": "application/json"}, 400, "messages"),
        (
            b'{"messages": [{"role": "wizard", "content": "x"}]}',
            {"Content-Type": "application/json"},
            400,
            "messages.0.role",
        ),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
            {"Content-Type": "application/json"},
            400,
            "temperature",
        ),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"}',
            {"Content-Type": "application/json"},
            404,
            "model",
        ),
        (b'{"messages": [{"role": "user", "content": "x"}]}', {"Content-Type": "text/plain"}, 415, None),
        (
            json.dumps({"messages": [{"role": "user", "content": "x" * 1_100_000}]}).encode(),
            {"Content-Type": "application/json"},
            413,
            None,
        ),
    ],
)
def test_bad_requests_get_openai_errors_and_no_upstream_call(
    stack: LocalStack, body: bytes, headers: dict[str, str], status: int, param: str | None
) -> None:
    resp = request(stack.url, "POST", CHAT, body, headers=headers)
    assert resp.status == status, resp.body
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if param is not None:
        assert error["param"] == param
    assert stack.endpoint is not None and stack.endpoint.records == []


def test_max_tokens_over_the_limit_is_refused(stack_for: GetStack) -> None:
    stack = stack_for(MAX_TOKENS_LIMIT="16")
    resp = chat(stack, max_tokens=17)
    assert resp.status == 400 and resp.json()["error"]["param"] == "max_tokens"
    assert chat(stack, max_tokens=16).status == 200
    assert stack.endpoint is not None and len(stack.endpoint.records) == 1


# --- the official OpenAI SDK --------------------------------------------------------------------------


def test_the_openai_sdk_streams_and_does_not(stack: LocalStack) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused-in-iam-mode", max_retries=0)
    pieces = []
    with client.chat.completions.create(
        model="sagestream-sim", messages=[{"role": "user", "content": "Hello SDK"}], stream=True
    ) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
    assert "".join(pieces) == model_text(stack)
    whole = client.chat.completions.create(model="sagestream-sim", messages=[{"role": "user", "content": "Hello SDK"}])
    assert whole.choices[0].message.content == "".join(pieces)
    assert [m.id for m in client.models.list()] == ["sagestream-sim"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])


def test_missing_credentials_are_a_generic_500_with_the_detail_kept_out_of_the_answer(stack_for: GetStack) -> None:
    stack = stack_for(AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="")
    resp = chat(stack)
    assert resp.status == 500
    error = resp.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "internal_error"
    assert "credential" not in error["message"].lower() and "Traceback" not in resp.body.decode()
    assert stack.endpoint is not None and stack.endpoint.records == []


def test_head_answers_like_get_without_a_body_and_every_answer_has_its_request_id(stack: LocalStack) -> None:
    host, port = stack.url.removeprefix("http://").split(":")
    ids = []
    for method in ("HEAD", "GET"):
        # A connection each: the local front ends a HEAD answer with a chunked terminator it should not send,
        # so a second request on the same connection would read that first.
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request(method, "/health")
            answer = conn.getresponse()
            body = answer.read()
            assert answer.status == 200 and answer.getheader("content-type") == "application/json"
            assert body == (b"" if method == "HEAD" else b'{"status":"ok"}')
            ids.append(answer.getheader("x-request-id"))
        finally:
            conn.close()
    assert all(ids) and ids[0] != ids[1]
    for answer in (chat(stack), request(stack.url, "GET", "/nowhere")):
        assert len(answer.header("x-request-id") or "") == 36
