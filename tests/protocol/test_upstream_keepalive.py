"""Keep-alives over a real loopback socket and the real botocore client: while the endpoint is silent,
:class:`~sagestream.upstream.PayloadParts` yields :data:`~sagestream.upstream.SILENCE` every ``keepalive_s``,
never while bytes are already waiting (in the socket or above it, in http.client's reader), and the stream
it reads stays intact: every part arrives whole and in order, even when a silence falls inside a frame or
inside the chunked encoding's size line."""

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
from sagestream_local.endpoint import payload_part_frame

KEEPALIVE_S = 0.2


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class ScriptedEndpoint:
    """Answers one streamed call with a chunked event stream, sending each ``(pause_s, bytes)`` step in order."""

    def __init__(self, steps: list[tuple[float, bytes]]) -> None:
        self.steps = steps
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            conn, _ = self.sock.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.amazon.eventstream\r\n"
            conn.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
            for pause_s, piece in self.steps:
                time.sleep(pause_s)
                conn.sendall(piece)
            conn.sendall(b"0\r\n\r\n")
            time.sleep(0.5)
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def stream_of(monkeypatch: pytest.MonkeyPatch, fake_aws: None) -> Iterator[Any]:
    endpoints: list[ScriptedEndpoint] = []

    def read(steps: list[tuple[float, bytes]], keepalive_s: float = KEEPALIVE_S) -> list[bytes]:
        endpoint = ScriptedEndpoint(steps)
        endpoints.append(endpoint)
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", endpoint.url)
        config = Config(endpoint_name="e")
        client = upstream.make_client(config)
        deadline = time.monotonic() + 30
        with upstream.open_stream(client, config, b"{}", deadline=deadline, keepalive_s=keepalive_s) as parts:
            return list(parts)

    yield read
    for endpoint in endpoints:
        endpoint.close()


def silences_between(parts: list[bytes]) -> list[int]:
    """How many SILENCE markers came before each real part, and after the last."""
    counts, run = [], 0
    for part in parts:
        if part == upstream.SILENCE:
            run += 1
        else:
            counts.append(run)
            run = 0
    return [*counts, run]


def test_silence_yields_keepalives_and_the_parts_arrive_whole(stream_of: Any) -> None:
    first, second, third = payload_part_frame(b"one"), payload_part_frame(b"two"), payload_part_frame(b"three")
    parts = stream_of([(0.9, chunk(first)), (0.0, chunk(second)), (0.7, chunk(third))])
    assert [p for p in parts if p] == [b"one", b"two", b"three"]
    before_first, before_second, before_third, after = silences_between(parts)
    # 0.9 s of silence is four intervals of 0.2 s; a loaded machine may see fewer, never none or many more.
    assert 2 <= before_first <= 5 and 1 <= before_third <= 4
    assert before_second == 0 and after == 0


def test_no_keepalive_while_bytes_wait_above_the_socket(stream_of: Any) -> None:
    # Two frames in one send: the first read takes both into http.client's reader; the socket then has
    # nothing, yet the second part is there to read. A wait on the socket alone would stall it.
    frames = chunk(payload_part_frame(b"a")) + chunk(payload_part_frame(b"b"))
    parts = stream_of([(0.0, frames), (0.5, chunk(payload_part_frame(b"c")))])
    assert [p for p in parts if p] == [b"a", b"b", b"c"]
    assert silences_between(parts)[:2] == [0, 0]


def test_a_silence_inside_a_frame_or_a_chunk_size_line_leaves_the_stream_intact(stream_of: Any) -> None:
    frame = payload_part_frame(b"split across a pause")
    framed = chunk(frame)
    steps = [
        (0.0, framed[:1]),  # the chunk size line cut after its first digit
        (0.5, framed[1:20]),  # then the rest of the line and part of the frame
        (0.5, framed[20:]),
        (0.0, chunk(payload_part_frame(b"next"))),
    ]
    parts = stream_of(steps)
    assert [p for p in parts if p] == [b"split across a pause", b"next"]
    assert sum(1 for p in parts if not p) >= 1, "a silence inside the frame still keeps the client's stream alive"


def test_without_keepalive_nothing_but_parts_is_yielded(stream_of: Any) -> None:
    parts = stream_of([(0.6, chunk(payload_part_frame(b"late")))], keepalive_s=0.0)
    assert parts == [b"late"]


def test_keepalives_do_not_stretch_the_read_timeout(monkeypatch: pytest.MonkeyPatch, fake_aws: None) -> None:
    endpoint = ScriptedEndpoint([(0.0, chunk(payload_part_frame(b"one"))), (5.0, chunk(payload_part_frame(b"late")))])
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", endpoint.url)
    config = Config(endpoint_name="e", read_timeout_s=1.0, max_attempts=1)
    parts: list[bytes] = []
    started = time.monotonic()
    try:
        stream = upstream.open_stream(
            upstream.make_client(config), config, b"{}", deadline=started + 30, keepalive_s=KEEPALIVE_S
        )
        with pytest.raises(APIError) as raised, stream:
            parts.extend(stream)
    finally:
        endpoint.close()
    elapsed = time.monotonic() - started
    assert raised.value.code == "upstream_timeout" and 0.9 < elapsed < 3.0, elapsed
    assert parts[0] == b"one" and 2 <= parts.count(upstream.SILENCE) <= 5
