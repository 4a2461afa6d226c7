"""What each of several invocations running at once in one process keeps to itself (Lambda Managed Instances).

Threads stand in for the runtime's loop threads: each binds its own invocation, logs and writes its
record while the others are in the middle of theirs, and must see only its own ids and trace id.
"""

from __future__ import annotations

import io
import json
import os
import threading
from typing import Any

import pytest

from sagestream import upstream
from sagestream.config import Config
from sagestream.lambda_runtime import Invocation, LambdaContext, invoke, logs, max_concurrency, trace_id
from sagestream.record import StreamRecord
from sagestream.telemetry import Telemetry

K = 8


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_each_invocations_log_records_carry_its_own_ids_and_trace_id_while_others_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A service of its own: Powertools gives a logger that already has a handler no second one.
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "unit-concurrent-logs")
    out = io.StringIO()
    telemetry = Telemetry(Config(endpoint_name="my-llm"), out=out)
    all_bound = threading.Barrier(K)

    def one(i: int) -> None:
        logs._trace_id.set(f"Root=1-00000000-{i:024x};Sampled=1")
        with telemetry.bind(f"request-{i}", f"url-{i}"):
            all_bound.wait(5)  # every invocation has its keys before any logs
            telemetry.logger.info("working", extra={"n": i})
            all_bound.wait(5)  # and none has left before every one has logged
        telemetry.logger.info("after", extra={"n": i})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(K)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    lines = _lines(out)
    working = [line for line in lines if line["message"] == "working"]
    assert len(working) == K
    for line in working:
        n = line["n"]
        assert (line["function_request_id"], line["url_request_id"]) == (f"request-{n}", f"url-{n}")
        assert line["xray_trace_id"] == f"1-00000000-{n:024x}"
    after = [line for line in lines if line["message"] == "after"]
    assert len(after) == K and all("function_request_id" not in line for line in after), "bound keys left behind"


def test_concurrent_records_are_one_whole_json_line_each_and_only_the_first_is_a_cold_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "unit-concurrent-records")
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    out = io.StringIO()
    telemetry = Telemetry(Config(endpoint_name="my-llm"), out=out)
    from aws_lambda_powertools.metrics.provider import cold_start

    cold_start.is_cold_start = True
    start = threading.Barrier(K)

    def one(i: int) -> None:
        record = StreamRecord(method="GET", path="/health", started=0.0)
        start.wait(5)
        telemetry.finish(record, request_id=f"request-{i}", function_name="f")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(K)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    lines = _lines(out)  # each line whole JSON: no two writes interleaved
    logs = [line for line in lines if line.get("message") == "invocation"]
    assert len(logs) == K and sum(line["cold_start"] for line in logs) == 1
    metrics = [line for line in lines if "_aws" in line and "ClientDisconnects" in line]
    assert sorted(line["function_request_id"] for line in metrics) == sorted(f"request-{i}" for i in range(K))


class _Stream:
    def __init__(self) -> None:
        self.started = False

    def start(self, status: int, headers: Any, cookies: Any = ()) -> None:
        self.started = True

    def write(self, data: bytes | str) -> None: ...

    def close(self) -> None: ...


class _Client:
    def response_stream(self, request_id: str, deadline_ms: int | None = None) -> _Stream:
        return _Stream()

    def post_error(self, request_id: str, exc: BaseException) -> int:
        return 202


@pytest.mark.parametrize("concurrent", [False, True])
def test_the_trace_header_is_the_invocations_own_and_the_environment_variable_only_one_at_a_time(
    concurrent: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)
    seen: dict[str, Any] = {}

    def handler(event: dict[str, Any], stream: Any, context: LambdaContext) -> None:
        seen["trace_id"] = trace_id()
        seen["environment"] = os.environ.get("_X_AMZN_TRACE_ID")

    header = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"
    invocation = Invocation("r-1", {}, LambdaContext(aws_request_id="r-1", deadline_ms=0), header)
    threading.Thread(target=invoke, args=(_Client(), handler, invocation), kwargs={"concurrent": concurrent}).start()
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(5)
    assert seen["trace_id"] == header
    assert seen["environment"] == (None if concurrent else header), "process-wide only with one at a time"


def test_max_concurrency_is_read_from_the_environment_and_refuses_nonsense() -> None:
    assert max_concurrency(None) == 1 and max_concurrency("") == 1 and max_concurrency("32") == 32
    for bad in ("0", "-2", "many"):
        with pytest.raises(ValueError, match="AWS_LAMBDA_MAX_CONCURRENCY"):
            max_concurrency(bad)


def test_the_upstream_client_keeps_a_connection_per_concurrent_invocation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_LAMBDA_MAX_CONCURRENCY", "64")
    assert upstream.make_client(Config(endpoint_name="my-llm")).meta.config.max_pool_connections == 64
    monkeypatch.delenv("AWS_LAMBDA_MAX_CONCURRENCY")
    assert upstream.make_client(Config(endpoint_name="my-llm")).meta.config.max_pool_connections == 10
