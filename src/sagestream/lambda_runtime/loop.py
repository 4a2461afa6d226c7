"""The invocation loop: ``/next``, the handler, ``/response``; one loop, or many threads of it at once."""

from __future__ import annotations

import contextlib
import gc
import http.client
import importlib
import os
import signal
import threading
from typing import Any

from sagestream.lambda_runtime.client import RuntimeAPIClient
from sagestream.lambda_runtime.interface import Handler, Invocation
from sagestream.lambda_runtime.logs import _TRACE_ENV, _trace_id, log
from sagestream.lambda_runtime.snapstart import snapshot_and_restore

DEFAULT_HANDLER = "sagestream.app.handler"


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
    # What init made lives as long as the process: moved out of the collector's sight (gc.freeze), so that no
    # collection during an invocation walks it, and collection on again (__main__ turned it off for the imports).
    gc.freeze()
    gc.enable()
    if os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "snap-start" and not snapshot_and_restore(client):
        return 1
    if count > 1:
        os.environ.pop(_TRACE_ENV, None)  # see invoke: no invocation's trace header is the process's
        return run_concurrently(address, handler, count)
    run(client, handler)
    return 0
