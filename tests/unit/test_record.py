"""The invocation's record: what each delta and each failure change on it; and its inter-delta gap summary,
with an exact max, a median within 1 %, and memory that does not follow the stream."""

from __future__ import annotations

import itertools
import math
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from sagestream.delta import Delta, Usage
from sagestream.errors import APIError
from sagestream.record import Cadence, Histogram, StreamRecord


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0005, max_value=5_000), min_size=1, max_size=300))
def test_median_within_one_percent_and_max_exact(gaps_ms: list[float]) -> None:
    cadence = Cadence()
    times = list(itertools.accumulate([0.0, *(g / 1000 for g in gaps_ms)]))
    for t in times:
        cadence.add(t)
    true_gaps = [(b - a) * 1000 for a, b in itertools.pairwise(times)]
    assert cadence.count == len(true_gaps)
    assert cadence.max_ms == max(true_gaps)
    expected = statistics.median_low(true_gaps)
    assert cadence.median_ms is not None
    assert abs(cadence.median_ms - expected) <= 0.0101 * expected + 0.001


def test_a_million_deltas_keep_a_small_summary() -> None:
    cadence = Cadence()
    for i in range(1_000_000):
        cadence.add(i * 0.008 + (i % 7) * 1e-4)
    assert cadence.count == 999_999
    assert len(cadence.gaps._buckets) < 200
    assert cadence.median_ms is not None and 7.0 < cadence.median_ms < 9.5


def test_no_gaps_no_figures() -> None:
    cadence = Cadence()
    assert cadence.median_ms is None and cadence.max_ms is None
    cadence.add(1.0)
    assert cadence.median_ms is None and cadence.count == 0


def test_only_written_bytes_count_for_the_first_delta_and_the_cadence() -> None:
    record = StreamRecord(started=0.0)
    record.wrote(Delta(usage=Usage(3, 1, 4)), b"", now=0.5)  # usage alone: nothing written yet
    assert record.first_delta is None and record.cadence.count == 0
    record.wrote(Delta("a"), b"data: a", now=1.0)
    record.wrote(Delta("b"), b"data: b", now=1.25)
    assert record.first_delta == 1.0 and record.cadence.count == 1 and record.cadence.max_ms == 250.0


def test_output_tokens_are_the_containers_count_when_sent_else_the_deltas_with_text() -> None:
    counted = StreamRecord()
    for text in ("a", "", "b", "c"):
        counted.wrote(Delta(text), b"x" if text else b"")
    assert counted.output_tokens == 3
    reported = StreamRecord()
    reported.wrote(Delta("one delta, many tokens"), b"x")
    reported.wrote(Delta(finish_reason="stop", usage=Usage(10, 7, 17)), b"x")
    assert reported.output_tokens == 7 and reported.finish_reason == "stop"


def test_a_delta_without_output_counts_no_token_whatever_else_it_carries() -> None:
    record = StreamRecord()
    record.wrote(Delta(role="assistant"), b"data: role")
    record.wrote(Delta(finish_reason="stop"), b"data: stop")
    assert record.output_tokens == 0


def test_tool_call_fragments_and_reasoning_count_as_output_when_no_usage_is_sent() -> None:
    record = StreamRecord()
    record.wrote(Delta(reasoning_content="Think"), b"x")
    record.wrote(Delta(tool_calls=[{"index": 0, "function": {"arguments": '{"a"'}}]), b"x")
    record.wrote(Delta(refusal="No"), b"x")
    assert record.output_tokens == 3


def test_the_completion_is_kept_only_when_asked() -> None:
    kept, dropped = StreamRecord(completion=[]), StreamRecord()
    for record in (kept, dropped):
        record.wrote(Delta("Hé"), b"x")
        record.wrote(Delta("llo"), b"x")
    assert kept.completion == ["Hé", "llo"] and dropped.completion is None


def test_fail_takes_status_type_and_code_and_marks_a_deadline_stop() -> None:
    record = StreamRecord()
    record.fail(APIError.upstream(502, "boom", code="model_stream_error"))
    assert (record.status, record.error_type, record.error_code, record.deadline_stop) == (
        502,
        "server_error",
        "model_stream_error",
        False,
    )
    record.fail(APIError.upstream(504, "cut", code="deadline_exceeded"))
    assert record.deadline_stop is True and record.status == 504


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(min_value=0.0005, max_value=60_000), min_size=1, max_size=400),
    st.sampled_from([0.01, 0.5, 0.9, 0.99, 1.0]),
)
def test_histogram_quantiles_within_one_percent(values_ms: list[float], q: float) -> None:
    histogram = Histogram()
    for value in values_ms:
        histogram.add(value)
    ordered = sorted(values_ms)
    expected = ordered[max(1, math.ceil(q * len(ordered))) - 1]  # nearest rank
    got = histogram.quantile(q)
    assert got is not None and abs(got - expected) <= 0.0101 * expected + 0.001
    assert histogram.max_ms == ordered[-1] and histogram.min_ms == ordered[0]


def test_relay_time_is_the_read_to_the_write_of_each_written_delta() -> None:
    record = StreamRecord(started=0.0)
    record.wrote(Delta(usage=Usage(3, 1, 4)), b"", now=0.2, read_at=0.1)  # nothing written: not timed
    record.wrote(Delta("a"), b"data: a", now=1.0002, read_at=1.0)
    record.wrote(Delta("b"), b"data: b", now=2.0003, read_at=2.0)
    record.wrote(Delta("c"), b"data: c", now=3.0)  # no read to time it from (a closing chunk)
    assert record.relay.count == 2
    assert record.relay.max_ms is not None and abs(record.relay.max_ms - 0.3) < 1e-6
    assert record.first_delta_cpu is not None and record.first_delta_cpu >= record.started_cpu
