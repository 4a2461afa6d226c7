"""Raw sockets for the fault suite: bytes as a careless or hostile client sends them, and h11 (a real HTTP/1.1
implementation, not ours) to read what came back, so a broken frame shows as h11's error, not as a pass."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import h11


@dataclass
class Answer:
    """One HTTP response as h11 read it from the raw bytes."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    complete: bool = False  # h11 saw the end of its body, framed as its headers said
    error: str | None = None  # what h11 refused in the bytes, if anything


@dataclass
class Exchange:
    raw: bytes
    answers: list[Answer] = field(default_factory=list)
    closed: bool = False  # the server closed the connection (EOF) before the read timed out
    seconds: float = 0.0


def connect(url: str, timeout: float = 10.0) -> socket.socket:
    parts = urlsplit(url)
    assert parts.hostname in ("127.0.0.1", "::1", "localhost")
    return socket.create_connection((parts.hostname, parts.port), timeout=timeout)


def read_all(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    """Everything the server sends until it closes (True) or ``timeout`` passes (False)."""
    sock.settimeout(0.2)
    data = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            piece = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return bytes(data), True
        if not piece:
            return bytes(data), True
        data += piece
    return bytes(data), False


def exchange(
    url: str, data: bytes, *, half_close: bool = False, timeout: float = 10.0, methods: tuple[str, ...] = ("POST",)
) -> Exchange:
    """Send ``data`` as it is, optionally ``shutdown(SHUT_WR)``, and read until the server closes."""
    started = time.monotonic()
    with connect(url) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        raw, closed = read_all(sock, timeout)
    return Exchange(raw, parse(raw, methods), closed, time.monotonic() - started)


def parse(raw: bytes, methods: tuple[str, ...] = ("POST",)) -> list[Answer]:
    """The responses in ``raw``, one per request method given, read by an h11 client."""
    conn = h11.Connection(h11.CLIENT)
    conn.receive_data(raw)
    conn.receive_data(b"")
    answers: list[Answer] = []
    for method in methods:
        if conn.our_state is h11.DONE:
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                break
        conn.send(h11.Request(method=method, target="/", headers=[("Host", "x"), ("Content-Length", "0")]))
        conn.send(h11.EndOfMessage())
        answer: Answer | None = None
        try:
            while True:
                event = conn.next_event()
                if isinstance(event, h11.Response):
                    answer = Answer(event.status_code, {k.decode(): v.decode("latin-1") for k, v in event.headers})
                    answers.append(answer)
                elif isinstance(event, h11.Data) and answer is not None:
                    answer.body += event.data
                elif isinstance(event, h11.EndOfMessage) and answer is not None:
                    answer.complete = True
                    break
                elif event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    break
        except h11.RemoteProtocolError as e:
            if answer is not None:
                answer.error = str(e)
            else:
                answers.append(Answer(0, {}, error=str(e)))
            break
        if answer is None or not answer.complete:
            break
    return answers


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    """A well-formed POST with a Content-Length body (``extra``: more header lines, each ending CRLF)."""
    return (
        b"POST %b HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%b\r\n%b"
        % (path.encode(), len(body), extra, body)
    )
