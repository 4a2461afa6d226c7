"""bench.designs: the designs a user would pick instead stream the same answer, and their cold figures hold."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import cold, designs, report
from sagestream_local import runtime_api
from sagestream_local.endpoint import Scenario
from sagestream_local.measure import chat_body, stream_chat
from sagestream_local.stack import LocalStack
from tests.prerequisites import unavailable

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 12
EVENT: dict[str, Any] = {
    **json.loads((ROOT / "events" / "chat-stream.json").read_text()),
    "body": json.dumps({"messages": [{"role": "user", "content": "Hi"}], "stream": True}),
    "isBase64Encoded": False,
}


def _installed(check: Any) -> None:
    try:
        check()
    except RuntimeError as exc:  # `make test` and `make bench` install both peers; a bare pytest may not have
        unavailable(str(exc))  # skipped on a laptop, a failure in CI, which installs them


@pytest.fixture(scope="module")
def endpoint() -> Iterator[LocalStack]:
    """A local stack for its simulated endpoint (and the environment that reaches it)."""
    with LocalStack(port=0, concurrency=1, scenario=Scenario(ttft_ms=5, cadence_ms=1, tokens=TOKENS)) as stack:
        yield stack


def _shared(stack: LocalStack) -> dict[str, str]:
    return {k: v for k, v in stack.env.items() if k != "SERVE_UI"}


@pytest.fixture(scope="module")
def clock() -> Iterator[cold.InitClock]:
    env_class = runtime_api.ExecutionEnvironment
    spawn, next_invocation = env_class._spawn, env_class.next_invocation
    yield cold.InitClock()
    env_class._spawn, env_class.next_invocation = spawn, next_invocation  # type: ignore[method-assign]


def _streams_the_whole_answer(url: str) -> None:
    runs = [stream_chat(url, chat_body("Hi", TOKENS, None), timeout_s=60) for _ in range(2)]
    for run in runs:
        assert (run.status, run.error, run.done) == (200, None, True)
        assert run.deltas == TOKENS and run.text.startswith("You asked about")
        assert len(run.arrivals_ns) == TOKENS and list(run.arrivals_ns) == sorted(run.arrivals_ns)


def test_node_streamify_streams_the_answer_through_the_local_function_url(endpoint: LocalStack) -> None:
    _installed(designs.node_command)
    with LocalStack(port=0, concurrency=1, env=_shared(endpoint), command=designs.node_command()) as node:
        _streams_the_whole_answer(node.url)


def test_fastapi_aiobotocore_streams_the_answer_over_http(endpoint: LocalStack) -> None:
    _installed(designs.fastapi_python)
    with designs.FastAPIServer(_shared(endpoint)) as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.init_cpu_ns > 0 and server.rss_after_init_kb > 10_000
        _streams_the_whole_answer(server.url)


def test_the_cold_figures_of_each_design_add_up(endpoint: LocalStack, clock: cold.InitClock) -> None:
    _installed(designs.node_command)
    _installed(designs.fastapi_python)
    shared = _shared(endpoint)
    for figures in (
        cold.lambda_cold(clock, shared, designs.node_command(), EVENT),
        designs.fastapi_cold(shared, EVENT["body"].encode()),
    ):
        assert figures.init_cpu_ms > 10 and figures.init_wall_ms > 10 and figures.rss_after_init_mb > 10
        assert 0 < figures.first_delta_cpu_ms < figures.init_first_request_cpu_ms - figures.init_cpu_ms + 0.5


def test_a_snapstart_restore_counts_from_the_restore_not_from_the_process_start(
    endpoint: LocalStack, clock: cold.InitClock
) -> None:
    env = {**_shared(endpoint), "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"}
    command = [sys.executable, "-m", "sagestream.lambda_runtime"]
    started = cold.lambda_cold(clock, env, command, EVENT)
    restored = cold.snapstart_cold(clock, env, command, EVENT)
    # Init (imports, clients) happened before the snapshot: the restore is a small part of it.
    assert 0 < restored.init_cpu_ms < started.init_cpu_ms / 5
    assert restored.first_delta_cpu_ms > 0 and restored.init_first_request_cpu_ms > restored.first_delta_cpu_ms


def test_the_designs_table_gives_each_figure_and_its_ratio_to_sagestreams() -> None:
    def spread(median: float) -> dict[str, float]:
        return {"min": median, "median": median, "max": median}

    figures = {name: spread(1.0) for name in cold.Cold._fields}
    doc = {
        "cold": {
            "designs": {"sagestream": figures, "node-streamify": {**figures, "init_cpu_ms": spread(0.5)}},
            "init_cpu_vs_node_streamify": 2.0,
            "init_first_request_cpu_vs_node_streamify": 0.8,
        },
        "workloads": {"tinyllama-like": {"sagestream": {"cpu_us_per_delta": 100.0}, "node-streamify": {}}},
    }
    lines = report.designs_section(doc)
    assert "| init CPU ms | 1 | 0.5 (0.50x) |" in lines
    assert "| CPU µs per delta, 8 ms apart (tinyllama-like) | 100 | - |" in lines
    rows = {name: (value, met) for name, value, met, _ in report.target_rows({**doc, "workloads": {}})}
    assert rows["cold init CPU <= 1.0x node-streamify's"] == (2.0, False)
    assert rows["init + first request CPU <= 0.9x node-streamify's"] == (0.8, True)
