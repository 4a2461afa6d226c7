"""bench.engine's side-by-side figures on the suite's engine and stack (two short runs a side)."""

from __future__ import annotations

import pytest
from bench.engine import compare, table

from sagestream_local.stack import LocalStack
from sagestream_local.vllm_engine import VllmEngine

# The first test pays for the session's engine start (20-60 s on two shared cores) within its own timeout.
pytestmark = pytest.mark.timeout(300)


def test_both_sides_stream_the_same_deltas_and_are_timed(engine_stack: LocalStack, engine: VllmEngine) -> None:
    result = compare(engine_stack.url, engine.url, engine.model_name, runs=2, tokens=16)
    ours, theirs = result["sagestream"], result["engine"]
    # The same greedy tokens on both sides: the same text. Not the same delta count: vLLM may group two tokens
    # in one chunk when the machine is busy (a CI run saw 13 against 12).
    assert ours["deltas"] > 0 and theirs["deltas"] > 0
    assert set(ours["texts"]) == set(theirs["texts"]) and len(set(ours["texts"])) == 1 and ours["texts"][0]
    for side in (ours, theirs):
        assert len(side["ttft_ms_runs"]) == 2 and all(0 < t < 60_000 for t in side["ttft_ms_runs"])
        assert side["cadence_ms_median"] >= 0
    assert result["added_ttft_ms"] == round(ours["ttft_ms"] - theirs["ttft_ms"], 3)
    assert table(result).count("\n") == 3
