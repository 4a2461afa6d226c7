"""Cold start of the built artifact, in CPU: what a new Lambda execution environment pays before its first ``/next``.

The artifact is built as ``sam build`` builds it (the Makefile's ``build-SageStreamFunction``, for this
machine's architecture) and run as Lambda runs it: started through its exec wrapper, with python3.13 and the
artifact alone on the path. Its baseline is a bare ``boto3.client('sagemaker-runtime')`` in python3.13 from
the *same* artifact (same wheels, same compiled files). Pairs alternate which goes first, so a drift in the
host's load falls on both; each side is timed in process CPU (``/proc/PID/schedstat``, all threads, from
the process's start to its first ``/next`` or to the client made) and in wall time.

Then, in each fresh runtime process, two streamed chat requests: the first pays whatever init left for
first use, the second is warm. Their ``ttft_cpu_ms`` (from the invocation log record) is the function's
CPU from the event's arrival to its first delta written, the one figure that shows init cost moved onto
the first token.

CPU on a shared 2-core host is noisy; only figures from the same run, side by side, compare.
"""

from __future__ import annotations

import glob
import os
import platform
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from bench import function
from bench.peers import status_kb
from sagestream_local import runtime_api
from sagestream_local.runtime_api import Pool

ROOT = Path(__file__).resolve().parent.parent
BOTO3_CLIENT = (
    "import boto3; boto3.client('sagemaker-runtime', region_name='us-east-1'); import sys; "
    "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"
)


def find_python313() -> str | None:
    """A working CPython 3.13, where the Makefile looks for one (a pyenv shim that errors is not one)."""
    for candidate in [
        shutil.which("python3.13"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.13*/bin/python3.13"))),
    ]:
        if (
            candidate
            and subprocess.run(
                [candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 13)"],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        ):
            return candidate
    return None


def build_artifact(out: Path) -> tuple[Path, float]:
    """The Lambda artifact for this machine's architecture, by the recipe ``sam build`` runs; and its seconds."""
    arch = "arm64" if platform.machine().lower() in ("aarch64", "arm64") else "x86_64"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    started = time.monotonic()
    subprocess.run(
        ["make", "-s", "build-SageStreamFunction", f"ARTIFACTS_DIR={out}", f"LAMBDA_ARCH={arch}"],
        cwd=ROOT,
        check=True,
        timeout=600,
        capture_output=True,
    )
    return out, time.monotonic() - started


def cpu_ns(pid: int) -> int:
    """Time the process has spent on a CPU, all threads (``/proc/PID/schedstat``: ns, not clock ticks)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


class InitClock:
    """Runtime process start (its ``Popen``) and its first ``/next`` poll, per execution environment, with
    the process's CPU at that poll (it then blocks on ``/next``: its init is over)."""

    def __init__(self) -> None:
        self.spawned: dict[int, float] = {}
        self.first_next: dict[int, float] = {}
        self.init_cpu_ns: dict[int, int] = {}
        self.init_rss_kb: dict[int, int] = {}
        env_class = runtime_api.ExecutionEnvironment
        spawn, next_invocation = env_class._spawn, env_class.next_invocation
        clock = self

        def timed_spawn(env: runtime_api.ExecutionEnvironment) -> None:
            # An id() is reused once its object is gone: a new environment must not find an old one's marks.
            for marks in (clock.first_next, clock.init_cpu_ns, clock.init_rss_kb):
                marks.pop(id(env), None)
            clock.spawned[id(env)] = time.monotonic()
            spawn(env)

        def timed_next(
            env: runtime_api.ExecutionEnvironment, connection: socket.socket
        ) -> runtime_api.Invocation | None:
            if id(env) not in clock.first_next:
                process = env.process
                if process is not None:
                    clock.init_cpu_ns.setdefault(id(env), cpu_ns(process.pid))
                    clock.init_rss_kb.setdefault(id(env), status_kb("VmRSS", process.pid))
                clock.first_next[id(env)] = time.monotonic()
            return next_invocation(env, connection)

        env_class._spawn = timed_spawn  # type: ignore[method-assign]
        env_class.next_invocation = timed_next  # type: ignore[method-assign,assignment]

    def wait(self, env: runtime_api.ExecutionEnvironment, timeout_s: float = 60.0) -> float:
        """Milliseconds from the process's start to its first ``/next``, once it has come."""
        deadline = time.monotonic() + timeout_s
        while id(env) not in self.first_next:
            if time.monotonic() > deadline:
                raise TimeoutError("the runtime process never polled /next")
            time.sleep(0.002)
        return (self.first_next[id(env)] - self.spawned[id(env)]) * 1000


class FirstChunk:
    """A :class:`~sagestream_local.runtime_api.Sink` that notes when the first body byte arrived (and, given the
    runtime process's ``pid``, that process's CPU then)."""

    def __init__(self, pid: int | None = None) -> None:
        self.first: float | None = None
        self.first_cpu_ns: int | None = None
        self.status: int | None = None
        self.ended = threading.Event()
        self._pid = pid

    def prelude(self, prelude: Any) -> None:
        self.status = prelude.status

    def chunk(self, data: bytes) -> None:
        if self.first is None and data:
            self.first = time.monotonic()
            if self._pid is not None:
                self.first_cpu_ns = cpu_ns(self._pid)

    def end(self, error: Any) -> None:
        self.ended.set()


def first_chunk_ms(pool: Pool, event: dict[str, Any]) -> float:
    """One streamed chat request straight to the pool's Runtime API: submit to its first body byte, in ms."""
    sink = FirstChunk()
    started = time.monotonic()
    invocation = pool.submit(event, sink)
    if not invocation.wait(60) or not sink.ended.wait(10) or sink.status != 200 or sink.first is None:
        raise RuntimeError(f"the cold-start request failed: HTTP {sink.status}")
    return (sink.first - started) * 1000


def _spread(values: list[float], digits: int = 1) -> dict[str, float]:
    return {
        "min": round(min(values), digits),
        "median": round(statistics.median(values), digits),
        "max": round(max(values), digits),
    }


def _records(log: function.InvocationLog, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records += [r for r in log.new_records() if r.get("ttft_cpu_ms") is not None]
        time.sleep(0.01)
    return records


def _boto3_client(python: str, artifact: Path, env: dict[str, str]) -> tuple[float, float]:
    """CPU and wall ms of a bare boto3 client made in python3.13 from the artifact, up to the client made."""
    started = time.monotonic()
    child = subprocess.Popen(
        [python, "-c", BOTO3_CLIENT],
        env={**os.environ, **env, "PYTHONPATH": str(artifact), "PYTHONNOUSERSITE": "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdin is not None
    if child.stdout.readline() != b"ready\n":
        child.kill()
        raise RuntimeError("the boto3 baseline failed")
    wall = (time.monotonic() - started) * 1000
    cpu = cpu_ns(child.pid) / 1e6
    child.stdin.close()
    child.wait(30)
    return cpu, wall


class Cold(NamedTuple):
    """One cold start of one design, each design measured the same way from outside its process: CPU (all
    threads) and wall ms to the end of its init, RSS MB then, and one streamed request after it."""

    init_cpu_ms: float
    init_wall_ms: float
    rss_after_init_mb: float
    first_delta_cpu_ms: float  # the process's CPU from the end of init to the first delta of the first answer
    init_first_request_cpu_ms: float  # the process's CPU from its start to the end of that first answer


def first_request(pool: Pool, event: dict[str, Any], pid: int) -> tuple[float, int, int]:
    """One streamed request to a fresh runtime process: wall ms to its first body byte, and the process's CPU ns
    at that byte and at the answer's end."""
    sink = FirstChunk(pid)
    started = time.monotonic()
    invocation = pool.submit(event, sink)
    if not invocation.wait(60) or not sink.ended.wait(10) or sink.status != 200 or sink.first_cpu_ns is None:
        raise RuntimeError(f"the cold-start request failed: HTTP {sink.status}")
    assert sink.first is not None
    return (sink.first - started) * 1000, sink.first_cpu_ns, cpu_ns(pid)


def lambda_cold(clock: InitClock, env: dict[str, str], command: list[str], event: dict[str, Any]) -> Cold:
    """A new runtime process of ``command`` under the local Runtime API, to its first ``/next``, then one request."""
    with Pool(size=1, env=env, command=command, stdout=subprocess.DEVNULL) as pool:
        environment = pool.environments[0]
        wall = clock.wait(environment)
        init_ns = clock.init_cpu_ns[id(environment)]
        assert environment.process is not None
        _, first_ns, total_ns = first_request(pool, event, environment.process.pid)
        rss = clock.init_rss_kb[id(environment)] / 1024
    return Cold(init_ns / 1e6, wall, rss, (first_ns - init_ns) / 1e6, total_ns / 1e6)


def snapstart_cold(clock: InitClock, env: dict[str, str], command: list[str], event: dict[str, Any]) -> Cold:
    """SnapStart's side, locally: a runtime process started with ``AWS_LAMBDA_INITIALIZATION_TYPE=snap-start`` does
    its init and before-snapshot hooks, then waits on ``/restore/next`` (the snapshot: what Lambda does at publish
    time, not on a request); an invocation restores it. Its :class:`Cold` counts from the restore: the process's
    CPU and wall time from the restore to its first ``/next`` (the after-restore hooks and the runtime's way back to
    its loop), its RSS then, and the first request after it (a new upstream connection: the kept one was closed).
    What Lambda's own restore of the microVM costs is not in it (AWS's figures are cited beside the table)."""
    restored: dict[str, float] = {}

    def on_restore(environment: runtime_api.ExecutionEnvironment) -> None:
        assert environment.process is not None
        restored["cpu_ns"], restored["at"] = cpu_ns(environment.process.pid), time.monotonic()

    snap_env = {**env, "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start"}
    with Pool(size=1, env=snap_env, command=command, stdout=subprocess.DEVNULL, on_restore=on_restore) as pool:
        environment = pool.environments[0]
        deadline = time.monotonic() + 60
        while environment.snapshots < 1:  # init and the before-snapshot hooks are over once it asks for a restore
            if time.monotonic() > deadline or environment.process is None or environment.process.poll() is not None:
                raise RuntimeError("the SnapStart runtime process never asked for a restore")
            time.sleep(0.002)
        assert environment.process is not None
        pid = environment.process.pid
        _, first_ns, total_ns = first_request(pool, event, pid)  # the invocation is what restores it
        next_ns = clock.init_cpu_ns[id(environment)]
        wall = (clock.first_next[id(environment)] - restored["at"]) * 1000
        rss = clock.init_rss_kb[id(environment)] / 1024
    since = restored["cpu_ns"]
    return Cold((next_ns - since) / 1e6, wall, rss, (first_ns - next_ns) / 1e6, (total_ns - since) / 1e6)


def _cold_runtime(
    clock: InitClock,
    env: dict[str, str],
    command: list[str],
    event: dict[str, Any],
    log: function.InvocationLog,
    out: Any,
) -> tuple[Cold, float, float, float, float]:
    """sagestream's runtime process from the artifact: its :class:`Cold`, then the wall ms to the first byte of
    its first and of a second (warm) request, and the two requests' ``ttft_cpu_ms`` from its log records."""
    with Pool(size=1, env=env, command=command, stdout=out) as pool:
        environment = pool.environments[0]
        wall = clock.wait(environment)
        init_ns = clock.init_cpu_ns[id(environment)]
        assert environment.process is not None
        first_wall, first_ns, total_ns = first_request(pool, event, environment.process.pid)
        warm_wall = first_chunk_ms(pool, event)
        records = _records(log, 2)  # written after the answer ended: wait for them
        rss = clock.init_rss_kb[id(environment)] / 1024
    if len(records) != 2:
        raise RuntimeError(f"expected 2 invocation records from the cold process, got {len(records)}")
    cold = Cold(init_ns / 1e6, wall, rss, (first_ns - init_ns) / 1e6, total_ns / 1e6)
    return cold, first_wall, warm_wall, float(records[0]["ttft_cpu_ms"]), float(records[1]["ttft_cpu_ms"])


def _design_figures(runs: list[Cold]) -> dict[str, Any]:
    return {name: _spread([getattr(run, name) for run in runs], 2) for name in Cold._fields}


def cold_init(
    clock: InitClock,
    env: dict[str, str],
    pairs: int,
    sim: Any,
    artifact: Path,
    python: str,
    event: dict[str, Any],
    designs: Mapping[str, Callable[[], Cold]] | None = None,
) -> dict[str, Any]:
    """``pairs`` alternated rounds: the artifact's runtime process to its first ``/next`` (then a cold and a warm
    request), a bare boto3 client from the same artifact, and each of ``designs`` (a cold start of another
    design, bench.designs); min/median/max of each figure, and sagestream's ratios to each design's."""
    runtime_env = {
        **env,
        "LAMBDA_TASK_ROOT": str(artifact),
        "PATH": f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": "",
        "PYTHONNOUSERSITE": "1",
        "_HANDLER": "sagestream.app.handler",
    }
    command = [str(artifact / "sagestream-bootstrap"), "/var/lang/bin/python3.13", "/var/runtime/bootstrap.py"]
    designs = dict(designs or {})
    runs: dict[str, list[Cold]] = {"sagestream": [], **{name: [] for name in designs}}
    boto3_cpu, boto3_wall, first_wall, warm_wall, first_ttft_cpu, warm_ttft_cpu = [], [], [], [], [], []
    designs["sagestream-snapstart"] = lambda: snapstart_cold(clock, runtime_env, command, event)
    runs["sagestream-snapstart"] = []
    sides = ["sagestream", "boto3", *designs]
    sim.set_scenario(tokens=2, cadence_ms=0, ttft_ms=0)  # the endpoint answers at once: the function's time shows
    with tempfile.NamedTemporaryFile(prefix="sagestream-cold-", suffix=".log") as log_file:
        log = function.InvocationLog(Path(log_file.name))
        try:
            for pair in range(pairs):
                for side in sides[pair % len(sides) :] + sides[: pair % len(sides)]:  # each goes first in turn
                    if side == "boto3":
                        cpu, wall = _boto3_client(python, artifact, env)
                        boto3_cpu.append(cpu)
                        boto3_wall.append(wall)
                    elif side == "sagestream":
                        cold, first, warm, first_ttft, warm_ttft = _cold_runtime(
                            clock, runtime_env, command, event, log, log_file
                        )
                        runs[side].append(cold)
                        first_wall.append(first)
                        warm_wall.append(warm)
                        first_ttft_cpu.append(first_ttft)
                        warm_ttft_cpu.append(warm_ttft)
                    else:
                        runs[side].append(designs[side]())
        finally:
            sim.reset_scenario()
    runtime_cpu = [run.init_cpu_ms for run in runs["sagestream"]]
    runtime_wall = [run.init_wall_ms for run in runs["sagestream"]]
    ratios = [r / b for r, b in zip(runtime_cpu, boto3_cpu, strict=True)]
    ttft_gap = [f - w for f, w in zip(first_ttft_cpu, warm_ttft_cpu, strict=True)]
    out: dict[str, Any] = {
        "pairs": pairs,
        "artifact": "built by build-SageStreamFunction for this machine, run by python3.13 through its exec wrapper",
        "runtime_init_cpu_ms": _spread(runtime_cpu),
        "boto3_client_cpu_ms": _spread(boto3_cpu),
        "cold_init_cpu_ratio": round(statistics.median(runtime_cpu) / statistics.median(boto3_cpu), 3),
        "cold_init_cpu_ratio_per_pair": _spread(ratios, 3),
        "runtime_init_wall_ms": _spread(runtime_wall),
        "boto3_client_wall_ms": _spread(boto3_wall),
        "cold_init_wall_ratio": round(statistics.median(runtime_wall) / statistics.median(boto3_wall), 3),
        "first_request_ttft_cpu_ms": _spread(first_ttft_cpu, 2),
        "warm_request_ttft_cpu_ms": _spread(warm_ttft_cpu, 2),
        "first_token_cold_minus_warm_cpu_ms": round(statistics.median(ttft_gap), 2),
        "first_request_wall_ms": _spread(first_wall),
        "warm_request_wall_ms": _spread(warm_wall),
        "designs": {name: _design_figures(cold_runs) for name, cold_runs in runs.items()},
    }
    for name in designs:
        if name == "sagestream-snapstart":
            continue
        key = name.replace("-", "_")
        for figure in ("init_cpu_ms", "init_first_request_cpu_ms"):
            mine = statistics.median(getattr(run, figure) for run in runs["sagestream"])
            theirs = statistics.median(getattr(run, figure) for run in runs[name])
            out[f"{figure.removesuffix('_ms')}_vs_{key}"] = round(mine / theirs, 3)
    return out
