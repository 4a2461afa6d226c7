"""Instructions per delta and per first token: the steady figures, counted by callgrind.

CPU time on a shared host swings with wake-ups and neighbours (the same code measured 1.26-3.3x the
line-iterator peer per delta between runs); the number of instructions a piece of code executes does not.
So the function's runtime process and the ``line-iterator`` peer each run under
``valgrind --tool=callgrind --dump-before=getppid`` with :mod:`bench.counted`'s marks, and each mark
dumps the instructions since the previous one: exact counts per interval, whatever the host is doing.
The same marks, in a second run without valgrind, give the CPU time of the same intervals, beside.

Figures (medians over the measured requests' intervals):

- ``per_delta``: from one body write to the next, in the middle of a stream (the upstream read, botocore's
  frame parse, line split, JSON decode, encode, the write, the record); for the peer, from one content
  delta handed on to the next;
- ``first_token_own``: the function's work from ``/next``'s answer to its first body write returned, less
  botocore's call (``first_token_botocore``): event parse, routing, validation, upstream body, response
  start, the first part's relay and write; for a chat, and (``first_token_own_responses``,
  ``first_token_own_messages``) for the same question on the Responses and Messages routes, whose first
  write carries their opening events;
- ``function_per_delta_responses`` and ``function_per_delta_messages`` (and their ratios to the peer's):
  ``per_delta`` on those routes, the same stream read and decoded, written in that protocol's events.

The counts are of this machine's CPython build (pyenv's 3.13, not Lambda's PGO build) and include each
mark's own small cost (a line written to a file, ``getppid``), the same for the function and the peer.
Without valgrind on PATH the instruction figures are ``None`` ("needs valgrind") and the CPU ones remain.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import counted
from bench.cold import FirstChunk, InitClock
from sagestream_local.runtime_api import Pool

ROOT = Path(__file__).resolve().parent.parent
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "src")])
TOKENS = 40
# Slow enough that, even 50x slower under callgrind, each delta is its own upstream read, as on Lambda.
CADENCE_MS = 40


def valgrind() -> str | None:
    return shutil.which("valgrind")


def _command(program: list[str], out_dir: Path, counting: bool) -> list[str]:
    if not counting:
        return program
    return [
        valgrind() or "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out_dir}/callgrind.%p",
        "--dump-before=getppid",
        "--dump-line=no",
        "--dump-instr=no",
        *program,
    ]


def _dumps(out_dir: Path) -> list[int]:
    """The instructions of each numbered dump (``callgrind.PID.N``), in order."""
    numbered = sorted(
        (p for p in out_dir.glob("callgrind.*.*") if p.suffix[1:].isdigit()), key=lambda p: int(p.suffix[1:])
    )
    counts = []
    for path in numbered:
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                counts.append(int(line.split()[1]))
                break
    return counts


def _intervals(out_dir: Path, counting: bool) -> list[tuple[str, int]]:
    """Per mark: its label and the work since the previous mark (instructions, or CPU ns without valgrind)."""
    marks = counted.intervals((out_dir / "marks").read_text())
    if not counting:
        return marks
    dumps = _dumps(out_dir)
    if len(dumps) != len(marks):
        raise RuntimeError(f"{len(marks)} marks but {len(dumps)} callgrind dumps")
    return [(label, n) for (label, _), n in zip(marks, dumps, strict=True)]


def _middle(values: list[int]) -> list[int]:
    """The steady part of a stream's intervals: without the first two and the last two."""
    return values[2:-2] if len(values) > 6 else values


def function_run(
    clock: InitClock, sim: Any, env: dict[str, str], requests: int, counting: bool, event: dict[str, Any]
) -> dict[str, Any]:
    """The function's runtime process (from source) serving a warm-up then ``requests`` streamed chats."""
    with tempfile.TemporaryDirectory(prefix="sagestream-counted-") as tmp:
        out_dir = Path(tmp)
        run_env = {
            **env,
            "PYTHONPATH": PYTHONPATH,
            "_HANDLER": "bench.counted.handler",
            "COUNTED_MARKS": str(out_dir / "marks"),
        }
        command = _command([sys.executable, "-m", "sagestream.lambda_runtime"], out_dir, counting)
        sim.set_scenario(tokens=TOKENS, cadence_ms=CADENCE_MS, ttft_ms=20)
        try:
            with Pool(size=1, env=run_env, command=command, stdout=subprocess.DEVNULL, timeout_s=600) as pool:
                clock.wait(pool.environments[0], timeout_s=600)
                for _ in range(requests + 1):
                    sink = FirstChunk()
                    invocation = pool.submit(event, sink)
                    if not invocation.wait(600) or not sink.ended.wait(300) or sink.status != 200:
                        raise RuntimeError(f"a counted request failed: HTTP {sink.status}")
        finally:
            sim.reset_scenario()
        marks = _intervals(out_dir, counting)
    # One invocation: from its "event" mark to the next one's (the first, the warm-up, is dropped).
    starts = [i for i, (label, _) in enumerate(marks) if label == "event"]
    if len(starts) < requests + 1:
        raise RuntimeError(
            f"{len(starts)} /next marks for {requests + 1} requests: bench.counted no longer hooks the runtime's read"
        )
    first_own, first_botocore, per_delta = [], [], []
    for begin, end in zip(starts[1:], [*starts[2:], len(marks)], strict=True):
        own = marks[begin + 1 : end]
        labels = [label for label, _ in own]
        if end == len(marks) and "called" not in labels:
            continue  # the runtime's last /next, still waiting for an event when the process was stopped
        called = labels.index("called")
        first_write = labels.index("write")
        first_botocore.append(own[called][1])
        first_own.append(sum(n for label, n in own[: first_write + 1]) - own[called][1])
        writes = [n for label, n in own[first_write + 1 :] if label == "write"]
        per_delta.extend(_middle(writes))
    return {
        "per_delta": statistics.median(per_delta),
        "first_token_own": statistics.median(first_own),
        "first_token_botocore": statistics.median(first_botocore),
        "requests": requests,
        "deltas_counted": len(per_delta),
    }


def peer_run(sim: Any, env: dict[str, str], peer: str, requests: int, counting: bool) -> dict[str, Any]:
    """A reader peer (its own process, :mod:`bench.peers`' code): its work per content delta."""

    with tempfile.TemporaryDirectory(prefix="sagestream-counted-") as tmp:
        out_dir = Path(tmp)
        program = [sys.executable, "-m", "bench.counted", peer, "--target", sim.url, "--runs", str(requests)]
        command = _command([*program, "--out", str(out_dir / "peer.json")], out_dir, counting)
        sim.set_scenario(tokens=TOKENS, cadence_ms=CADENCE_MS, ttft_ms=20)
        try:
            subprocess.run(
                command,
                env={**os.environ, **env, "PYTHONPATH": PYTHONPATH, "COUNTED_MARKS": str(out_dir / "marks")},
                check=True,
                timeout=900,
                capture_output=True,
            )
        finally:
            sim.reset_scenario()
        runs = json.loads((out_dir / "peer.json").read_text())["runs"]
        marks = _intervals(out_dir, counting)
    per_delta: list[int] = []
    measured = marks[len(marks) - sum(r["deltas"] for r in runs) :]
    for run in runs:
        deltas, measured = measured[: run["deltas"]], measured[run["deltas"] :]
        per_delta.extend(_middle([n for _, n in deltas[1:]]))
    return {"per_delta": statistics.median(per_delta), "requests": requests, "deltas_counted": len(per_delta)}


# The other protocols' first tokens, counted as chat's is: the same short streamed question on their routes.
OPENINGS = (
    # store: false: no write to a store after the answer, which is not the first token's and, 50 times slower
    # under callgrind, outlasted the wait for the answer's end.
    ("responses", "/v1/responses", {"input": "Hi", "stream": True, "store": False}),
    ("messages", "/v1/messages", {"max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}], "stream": True}),
)


def _event_at(event: dict[str, Any], path: str, body: dict[str, Any]) -> dict[str, Any]:
    """``event`` (a Function URL event) on ``path`` with ``body``."""
    context = {**event["requestContext"], "http": {**event["requestContext"]["http"], "path": path}}
    return {**event, "rawPath": path, "requestContext": context, "body": json.dumps(body), "isBase64Encoded": False}


def measure(clock: InitClock, sim: Any, env: dict[str, str], event: dict[str, Any], quick: bool) -> dict[str, Any]:
    """Instructions (under callgrind) and CPU (without) per delta and per first token, function and peer."""
    requests = 1 if quick else 3
    cpu_function = function_run(clock, sim, env, requests, False, event)
    cpu_peer = peer_run(sim, env, "line-iterator", requests, False)
    out: dict[str, Any] = {
        "tokens": TOKENS,
        "cadence_ms": CADENCE_MS,
        "requests": requests,
        "cpu": {
            "function_us_per_delta": round(cpu_function["per_delta"] / 1000, 2),
            "line_iterator_us_per_delta": round(cpu_peer["per_delta"] / 1000, 2),
            "first_token_own_ms": round(cpu_function["first_token_own"] / 1e6, 3),
            "first_token_botocore_ms": round(cpu_function["first_token_botocore"] / 1e6, 3),
        },
        "instructions": None,
    }
    out["cpu"]["per_delta_vs_line_iterator"] = round(cpu_function["per_delta"] / cpu_peer["per_delta"], 3)
    if valgrind() is None:
        out["instructions_note"] = "needs valgrind (apt-get install valgrind): instruction counts not taken"
        return out
    function = function_run(clock, sim, env, requests, True, event)
    peer = peer_run(sim, env, "line-iterator", requests, True)
    out["instructions"] = {
        "function_per_delta": round(function["per_delta"]),
        "line_iterator_per_delta": round(peer["per_delta"]),
        "per_delta_vs_line_iterator": round(function["per_delta"] / peer["per_delta"], 3),
        "first_token_own": round(function["first_token_own"]),
        "first_token_botocore": round(function["first_token_botocore"]),
    }
    for protocol, path, body in OPENINGS:
        opening = function_run(clock, sim, env, requests, True, _event_at(event, path, body))
        out["instructions"][f"first_token_own_{protocol}"] = round(opening["first_token_own"])
        # The same stream's middle deltas on that route: the same upstream and decoder, that protocol's encoder.
        out["instructions"][f"function_per_delta_{protocol}"] = round(opening["per_delta"])
        out["instructions"][f"per_delta_vs_line_iterator_{protocol}"] = round(
            opening["per_delta"] / peer["per_delta"], 3
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.instructions [--requests N]``: the counted per-delta figures alone, every protocol.

    What ``make bench`` counts per delta and per first token (the function on chat, Responses and Messages,
    and the line-iterator peer), on a simulated endpoint of its own, without the rest of the benchmark: a
    couple of minutes under callgrind, and the counts do not depend on what else the host runs.
    """
    import argparse

    from bench.run import COLD_EVENT
    from sagestream_local.endpoint import Scenario
    from sagestream_local.stack import LocalStack

    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=main.__doc__)
    parser.add_argument("--requests", type=int, default=3, help="warm requests counted per route (3, as make bench)")
    args = parser.parse_args(argv)
    if valgrind() is None:
        parser.error("needs valgrind (apt-get install valgrind)")
    clock = InitClock()
    scenario = Scenario(dialect="openai", non_ascii=0.1)
    with LocalStack(port=0, concurrency=1, env={"PYTHONPATH": PYTHONPATH}, scenario=scenario) as stack:
        sim = stack.endpoint
        env = {k: v for k, v in stack.env.items() if k != "SERVE_UI"}
        peer = peer_run(sim, env, "line-iterator", args.requests, True)
        print(f"line-iterator: {round(peer['per_delta'])} instructions per delta", flush=True)
        routes = [("chat", COLD_EVENT), *((p, _event_at(COLD_EVENT, path, body)) for p, path, body in OPENINGS)]
        for protocol, event in routes:
            run = function_run(clock, sim, env, args.requests, True, event)
            print(
                f"{protocol}: {round(run['per_delta'])} instructions per delta "
                f"({run['per_delta'] / peer['per_delta']:.3f}x line-iterator's), first token's own "
                f"{round(run['first_token_own'])}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
