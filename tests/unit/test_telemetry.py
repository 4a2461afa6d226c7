"""The log record and the EMF records are built from the invocation's record alone, without stdout."""

from __future__ import annotations

import io
import json
from typing import Any

from sagestream.config import Config
from sagestream.delta import Delta, Usage
from sagestream.errors import APIError
from sagestream.record import StreamRecord
from sagestream.telemetry import Labels, Telemetry, invocation_fields, invocation_metrics

CONFIG = Config(endpoint_name="llm", model_id="m", dialect="tgi")
LABELS = Labels("ns", "svc", {"endpoint": "llm", "dialect": "tgi"})


def streamed() -> StreamRecord:
    record = StreamRecord(method="POST", path="/v1/chat/completions", kind="chat", streamed=True, started=10.0)
    record.upstream_started, record.upstream_first_byte = 10.01, 10.05
    for n, text in enumerate(["a", "b", "c"]):
        record.wrote(Delta(text), b"x", now=10.1 + n * 0.02)
    record.wrote(Delta(finish_reason="stop", usage=Usage(4, 3, 7)), b"x", now=10.2)
    return record


def metrics_of(blob: dict[str, Any]) -> dict[str, Any]:
    # Powertools writes each value as a list (EMF allows several per record); there is one each here.
    values = {m["Name"]: blob[m["Name"]] for m in blob["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert all(isinstance(v, list) and len(v) == 1 for v in values.values()), values
    return {name: v[0] for name, v in values.items()}


def build(record: StreamRecord, cold: bool = False) -> list[dict[str, Any]]:
    return invocation_metrics(record, LABELS, ended=10.5, request_id="r-1", function_name="fn", cold_start=cold)


def test_the_log_fields_of_a_stream() -> None:
    fields = invocation_fields(streamed(), CONFIG, ended=10.5, cold_start=True)
    assert (fields["method"], fields["path"], fields["status"], fields["stream"]) == (
        "POST",
        "/v1/chat/completions",
        200,
        True,
    )
    assert (fields["model"], fields["endpoint"], fields["dialect"]) == ("m", "llm", "tgi")
    assert fields["output_tokens"] == 3 and fields["finish_reason"] == "stop" and fields["cold_start"] is True
    assert (fields["ttft_ms"], fields["upstream_ttfb_ms"], fields["duration_ms"]) == (100.0, 50.0, 500.0)
    assert fields["itl_max_ms"] is not None and fields["itl_max_ms"] >= fields["itl_median_ms"]
    assert "prompt" not in fields and "completion" not in fields and "caller" not in fields
    assert "noops" not in fields  # a request that carried no no-op field says nothing of them


def test_the_no_op_fields_a_request_carried_are_counted_in_the_log_record() -> None:
    record = streamed()
    record.noted(("client_metadata", "anthropic-beta"))
    record.noted(("client_metadata",))
    fields = invocation_fields(record, CONFIG, ended=10.5, cold_start=False)
    assert fields["noops"] == {"client_metadata": 2, "anthropic-beta": 1}


def test_keepalives_are_counted_in_the_log_record_when_there_were_any() -> None:
    record = streamed()
    assert "keepalives" not in invocation_fields(record, CONFIG, ended=10.5, cold_start=False)
    record.keepalives = 3
    assert invocation_fields(record, CONFIG, ended=10.5, cold_start=False)["keepalives"] == 3


def test_payloads_and_the_caller_only_when_configured() -> None:
    record = StreamRecord(caller="arn:aws:iam::1:user/u", prompt="Hi", completion=["a", "b"])
    plain = invocation_fields(record, Config(endpoint_name="e", auth_mode="none"), ended=1.0, cold_start=False)
    assert "caller" not in plain and "prompt" not in plain
    full = invocation_fields(record, Config(endpoint_name="e", log_payloads=True), ended=1.0, cold_start=False)
    assert (full["caller"], full["prompt"], full["completion"]) == ("arn:aws:iam::1:user/u", "Hi", "ab")


def test_a_streams_metrics() -> None:
    (main,) = build(streamed())
    assert main["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "ns"
    assert main["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["endpoint", "dialect", "service"]]
    figures = metrics_of(main)
    assert set(figures) == {
        "TimeToFirstToken",
        "UpstreamTimeToFirstByte",
        "InterTokenLatencyMedian",
        "InterTokenLatencyMax",
        "OutputTokens",
        "StreamDuration",
        "ClientDisconnects",
        "DeadlineStops",
    }
    assert figures["OutputTokens"] == 3 and figures["ClientDisconnects"] == 0
    assert round(figures["TimeToFirstToken"]) == 100 and round(figures["StreamDuration"]) == 500
    assert main["function_request_id"] == "r-1"


def test_a_route_that_is_no_completion_counts_only_disconnects_and_deadline_stops() -> None:
    (main,) = build(StreamRecord(method="GET", path="/health", started=10.0))
    assert set(metrics_of(main)) == {"ClientDisconnects", "DeadlineStops"}


def test_an_upstream_failure_adds_its_own_record_the_deadline_does_not() -> None:
    failed = streamed()
    failed.fail(APIError.upstream(502, "boom", code="model_stream_error"))
    main, errors = build(failed)
    assert errors["ErrorType"] == "model_stream_error" and metrics_of(errors) == {"UpstreamErrors": 1.0}
    assert errors["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["endpoint", "dialect", "ErrorType", "service"]]
    cut = streamed()
    cut.fail(APIError.upstream(504, "cut", code="deadline_exceeded"))
    (main,) = build(cut)
    assert metrics_of(main)["DeadlineStops"] == 1
    refused = StreamRecord()  # refused before the endpoint was called: not the endpoint's failure
    refused.fail(APIError.invalid_request("bad"))
    assert len(build(refused)) == 1


def test_the_cold_start_record_comes_first_with_its_own_dimensions() -> None:
    cold, _ = build(StreamRecord(), cold=True)
    assert metrics_of(cold) == {"ColdStart": 1.0}
    assert cold["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["function_name", "service"]]
    assert cold["function_name"] == "fn"


def test_the_writer_puts_one_log_line_and_one_line_per_emf_record(monkeypatch: Any) -> None:
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    # A service of its own: Powertools gives a logger that already has a handler no second one.
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "unit-writer")
    out = io.StringIO()
    telemetry = Telemetry(CONFIG, out=out)
    telemetry.finish(streamed(), request_id="r-2", function_name="fn")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    logs = [line for line in lines if line.get("message") == "invocation"]
    assert len(logs) == 1 and logs[0]["output_tokens"] == 3
    assert any("_aws" in line and line.get("function_request_id") == "r-2" for line in lines)


def test_the_served_model_is_a_dimension_and_in_the_log_record() -> None:
    record = streamed()
    record.model, record.endpoint, record.dialect = "qwen", "llm-b", "openai"
    (main,) = build(record)
    assert (main["model"], main["endpoint"], main["dialect"]) == ("qwen", "llm-b", "openai")
    fields = invocation_fields(record, CONFIG, ended=1.0, cold_start=False)
    assert (fields["model"], fields["endpoint"], fields["dialect"]) == ("qwen", "llm-b", "openai")


def test_the_functions_own_cost_from_the_records_cpu_stamps_and_relay_times() -> None:
    record = StreamRecord(method="POST", path="/v1/chat/completions", kind="chat", streamed=True, started=10.0)
    record.started_cpu = 2.0
    for n in range(100):  # 99 deltas relayed in 0.1 ms, one in 2 ms
        record.wrote(Delta("t"), b"x", now=10.1 + n * 0.01, read_at=10.1 + n * 0.01 - (0.002 if n == 50 else 0.0001))
    record.first_delta_cpu = 2.0015
    fields = invocation_fields(record, CONFIG, ended=11.2, cold_start=False, cpu_ended=2.0042)
    assert (fields["cpu_ms"], fields["ttft_cpu_ms"]) == (4.2, 1.5)
    assert abs(fields["relay_ms_p50"] - 0.1) <= 0.002 and abs(fields["relay_ms_p99"] - 0.1) <= 0.002
    assert record.relay.max_ms is not None and abs(record.relay.max_ms - 2.0) < 1e-6


def test_no_delta_written_no_relay_or_ttft_cpu() -> None:
    fields = invocation_fields(StreamRecord(method="GET", path="/health"), CONFIG, ended=1.0, cold_start=False)
    assert fields["ttft_cpu_ms"] is None and fields["relay_ms_p50"] is None and fields["relay_ms_p99"] is None
    assert fields["cpu_ms"] is None  # no end stamp given
