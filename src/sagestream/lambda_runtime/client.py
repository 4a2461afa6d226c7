"""The Runtime API's calls: ``/next`` (read by hand), the error posts, SnapStart's ``/restore/next``."""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any
from urllib.parse import urlsplit

from sagestream.lambda_runtime.interface import Invocation, LambdaContext, error_payload
from sagestream.lambda_runtime.logs import log
from sagestream.lambda_runtime.stream import StreamingResponse

API_VERSION = "2018-06-01"
# The error types of a failed SnapStart hook, as Lambda's managed runtimes report them.
SNAPSHOT_ERROR = "Runtime.BeforeSnapshotError"
RESTORE_ERROR = "Runtime.AfterRestoreError"
# A Lambda-Runtime-Deadline-Ms below this (2001-09-09 in epoch ms) cannot be an epoch time: it is a duration
# from now, as cargo-lambda sends (its timeout, 600000). Real Lambda always sends an epoch time.
_EPOCH_MS_FLOOR = 1_000_000_000_000


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
        payload = error_payload(exc)
        return self._post(self.path(f"invocation/{request_id}/error"), payload, payload["errorType"])

    def post_init_error(self, exc: BaseException, error_type: str) -> int:
        return self._post(self.path("init/error"), error_payload(exc, error_type), error_type)

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
        payload = error_payload(exc, RESTORE_ERROR)
        return self._post(self.path("restore/error"), payload, RESTORE_ERROR)

    def response_stream(self, request_id: str, deadline_ms: int | None = None) -> StreamingResponse:
        path = self.path(f"invocation/{request_id}/response")
        return StreamingResponse(self._connect, path, request_id, deadline_ms)
