"""A runtime taking several invocations at once (``AWS_LAMBDA_MAX_CONCURRENCY``), against the local Runtime API.

Each invocation is one thread of the runtime process: a handler that raises fails only its own
invocation, each keeps its own trace header, and ``SIGTERM`` lets the streams in flight finish.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from tests.client import StreamedResponse, request
from tests.conftest import PYTHONPATH

from sagestream_local.function_url import FunctionURL
from sagestream_local.runtime_api import Pool

K = 4


@pytest.fixture
def url() -> Iterator[FunctionURL]:
    pool = Pool(
        size=1,
        max_concurrency=K,
        timeout_s=30,
        env={"_HANDLER": "tests.handlers.chosen", "PYTHONPATH": PYTHONPATH},
        command=[sys.executable, "-m", "sagestream.lambda_runtime"],
    )
    with pool, FunctionURL(pool, port=0) as front:
        yield front


def _paced(tag: str, writes: int = 20) -> dict[str, object]:
    return {"handler": "paced", "writes": writes, "interval_ms": 30, "size": 12, "tag": tag}


def _expected(tag: str, writes: int = 20) -> bytes:
    return b"".join(f"{tag}:{k}:".encode().ljust(12, b".") for k in range(writes))


def _in_threads(url: FunctionURL, bodies: dict[str, dict[str, object]]) -> dict[str, StreamedResponse]:
    results: dict[str, StreamedResponse] = {}

    def one(name: str) -> None:
        results[name] = request(url.url, "POST", "/", bodies[name], timeout=30)

    threads = [threading.Thread(target=one, args=(name,)) for name in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_a_handler_that_raises_fails_its_own_invocation_only(url: FunctionURL) -> None:
    environment = url.pool.environments[0]
    assert environment.process is not None
    pid = environment.process.pid
    bodies: dict[str, dict[str, object]] = {f"s{i}": _paced(f"s{i}") for i in range(K - 1)}
    bodies["failing"] = {"handler": "fails", "after": 2}
    results = _in_threads(url, bodies)
    failing = results.pop("failing")
    assert failing.status == 200 and failing.body == b"part 0\npart 1\n"  # what it wrote, then its end
    for name, resp in results.items():
        assert resp.status == 200 and resp.complete and resp.body == _expected(name), name
    assert environment.process.pid == pid and environment.exit_codes == [], "the process went on"


def test_each_invocation_has_its_own_trace_header_and_none_is_the_processs(url: FunctionURL) -> None:
    results = _in_threads(url, {f"e{i}": {"handler": "echo"} for i in range(K)})
    echoes = [r.json() for r in results.values()]
    traces = {e["runtime_trace_id"] for e in echoes}
    assert len(traces) == K and all(t.startswith("Root=1-") for t in traces)
    assert {e["trace_id"] for e in echoes} == {None}, "_X_AMZN_TRACE_ID would name whichever came last"
    assert len({e["context"]["aws_request_id"] for e in echoes}) == K


def test_sigterm_lets_the_streams_in_flight_finish_then_the_process_exits_cleanly(url: FunctionURL) -> None:
    environment = url.pool.environments[0]
    assert environment.process is not None
    pid = environment.process.pid
    bodies = {f"t{i}": _paced(f"t{i}", writes=30) for i in range(2)}
    results: dict[str, StreamedResponse] = {}
    threads = [
        threading.Thread(target=lambda n=name: results.setdefault(n, request(url.url, "POST", "/", bodies[n])))
        for name in bodies
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while sum(inv.dispatched for inv in environment.in_flight.values()) < 2:
        assert time.monotonic() < deadline, "the two streams never started"
        time.sleep(0.01)
    time.sleep(0.1)  # both are writing
    os.kill(pid, signal.SIGTERM)
    for t in threads:
        t.join(20)
    for name, resp in results.items():
        assert resp.status == 200 and resp.complete and resp.body == _expected(name, writes=30), name
    deadline = time.monotonic() + 5
    while not environment.exit_codes:
        assert time.monotonic() < deadline, "the runtime did not exit after its streams ended"
        time.sleep(0.01)
    assert environment.exit_codes[0] == 0
