"""The function timeout under faults that used to outlive it, through the whole local chain over real sockets.

A short function timeout (8 s, so the answer must end by 5 s with the default 3 s margin) and a read timeout
far beyond it (60 s): a whole answer whose endpoint stalls, is slow to its first token, or drips its tokens
must end in the deadline's 504 with its log record and metrics, not in Lambda's ``Sandbox.Timedout``; a
client that stops reading must not cost the execution environment. After each fault the same runtime
process serves the next request with exactly its own tokens.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sagestream_local.endpoint import prompt_of
from sagestream_local.stack import LocalStack
from tests.client import request
from tests.conftest import PYTHONPATH
from tests.e2e.conftest import FAST
from tests.e2e.test_telemetry import Line, RuntimeOutput, emf, finished, logs
from tests.reliability import wire

CHAT = "/v1/chat/completions"
TIMEOUT_S = 8.0
MARGIN_S = 3.0  # DEADLINE_MARGIN_MS's default
READ_TIMEOUT_S = 60.0  # far past the function timeout: only the deadline can end these waits


class Stack:
    """One execution environment, its stdout read line by line."""

    def __init__(self, env: dict[str, str]) -> None:
        read_fd, self._write_fd = os.pipe()
        self.out = RuntimeOutput()
        self._reader = threading.Thread(target=self.out.read, args=(read_fd,), daemon=True)
        self._reader.start()
        self.stack = LocalStack(
            port=0,
            concurrency=1,
            timeout_s=TIMEOUT_S,
            env={
                "PYTHONPATH": PYTHONPATH,
                "UPSTREAM_READ_TIMEOUT_S": str(READ_TIMEOUT_S),
                "UPSTREAM_MAX_ATTEMPTS": "3",  # retries allowed: none may take the answer past the deadline
                **env,
            },
            scenario=FAST,
            upstream="simulated",
            stdout=self._write_fd,
        ).start()
        assert self.stack.pool is not None and self.stack.endpoint is not None
        self.environment = self.stack.pool.environments[0]
        self.endpoint = self.stack.endpoint

    def stop(self) -> None:
        self.stack.stop()
        os.close(self._write_fd)
        self._reader.join(5)

    @property
    def pid(self) -> int:
        assert self.environment.process is not None
        return self.environment.process.pid

    def assert_same_process_serves_the_next_request(self, pid: int, exits: int) -> None:
        """The fault cost no process: the same one answers a streamed chat at once, with exactly its tokens."""
        self.endpoint.reset_scenario()
        prompt = f"And now the rivers of {uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        resp = request(
            self.stack.url, "POST", CHAT, {"messages": [{"role": "user", "content": prompt}], "stream": True}
        )
        elapsed = time.monotonic() - started
        assert resp.status == 200 and resp.data_events()[-1] == "[DONE]", resp.body[:300]
        record = self.endpoint.wait_for_record(
            lambda r: isinstance(r.request, dict) and prompt_of(r.request) == prompt and r.outcome != "streaming",
            timeout=5,
        )
        got = [
            e["choices"][0]["delta"]["content"]
            for e in resp.data_events()
            if isinstance(e, dict) and e.get("choices") and e["choices"][0]["delta"].get("content")
        ]
        assert got == [t.text for t in record.tokens]
        assert self.pid == pid and self.environment.exit_codes[exits:] == [], "the runtime process was replaced"
        assert elapsed < 2.0, f"the next request took {elapsed:.2f} s: a cold start, or a wait"


@pytest.fixture(scope="module")
def _one() -> Iterator[Stack]:
    stack = Stack({})
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def one(_one: Stack) -> Stack:
    _one.endpoint.reset_scenario()
    _one.endpoint.clear_records()
    assert request(_one.stack.url, "GET", "/health").status == 200  # warm
    return _one


def _chat_records(lines: list[Line]) -> list[dict[str, Any]]:
    return [x.data for x in logs(lines) if x.data.get("path") == CHAT]


def _invocation_lines(stack: Stack, mark: int, timeout: float = 10) -> tuple[dict[str, Any], list[Line]]:
    """The one chat invocation's log record since ``mark`` (a warm-up's may come too), and its EMF lines."""

    def chat_finished(got: list[Line]) -> bool:
        records = _chat_records(got)
        return bool(records) and any(
            x.data.get("function_request_id") == records[0]["function_request_id"] for x in emf(got, "DeadlineStops")
        )

    lines = stack.out.wait(mark, lambda got: finished(got) and chat_finished(got), timeout=timeout)
    (record,) = _chat_records(lines)
    own = record["function_request_id"]
    return record, [x for x in lines if isinstance(x.data, dict) and x.data.get("function_request_id") == own]


# --- whole answers end at the deadline -----------------------------------------------------------------------

WHOLE_ANSWER_FAULTS = {
    "stall": {"fault": "stall"},  # the endpoint never answers
    "slow-first-token": {"ttft_ms": 20_000.0},  # its answer would come after 20 s
    "slow-drip": {"ttft_ms": 5.0, "cadence_ms": 500.0, "tokens": 40},  # a token every 500 ms: done after 20 s
}


@pytest.mark.parametrize("case", sorted(WHOLE_ANSWER_FAULTS))
def test_a_whole_answer_ends_at_the_deadline_with_its_504_record_and_metrics(one: Stack, case: str) -> None:
    pid, exits = one.pid, len(one.environment.exit_codes)
    one.endpoint.set_scenario(**WHOLE_ANSWER_FAULTS[case])
    mark = one.out.mark()
    started = time.monotonic()
    resp = request(
        one.stack.url,
        "POST",
        CHAT,
        {"messages": [{"role": "user", "content": "Tell me about rivers"}], "stream": False},
        timeout=TIMEOUT_S + 10,
    )
    elapsed = time.monotonic() - started
    assert resp.status == 504, resp.body[:300]
    error = resp.json()["error"]
    assert error["code"] == "deadline_exceeded" and error["type"]
    # The deadline is TIMEOUT_S - MARGIN_S after the event was taken; well before Lambda's own timeout.
    assert TIMEOUT_S - MARGIN_S - 0.5 < elapsed < TIMEOUT_S - 1.0, f"the 504 came after {elapsed:.2f} s"
    assert one.environment.last_error is None, "the invocation ended as a function error"
    record, lines = _invocation_lines(one, mark)
    assert record["status"] == 504 and record["error_code"] == "deadline_exceeded" and record["deadline_stop"]
    assert [1.0] in [x.data["DeadlineStops"] for x in emf(lines, "DeadlineStops")]
    one.assert_same_process_serves_the_next_request(pid, exits)


# --- a client that stops reading ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def padded() -> Iterator[Stack]:
    # Each delta carries 64 KiB of SSE comment, so a client that stops reading fills every socket buffer
    # between it and the runtime within a few hundred deltas.
    stack = Stack({"SSE_PAD_BYTES": "65536"})
    try:
        yield stack
    finally:
        stack.stop()


def test_a_client_that_stops_reading_costs_the_invocation_not_the_environment(padded: Stack) -> None:
    stack = padded
    assert request(stack.stack.url, "GET", "/health").status == 200
    pid, exits = stack.pid, len(stack.environment.exit_codes)
    stack.endpoint.set_scenario(tokens=6000, ttft_ms=5, cadence_ms=1)  # more than 5 s of tokens
    mark = stack.out.mark()
    body = json.dumps({"messages": [{"role": "user", "content": "go on for ever"}], "stream": True}).encode()
    sock = wire.connect(stack.stack.url)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(wire.post(CHAT, body))
        started = time.monotonic()
        while (invocation := stack.environment.current) is None:
            assert time.monotonic() - started < 5, "the request never reached the function"
            time.sleep(0.005)
        # Never read: the invocation must end by itself, before the function timeout would end it.
        assert invocation.wait(TIMEOUT_S + 5)
        ended = time.monotonic() - started
        record, _ = _invocation_lines(stack, mark)
    finally:
        sock.close()
    assert record["deadline_stop"] and record["error_code"] == "deadline_exceeded"
    # The writer gives up half a second before Lambda's deadline, and the runtime ends the response then.
    assert ended < TIMEOUT_S, f"the invocation ended after {ended:.2f} s"
    error = invocation.error
    assert error is not None and error.error_type == "Runtime.ResponseAborted", error
    stack.assert_same_process_serves_the_next_request(pid, exits)
    assert stack.environment.last_error is None


# --- a margin that leaves no time is said once ---------------------------------------------------------------


def test_a_deadline_margin_at_or_above_the_timeout_is_warned_once_at_the_first_invocation() -> None:
    stack = Stack({"DEADLINE_MARGIN_MS": str(int(TIMEOUT_S * 1000))})
    try:
        mark = stack.out.mark()
        for _ in range(3):
            resp = request(
                stack.stack.url, "POST", CHAT, {"messages": [{"role": "user", "content": "hi"}], "stream": True}
            )
            assert resp.status == 504  # what the warning foretells: no time is left for any answer
        lines = stack.out.wait(mark, lambda got: len(logs(got)) == 3, timeout=10)
        said = [x.data for x in lines if isinstance(x.data, dict)]
        warnings = [x for x in said if "DEADLINE_MARGIN_MS" in str(x.get("message"))]
        assert len(warnings) == 1 and warnings[0]["level"] == "WARNING", warnings
    finally:
        stack.stop()
