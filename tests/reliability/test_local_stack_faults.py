"""Fault injection through the whole local stack, over real sockets: what the laptop stand-in for Lambda must hold
for every developer and every test that runs on it.

Each case breaks one thing (a runtime process killed while idle or busy, a client that half-closes, stalls
or frames its request badly, more clients than the concurrency, an endpoint that throttles or resets) and
then :func:`assert_serves_normally` checks that every execution environment serves the next request at
once, each client getting exactly its own tokens: nothing lost, nothing mixed. Repeated SIGTERM/SIGINT runs
against a ``python -m sagestream_local`` process of its own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagestream_local.endpoint import Scenario, prompt_of
from sagestream_local.runtime_api import ExecutionEnvironment
from sagestream_local.stack import LocalStack
from tests.client import StreamedResponse, request
from tests.conftest import PYTHONPATH
from tests.reliability import wire

CHAT = "/v1/chat/completions"
CONCURRENCY = 2
TIMEOUT_S = 20.0  # the function timeout: a request that waited for it would show as one taking this long
IDLE_S = 1.5
FAST = Scenario(ttft_ms=5, cadence_ms=1, tokens=12, non_ascii=0.2)


@pytest.fixture(scope="module")
def local() -> Iterator[LocalStack]:
    stack = LocalStack(
        port=0,
        concurrency=CONCURRENCY,
        timeout_s=TIMEOUT_S,
        env={"PYTHONPATH": PYTHONPATH, "UPSTREAM_READ_TIMEOUT_S": "2", "UPSTREAM_MAX_ATTEMPTS": "1"},
        scenario=FAST,
        upstream="simulated",
        idle_timeout_s=IDLE_S,
    )
    with stack:
        assert_serves_normally(stack, "start")  # every process warm
        yield stack


@pytest.fixture
def stack(local: LocalStack) -> LocalStack:
    assert local.endpoint is not None
    local.endpoint.reset_scenario()
    local.endpoint.clear_records()
    return local


def chat_body(prompt: str, stream: bool = True) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": prompt}], "stream": stream}


def deltas(resp: StreamedResponse) -> list[str]:
    return [
        e["choices"][0]["delta"]["content"]
        for e in resp.data_events()
        if isinstance(e, dict) and e.get("choices") and e["choices"][0].get("delta", {}).get("content")
    ]


def text_of_sse(body: bytes) -> list[str]:
    out = []
    for event in body.decode().split("\n\n"):
        if event.startswith("data: {"):
            choice = json.loads(event[6:])["choices"][0]
            if choice["delta"].get("content"):
                out.append(choice["delta"]["content"])
    return out


def record_for(stack: LocalStack, prompt: str) -> object:
    assert stack.endpoint is not None
    return stack.endpoint.wait_for_record(
        lambda r: isinstance(r.request, dict) and prompt_of(r.request) == prompt and r.outcome != "streaming",
        timeout=5,
    )


def assert_serves_normally(stack: LocalStack, after: str) -> None:
    """As many concurrent streams as environments, each served at once with exactly its own tokens."""
    assert stack.endpoint is not None and stack.pool is not None
    stack.endpoint.reset_scenario()
    run = uuid.uuid4().hex[:8]
    prompts = [f"After {after} client{i}x{run} asks about rivers" for i in range(stack.pool.size)]
    results: dict[int, StreamedResponse] = {}
    started = time.monotonic()

    def client(i: int) -> None:
        results[i] = request(stack.url, "POST", CHAT, chat_body(prompts[i]), timeout=TIMEOUT_S + 10)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S + 15)
    elapsed = time.monotonic() - started
    assert sorted(results) == list(range(len(prompts))), f"after {after}: a client got no answer"
    for i, resp in results.items():
        assert resp.status == 200, (after, i, resp.status, resp.body[:300])
        assert resp.complete and resp.data_events()[-1] == "[DONE]", (after, i)
        record = record_for(stack, prompts[i])
        assert record.outcome == "completed"  # type: ignore[attr-defined]
        assert deltas(resp) == [t.text for t in record.tokens], f"after {after}: client {i} lost or mixed tokens"  # type: ignore[attr-defined]
    # A cold start is a second or two; waiting for the function timeout (the old failure) would be TIMEOUT_S.
    assert elapsed < TIMEOUT_S / 2, f"after {after}: the next requests took {elapsed:.1f} s"
    assert all(e.process is not None and e.process.poll() is None for e in stack.pool.environments)


# --- runtime processes killed --------------------------------------------------------------------------


def wait_until_dead(pid: int) -> None:
    deadline = time.monotonic() + 5
    while _alive(pid):
        assert time.monotonic() < deadline, f"process {pid} survived SIGKILL"
        time.sleep(0.002)


def wait_until_replaced(environment: ExecutionEnvironment, pid: int) -> None:
    deadline = time.monotonic() + 10
    while environment.process is None or environment.process.pid == pid:
        assert time.monotonic() < deadline, "the dead runtime process was not replaced"
        time.sleep(0.02)


def test_a_runtime_killed_while_idle_is_replaced_before_its_environment_takes_a_request(stack: LocalStack) -> None:
    assert stack.pool is not None
    first, second = stack.pool.environments
    assert first.process is not None and second.process is not None
    # Killed, replaced, and only then asked: the dead process's /next must not be the one that answers.
    old = first.process.pid
    os.kill(old, signal.SIGKILL)
    wait_until_replaced(first, old)
    assert first.exit_codes[-1] == -signal.SIGKILL
    assert_serves_normally(stack, "an idle kill, replaced")
    # Killed and asked the moment it is dead, before the stack has noticed (a request that lands while the
    # kernel is still tearing the process down was handed to it alive, and fails as on Lambda).
    old = second.process.pid
    os.kill(old, signal.SIGKILL)
    wait_until_dead(old)
    assert_serves_normally(stack, "an idle kill, asked at once")
    assert second.process is not None and second.process.pid != old
    assert second.exit_codes[-1] == -signal.SIGKILL
    assert first.last_error is None and second.last_error is None, "no invocation paid for an idle death"


def test_a_runtime_killed_mid_stream_ends_that_stream_cleanly_and_is_replaced(stack: LocalStack) -> None:
    assert stack.endpoint is not None and stack.pool is not None
    stack.endpoint.set_scenario(tokens=3000, cadence_ms=5, ttft_ms=5)
    prompt = f"Busy {uuid.uuid4().hex[:8]} please"
    result: dict[str, StreamedResponse] = {}
    client = threading.Thread(
        target=lambda: result.setdefault("resp", request(stack.url, "POST", CHAT, chat_body(prompt), timeout=30)),
        daemon=True,
    )
    client.start()
    stack.endpoint.wait_for_record(lambda r: len(r.tokens) >= 20, timeout=10)
    (busy,) = [e for e in stack.pool.environments if e.current is not None and e.current.dispatched]
    assert busy.process is not None
    pid = busy.process.pid
    # Killed once its response has started (the prelude reached the front): on a loaded host the endpoint can
    # be dozens of tokens ahead of the function's first write, and a kill before it is another test's case.
    give_up = time.monotonic() + 10
    while not (busy.current is not None and busy.current.started) and time.monotonic() < give_up:
        time.sleep(0.005)
    assert busy.current is not None and busy.current.started, "the response never started"
    os.kill(pid, signal.SIGKILL)
    client.join(15)
    resp = result["resp"]
    assert resp.status == 200 and resp.complete, "the stream's body must end with its terminating chunk"
    events = resp.data_events()  # every chunk whole JSON: nothing cut inside an event
    assert "[DONE]" not in events
    record = record_for(stack, prompt)
    got = deltas(resp)
    assert len(got) < 3000  # cut: the deltas written before the kill, maybe none yet on a loaded host
    assert got == [t.text for t in record.tokens[: len(got)]], "what arrived is an intact prefix"  # type: ignore[attr-defined]
    assert busy.last_error is not None and busy.last_error.error_type == "Runtime.ExitError"
    wait_until_replaced(busy, pid)
    busy.last_error = None
    assert_serves_normally(stack, "a busy kill")


# --- clients -------------------------------------------------------------------------------------------


def test_a_client_that_half_closes_after_its_request_keeps_its_stream(stack: LocalStack) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(tokens=40, cadence_ms=5)
    prompt = f"Half closed {uuid.uuid4().hex[:8]}"
    ex = wire.exchange(stack.url, wire.post(CHAT, json.dumps(chat_body(prompt)).encode()), half_close=True)
    (answer,) = ex.answers
    assert answer.status == 200 and answer.complete and answer.error is None
    assert answer.body.endswith(b"data: [DONE]\n\n")
    record = record_for(stack, prompt)
    assert record.outcome == "completed"  # type: ignore[attr-defined]
    assert text_of_sse(answer.body) == [t.text for t in record.tokens]  # type: ignore[attr-defined]
    assert ex.closed, "after the response, a half-closed connection is closed"
    assert_serves_normally(stack, "a half-close")


@pytest.mark.parametrize(
    "sends", [b"", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"], ids=["nothing", "half-a-head"]
)
def test_an_idle_connection_is_closed_after_the_idle_timeout(stack: LocalStack, sends: bytes) -> None:
    assert stack.pool is not None
    before = stack.pool.invocations
    with wire.connect(stack.url) as sock:
        sock.sendall(sends)
        started = time.monotonic()
        raw, closed = wire.read_all(sock, timeout=IDLE_S + 5)
    assert closed, "the server kept an idle connection open"
    assert IDLE_S * 0.8 < time.monotonic() - started < IDLE_S + 4
    assert raw == b"" or raw.startswith(b"HTTP/1.1 4")
    assert stack.pool.invocations == before
    assert_serves_normally(stack, "an idle connection")


def test_a_client_that_stalls_inside_its_body_is_refused_and_nothing_is_invoked(stack: LocalStack) -> None:
    assert stack.pool is not None and stack.endpoint is not None
    before = stack.pool.invocations
    body = json.dumps(chat_body("never finished")).encode()
    with wire.connect(stack.url) as sock:
        sock.sendall(wire.post(CHAT, body)[: -len(body) // 2])  # stops halfway through its body
        raw, closed = wire.read_all(sock, timeout=IDLE_S + 5)
    assert closed
    (answer,) = wire.parse(raw)
    assert answer.status == 400 and json.loads(answer.body)["Message"]
    assert stack.pool.invocations == before and stack.endpoint.records == []
    assert_serves_normally(stack, "a stalled body")


def _drip(sock: socket.socket, data: bytes, every_s: float, until: float) -> bool:
    """Send ``data`` a byte at a time, ``every_s`` apart, until it is all gone or the server closed (False)."""
    for byte in data:
        if time.monotonic() > until:
            break
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return False
        time.sleep(every_s)
    return True


@pytest.mark.parametrize("where", ["head", "body"])
def test_a_client_dripping_its_request_is_cut_at_the_request_deadline(stack: LocalStack, where: str) -> None:
    """A byte every IDLE_S / 5 never meets a per-read timeout; the whole request still has IDLE_S to arrive."""
    assert stack.pool is not None
    before = stack.pool.invocations
    body = json.dumps(chat_body("dripped")).encode()
    request_bytes = wire.post(CHAT, body)
    head_len = len(request_bytes) - len(body)
    with wire.connect(stack.url) as sock:
        started = time.monotonic()
        if where == "body":
            sock.sendall(request_bytes[:head_len])  # the head at once, then the body drips
        _drip(sock, request_bytes[head_len if where == "body" else 0 :], IDLE_S / 5, started + IDLE_S + 5)
        raw, closed = wire.read_all(sock, timeout=IDLE_S + 5)
        elapsed = time.monotonic() - started
    assert closed, "the server kept a dripping connection open"
    assert elapsed < IDLE_S + 2.5, f"the dripping connection lasted {elapsed:.1f} s"
    if where == "body":
        (answer,) = wire.parse(raw)
        assert answer.status == 400
    assert stack.pool.invocations == before
    assert_serves_normally(stack, f"a dripped {where}")


def test_connections_beyond_the_cap_get_lambdas_429_at_once_and_no_thread(stack: LocalStack) -> None:
    assert stack.front is not None
    cap, previous = 6, stack.front.max_connections
    stack.front.max_connections = cap
    idle: list[socket.socket] = []
    try:
        threads_before = threading.active_count()
        idle = [wire.connect(stack.url) for _ in range(cap)]
        time.sleep(0.3)  # each is being served (waiting for its request) by a thread of its own
        refused = []
        for _ in range(20):
            with wire.connect(stack.url) as sock:
                refused.append(wire.read_all(sock, timeout=5))
        assert threading.active_count() <= threads_before + cap
        for raw, closed in refused:
            (answer,) = wire.parse(raw)
            assert closed and answer.status == 429, raw[:200]
            assert answer.headers["x-amzn-errortype"] == "TooManyRequestsException"
            assert json.loads(answer.body) == {"Message": "Rate Exceeded."}
    finally:
        for sock in idle:
            sock.close()
        stack.front.max_connections = previous
    # The idle connections' threads end as they close, and the cap frees up with them.
    deadline = time.monotonic() + 5
    while stack.front.server._connections > 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert_serves_normally(stack, "connections beyond the cap")


def test_a_client_resetting_an_idle_keep_alive_connection_is_no_traceback(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    for _ in range(3):
        with wire.connect(stack.url) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b'{"status":"ok"}\r\n0\r\n\r\n'):  # its last chunk
                piece = sock.recv(65536)
                assert piece, answer
                answer += piece
            assert answer.startswith(b"HTTP/1.1 200")
            # Idle, kept alive: the client resets it.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    time.sleep(0.3)  # the server's thread reads the reset
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "ConnectionResetError" not in captured.err, captured.err
    assert_serves_normally(stack, "idle connections reset")


CHAT_JSON = json.dumps(chat_body("framed badly")).encode()
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
# (request bytes, whether the client half-closes after them, the status it must get)
MALFORMED = {
    "negative-content-length": (HEAD + b"Content-Length: -5\r\n\r\n" + CHAT_JSON, False, 400),
    "non-numeric-content-length": (HEAD + b"Content-Length: abc\r\n\r\n" + CHAT_JSON, False, 400),
    "signed-content-length": (HEAD + b"Content-Length: +%d\r\n\r\n" % len(CHAT_JSON) + CHAT_JSON, False, 400),
    "content-length-list": (HEAD + b"Content-Length: %d, 5\r\n\r\n" % len(CHAT_JSON) + CHAT_JSON, False, 400),
    "duplicate-content-length": (
        HEAD + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(CHAT_JSON), len(CHAT_JSON)) + CHAT_JSON,
        False,
        400,
    ),
    "conflicting-content-length": (
        HEAD + b"Content-Length: %d\r\nContent-Length: 5\r\n\r\n" % len(CHAT_JSON) + CHAT_JSON,
        False,
        400,
    ),
    "content-length-and-chunked": (
        HEAD
        + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%b\r\n0\r\n\r\n" % (len(CHAT_JSON), CHAT_JSON),
        False,
        400,
    ),
    "bad-chunk-size": (HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + CHAT_JSON + b"\r\n0\r\n\r\n", False, 400),
    "hex-prefixed-chunk-size": (
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n0x%x\r\n%b\r\n0\r\n\r\n" % (len(CHAT_JSON), CHAT_JSON),
        False,
        400,
    ),
    "chunk-longer-than-its-size": (
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%b\r\n0\r\n\r\n" % (len(CHAT_JSON) - 3, CHAT_JSON),
        False,
        400,
    ),
    "chunked-body-cut-off": (
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%b\r\n" % (len(CHAT_JSON), CHAT_JSON),
        True,
        400,
    ),
    "body-shorter-than-content-length": (
        HEAD + b"Content-Length: %d\r\n\r\n" % (len(CHAT_JSON) + 50) + CHAT_JSON,
        True,
        400,
    ),
    "unknown-transfer-coding": (HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", False, 501),
    "garbage-request-line": (b"HELLO THERE\r\n\r\n", False, 400),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_framing_gets_a_400_and_never_reaches_the_function(stack: LocalStack, case: str) -> None:
    assert stack.pool is not None and stack.endpoint is not None
    data, half_close, status = MALFORMED[case]
    before = stack.pool.invocations
    ex = wire.exchange(stack.url, data, half_close=half_close, timeout=IDLE_S + 5)
    assert ex.answers, f"no answer to {case}: {ex.raw[:200]!r}"
    answer = ex.answers[0]
    assert answer.status == status, (case, ex.raw[:300])
    assert answer.headers.get("content-type") == "application/json"
    assert json.loads(answer.body)["Message"]
    assert ex.closed, "a connection whose framing cannot be trusted is closed"
    assert ex.seconds < IDLE_S, "refused at once, not after a timeout"
    assert stack.pool.invocations == before, "the function was invoked"
    assert stack.endpoint.records == []
    assert_serves_normally(stack, case)


# --- concurrency -----------------------------------------------------------------------------------------


def test_a_request_beyond_the_concurrency_gets_lambdas_429_at_once(stack: LocalStack) -> None:
    assert stack.endpoint is not None and stack.pool is not None
    stack.endpoint.set_scenario(tokens=150, cadence_ms=10, ttft_ms=5)
    run = uuid.uuid4().hex[:8]
    prompts = [f"Long{i}x{run} please" for i in range(CONCURRENCY)]
    results: dict[int, StreamedResponse] = {}

    def client(i: int) -> None:
        results[i] = request(stack.url, "POST", CHAT, chat_body(prompts[i]), timeout=30)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CONCURRENCY)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while sum(1 for r in stack.endpoint.records if len(r.tokens) >= 3) < CONCURRENCY:
        assert time.monotonic() < deadline, "the long streams never began"
        time.sleep(0.01)
    started = time.monotonic()
    throttled = request(stack.url, "POST", CHAT, chat_body("one too many"), timeout=10)
    waited = time.monotonic() - started
    assert throttled.status == 429
    assert throttled.header("x-amzn-errortype") == "TooManyRequestsException"
    assert throttled.header("content-type") == "application/json"
    assert throttled.json() == {"Message": "Rate Exceeded."}
    assert waited < 3, f"the throttled request waited {waited:.1f} s"
    for t in threads:
        t.join(30)
    assert len(stack.endpoint.records) == CONCURRENCY, "the throttled request reached the endpoint"
    for i, resp in results.items():
        assert resp.status == 200 and resp.data_events()[-1] == "[DONE]"
        assert deltas(resp) == [t.text for t in record_for(stack, prompts[i]).tokens]  # type: ignore[attr-defined]
    assert_serves_normally(stack, "a throttle")


# --- the endpoint --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "after", "status", "code"),
    [
        ("throttling", 0, 429, "rate_limited"),
        ("reset", 0, 502, "upstream_connection_error"),
        ("reset", 4, 200, "upstream_connection_error"),
    ],
    ids=["throttling", "reset-before-first-byte", "reset-mid-stream"],
)
def test_endpoint_throttling_and_resets_leave_the_stack_serving(
    stack: LocalStack, fault: str, after: int, status: int, code: str
) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(fault=fault, fault_after=after)
    resp = request(stack.url, "POST", CHAT, chat_body(f"Fault {fault}"), timeout=20)
    assert resp.status == status
    if status == 200:
        assert resp.complete
        assert resp.data_events()[-1]["error"]["code"] == code
        assert len(deltas(resp)) == after
    else:
        assert resp.json()["error"]["code"] == code
    assert_serves_normally(stack, f"endpoint {fault}")


# --- signals -------------------------------------------------------------------------------------------


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
    return found


def _alive(pid: int) -> bool:
    try:
        state = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("State"))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return False  # gone, or going: a process reaped while its status is read answers ESRCH
    return "zombie" not in state


@pytest.mark.parametrize("burst", [1, 12])
def test_repeated_sigterm_and_sigint_stop_python_m_sagestream_local_cleanly(burst: int) -> None:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sagestream_local", "--port", "0", "--concurrency", "2", "--idle-timeout", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        match = re.search(r"serving (http://127\.0\.0\.1:\d+)", line)
        assert match, line
        url = match.group(1)
        assert request(url, "GET", "/health", timeout=20).status == 200
        runtimes = _children(proc.pid)
        assert len(runtimes) == 2
        # A stream in flight while the signals come, as under `make run` when make forwards a second TERM.
        streaming = threading.Thread(
            target=lambda: request(url, "POST", CHAT, chat_body("streaming while stopped"), timeout=20), daemon=True
        )
        streaming.start()
        time.sleep(0.2)
        for i in range(burst):
            os.kill(proc.pid, signal.SIGTERM if i % 3 else signal.SIGINT)
        code = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert code == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert "sagestream: stopped" in stderr
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in runtimes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in runtimes), "a runtime process outlived the stack"
