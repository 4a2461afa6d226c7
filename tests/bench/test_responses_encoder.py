"""The encoder comparison in ``make bench``: both encoders over the same deltas, one run, a ratio."""

from __future__ import annotations

from bench import responses_encoder as encoders


def test_both_encoders_run_over_the_same_deltas_and_the_ratio_is_reported() -> None:
    result = encoders.compare(deltas=200, repeats=3)
    assert result["deltas"] == len(encoders.stream(200)) == 203
    assert result["chat_ns_per_delta"] > 0 and result["responses_ns_per_delta"] > 0
    assert abs(result["ratio"] - result["responses_ns_per_delta"] / result["chat_ns_per_delta"]) < 0.01
    # Both wrote a whole stream, each event of each text delta some tens of bytes.
    assert min(result["bytes"].values()) > 200 * 50
    assert "x (target <= 1.1x)" in encoders.line(result)
