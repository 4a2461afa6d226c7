"""Many streams in one runtime process (Lambda Managed Instances, ``AWS_LAMBDA_MAX_CONCURRENCY``), over real sockets.

One execution environment takes K invocations at once: K clients stream through one runtime process at the
same time, each gets exactly its own tokens, and whatever happens to one stream (its client leaves or stops
reading, its upstream fails, its deadline comes) leaves the others whole. A ``kill -9`` of the process
ends all K cleanly, and the next requests are served.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest

from sagestream_local.endpoint import Record, Scenario, prompt_of
from sagestream_local.stack import LocalStack
from tests.client import StreamedResponse, request
from tests.conftest import PYTHONPATH

CHAT = "/v1/chat/completions"
K = 8
TIMEOUT_S = 6.0  # the function timeout; with DEADLINE_MARGIN_MS, a stream's own deadline is 3 s
SHORT = 40  # tokens of a stream that ends on its own, well inside its deadline
IDLE_S = 1.5  # a client that stops reading is let go after this
# Long by default (a stream that never ends on its own within its deadline); short streams ask max_tokens.
SCENARIO = Scenario(ttft_ms=5, cadence_ms=5, tokens=3000, non_ascii=0.2)


@pytest.fixture(scope="module")
def environment() -> Iterator[LocalStack]:
    stack = LocalStack(
        port=0,
        concurrency=1,  # one execution environment, one runtime process
        max_concurrency=K,
        timeout_s=TIMEOUT_S,
        env={
            "PYTHONPATH": PYTHONPATH,
            "UPSTREAM_READ_TIMEOUT_S": "30",  # a stalled upstream meets the deadline first
            "UPSTREAM_MAX_ATTEMPTS": "1",
            "DEADLINE_MARGIN_MS": "3000",
            "SSE_PAD_BYTES": "4096",  # a client that stops reading fills its socket buffers soon
        },
        scenario=SCENARIO,
        upstream="simulated",
        idle_timeout_s=IDLE_S,
        stdout=subprocess.DEVNULL,  # the invocation records of K streams at once: not what these tests read
    )
    with stack:
        assert_k_streams_served(stack, "start")  # every loop thread of the process has served once
        yield stack


@pytest.fixture
def stack(environment: LocalStack) -> LocalStack:
    assert environment.endpoint is not None
    environment.endpoint.reset_scenario()
    environment.endpoint.clear_records()
    return environment


def chat_body(prompt: str, max_tokens: int | None = SHORT) -> dict[str, object]:
    body: dict[str, object] = {"messages": [{"role": "user", "content": prompt}], "stream": True}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def deltas(resp: StreamedResponse) -> list[str]:
    return [
        e["choices"][0]["delta"]["content"]
        for e in resp.data_events()
        if isinstance(e, dict) and e.get("choices") and e["choices"][0].get("delta", {}).get("content")
    ]


def record_for(stack: LocalStack, prompt: str, ended: bool = True, timeout: float = 5) -> Record:
    assert stack.endpoint is not None
    return stack.endpoint.wait_for_record(
        lambda r: (
            isinstance(r.request, dict) and prompt_of(r.request) == prompt and (r.outcome != "streaming" or not ended)
        ),
        timeout=timeout,
    )


def runtime_pid(stack: LocalStack) -> int:
    assert stack.pool is not None
    (environment,) = stack.pool.environments
    assert environment.process is not None
    return environment.process.pid


class Clients:
    """Streams started in threads, each kept by its prompt."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.results: dict[str, StreamedResponse] = {}
        self.threads: list[threading.Thread] = []

    def start(self, prompt: str, max_tokens: int | None = SHORT, **kw: object) -> None:
        def one() -> None:
            resp = request(self.stack.url, "POST", CHAT, chat_body(prompt, max_tokens), timeout=30, **kw)  # type: ignore[arg-type]
            self.results[prompt] = resp

        thread = threading.Thread(target=one, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> dict[str, StreamedResponse]:
        for thread in self.threads:
            thread.join(30)
        return self.results


def assert_whole(stack: LocalStack, prompt: str, resp: StreamedResponse, tokens: int = SHORT) -> None:
    """The stream ended normally with exactly the tokens the model sent for this prompt, and no other's."""
    assert resp.status == 200 and resp.complete, (prompt, resp.status, resp.body[:300])
    assert resp.data_events()[-1] == "[DONE]", prompt
    record = record_for(stack, prompt)
    assert record.outcome == "completed"
    assert deltas(resp) == [t.text for t in record.tokens] and len(record.tokens) == tokens, prompt


def assert_k_streams_served(stack: LocalStack, after: str, tokens: int = SHORT) -> list[StreamedResponse]:
    run = uuid.uuid4().hex[:8]
    prompts = [f"After {after} stream {i} of {run} asks about rivers" for i in range(K)]
    clients = Clients(stack)
    for prompt in prompts:
        clients.start(prompt, max_tokens=tokens)
    results = clients.join()
    assert sorted(results) == sorted(prompts), f"after {after}: a client got no answer"
    for prompt in prompts:
        assert_whole(stack, prompt, results[prompt], tokens)
    return [results[p] for p in prompts]


def start_healthy(stack: LocalStack, clients: Clients, count: int, tokens: int) -> list[str]:
    """``count`` streams of ``tokens`` tokens, started and streaming before this returns."""
    run = uuid.uuid4().hex[:8]
    prompts = [f"Healthy {i} of {run} counts sheep" for i in range(count)]
    for prompt in prompts:
        clients.start(prompt, max_tokens=tokens)
    for prompt in prompts:
        record_for(stack, prompt, ended=False)
    return prompts


# --- K at once -----------------------------------------------------------------------------------------


def test_k_streams_in_one_runtime_process_overlap_in_time_and_each_gets_exactly_its_own_tokens(
    stack: LocalStack,
) -> None:
    pid = runtime_pid(stack)
    responses = assert_k_streams_served(stack, "overlap", tokens=200)  # a second each: ample to overlap
    # Overlapping, not queued: every stream had its first delta before any stream had its last.
    first = [r.chunks[0].at for r in responses]
    last = [r.chunks[-1].at for r in responses]
    assert max(first) < min(last), "the streams ran one after another, not at once"
    ids = {r.header("x-request-id") for r in responses}
    assert len(ids) == K and None not in ids, "each invocation answers with its own x-request-id"
    assert runtime_pid(stack) == pid, "one runtime process served them all"


def test_more_than_k_at_once_is_lambdas_429_and_the_k_are_unharmed(stack: LocalStack) -> None:
    clients = Clients(stack)
    prompts = start_healthy(stack, clients, K, tokens=300)  # 1.5 s: longer than the front's admission grace
    extra = request(stack.url, "POST", CHAT, chat_body("one too many"), timeout=10)
    assert extra.status == 429 and extra.header("x-amzn-errortype") == "TooManyRequestsException"
    results = clients.join()
    for prompt in prompts:
        assert_whole(stack, prompt, results[prompt], tokens=300)


# --- one stream's trouble is its own -------------------------------------------------------------------


def test_a_client_leaving_one_stream_closes_only_that_upstream(stack: LocalStack) -> None:
    clients = Clients(stack)
    prompts = start_healthy(stack, clients, K - 1, tokens=200)
    leaving = f"Leaving {uuid.uuid4().hex[:8]}"
    left = request(stack.url, "POST", CHAT, chat_body(leaving, max_tokens=None), stop_after=5)
    assert left.status == 200
    closed = record_for(stack, leaving, timeout=3)
    assert closed.outcome == "client_closed" and len(closed.tokens) < 3000
    assert all(record_for(stack, p, ended=False).outcome == "streaming" for p in prompts), "the others go on"
    results = clients.join()
    for prompt in prompts:
        assert_whole(stack, prompt, results[prompt], tokens=200)


def _upstream_error(stack: LocalStack, prompt: str) -> Callable[[], None]:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(fault="model_stream_error", fault_after=3)
    resp = request(stack.url, "POST", CHAT, chat_body(prompt, max_tokens=None), timeout=20)
    stack.endpoint.reset_scenario()

    def check() -> None:
        assert resp.status == 200 and resp.complete
        events = resp.data_events()
        assert "[DONE]" not in events and events[-1]["error"]["code"] == "model_stream_error"
        assert deltas(resp) == [t.text for t in record_for(stack, prompt).tokens]

    return check


def _deadline(stack: LocalStack, prompt: str) -> Callable[[], None]:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(fault="stall", fault_after=3)
    started = time.monotonic()
    resp = request(stack.url, "POST", CHAT, chat_body(prompt, max_tokens=None), timeout=20)
    took = time.monotonic() - started
    stack.endpoint.reset_scenario()

    def check() -> None:
        assert took < TIMEOUT_S, f"the function's own deadline ends the stream ({took:.1f} s)"
        assert resp.status == 200 and resp.complete
        events = resp.data_events()
        assert "[DONE]" not in events and events[-1]["error"]["code"] == "deadline_exceeded"
        assert record_for(stack, prompt).outcome == "client_closed"

    return check


def _stops_reading(stack: LocalStack, prompt: str) -> Callable[[], None]:
    parts = urlsplit(stack.url)
    body = json.dumps(chat_body(prompt, max_tokens=None)).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((parts.hostname, parts.port))
    sock.sendall(
        f"POST {CHAT} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    try:  # and never reads: its buffers fill, the front lets it go after IDLE_S, the runtime's write fails
        record = record_for(stack, prompt, timeout=IDLE_S + TIMEOUT_S)
    finally:
        sock.close()

    def check() -> None:
        assert record.outcome == "client_closed" and len(record.tokens) < 3000

    return check


@pytest.mark.parametrize("fault", [_upstream_error, _deadline, _stops_reading], ids=lambda f: f.__name__[1:])
def test_a_fault_in_one_stream_leaves_the_others_whole(
    stack: LocalStack, fault: Callable[[LocalStack, str], Callable[[], None]]
) -> None:
    pid = runtime_pid(stack)
    clients = Clients(stack)
    # Long enough that the fault happens while they stream; short enough to end inside their deadline.
    prompts = start_healthy(stack, clients, K - 1, tokens=300)
    check_the_faulty_one = fault(stack, f"Faulty {uuid.uuid4().hex[:8]}")
    results = clients.join()
    check_the_faulty_one()
    for prompt in prompts:
        assert_whole(stack, prompt, results[prompt], tokens=300)
    assert runtime_pid(stack) == pid, "a stream's fault never ends the process"
    assert_k_streams_served(stack, fault.__name__)


# --- the process itself ----------------------------------------------------------------------------------


def test_a_kill_9_of_the_environment_ends_all_its_streams_cleanly_and_the_next_requests_are_served(
    stack: LocalStack,
) -> None:
    assert stack.endpoint is not None and stack.pool is not None
    clients = Clients(stack)
    prompts = start_healthy(stack, clients, K, tokens=2000)
    for prompt in prompts:
        stack.endpoint.wait_for_record(lambda r, p=prompt: prompt_of(r.request) == p and len(r.tokens) >= 10)
    # Killed once every response has started (its prelude reached the front): on a loaded host the endpoint can
    # be tokens ahead of a stream's first write, and a kill before it is a 502, another test's case.
    (environment,) = stack.pool.environments
    give_up = time.monotonic() + 10
    while time.monotonic() < give_up:
        in_flight = list(environment.in_flight.values())
        if len(in_flight) == K and all(inv.started for inv in in_flight):
            break
        time.sleep(0.005)
    else:
        pytest.fail("the K responses never all started")
    pid = runtime_pid(stack)
    os.kill(pid, signal.SIGKILL)
    results = clients.join()
    assert sorted(results) == sorted(prompts)
    for prompt in prompts:
        resp = results[prompt]
        assert resp.status == 200 and resp.complete, "each body ends with its terminating chunk"
        assert "[DONE]" not in resp.data_events()  # every event whole JSON, none cut
        got = deltas(resp)
        sent = [t.text for t in record_for(stack, prompt).tokens]
        assert len(got) < 2000 and got == sent[: len(got)], "what arrived is an intact prefix of its own"
    assert environment.exit_codes[-1] == -signal.SIGKILL
    assert environment.last_error is not None and environment.last_error.error_type == "Runtime.ExitError"
    environment.last_error = None
    assert_k_streams_served(stack, "a kill -9")
    assert runtime_pid(stack) != pid
