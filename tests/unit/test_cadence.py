"""The inter-delta gap summary: exact max, a median within 1 %, and memory that does not follow the stream."""

from __future__ import annotations

import itertools
import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from sagestream.telemetry import Cadence


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
    assert len(cadence._buckets) < 200
    assert cadence.median_ms is not None and 7.0 < cadence.median_ms < 9.5


def test_no_gaps_no_figures() -> None:
    cadence = Cadence()
    assert cadence.median_ms is None and cadence.max_ms is None
    cadence.add(1.0)
    assert cadence.median_ms is None and cadence.count == 0
