"""SageMaker Runtime's front over a real model container: what the service does between boto3 and ``/invocations``.

The simulated endpoint *is* a container; this module is only the service in front of one (vLLM, say, serving
its own SageMaker routes ``/ping`` and ``/invocations`` on loopback), so that the relay runs against a real
engine through the real botocore path. It answers

- ``POST /endpoints/{name}/invocations-response-stream`` (InvokeEndpointWithResponseStream): the body is
  forwarded to the container's ``/invocations``; each piece the container flushes is framed as one
  ``PayloadPart`` the moment it arrives (no buffering: the relay's first token is the engine's), with the
  container's content type in ``X-Amzn-SageMaker-Content-Type``; a container that breaks off mid-stream
  ends the stream with a ``ModelStreamError`` frame, as the service does;
- ``POST /endpoints/{name}/invocations`` (InvokeEndpoint): the container's whole answer and content type;
- either: a container 4xx/5xx becomes SageMaker's 424 ``ModelError`` with ``OriginalStatusCode`` and
  ``OriginalMessage`` (:func:`~sagestream_local.endpoint.faults.model_error`), a container that cannot be
  reached a 500 ``InternalFailure``, a request without a SigV4 header a 403, all as the simulator says them.

The event-stream encoder and the error shapes are the simulator's (one home each). HTTP to the container is
``http.client``: a streamed response read with ``read1`` hands over each chunk as it lands, which a client
library that buffers or decodes lines would not.

Example::

    >>> front = ContainerFront("http://127.0.0.1:9")
    >>> front.url.startswith("http://127.0.0.1:")
    True
    >>> front.stop()
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import uuid
from typing import Any
from urllib.parse import urlsplit

from sagestream_local.endpoint.eventstream import EVENTSTREAM_CONTENT_TYPE, exception_frame, payload_part_frame
from sagestream_local.endpoint.faults import ServiceError, auth_error, model_error
from sagestream_local.runtime_api import NoDelayHandler, QuietServer

VARIANT = "AllTraffic"
# What the service waits for a container's next byte before it gives up (SageMaker's own is minutes).
READ_TIMEOUT_S = 300.0
_PATH = re.compile(r"/endpoints/([^/]+)/(invocations|invocations-response-stream)")


class _Server(QuietServer):
    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 256  # as the simulator's: K invocation loops open K connections at once

    def __init__(self, front: ContainerFront) -> None:
        self.front = front
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(NoDelayHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._unknown()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        match = _PATH.fullmatch(self.path.split("?", 1)[0])
        if not match:
            self._unknown()
            return
        error = auth_error(self.headers)
        if error is not None:
            self._error(error)
            return
        streaming = match[2] == "invocations-response-stream"
        # botocore sends the streaming operation's ContentType as Content-Type, its Accept as X-Amzn-SageMaker-Accept
        headers = {"Content-Type": self.headers.get("Content-Type") or "application/json"}
        try:
            container = self.server.front.connect()
            container.request("POST", "/invocations", body=body, headers=headers)
            response = container.getresponse()
        except OSError as exc:
            self._error(ServiceError(500, "InternalFailure", {"message": f"the container cannot be reached: {exc}"}))
            return
        try:
            if response.status >= 400:
                message = response.read().decode("utf-8", "replace")
                self._error(model_error(response.status, message, match[1], VARIANT))
            elif streaming:
                self._stream(response)
            else:
                self._whole(response)
        finally:
            container.close()

    def _whole(self, response: http.client.HTTPResponse) -> None:
        body = response.read()
        self._answer(200, body, self._common(response, "Content-Type"))

    def _stream(self, response: http.client.HTTPResponse) -> None:
        head = ["HTTP/1.1 200 OK", "Transfer-Encoding: chunked", f"Content-Type: {EVENTSTREAM_CONTENT_TYPE}"]
        head += [f"{k}: {v}" for k, v in self._common(response, "X-Amzn-SageMaker-Content-Type").items()]
        self.connection.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        while True:
            try:
                data = response.read1(65536)
            except (OSError, http.client.HTTPException) as exc:
                frame = exception_frame("ModelStreamError", {"Message": f"the container's stream broke: {exc!r}"})
                self._chunk(frame)
                break
            if not data:
                break
            self._chunk(payload_part_frame(data))
        self.connection.sendall(b"0\r\n\r\n")

    def _chunk(self, frame: bytes) -> None:
        self.connection.sendall(b"%x\r\n%s\r\n" % (len(frame), frame))

    def _common(self, response: http.client.HTTPResponse, type_header: str) -> dict[str, str]:
        return {
            "x-amzn-RequestId": str(uuid.uuid4()),
            "X-Amzn-Invoked-Production-Variant": VARIANT,
            type_header: response.getheader("Content-Type") or "application/json",
        }

    def _error(self, error: ServiceError) -> None:
        headers = {"x-amzn-RequestId": str(uuid.uuid4()), **error.headers()}
        self._answer(error.status, json.dumps(error.body).encode(), headers)

    def _unknown(self) -> None:
        self._error(ServiceError(404, "UnknownOperationException", {"message": None}))


class ContainerFront:
    """SageMaker Runtime on 127.0.0.1 (an ephemeral port) in front of the container at ``container_url``."""

    def __init__(self, container_url: str, *, read_timeout_s: float = READ_TIMEOUT_S) -> None:
        parts = urlsplit(container_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"a container URL is http://host:port, not {container_url!r}")
        self.container = (parts.hostname, parts.port or 80)
        self.read_timeout_s = read_timeout_s
        self._server = _Server(self)
        self._thread: threading.Thread | None = None

    def connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(*self.container, timeout=self.read_timeout_s)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ContainerFront:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="container-front", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> ContainerFront:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
