"""The function's own figures come from its invocation log records, whatever else its stdout carries."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

from bench import function


def _record(cpu_ms: float, ttft_cpu_ms: float, p50: float, p99: float, tokens: int = 80) -> str:
    return json.dumps(
        {
            "level": "INFO",
            "message": "invocation",
            "cpu_ms": cpu_ms,
            "ttft_cpu_ms": ttft_cpu_ms,
            "relay_ms_p50": p50,
            "relay_ms_p99": p99,
            "output_tokens": tokens,
        }
    )


def test_each_turn_reads_only_the_records_it_added(tmp_path: Path) -> None:
    path = tmp_path / "runtime.log"
    emf = json.dumps({"_aws": {"CloudWatchMetrics": []}, "TimeToFirstToken": 1.0})
    path.write_text("\n".join([_record(1, 1, 1, 1), emf, '{"message": "the request failed"}']) + "\n")
    log = function.InvocationLog(path)
    assert [r["cpu_ms"] for r in log.new_records()] == [1]
    with path.open("a") as f:
        f.write(_record(2, 2, 2, 2) + "\n" + _record(3, 3, 3, 3)[:20])  # the last line is still being written
    assert [r["cpu_ms"] for r in log.new_records()] == [2]
    with path.open("a") as f:
        f.write(_record(3, 3, 3, 3)[20:] + "\n")
    assert [r["cpu_ms"] for r in log.new_records()] == [3]
    assert log.new_records() == []


def test_figures_are_medians_over_the_measured_runs_not_the_warm_up() -> None:
    warm_up = json.loads(_record(100, 50, 9, 9, tokens=2))
    runs = [json.loads(_record(c, t, p50, p99)) for c, t, p50, p99 in [(8, 1.0, 0.1, 0.2), (16, 3.0, 0.3, 0.4)]]
    runs.append(json.loads(_record(12, 2.0, 0.2, 0.3)))
    got = function.figures([warm_up, *runs], runs=3)
    assert got == {
        "cpu_ms": 12.0,
        "ttft_cpu_ms": 2.0,
        "relay_ms_p50": 0.2,
        "relay_ms_p99": 0.3,
        "invocation_cpu_us_per_delta": 150.0,
        "invocations": 3,
    }


def test_records_without_the_figures_give_none_rather_than_zero() -> None:
    got = function.figures([{"message": "invocation", "output_tokens": 3}], runs=1)
    assert got["ttft_cpu_ms"] is None and got["relay_ms_p99"] is None and got["invocation_cpu_us_per_delta"] is None


def test_the_docstring_example_holds() -> None:
    result = doctest.testmod(function)
    assert result.attempted > 0 and result.failed == 0
