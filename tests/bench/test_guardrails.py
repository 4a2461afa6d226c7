"""bench.guardrails' figures: each token is matched to the delta that carried its last character, so a window
released whole counts as bursts, and text passed delta by delta does not."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bench.guardrails import _figures
from bench.peers import Arrivals

MS = 1_000_000


def _record(texts: list[str], every_ms: int) -> Any:
    tokens = [SimpleNamespace(text=t, special=False, monotonic_ns=i * every_ms * MS) for i, t in enumerate(texts)]
    return SimpleNamespace(tokens=tokens)


def test_deltas_as_sent_are_no_burst_and_a_window_released_whole_is() -> None:
    tokens = ["Hello", " there", " my", " friend"]
    passed = Arrivals(started_ns=0, keep=True)
    passed.times.extend([5 * MS, 10 * MS, 15 * MS, 20 * MS])
    figures = _figures(passed, tokens, _record(tokens, 5))
    assert (figures["bursts"], figures["deltas"], figures["chars"]) == (0, 4, 21)
    assert figures["ttft_ms"] == 5.0 and figures["added_ms"] == [5.0, 5.0, 5.0, 5.0]

    held = Arrivals(started_ns=0, keep=True)
    held.times.extend([30 * MS, 31 * MS])
    figures = _figures(held, ["Hello there", " my friend"], _record(tokens, 5))
    assert figures["bursts"] == 2  # " there" and " friend" came with the token before them, sent 5 ms apart
    assert figures["added_ms"] == [30.0, 25.0, 21.0, 16.0]
