"""bench.quotas keeps measuring what it says: every reserve applied (one item per window), every settle once."""

from __future__ import annotations

from bench import quotas


def test_reserve_and_settle_are_timed_on_one_window_and_on_three() -> None:
    figures = quotas.direct(rounds=2)
    assert set(figures) == {"1 window", "3 windows"}
    for calls in figures.values():
        for call in ("reserve", "settle"):
            assert calls[call]["n"] == 2 and 0 < calls[call]["min_ms"] <= calls[call]["median_ms"]
    doc = {
        "direct": figures,
        "first_token": {
            "without": quotas.stats([10.0, 12.0]),
            "with": quotas.stats([20.0, 24.0]),
            "added_median_ms": 11.0,
            "ratio_of_medians": 2.0,
            "rounds": 2,
        },
        "instructions": {"note": "needs valgrind"},
    }
    printed = quotas.lines(doc)
    assert printed[0].startswith("1 window") and "+11.00 ms" in printed[2] and printed[3].endswith("needs valgrind")
