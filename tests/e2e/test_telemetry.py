"""What an operator sees, end to end: the runtime processes' stdout (JSON log records and EMF) read from a
pipe, each line timed as it arrives, beside the HTTP client's own arrivals."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sagestream_local.stack import LocalStack
from tests.client import StreamedResponse, request
from tests.conftest import PYTHONPATH
from tests.e2e.conftest import FAST

CHAT = "/v1/chat/completions"
PROMPT = "Tell me about the secret garden of Zanzibar"
MAIN_METRICS = {"ClientDisconnects", "DeadlineStops"}


@dataclass
class Line:
    at: float  # time.monotonic() when the line arrived on the pipe
    data: Any  # the JSON object, or the raw text


@dataclass
class RuntimeOutput:
    """Everything the runtime processes write to stdout, line by line, timed."""

    lines: list[Line] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, fd: int) -> None:
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as pipe:
            for text in pipe:
                now = time.monotonic()
                try:
                    data: Any = json.loads(text)
                except ValueError:
                    data = text
                with self.lock:
                    self.lines.append(Line(now, data))

    def mark(self) -> int:
        with self.lock:
            return len(self.lines)

    def since(self, mark: int) -> list[Line]:
        with self.lock:
            return self.lines[mark:]

    def wait(self, mark: int, done: Callable[[list[Line]], bool], timeout: float = 10.0) -> list[Line]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self.since(mark)
            if done(lines):
                return lines
            time.sleep(0.01)
        raise AssertionError(f"runtime output never showed what was expected: {[x.data for x in self.since(mark)]}")


def logs(lines: list[Line], message: str = "invocation") -> list[Line]:
    return [x for x in lines if isinstance(x.data, dict) and x.data.get("message") == message]


def emf(lines: list[Line], metric: str) -> list[Line]:
    return [
        x
        for x in lines
        if isinstance(x.data, dict)
        and "_aws" in x.data
        and metric in {m["Name"] for m in x.data["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    ]


def finished(lines: list[Line]) -> bool:
    """One invocation's log record and its main EMF record are both there."""
    return bool(logs(lines)) and bool(emf(lines, "ClientDisconnects"))


@dataclass
class Captured:
    stack: LocalStack
    out: RuntimeOutput

    def call(
        self, path: str = CHAT, body: dict[str, Any] | None = None, **kw: Any
    ) -> tuple[StreamedResponse, list[Line]]:
        mark = self.out.mark()
        if body is None and path == CHAT:
            body = {"messages": [{"role": "user", "content": PROMPT}], "stream": True}
        resp = request(self.stack.url, "POST" if body is not None else "GET", path, body, **kw)
        return resp, self.out.wait(mark, finished)


def _captured(env: dict[str, str], max_concurrency: int = 1) -> Iterator[Captured]:
    read_fd, write_fd = os.pipe()
    out = RuntimeOutput()
    reader = threading.Thread(target=out.read, args=(read_fd,), daemon=True)
    reader.start()
    stack = LocalStack(
        port=0,
        concurrency=1,  # one execution environment: one cold start, and the records in order
        max_concurrency=max_concurrency,
        timeout_s=60.0,
        env={"PYTHONPATH": PYTHONPATH, "UPSTREAM_READ_TIMEOUT_S": "2", "UPSTREAM_MAX_ATTEMPTS": "1", **env},
        scenario=FAST,
        upstream="simulated",
        stdout=write_fd,
    ).start()
    try:
        assert stack.endpoint is not None
        yield Captured(stack, out)
    finally:
        stack.stop()
        os.close(write_fd)
        reader.join(5)


@pytest.fixture(scope="module")
def _plain(max_concurrency: int) -> Iterator[Captured]:
    yield from _captured({}, max_concurrency)


@pytest.fixture
def captured(_plain: Captured) -> Captured:
    assert _plain.stack.endpoint is not None
    _plain.stack.endpoint.reset_scenario()
    _plain.stack.endpoint.clear_records()
    return _plain


def content_events(resp: StreamedResponse) -> list[Any]:
    return [
        e
        for e in resp.data_events()
        if isinstance(e, dict) and e.get("choices") and e["choices"][0].get("delta", {}).get("content")
    ]


def metric(line: Line, name: str) -> float:
    values = line.data[name]
    assert len(values) == 1, f"{name}: one value per invocation, not {values}"
    return float(values[0])


# --- the log record ---------------------------------------------------------------------------------------


def test_one_json_log_record_per_invocation_with_ids_timings_and_outcome(captured: Captured) -> None:
    resp, lines = captured.call()
    assert resp.status == 200
    (record,) = logs(lines)
    log = record.data
    assert log["level"] == "INFO" and log["service"] == "sagestream"
    assert len(log["function_request_id"]) == 36 and len(log["url_request_id"]) == 36
    assert log["function_request_id"] != log["url_request_id"]
    assert (log["method"], log["path"], log["status"], log["stream"]) == ("POST", CHAT, 200, True)
    assert (log["model"], log["endpoint"], log["dialect"]) == ("sagestream-sim", "sagestream-sim", "openai")
    assert log["output_tokens"] == len(content_events(resp)) == FAST.tokens
    assert 0 < log["upstream_ttfb_ms"] <= log["ttft_ms"] <= log["duration_ms"]
    assert log["itl_median_ms"] <= log["itl_max_ms"]
    assert log["finish_reason"] == "stop"
    assert log.get("error_type") is None and log.get("error_code") is None  # Powertools drops None values
    assert log["client_disconnected"] is False and log["deadline_stop"] is False


def test_the_log_record_carries_the_functions_own_cpu_and_relay_times(captured: Captured) -> None:
    resp, lines = captured.call()
    assert resp.status == 200
    log = logs(lines)[0].data
    # CPU of this process alone: the first token's share is part of the whole, and far below its wall time.
    assert 0 < log["ttft_cpu_ms"] < log["cpu_ms"] and log["ttft_cpu_ms"] < log["ttft_ms"]
    # Each delta's time inside the function, from the read that completed it to its write.
    assert 0 < log["relay_ms_p50"] <= log["relay_ms_p99"] < log["duration_ms"]


def test_prompts_and_completions_are_not_logged_by_default(captured: Captured) -> None:
    resp, lines = captured.call()
    text = "".join(e["choices"][0]["delta"]["content"] for e in content_events(resp))
    (record,) = logs(lines)
    assert "prompt" not in record.data and "completion" not in record.data
    everything = "\n".join(json.dumps(x.data) for x in lines)
    assert "Zanzibar" not in everything
    assert text[:30] not in everything


def test_a_failure_before_the_stream_is_logged_with_its_status_and_error(captured: Captured) -> None:
    assert captured.stack.endpoint is not None
    captured.stack.endpoint.set_scenario(fault="throttling")
    resp, lines = captured.call()
    assert resp.status == 429
    log = logs(lines)[0].data
    assert (log["status"], log["error_type"], log["error_code"]) == (429, "rate_limit_error", "rate_limited")
    (errors,) = emf(lines, "UpstreamErrors")
    assert errors.data["ErrorType"] == "rate_limited" and metric(errors, "UpstreamErrors") == 1
    assert errors.data["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["endpoint", "dialect", "model", "ErrorType", "service"]
    ]


# --- the metrics ------------------------------------------------------------------------------------------


def test_one_emf_record_per_invocation_with_the_streams_figures(captured: Captured) -> None:
    resp, lines = captured.call()
    assert resp.status == 200
    (main,) = emf(lines, "ClientDisconnects")
    log = logs(lines)[0].data
    blob = main.data
    (directive,) = blob["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "sagestream"
    assert directive["Dimensions"] == [["endpoint", "dialect", "model", "service"]]
    assert (blob["endpoint"], blob["dialect"], blob["model"], blob["service"]) == (
        "sagestream-sim",
        "openai",
        "sagestream-sim",
        "sagestream",
    )
    names = {m["Name"] for m in directive["Metrics"]}
    assert names == {
        "TimeToFirstToken",
        "UpstreamTimeToFirstByte",
        "InterTokenLatencyMedian",
        "InterTokenLatencyMax",
        "OutputTokens",
        "StreamDuration",
        "ClientDisconnects",
        "DeadlineStops",
    }
    assert all(
        m["Unit"] == ("Count" if m["Name"] in MAIN_METRICS | {"OutputTokens"} else "Milliseconds")
        for m in directive["Metrics"]
    )
    assert blob["function_request_id"] == log["function_request_id"]
    assert metric(main, "OutputTokens") == log["output_tokens"] == FAST.tokens
    assert metric(main, "TimeToFirstToken") == pytest.approx(log["ttft_ms"], abs=0.01)
    assert metric(main, "UpstreamTimeToFirstByte") <= metric(main, "TimeToFirstToken")
    assert metric(main, "InterTokenLatencyMedian") <= metric(main, "InterTokenLatencyMax")
    assert metric(main, "TimeToFirstToken") < metric(main, "StreamDuration")
    assert metric(main, "ClientDisconnects") == 0 and metric(main, "DeadlineStops") == 0
    assert emf(lines, "UpstreamErrors") == [] and emf(lines, "ColdStart") == []


def test_the_emf_record_is_written_after_the_last_delta_reached_the_client(captured: Captured) -> None:
    assert captured.stack.endpoint is not None
    # Slow enough that a flush at the handler's start, or at the first delta, would come long before the end.
    captured.stack.endpoint.set_scenario(tokens=15, cadence_ms=30, ttft_ms=50)
    # The metrics line reaches this process straight from the runtime's stdout, [DONE] one hop later (the
    # Runtime API, then the front): under load they arrive within a fraction of a millisecond, in either order
    # (a fresh-clone run saw the metrics 0.24 ms ahead). Up to three tries, as the error-event test below takes:
    # metrics written before the stream's end would come first every time.
    for _ in range(3):
        mark = captured.out.mark()
        resp, lines = captured.call()
        assert resp.complete and resp.data_events()[-1] == "[DONE]"
        (main,) = emf(lines, "ClientDisconnects")
        assert len(emf(captured.out.since(mark), "ClientDisconnects")) == 1, "exactly once"
        if main.at > resp.chunks[-1].at:
            break
    assert main.at > resp.chunks[-1].at, "the metrics came before the end of the stream, three times"
    stream_span = resp.chunks[-1].at - resp.chunks[0].at
    assert stream_span > 0.3


def test_a_stream_that_fails_midway_still_gets_its_metrics_once_after_the_error_event(captured: Captured) -> None:
    assert captured.stack.endpoint is not None
    captured.stack.endpoint.set_scenario(fault="model_stream_error", fault_after=4)
    # The metrics line reaches this process straight from the runtime's stdout; the error event one hop later
    # (the Runtime API, then the front): under load the two arrive within a fraction of a millisecond, in
    # either order. Up to three tries, as the timing tests take: metrics written before the stream's end would
    # come first every time.
    for _ in range(3):
        resp, lines = captured.call()
        assert resp.status == 200
        error = resp.data_events()[-1]
        assert error["error"]["code"] == "model_stream_error"
        (main,) = emf(lines, "ClientDisconnects")
        if main.at > resp.chunks[-1].at:
            break
    assert main.at > resp.chunks[-1].at, "the metrics came before the error event, three times"
    (errors,) = emf(lines, "UpstreamErrors")
    assert errors.data["ErrorType"] == "model_stream_error"
    log = logs(lines)[0].data
    assert (log["status"], log["error_code"], log["level"]) == (502, "model_stream_error", "WARNING")
    assert logs(lines, "stream ended by an upstream failure: " + error["error"]["message"]), "the warning record"


def test_a_client_that_leaves_counts_as_a_disconnect(captured: Captured) -> None:
    assert captured.stack.endpoint is not None
    captured.stack.endpoint.set_scenario(tokens=40, cadence_ms=20)
    resp, lines = captured.call(stop_after=3)
    assert len(resp.chunks) == 3
    (main,) = emf(lines, "ClientDisconnects")
    assert metric(main, "ClientDisconnects") == 1
    assert logs(lines)[0].data["client_disconnected"] is True
    assert emf(lines, "UpstreamErrors") == []


def test_health_gets_a_record_and_counts_but_no_stream_figures(captured: Captured) -> None:
    resp, lines = captured.call("/health")
    assert resp.status == 200
    assert logs(lines)[0].data["path"] == "/health"
    (main,) = emf(lines, "ClientDisconnects")
    assert {m["Name"] for m in main.data["_aws"]["CloudWatchMetrics"][0]["Metrics"]} == MAIN_METRICS


def test_cold_start_is_counted_once_per_execution_environment() -> None:
    for env in _captured({}):
        resp, lines = env.call("/health")
        assert resp.status == 200
        (cold,) = emf(lines, "ColdStart")
        assert cold.data["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["function_name", "service"]]
        assert cold.data["function_name"] == "sagestream-local" and logs(lines)[0].data["cold_start"] is True
        for _ in range(2):
            _, lines = env.call()
            assert emf(lines, "ColdStart") == [] and logs(lines)[0].data["cold_start"] is False


# --- settings ---------------------------------------------------------------------------------------------


def test_log_payloads_puts_prompt_and_completion_in_the_record() -> None:
    for env in _captured({"LOG_PAYLOADS": "true"}):
        resp, lines = env.call()
        text = "".join(e["choices"][0]["delta"]["content"] for e in content_events(resp))
        log = logs(lines)[0].data
        assert log["prompt"] == [{"role": "user", "content": PROMPT}]
        assert log["completion"] == text


def test_tracing_on_with_no_xray_daemon_changes_nothing_about_delivery(tmp_path: Any) -> None:
    env = {
        "POWERTOOLS_TRACE_DISABLED": "false",
        "LAMBDA_TASK_ROOT": str(tmp_path),  # so that Powertools' Tracer believes it is in Lambda and stays on
        "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:9",  # nothing listens there
    }
    for traced in _captured(env):
        assert traced.stack.endpoint is not None
        traced.stack.endpoint.set_scenario(tokens=20, cadence_ms=10)
        resp, lines = traced.call()
        assert resp.status == 200 and resp.data_events()[-1] == "[DONE]"
        assert len(content_events(resp)) == 20
        assert not [x for x in lines if isinstance(x.data, dict) and x.data.get("level") in ("ERROR", "CRITICAL")]
        assert logs(lines)[0].data["status"] == 200
