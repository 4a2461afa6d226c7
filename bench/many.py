"""Many streams per runtime process (Lambda Managed Instances): ``python -m bench.many [--ks 1,16,64]``.

For each K, one runtime process with ``AWS_LAMBDA_MAX_CONCURRENCY=K`` (the local stack's
``max_concurrency``) relays K streams at once, each at 40 tokens/s for ``--seconds``, from the simulated
endpoint; the K start spread over :data:`RAMP_S`, as independent clients arrive. Each K runs ``--repeats``
times (the Ks in turn each round) and every figure is the median of its runs: on a shared host the same
code's CPU per stream-second moved 5.7-8.8 ms between runs at K = 64. Measured:

- ``cpu_ms_per_stream_s``: the runtime process's CPU (``/proc/PID/stat`` utime + stime, all its threads)
  over the run, per stream-second; ``streams_per_vcpu`` is 1000 ms over it (the streams one vCPU carries
  at full load);
- ``rss_mb`` (the process's peak RSS while the K streamed, ``VmHWM`` reset first) and
  ``rss_mb_per_stream``: that peak less the process's RSS when idle, per stream;
- ``runtime_added_ms_p50`` / ``_p99``: what the function adds per delta, from the simulated endpoint's send
  of the token to the runtime's write of its delta returning (:mod:`bench.write_times`; one clock,
  ``CLOCK_MONOTONIC``, across the processes), for every delta after each stream's first;
  ``runtime_first_delta_ms_max``: the first deltas', which also start their responses;
- ``added_ms_p50`` / ``added_ms_p99``: the same to the client's arrival (K threads in a process of their
  own), through the local Function URL and Runtime API: these share one Python process, its GIL and the
  harness's CPU with the endpoint, so past K = 16 their tail is theirs (the runtime's p99 stays a few ms
  while this one is tens); on Lambda both are AWS's;
- ``relay_ms_p99``: the function's own figure from its log records (per delta, from the upstream read that
  completed it to its write), the largest of the K;
- ``cpu_wait_ms_per_s``: how long the runtime's threads were runnable but had no CPU (the kernel's
  ``/proc/PID/task/*/schedstat`` run delay, summed over its threads) per second of the run, and
  ``harness_cpu_pct`` / ``clients_cpu_pct``: the CPU of this process (endpoint, Function URL, Runtime API)
  and of the clients' process over the run, in % of one CPU.

K = 1 is one stream per process, classic Lambda's shape, and so also what K processes would cost each.

With two or more CPUs the runtime process is pinned to a CPU of its own and the harness (this process and
the clients' one) to the others (``--no-pin`` to share them all), as on Managed Instances, where the
function's environment has its vCPUs to itself: unpinned on 2 cores, the K = 64 tail is the runtime's
threads waiting for a core the harness holds (about 0.7 s of run delay per second), not the runtime's code.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench import function
from bench.peers import reset_peak_rss, status_kb
from sagestream_local.endpoint import Scenario, prompt_of
from sagestream_local.stack import LocalStack

ROOT = Path(__file__).resolve().parent.parent
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "src")])
CADENCE_MS = 25.0  # 40 tokens/s
# The K streams start spread over this long, not in one instant: K first tokens at once (each a request's
# parse, signing and call, several ms of CPU) would queue behind one another and be counted as per-delta tail.
# The first deltas' own figure is reported apart (``first_delta_added_ms_max``).
RAMP_S = 1.0
TICK_S = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S  # utime, stime


def _run_delay_s(pid: int) -> float:
    """Time the process's threads spent runnable but waiting for a CPU (schedstat's second field, ns)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` (affinity is per thread; a thread started later inherits its starter's)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task.name), cpus)


def can_pin() -> bool:
    """Whether this process may use two CPUs or more: one for the runtime, the rest for the harness."""
    return len(os.sched_getaffinity(0)) >= 2


def _stream(url: str, prompt: str, tokens: int, out: dict[str, list[int]]) -> None:
    """One streamed chat; the arrival (monotonic ns) of each content delta, by prompt."""
    parts = urlsplit(url)
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "stream": True, "max_tokens": tokens})
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    arrivals: list[int] = []
    for line in resp:  # http.client reads chunked bodies line by line as they arrive
        if line.startswith(b"data: {") and b'"content"' in line:
            delta = json.loads(line[6:])["choices"][0]["delta"]
            if delta.get("content"):
                arrivals.append(time.monotonic_ns())
    conn.close()
    out[prompt] = arrivals


def _clients(url: str, prompts: list[str], tokens: int, ramp_s: float = 0.0) -> dict[str, list[int]]:
    """One thread per prompt, in the calling process; run in a process of its own (spawned) by :func:`one_k`.

    The streams start ``ramp_s / len(prompts)`` apart, as independent clients arrive; all K are open together
    once the last has started (the ramp is well under a stream's length).
    """
    arrivals: dict[str, list[int]] = {}
    threads = [threading.Thread(target=_stream, args=(url, p, tokens, arrivals)) for p in prompts]
    began = time.monotonic()
    for i, t in enumerate(threads):
        time.sleep(max(0.0, began + i * ramp_s / len(threads) - time.monotonic()))
        t.start()
    for t in threads:
        t.join()
    return arrivals


def one_k(k: int, seconds: float, pin: bool = False) -> dict[str, Any]:
    """One runtime process relaying ``k`` streams of ``seconds`` each; ``pin``: on a CPU of its own."""
    tokens = int(seconds * 1000 / CADENCE_MS)
    everywhere = os.sched_getaffinity(0)
    runtime_cpus = {max(everywhere)} if pin else everywhere
    log_file = tempfile.NamedTemporaryFile(prefix="sagestream-many-", suffix=".log", delete=False)  # noqa: SIM115
    log = function.InvocationLog(Path(log_file.name))
    write_times = Path(log_file.name).with_suffix(".writes")
    stack = LocalStack(
        port=0,
        concurrency=1,
        max_concurrency=k,
        timeout_s=seconds + 120,
        env={"PYTHONPATH": PYTHONPATH, "_HANDLER": "bench.write_times.handler", "WRITE_TIMES": str(write_times)},
        scenario=Scenario(dialect="openai", ttft_ms=20, cadence_ms=CADENCE_MS, tokens=tokens, non_ascii=0.1),
        upstream="simulated",
        stdout=log_file,
    ).start()
    try:
        assert stack.endpoint is not None and stack.pool is not None
        process = stack.pool.environments[0].process
        assert process is not None
        pid = process.pid
        if pin:
            # Before the warm-up, so every loop thread and the clients' process (spawned by this thread) inherit.
            _pin(pid, runtime_cpus)
            _pin(os.getpid(), everywhere - runtime_cpus)
        # Warm every loop thread (and the process's first-request costs), then measure from idle.
        warm: dict[str, list[int]] = {}
        threads = [threading.Thread(target=_stream, args=(stack.url, f"warm {i}", 3, warm)) for i in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(0.5)
        log.new_records()
        stack.endpoint.clear_records()
        idle_kb = status_kb("VmRSS", pid)
        reset_peak_rss(pid)
        prompts = [f"stream {i}" for i in range(k)]
        with multiprocessing.get_context("spawn").Pool(1) as clients:
            client_pid = clients.apply(os.getpid)
            cpu_before, began = _cpu_s(pid), time.monotonic()
            delay_before, own_before, client_before = _run_delay_s(pid), _cpu_s(os.getpid()), _cpu_s(client_pid)
            arrivals = clients.apply(_clients, (stack.url, prompts, tokens, RAMP_S))
            wall, cpu = time.monotonic() - began, _cpu_s(pid) - cpu_before
            delay, own_cpu = _run_delay_s(pid) - delay_before, _cpu_s(os.getpid()) - own_before
            client_cpu = _cpu_s(client_pid) - client_before
        peak_kb = status_kb("VmHWM", pid)
        time.sleep(0.5)  # each invocation writes its log record after its client has the last byte
        records = {prompt_of(r.request): r for r in stack.endpoint.records}
        # When the runtime's write of each delta returned, by prompt (bench.write_times).
        written = {e["prompt"]: e["writes"] for e in map(json.loads, write_times.read_text().splitlines())}
        added: list[float] = []  # the endpoint's send of a token to the client's arrival of its delta
        first_added: list[float] = []
        runtime_added: list[float] = []  # the send to the runtime's write, after each stream's first delta
        runtime_first: list[float] = []  # the first, which also starts its response
        for prompt, got in arrivals.items():
            sent = [t.monotonic_ns for t in records[prompt].tokens]
            wrote = written[prompt]
            assert len(got) == len(sent) == len(wrote) == tokens, (
                f"{prompt}: {len(got)} arrived and {len(wrote)} written of {len(sent)} deltas sent"
            )
            added += [(a - s) / 1e6 for a, s in zip(got, sent, strict=True)]
            first_added.append((got[0] - sent[0]) / 1e6)
            times = [(w - s) / 1e6 for w, s in zip(wrote, sent, strict=True)]
            runtime_first.append(times[0])
            runtime_added += times[1:]
        added.sort()
        runtime_added.sort()
        own = [r for r in log.new_records() if r.get("message") == "invocation"]
        stream_seconds = k * tokens * CADENCE_MS / 1000
        cpu_ms = cpu * 1000 / stream_seconds
        return {
            "k": k,
            "tokens_per_stream": tokens,
            "wall_s": round(wall, 2),
            "cpu_ms_per_stream_s": round(cpu_ms, 2),
            "streams_per_vcpu": round(1000 / cpu_ms) if cpu_ms else None,
            "rss_idle_mb": round(idle_kb / 1024, 1),
            "rss_mb": round(peak_kb / 1024, 1),
            "rss_mb_per_stream": round((peak_kb - idle_kb) / 1024 / k, 3),
            "added_ms_p50": round(statistics.median(added), 2),
            "added_ms_p99": round(added[int(len(added) * 0.99) - 1], 2),
            "first_delta_added_ms_max": round(max(first_added), 2),
            "runtime_added_ms_p50": round(statistics.median(runtime_added), 2),
            "runtime_added_ms_p99": round(runtime_added[int(len(runtime_added) * 0.99) - 1], 2),
            "runtime_first_delta_ms_max": round(max(runtime_first), 2),
            "relay_ms_p99": max((r.get("relay_ms_p99") or 0.0) for r in own) if own else None,
            "cpu_wait_ms_per_s": round(delay * 1000 / wall, 1),
            "harness_cpu_pct": round(own_cpu * 100 / wall),
            "clients_cpu_pct": round(client_cpu * 100 / wall),
            "runtime_cpus": len(runtime_cpus),
            "pinned": pin,
        }
    finally:
        if pin:
            _pin(os.getpid(), everywhere)
        stack.stop()
        log_file.close()
        Path(log_file.name).unlink(missing_ok=True)
        write_times.unlink(missing_ok=True)


def _line(row: dict[str, Any]) -> str:
    return (
        f"K={row['k']:<3} cpu {row['cpu_ms_per_stream_s']} ms per stream-second"
        f" ({row['streams_per_vcpu']} streams/vCPU)"
        f"  rss {row['rss_mb']} MB ({row['rss_mb_per_stream']} MB/stream)"
        f"  added p50 {row['added_ms_p50']} p99 {row['added_ms_p99']} ms"
        f" (first delta max {row['first_delta_added_ms_max']})"
        f"  runtime's part p50 {row['runtime_added_ms_p50']} p99 {row['runtime_added_ms_p99']} ms"
        f" (first delta max {row['runtime_first_delta_ms_max']})  relay p99 {row['relay_ms_p99']} ms"
        f"  cpu wait {row['cpu_wait_ms_per_s']} ms/s  harness cpu {row['harness_cpu_pct']}%,"
        f" clients {row['clients_cpu_pct']}%"
    )


def _median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the runs of one K (the host's drift differs between runs more than the code)."""
    row: dict[str, Any] = {}
    for key, value in runs[0].items():
        numbers = [r[key] for r in runs if isinstance(r[key], int | float) and not isinstance(r[key], bool)]
        row[key] = round(statistics.median(numbers), 3) if len(numbers) == len(runs) else value
    cpu = [r["cpu_ms_per_stream_s"] for r in runs]
    row["streams_per_vcpu"] = round(1000 / row["cpu_ms_per_stream_s"]) if row["cpu_ms_per_stream_s"] else None
    row["cpu_ms_per_stream_s_range"] = [min(cpu), max(cpu)]
    row["repeats"] = len(runs)
    return row


def run(ks: list[int], seconds: float, pin: bool | None = None, repeats: int = 3) -> list[dict[str, Any]]:
    """One row per K, each figure the median of ``repeats`` runs (the Ks taken in turn each round, so a drift
    in the host's load falls on all of them); ``pin`` (default: when there are two CPUs or more) gives the
    runtime a CPU of its own."""
    pin = can_pin() if pin is None else pin
    where = "runtime on a CPU of its own" if pin else "runtime and harness share the CPUs"
    runs: dict[int, list[dict[str, Any]]] = {k: [] for k in ks}
    for round_ in range(repeats):
        for k in ks:
            row = one_k(k, seconds, pin)
            print(f"many-streams run {round_ + 1}/{repeats} {_line(row)}  ({where})", flush=True)
            runs[k].append(row)
    rows = [_median_row(runs[k]) for k in ks]
    for row in rows:
        print(f"many-streams median of {repeats}: {_line(row)}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.many", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ks", default="1,16,64", help="comma-separated K (invocations per process)")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each stream lasts")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument(
        "--no-pin", action="store_true", help="let the runtime and the harness share every CPU (default: pinned)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per K; each figure is their median")
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]
    rows = run(ks, args.seconds, pin=False if args.no_pin else None, repeats=args.repeats)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
