"""bench.many: K streams in one runtime process, and the figures its rows and targets are made of."""

from __future__ import annotations

import os

import pytest

from bench import many, report


def test_one_k_times_every_delta_at_the_runtime_and_at_the_client() -> None:
    row = many.one_k(4, seconds=1.0, pin=many.can_pin())
    # one_k itself fails unless every stream's client got every token and the runtime wrote each one once
    assert row["k"] == 4 and row["tokens_per_stream"] == 40
    assert row["cpu_ms_per_stream_s"] > 0 and row["streams_per_vcpu"] > 0
    # the runtime's write of a delta comes before the client has it, and after the endpoint sent it
    assert 0 < row["runtime_added_ms_p50"] <= row["added_ms_p50"] + 0.05
    assert row["runtime_first_delta_ms_max"] > 0 and row["runtime_added_ms_p99"] >= row["runtime_added_ms_p50"]
    assert row["pinned"] is many.can_pin()
    assert row["runtime_cpus"] == (1 if many.can_pin() else len(os.sched_getaffinity(0)))


@pytest.mark.skipif(not many.can_pin(), reason="pinning needs two CPUs: one for the runtime, one for the harness")
def test_pinning_gives_the_affinity_back() -> None:
    before = os.sched_getaffinity(0)
    many.one_k(2, seconds=0.5, pin=True)
    assert os.sched_getaffinity(0) == before


def test_median_row_takes_each_figure_over_the_runs() -> None:
    runs = [
        {"k": 64, "cpu_ms_per_stream_s": c, "runtime_added_ms_p99": p, "pinned": True, "streams_per_vcpu": 0}
        for c, p in ((8.0, 3.0), (6.0, 9.0), (7.0, 4.0))
    ]
    row = many._median_row(runs)
    assert row["cpu_ms_per_stream_s"] == 7.0 and row["runtime_added_ms_p99"] == 4.0
    assert row["streams_per_vcpu"] == 143 and row["cpu_ms_per_stream_s_range"] == [6.0, 8.0]
    assert row["pinned"] is True and row["repeats"] == 3 and row["k"] == 64


def test_the_many_stream_targets_read_the_k64_row() -> None:
    doc = {
        "workloads": {},
        "many_streams": [
            {"k": 16, "streams_per_vcpu": 400, "runtime_added_ms_p99": 1.0, "rss_mb_per_stream": 0.01},
            {"k": 64, "streams_per_vcpu": 149, "runtime_added_ms_p99": 4.9, "rss_mb_per_stream": 1.2},
        ],
    }
    rows = {name: (value, met) for name, value, met, _ in report.target_rows(doc)}
    assert rows["streams per vCPU >= 150 at K=64"] == (149, False)
    assert rows["runtime's added p99 <= 5 ms per delta at K=64"] == (4.9, True)
    assert rows["RSS per extra stream <= 1 MB at K=64"] == (1.2, False)
    assert rows["cold init CPU <= 1.15x a bare boto3 client"] == (None, None)  # not taken: neither met nor missed
