"""A local Function URL in ``RESPONSE_STREAM`` mode: HTTP requests in, streamed responses out.

Each request becomes a Function URL event (payload format 2.0, built by :mod:`sagestream.function_url`)
handed to the :class:`~sagestream_local.runtime_api.Pool`. The response prelude becomes the status line,
headers and ``Set-Cookie``; every body chunk the runtime sends goes to the client as one HTTP chunk, in
one ``sendall`` on a TCP_NODELAY socket, the moment it arrives. A client that goes away closes the
runtime's response connection, so the function's next write raises ``ClientDisconnected``.

Lambda's own answers are kept: 413 for a request over 6 MB, 429 ``TooManyRequestsException`` when every
execution environment is busy, 502 ``Internal Server Error`` when the function fails before its response
began. Under faults it holds what a Function URL holds:

- malformed framing (a Content-Length that is not one decimal number, both Content-Length and
  Transfer-Encoding, a bad chunk, a body shorter than announced) is a 400 and never reaches the function;
- one writer per client connection: a timeout or a crash ends the body between two chunks, never inside one;
- a client that half-closes after its request (``shutdown(SHUT_WR)``) keeps its stream; one that resets,
  or whose socket stops taking bytes for ``idle_timeout_s``, is gone;
- a request's whole head and body must arrive within ``idle_timeout_s`` of the wait for it starting (a
  deadline, not a per-read timeout: a client dripping a byte at a time cannot hold a connection for ever);
  a connection that sends nothing in that time is closed, one caught inside its body gets a 400;
- at most ``max_connections`` client connections are served at once (one thread each): a connection beyond
  that is answered Lambda's throttle, 429 ``TooManyRequestsException``, and closed, without a thread;
- a client that resets an idle keep-alive connection is normal life: logged at debug, no traceback.

Example::

    >>> with Pool(size=2) as pool, FunctionURL(pool, port=0) as url:  # doctest: +SKIP
    ...     print(url.url)
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import queue
import re
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

from sagestream.function_url import MAX_REQUEST_BYTES, Prelude, PreludeError, build_event
from sagestream_local.runtime_api import ClientGone, FunctionError, Invocation, NoDelayHandler, Pool, QuietServer

_LAMBDA_ERROR = b'{"Message":"Internal Server Error"}'
_DRAIN_LIMIT = 64 * 1024 * 1024
_TOO_LARGE = b'{"Message":"Request must be smaller than 6291456 bytes for the InvokeFunction operation"}'
# What a Function URL answers when the function's concurrency is used up: Lambda's throttle, 429 with the
# exception named in x-amzn-ErrorType, at once (a Function URL does not queue synchronous invocations).
_THROTTLED = b'{"Message":"Rate Exceeded."}'
THROTTLE_HEADERS = {"Content-Type": "application/json", "x-amzn-ErrorType": "TooManyRequestsException"}
# An environment finishing its last response (its client has the end, the pool hears a moment later) is
# not busy in any sense a client can see: this much grace keeps a sequential client from racing that
# bookkeeping into a 429, while a request beyond the concurrency is still refused rather than queued.
ADMISSION_GRACE_S = 0.5
IDLE_TIMEOUT_S = 60.0
# Client connections served at once, each by one thread; more idle ones would exhaust the process's threads.
MAX_CONNECTIONS = 256
# Once an invocation has ended, how long a client's stalled socket may hold back the end of its body.
_END_GRACE_S = 1.0
_DECIMAL = re.compile(rb"[0-9]{1,19}")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
_MAX_TRAILERS = 64

logger = logging.getLogger(__name__)

# A hook that may answer a request itself (CORS preflight, say) before it reaches the function:
# it returns (status, headers, body) or None.
Interceptor = Callable[[str, str, Mapping[str, str]], tuple[int, dict[str, str], bytes] | None]


class Malformed(Exception):
    """The request's framing cannot be trusted: answered 400, never invoked."""


class TooLarge(Exception):
    """The request body is over Lambda's 6 MB: answered 413."""


class NotImplementedCoding(Exception):
    """A transfer coding other than chunked: answered 501 (RFC 9112, section 6.1)."""


def read_request_body(headers: Any, rfile: Any) -> bytes:
    """The request body, framed strictly as RFC 9112 section 6 says, or :class:`Malformed`.

    http.server parses the request line and headers but leaves the body to the handler, and a parser
    that owns the whole connection (h11) would take the socket from http.server; so this reads the body
    itself, refusing every ambiguity an intermediary could read differently (request smuggling):

    >>> import io
    >>> from email.message import Message
    >>> h = Message(); h["Transfer-Encoding"] = "chunked"
    >>> read_request_body(h, io.BytesIO(b"3\\r\\nabc\\r\\n0\\r\\n\\r\\n"))
    b'abc'
    >>> h = Message(); h["Content-Length"] = "-1"
    >>> read_request_body(h, io.BytesIO(b""))
    Traceback (most recent call last):
    ...
    sagestream_local.function_url.Malformed: Content-Length is not a decimal number: '-1'
    """
    lengths = headers.get_all("Content-Length") or []
    codings = [c.strip().lower() for v in headers.get_all("Transfer-Encoding") or [] for c in v.split(",")]
    if codings:
        if lengths:
            raise Malformed("both Content-Length and Transfer-Encoding")
        if codings != ["chunked"]:
            raise NotImplementedCoding(f"Transfer-Encoding {', '.join(codings)!r} is not supported")
        return _read_chunked(rfile)
    if len(lengths) > 1:
        raise Malformed("more than one Content-Length")
    if not lengths:
        return b""
    value = lengths[0].strip().encode("latin-1", "replace")
    if not _DECIMAL.fullmatch(value):
        raise Malformed(f"Content-Length is not a decimal number: {lengths[0]!r}")
    length = int(value)
    if length > MAX_REQUEST_BYTES:
        # Read (and drop) what the client sends, within reason, so that it is there to hear the 413.
        remaining = min(length, _DRAIN_LIMIT)
        while remaining > 0 and (data := rfile.read(min(remaining, 1 << 20))):
            remaining -= len(data)
        raise TooLarge()
    body = rfile.read(length) if length else b""
    if len(body) < length:
        raise Malformed(f"the body ended after {len(body)} of {length} bytes")
    return bytes(body)


def _read_chunked(rfile: Any) -> bytes:
    body = bytearray()
    while True:
        line = rfile.readline(1024)
        if not line.endswith(b"\r\n"):
            raise Malformed("the chunked body ended inside a chunk-size line")
        size_field = line[:-2].split(b";", 1)[0].strip(b" \t")
        if not _HEX.fullmatch(size_field):
            raise Malformed(f"bad chunk size {size_field[:20]!r}")
        size = int(size_field, 16)
        if size == 0:
            break
        if len(body) + size > MAX_REQUEST_BYTES:
            raise TooLarge()
        data = rfile.read(size)
        if len(data) < size:
            raise Malformed("the chunked body ended inside a chunk")
        if rfile.read(2) != b"\r\n":
            raise Malformed("a chunk is longer than its size")
        body += data
    for _ in range(_MAX_TRAILERS):
        line = rfile.readline(8192)
        if line == b"\r\n":
            return bytes(body)
        if not line.endswith(b"\r\n") or b":" not in line:
            raise Malformed("bad trailer section")
    raise Malformed("too many trailer fields")


class _ClientSink:
    """Writes one invocation's response to one HTTP client, as it arrives: the connection's one writer.

    Chunks come from the Runtime API thread relaying the runtime's response; the end can come from
    another thread (the exit watcher after a crash, the pool after a timeout). Every write holds one lock,
    and an end that finds the lock held (a chunk on its way, perhaps to a client that stopped reading) is
    left for the holder to write when it lets go, so the end never lands inside a chunk and never waits on
    a stalled client. After the end nothing more is written: a late chunk is refused as for a gone client.
    """

    def __init__(self, sock: socket.socket, method: str, http10: bool, extra_headers: Mapping[str, str]) -> None:
        self._sock = sock
        self._head_only = method == "HEAD"
        self._chunked = not http10  # an HTTP/1.0 client reads a body delimited by the connection's close
        self._extra = extra_headers
        self._lock = threading.Lock()
        self._no_body = self._head_only
        self._end_pending: tuple[FunctionError | None] | None = None
        self._end_done = False
        self._broken = False  # a send failed, or the connection was cut: nothing more can be framed on it
        self.started = False
        self.ended = threading.Event()

    @property
    def keep_alive(self) -> bool:
        """Whether the connection can carry another request once this response has ended."""
        return self._chunked and not self._broken

    def _send(self, data: bytes, head: bool = False) -> None:
        try:
            with self._lock:
                if self._broken or self._end_done or self._end_pending is not None:
                    raise ClientGone()
                try:
                    self._sock.sendall(data)
                except OSError as e:  # reset, closed, or stalled past the socket's timeout
                    self._broken = True
                    raise ClientGone() from e
                if head:  # under the lock: an end decides between a 502 and a last chunk by this
                    self.started = True
        finally:
            self._write_pending_end()

    def prelude(self, prelude: Prelude) -> None:
        status = prelude.status
        reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        bodiless_status = status in (204, 304) or 100 <= status < 200
        self._no_body = self._head_only or bodiless_status
        lines = [f"HTTP/1.1 {status} {reason}"]
        headers = {**self._extra, **prelude.headers}
        lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("content-length", "transfer-encoding")]
        lines += [f"Set-Cookie: {c}" for c in prelude.cookies]
        if self._chunked and not bodiless_status:
            lines.append("Transfer-Encoding: chunked")  # on a HEAD too: it says how the GET would be framed
        elif not self._chunked:
            lines.append("Connection: close")
        try:
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        except UnicodeEncodeError as e:
            # Not started: the invocation fails as a bad prelude does, with Lambda's 502, not a broken head.
            raise PreludeError(f"a header value is not Latin-1: {e}") from None
        self._send(head, head=True)

    def chunk(self, data: bytes) -> None:
        if not self._no_body:
            self._send(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data)

    def end(self, error: FunctionError | None) -> None:
        if error is not None:
            what = "stream ended with" if self.started else "function error"
            print(f"sagestream_local: {what} {error.error_type}: {error.payload}", file=sys.stderr)
        if self._end_pending is None:  # one assignment: no lock needed, and none may be waited for here
            self._end_pending = (error,)
        self._write_pending_end()

    def _write_pending_end(self) -> None:
        # Whoever holds the lock re-checks after letting go, so a pending end is always written by someone.
        while self._end_pending is not None and not self._end_done:
            if not self._lock.acquire(blocking=False):
                return
            try:
                if self._end_done:
                    continue
                (error,) = self._end_pending
                self._end_done = True
                if not self._broken and (data := self._end_bytes(error)):
                    try:
                        self._sock.sendall(data)
                    except OSError:
                        self._broken = True
            finally:
                self._lock.release()
            self.ended.set()

    def _end_bytes(self, error: FunctionError | None) -> bytes:
        if self.started:
            return b"0\r\n\r\n" if self._chunked and not self._no_body else b""
        # Nothing was sent: Lambda answers a function that failed before its response began with a 502.
        head = [
            b"HTTP/1.1 502 Bad Gateway",
            b"Content-Type: application/json",
            b"X-Amzn-ErrorType: " + (error.error_type if error else "Runtime.InvalidResponse").encode(),
            b"Content-Length: %d" % len(_LAMBDA_ERROR),
        ]
        if not self._chunked:
            head.append(b"Connection: close")
        return b"\r\n".join(head) + b"\r\n\r\n" + (b"" if self._head_only else _LAMBDA_ERROR)

    def cut(self) -> None:
        """Give up on a client whose socket stopped taking bytes: a send blocked on it fails at once."""
        self._broken = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)


class _RequestReads(io.RawIOBase):
    """The client connection's reads, each waiting at most until the request's deadline (when one is set).

    http.server reads the head line by line and the body is read here, each read with the socket's timeout:
    a per-read timeout that a client sending one byte at a time never reaches. Setting the timeout to the
    time left before every read makes it a deadline for the whole request instead.
    """

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request did not arrive before its deadline")
            self._sock.settimeout(left)
        return self._sock.recv_into(b)


class _FrontHandler(NoDelayHandler):
    server: _FrontServer

    def setup(self) -> None:
        super().setup()
        # Lambda's front closes a connection that sends nothing (or stops mid-request) for a while; the same
        # timeout bounds a send to a client that stopped reading, so no thread waits on a socket for ever.
        self.connection.settimeout(self.server.front.idle_timeout_s)
        self.rfile.close()  # socketserver's own, unread: it would hold the socket open after the connection ends
        self._reads = _RequestReads(self.connection)
        self.rfile = io.BufferedReader(self._reads)

    def handle_one_request(self) -> None:
        # The head and body of the next request, from the moment it is waited for, have one deadline.
        self._reads.deadline = time.monotonic() + self.server.front.idle_timeout_s
        super().handle_one_request()

    def _request_read(self) -> None:
        """The request has arrived: sends to the client are bounded by the idle timeout again, not its rest."""
        self._reads.deadline = None
        self.connection.settimeout(self.server.front.idle_timeout_s)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.front.verbose:
            super().log_message(format, *args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a bad request line, headers too long), in Lambda's JSON shape."""
        self._refuse(code, message or HTTPStatus(code).phrase)

    def _refuse(self, status: int, message: str, body: bytes | None = None) -> None:
        self.close_connection = True
        data = body if body is not None else json.dumps({"Message": message}).encode()
        headers = {"Content-Type": "application/json", "Connection": "close"}
        with contextlib.suppress(OSError):  # a client that is gone cannot hear it
            self._answer(status, b"" if self.command == "HEAD" else data, headers)

    def _handle(self) -> None:
        front = self.server.front
        raw_path, _, raw_query = self.path.partition("?")
        try:
            body = read_request_body(self.headers, self.rfile)
        except TooLarge:
            self._refuse(413, "", _TOO_LARGE)
            return
        except NotImplementedCoding as e:
            self._refuse(501, str(e))
            return
        except Malformed as e:
            self._refuse(400, f"Bad Request: {e}")
            return
        except OSError:  # the client stalled past the request's deadline, or reset, inside its body
            self._request_read()
            self._refuse(400, "Bad Request: the request body did not arrive")
            return
        self._request_read()
        if front.interceptor is not None:
            answer = front.interceptor(self.command, raw_path, self.headers)
            if answer is not None:
                status, headers, answer_body = answer
                self._answer(status, answer_body, headers)
                return
        event = front.build_event(
            method=self.command,
            raw_path=raw_path,
            raw_query=raw_query,
            headers=self.headers.items(),
            body=body,
            source_ip=self.client_address[0],
            domain=f"{self.server.server_address[0]}:{self.server.server_address[1]}",
        )
        http10 = self.request_version == "HTTP/1.0"
        sink = _ClientSink(self.connection, self.command, http10, front.extra_headers(self.headers))
        try:
            inv = front.pool.submit(event, sink, wait_s=ADMISSION_GRACE_S)
        except queue.Empty:
            self._answer(429, b"" if self.command == "HEAD" else _THROTTLED, THROTTLE_HEADERS)
            return
        self._follow(inv, sink)
        if not sink.keep_alive:
            self.close_connection = True

    def _follow(self, inv: Invocation, sink: _ClientSink) -> None:
        """Wait for the response to end, watching the client: a reset is a client gone, a half-close is not."""
        watching = True
        done_at: float | None = None
        while not sink.ended.wait(0.02):
            if watching:
                state = _client_state(self.connection)
                if state == "gone":
                    inv.leave()
                    sink.cut()
                    watching = False
                elif state == "half-closed":
                    # shutdown(SHUT_WR) after the request says "no more requests", not "stop answering":
                    # keep the stream, close once it has ended. A client that is really gone shows at the
                    # next write (a reset), as it does to Lambda.
                    self.close_connection = True
                    watching = False
                elif state == "data":
                    watching = False  # a pipelined request: it waits its turn in the socket
            if inv.done:
                done_at = done_at or time.monotonic()
                if time.monotonic() - done_at > _END_GRACE_S:
                    sink.cut()  # the end is held up by a send to a client that stopped reading

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _handle


def _client_state(sock: socket.socket) -> str:
    """``open``, ``half-closed`` (its FIN came), ``gone`` (reset) or ``data`` (it sent more), without reading."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return "open"
    try:
        data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return "open"
    except OSError:
        return "gone"
    return "data" if data else "half-closed"


class _FrontServer(QuietServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver listens with a backlog of 5: a burst of clients (64 streams for one environment, K at
    # once) would overflow it, and each connection left out waits in the kernel for its SYN's retry (1 s,
    # then 3) rather than be served or refused at once; a Function URL takes them all.
    request_queue_size = 256
    front: FunctionURL
    _connections = 0
    _counting = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._counting:
            admitted = self._connections < self.front.max_connections
            if admitted:
                self._connections += 1
        if not admitted:
            _refuse_connection(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release_connection()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release_connection()

    def _release_connection(self) -> None:
        with self._counting:
            self._connections -= 1


def _refuse_connection(sock: socket.socket) -> None:
    """A connection beyond ``max_connections``: Lambda's throttle, 429, at once, with no thread of its own.

    Whatever the client has already sent is read first, so that closing does not reset the answer away.
    """
    body = _THROTTLED
    head = [b"HTTP/1.1 429 Too Many Requests", b"Content-Length: %d" % len(body), b"Connection: close"]
    head += [f"{k}: {v}".encode("latin-1") for k, v in THROTTLE_HEADERS.items()]
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while sock.recv(65536):
                pass
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + body)


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
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        event_builder: Callable[..., dict[str, Any]] = build_event,
    ) -> None:
        self.pool = pool
        # What a request becomes: the URL's payload 2.0 event, or another front's (sagestream_local.rest_front).
        self.build_event = event_builder
        self.max_connections = max_connections
        self.interceptor = interceptor
        self._response_headers = response_headers
        self.verbose = verbose
        self.idle_timeout_s = idle_timeout_s
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
