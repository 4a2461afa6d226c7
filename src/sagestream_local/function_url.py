"""A local Function URL in ``RESPONSE_STREAM`` mode: HTTP requests in, streamed responses out.

Each request becomes a Function URL event (payload format 2.0, built by :mod:`sagestream.function_url`)
handed to the :class:`~sagestream_local.runtime_api.Pool`. The response prelude becomes the status line,
headers and ``Set-Cookie``; every body chunk the runtime sends goes to the client as one HTTP chunk, in
one ``sendall`` on a TCP_NODELAY socket, the moment it arrives. A client that goes away closes the
runtime's response connection, so the function's next write raises ``ClientDisconnected``.

Lambda's own answers are kept: 413 for a request over 6 MB, 502 ``Internal Server Error`` when the
function fails before its response began.

Example::

    >>> with Pool(size=2) as pool, FunctionURL(pool, port=0) as url:  # doctest: +SKIP
    ...     print(url.url)
"""

from __future__ import annotations

import select
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import ThreadingHTTPServer
from typing import Any

from sagestream.function_url import MAX_REQUEST_BYTES, Prelude, PreludeError, build_event
from sagestream_local.runtime_api import ClientGone, FunctionError, NoDelayHandler, Pool

_LAMBDA_ERROR = b'{"Message":"Internal Server Error"}'
_DRAIN_LIMIT = 64 * 1024 * 1024
_TOO_LARGE = b'{"Message":"Request must be smaller than 6291456 bytes for the InvokeFunction operation"}'

# A hook that may answer a request itself (CORS preflight, say) before it reaches the function:
# it returns (status, headers, body) or None.
Interceptor = Callable[[str, str, Mapping[str, str]], tuple[int, dict[str, str], bytes] | None]


class _ClientSink:
    """Writes one invocation's response to one HTTP client, as it arrives."""

    def __init__(self, sock: socket.socket, method: str, extra_headers: Mapping[str, str]) -> None:
        self._sock = sock
        self._head_only = method == "HEAD"
        self._extra = extra_headers
        self.started = False
        self.keep_alive = True
        self.ended = threading.Event()

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as e:
            self.keep_alive = False
            raise ClientGone() from e

    def prelude(self, prelude: Prelude) -> None:
        reason = HTTPStatus(prelude.status).phrase if prelude.status in HTTPStatus._value2member_map_ else ""
        lines = [f"HTTP/1.1 {prelude.status} {reason}"]
        headers = {**self._extra, **prelude.headers}
        lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("content-length", "transfer-encoding")]
        lines += [f"Set-Cookie: {c}" for c in prelude.cookies]
        lines.append("Transfer-Encoding: chunked")
        try:
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        except UnicodeEncodeError as e:
            # Not started: the invocation fails as a bad prelude does, with Lambda's 502, not a broken head.
            raise PreludeError(f"a header value is not Latin-1: {e}") from None
        self.started = True
        self._send(head)

    def chunk(self, data: bytes) -> None:
        if not self._head_only:
            self._send(b"%x\r\n%b\r\n" % (len(data), data))

    def end(self, error: FunctionError | None) -> None:
        try:
            if self.started:
                if error is not None:
                    # The function's own in-band error event (if any) has reached the client already.
                    print(
                        f"sagestream_local: stream ended with {error.error_type}: {error.payload}",
                        file=sys.stderr,
                    )
                self._send(b"0\r\n\r\n")
            else:
                if error is not None:
                    print(
                        f"sagestream_local: function error {error.error_type}: {error.payload}",
                        file=sys.stderr,
                    )
                self._send(
                    b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\n"
                    b"X-Amzn-ErrorType: %b\r\nContent-Length: %d\r\n\r\n%b"
                    % (
                        (error.error_type if error else "Runtime.InvalidResponse").encode(),
                        len(_LAMBDA_ERROR),
                        _LAMBDA_ERROR,
                    )
                )
        finally:
            self.ended.set()


class _FrontHandler(NoDelayHandler):
    server: _FrontServer

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.front.verbose:
            super().log_message(format, *args)

    def _read_request_body(self) -> bytes | None:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            body = bytearray()
            while (size := int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)) > 0:
                body += self.rfile.read(size)
                self.rfile.readline(1024)
                if len(body) > MAX_REQUEST_BYTES:
                    return None
            while self.rfile.readline(65536) not in (b"\r\n", b"\n", b""):
                pass
            return bytes(body)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            # Read (and drop) what the client sends, within reason, so that it is there to hear the 413.
            remaining = min(length, _DRAIN_LIMIT)
            while remaining > 0 and (data := self.rfile.read(min(remaining, 1 << 20))):
                remaining -= len(data)
            return None
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        front = self.server.front
        raw_path, _, raw_query = self.path.partition("?")
        if front.interceptor is not None:
            answer = front.interceptor(self.command, raw_path, self.headers)
            if answer is not None:
                self._read_request_body()
                status, headers, body = answer
                self._answer(status, body, headers)
                return
        body = self._read_request_body()
        if body is None:
            self.close_connection = True
            self._answer(413, _TOO_LARGE, {"Content-Type": "application/json", "Connection": "close"})
            return
        event = build_event(
            method=self.command,
            raw_path=raw_path,
            raw_query=raw_query,
            headers=self.headers.items(),
            body=body,
            source_ip=self.client_address[0],
            domain=f"{self.server.server_address[0]}:{self.server.server_address[1]}",
        )
        sink = _ClientSink(self.connection, self.command, front.extra_headers(self.headers))
        inv = front.pool.submit(event, sink)
        # While the function works, watch for the client leaving even if nothing is being written.
        while not inv.wait(0.02):
            if _peer_closed(self.connection):
                inv.leave()
                sink.keep_alive = False
                break
        sink.ended.wait()
        if not sink.keep_alive or inv.client_gone.is_set():
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _handle


def _peer_closed(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class _FrontServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    front: FunctionURL


class FunctionURL:
    """The HTTP side of a local Function URL, on loopback."""

    def __init__(
        self,
        pool: Pool,
        host: str = "127.0.0.1",
        port: int = 3000,
        interceptor: Interceptor | None = None,
        response_headers: Callable[[Mapping[str, str]], dict[str, str]] | None = None,
        verbose: bool = False,
    ) -> None:
        self.pool = pool
        self.interceptor = interceptor
        self._response_headers = response_headers
        self.verbose = verbose
        self.server = _FrontServer((host, port), _FrontHandler)
        self.server.front = self
        self.host, self.port = self.server.server_address[0], self.server.server_address[1]
        self.url = f"http://{self.host}:{self.port}"
        self._thread: threading.Thread | None = None

    def extra_headers(self, request_headers: Mapping[str, str]) -> dict[str, str]:
        return self._response_headers(request_headers) if self._response_headers else {}

    def start(self) -> FunctionURL:
        self._thread = threading.Thread(target=self.server.serve_forever, name="function-url", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.server.serve_forever()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FunctionURL:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
