"""Guardrails' cost on the stream (issue 56): bursts, first token and what ApplyGuardrail is asked, with the
guardrail off, on the prompt only, and on the answer in ``async`` and ``sync`` mode.

``python -m bench.guardrails [--quick] [--out bench/results/guardrails.json]``. One local stack on the simulated
endpoint with the ApplyGuardrail stand-in (:mod:`sagestream_local.guardrail`, no rule matching: every assessment
answers ``NONE``, as a guardrail does for most text) and one model per configuration through ``MODELS`` (each
its own ``guardrail``), asked in interleaved rounds so that the machine's load falls on all alike:

- ``off``: no guardrail (``"guardrail": false``);
- ``prompt``: the prompt assessed before the endpoint is called (its first token waits for that call);
- ``async``: the answer assessed window by window behind the deltas;
- ``sync``: each window held until assessed.

Per configuration: the median first token (request sent to the first text at the client), the burst count as
the bench counts it everywhere (a token whose text reached the client < 1 ms after the previous token's although
the endpoint sent them >= 2 ms apart; a token is matched to the delta that carried its last character, so a
window released whole counts each of its tokens but the first), the added delay per token (its arrival less its
send), and from the stand-in's own log the assessments and text units (1,000 characters each) per 1,000 output
tokens. Every socket is on loopback; the reader is measure's raw-socket ``StreamReader`` (:mod:`bench.peers`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.peers import Arrivals, read_function_url
from sagestream_local.endpoint import Record, Scenario, prompt_of
from sagestream_local.guardrail import LOCAL_GUARDRAIL_ID
from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack

ROOT = Path(__file__).resolve().parent.parent
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "src")])
CONFIGS: dict[str, Any] = {
    "off": False,
    "prompt": {"sides": "prompt"},
    "async": {"sides": "output", "mode": "async"},
    "sync": {"sides": "output", "mode": "sync"},
}
SCENARIO = Scenario(dialect="openai", tokens=400, cadence_ms=5.0, ttft_ms=100.0, non_ascii=0.0, prefix_hit_ttft_ms=None)
BURST_ARRIVAL_NS = 1_000_000
BURST_SENT_NS = 2_000_000


def _run(stack: LocalStack, model: str, prompt: str) -> dict[str, Any]:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True}).encode()
    arrivals = Arrivals(started_ns=0, keep=True)
    import time

    arrivals.started_ns = time.monotonic_ns()
    reader = read_function_url(stack.url, body, arrivals)
    assert stack.endpoint is not None
    record = stack.endpoint.wait_for_record(
        lambda r: isinstance(r.request, dict) and prompt_of(r.request) == prompt and r.outcome != "streaming"
    )
    return _figures(arrivals, list(reader.text), record)


def _figures(arrivals: Arrivals, texts: list[str], record: Record) -> dict[str, Any]:
    """Each token's arrival: the time of the delta that carried its last character."""
    sends = [(t.monotonic_ns, t.text) for t in record.tokens if t.text and not t.special]
    times = list(arrivals.times)
    ends, total = [], 0
    for text in texts:
        total += len(text)
        ends.append(total)
    arrived, d, chars = [], 0, 0
    for _, text in sends:
        chars += len(text)
        while d < len(ends) - 1 and ends[d] < chars:
            d += 1
        arrived.append(times[d])
    bursts = sum(
        1
        for i in range(1, len(arrived))
        if arrived[i] - arrived[i - 1] < BURST_ARRIVAL_NS and sends[i][0] - sends[i - 1][0] >= BURST_SENT_NS
    )
    added = [(a - s) / 1e6 for a, (s, _) in zip(arrived, sends, strict=True)]
    return {
        "ttft_ms": (times[0] - arrivals.started_ns) / 1e6 if times else None,
        "bursts": bursts,
        "tokens": len(sends),
        "deltas": len(texts),
        "chars": total,
        "added_ms": added,
    }


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(rounds: int) -> dict[str, Any]:
    models = {name: {"endpoint": SIM_ENDPOINT_NAME, "guardrail": guardrail} for name, guardrail in CONFIGS.items()}
    env = {
        "PYTHONPATH": PYTHONPATH,
        "MODELS": json.dumps(models),
        "GUARDRAIL_ID": LOCAL_GUARDRAIL_ID,
        "AUTH_MODE": "none",
        "RESPONSES_STORE": "none",
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    with LocalStack(port=0, concurrency=1, env=env, scenario=SCENARIO, upstream="simulated") as stack:
        assert stack.guardrail is not None
        for name in CONFIGS:  # each model's first request: the environment's first of that kind, not measured
            _run(stack, name, f"Warm up {name}")
        for r in range(rounds):
            for name in CONFIGS:
                before = len(stack.guardrail.calls)
                figures = _run(stack, name, f"Round {r} of {name}: tell me about rivers")
                calls = stack.guardrail.calls[before:]
                outputs = [c for c in calls if c["source"] == "OUTPUT"]
                figures["assessments"] = len(outputs)
                figures["text_units"] = sum(-(-c["chars"] // 1000) for c in outputs)
                figures["prompt_assessments"] = len(calls) - len(outputs)
                runs[name].append(figures)
    out: dict[str, Any] = {"rounds": rounds, "scenario": {"tokens": SCENARIO.tokens, "cadence_ms": SCENARIO.cadence_ms}}
    for name, rows in runs.items():
        tokens = sum(r["tokens"] for r in rows)
        added = [a for r in rows for a in r["added_ms"]]
        out[name] = {
            "ttft_ms_median": round(statistics.median(r["ttft_ms"] for r in rows), 2),
            "bursts": sum(r["bursts"] for r in rows),
            "tokens": tokens,
            "deltas": sum(r["deltas"] for r in rows),
            "chars_per_token": round(sum(r["chars"] for r in rows) / tokens, 2),
            "added_ms_p50": round(_q(added, 0.5), 3),
            "added_ms_p99": round(_q(added, 0.99), 3),
            "added_ms_max": round(max(added), 3),
            "assessments_per_1000_tokens": round(1000 * sum(r["assessments"] for r in rows) / tokens, 2),
            "text_units_per_1000_tokens": round(1000 * sum(r["text_units"] for r in rows) / tokens, 2),
            "prompt_assessments": sum(r["prompt_assessments"] for r in rows),
        }
    out["prompt_added_ttft_ms"] = round(out["prompt"]["ttft_ms_median"] - out["off"]["ttft_ms_median"], 2)
    return out


def markdown(doc: dict[str, Any]) -> str:
    columns = (
        ("ttft_ms_median", "first token ms"),
        ("bursts", "bursts"),
        ("tokens", "tokens"),
        ("deltas", "deltas"),
        ("added_ms_p50", "added p50 ms"),
        ("added_ms_p99", "added p99 ms"),
        ("added_ms_max", "added max ms"),
        ("chars_per_token", "chars / token"),
        ("assessments_per_1000_tokens", "assessments / 1k tokens"),
        ("text_units_per_1000_tokens", "text units / 1k tokens"),
    )
    lines = ["| guardrail | " + " | ".join(c[1] for c in columns) + " |", "| --- |" + " --- |" * len(columns)]
    for name in CONFIGS:
        lines.append(f"| {name} | " + " | ".join(str(doc[name][key]) for key, _ in columns) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guardrails")
    parser.add_argument("--quick", action="store_true", help="5 rounds instead of 15")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "guardrails.json")
    args = parser.parse_args(argv)
    doc = measure(5 if args.quick else 15)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    sys.stdout.write(markdown(doc))
    sys.stdout.write(f"prompt assessment: +{doc['prompt_added_ttft_ms']} ms on the first token (median)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
