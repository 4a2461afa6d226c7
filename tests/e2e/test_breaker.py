"""The circuit breaker through the whole local chain (issue 54 §1): a storm of retrying clients against an endpoint
failing every call reaches it a handful of times, every client after the first few gets a 503 with Retry-After in
its route's own error shape at once, and a healed endpoint is served again within the cooldown."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.client import StreamedResponse, request
from tests.e2e.test_telemetry import Captured, _captured, emf, logs

CHAT = "/v1/chat/completions"
ASK = [{"role": "user", "content": "Hi"}]
COOLDOWN_S = 3.0
STORM = 30
STORM_WITHIN_S = 15.0
ENV = {
    "UPSTREAM_MAX_ATTEMPTS": "3",  # botocore's retries are on, as deployed: they count against the breaker
    "BREAKER_FAILURES": "5",
    "BREAKER_COOLDOWN_S": str(COOLDOWN_S),
    "BREAKER_MAX_COOLDOWN_S": str(COOLDOWN_S),  # a probe every cooldown, however long the storm
}


@pytest.fixture(scope="module")
def stack() -> Iterator[Captured]:
    yield from _captured(ENV)  # one execution environment: one breaker per target, as on Lambda


@pytest.fixture
def breaker(stack: Captured) -> Iterator[Captured]:
    sim = stack.stack.endpoint
    assert sim is not None
    sim.reset_scenario()
    sim.clear_records()
    yield stack
    sim.reset_scenario()
    served_again(stack)  # each test leaves the breaker closed: the next one starts from the endpoint's health


def served_again(captured: Captured) -> tuple[float, list[StreamedResponse]]:
    """Ask until the endpoint serves (the probe after the cooldown closes the breaker): how long it took, and
    the answers on the way."""
    started, answers = time.monotonic(), []
    while time.monotonic() - started < COOLDOWN_S + 10:
        resp, _ = captured.call(CHAT, {"messages": ASK})
        answers.append(resp)
        if resp.status == 200:
            return time.monotonic() - started, answers
        assert resp.status == 503 and resp.json()["error"]["code"] == "breaker_open", resp.body
        # the client waits what Retry-After says, as the SDKs do (the condition: the breaker's own cooldown)
        time.sleep(min(float(resp.header("retry-after-ms") or 1000) / 1000, 0.25))
    raise AssertionError("the healed endpoint was not served within the cooldown")


def endpoint_calls(captured: Captured) -> int:
    assert captured.stack.endpoint is not None
    return len(captured.stack.endpoint.records)


@pytest.mark.parametrize(
    ("fault", "first_status"),
    [("http_500", 502), ("http_503", 503), ("throttling", 429)],
    ids=["InternalFailure-not-retried", "ServiceUnavailable-retried", "throttled-retried"],
)
def test_a_storm_against_a_failing_endpoint_reaches_it_a_few_times_and_then_is_told_when_to_come_back(
    breaker: Captured, fault: str, first_status: int
) -> None:
    assert breaker.stack.endpoint is not None
    breaker.stack.endpoint.set_scenario(fault=fault)
    started = time.monotonic()
    answers = [breaker.call(CHAT, {"messages": ASK, "stream": True}) for _ in range(STORM)]
    took = time.monotonic() - started
    assert took < STORM_WITHIN_S, f"the storm took {took:.1f} s: the refusals must be at once"
    calls = endpoint_calls(breaker)
    assert calls <= 10, f"{STORM} requests reached the endpoint {calls} times"
    # The first requests met the endpoint's own fault (with botocore's retries, two requests spent the five
    # calls; without, five); every one after them is told when to come back.
    statuses = [resp.status for resp, _ in answers]
    met = [logs(lines)[0].data.get("breaker") for _, lines in answers]
    opened = met.index("opened")
    assert opened < 5 and set(statuses[: opened + 1]) == {first_status}, statuses
    assert set(met[:opened]) == {None} and set(met[opened:]) <= {"open", "opened"}, met
    for resp, _ in answers[opened:]:
        after = resp.header("retry-after")
        assert after is not None and 1 <= int(after) <= COOLDOWN_S, (resp.status, resp.headers)
    refused = [(resp, lines) for resp, lines in answers if resp.status == 503 and "breaker_open" in resp.body.decode()]
    probes = calls - 5
    assert len(refused) >= STORM - opened - probes - 1, statuses
    for resp, lines in refused:
        assert resp.json()["error"]["type"] == "server_error"
        assert resp.header("x-should-retry") == "true"
        (log,) = logs(lines)
        assert (log.data["status"], log.data["error_code"], log.data["breaker"]) == (503, "breaker_open", "open")
        (blob,) = emf(lines, "BreakerRefusals")
        assert blob.data["BreakerRefusals"] == [1] and blob.data["BreakerOpen"] == [0]
    # Healed, it is served within the cooldown: the next probe closes the breaker.
    breaker.stack.endpoint.set_scenario(fault="none")
    healed_after, on_the_way = served_again(breaker)
    assert healed_after < COOLDOWN_S + 2, healed_after
    assert endpoint_calls(breaker) <= calls + 1 + len(on_the_way), "one probe, then the answer"


def test_the_refusal_is_in_each_routes_own_error_shape(breaker: Captured) -> None:
    assert breaker.stack.endpoint is not None
    breaker.stack.endpoint.set_scenario(fault="http_500")
    for _ in range(5):
        resp, _ = breaker.call(CHAT, {"messages": ASK})
        assert resp.status == 502
    routes: list[tuple[str, dict[str, Any]]] = [
        (CHAT, {"messages": ASK, "stream": True}),
        ("/v1/completions", {"prompt": "Hi"}),
        ("/v1/responses", {"input": "Hi", "stream": True}),
        ("/v1/messages", {"max_tokens": 20, "messages": ASK, "stream": True}),
    ]
    for path, body in routes:
        resp, _ = breaker.call(path, body)
        assert resp.status == 503 and resp.header("retry-after") is not None, (path, resp.body)
        error = resp.json()
        if path == "/v1/messages":
            assert (error["type"], error["error"]["type"]) == ("error", "overloaded_error")
        else:
            assert (error["error"]["type"], error["error"]["code"]) == ("server_error", "breaker_open")
    assert endpoint_calls(breaker) == 5, "InternalFailure is not retried, and no refused request called it"


def test_a_clients_4xx_never_opens_it(breaker: Captured) -> None:
    assert breaker.stack.endpoint is not None
    breaker.stack.endpoint.set_scenario(context_length=8)
    long = [{"role": "user", "content": "a prompt far longer than the eight tokens of this model's context " * 4}]
    for _ in range(12):
        resp, _ = breaker.call(CHAT, {"messages": long})
        assert resp.status == 400 and resp.json()["error"]["code"] == "context_length_exceeded"
    assert endpoint_calls(breaker) == 12


@pytest.fixture(scope="module")
def shared() -> Iterator[Captured]:
    yield from _captured(ENV, max_concurrency=CLIENTS)  # one environment serving several at once (Managed Instances)


CLIENTS = 6


def test_clients_retrying_at_once_reach_a_failing_endpoint_a_few_times(shared: Captured) -> None:
    assert shared.stack.endpoint is not None
    shared.stack.endpoint.clear_records()
    shared.stack.endpoint.set_scenario(fault="http_500")
    answers: list[StreamedResponse] = []
    lock = threading.Lock()

    def client() -> None:
        for _ in range(STORM // CLIENTS):
            resp = request(shared.stack.url, "POST", CHAT, {"messages": ASK, "stream": True}, timeout=30)
            with lock:
                answers.append(resp)

    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(STORM_WITHIN_S + 15)
    took = time.monotonic() - started
    assert len(answers) == STORM and took < STORM_WITHIN_S, took
    calls = endpoint_calls(shared)
    # five failures open it; at most the calls already on their way then (one per other client) still arrive
    assert calls <= 5 + CLIENTS - 1, calls
    refused = [r for r in answers if r.status == 503 and r.json()["error"]["code"] == "breaker_open"]
    assert len(refused) >= STORM - calls and all(r.header("retry-after") for r in refused)
    shared.stack.endpoint.set_scenario(fault="none")
    served_again(shared)
