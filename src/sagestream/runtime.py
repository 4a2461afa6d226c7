"""A Lambda Runtime API client that streams responses, standard library only.

Python's managed Lambda runtime returns a handler's value in one piece; a Function URL in
``RESPONSE_STREAM`` mode needs the response body sent while the handler runs. No maintained Python
library implements the streaming half of the Runtime API (awslambdaric buffers the whole response), so
this module speaks it directly, as the published Runtime API describes it:

- ``GET  /2018-06-01/runtime/invocation/next`` blocks until an event arrives (no read timeout);
- ``POST /2018-06-01/runtime/invocation/{id}/response`` with ``Lambda-Runtime-Function-Response-Mode:
  streaming`` and a chunked body: the JSON prelude, 8 NUL bytes, then the body, one HTTP chunk per write;
  an error after the first byte ends the body with the ``Lambda-Runtime-Function-Error-Type`` and
  ``Lambda-Runtime-Function-Error-Body`` trailers;
- ``POST /2018-06-01/runtime/invocation/{id}/error`` for a failure before anything was written;
- ``POST /2018-06-01/runtime/init/error`` when the handler cannot be loaded, and the process exits.

It knows nothing of SageMaker: the handler is ``handler(event, stream, context)``.

Environment variables read: ``AWS_LAMBDA_RUNTIME_API`` (host:port), ``_HANDLER`` (``module.function``,
default ``sagestream.app.handler``), and for the context ``AWS_LAMBDA_FUNCTION_NAME``,
``AWS_LAMBDA_FUNCTION_VERSION``, ``AWS_LAMBDA_FUNCTION_MEMORY_SIZE``, ``AWS_LAMBDA_LOG_GROUP_NAME``,
``AWS_LAMBDA_LOG_STREAM_NAME``. It sets ``_X_AMZN_TRACE_ID`` for each invocation.

Example::

    $ AWS_LAMBDA_RUNTIME_API=127.0.0.1:9001 _HANDLER=tests.handlers.echo python -m sagestream.runtime
"""

from __future__ import annotations

import base64
import http.client
import importlib
import json
import os
import select
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sagestream.function_url import CONTENT_TYPE, encode_prelude

API_VERSION = "2018-06-01"
DEFAULT_HANDLER = "sagestream.app.handler"


class ClientDisconnected(ConnectionError):
    """The caller is gone: nothing more written will reach it."""


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


class RuntimeAPIClient:
    """The calls of the Runtime API. ``next`` keeps one connection; each response gets its own."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.host, self.port = host or "127.0.0.1", int(port)
        self._next_conn: http.client.HTTPConnection | None = None

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        conn.connect()
        assert conn.sock is not None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def next_invocation(self) -> Invocation:
        if self._next_conn is None:
            self._next_conn = self._connect(timeout=None)  # /next blocks until there is work
        try:
            self._next_conn.request("GET", f"/{API_VERSION}/runtime/invocation/next")
            resp = self._next_conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException):
            self._next_conn.close()
            self._next_conn = None
            raise
        if resp.status != 200:
            raise RuntimeError(f"/next answered {resp.status}: {body[:200]!r}")
        request_id = resp.getheader("Lambda-Runtime-Aws-Request-Id", "")
        context = LambdaContext(
            aws_request_id=request_id,
            deadline_ms=int(resp.getheader("Lambda-Runtime-Deadline-Ms", "0") or 0),
            invoked_function_arn=resp.getheader("Lambda-Runtime-Invoked-Function-Arn", ""),
            identity=_json_header(resp.getheader("Lambda-Runtime-Cognito-Identity")),
            client_context=_json_header(resp.getheader("Lambda-Runtime-Client-Context")),
            tenant_id=resp.getheader("Lambda-Runtime-Aws-Tenant-Id"),
        )
        return Invocation(request_id, json.loads(body), context, resp.getheader("Lambda-Runtime-Trace-Id"))

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
        return self._post(f"/{API_VERSION}/runtime/invocation/{request_id}/error", payload, payload["errorType"])

    def post_init_error(self, exc: BaseException, error_type: str) -> int:
        return self._post(f"/{API_VERSION}/runtime/init/error", _error_payload(exc, error_type), error_type)

    def response_stream(self, request_id: str) -> StreamingResponse:
        return StreamingResponse(self, request_id)


class StreamingResponse:
    """A :class:`ResponseStream` over one streamed ``/response`` POST.

    Nothing is buffered in userspace: ``start`` sends the request head and prelude, each ``write`` is one
    HTTP chunk in one ``sendall`` on a TCP_NODELAY socket (invariant 2).
    """

    def __init__(self, client: RuntimeAPIClient, request_id: str) -> None:
        self._client = client
        self._request_id = request_id
        self._conn: http.client.HTTPConnection | None = None
        self._sock: socket.socket | None = None
        self._closed = False
        self._gone = False

    @property
    def started(self) -> bool:
        return self._conn is not None

    @property
    def closed(self) -> bool:
        return self._closed

    def start(self, status: int, headers: Mapping[str, str], cookies: Iterable[str] = ()) -> None:
        if self._conn is not None:
            raise RuntimeError("the response has already started")
        prelude = encode_prelude(status, headers, cookies)  # refuses bad values before anything is sent
        conn = self._client._connect(timeout=None)
        conn.putrequest(
            "POST",
            f"/{API_VERSION}/runtime/invocation/{self._request_id}/response",
            skip_accept_encoding=True,
        )
        conn.putheader("Lambda-Runtime-Function-Response-Mode", "streaming")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.putheader("Content-Type", CONTENT_TYPE)
        conn.putheader("Trailer", "Lambda-Runtime-Function-Error-Type, Lambda-Runtime-Function-Error-Body")
        conn.endheaders()
        self._conn, self._sock = conn, conn.sock
        self._send_chunk(prelude)

    def write(self, data: bytes | str) -> None:
        if self._conn is None:
            raise RuntimeError("write before start")
        if self._closed:
            raise RuntimeError("write after close")
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        if payload:  # an empty chunk would end the body
            self._send_chunk(payload)

    def _send_chunk(self, payload: bytes) -> None:
        if self._gone:
            raise ClientDisconnected("the caller has gone away")
        assert self._sock is not None
        # The Runtime API says nothing until the body ends; anything readable now is the far side closing.
        readable, _, _ = select.select([self._sock], [], [], 0)
        try:
            if readable:
                raise ConnectionResetError("the Runtime API closed the response connection")
            self._sock.sendall(b"%x\r\n%b\r\n" % (len(payload), payload))
        except OSError as e:
            self._gone = True
            raise ClientDisconnected("the caller has gone away") from e

    def close(self) -> None:
        self._finish(b"0\r\n\r\n")

    def fail(self, exc: BaseException) -> None:
        """End a started body with the error trailers instead of a clean end."""
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
                sock.sendall(ending)
                conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass  # the caller left; there is nobody to tell
        finally:
            conn.close()


def load_handler(name: str) -> Handler:
    module_name, _, attr = name.rpartition(".")
    if not module_name:
        raise ValueError(f"_HANDLER {name!r} is not module.function")
    module = importlib.import_module(module_name)
    handler = getattr(module, attr)
    if not callable(handler):
        raise TypeError(f"{name} is not callable")
    return handler  # type: ignore[no-any-return]


def invoke(client: RuntimeAPIClient, handler: Handler, invocation: Invocation) -> None:
    """Run one invocation to its end. Whatever the handler does, nothing is left for the next one."""
    if invocation.trace_id:
        os.environ["_X_AMZN_TRACE_ID"] = invocation.trace_id
    else:
        os.environ.pop("_X_AMZN_TRACE_ID", None)
    stream = client.response_stream(invocation.request_id)
    try:
        handler(invocation.event, stream, invocation.context)
    except Exception as exc:
        traceback.print_exception(exc, file=sys.stderr)
        if stream.started:
            stream.fail(exc)
        else:
            client.post_error(invocation.request_id, exc)
        return
    if not stream.started:
        stream.start(200, {})
    stream.close()


def run(client: RuntimeAPIClient, handler: Handler) -> None:
    while True:
        invocation = client.next_invocation()
        try:
            invoke(client, handler, invocation)
        except (OSError, http.client.HTTPException) as exc:
            # The Runtime API itself failed us mid-invocation; carry on with the next one.
            print(f"sagestream.runtime: invocation {invocation.request_id}: {exc!r}", file=sys.stderr)


def main() -> int:
    client = RuntimeAPIClient(os.environ["AWS_LAMBDA_RUNTIME_API"])
    name = os.environ.get("_HANDLER") or DEFAULT_HANDLER
    try:
        handler = load_handler(name)
    except Exception as exc:
        kind = "Runtime.ImportModuleError" if isinstance(exc, ImportError) else "Runtime.HandlerInitError"
        if isinstance(exc, AttributeError):
            kind = "Runtime.HandlerNotFound"
        traceback.print_exception(exc, file=sys.stderr)
        client.post_init_error(exc, kind)
        return 1
    run(client, handler)
    return 0


if __name__ == "__main__":
    # Run the loop from the importable module, not from __main__: handlers import
    # `sagestream.runtime` and must catch the very ClientDisconnected class the stream raises.
    from sagestream import runtime

    sys.exit(runtime.main())
