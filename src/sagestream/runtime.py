"""A Lambda Runtime API client that streams responses, standard library only.

Python's managed Lambda runtime returns a handler's value in one piece; a Function URL in
``RESPONSE_STREAM`` mode needs the response body sent while the handler runs. No maintained Python
library implements the streaming half of the Runtime API (awslambdaric buffers the whole response), so
this module speaks it directly, as the published Runtime API describes it:

- ``GET  /2018-06-01/runtime/invocation/next`` blocks until an event arrives (no read timeout);
- ``POST /2018-06-01/runtime/invocation/{id}/response`` with ``Lambda-Runtime-Function-Response-Mode:
  streaming`` and a chunked body: the JSON prelude as one HTTP chunk, the 8 NUL bytes as the next, then
  the body, one HTTP chunk per write; a handler that raises after the first byte has its body ended with
  the ``Lambda-Runtime-Function-Error-Type`` and ``Lambda-Runtime-Function-Error-Body`` trailers (AWS
  documents them as the way to report a failure once the response has begun, and says Lambda treats such
  a response as a success: they do not count in the ``Errors`` metric);
- a response the handler gave up on (a write that could not finish before the deadline: the caller stopped
  reading) cannot end cleanly, so its connection is aborted (a reset), which ends the invocation at once; the
  loop then goes back to ``/next`` with the execution environment intact;
- ``POST /2018-06-01/runtime/invocation/{id}/error`` for a failure before anything was written;
- ``POST /2018-06-01/runtime/init/error`` when the handler cannot be loaded, and the process exits;
- with SnapStart (``AWS_LAMBDA_INITIALIZATION_TYPE=snap-start``), after init: the before-snapshot hooks,
  ``GET /2018-06-01/runtime/restore/next`` (Lambda snapshots the environment while it waits and answers
  it in each environment restored from the snapshot), then the after-restore hooks, and only then
  ``/next``; a hook that fails is reported (``/init/error`` before the snapshot, ``/restore/error`` after a
  restore) and the process exits. The hooks are those registered with AWS's own ``snapshot_restore_py``
  (``register_before_snapshot`` / ``register_after_restore``), as in Lambda's managed Python runtime:
  before-snapshot hooks run last-registered first, after-restore hooks in the order registered. Before
  the after-restore hooks the runtime runs one of its own: Python's ``random`` reseeded from the OS, since
  every environment restored from one snapshot would otherwise draw the same numbers (``uuid4`` and
  ``secrets`` read the OS afresh each time and need nothing).

It knows nothing of SageMaker: the handler is ``handler(event, stream, context)``.

The same code runs under Lambda and under an independent emulator, cargo-lambda (``cargo lambda watch
--only-lambda-apis``), whose Runtime API differs in three allowed ways, each handled here: its address
is a URL with a path (``http://127.0.0.1:9000/.rt``), its deadline header is a duration (``600000``)
rather than an epoch time, and it answers the streamed ``/response`` POST with ``200`` before the body
ends. So the stream tells an early answer from the far side closing: an early 2xx does not end the
stream, an early error status does (logged), and EOF or a reset is the caller gone.

Environment variables read: ``AWS_LAMBDA_RUNTIME_API`` (``host:port``, or a URL with a path prefix),
``_HANDLER`` (``module.function``,
default ``sagestream.app.handler``), ``AWS_LAMBDA_INITIALIZATION_TYPE`` (``snap-start``: see above), and for
the context ``AWS_LAMBDA_FUNCTION_NAME``,
``AWS_LAMBDA_FUNCTION_VERSION``, ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE``, ``AWS_LAMBDA_LOG_GROUP_NAME``,
``AWS_LAMBDA_LOG_STREAM_NAME``, and ``AWS_LAMBDA_MAX_CONCURRENCY`` (see below). Each invocation's trace
header is :func:`trace_id`; with one invocation at a time it is also ``_X_AMZN_TRACE_ID``, as Lambda sets it.

Many invocations at once (Lambda Managed Instances): when ``AWS_LAMBDA_MAX_CONCURRENCY`` is above 1, that
many threads each run the same sequential loop (:func:`run`: ``/next``, the handler, ``/response``), each
with its own ``/next`` connection, as aws-lambda-rust-runtime's concurrent runner and aws-lambda-go do.
Threads, not processes or a selector loop: a relayed stream spends almost all its life waiting on two
sockets, so the GIL is rarely contended, the handler stays the blocking code it is, and one process (one
init, one boto3 client, one 51 MB interpreter) carries them all; measured, 16-64 streams in one process
cost about half the CPU per stream-second of one stream per process (docs/deploy.md, "Many streams per
environment"). What is per invocation stays per invocation: the trace header is a context variable (the
process-wide ``_X_AMZN_TRACE_ID`` is removed, so that nothing reads another invocation's), and the
handler keeps its record, log keys and metrics per call. A handler that fails fails only its own
invocation. ``SIGTERM`` stops the process once the invocations in flight have ended (Lambda's grace
period bounds the wait; each invocation's own deadline ends it first). The runtime's own messages are
one JSON object a line on stderr, as Lambda Managed Instances require of every log line.

Example::

    $ AWS_LAMBDA_RUNTIME_API=127.0.0.1:9001 _HANDLER=tests.handlers.echo python -m sagestream.runtime
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import importlib
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

from sagestream.function_url import CONTENT_TYPE, SEPARATOR, encode_prelude, media_type

API_VERSION = "2018-06-01"
DEFAULT_HANDLER = "sagestream.app.handler"
# The error types of a failed SnapStart hook, as Lambda's managed runtimes report them.
SNAPSHOT_ERROR = "Runtime.BeforeSnapshotError"
RESTORE_ERROR = "Runtime.AfterRestoreError"
# A Lambda-Runtime-Deadline-Ms below this (2001-09-09 in epoch ms) cannot be an epoch time: it is a duration
# from now, as cargo-lambda sends (its timeout, 600000). Real Lambda always sends an epoch time.
_EPOCH_MS_FLOOR = 1_000_000_000_000
# A write may block on a stalled reader; it gives up this long before the deadline, so the handler still has
# time to end the response and log its record before Lambda stops the process.
WRITE_RESERVE_S = 0.5
_MIN_WRITE_TIMEOUT_S = 0.05
# What a started response with no body bytes gets at close (see StreamingResponse.close): an SSE comment for
# an event stream (every SSE parser skips it), a newline for anything else.
_SSE_FILLER = b":\n\n"
_FILLER = b"\n"
_TRACE_ENV = "_X_AMZN_TRACE_ID"
# The running invocation's Lambda-Runtime-Trace-Id. Each loop thread sets its own; under one invocation at a
# time the environment variable carries the same value for the readers that know no other place.
_trace_id: ContextVar[str | None] = ContextVar("sagestream_trace_id", default=None)
# One line at a time on stderr: a text stream is not safe to write from several threads.
_log_lock = threading.Lock()


def trace_id() -> str | None:
    """The X-Ray trace header of the invocation running in this thread (None outside one, or untraced)."""
    return _trace_id.get()


def log(level: str, message: str, *, request_id: str | None = None, exc: BaseException | None = None) -> None:
    """One JSON line on stderr: the runtime's own messages, which no Powertools Logger formats.

    Lambda Managed Instances take JSON log lines only, and concurrent invocations interleave: each line
    names its invocation (``requestId``, the name Lambda's own JSON log lines use) and carries any
    traceback inside it rather than as lines of its own.
    """
    line: dict[str, Any] = {
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "level": level,
        "logger": "sagestream.runtime",
        "message": message,
    }
    if request_id:
        line["requestId"] = request_id
    if exc is not None:
        line["errorType"] = type(exc).__name__
        line["stackTrace"] = traceback.format_exception(exc)
    text = json.dumps(line, default=str) + "\n"
    with _log_lock:
        sys.stderr.write(text)
        sys.stderr.flush()


class ClientDisconnected(ConnectionError):
    """The caller is gone: nothing more written will reach it."""


class WriteTimedOut(ClientDisconnected):
    """A write could not finish before the invocation's deadline: the caller stopped reading.

    A subclass of :class:`ClientDisconnected` because, for the handler, it means the same thing (stop
    producing; nobody is reading), but it is told apart in the log: the caller did not leave, it stalled.
    """


class ResponseRefused(ClientDisconnected):
    """The Runtime API answered the streamed response with an error status before the body ended."""

    def __init__(self, status: int, said: bytes) -> None:
        super().__init__(f"the Runtime API refused the response with {status}: {said[:500]!r}")
        self.status = status
        self.said = said


class ResponseStream(Protocol):
    """What a handler writes its response to."""

    def start(self, status: int, headers: Mapping[str, str], cookies: Iterable[str] = ()) -> None: ...

    def write(self, data: bytes | str) -> None: ...

    def close(self) -> None: ...

    @property
    def started(self) -> bool: ...


Handler = Callable[[dict[str, Any], ResponseStream, "LambdaContext"], None]


@dataclass(slots=True)
class LambdaContext:
    """The context object, with the attributes Powertools' Logger and Metrics read."""

    aws_request_id: str
    deadline_ms: int
    invoked_function_arn: str = ""
    function_name: str = field(default_factory=lambda: os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "sagestream"))
    function_version: str = field(default_factory=lambda: os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"))
    memory_limit_in_mb: str = field(default_factory=lambda: os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
    log_group_name: str = field(default_factory=lambda: os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", ""))
    log_stream_name: str = field(default_factory=lambda: os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", ""))
    identity: Any = None
    client_context: Any = None
    tenant_id: str | None = None

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self.deadline_ms - int(time.time() * 1000))


@dataclass(frozen=True, slots=True)
class Invocation:
    request_id: str
    event: dict[str, Any]
    context: LambdaContext
    trace_id: str | None


def _error_payload(exc: BaseException, error_type: str | None = None) -> dict[str, Any]:
    return {
        "errorMessage": str(exc),
        "errorType": error_type or type(exc).__name__,
        "stackTrace": traceback.format_exception(exc)[-10:],
    }


def _json_header(value: str | None) -> Any:
    if not value:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return None


def parse_address(address: str) -> tuple[str, int, str]:
    """Host, port and path prefix of ``AWS_LAMBDA_RUNTIME_API``.

    Lambda gives ``host:port``; cargo-lambda gives a URL whose path prefixes every Runtime API path.

    >>> parse_address("127.0.0.1:9001")
    ('127.0.0.1', 9001, '')
    >>> parse_address("http://127.0.0.1:9000/.rt/sagestream/")
    ('127.0.0.1', 9000, '/.rt/sagestream')
    >>> parse_address("[::1]:9001")
    ('::1', 9001, '')
    """
    url = urlsplit(address if "://" in address else f"http://{address}")
    if url.scheme != "http" or url.port is None:
        raise ValueError(f"AWS_LAMBDA_RUNTIME_API {address!r} is neither host:port nor http://host:port/path")
    return url.hostname or "127.0.0.1", url.port, url.path.rstrip("/")


def deadline_from_header(value: str | None, now_ms: int) -> tuple[int, bool]:
    """The invocation's deadline in epoch ms, and whether the header was a duration rather than a time.

    >>> deadline_from_header("1700000000000", now_ms=1_699_999_990_000)
    (1700000000000, False)
    >>> deadline_from_header("600000", now_ms=1_700_000_000_000)
    (1700000600000, True)
    """
    raw = int(value or 0)
    if raw < _EPOCH_MS_FLOOR:
        return now_ms + raw, True
    return raw, False


class NextConnection:
    """The connection ``/next`` is polled on: the request written and the answer read here, by hand.

    Why not http.client, as everywhere else in this module: it parses an answer's headers through the email
    package, about 0.3 M instructions (a tenth of a millisecond) per event, and that is on the path from the
    event's arrival to the first token. The Runtime API's answer to ``/next`` is plain HTTP/1.1: a status
    line, ``Name: value`` header lines, a body of ``Content-Length`` bytes (chunked is read too). Tested
    against the local Runtime API and cargo-lambda's.
    """

    _MAX_LINE = 65536

    def __init__(self, host: str, port: int) -> None:
        self.host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = self.sock.makefile("rb")
        self.open = True  # False once the far side said Connection: close

    def request(self, path: str) -> None:
        """Send ``GET path``."""
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {self.host_header}\r\n\r\n".encode("latin-1"))

    def answer(self) -> tuple[int, dict[str, str], bytes]:
        """The answer's status, headers (names lower-cased) and body; it blocks until the answer comes."""
        reader = self._reader
        status_line = reader.readline(self._MAX_LINE)
        if not status_line:
            raise http.client.RemoteDisconnected("the Runtime API closed the /next connection")
        version, _, rest = status_line.partition(b" ")
        try:
            if not version.startswith(b"HTTP/1."):
                raise ValueError(version)
            status = int(rest[:3])
            headers: dict[str, str] = {}
            while (line := reader.readline(self._MAX_LINE)) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            if "content-length" in headers:
                length = int(headers["content-length"])
                body = reader.read(length)
                if len(body) != length:
                    raise http.client.IncompleteRead(body, length - len(body))
            elif "chunked" in headers.get("transfer-encoding", "").lower():
                body = self._chunked()
            else:
                raise ValueError("neither Content-Length nor chunked")
        except ValueError as e:
            raise http.client.HTTPException(f"an unreadable /next answer: {e}") from None
        if headers.get("connection", "").lower() == "close":
            self.open = False
        return status, headers, body

    def _chunked(self) -> bytes:
        parts = []
        while size := int(self._reader.readline(self._MAX_LINE).split(b";")[0], 16):
            parts.append(self._reader.read(size))
            self._reader.readline(self._MAX_LINE)
        while self._reader.readline(self._MAX_LINE) not in (b"\r\n", b"\n", b""):
            pass  # trailers: none that /next sends matter
        return b"".join(parts)

    def close(self) -> None:
        self._reader.close()
        self.sock.close()


class RuntimeAPIClient:
    """The calls of the Runtime API. ``next`` keeps one connection; each response gets its own."""

    def __init__(self, address: str) -> None:
        self.host, self.port, self.prefix = parse_address(address)
        self._next_conn: NextConnection | None = None
        self._said_relative_deadline = False

    def path(self, resource: str) -> str:
        return f"{self.prefix}/{API_VERSION}/runtime/{resource}"

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        conn.connect()
        assert conn.sock is not None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def next_invocation(self) -> Invocation:
        if self._next_conn is None or not self._next_conn.open:
            self._next_conn = NextConnection(self.host, self.port)  # /next blocks until there is work
        try:
            self._next_conn.request(self.path("invocation/next"))
            status, headers, body = self._next_conn.answer()
        except (OSError, http.client.HTTPException):
            self._next_conn.close()
            self._next_conn = None
            raise
        if status != 200:
            raise RuntimeError(f"/next answered {status}: {body[:200]!r}")
        request_id = headers.get("lambda-runtime-aws-request-id", "")
        deadline_header = headers.get("lambda-runtime-deadline-ms")
        deadline_ms, relative = deadline_from_header(deadline_header, int(time.time() * 1000))
        if relative and not self._said_relative_deadline:
            self._said_relative_deadline = True
            log(
                "WARN",
                f"Lambda-Runtime-Deadline-Ms {deadline_header!r} is no epoch time; "
                "taken as milliseconds from now (an emulator's timeout). Said once.",
            )
        context = LambdaContext(
            aws_request_id=request_id,
            deadline_ms=deadline_ms,
            invoked_function_arn=headers.get("lambda-runtime-invoked-function-arn", ""),
            identity=_json_header(headers.get("lambda-runtime-cognito-identity")),
            client_context=_json_header(headers.get("lambda-runtime-client-context")),
            tenant_id=headers.get("lambda-runtime-aws-tenant-id"),
        )
        return Invocation(request_id, json.loads(body), context, headers.get("lambda-runtime-trace-id"))

    def _post(self, path: str, payload: dict[str, Any], error_type: str) -> int:
        conn = self._connect(timeout=30)
        try:
            conn.request(
                "POST",
                path,
                body=json.dumps(payload).encode(),
                headers={
                    "Content-Type": "application/json",
                    "Lambda-Runtime-Function-Error-Type": error_type,
                },
            )
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()

    def post_error(self, request_id: str, exc: BaseException) -> int:
        payload = _error_payload(exc)
        return self._post(self.path(f"invocation/{request_id}/error"), payload, payload["errorType"])

    def post_init_error(self, exc: BaseException, error_type: str) -> int:
        return self._post(self.path("init/error"), _error_payload(exc, error_type), error_type)

    def restore_next(self) -> None:
        """``GET /restore/next``: init is done; it returns in an environment restored from the snapshot."""
        conn = self._connect(timeout=None)  # Lambda answers when it restores: hours or weeks later, or never
        try:
            conn.request("GET", self.path("restore/next"))
            answer = conn.getresponse()
            said = answer.read()
        finally:
            conn.close()  # a connection from before the snapshot is no use after a restore
        if answer.status != 200:
            raise RuntimeError(f"/restore/next answered {answer.status}: {said[:200]!r}")

    def post_restore_error(self, exc: BaseException) -> int:
        payload = _error_payload(exc, RESTORE_ERROR)
        return self._post(self.path("restore/error"), payload, RESTORE_ERROR)

    def response_stream(self, request_id: str, deadline_ms: int | None = None) -> StreamingResponse:
        return StreamingResponse(self, request_id, deadline_ms)


class StreamingResponse:
    """A :class:`ResponseStream` over one streamed ``/response`` POST.

    Nothing is buffered in userspace: ``start`` sends the request head, the prelude and the separator, each
    ``write`` is one HTTP chunk sent at once on a TCP_NODELAY socket (invariant 2 of docs/architecture.md).

    Each send has a timeout that ends :data:`WRITE_RESERVE_S` before the invocation's deadline: a caller that
    stopped reading fills the socket buffers, and a blocked ``sendall`` would otherwise hold the handler
    until Lambda stops the process with nothing logged. It raises :class:`WriteTimedOut` instead
    (invariant 9: the response ends within the deadline whatever the client does).
    """

    def __init__(self, client: RuntimeAPIClient, request_id: str, deadline_ms: int | None = None) -> None:
        self._client = client
        self._request_id = request_id
        self._deadline_ms = deadline_ms
        self._conn: http.client.HTTPConnection | None = None
        self._sock: socket.socket | None = None
        self._far_side: select.poll | None = None  # the response connection, watched for anything readable
        self._closed = False
        self._gone = False
        self._filler = _FILLER
        self._body_bytes = 0
        self.early_status: int | None = None  # an answer that came before the body ended (cargo-lambda: 200)

    @property
    def started(self) -> bool:
        return self._conn is not None

    def _send_timeout(self) -> float | None:
        if not self._deadline_ms:
            return None
        left = self._deadline_ms / 1000 - time.time() - WRITE_RESERVE_S
        return max(_MIN_WRITE_TIMEOUT_S, left)

    def start(self, status: int, headers: Mapping[str, str], cookies: Iterable[str] = ()) -> None:
        if self._conn is not None:
            raise RuntimeError("the response has already started")
        prelude = encode_prelude(status, headers, cookies)  # refuses bad values before anything is sent
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        if media_type(content_type) == "text/event-stream":
            self._filler = _SSE_FILLER
        conn = self._client._connect(timeout=self._send_timeout())
        conn.putrequest("POST", self._client.path(f"invocation/{self._request_id}/response"), skip_accept_encoding=True)
        conn.putheader("Lambda-Runtime-Function-Response-Mode", "streaming")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.putheader("Content-Type", CONTENT_TYPE)
        conn.putheader("Trailer", "Lambda-Runtime-Function-Error-Type, Lambda-Runtime-Function-Error-Body")
        conn.endheaders()
        self._conn, self._sock = conn, conn.sock
        # Non-blocking between writes: a write the socket has room for is one send, with no timeout to work
        # out and no poll before it (Python polls before every send on a socket with a timeout); only a
        # write that finds the buffer full waits, bounded by the deadline (_send_rest).
        conn.sock.settimeout(0.0)
        self._far_side = select.poll()
        self._far_side.register(conn.sock, select.POLLIN)
        # The prelude and the separator as two chunks: Lambda reads the bytes whatever their framing, but a
        # reader that takes the first chunk as the prelude and skips the next as the separator (cargo-lambda)
        # needs exactly this. One sendall still: both go out together.
        if prelude.endswith(SEPARATOR):
            self._send(_chunk(prelude[: -len(SEPARATOR)]) + _chunk(SEPARATOR))
        else:  # only a test's deliberately broken prelude
            self._send(_chunk(prelude))

    def write(self, data: bytes | str) -> None:
        if self._conn is None:
            raise RuntimeError("write before start")
        if self._closed:
            raise RuntimeError("write after close")
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        if payload:  # an empty chunk would end the body
            self._send(_chunk(payload))
            self._body_bytes += len(payload)

    def _send(self, framed: bytes) -> None:
        if self._gone:
            raise ClientDisconnected("the caller has gone away")
        assert self._sock is not None
        self._check_far_side()
        try:
            try:
                sent = self._sock.send(framed)
            except BlockingIOError:
                sent = 0
            if sent < len(framed):
                self._send_rest(memoryview(framed)[sent:])
        except TimeoutError as e:
            self._gone = True  # part of a chunk may have gone: the body cannot go on
            raise WriteTimedOut("a write could not finish before the invocation's deadline") from e
        except OSError as e:
            self._gone = True
            raise ClientDisconnected("the caller has gone away") from e

    def _send_rest(self, rest: memoryview) -> None:
        """What a full socket buffer left of a write, sent blocking until the write deadline."""
        assert self._sock is not None
        self._sock.settimeout(self._send_timeout())
        try:
            self._sock.sendall(rest)
        finally:
            self._sock.settimeout(0.0)

    def _check_far_side(self) -> None:
        """Anything readable on the response connection before the body ends: EOF, a reset, or an answer.

        Lambda says nothing until the body ends, so there EOF or a reset is the only thing that can come: the
        caller left. cargo-lambda answers ``200`` at once and keeps reading the body: an early 2xx is noted
        and the stream goes on (its connection closing later still means the caller left). An early error
        status means the body is refused: the stream ends, and what it said is logged.
        """
        assert self._sock is not None and self._conn is not None and self._far_side is not None
        if not self._far_side.poll(0):
            return
        try:
            if self.early_status is not None or not self._sock.recv(1, socket.MSG_PEEK):
                # After an early answer, anything more is the connection ending: there is no second answer.
                raise ConnectionResetError("the Runtime API closed the response connection")
            self._sock.settimeout(self._send_timeout())
            answer = self._conn.getresponse()
            said = answer.read()
            self._sock.settimeout(0.0)
        except (OSError, http.client.HTTPException) as e:
            self._gone = True
            raise ClientDisconnected("the caller has gone away") from e
        self.early_status = answer.status
        if not 200 <= answer.status < 300:
            self._gone = True
            log(
                "ERROR",
                f"the Runtime API answered {answer.status} before the response ended: {said[:500]!r}",
                request_id=self._request_id,
            )
            raise ResponseRefused(answer.status, said)

    def close(self) -> None:
        """End the body. A started response that wrote no body byte gets one harmless one first.

        Public reports (aws-lambda-nodejs-runtime-interface-client issue 95, with the same seen by
        aws-lambda-web-adapter and OpenNext users) show a Function URL holding a streamed response with a
        status and an empty body open for minutes. Rather than trust every handler path to write something,
        the one place every response ends makes sure: an SSE comment for an event stream (parsers skip it),
        a newline for anything else (whitespace after nothing: no body was there to change).
        """
        if self._conn is not None and not self._closed and not self._gone and self._body_bytes == 0:
            with contextlib.suppress(ClientDisconnected):  # nobody to hang; _finish has nothing to send either
                self.write(self._filler)
        self._finish(b"0\r\n\r\n")

    def fail(self, exc: BaseException) -> None:
        """End a started body with the error trailers instead of a clean end.

        Only for a handler that raised after the first byte: an unhandled failure, with no error event
        written, so the caller must learn the body is incomplete. AWS's custom-runtime guide says Lambda
        "treats this as a successful response and forwards the error metadata ... to the client"; what a
        Function URL client then sees is not documented, and cargo-lambda ends the client's response
        without its last chunk. A handled error (sagestream's SSE error event) therefore ends cleanly with
        ``close``: the trailers would not count in Lambda's ``Errors`` metric, and would only turn an orderly
        end into a cut-off transfer. The function's own log record and metrics count those failures.
        """
        payload = _error_payload(exc)
        body = base64.b64encode(json.dumps(payload).encode()).decode()
        self._finish(
            f"0\r\nLambda-Runtime-Function-Error-Type: {payload['errorType']}\r\n"
            f"Lambda-Runtime-Function-Error-Body: {body}\r\n\r\n".encode()
        )

    def _finish(self, ending: bytes) -> None:
        if self._closed:
            return
        self._closed = True
        conn, sock = self._conn, self._sock
        if conn is None or sock is None:
            return
        try:
            if not self._gone:
                sock.settimeout(self._send_timeout())
                sock.sendall(ending)
                if self.early_status is None:
                    conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass  # the caller left; there is nobody to tell
        finally:
            if self._gone:
                # The body cannot be ended (a write timed out part-way, or the far side left): abort the
                # connection, as the Runtime API allows. A plain close would leave the unsent bytes queued
                # behind a stalled reader, and Lambda would wait for the body until the function timeout,
                # killing the environment; a reset ends the invocation now and the loop goes back to /next.
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(payload), payload)


def load_handler(name: str) -> Handler:
    module_name, _, attr = name.rpartition(".")
    if not module_name:
        raise ValueError(f"_HANDLER {name!r} is not module.function")
    module = importlib.import_module(module_name)
    handler = getattr(module, attr)
    if not callable(handler):
        raise TypeError(f"{name} is not callable")
    return handler  # type: ignore[no-any-return]


def invoke(client: RuntimeAPIClient, handler: Handler, invocation: Invocation, *, concurrent: bool = False) -> None:
    """Run one invocation to its end. Whatever the handler does, nothing is left for the next one.

    ``concurrent``: other invocations run in this process at the same time, so the process-wide
    ``_X_AMZN_TRACE_ID`` is not set (it would name whichever invocation set it last); :func:`trace_id` is.
    """
    _trace_id.set(invocation.trace_id)
    if not concurrent:
        if invocation.trace_id:
            os.environ[_TRACE_ENV] = invocation.trace_id
        else:
            os.environ.pop(_TRACE_ENV, None)
    stream = client.response_stream(invocation.request_id, invocation.context.deadline_ms)
    try:
        handler(invocation.event, stream, invocation.context)
    except Exception as exc:
        log("ERROR", "the handler failed", request_id=invocation.request_id, exc=exc)
        if stream.started:
            stream.fail(exc)
        else:
            client.post_error(invocation.request_id, exc)
        return
    if not stream.started:
        stream.start(200, {})
    stream.close()


class InFlight:
    """How many invocations are running, so that a shutdown can wait for them to end."""

    def __init__(self) -> None:
        self._count = 0
        self._changed = threading.Condition()

    def __enter__(self) -> None:
        with self._changed:
            self._count += 1

    def __exit__(self, *exc: object) -> None:
        with self._changed:
            self._count -= 1
            self._changed.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._count == 0, timeout)


def run(client: RuntimeAPIClient, handler: Handler, in_flight: InFlight | None = None) -> None:
    """The loop: ``/next``, the handler, ``/response``, for ever. Each thread of a concurrent runtime runs one.

    Returns never; a failing ``/next`` (the Runtime API gone) raises out of it.
    """
    concurrent = in_flight is not None
    while True:
        invocation = client.next_invocation()
        with in_flight or contextlib.nullcontext():
            try:
                invoke(client, handler, invocation, concurrent=concurrent)
            except (OSError, http.client.HTTPException) as exc:
                # The Runtime API itself failed us mid-invocation; carry on with the next one.
                log("ERROR", f"the Runtime API failed the invocation: {exc!r}", request_id=invocation.request_id)


def max_concurrency(value: str | None) -> int:
    """``AWS_LAMBDA_MAX_CONCURRENCY``: how many invocations the environment runs at once (unset: one).

    >>> max_concurrency(None), max_concurrency("1"), max_concurrency("64")
    (1, 1, 64)
    """
    try:
        count = int(value or 1)
    except ValueError:
        raise ValueError(f"AWS_LAMBDA_MAX_CONCURRENCY {value!r} is not a whole number") from None
    if count < 1:
        raise ValueError(f"AWS_LAMBDA_MAX_CONCURRENCY {value!r} is below 1")
    return count


def run_concurrently(address: str, handler: Handler, count: int) -> int:
    """``count`` threads each running :func:`run` on its own Runtime API connection, until ``SIGTERM``.

    The main thread only waits: a signal handler that did work (took a lock) could deadlock against the
    code it interrupted, so the handler does nothing and the interpreter's wake-up pipe carries the signal
    here. A ``/next`` that fails means the Runtime API is gone: the process exits (non-zero) at once, as
    the sequential runtime does; ``SIGTERM`` waits for the invocations in flight to end, then exits 0.
    """
    in_flight = InFlight()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, _wake_only)
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            run(RuntimeAPIClient(address), handler, in_flight)
        except BaseException as exc:
            failures.append(exc)
            os.write(wake_write, b"!")

    for number in range(count):
        threading.Thread(target=serve, name=f"invocation-loop-{number}", daemon=True).start()
    os.read(wake_read, 1)  # a signal, or a loop that ended
    if failures:
        log("ERROR", "the Runtime API's /next failed; the runtime exits", exc=failures[0])
        return 1
    in_flight.wait_idle()  # Lambda's grace period bounds this; each invocation's deadline ends it first
    return 0


def _wake_only(signum: int, frame: Any) -> None:
    """Does nothing: the wake-up pipe carries the signal to the main thread."""


def snapshot_and_restore(client: RuntimeAPIClient) -> bool:
    """SnapStart's part of init: the before-snapshot hooks, the wait for a restore, the after-restore hooks.

    Returns whether the environment may serve; a hook that failed has been reported (and logged).
    """
    import snapshot_restore_py  # AWS's registry of hooks; only a SnapStart environment loads it here

    before: list[Any] = snapshot_restore_py.get_before_snapshot()  # (hook, args, kwargs), as registered
    after: list[Any] = [(random.seed, (), {}), *snapshot_restore_py.get_after_restore()]
    try:
        for hook, args, kwargs in reversed(before):
            hook(*args, **kwargs)
    except Exception as exc:
        log("ERROR", f"a before-snapshot hook failed: {SNAPSHOT_ERROR}", exc=exc)
        client.post_init_error(exc, SNAPSHOT_ERROR)
        return False
    client.restore_next()
    try:
        for hook, args, kwargs in after:
            hook(*args, **kwargs)
    except Exception as exc:
        log("ERROR", f"an after-restore hook failed: {RESTORE_ERROR}", exc=exc)
        client.post_restore_error(exc)
        return False
    return True


def main() -> int:
    address = os.environ["AWS_LAMBDA_RUNTIME_API"]
    client = RuntimeAPIClient(address)
    name = os.environ.get("_HANDLER") or DEFAULT_HANDLER
    try:
        count = max_concurrency(os.environ.get("AWS_LAMBDA_MAX_CONCURRENCY"))
        handler = load_handler(name)
    except Exception as exc:
        kind = "Runtime.ImportModuleError" if isinstance(exc, ImportError) else "Runtime.HandlerInitError"
        if isinstance(exc, AttributeError):
            kind = "Runtime.HandlerNotFound"
        log("ERROR", f"init failed: {kind}", exc=exc)
        client.post_init_error(exc, kind)
        return 1
    if os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "snap-start" and not snapshot_and_restore(client):
        return 1
    if count > 1:
        os.environ.pop(_TRACE_ENV, None)  # see invoke: no invocation's trace header is the process's
        return run_concurrently(address, handler, count)
    run(client, handler)
    return 0


if __name__ == "__main__":
    # Run the loop from the importable module, not from __main__: handlers import
    # `sagestream.runtime` and must catch the very ClientDisconnected class the stream raises.
    from sagestream import runtime

    sys.exit(runtime.main())
