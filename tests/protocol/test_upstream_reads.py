"""The stream's body is read from http.client under urllib3 where urllib3 adds nothing, and its faults still say why.

A loopback server answers each call with bytes written here (a real HTTP head, event-stream frames, then a
cut or a clean end), so the reads, their ends and their faults are the sockets' own.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from sagestream import upstream
from sagestream.config import Config
from sagestream.errors import APIError
from sagestream_local.endpoint import EVENTSTREAM_CONTENT_TYPE, payload_part_frame

PARTS = [b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n', b"data: [DONE]\n\n"]
FRAMES = [payload_part_frame(p) for p in PARTS]
HEAD = f"HTTP/1.1 200 OK\r\nContent-Type: {EVENTSTREAM_CONTENT_TYPE}\r\nX-Amzn-Invoked-Production-Variant: v\r\n"


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


class Answers:
    """One loopback listener: each accepted connection answers its requests with the next canned responses."""

    def __init__(self, answers: list[tuple[bytes, bool]]) -> None:
        self.answers = list(answers)  # (the bytes, whether the connection stays open after them)
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                reader = conn.makefile("rb")
                while self.answers:
                    length = 0
                    while (line := reader.readline()) not in (b"\r\n", b""):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    if not line:
                        break
                    reader.read(length)
                    answer, keep = self.answers.pop(0)
                    conn.sendall(answer)
                    if not keep:
                        break  # a cut, or a close-delimited body: this connection ends here

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch, fake_aws: None) -> Iterator[Any]:
    made: list[Answers] = []

    def start(*answers: tuple[bytes, bool]) -> tuple[Answers, Any]:
        server = Answers(list(answers))
        made.append(server)
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", server.url)
        return server, upstream.make_client(Config(endpoint_name="llm", max_attempts=1))

    yield start
    for server in made:
        server.close()


def read_all(client: Any) -> tuple[list[bytes], upstream.PayloadParts]:
    with upstream.open_stream(client, Config(endpoint_name="llm"), b"{}") as parts:
        return list(parts), parts


def test_a_chunked_body_is_read_from_http_client_and_its_end_gives_the_connection_back(serve: Any) -> None:
    answer = (HEAD + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunked(*FRAMES) + b"0\r\n\r\n"
    server, client = serve(*[(answer, True)] * 3)
    for _ in range(3):
        got, parts = read_all(client)
        assert got == PARTS
        assert isinstance(parts._read1().__self__, http.client.HTTPResponse)  # not urllib3's read1
    assert server.connections == 1


def test_a_chunked_body_cut_inside_a_chunk_is_a_broken_connection_after_the_whole_frames(serve: Any) -> None:
    answer = (HEAD + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunked(FRAMES[0])
    answer += b"%x\r\n" % len(FRAMES[1]) + FRAMES[1][:10]  # the server closes here
    _, client = serve((answer, False))
    got: list[bytes] = []
    with pytest.raises(APIError) as failure, upstream.open_stream(client, Config(endpoint_name="llm"), b"{}") as parts:
        got.extend(parts)
    assert got == PARTS[:1]
    assert (failure.value.status, failure.value.code) == (502, "upstream_connection_error")


def test_a_body_with_a_length_is_read_to_its_length_and_its_connection_kept(serve: Any) -> None:
    body = b"".join(FRAMES)
    answer = (HEAD + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    server, client = serve(*[(answer, True)] * 2)
    assert [read_all(client)[0] for _ in range(2)] == [PARTS, PARTS]
    assert server.connections == 1


def test_a_close_delimited_body_is_read_to_its_end(serve: Any) -> None:
    answer = (HEAD + "Connection: close\r\n\r\n").encode() + b"".join(FRAMES)
    _, client = serve((answer, False))
    assert read_all(client)[0] == PARTS


def _cut(client: Any) -> tuple[list[bytes], APIError]:
    got: list[bytes] = []
    with pytest.raises(APIError) as failure, upstream.open_stream(client, Config(endpoint_name="llm"), b"{}") as parts:
        got.extend(parts)
    return got, failure.value


def test_a_close_delimited_body_cut_inside_a_frame_is_a_corrupt_stream_not_a_clean_end(serve: Any) -> None:
    # botocore's own buffer drops an unfinished frame at the end; the relay would take it for the model's end.
    answer = (HEAD + "Connection: close\r\n\r\n").encode() + FRAMES[0] + FRAMES[1][:20]
    _, client = serve((answer, False))
    got, failure = _cut(client)
    assert got == PARTS[:1]
    assert (failure.status, failure.code) == (502, "upstream_stream_corrupt")


def test_a_body_short_of_its_length_is_a_broken_connection_even_when_cut_between_frames(serve: Any) -> None:
    # http.client ends a short Content-Length body quietly (and botocore turns urllib3's check off).
    body = b"".join(FRAMES)
    answer = (HEAD + f"Content-Length: {len(body)}\r\n\r\n").encode() + FRAMES[0]  # the server closes here
    _, client = serve((answer, False))
    got, failure = _cut(client)
    assert got == PARTS[:1]
    assert (failure.status, failure.code) == (502, "upstream_connection_error")
