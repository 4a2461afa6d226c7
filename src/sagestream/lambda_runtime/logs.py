"""The runtime's own log lines and each invocation's trace header.

Lambda Managed Instances take JSON log lines only, and concurrent invocations interleave, so the runtime's
messages are one JSON object a line on stderr; the trace header is a context variable per loop thread.

Example::

    >>> trace_id() is None  # outside an invocation
    True
"""

from __future__ import annotations

import json
import sys
import threading
import traceback
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

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
        "logger": "sagestream.lambda_runtime",
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
