"""The streamed ``/response``: the request head, the prelude and its separator, one chunk per write, trailers.

Each write is one HTTP chunk, sent at once:

    >>> _chunk(b"hi")
    b'2\\r\\nhi\\r\\n'
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import select
import socket
import struct
import time
from collections.abc import Callable, Iterable, Mapping

from sagestream.function_url import CONTENT_TYPE, SEPARATOR, encode_prelude, media_type
from sagestream.lambda_runtime.interface import ClientDisconnected, ResponseRefused, WriteTimedOut, error_payload
from sagestream.lambda_runtime.logs import log

# A write may block on a stalled reader; it gives up this long before the deadline, so the handler still has
# time to end the response and log its record before Lambda stops the process.
WRITE_RESERVE_S = 0.5
_MIN_WRITE_TIMEOUT_S = 0.05
# What a started response with no body bytes gets at close (see StreamingResponse.close): an SSE comment for
# an event stream (every SSE parser skips it), a newline for anything else.
_SSE_FILLER = b":\n\n"
_FILLER = b"\n"


class StreamingResponse:
    """A :class:`ResponseStream` over one streamed ``/response`` POST.

    Nothing is buffered in userspace: ``start`` sends the request head, the prelude and the separator, each
    ``write`` is one HTTP chunk sent at once on a TCP_NODELAY socket (invariant 2 of docs/architecture.md).

    Each send has a timeout that ends :data:`WRITE_RESERVE_S` before the invocation's deadline: a caller that
    stopped reading fills the socket buffers, and a blocked ``sendall`` would otherwise hold the handler
    until Lambda stops the process with nothing logged. It raises :class:`WriteTimedOut` instead
    (invariant 9: the response ends within the deadline whatever the client does).
    """

    def __init__(
        self,
        connect: Callable[[float | None], http.client.HTTPConnection],
        path: str,
        request_id: str,
        deadline_ms: int | None = None,
    ) -> None:
        self._connect = connect  # a new TCP_NODELAY connection to the Runtime API, with this send timeout
        self._path = path
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
        conn = self._connect(self._send_timeout())
        conn.putrequest("POST", self._path, skip_accept_encoding=True)
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
        payload = error_payload(exc)
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
