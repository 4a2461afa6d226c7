"""The runtime's own log lines: one whole JSON object each, naming its invocation."""

from __future__ import annotations

import json
import threading

import pytest

from sagestream.lambda_runtime.logs import _trace_id, log, trace_id


def test_a_line_is_json_with_its_request_id_and_its_traceback_inside(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        raise OSError("gone")
    except OSError as exc:
        log("ERROR", "the handler failed", request_id="r-1", exc=exc)
    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert record["level"] == "ERROR" and record["logger"] == "sagestream.lambda_runtime"
    assert record["requestId"] == "r-1" and record["errorType"] == "OSError"
    assert any("gone" in part for part in record["stackTrace"])


def test_the_trace_header_is_each_threads_own() -> None:
    seen: list[str | None] = []
    _trace_id.set("Root=main")

    def other() -> None:
        seen.append(trace_id())  # a thread starts with the default, not the main thread's value

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(10)
    assert seen == [None] and trace_id() == "Root=main"
    _trace_id.set(None)
