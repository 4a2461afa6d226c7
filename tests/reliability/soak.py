"""Soak: many sequential invocations through one runtime process, and what it holds at the start and the end.

Invariant 7 says an invocation leaves nothing behind for the next; over thousands of them a leaked socket,
thread or buffer shows as growth. The mix covers every path an invocation can take: streamed and whole
answers, refusals before the upstream, an upstream fault mid-stream and a client that leaves mid-stream.

Read from ``/proc/PID``: open file descriptors (``fd/``), threads (``status`` Threads) and resident memory
(``status`` VmRSS). Flat means: fds and threads equal at start and end (each after the process has gone
quiet), RSS grown by less than :data:`RSS_GROWTH_LIMIT_KB` after the warm-up. The same fd and thread
counts are taken of this process, which runs the local Function URL front and Runtime API: a connection
thread or socket that outlived its request would show there.

``make soak`` runs 2,000 invocations; ``tests/reliability/test_soak.py`` runs 200 with the same check::

    python -m tests.reliability.soak --invocations 2000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sagestream_local.endpoint import Scenario
from sagestream_local.stack import LocalStack
from tests.client import request

ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
RSS_GROWTH_LIMIT_KB = 5 * 1024
TINY = Scenario(ttft_ms=0, cadence_ms=0, tokens=8, non_ascii=0.2)
CHAT = "/v1/chat/completions"
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Sample:
    fds: int
    threads: int
    rss_kb: int

    def __str__(self) -> str:
        return f"fds {self.fds}, threads {self.threads}, RSS {self.rss_kb / 1024:.1f} MB"


def sample(pid: int) -> Sample:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return Sample(
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        threads=int(fields["Threads"]),
        rss_kb=int(fields["VmRSS"].split()[0]),
    )


def quiet_sample(pid: int, settle_s: float = 2.0) -> Sample:
    """A sample once the process is idle: the lowest fd and thread counts seen while it settles."""
    deadline = time.monotonic() + settle_s
    best = sample(pid)
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = sample(pid)
        best = Sample(min(best.fds, now.fds), min(best.threads, now.threads), now.rss_kb)
    return best


def one(stack: LocalStack, n: int) -> None:
    """Invocation ``n`` of the mix (20 kinds, in turn)."""
    assert stack.endpoint is not None
    kind = n % 20
    chat = {"messages": [{"role": "user", "content": f"Soak {n} please"}], "stream": True}
    if kind in (5, 15):
        resp = request(stack.url, "POST", CHAT, {**chat, "stream": False})
        assert resp.status == 200, resp.body
    elif kind == 7:
        resp = request(stack.url, "POST", CHAT, b"{not json", headers=JSON)
        assert resp.status == 400, resp.body
    elif kind == 9:
        resp = request(stack.url, "POST", CHAT, {**chat, "model": "someone-else"})
        assert resp.status == 404, resp.body
    elif kind == 11:
        stack.endpoint.set_scenario(fault="model_stream_error", fault_after=3)
        resp = request(stack.url, "POST", CHAT, chat)
        stack.endpoint.reset_scenario()
        assert resp.status == 200 and b"model_stream_error" in resp.body, resp.body
    elif kind == 17:
        stack.endpoint.set_scenario(tokens=400, cadence_ms=1)
        resp = request(stack.url, "POST", CHAT, chat, stop_after=2)  # and leave
        stack.endpoint.reset_scenario()
        assert resp.status == 200
    else:
        resp = request(stack.url, "POST", CHAT, chat)
        assert resp.status == 200 and resp.body.endswith(b"data: [DONE]\n\n"), resp.body[-200:]


@dataclass(frozen=True)
class Result:
    warmup: int
    invocations: int  # after the warm-up, between the two samples
    seconds: float
    start: Sample
    end: Sample
    pid_unchanged: bool
    stack_start: Sample  # this process: the Function URL front and Runtime API, whose threads and sockets
    stack_end: Sample  # come and go with each connection and must all go

    @property
    def flat(self) -> bool:
        return (
            self.pid_unchanged
            and self.end.fds == self.start.fds
            and self.end.threads == self.start.threads
            and self.end.rss_kb - self.start.rss_kb < RSS_GROWTH_LIMIT_KB
            and self.stack_end.fds == self.stack_start.fds
            and self.stack_end.threads == self.stack_start.threads
        )

    def __str__(self) -> str:
        growth = (self.end.rss_kb - self.start.rss_kb) / 1024
        return (
            f"soak: {self.warmup} warm-up + {self.invocations} measured invocations in {self.seconds:.1f} s "
            f"({self.invocations / self.seconds:.0f}/s) through one runtime process\n"
            f"  start (after warm-up): {self.start}\n"
            f"  end:                   {self.end}\n"
            f"  local stack (this process): start {self.stack_start}; end {self.stack_end}\n"
            f"  RSS growth {growth:+.2f} MB (limit {RSS_GROWTH_LIMIT_KB / 1024:.0f} MB); "
            f"{'flat' if self.flat else 'NOT FLAT'}"
        )


def soak(invocations: int, warmup: int | None = None) -> Result:
    warmup = warmup if warmup is not None else min(100, invocations // 5)
    stack = LocalStack(
        port=0,
        concurrency=1,
        timeout_s=60,
        env={"PYTHONPATH": PYTHONPATH, "UPSTREAM_READ_TIMEOUT_S": "5", "UPSTREAM_MAX_ATTEMPTS": "1"},
        scenario=TINY,
        upstream="simulated",
        stdout=subprocess.DEVNULL,  # thousands of log records; this reads /proc, not them
    )
    with stack:
        assert stack.pool is not None
        environment = stack.pool.environments[0]
        for n in range(warmup):  # every path taken once, its imports and caches made
            one(stack, n)
        assert environment.process is not None
        pid = environment.process.pid
        start = quiet_sample(pid)
        stack_start = quiet_sample(os.getpid())
        began = time.monotonic()
        for n in range(warmup, invocations):
            one(stack, n)
        seconds = time.monotonic() - began
        end = quiet_sample(pid)
        stack_end = quiet_sample(os.getpid())
        same = environment.process.pid == pid and environment.exit_codes == []
    return Result(warmup, invocations - warmup, seconds, start, end, same, stack_start, stack_end)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--invocations", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=None, help="invocations before the start sample")
    args = parser.parse_args(argv)
    result = soak(args.invocations, args.warmup)
    print(result)
    return 0 if result.flat else 1


if __name__ == "__main__":
    sys.exit(main())
