"""The fault matrix, end to end: every simulated-endpoint fault, before or after the first byte, streaming or
not, each with its client-visible result, what reached the client before it intact, and the same runtime
process (same pid, no exit) serving the next request. Then the Runtime API connection dropping mid-response.

tests/e2e pins the statuses of the streaming faults; this file pins the whole matrix and that no fault costs
an execution environment (a process that died or was replaced would make the next caller pay a cold start).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from sagestream_local.stack import LocalStack
from tests.client import StreamedResponse, request
from tests.e2e.conftest import GetStack

CHAT = "/v1/chat/completions"
READ_TIMEOUT_S = 2.0  # what tests/e2e/conftest.py gives every stack (UPSTREAM_READ_TIMEOUT_S)
AFTER = 5  # tokens the endpoint sends before a fault "after the first byte"


@dataclass(frozen=True)
class Expect:
    status: int
    code: str | None  # None: a good answer (the fault does not apply)


# What a client sees for each fault when it comes before anything was sent (or when it is an HTTP status,
# which always comes before the stream).
BEFORE = {
    "http_400": Expect(404, "endpoint_not_found"),
    "http_424": Expect(400, "model_error"),  # the simulated container says 400: its own 4xx stays a 4xx
    "http_429": Expect(503, "model_not_ready"),  # ModelNotReadyException: a model still loading
    "throttling": Expect(429, "rate_limited"),
    "http_500": Expect(502, "upstream_error"),
    "http_503": Expect(503, "service_unavailable"),
    "model_stream_error": Expect(502, "model_stream_error"),
    "internal_stream_failure": Expect(502, "internal_stream_failure"),
    "reset": Expect(502, "upstream_connection_error"),
    "corrupt_crc": Expect(502, "upstream_stream_corrupt"),
    "stall": Expect(504, "upstream_timeout"),
}
HTTP_FAULTS = {f for f in BEFORE if f.startswith("http_") or f == "throttling"}
STREAM_FAULTS = set(BEFORE) - HTTP_FAULTS
# InvokeEndpoint honours the HTTP-status faults and reset/stall; the event-stream faults do not apply to it.
NON_STREAMING = {f: (BEFORE[f] if f in HTTP_FAULTS | {"reset", "stall"} else Expect(200, None)) for f in BEFORE}


def chat(stack: LocalStack, stream: bool, content: str = "Tell me about rivers") -> StreamedResponse:
    body = {"messages": [{"role": "user", "content": content}], "stream": stream}
    return request(stack.url, "POST", CHAT, body, timeout=20)


def deltas(resp: StreamedResponse) -> list[str]:
    return [
        e["choices"][0]["delta"]["content"]
        for e in resp.data_events()
        if isinstance(e, dict) and e.get("choices") and e["choices"][0].get("delta", {}).get("content")
    ]


def assert_error_shape(error: dict[str, object], code: str) -> None:
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and error["message"]
    assert "Traceback" not in str(error["message"])


class Process:
    """The one runtime process of a concurrency-1 stack, to show a fault did not cost it."""

    def __init__(self, stack: LocalStack) -> None:
        assert stack.pool is not None and len(stack.pool.environments) == 1
        self.environment = stack.pool.environments[0]
        assert self.environment.process is not None
        self.pid = self.environment.process.pid
        self.exits = len(self.environment.exit_codes)

    def assert_same_and_serving(self, stack: LocalStack) -> None:
        assert stack.endpoint is not None
        stack.endpoint.reset_scenario()
        good = chat(stack, stream=True, content="And now something else")
        assert good.status == 200 and good.data_events()[-1] == "[DONE]"
        assert self.environment.process is not None and self.environment.process.pid == self.pid
        assert self.environment.exit_codes[self.exits :] == [], "the runtime process exited"
        assert self.environment.last_error is None


@pytest.fixture
def one(stack_for: GetStack) -> LocalStack:
    stack = stack_for(concurrency=1)
    assert request(stack.url, "GET", "/health").status == 200  # warm: timings below are the fault's alone
    return stack


@pytest.mark.parametrize("fault", sorted(BEFORE))
@pytest.mark.parametrize("position", ["before", "after"])
def test_streaming_fault(one: LocalStack, fault: str, position: str) -> None:
    assert one.endpoint is not None
    process = Process(one)
    one.endpoint.set_scenario(fault=fault, fault_after=0 if position == "before" else AFTER, non_ascii=0.3)
    started = time.monotonic()
    resp = chat(one, stream=True)
    elapsed = time.monotonic() - started
    (record,) = one.endpoint.records  # UPSTREAM_MAX_ATTEMPTS=1: one call, no retry
    assert record.fault == fault
    assert process.environment.last_error is None, "a fault is the relay's answer, never a function error"
    if position == "before" or fault in HTTP_FAULTS:
        expect = BEFORE[fault]
        assert resp.status == expect.status, resp.body
        assert resp.header("content-type") == "application/json"
        assert expect.code is not None
        assert_error_shape(resp.json()["error"], expect.code)
        if expect.status == 429:
            assert resp.header("retry-after") == "1"
        assert record.tokens == []
    else:
        assert resp.status == 200 and resp.complete, "the stream must end cleanly"
        events = resp.data_events()
        assert "[DONE]" not in events
        assert set(events[-1]) == {"error"}
        assert_error_shape(events[-1]["error"], BEFORE[fault].code or "")
        # Every chunk before the error is whole JSON (data_events parsed it) and the text is the model's, token
        # for token, in order.
        assert deltas(resp) == [t.text for t in record.tokens]
        assert len(record.tokens) == AFTER
        assert events[0]["choices"][0]["delta"]["role"] == "assistant"
        assert all(e["choices"][0]["finish_reason"] is None for e in events[:-1])
    if fault == "stall":
        # One read timeout, not one per attempt.
        assert READ_TIMEOUT_S * 0.9 < elapsed < READ_TIMEOUT_S * 1.5, f"stall answered after {elapsed:.2f} s"
    process.assert_same_and_serving(one)


@pytest.mark.parametrize("fault", sorted(NON_STREAMING))
def test_non_streaming_fault(one: LocalStack, fault: str) -> None:
    assert one.endpoint is not None
    process = Process(one)
    one.endpoint.set_scenario(fault=fault, fault_after=AFTER)
    started = time.monotonic()
    resp = chat(one, stream=False)
    elapsed = time.monotonic() - started
    (record,) = one.endpoint.records  # UPSTREAM_MAX_ATTEMPTS=1: one call, no retry
    assert record.operation == "InvokeEndpoint"
    expect = NON_STREAMING[fault]
    assert resp.status == expect.status, resp.body
    assert resp.header("content-type") == "application/json"
    if expect.code is None:
        body = resp.json()
        assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"]
        assert record.fault == "none", "a stream fault was injected into InvokeEndpoint"
    else:
        assert_error_shape(resp.json()["error"], expect.code)
        assert record.fault == fault
    if fault == "stall":
        # One read timeout, not one per attempt.
        assert READ_TIMEOUT_S * 0.9 < elapsed < READ_TIMEOUT_S * 1.5, f"stall answered after {elapsed:.2f} s"
    process.assert_same_and_serving(one)


def test_a_stall_between_tokens_is_an_error_event_one_read_timeout_after_the_last_token(one: LocalStack) -> None:
    assert one.endpoint is not None
    one.endpoint.set_scenario(fault="stall", fault_after=3, cadence_ms=20)
    resp = chat(one, stream=True)
    last_delta = next(e for e in reversed(resp.events()) if b'"content":"' in e.data)
    error = resp.events()[-1]
    assert b'"upstream_timeout"' in error.data
    gap = error.at - last_delta.at
    assert READ_TIMEOUT_S * 0.9 < gap < READ_TIMEOUT_S + 2, f"the error event came {gap:.2f} s after the last delta"
    record = one.endpoint.wait_for_record(lambda r: r.outcome != "streaming", timeout=3)
    assert record.outcome == "client_closed", "the stalled upstream connection must be closed"


# --- the Runtime API connection dropping mid-response ------------------------------------------------------


def test_the_runtime_api_dropping_the_response_mid_stream_leaves_the_process_serving(one: LocalStack) -> None:
    """The Runtime API side shuts the runtime's /response socket while it streams (as Lambda does when the
    Function URL's client goes): the handler's next write fails, the upstream is closed, the process lives."""
    assert one.endpoint is not None and one.pool is not None
    process = Process(one)
    one.endpoint.set_scenario(tokens=2000, cadence_ms=5, ttft_ms=5)
    result: dict[str, StreamedResponse] = {}
    client = threading.Thread(target=lambda: result.setdefault("resp", chat(one, stream=True)), daemon=True)
    client.start()
    one.endpoint.wait_for_record(lambda r: len(r.tokens) >= 10, timeout=10)
    invocation = process.environment.current
    assert invocation is not None
    dropped_at = time.monotonic_ns()
    invocation.leave()
    record = one.endpoint.wait_for_record(lambda r: r.outcome != "streaming", timeout=5)
    client.join(10)
    assert record.outcome == "client_closed"
    assert record.ended_monotonic_ns is not None and (record.ended_monotonic_ns - dropped_at) / 1e6 < 1000
    assert len(record.tokens) < 1000
    resp = result["resp"]
    assert resp.status == 200
    got = deltas(resp)
    assert got == [t.text for t in record.tokens[: len(got)]], "what reached the client is an intact prefix"
    assert invocation.error is not None and invocation.error.error_type in (
        "Runtime.ClientGone",
        "Runtime.ResponseAborted",
    )
    process.environment.last_error = None  # that invocation's; the next must leave none
    process.assert_same_and_serving(one)


def test_a_client_that_vanishes_without_closing_its_socket_cleanly_leaves_the_process_serving(
    one: LocalStack,
) -> None:
    """The front's client side reset (RST, not FIN) mid-stream."""
    import socket
    import struct
    from urllib.parse import urlsplit

    assert one.endpoint is not None
    process = Process(one)
    one.endpoint.set_scenario(tokens=2000, cadence_ms=5, ttft_ms=5)
    parts = urlsplit(one.url)
    body = b'{"messages": [{"role": "user", "content": "go"}], "stream": true}'
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    sock.sendall(
        b"POST %b HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
        % (CHAT.encode(), len(body), body)
    )
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    one.endpoint.wait_for_record(lambda r: len(r.tokens) >= 10, timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    record = one.endpoint.wait_for_record(lambda r: r.outcome != "streaming", timeout=5)
    assert record.outcome == "client_closed"
    deadline = time.monotonic() + 5
    while process.environment.current is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.environment.last_error = None
    process.assert_same_and_serving(one)


# --- bad input that once cost a 500 or reached the container -------------------------------------------------


def _nested(levels: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


BAD_INPUT = {
    "deep-response-format": (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "deep", "schema": _nested(128)}}},
        "response_format.json_schema.schema",
    ),
    "deep-tool-parameters": (
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": _nested(128)}}]},
        "tools.0.function.parameters",
    ),
    "tool-choice-required-without-tools": ({"tool_choice": "required"}, "tool_choice"),
    "tool-choice-names-an-absent-function": (
        {
            "tool_choice": {"type": "function", "function": {"name": "get_time"}},
            "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        },
        "tool_choice",
    ),
}


# tgi takes no tools at all (refused by name whatever they hold: tests/unit/dialects/test_generate.py); a deep
# response_format reached its grammar, and cost a 500, on tgi too.
@pytest.mark.parametrize(
    ("dialect", "case"), [*(("openai", case) for case in sorted(BAD_INPUT)), ("tgi", "deep-response-format")]
)
def test_bad_input_is_a_400_naming_the_field_before_the_endpoint_is_called(
    stack_for: GetStack, dialect: str, case: str
) -> None:
    stack = stack_for(concurrency=1, UPSTREAM_FORMAT=dialect, PROMPT_TEMPLATE="chatml")
    assert stack.endpoint is not None
    process = Process(stack)
    fields, param = BAD_INPUT[case]
    body = {"messages": [{"role": "user", "content": "Tell me about rivers"}], "stream": True, **fields}
    resp = request(stack.url, "POST", CHAT, body, timeout=20)
    assert resp.status == 400, resp.body[:300]
    error = resp.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert stack.endpoint.records == [], "the endpoint was called"
    process.assert_same_and_serving(stack)
