"""The streaming runtime against the local Runtime API, and against raw bytes, over real sockets."""

from __future__ import annotations

import base64
import errno
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.client import gaps_ms, request
from tests.conftest import PYTHONPATH

from sagestream.lambda_runtime import (
    ClientDisconnected,
    ResponseRefused,
    RuntimeAPIClient,
    StreamingResponse,
    WriteTimedOut,
    deadline_from_header,
    invoke,
)
from sagestream_local.function_url import FunctionURL
from sagestream_local.runtime_api import FunctionError, Pool

Start = Callable[..., FunctionURL]


def _pool(handler: str, **kw) -> Pool:
    return Pool(size=1, env={"_HANDLER": handler, "PYTHONPATH": PYTHONPATH, **kw.pop("env", {})}, **kw)


def test_streamed_response_has_the_runtime_api_headers_prelude_and_chunks(local_function: Start) -> None:
    url = local_function("tests.handlers.paced", size=1)
    resp = request(url.url, "POST", "/", {"writes": 3, "interval_ms": 1, "size": 10, "tag": "h"})
    assert resp.status == 200 and resp.complete
    assert resp.header("content-type") == "text/plain"
    assert [c.data for c in resp.chunks] == [b"h:0:......", b"h:1:......", b"h:2:......"]
    inv_headers = url.pool.environments[0].last_response_headers
    assert inv_headers["lambda-runtime-function-response-mode"] == "streaming"
    assert inv_headers["transfer-encoding"] == "chunked"
    assert inv_headers["content-type"] == "application/vnd.awslambda.http-integration-response"
    assert inv_headers["trailer"] == "Lambda-Runtime-Function-Error-Type, Lambda-Runtime-Function-Error-Body"


def test_prelude_carries_status_headers_and_cookies_and_the_event_is_payload_2(local_function: Start) -> None:
    url = local_function("tests.handlers.echo")
    resp = request(
        url.url,
        "POST",
        "/v1/x?a=1&a=2&b=",
        b'{"k": 1}',
        headers={
            "Content-Type": "application/json",
            "Cookie": "s=1; t=2",
            "User-Agent": "probe/1",
            "X-Multi": "v",
        },
    )
    assert resp.status == 200
    assert resp.header("x-echo") == "1"
    assert resp.header_values("set-cookie") == ["a=1; Path=/", "b=2"]
    event = resp.json()["event"]
    assert event["version"] == "2.0" and event["routeKey"] == "$default"
    assert event["rawPath"] == "/v1/x" and event["rawQueryString"] == "a=1&a=2&b="
    assert event["queryStringParameters"] == {"a": "1,2", "b": ""}
    assert event["cookies"] == ["s=1", "t=2"]
    assert "cookie" not in event["headers"] and event["headers"]["x-multi"] == "v"
    assert all(k == k.lower() for k in event["headers"])
    http = event["requestContext"]["http"]
    assert http == {
        "method": "POST",
        "path": "/v1/x",
        "protocol": "HTTP/1.1",
        "sourceIp": "127.0.0.1",
        "userAgent": "probe/1",
    }
    assert event["body"] == '{"k": 1}' and event["isBase64Encoded"] is False
    assert abs(event["requestContext"]["timeEpoch"] / 1000 - time.time()) < 30


def test_binary_body_travels_base64(local_function: Start) -> None:
    url = local_function("tests.handlers.echo")
    payload = bytes(range(256))
    event = request(url.url, "POST", "/", payload, headers={"Content-Type": "application/octet-stream"}).json()["event"]
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == payload


def test_context_fields_remaining_time_and_trace_id(local_function: Start) -> None:
    url = local_function("tests.handlers.echo", timeout_s=20)
    first = request(url.url, "GET", "/").json()
    second = request(url.url, "GET", "/").json()
    ctx = first["context"]
    assert ctx["function_name"] == "sagestream-local" and ctx["function_version"] == "$LATEST"
    assert ctx["invoked_function_arn"].endswith(":function:sagestream-local")
    assert ctx["memory_limit_in_mb"] == "512" and ctx["log_group_name"] == "/aws/lambda/sagestream-local"
    assert ctx["log_stream_name"]
    assert 10_000 < ctx["remaining_ms"] <= 20_000
    assert ctx["aws_request_id"] != second["context"]["aws_request_id"]
    assert first["trace_id"].startswith("Root=1-") and first["trace_id"] != second["trace_id"]


def test_error_before_first_byte_goes_to_the_error_endpoint_and_the_loop_goes_on(
    local_function: Start,
) -> None:
    url = local_function("tests.handlers.fails", size=1)
    pid_before = url.pool.environments[0].process.pid
    resp = request(url.url, "POST", "/", {"after": 0})
    assert resp.status == 502
    assert url.pool.environments[0].last_error == FunctionError(
        "ValueError", url.pool.environments[0].last_error.payload, started=False
    )
    assert url.pool.environments[0].last_error.payload["errorMessage"] == "the handler failed on purpose"
    again = request(url.url, "POST", "/", {"after": 2})
    assert again.status == 200 and again.body == b"part 0\npart 1\n"
    assert url.pool.environments[0].process.pid == pid_before  # the same process served both


def test_error_after_first_byte_ends_the_body_with_the_error_trailers(local_function: Start) -> None:
    url = local_function("tests.handlers.fails", size=1)
    resp = request(url.url, "POST", "/", {"after": 2})
    assert resp.status == 200 and resp.complete
    assert resp.body == b"part 0\npart 1\n"
    error = url.pool.environments[0].last_error
    assert error is not None and error.started and error.error_type == "ValueError"
    assert error.payload["errorMessage"] == "the handler failed on purpose"
    assert request(url.url, "POST", "/", {"after": 1}).body == b"part 0\n"


def test_init_error_is_posted_and_the_process_exits_non_zero(tmp_path: Path) -> None:
    pool = _pool("tests.handlers.echo", env={"TEST_HANDLER_IMPORT_ERROR": "cannot start"})
    with pool:
        env = pool.environments[0]
        deadline = time.monotonic() + 20
        while env.last_init_error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert env.last_init_error is not None
        assert (
            env.last_init_error["errorType"] == "Runtime.ImportModuleError"
            or env.last_init_error["errorType"] == "Runtime.HandlerInitError"
        )
        assert "cannot start" in env.last_init_error["errorMessage"]
        deadline = time.monotonic() + 20
        while env.exit_codes == [] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert env.exit_codes and env.exit_codes[0] != 0


def test_missing_handler_is_an_init_error() -> None:
    with _pool("tests.handlers.no_such_function") as pool:
        env = pool.environments[0]
        deadline = time.monotonic() + 20
        while env.last_init_error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert env.last_init_error is not None and env.last_init_error["errorType"] == "Runtime.HandlerNotFound"


def test_header_injection_through_the_prelude_is_refused(local_function: Start) -> None:
    url = local_function("tests.handlers.bad_header", size=1)
    resp = request(url.url, "GET", "/")
    assert resp.status == 502
    assert resp.header("set-cookie") is None
    assert url.pool.environments[0].last_error.error_type == "BadHeader"


@pytest.mark.parametrize("size", [100, 16 * 1024])
def test_fifty_paced_writes_arrive_as_fifty_separate_arrivals(local_function: Start, size: int) -> None:
    url = local_function("tests.handlers.paced", size=1)
    close_pairs_per_try = []
    # Up to three tries: a noisy neighbour can stall a process for a few ms; a buffering relay fails all three.
    for _ in range(3):
        resp = request(url.url, "POST", "/", {"writes": 50, "interval_ms": 10, "size": size, "tag": "p"})
        assert resp.status == 200 and resp.complete
        assert len(resp.chunks) == 50
        assert all(len(c.data) == size for c in resp.chunks)
        close_pairs_per_try.append(sum(1 for g in gaps_ms(resp.chunks) if g < 1.0))
        if close_pairs_per_try[-1] == 0:
            break
    assert close_pairs_per_try[-1] == 0, f"writes that arrived together, per try: {close_pairs_per_try}"


def test_eight_concurrent_requests_on_four_processes_each_get_their_own_body(local_function: Start) -> None:
    url = local_function("tests.handlers.paced", size=4)
    results: dict[int, tuple[int, bytes]] = {}

    def one(i: int) -> None:
        resp = request(url.url, "POST", "/", {"writes": 5, "interval_ms": 20, "size": 12, "tag": f"r{i}"})
        results[i] = (resp.status, resp.body)

    def own(i: int) -> bytes:
        return b"".join(f"r{i}:{k}:".encode().ljust(12, b".") for k in range(5))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    elapsed = time.monotonic() - started
    assert sorted(results) == list(range(8))
    # Beyond the four environments a Function URL throttles rather than queues (the local front waits a short
    # grace for one to free up first): on a loaded host some of the eight may get Lambda's 429. None may ever
    # get another request's body, and at least one round of four is served.
    served = [i for i, (status, _) in results.items() if status == 200]
    for i, (status, body) in results.items():
        assert (status, body) in ((200, own(i)), (429, b'{"Message":"Rate Exceeded."}')), (i, status, body)
    assert len(served) >= 4
    # A throttled request sent again, once the others are done, is served with its own body.
    for i in sorted(set(results) - set(served)):
        again = request(url.url, "POST", "/", {"writes": 5, "interval_ms": 20, "size": 12, "tag": f"r{i}"})
        assert (again.status, again.body) == (200, own(i))
    assert elapsed < 20  # generous: it only shows that nothing waited for a timeout


def test_a_crashed_process_is_replaced_and_the_next_request_succeeds(local_function: Start) -> None:
    url = local_function("tests.handlers.crashes", size=1)
    env = url.pool.environments[0]
    first_pid = env.process.pid
    assert request(url.url, "POST", "/", {}).status == 502
    resp = request(url.url, "POST", "/", {"write_first": True})
    assert resp.status == 200 and resp.body == b"about to crash\n"
    assert env.last_error.error_type == "Runtime.ExitError"
    assert env.process.pid != first_pid


def test_a_process_past_the_timeout_is_ended_and_replaced() -> None:
    pool = _pool("tests.handlers.sleeps", timeout_s=1.0)
    with pool, FunctionURL(pool, port=0) as url:
        first_pid = pool.environments[0].process.pid
        started = time.monotonic()
        resp = request(url.url, "POST", "/", {"seconds": 30})
        assert resp.status == 502 and time.monotonic() - started < 10
        assert pool.environments[0].last_error.error_type == "Sandbox.Timedout"
        ok = request(url.url, "POST", "/", {"seconds": 0})
        assert ok.status == 200 and ok.body == b"woke"
        assert pool.environments[0].process.pid != first_pid


def test_a_client_that_leaves_makes_the_handlers_write_raise(local_function: Start, tmp_path: Path) -> None:
    url = local_function("tests.handlers.until_gone", size=1)
    marker = tmp_path / "gone"
    resp = request(url.url, "POST", "/", {"marker": str(marker)}, stop_after=3)
    assert len(resp.chunks) == 3
    deadline = time.monotonic() + 5
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), "the handler never saw ClientDisconnected"
    assert request(url.url, "POST", "/", {"marker": ""}, stop_after=1).status == 200  # next one is served


def test_request_over_six_megabytes_gets_413(local_function: Start) -> None:
    url = local_function("tests.handlers.echo", size=1)
    resp = request(url.url, "POST", "/", b"x" * (6 * 1024 * 1024 + 1), headers={"Content-Type": "text/plain"})
    assert resp.status == 413


# --- the wire itself, byte for byte, against a bare socket standing in for the Runtime API ---


class _BareRuntimeAPI:
    """Answers one /next, then records the raw bytes of whatever the runtime posts next.

    ``prefix`` is the path the runtime must put before every Runtime API path (cargo-lambda's ``/.rt``);
    ``deadline`` the Lambda-Runtime-Deadline-Ms value (default: an epoch time a minute away); ``early`` bytes
    sent as soon as the POST's head arrives, before its body ends (cargo-lambda answers 200 at once), and
    ``close_after`` bytes of body after which the connection is closed; ``stall`` never reads the body.
    """

    def __init__(
        self,
        event: dict,
        drop_after_bytes: int | None = None,
        *,
        prefix: str = "",
        deadline: str | None = None,
        early: bytes | None = None,
        stall: bool = False,
    ) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.prefix = prefix
        self.event = json.dumps(event).encode()
        self.deadline = deadline
        self.early = early
        self.stall = stall
        self.next_request = b""
        self.posted = b""
        self.drop_after_bytes = drop_after_bytes
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        self.next_request = conn.recv(65536)
        deadline = self.deadline or str(int(time.time() * 1000) + 60000)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nLambda-Runtime-Aws-Request-Id: req-1\r\n"
            b"Lambda-Runtime-Deadline-Ms: %b\r\nLambda-Runtime-Trace-Id: Root=1-abc\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (deadline.encode(), len(self.event), self.event)
        )
        post, _ = self.sock.accept()
        if self.stall:  # accept the connection, read nothing: the runtime's sends fill the buffers
            self.stalled = post
            return
        post.settimeout(10)
        answered = False
        while not self.posted.endswith(b"\r\n\r\n") or b"\r\n0\r\n" not in self.posted:
            data = post.recv(65536)
            if not data:
                break
            self.posted += data
            if self.early is not None and not answered and b"\r\n\r\n" in self.posted:
                post.sendall(self.early)
                answered = True
            if self.drop_after_bytes is not None and len(self.posted) > self.drop_after_bytes:
                post.close()
                return
        if not answered:
            post.sendall(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
        post.close()

    @property
    def body(self) -> bytes:
        return self.posted.partition(b"\r\n\r\n")[2]


def test_the_response_post_is_exactly_the_published_wire_format() -> None:
    api = _BareRuntimeAPI({"rawPath": "/"})
    client = RuntimeAPIClient(api.address)

    def handler(event, stream, context):
        stream.start(201, {"x-a": "b"}, ["c=d"])
        stream.write(b"hello")
        stream.write("wörld")

    invoke(client, handler, client.next_invocation())
    api.thread.join(5)
    head, _, body = api.posted.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /2018-06-01/runtime/invocation/req-1/response HTTP/1.1\r\n")
    assert b"\r\nLambda-Runtime-Function-Response-Mode: streaming" in head
    assert b"\r\nTransfer-Encoding: chunked" in head
    prelude = b'{"statusCode":201,"headers":{"x-a":"b"},"cookies":["c=d"]}'
    # The prelude is one chunk and the 8-NUL separator the next (cargo-lambda reads them as two frames).
    assert body == b"%x\r\n%b\r\n8\r\n%b\r\n5\r\nhello\r\n6\r\nw\xc3\xb6rld\r\n0\r\n\r\n" % (
        len(prelude),
        prelude,
        b"\0" * 8,
    )


def test_a_failure_after_the_first_byte_is_sent_as_base64_trailers() -> None:
    api = _BareRuntimeAPI({})
    client = RuntimeAPIClient(api.address)

    def handler(event, stream, context):
        stream.start(200, {})
        stream.write(b"x")
        raise KeyError("boom")

    invoke(client, handler, client.next_invocation())
    api.thread.join(5)
    tail = api.posted.rsplit(b"\r\n1\r\nx\r\n", 1)[1]
    lines = tail.split(b"\r\n")
    assert lines[0] == b"0" and lines[1] == b"Lambda-Runtime-Function-Error-Type: KeyError"
    name, _, value = lines[2].partition(b": ")
    assert name == b"Lambda-Runtime-Function-Error-Body"
    assert json.loads(base64.b64decode(value))["errorType"] == "KeyError"


def _write_until_gone(api: _BareRuntimeAPI, *, chunk: int) -> list[BaseException]:
    """One invocation that writes ``chunk`` bytes every 5 ms (200 times); what it caught when the caller left."""
    client = RuntimeAPIClient(api.address)
    seen: list[BaseException] = []

    def handler(event, stream, context):
        try:
            stream.start(200, {})
            for _ in range(200):
                stream.write(b"y" * chunk)
                time.sleep(0.005)
        except ClientDisconnected as e:
            seen.append(e)

    invoke(client, handler, client.next_invocation())
    return seen


def test_a_dropped_runtime_api_connection_raises_client_disconnected() -> None:
    seen = _write_until_gone(_BareRuntimeAPI({}, drop_after_bytes=0), chunk=1024)
    assert len(seen) == 1


def test_the_response_socket_has_tcp_nodelay_and_each_write_is_one_send(monkeypatch: pytest.MonkeyPatch) -> None:
    api = _BareRuntimeAPI({})
    client = RuntimeAPIClient(api.address)
    sends: list[bytes] = []
    flags: list[int] = []

    def handler(event, stream, context):
        stream.start(200, {})
        sock = stream._sock
        flags.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        class Counting:
            def __getattr__(self, name):
                return getattr(sock, name)

            def send(self, data):
                sends.append(bytes(data))
                return sock.send(data)

            def sendall(self, data):
                sends.append(bytes(data))
                return sock.sendall(data)

        stream._sock = Counting()
        stream.write(b"a")
        stream.write(b"bb" * 5000)
        stream._sock = sock

    invoke(client, handler, client.next_invocation())
    assert flags == [1]
    assert sends == [b"1\r\na\r\n", b"2710\r\n" + b"bb" * 5000 + b"\r\n"]


def test_a_set_cookie_header_is_refused_cookies_go_in_the_cookies_list() -> None:
    from sagestream.function_url import BadHeader, encode_prelude

    with pytest.raises(BadHeader):
        encode_prelude(200, {"Set-Cookie": "a=1"})
    assert b'"cookies":["a=1"]' in encode_prelude(200, {}, ["a=1"])


# --- what cargo-lambda's Runtime API does differently, and the runtime copes with ---


def test_a_url_address_with_a_path_prefixes_every_runtime_api_path() -> None:
    api = _BareRuntimeAPI({})
    client = RuntimeAPIClient(f"http://{api.address}/.rt/sagestream")

    def handler(event, stream, context):
        stream.start(200, {})
        stream.write(b"x")

    invoke(client, handler, client.next_invocation())
    api.thread.join(5)
    assert api.next_request.startswith(b"GET /.rt/sagestream/2018-06-01/runtime/invocation/next HTTP/1.1\r\n")
    assert api.posted.startswith(b"POST /.rt/sagestream/2018-06-01/runtime/invocation/req-1/response HTTP/1.1\r\n")


def test_a_deadline_that_is_no_epoch_time_is_taken_as_from_now_and_said_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = _BareRuntimeAPI({}, deadline="600000")
    client = RuntimeAPIClient(api.address)
    invocation = client.next_invocation()
    remaining = invocation.context.get_remaining_time_in_millis()
    assert 590_000 < remaining <= 600_000
    assert "Lambda-Runtime-Deadline-Ms '600000' is no epoch time" in capsys.readouterr().err
    assert deadline_from_header("600000", 0) == (600000, True)
    assert deadline_from_header(str(1_800_000_000_000), 0) == (1_800_000_000_000, False)


def test_an_early_2xx_answer_does_not_end_the_stream() -> None:
    api = _BareRuntimeAPI({}, early=b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
    client = RuntimeAPIClient(api.address)
    streams: list[StreamingResponse] = []

    def handler(event, stream, context):
        streams.append(stream)
        stream.start(200, {"content-type": "text/plain"})
        for i in range(5):
            time.sleep(0.02)  # the answer has arrived by the later writes
            stream.write(f"part {i}\n")

    invoke(client, handler, client.next_invocation())
    api.thread.join(5)
    assert streams[0].early_status == 200
    assert b"".join(b"7\r\npart %d\n\r\n" % i for i in range(5)) + b"0\r\n\r\n" in api.body


def test_an_early_error_answer_ends_the_stream_and_says_what_it_said(capsys: pytest.CaptureFixture[str]) -> None:
    api = _BareRuntimeAPI({}, early=b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 9\r\n\r\ntoo large")
    client = RuntimeAPIClient(api.address)
    seen: list[BaseException] = []

    def handler(event, stream, context):
        try:
            stream.start(200, {})  # the answer may already be there when the prelude goes
            for _ in range(50):
                time.sleep(0.02)
                stream.write(b"z")
        except ClientDisconnected as e:
            seen.append(e)

    invoke(client, handler, client.next_invocation())
    assert len(seen) == 1 and isinstance(seen[0], ResponseRefused) and seen[0].status == 413
    assert "answered 413 before the response ended: b'too large'" in capsys.readouterr().err


def test_after_an_early_2xx_the_connection_closing_is_the_caller_gone() -> None:
    api = _BareRuntimeAPI({}, early=b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", drop_after_bytes=400)
    seen = _write_until_gone(api, chunk=64)
    assert len(seen) == 1 and not isinstance(seen[0], ResponseRefused)


# --- the deadline holds whatever the caller does ---


def test_a_write_to_a_caller_that_stopped_reading_raises_before_the_deadline() -> None:
    deadline_s = 2.0
    api = _BareRuntimeAPI({}, deadline=str(int((time.time() + deadline_s) * 1000)), stall=True)
    client = RuntimeAPIClient(api.address)
    seen: list[BaseException] = []
    started = time.monotonic()

    def handler(event, stream, context):
        stream.start(200, {})
        try:
            for _ in range(100_000):  # 6 GB: far more than any socket buffer holds
                stream.write(b"w" * 65536)
        except ClientDisconnected as e:
            seen.append(e)

    invoke(client, handler, client.next_invocation())
    elapsed = time.monotonic() - started
    assert len(seen) == 1 and isinstance(seen[0], WriteTimedOut)
    # It gives up WRITE_RESERVE_S before the deadline; generous slack for a loaded machine.
    assert elapsed < deadline_s + 1.0


def test_a_response_given_up_on_is_aborted_so_the_runtime_api_ends_the_invocation_now() -> None:
    """After a write timed out, the runtime resets the /response connection rather than closing it: a close
    would queue its FIN behind the unsent bytes, and the Runtime API, reading nothing from a stalled client,
    would hold the invocation until the function timeout. The reset reaches it at once, unread bytes or not."""
    deadline_s = 2.0
    api = _BareRuntimeAPI({}, deadline=str(int((time.time() + deadline_s) * 1000)), stall=True)
    client = RuntimeAPIClient(api.address)
    seen: list[BaseException] = []

    def handler(event, stream, context):
        stream.start(200, {})
        try:
            for _ in range(100_000):
                stream.write(b"w" * 65536)
        except ClientDisconnected as e:
            seen.append(e)

    invoke(client, handler, client.next_invocation())
    assert len(seen) == 1 and isinstance(seen[0], WriteTimedOut)
    stalled = api.stalled
    assert stalled is not None
    waited = time.monotonic() + 2
    while (error := stalled.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)) == 0 and time.monotonic() < waited:
        time.sleep(0.01)
    assert error == errno.ECONNRESET, f"the Runtime API's side saw no reset (SO_ERROR {error})"
    stalled.close()


# --- every started response writes at least one body byte ---


@pytest.mark.parametrize(
    ("headers", "filler"),
    [
        ({"content-type": "text/event-stream"}, b":\n\n"),
        ({"Content-Type": "text/event-stream; charset=utf-8"}, b":\n\n"),
        ({"content-type": "application/json"}, b"\n"),
        (None, b"\n"),  # the handler returned without starting: the runtime starts a 200 for it
    ],
)
def test_a_response_with_no_body_gets_one_harmless_body_write(headers: dict | None, filler: bytes) -> None:
    api = _BareRuntimeAPI({})
    client = RuntimeAPIClient(api.address)

    def handler(event, stream, context):
        if headers is not None:
            stream.start(403, headers)

    invoke(client, handler, client.next_invocation())
    api.thread.join(5)
    assert api.body.endswith(b"%x\r\n%b\r\n0\r\n\r\n" % (len(filler), filler))
    assert api.body.count(b"\r\n0\r\n") == 1


def test_a_response_with_a_body_gets_nothing_added() -> None:
    api = _BareRuntimeAPI({})
    client = RuntimeAPIClient(api.address)

    def handler(event, stream, context):
        stream.start(200, {"content-type": "text/event-stream"})
        stream.write(b"data: [DONE]\n\n")

    invoke(client, handler, client.next_invocation())
    api.thread.join(5)
    assert api.body.endswith(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
    assert b":\n\n" not in api.body


def test_the_runtime_and_prelude_docstring_examples_hold() -> None:
    import doctest

    from sagestream import function_url
    from sagestream.lambda_runtime import client, loop

    for module in (client, loop, function_url):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0, module.__name__


# --- /next's answer, read by hand (NextConnection) ---


def _answering(*answers: bytes) -> tuple[str, list[bytes]]:
    """A server on loopback that reads a request head and sends the next canned answer, on one connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    heads: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            for answer in answers:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                heads.append(head)
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{server.getsockname()[1]}", heads


def test_next_reads_a_content_length_answer_then_a_chunked_one_on_one_connection() -> None:
    event = json.dumps({"rawPath": "/x"}).encode()
    address, heads = _answering(
        b"HTTP/1.1 200 OK\r\nLambda-Runtime-Aws-Request-Id: r-1\r\nlambda-runtime-trace-id: Root=1-a\r\n"
        b"Lambda-Runtime-Deadline-Ms: 4102444800000\r\nContent-Length: %d\r\n\r\n%b" % (len(event), event),
        b"HTTP/1.1 200 OK\r\nLambda-Runtime-Aws-Request-Id: r-2\r\nLambda-Runtime-Deadline-Ms: 4102444800000\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n5\r\n%b\r\n%x\r\n%b\r\n0\r\n\r\n" % (event[:5], len(event) - 5, event[5:]),
    )
    client = RuntimeAPIClient(address)
    first, second = client.next_invocation(), client.next_invocation()
    assert (first.request_id, first.trace_id, first.event) == ("r-1", "Root=1-a", {"rawPath": "/x"})
    assert (second.request_id, second.trace_id, second.event) == ("r-2", None, {"rawPath": "/x"})
    assert first.context.deadline_ms == 4102444800000
    assert heads[0].startswith(b"GET /2018-06-01/runtime/invocation/next HTTP/1.1\r\nHost: 127.0.0.1:")


@pytest.mark.parametrize(
    "answer",
    [b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", b"HTTP/1.1 200 OK\r\n\r\n{}", b""],
    ids=["no status line", "body cut short", "no length", "closed"],
)
def test_an_unreadable_next_answer_raises_and_the_next_poll_reconnects(answer: bytes) -> None:
    import http.client

    address, _ = _answering(answer)
    client = RuntimeAPIClient(address)
    with pytest.raises((http.client.HTTPException, OSError)):
        client.next_invocation()
    assert client._next_conn is None  # dropped: the next poll opens a new connection
