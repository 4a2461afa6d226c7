"""sagestream against the engine it relays, side by side over a real vLLM: first token and cadence.

``python -m bench.engine [--runs 5] [--tokens 128]``: ``make run UPSTREAM=vllm``'s chain (the local stack
over the SageMaker front over ``vllm serve`` on the tiny model) and the engine's own
``/v1/chat/completions``, the same streamed request to each in turn, alternating so that neither gets a
warmer engine, a second apart (:data:`PAUSE_S`). Per side: time to the first content delta and the median
and p90 gap between deltas, each the median over the runs; the difference in first token is what the whole
chain (Function URL front, runtime process, boto3, the SageMaker front, event-stream framing) adds to an
engine on this machine.
Written to ``bench/results/engine.json`` and printed as a table.

The tiny model's tokens cost the engine little, so the engine's cadence is its scheduler's and HTTP's, a
floor no real model reaches; a token that is partial UTF-8 is held by vLLM's detokenizer, so both sides see
fewer deltas than tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from sagestream_local.measure import stream_chat
from sagestream_local.stack import LocalStack

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "Count from one to ten and tell me about the weather in Oslo."
# vLLM on CPU gives a request that comes within about half a second of the previous one's end its first
# token some 250 ms late (seen directly on /invocations and /v1/chat/completions alike); with a second
# between requests it does not, and the figures are the chain's, not that stall's.
PAUSE_S = 1.0


def body(model: str, tokens: int) -> bytes:
    request = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
    }
    return json.dumps(request).encode()


def compare(relay_url: str, engine_url: str, model: str, runs: int, tokens: int) -> dict[str, Any]:
    """``runs`` streamed requests to each side, alternating; the medians of each side's figures."""
    sides: dict[str, list[dict[str, Any]]] = {"sagestream": [], "engine": []}
    texts: dict[str, list[str]] = {"sagestream": [], "engine": []}
    for _ in range(runs):
        for side, url in (("sagestream", relay_url), ("engine", engine_url)):
            time.sleep(PAUSE_S)
            run = stream_chat(url, body(model, tokens), timeout_s=120)
            if run.status != 200 or not run.deltas:
                raise RuntimeError(f"{side}: HTTP {run.status} {run.error}")
            sides[side].append(run.summary())
            texts[side].append(run.text)
    result: dict[str, Any] = {"runs": runs, "max_tokens": tokens}
    for side, summaries in sides.items():
        result[side] = {
            figure: round(statistics.median(s[figure] for s in summaries), 3)
            for figure in ("ttft_ms", "cadence_ms_median", "cadence_ms_p90", "deltas")
        }
        result[side]["ttft_ms_runs"] = [s["ttft_ms"] for s in summaries]  # this machine's noise, shown
        # What is stable between two generations (greedy, the same prompt): the text. How vLLM groups its
        # tokens into deltas is not: a busy machine's scheduler sends two tokens in one chunk now and then.
        result[side]["texts"] = texts[side]
    result["added_ttft_ms"] = round(result["sagestream"]["ttft_ms"] - result["engine"]["ttft_ms"], 3)
    return result


def table(result: dict[str, Any]) -> str:
    rows = [
        "| | first token (ms) | cadence median (ms) | cadence p90 (ms) | deltas |",
        "| --- | --- | --- | --- | --- |",
    ]
    for side in ("sagestream", "engine"):
        figures = result[side]
        rows.append(
            f"| {side} | {figures['ttft_ms']} | {figures['cadence_ms_median']} | {figures['cadence_ms_p90']} "
            f"| {figures['deltas']} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "engine.json")
    args = parser.parse_args(argv)
    with LocalStack(port=0, concurrency=1, upstream="vllm", env={"RESPONSES_STORE": "none"}) as stack:
        assert stack.engine is not None
        warm = body(stack.engine.model_name, 2)
        for url in (stack.url, stack.engine.url):  # the first call of each side pays for imports and connections
            stream_chat(url, warm, timeout_s=120)
        result = compare(stack.url, stack.engine.url, stack.engine.model_name, args.runs, args.tokens)
        result["engine_start_s"] = round(stack.engine.start_s or 0, 1)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"sagestream adds {result['added_ttft_ms']} ms to the first token; written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
