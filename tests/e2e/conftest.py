"""End-to-end fixtures: the whole local chain (simulated endpoint → boto3 → handler → runtime → Function URL).

Starting runtime processes costs a second or two, so stacks are shared across the session, one per
configuration; each test starts from the default scenario and no records.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from sagestream_local.endpoint import Scenario
from sagestream_local.stack import LocalStack
from tests.conftest import PYTHONPATH

# Fast by default: the tests that care about timing set their own cadence.
FAST = Scenario(ttft_ms=5, cadence_ms=1, tokens=12, non_ascii=0.2)

GetStack = Callable[..., LocalStack]

# The suites that run a second time with this many invocations per runtime process, as Lambda Managed
# Instances run them (tests/conftest.py parametrizes them): the relay, its faults and its telemetry must
# answer the same whatever the runtime's concurrency. SAGESTREAM_TEST_MAX_CONCURRENCY=K runs every stack of
# the end-to-end and reliability suites at K instead.
MANY_STREAMS = 16
MANY_STREAM_SUITES = frozenset({"test_relay", "test_faults", "test_telemetry"})
DEFAULT_MAX_CONCURRENCY = int(os.environ.get("SAGESTREAM_TEST_MAX_CONCURRENCY") or 1)


@pytest.fixture(scope="session")
def max_concurrency(request: pytest.FixtureRequest) -> int:
    """Invocations each runtime process of the local stacks takes at once (1: classic Lambda)."""
    return int(getattr(request, "param", DEFAULT_MAX_CONCURRENCY))


@pytest.fixture(scope="session")
def _stacks() -> Iterator[dict[tuple[object, ...], LocalStack]]:
    stacks: dict[tuple[object, ...], LocalStack] = {}
    yield stacks
    for stack in stacks.values():
        stack.stop()


@pytest.fixture
def stack_for(_stacks: dict[tuple[object, ...], LocalStack], max_concurrency: int) -> Iterator[GetStack]:
    used: list[LocalStack] = []

    def get(concurrency: int = 2, timeout_s: float = 60.0, **env: str) -> LocalStack:
        key = (concurrency, max_concurrency, timeout_s, tuple(sorted(env.items())))
        if key not in _stacks:
            _stacks[key] = LocalStack(
                port=0,
                concurrency=concurrency,
                max_concurrency=max_concurrency,
                timeout_s=timeout_s,
                env={"PYTHONPATH": PYTHONPATH, "UPSTREAM_READ_TIMEOUT_S": "2", "UPSTREAM_MAX_ATTEMPTS": "1", **env},
                scenario=FAST.replace(dialect=env.get("UPSTREAM_FORMAT", "openai")),
                upstream="simulated",
            ).start()
        stack = _stacks[key]
        assert stack.endpoint is not None
        stack.endpoint.reset_scenario()
        stack.endpoint.clear_records()
        used.append(stack)
        return stack

    yield get
    for stack in used:
        assert stack.endpoint is not None
        stack.endpoint.reset_scenario()


@pytest.fixture
def stack(stack_for: GetStack) -> LocalStack:
    """The default: an `openai`-dialect endpoint."""
    return stack_for()
