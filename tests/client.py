"""A raw-socket HTTP/1.1 client for tests that time arrivals: nothing between the socket and the clock.

``http.client`` and friends read through buffers; to see when each chunk (or SSE event) *arrived* the
tests read the socket themselves and parse the chunked framing incrementally.
"""

from __future__ import annotations

import itertools
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Arrival:
    at: float  # time.monotonic() when the last byte of this piece arrived
    data: bytes


@dataclass
class StreamedResponse:
    status: int
    headers: list[tuple[str, str]]
    chunks: list[Arrival] = field(default_factory=list)
    complete: bool = False  # the terminating chunk arrived

    @property
    def body(self) -> bytes:
        return b"".join(c.data for c in self.chunks)

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def header_values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def events(self) -> list[Arrival]:
        """SSE events (separated by a blank line), each timed by the arrival of the chunk that completed it."""
        out: list[Arrival] = []
        pending = b""
        for chunk in self.chunks:
            pending += chunk.data
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                out.append(Arrival(chunk.at, event))
        return out

    def data_events(self) -> list[Any]:
        """The ``data:`` payloads of the SSE events, JSON-decoded where they are JSON."""
        out: list[Any] = []
        for event in self.events():
            for line in event.data.decode().split("\n"):
                if line.startswith("data:"):
                    payload = line[5:].strip()
                    out.append(payload if payload == "[DONE]" else json.loads(payload))
        return out

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    url: str,
    method: str = "GET",
    path: str = "/",
    body: bytes | dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
    stop_after: int | None = None,
) -> StreamedResponse:
    """One request; the response read to its end (or until ``stop_after`` chunks, then the socket closed)."""
    parts = urlsplit(url)
    if isinstance(body, dict):
        body = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
    body = body or b""
    head = [f"{method} {path} HTTP/1.1", f"Host: {parts.netloc}", f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        return _read_response(sock, stop_after)
    finally:
        sock.close()


def _read_response(sock: socket.socket, stop_after: int | None) -> StreamedResponse:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError(f"connection closed before the response head: {buf!r}")
        buf += data
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:])]
    resp = StreamedResponse(status, headers)
    if resp.header("transfer-encoding") != "chunked":
        length = int(resp.header("content-length") or 0)
        while len(buf) < length:
            data = sock.recv(65536)
            if not data:
                break
            buf += data
        resp.chunks.append(Arrival(time.monotonic(), buf[:length]))
        resp.complete = len(buf) >= length
        return resp
    while True:
        while b"\r\n" not in buf:
            data = sock.recv(65536)
            if not data:
                return resp
            buf += data
        size_line, rest = buf.split(b"\r\n", 1)
        size = int(size_line.split(b";")[0], 16)
        while len(rest) < size + 2:
            data = sock.recv(65536)
            if not data:
                return resp
            rest += data
        if size == 0:
            resp.complete = True
            return resp
        resp.chunks.append(Arrival(time.monotonic(), rest[:size]))
        buf = rest[size + 2 :]
        if stop_after is not None and len(resp.chunks) >= stop_after:
            return resp


def gaps_ms(arrivals: list[Arrival]) -> list[float]:
    return [(b.at - a.at) * 1000 for a, b in itertools.pairwise(arrivals)]
