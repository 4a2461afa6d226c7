"""The deadline bounds every wait of an upstream call, over a real loopback socket and the real botocore client:
the wait for the answer's head (an endpoint that never answers), a whole answer's body that drips, and the
retries botocore would otherwise send after the deadline. The read timeout is far beyond the deadline in
every case: only the deadline can end these waits."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sagestream import upstream
from sagestream.config import Config
from sagestream.errors import APIError

DEADLINE_S = 1.0
READ_TIMEOUT_S = 60.0


class Endpoint:
    """A loopback HTTP server that takes each request and answers as ``behaviour`` says: never, or a JSON
    body a byte at a time."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests = 0
        self._open: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._open.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            piece = conn.recv(65536)
            if not piece:
                return
            data += piece
        self.requests += 1
        if self.behaviour == "never":
            return  # the connection stays open, silent
        body = b'{"generated_text": "' + b"x" * 200 + b'"}'
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
            for byte in body:
                conn.sendall(bytes([byte]))
                time.sleep(0.05)  # far under any read timeout: each read returns, the whole never ends in time
        except OSError:
            return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.sock.close()
        for conn in self._open:
            conn.close()


@pytest.fixture
def client_for(monkeypatch: pytest.MonkeyPatch, fake_aws: None) -> Iterator[Any]:
    endpoints: list[Endpoint] = []

    def make(behaviour: str, read_timeout_s: float = READ_TIMEOUT_S) -> tuple[Any, Endpoint, Config]:
        endpoint = Endpoint(behaviour)
        endpoints.append(endpoint)
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", endpoint.url)
        config = Config(endpoint_name="e", read_timeout_s=read_timeout_s, max_attempts=3)
        return upstream.make_client(config), endpoint, config

    yield make
    for endpoint in endpoints:
        endpoint.close()


@pytest.mark.parametrize(
    ("call", "behaviour"),
    [(upstream.invoke, "never"), (upstream.invoke, "drip"), (upstream.open_stream, "never")],
    ids=["whole-answer-never-answered", "whole-answer-dripping", "stream-never-answered"],
)
def test_the_call_ends_in_the_deadlines_504_at_the_deadline_and_is_not_retried(
    client_for: Any, call: Any, behaviour: str
) -> None:
    client, endpoint, config = client_for(behaviour)
    started = time.monotonic()
    with pytest.raises(APIError) as raised:
        call(client, config, b"{}", deadline=started + DEADLINE_S)
    elapsed = time.monotonic() - started
    assert (raised.value.status, raised.value.code) == (504, "deadline_exceeded")
    assert DEADLINE_S * 0.9 < elapsed < DEADLINE_S + 1.0, f"ended after {elapsed:.2f} s"
    assert endpoint.requests == 1, "a retry was sent after the deadline"


def test_with_the_deadline_far_off_the_read_timeout_still_rules(client_for: Any) -> None:
    client, endpoint, config = client_for("never", read_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(APIError) as raised:
        upstream.invoke(client, config, b"{}", deadline=started + READ_TIMEOUT_S)
    assert (raised.value.status, raised.value.code) == (504, "upstream_timeout")
    # A read timeout well before the deadline is a fault like others: botocore retries it (3 attempts).
    assert time.monotonic() - started < 10 and endpoint.requests == 3
