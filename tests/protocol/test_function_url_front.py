"""The local Function URL front on the wire: its request framing against h11's, and its one writer per client
connection under a function timeout, a client that stops reading, HEAD and HTTP/1.0, over real sockets and
real runtime processes (``tests.handlers.paced`` writes ``tag:i:....`` chunks of a known size)."""

from __future__ import annotations

import io
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from email.message import Message

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.client import request
from tests.conftest import PYTHONPATH
from tests.reliability import wire

from sagestream_local.function_url import FunctionURL, Malformed, read_request_body
from sagestream_local.runtime_api import Pool

IDLE_S = 1.5


def start(handler: str, size: int = 1, timeout_s: float = 30.0) -> tuple[Pool, FunctionURL]:
    pool = Pool(
        size=size,
        timeout_s=timeout_s,
        env={"_HANDLER": handler, "PYTHONPATH": PYTHONPATH},
        command=[sys.executable, "-m", "sagestream.lambda_runtime"],
    ).start()
    return pool, FunctionURL(pool, port=0, idle_timeout_s=IDLE_S).start()


@pytest.fixture
def paced() -> Iterator[tuple[Pool, FunctionURL]]:
    pool, url = start("tests.handlers.paced", size=2, timeout_s=2.0)
    yield pool, url
    url.stop()
    pool.stop()


def paced_request(spec: dict[str, object]) -> bytes:
    body = json.dumps(spec).encode()
    return b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (
        len(body),
        body,
    )


def assert_whole_writes(body: bytes, size: int, tag: str) -> int:
    """``body`` is writes 0..n-1 of ``size`` bytes each, whole and in order; returns n."""
    assert len(body) % size == 0, f"a write was cut: {len(body)} bytes is not a multiple of {size}"
    n = len(body) // size
    for i in range(n):
        piece = body[i * size : (i + 1) * size]
        head = f"{tag}:{i}:".encode()
        assert piece == head + b"." * (size - len(head)), f"write {i} is not whole: {piece[:40]!r}"
    return n


# --- request framing, against h11 ----------------------------------------------------------------------


def _h11_chunked(pieces: list[bytes]) -> bytes:
    """``pieces`` as an h11 client frames a chunked request body."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="POST", target="/", headers=[("Host", "x"), ("Transfer-Encoding", "chunked")]))
    data = b"".join(client.send(h11.Data(data=p)) or b"" for p in pieces if p)
    return data + (client.send(h11.EndOfMessage()) or b"")


def _chunked_headers() -> Message:
    headers = Message()
    headers["Transfer-Encoding"] = "chunked"
    return headers


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=300), max_size=8))
def test_a_chunked_body_framed_by_h11_reads_back_whole(pieces: list[bytes]) -> None:
    assert read_request_body(_chunked_headers(), io.BytesIO(_h11_chunked(pieces))) == b"".join(pieces)


def _h11_server_accepts(body: bytes) -> bool:
    server = h11.Connection(h11.SERVER)
    server.receive_data(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    server.receive_data(b"")
    try:
        while (event := server.next_event()) is not h11.NEED_DATA:
            if isinstance(event, h11.EndOfMessage):
                return True
            if isinstance(event, h11.ConnectionClosed):
                return False
    except h11.RemoteProtocolError:
        return False
    return False


@pytest.mark.parametrize(
    "body",
    [
        b"zz\r\nabc\r\n0\r\n\r\n",
        b"-3\r\nabc\r\n0\r\n\r\n",
        b"3\r\nabcdef\r\n0\r\n\r\n",
        b"5\r\nabc",
        b"3\r\nabc\r\n",
        b"3\r\nabc\r\n0\r\n",
        b"\r\n",
        b"",
    ],
)
def test_bodies_h11_refuses_are_refused_here_too(body: bytes) -> None:
    assert not _h11_server_accepts(body)
    with pytest.raises(Malformed):
        read_request_body(_chunked_headers(), io.BytesIO(body))


# --- one writer per client connection ----------------------------------------------------------------------


def test_a_function_timeout_ends_the_body_between_two_writes_and_the_connection_carries_on(
    paced: tuple[Pool, FunctionURL],
) -> None:
    """The pool ends the invocation at its timeout from another thread than the one relaying the writes: the
    end marker must come after a whole write, never inside one, so the same connection serves the next request."""
    pool, url = paced
    size = 8192
    for attempt in range(3):
        started = time.monotonic()
        with wire.connect(url.url, timeout=15) as sock:
            sock.sendall(paced_request({"writes": 100000, "interval_ms": 1, "size": size, "tag": "t"}))
            sock.sendall(paced_request({"writes": 3, "interval_ms": 0, "size": 50, "tag": "n"}))  # pipelined
            raw, _ = wire.read_all(sock, timeout=15)
        first, second = wire.parse(raw, ("POST", "POST"))
        assert first.status == 200 and first.complete and first.error is None, (attempt, first.error)
        writes = assert_whole_writes(first.body, size, "t")
        assert 10 < writes < 100000, "the stream must have been cut by the function timeout"
        assert second.status == 200 and second.complete, (attempt, second)
        assert assert_whole_writes(second.body, 50, "n") == 3
        assert time.monotonic() - started > pool.timeout_s * 0.9
    assert pool.invocations == 6


def test_clients_that_stop_reading_are_let_go_after_the_idle_timeout(paced: tuple[Pool, FunctionURL]) -> None:
    """Two clients that never read hold both environments only until their sends have stalled for the idle
    timeout; meanwhile a third gets the 429, and afterwards a normal request is served."""
    pool, url = paced
    stalled = []
    for i in range(2):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((url.host, url.port))
        sock.sendall(paced_request({"writes": 2000, "interval_ms": 0, "size": 65536, "tag": f"s{i}"}))
        stalled.append(sock)
    try:
        time.sleep(0.3)
        assert request(url.url, "POST", "/", {"writes": 1, "size": 10}, timeout=10).status == 429
        deadline = time.monotonic() + IDLE_S + 8
        while any(e.current is not None for e in pool.environments):
            assert time.monotonic() < deadline, "a stalled client held its environment past the idle timeout"
            time.sleep(0.05)
        errors = [e.last_error.error_type for e in pool.environments if e.last_error is not None]
        # Whichever lets go first: the front, its send stalled for the idle timeout (the client is gone), or
        # the runtime, its write stalled until half a second before the 2 s function timeout (it aborts its
        # response). Both end the invocation and keep the environment; neither waits for the timeout.
        assert len(errors) == 2 and set(errors) <= {"Runtime.ClientGone", "Runtime.ResponseAborted"}, errors
        resp = request(url.url, "POST", "/", {"writes": 2, "interval_ms": 0, "size": 20, "tag": "ok"}, timeout=10)
        assert resp.status == 200 and resp.complete
        assert_whole_writes(resp.body, 20, "ok")
    finally:
        for sock in stalled:
            sock.close()


def test_a_head_response_has_no_body_and_the_next_request_follows_it_intact() -> None:
    pool, url = start("tests.handlers.paced")
    try:
        body = json.dumps({"writes": 2, "interval_ms": 0, "size": 30, "tag": "h"}).encode()
        head = b"HEAD / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
        with wire.connect(url.url) as sock:
            sock.sendall(head + paced_request({"writes": 2, "interval_ms": 0, "size": 30, "tag": "g"}))
            raw, _ = wire.read_all(sock, timeout=IDLE_S + 3)
        first, second = wire.parse(raw, ("HEAD", "POST"))
        assert first.status == 200 and first.body == b"" and first.complete
        assert second.status == 200 and second.complete
        assert_whole_writes(second.body, 30, "g")
    finally:
        url.stop()
        pool.stop()


def test_an_http_1_0_client_gets_a_body_delimited_by_the_close() -> None:
    pool, url = start("tests.handlers.paced")
    try:
        body = json.dumps({"writes": 3, "interval_ms": 0, "size": 25, "tag": "o"}).encode()
        ex = wire.exchange(url.url, b"POST / HTTP/1.0\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body), timeout=10)
        assert ex.closed
        head, _, rest = ex.raw.partition(b"\r\n\r\n")
        assert b"transfer-encoding" not in head.lower() and b"connection: close" in head.lower()
        assert assert_whole_writes(rest, 25, "o") == 3
    finally:
        url.stop()
        pool.stop()


def test_an_end_from_another_thread_waits_for_the_write_in_progress() -> None:
    """The sink on its own: an end arriving while a chunk is being sent is written after that chunk."""
    from sagestream.function_url import Prelude
    from sagestream_local.function_url import _ClientSink

    left, right = socket.socketpair()
    right.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sink = _ClientSink(left, "POST", False, {})
    sink.prelude(Prelude(200, {}, ()))
    big = b"x" * (4 << 20)
    writer = threading.Thread(target=sink.chunk, args=(big,), daemon=True)
    writer.start()
    time.sleep(0.2)  # the send is blocked on the unread socket
    sink.end(None)  # from this thread: must neither block nor write inside the chunk
    assert not sink.ended.is_set()
    received = bytearray()
    right.settimeout(5)
    while not received.endswith(b"0\r\n\r\n"):
        received += right.recv(1 << 20)
    writer.join(5)
    assert sink.ended.is_set()
    _, _, body = bytes(received).partition(b"\r\n\r\n")
    assert body == b"%x\r\n%b\r\n0\r\n\r\n" % (len(big), big)
    left.close()
    right.close()


def test_an_end_that_comes_before_the_prelude_is_a_502_and_the_late_prelude_is_refused() -> None:
    """A timeout that ends the invocation just as the runtime's prelude arrives: the client gets Lambda's 502,
    never a terminating chunk with no response head before it."""
    from sagestream.function_url import Prelude
    from sagestream_local.function_url import _ClientSink
    from sagestream_local.runtime_api import ClientGone, FunctionError

    left, right = socket.socketpair()
    sink = _ClientSink(left, "POST", False, {})
    sink.end(FunctionError("Sandbox.Timedout", {"errorMessage": "Task timed out"}, started=False))
    with pytest.raises(ClientGone):
        sink.prelude(Prelude(200, {}, ()))
    with pytest.raises(ClientGone):
        sink.chunk(b"late")
    left.close()
    (answer,) = wire.parse(right.recv(65536))
    right.close()
    assert answer.status == 502 and answer.complete
    assert answer.headers["x-amzn-errortype"] == "Sandbox.Timedout"
    assert json.loads(answer.body) == {"Message": "Internal Server Error"}


def test_the_framing_examples_in_the_docstrings_hold() -> None:
    import doctest

    import sagestream_local.function_url as front

    result = doctest.testmod(front, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
