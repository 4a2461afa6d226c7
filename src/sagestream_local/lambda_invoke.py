"""Lambda's asynchronous ``Invoke`` on a laptop: the REST call botocore makes for ``lambda.invoke(...,
InvocationType="Event")`` (``POST /2015-03-31/functions/{name}/invocations`` with ``X-Amz-Invocation-Type:
Event``), answered 202 at once as Lambda answers it, with the event then run through the local stack's own
runtime processes (:class:`~sagestream_local.runtime_api.Pool`), as Lambda's queue hands an event to a free
execution environment. The function reaches it through botocore's own ``AWS_ENDPOINT_URL_LAMBDA`` override; it is
what lets ``make run`` with a store run background responses.

Hand-written (the standard library's HTTP server) rather than moto's Lambda: moto runs a function in Docker,
and this stand-in must run it in the stack's own runtime processes. Only ``Event`` invocations are served (the
function makes no other); a ``RequestResponse`` one is refused as Lambda refuses a bad parameter.

Example::

    >>> with LambdaInvoke() as invoke:                 # doctest: +SKIP
    ...     invoke.pool = stack_pool                    # the runtime processes that run each event
    ...     env = {"AWS_ENDPOINT_URL_LAMBDA": invoke.url}
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from sagestream.function_url import Prelude
from sagestream_local.runtime_api import FunctionError, NoDelayHandler, Pool

__all__ = ["LambdaInvoke"]

logger = logging.getLogger(__name__)

_PATH = "/2015-03-31/functions/"


class _Discard:
    """Where an asynchronous invocation's response goes: nowhere (Lambda keeps none), its failure logged."""

    def __init__(self, name: str) -> None:
        self.name = name

    def prelude(self, prelude: Prelude) -> None:
        pass

    def chunk(self, data: bytes) -> None:
        pass

    def end(self, error: FunctionError | None) -> None:
        if error is not None:
            logger.warning(
                "the asynchronous invocation of %s failed: %s %s", self.name, error.error_type, error.payload
            )


class _Handler(NoDelayHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _error(self, status: int, kind: str, message: str) -> None:
        body = json.dumps({"Type": "User", "message": message}).encode()
        self._answer(status, body, {"content-type": "application/json", "x-amzn-errortype": kind})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        path = self.path.split("?", 1)[0]
        name = path.removeprefix(_PATH).removesuffix("/invocations")
        pool = self.server.pool
        if not path.startswith(_PATH) or not path.endswith("/invocations") or pool is None:
            self._error(404, "ResourceNotFoundException", f"Function not found: {path}")
            return
        if name.split(":")[-1] != pool.function_name and not name.endswith(":function:" + pool.function_name):
            self._error(404, "ResourceNotFoundException", f"Function not found: {name}")
            return
        if self.headers.get("x-amz-invocation-type", "RequestResponse") != "Event":
            self._error(400, "InvalidParameterValueException", "this stand-in serves InvocationType=Event only")
            return
        try:
            event = json.loads(body or b"{}")
        except ValueError:
            self._error(400, "InvalidRequestContentException", "Could not parse request body into json")
            return
        self._answer(202, b"", {"x-amzn-requestid": "local"})
        self.server.queued += 1
        # As Lambda's queue does: the event waits for a free execution environment, however long that takes.
        threading.Thread(target=pool.submit, args=(event, _Discard(name)), daemon=True).start()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    pool: Pool | None = None
    queued = 0


class LambdaInvoke:
    """The stand-in on 127.0.0.1 (a free port); set :attr:`pool` before the first invocation."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="lambda-invoke", daemon=True)

    @property
    def pool(self) -> Pool | None:
        return self._server.pool

    @pool.setter
    def pool(self, pool: Pool | None) -> None:
        self._server.pool = pool

    @property
    def queued(self) -> int:
        """How many events it accepted."""
        return self._server.queued

    def start(self) -> LambdaInvoke:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LambdaInvoke:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
