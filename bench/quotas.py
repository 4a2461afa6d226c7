"""What per-caller quotas (``QUOTAS``, :mod:`sagestream.quotas`) cost a request, against moto's DynamoDB server
on loopback (what ``make run`` and the tests use).

``python -m bench.quotas [--rounds N] [--ttft-rounds N] [--no-instructions]``, three figures (about a
minute and a half, most of it callgrind's):

- **reserve and settle** (:class:`sagestream.quotas.DynamoQuotas`, through the client it makes itself, its
  timeouts and retries): wall time of ``reserve`` (one conditional ``UpdateItem`` per window, asked at once,
  before the upstream call: the first token waits for it) and of ``settle`` (an ``UpdateItem`` per item,
  after the response is closed), for per-minute limits only (one window) and for minute, day and month (three), the two
  interleaved round by round; median, min and max;
- **added time to first token**, end to end: two local stacks (the simulated endpoint, ``AUTH_MODE=api_key``,
  one execution environment each), one with ``QUOTAS`` (limits no request reaches) and one without, the same
  short streamed chat sent to each in turn (A/B, then B/A), timed by the client from sending to the first
  content delta; the medians of each and the median of the rounds' differences;
- where valgrind is installed (not with ``--no-instructions``): instructions per delta and per first token
  under callgrind (:func:`bench.instructions.function_run`), the same code with ``QUOTAS`` and without: the
  per-delta path must be the same (the settle runs after ``stream.close()``), the first token's own work
  larger by the reserve. Three counted requests each, after a warm-up (callgrind's counts do not depend on
  what else the host runs).

moto answers in this process (its thread shares the GIL with the Function URL stand-in and the simulated
endpoint): these are the quota's own costs (botocore, JSON, HTTP on loopback), not DynamoDB's service latency,
which a deployment adds (single-digit milliseconds in-Region). The results also go to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sagestream.quotas import DynamoQuotas, Limits, Policy, Subject
from sagestream_local.dynamodb import LocalDynamoDB
from sagestream_local.endpoint import Scenario
from sagestream_local.measure import chat_body, stream_chat
from sagestream_local.stack import LocalStack

ROOT = Path(__file__).resolve().parent.parent
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "src")])
# Limits no request of the bench reaches: every reserve is applied, none refused.
ONE_WINDOW = Limits(requests_per_minute=1_000_000, tokens_per_minute=100_000_000)
THREE_WINDOWS = Limits(
    requests_per_minute=1_000_000, tokens_per_minute=100_000_000, tokens_per_day=10**12, tokens_per_month=10**13
)
QUOTAS = "tokens_per_minute=100000000 requests_per_minute=1000000"  # ONE_WINDOW, as QUOTAS' words
KEY = "sk-bench-quotas"
PROMPT = "Hi"
MAX_TOKENS = 16
# After each request: the settle (after the response is closed) has run before the next request is timed.
SETTLE_PAUSE_S = 0.1
WARM = 3


def stats(ms: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(ms), 2),
        "min_ms": round(min(ms), 2),
        "max_ms": round(max(ms), 2),
        "n": len(ms),
    }


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """``values`` in os.environ for the block (the client :class:`DynamoQuotas` makes reads them), then as before."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def direct(rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    """``reserve`` and ``settle`` wall times, one window and three, interleaved; after :data:`WARM` rounds each."""
    meters: dict[str, tuple[DynamoQuotas, Subject]] = {}
    with LocalDynamoDB() as db:
        env = {
            "AWS_ENDPOINT_URL_DYNAMODB": db.url,
            "AWS_DEFAULT_REGION": db.region,
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_SESSION_TOKEN": "",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
        with _environ(**env):
            for name, limits in (("1 window", ONE_WINDOW), ("3 windows", THREE_WINDOWS)):
                meter = DynamoQuotas(db.quotas_table, Policy(default=limits))
                assert meter.client is not None  # made now, with the environment above
                meters[name] = (meter, Subject(f"key:bench-{name[0]}", (f"key:bench-{name[0]}",)))
        times: dict[str, dict[str, list[float]]] = {name: {"reserve": [], "settle": []} for name in meters}
        for n in range(WARM + rounds):
            for name, (meter, who) in meters.items():
                request_id = uuid.uuid4().hex
                started = time.perf_counter()
                held = meter.reserve(who, 10, MAX_TOKENS, request_id)
                reserved = time.perf_counter()
                assert held is not None and len(held.held) == (1 if name == "1 window" else 3)
                attempts = meter.settle(held.items, request_id, 12)
                settled = time.perf_counter()
                assert attempts == 1, "a settle retried: moto refused it"
                if n >= WARM:
                    times[name]["reserve"].append((reserved - started) * 1000)
                    times[name]["settle"].append((settled - reserved) * 1000)
    return {name: {call: stats(ms) for call, ms in calls.items()} for name, calls in times.items()}


def _stack(quotas: bool) -> LocalStack:
    env = {"PYTHONPATH": PYTHONPATH, "AUTH_MODE": "api_key", "API_KEYS": KEY}
    if quotas:
        env["QUOTAS"] = QUOTAS
    return LocalStack(
        port=0,
        concurrency=1,
        env=env,
        upstream="simulated",
        # A short answer, its first token soon and always as soon (no prefix-cache shortcut): the difference shows.
        scenario=Scenario(dialect="openai", tokens=8, ttft_ms=10.0, cadence_ms=2.0, prefix_hit_ttft_ms=None),
        stdout=subprocess.DEVNULL,
    )


def first_token(rounds: int) -> dict[str, Any]:
    """Time to first content delta, the same request to a stack with ``QUOTAS`` and one without, interleaved."""
    body = chat_body(PROMPT, MAX_TOKENS, None)
    stacks = {"without": _stack(False), "with": _stack(True)}
    ttft: dict[str, list[float]] = {name: [] for name in stacks}
    try:
        for stack in stacks.values():
            stack.start()
        for n in range(WARM + rounds):
            for name in list(stacks) if n % 2 == 0 else list(stacks)[::-1]:
                run = stream_chat(stacks[name].url, body, api_key=KEY, timeout_s=30)
                if run.status != 200 or not run.deltas or run.ttft_ms is None:
                    raise RuntimeError(f"{name} quotas: HTTP {run.status} {run.error}")
                counted = "x-ratelimit-limit-tokens" in run.headers
                if counted != (name == "with"):
                    raise RuntimeError(f"{name} quotas, but rate-limit headers {'' if counted else 'not '}sent")
                if n >= WARM:
                    ttft[name].append(run.ttft_ms)
                time.sleep(SETTLE_PAUSE_S)
    finally:
        for stack in stacks.values():
            stack.stop()
    added = [w - wo for w, wo in zip(ttft["with"], ttft["without"], strict=True)]
    return {
        "without": stats(ttft["without"]),
        "with": stats(ttft["with"]),
        "added_median_ms": round(statistics.median(added), 2),
        "medians_difference_ms": round(statistics.median(ttft["with"]) - statistics.median(ttft["without"]), 2),
        "ratio_of_medians": round(statistics.median(ttft["with"]) / statistics.median(ttft["without"]), 3),
        "rounds": rounds,
    }


def instruction_counts(requests: int) -> dict[str, Any]:
    """Callgrind's instructions per delta and per first token, the function with ``QUOTAS`` and without."""
    from bench import instructions
    from bench.cold import InitClock
    from bench.run import COLD_EVENT

    if instructions.valgrind() is None:
        return {"note": "needs valgrind (apt-get install valgrind): not counted"}
    clock = InitClock()
    env = {"PYTHONPATH": PYTHONPATH, "QUOTAS": QUOTAS}
    scenario = Scenario(dialect="openai", non_ascii=0.1)
    with LocalStack(port=0, concurrency=1, env=env, scenario=scenario, stdout=subprocess.DEVNULL) as stack:
        sim = stack.endpoint
        with_quotas = {k: v for k, v in stack.env.items() if k != "SERVE_UI"}
        without = {k: v for k, v in with_quotas.items() if k not in ("QUOTAS", "QUOTAS_TABLE")}
        out: dict[str, Any] = {}
        for name, run_env in (("without", without), ("with", with_quotas)):
            run = instructions.function_run(clock, sim, run_env, requests, True, COLD_EVENT)
            out[name] = {k: round(run[k]) for k in ("per_delta", "first_token_own", "first_token_botocore")}
            out[name]["deltas_counted"] = run["deltas_counted"]
    out["per_delta_ratio"] = round(out["with"]["per_delta"] / out["without"]["per_delta"], 4)
    out["first_token_own_added"] = out["with"]["first_token_own"] - out["without"]["first_token_own"]
    out["requests"] = requests
    return out


def lines(doc: dict[str, Any]) -> list[str]:
    """The figures, one line each."""
    out = []
    for name, calls in doc["direct"].items():
        r, s = calls["reserve"], calls["settle"]
        out.append(
            f"{name:9}  reserve {r['median_ms']:5.2f} ms (min {r['min_ms']:.2f}, max {r['max_ms']:.2f})  "
            f"settle {s['median_ms']:5.2f} ms (min {s['min_ms']:.2f}, max {s['max_ms']:.2f})  medians of {r['n']}"
        )
    ft = doc["first_token"]
    out.append(
        f"first token: without QUOTAS {ft['without']['median_ms']:.2f} ms, with {ft['with']['median_ms']:.2f} ms "
        f"(x{ft['ratio_of_medians']}); added per round, median {ft['added_median_ms']:+.2f} ms "
        f"({ft['rounds']} A/B rounds)"
    )
    counts = doc.get("instructions")
    if counts and "with" in counts:
        out.append(
            f"instructions per delta: without {counts['without']['per_delta']:,}, with {counts['with']['per_delta']:,} "
            f"(x{counts['per_delta_ratio']}); first token's own: without {counts['without']['first_token_own']:,}, "
            f"with {counts['with']['first_token_own']:,} ({counts['first_token_own_added']:+,})"
        )
    elif counts:
        out.append(f"instructions: {counts['note']}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quotas", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=50, help="measured rounds of reserve/settle (50)")
    parser.add_argument("--ttft-rounds", type=int, default=30, help="measured A/B rounds of first token (30)")
    parser.add_argument(
        "--no-instructions", action="store_true", help="skip the callgrind counts (about a minute of the run)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "quotas.json")
    args = parser.parse_args(argv)
    began = time.monotonic()
    doc: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_before": Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else None,
        "cores": os.cpu_count(),
    }
    doc["direct"] = direct(args.rounds)
    doc["first_token"] = first_token(args.ttft_rounds)
    if not args.no_instructions:
        doc["instructions"] = instruction_counts(3)
    doc["elapsed_s"] = round(time.monotonic() - began, 1)
    print(f"{doc['date']}, load {doc['loadavg_before']}, {doc['cores']} cores, {doc['elapsed_s']} s")
    for line in lines(doc):
        print(line)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
