"""Many streams per runtime process (Lambda Managed Instances): ``python -m bench.many [--ks 1,16,64]``.

For each K, one runtime process with ``AWS_LAMBDA_MAX_CONCURRENCY=K`` (the local stack's
``max_concurrency``) relays K streams at once, each at 40 tokens/s for ``--seconds``, from the simulated
endpoint. Measured, side by side in one run:

- ``cpu_ms_per_stream_s``: the runtime process's CPU (``/proc/PID/stat`` utime + stime, all its threads)
  over the run, per stream-second; ``streams_per_vcpu`` is 1000 ms over it (the streams one vCPU carries
  at full load);
- ``rss_mb`` (the process's peak RSS while the K streamed, ``VmHWM`` reset first) and
  ``rss_mb_per_stream``: that peak less the process's RSS when idle, per stream;
- ``added_ms_p50`` / ``added_ms_p99``: per delta, from the simulated endpoint's send of the token to its
  arrival at the client (K threads in a process of their own), through the local Function URL and Runtime
  API (which share this process, and its GIL, with the endpoint: an upper bound of what the runtime adds);
- ``relay_ms_p99``: the function's own figure from its log records (per delta, from the upstream read that
  completed it to its write), the largest of the K;
- ``cpu_wait_ms_per_s``: how long the runtime's threads were runnable but had no CPU (the kernel's
  ``/proc/PID/task/*/schedstat`` run delay, summed over its threads) per second of the run, and
  ``harness_cpu_pct``: this process's CPU (endpoint, Function URL, Runtime API) over the run. A tail that
  comes with a large run delay is the machine's cores, shared with the harness, not the runtime's code:
  measured on 2 cores at K = 64, the runtime waited about 0.7 s per second for a CPU while a thread of its
  own waking every 2 ms was under 1.1 ms late at p99 (GIL waits included).

K = 1 is one stream per process, classic Lambda's shape, and so also what K processes would cost each.
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


def _clients(url: str, prompts: list[str], tokens: int) -> dict[str, list[int]]:
    """One thread per prompt, in the calling process; run in a process of its own (spawned) by :func:`one_k`."""
    arrivals: dict[str, list[int]] = {}
    threads = [threading.Thread(target=_stream, args=(url, p, tokens, arrivals)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return arrivals


def one_k(k: int, seconds: float) -> dict[str, Any]:
    tokens = int(seconds * 1000 / CADENCE_MS)
    log_file = tempfile.NamedTemporaryFile(prefix="sagestream-many-", suffix=".log", delete=False)  # noqa: SIM115
    log = function.InvocationLog(Path(log_file.name))
    stack = LocalStack(
        port=0,
        concurrency=1,
        max_concurrency=k,
        timeout_s=seconds + 120,
        env={"PYTHONPATH": PYTHONPATH},
        scenario=Scenario(dialect="openai", ttft_ms=20, cadence_ms=CADENCE_MS, tokens=tokens, non_ascii=0.1),
        upstream="simulated",
        stdout=log_file,
    ).start()
    try:
        assert stack.endpoint is not None and stack.pool is not None
        process = stack.pool.environments[0].process
        assert process is not None
        pid = process.pid
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
            clients.apply(time.sleep, (0,))  # the client process is up before the clock starts
            cpu_before, began = _cpu_s(pid), time.monotonic()
            delay_before, own_before = _run_delay_s(pid), _cpu_s(os.getpid())
            arrivals = clients.apply(_clients, (stack.url, prompts, tokens))
            wall, cpu = time.monotonic() - began, _cpu_s(pid) - cpu_before
            delay, own_cpu = _run_delay_s(pid) - delay_before, _cpu_s(os.getpid()) - own_before
        peak_kb = status_kb("VmHWM", pid)
        time.sleep(0.5)  # each invocation writes its log record after its client has the last byte
        records = {prompt_of(r.request): r for r in stack.endpoint.records}
        added: list[float] = []
        for prompt, got in arrivals.items():
            sent = [t.monotonic_ns for t in records[prompt].tokens]
            assert len(got) == len(sent) == tokens, f"{prompt}: {len(got)} of {len(sent)} deltas"
            added += [(a - s) / 1e6 for a, s in zip(got, sent, strict=True)]
        added.sort()
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
            "relay_ms_p99": max((r.get("relay_ms_p99") or 0.0) for r in own) if own else None,
            "cpu_wait_ms_per_s": round(delay * 1000 / wall, 1),
            "harness_cpu_pct": round(own_cpu * 100 / wall),
        }
    finally:
        stack.stop()
        log_file.close()
        Path(log_file.name).unlink(missing_ok=True)


def run(ks: list[int], seconds: float) -> list[dict[str, Any]]:
    rows = []
    for k in ks:
        row = one_k(k, seconds)
        print(
            f"many-streams K={k:<3} cpu {row['cpu_ms_per_stream_s']} ms per stream-second "
            f"({row['streams_per_vcpu']} streams/vCPU)  rss {row['rss_mb']} MB ({row['rss_mb_per_stream']} MB/stream)"
            f"  added p50 {row['added_ms_p50']} p99 {row['added_ms_p99']} ms  relay p99 {row['relay_ms_p99']} ms"
            f"  cpu wait {row['cpu_wait_ms_per_s']} ms/s  harness cpu {row['harness_cpu_pct']}%",
            flush=True,
        )
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.many", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ks", default="1,16,64", help="comma-separated K (invocations per process)")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each stream lasts")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = run([int(k) for k in args.ks.split(",")], args.seconds)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
