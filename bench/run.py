"""``make bench`` / ``python -m bench [--quick]``: every peer, every workload, one run, one report.

One simulated endpoint (in this process) serves every peer, with the workload's token schedule set before
each peer's turn. ``sagestream`` and ``buffered`` each get a ``LocalStack``-style chain with one runtime
process (concurrency 1, as one Lambda execution environment); the reader peers run in processes of their
own (:mod:`bench.peers`). Results go to ``bench/results/`` (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import cold as cold_start
from bench import designs, encoders, function, instructions, many, paths, report, responses_encoder, validation
from bench.cold import InitClock, cpu_ns
from bench.peers import PEERS, reset_peak_rss, status_kb
from sagestream_local.endpoint import Scenario
from sagestream_local.stack import LocalStack

ROOT = Path(__file__).resolve().parent.parent
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "src")])
# The cold-start request: a short streamed chat, as a Function URL would send it (payload 2.0).
COLD_EVENT: dict[str, Any] = {
    **json.loads((ROOT / "events" / "chat-stream.json").read_text()),
    "body": json.dumps({"messages": [{"role": "user", "content": "Hi"}], "stream": True}),
    "isBase64Encoded": False,
}


def workloads(quick: bool) -> dict[str, dict[str, Any]]:
    """The token schedules; QUICK (under a minute) runs fewer requests, tokens and, on two workloads, peers."""
    every = list(PEERS)
    return {
        "tinyllama-like": {"tokens": 80, "cadence_ms": 8, "ttft_ms": 150, "runs": 2 if quick else 5, "peers": every},
        "mpt7b-like": {
            "tokens": 25,
            "cadence_ms": 33,
            "ttft_ms": 550,
            "runs": 1 if quick else 3,
            "peers": ["sagestream", "buffered", "httpx-chunk-1024"] if quick else every,
        },
        "throughput": {
            "tokens": 5_000 if quick else 100_000,
            "cadence_ms": 0,
            "ttft_ms": 0,
            "runs": 1,
            "peers": ["sagestream", "httpx-chunk-1024", "boto3-close-delimited", *designs.DESIGNS] if quick else every,
        },
        "long": {
            # The simulated endpoint builds every event before its first byte (~70 µs a token on this 2-core
            # host): a million would pass the relay's 60 s upstream read timeout before the stream starts.
            "tokens": 20_000 if quick else 200_000,
            "cadence_ms": 0,
            "ttft_ms": 0,
            "runs": 1,
            # minutes per peer on a small machine: the peers whose memory tells something
            "peers": ["sagestream", "line-iterator"] if quick else ["sagestream", "buffered", "line-iterator"],
        },
    }


# ------------------------------------------------------------------------------------------------ a turn


def run_peer(
    peer: str,
    target: str,
    runs: int,
    keep_times: bool,
    env: dict[str, str],
    runtime_pid: int | None,
    timeout_s: float,
) -> tuple[dict[str, Any], int | None]:
    """One peer process, ``runs`` measured requests; with a runtime process, its CPU and memory too."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = Path(tmp.name)
    command = [sys.executable, "-m", "bench.peers", peer, "--target", target, "--runs", str(runs), "--out", str(out)]
    if not keep_times:
        command.append("--no-times")
    before = rss_before = None
    if runtime_pid is not None:
        reset_peak_rss(runtime_pid)
        rss_before, before = status_kb("VmRSS", runtime_pid), cpu_ns(runtime_pid)
    try:
        subprocess.run(command, check=True, timeout=timeout_s, env={**os.environ, **env, "PYTHONPATH": PYTHONPATH})
        result: dict[str, Any] = json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
    relay_cpu = None
    if runtime_pid is not None and before is not None:
        relay_cpu = cpu_ns(runtime_pid) - before
        result["client_cpu_ns"], result["cpu_ns"] = result["cpu_ns"], relay_cpu
        result["client_peak_rss_kb"] = result["peak_rss_kb"]
        result["peak_rss_kb"], result["rss_before_kb"] = status_kb("VmHWM", runtime_pid), rss_before
        result["rss_after_kb"] = status_kb("VmRSS", runtime_pid)
    return result, relay_cpu


def warm(url: str) -> None:
    """One short request, so that the runtime process is warm (as a Lambda environment after its first call)."""
    from sagestream_local.measure import chat_body, stream_chat

    run = stream_chat(url, chat_body("warm up", 2, None), timeout_s=30)
    if run.status != 200 or not run.deltas:
        raise RuntimeError(f"warm-up failed: HTTP {run.status} {run.error}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs and tokens (under a minute)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset")
    parser.add_argument(
        "--workloads",
        default=None,
        help="comma-separated subset of the workloads and of 'cold', 'instructions', 'many-streams', 'paths'",
    )
    parser.add_argument("--artifact", type=Path, default=None, help="an artifact already built (else built first)")
    args = parser.parse_args(argv)
    began = time.monotonic()
    specs = workloads(args.quick)
    if args.workloads:
        specs = {k: v for k, v in specs.items() if k in args.workloads.split(",")}
    peers = [p for p in PEERS if p in args.peers.split(",")]
    with_many_streams = args.workloads is None or "many-streams" in args.workloads.split(",")
    machine = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "versions": _versions(),
    }
    # Side by side in this run: the Responses encoder's CPU per delta against the chat encoder's, same deltas.
    responses_encoder_figures = responses_encoder.compare(1000, 11 if args.quick else 31)
    responses_encoder_figures["function"] = responses_encoder.function_cpu(runs=5 if args.quick else 15)
    print(responses_encoder.line(responses_encoder_figures), flush=True)
    # Besides the workloads, two parts of their own: the artifact's cold start and the instruction counts.
    parts = (
        set(args.workloads.split(",")) if args.workloads else {*specs, "cold", "instructions", "validation", "paths"}
    )
    validation_figures: dict[str, Any] = {}
    if "validation" in parts:
        # Request validation per request, msgspec against the pydantic validation it replaced (the test oracle).
        validation_figures = validation.measure()
        print(f"validation per request: {json.dumps(validation_figures['bodies'])}", flush=True)
    cold: dict[str, Any] = {}
    steady: dict[str, Any] = {}
    python313 = cold_start.find_python313()
    if "cold" in parts:
        if python313 is None:
            parser.error(
                "no CPython 3.13 (python3.13 on PATH or ~/.pyenv/versions/3.13*): cold start is measured on "
                "the artifact as Lambda runs it"
            )
        if args.artifact is not None:
            artifact, build_s = args.artifact, None
        else:
            artifact, build_s = cold_start.build_artifact(ROOT / ".aws-sam" / "bench" / "SageStreamFunction")
            print(f"artifact built in {build_s:.1f} s (build-SageStreamFunction, as sam build runs it)", flush=True)
    clock = InitClock()
    base = Scenario(dialect="openai", non_ascii=0.1)
    stacks: dict[str, LocalStack] = {}
    fastapi: designs.FastAPIServer | None = None
    designs_many: dict[str, Any] = {}
    failures: list[str] = []
    docs: dict[str, dict[str, Any]] = {w: {} for w in specs}
    timelines: dict[str, tuple[list[int], int]] = {}
    sends: tuple[list[int], int] | None = None
    # The runtime process's stdout (its invocation log records) goes to a file: the function's own figures.
    log_file = tempfile.NamedTemporaryFile(prefix="sagestream-bench-", suffix=".log", delete=False)  # noqa: SIM115
    log = function.InvocationLog(Path(log_file.name))
    try:
        stacks["sagestream"] = LocalStack(
            port=0, concurrency=1, env={"PYTHONPATH": PYTHONPATH}, scenario=base, stdout=log_file
        ).start()
        sim = stacks["sagestream"].endpoint
        assert sim is not None
        # the buffered chain calls the same simulated endpoint, with the same credentials
        shared = {k: v for k, v in stacks["sagestream"].env.items() if k != "SERVE_UI"}
        stacks["buffered"] = LocalStack(port=0, concurrency=1, env={**shared, "_HANDLER": "bench.buffered.handler"})
        stacks["buffered"].start()
        if "node-streamify" in peers:
            stacks["node-streamify"] = LocalStack(port=0, concurrency=1, env=shared, command=designs.node_command())
            stacks["node-streamify"].start()
        if "fastapi-aiobotocore" in peers:
            fastapi = designs.FastAPIServer(shared)
            warm(fastapi.url)
        for stack in stacks.values():
            assert stack.pool is not None
            clock.wait(stack.pool.environments[0])
            warm(stack.url)
        log.new_records()  # the warm-up's
        if "cold" in parts:
            assert python313 is not None
            cold = cold_start.cold_init(
                clock, shared, 7, sim, artifact, python313, COLD_EVENT, _cold_designs(peers, clock, shared)
            )
            cold["build_s"] = None if build_s is None else round(build_s, 1)
            print(
                f"cold init of the artifact, CPU ms: {cold['runtime_init_cpu_ms']} vs boto3.client "
                f"{cold['boto3_client_cpu_ms']} (ratio of medians {cold['cold_init_cpu_ratio']}); first request's "
                f"ttft_cpu_ms {cold['first_request_ttft_cpu_ms']['median']}, a warm one's "
                f"{cold['warm_request_ttft_cpu_ms']['median']}",
                flush=True,
            )
        if "instructions" in parts:
            steady = instructions.measure(clock, sim, shared, COLD_EVENT, args.quick)
            print(f"steady figures: {json.dumps(steady)}", flush=True)
        encoder_figures = encoders.compare(deltas=2_000 if args.quick else 20_000)
        print(
            f"encoders: messages {encoder_figures['messages_us_per_delta']} us/delta vs chat "
            f"{encoder_figures['chat_us_per_delta']} ({encoder_figures['messages_vs_chat']}x)",
            flush=True,
        )
        for workload, spec in specs.items():
            keep_times = workload != "long"
            for peer in [p for p in peers if p in spec["peers"]]:
                framing = "close" if peer == "boto3-close-delimited" else "chunked"
                sim.set_scenario(
                    tokens=spec["tokens"], cadence_ms=spec["cadence_ms"], ttft_ms=spec["ttft_ms"], framing=framing
                )
                sim.clear_records()
                stack = stacks.get(peer)
                target = stack.url if stack is not None else sim.url
                pid = _runtime_pid(stack) if stack is not None else None
                if peer == "fastapi-aiobotocore" and fastapi is not None:
                    target, pid = fastapi.url, fastapi.pid
                timeout = 60 + spec["tokens"] / 1000 + spec["runs"] * 5
                try:
                    result, _ = run_peer(peer, target, spec["runs"], keep_times, shared, pid, timeout)
                except subprocess.SubprocessError as exc:
                    # One peer's failed turn (a loaded host can push buffered's 200k-token answer past its
                    # deadline) is noted in the report; the other figures of the run still count.
                    print(f"{workload:15} {peer:22} failed: {exc}", flush=True)
                    failures.append(f"{workload} / {peer}: {exc}")
                    sim.clear_records()
                    continue
                records = sim.records
                docs[workload][peer] = report.metrics(result, records)
                if peer == "sagestream":
                    docs[workload][peer].update(function.figures(log.new_records(), spec["runs"]))
                if workload == "tinyllama-like" and result["runs"]:
                    first = result["runs"][0]
                    timelines[peer] = (first["arrivals_ns"], first["started_ns"])
                    if sends is None:
                        record = records[-len(result["runs"])]
                        sends = ([t.monotonic_ns for t in record.tokens], first["started_ns"])
                m = docs[workload][peer]
                own = (
                    f"  function: ttft cpu {m['ttft_cpu_ms']} ms, relay p50 {m['relay_ms_p50']} p99 {m['relay_ms_p99']}"
                    if peer == "sagestream"
                    else ""
                )
                print(
                    f"{workload:15} {peer:22} ttft {m['ttft_ms_median']} ms  bursts {m['burst_gaps']}/{m['deltas']}"
                    f"  added p50 {m['added_ms_p50']} p99 {m['added_ms_p99']}  cpu {m['cpu_us_per_delta']} us"
                    f"  rss {m['peak_rss_mb']} MB{own}",
                    flush=True,
                )
                sim.clear_records()
            sim.reset_scenario()
        if fastapi is not None and with_many_streams:
            # The one design here that holds several streams in a process (bench.many does sagestream's).
            designs_many = {"k": 16, "fastapi-aiobotocore": designs.fastapi_rss_per_stream(fastapi, sim, 16)}
            print(f"fastapi-aiobotocore at K=16: {designs_many['fastapi-aiobotocore']} MB RSS per stream", flush=True)
    finally:
        for stack in stacks.values():
            stack.stop()
        if fastapi is not None:
            fastapi.stop()
        log_file.close()
        Path(log_file.name).unlink(missing_ok=True)
    # After the peers, each K on a runtime process of its own (bench.many): streams per vCPU, p99, RSS per stream.
    many_streams = many.run([1, 16, 64], 3.0 if args.quick else 10.0) if with_many_streams else []
    # Every path (chat, Messages, stored and background Responses, a follower), with and without QUOTAS.
    every_path = paths.measure(*((2, 2) if args.quick else (5, 5)), clock=clock) if "paths" in parts else {}
    notes = [
        "`buffered` is sagestream's own handler run against a stream that keeps every write and sends them as "
        "one at the end (bench/buffered.py), through the same local chain: the tutorial shape, same code.",
        "Reader peers (`httpx-*`, `boto3-close-delimited`, `line-iterator`) are timed where they hand a delta on, "
        "without the Runtime API and Function URL hops sagestream pays for; their RSS includes their own "
        "interpreter and imports, as the runtime process's does.",
        "`boto3-close-delimited` is served by the simulated endpoint without chunked framing (Connection: close).",
        "The local Runtime API, Function URL and simulated endpoint share this process and its GIL; on Lambda "
        "the first two are AWS's. `ttft_over_endpoint_ms` is the client's TTFT minus the endpoint's own "
        "(request received to first token sent): the request path through every hop plus the response path.",
        "`long` keeps only first and last arrival per run (memory): no burst or added-latency figures there; "
        "it runs sagestream, buffered and line-iterator only, with 200,000 tokens, not the issue's 1M: the simulated "
        "endpoint builds every event before its first byte, and a million takes longer than the relay's 60 s "
        "upstream read timeout here. Memory that grows with the stream (a kept BytesIO, a buffered answer) "
        "shows at 200k.",
        "On throughput and long, TTFT is mostly the simulated endpoint building the whole answer first.",
    ]
    if args.quick:
        notes.append(
            "QUICK: fewer runs, 5,000 deltas on throughput and 20,000 tokens on long (full: 100k / 200k), fewer "
            "peers on mpt7b-like, throughput and long, one counted request (instructions) instead of three."
        )
    doc: dict[str, Any] = {
        "peers": {peer: dict(docs["tinyllama-like"].get(peer, {})) for peer in peers}
        if "tinyllama-like" in docs
        else {},
        "workloads": docs,
        "many_streams": many_streams,
        "designs_many": designs_many,
        "paths": every_path,
        "machine": machine,
        "cold": cold,
        "encoders": encoder_figures,
        "responses_encoder": responses_encoder_figures,
        "validation": validation_figures,
        "steady": steady,
        "settings": {"quick": args.quick, "workloads": specs, "notes": notes + [f"failed: {f}" for f in failures]},
        "elapsed_s": round(time.monotonic() - began, 1),
    }
    if "sagestream" in doc["peers"]:
        headline = doc["peers"]["sagestream"]
        headline["cold_init_cpu_ratio"] = cold.get("cold_init_cpu_ratio")
        headline["deltas_per_s"] = docs.get("throughput", {}).get("sagestream", {}).get("deltas_per_s")
        headline["rss_growth_mb"] = docs.get("long", {}).get("sagestream", {}).get("rss_growth_mb")
        throughput = docs.get("throughput", {}).get("sagestream", {})
        # What one runtime process could relay if it did nothing else: deltas per second of its own CPU.
        per_delta = throughput.get("invocation_cpu_us_per_delta")
        headline["function_deltas_per_cpu_s"] = round(1e6 / per_delta) if per_delta else None
        reader = doc["peers"].get("line-iterator", {}).get("cpu_us_per_delta")
        mine = headline.get("cpu_us_per_delta")
        headline["cpu_per_delta_vs_line_iterator"] = round(mine / reader, 3) if mine and reader else None
    doc["targets"] = {
        name: {"measured": value, "met": met, "kind": kind} for name, value, met, kind in report.target_rows(doc)
    }
    doc["retired_targets"] = report.RETIRED
    report.write(args.out, doc)
    if timelines and sends is not None:
        report.timeline(args.out / "timeline.png", timelines, sends)
    print(report.markdown(doc))
    return 0


def _cold_designs(peers: list[str], clock: InitClock, env: dict[str, str]) -> dict[str, Callable[[], cold_start.Cold]]:
    """A cold start of each of the other designs among ``peers`` (bench.designs), alternated with sagestream's."""
    body = COLD_EVENT["body"].encode()
    sides: dict[str, Callable[[], cold_start.Cold]] = {}
    if "node-streamify" in peers:
        command = designs.node_command()
        sides["node-streamify"] = lambda: cold_start.lambda_cold(clock, env, command, COLD_EVENT)
    if "fastapi-aiobotocore" in peers:
        sides["fastapi-aiobotocore"] = lambda: designs.fastapi_cold(env, body)
    return sides


def _runtime_pid(stack: LocalStack) -> int:
    assert stack.pool is not None
    process = stack.pool.environments[0].process
    assert process is not None
    return process.pid


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    names: list[str] = ["boto3", "botocore", "urllib3", "httpx"]
    get: Callable[[str], str] = version
    return {name: get(name) for name in names}


if __name__ == "__main__":
    sys.exit(main())
