"""What a handler sees: ``handler(event, stream, context)``, the stream's interface and its exceptions.

Example::

    >>> context = LambdaContext(aws_request_id="r-1", deadline_ms=0)
    >>> context.get_remaining_time_in_millis(), issubclass(WriteTimedOut, ClientDisconnected)
    (0, True)
    >>> error_payload(ValueError("no"))["errorType"]
    'ValueError'
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


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


def error_payload(exc: BaseException, error_type: str | None = None) -> dict[str, Any]:
    """The body Lambda takes for a failed invocation, init or restore (and the trailers' error body)."""
    return {
        "errorMessage": str(exc),
        "errorType": error_type or type(exc).__name__,
        "stackTrace": traceback.format_exception(exc)[-10:],
    }
