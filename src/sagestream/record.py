"""What one invocation did: data only, filled in by the handler, read by :mod:`sagestream.telemetry`.

A :class:`StreamRecord` is made per invocation and dropped with it (invariant 7 of the README's
"Architecture" section). It changes in two ways only: :meth:`StreamRecord.wrote` after each delta the
relay produced, and :meth:`StreamRecord.fail` when the invocation ends in an error. :class:`Cadence` keeps
the gaps between delta writes in memory that does not grow with the stream (invariant 3).

Output tokens are the container's own count (its usage) when it sent one, else the number of deltas
that carried text: a container that reports no usage streams one token per delta.

Environment variables read: none.

Example::

    >>> from sagestream.dialects import Delta, Usage
    >>> record = StreamRecord(started=0.0)
    >>> record.wrote(Delta("Hel"), b"data: ...", now=0.1)
    >>> record.wrote(Delta("lo", finish_reason="stop"), b"data: ...", now=0.15)
    >>> record.output_tokens, record.finish_reason, record.first_delta, round(record.cadence.max_ms, 3)
    (2, 'stop', 0.1, 50.0)
    >>> record.wrote(Delta(usage=Usage(5, 3, 8)), b"", now=0.2)
    >>> record.output_tokens
    3
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from sagestream.dialects import Delta
from sagestream.errors import DEADLINE_EXCEEDED, APIError

__all__ = ["Cadence", "StreamRecord"]


class Cadence:
    """The gaps between consecutive delta writes, summarised in memory that does not grow with the stream.

    A stream may carry a million deltas: the maximum is exact, the median comes from log-spaced buckets
    1 % wide, so it is within 1 % of the true one.

    >>> c = Cadence()
    >>> for t in (0.0, 0.010, 0.020, 0.050):
    ...     c.add(t)
    >>> round(c.max_ms, 3), abs(c.median_ms - 10) < 0.1
    (30.0, True)
    """

    _STEP = math.log(1.01)
    _FLOOR_MS = 0.001  # gaps below a microsecond share one bucket

    __slots__ = ("_buckets", "_last", "count", "max_ms")

    def __init__(self) -> None:
        self.count = 0
        self.max_ms: float | None = None
        self._last: float | None = None
        self._buckets: dict[int, int] = {}

    def add(self, now: float) -> None:
        last, self._last = self._last, now
        if last is None:
            return
        gap = (now - last) * 1000
        self.max_ms = gap if self.max_ms is None or gap > self.max_ms else self.max_ms
        key = -1 if gap <= self._FLOOR_MS else int(math.log(gap / self._FLOOR_MS) / self._STEP)
        self._buckets[key] = self._buckets.get(key, 0) + 1
        self.count += 1

    @property
    def median_ms(self) -> float | None:
        if not self.count or self.max_ms is None:
            return None
        seen, middle = 0, (self.count + 1) // 2
        for key in sorted(self._buckets):
            seen += self._buckets[key]
            if seen >= middle:
                value = 0.0 if key < 0 else self._FLOOR_MS * math.exp((key + 0.5) * self._STEP)
                return min(value, self.max_ms)
        return self.max_ms  # pragma: no cover - the counts always reach the middle


@dataclass
class StreamRecord:
    """What one invocation did, for its log record and metrics; made per request, never kept.

    Times are :func:`time.monotonic` values. ``streamed`` says the client asked for a streamed answer
    (the request's ``stream: true``), not that a response was started.
    """

    method: str = ""
    path: str = ""
    kind: str | None = None  # "chat" or "completion" on the completion routes, else None
    caller: str | None = None  # the signing IAM principal, with AUTH_MODE=iam
    started: float = field(default_factory=time.monotonic)
    status: int = 200
    streamed: bool = False
    upstream_started: float | None = None
    upstream_first_byte: float | None = None
    first_delta: float | None = None
    cadence: Cadence = field(default_factory=Cadence)  # bounded: a stream's length must not grow memory
    text_deltas: int = 0
    usage_tokens: int | None = None
    finish_reason: str | None = None
    error_type: str | None = None
    error_code: str | None = None
    client_disconnected: bool = False
    deadline_stop: bool = False
    prompt: Any = None  # the request's messages or prompt, kept only when LOG_PAYLOADS=true
    completion: list[str] | None = None  # the answer's text, kept only when LOG_PAYLOADS=true

    @property
    def output_tokens(self) -> int:
        """The container's count when it reported usage, else the deltas that carried text."""
        return self.usage_tokens if self.usage_tokens is not None else self.text_deltas

    def wrote(self, delta: Delta, data: bytes, now: float | None = None) -> None:
        """``delta`` was produced and its bytes ``data`` written (``b""``: nothing to write for it)."""
        if data:
            now = time.monotonic() if now is None else now
            if self.first_delta is None:
                self.first_delta = now
            self.cadence.add(now)
        if delta.finish_reason:
            self.finish_reason = delta.finish_reason
        if delta.usage is not None:
            self.usage_tokens = delta.usage.completion_tokens
        if delta.content:
            self.text_deltas += 1
            if self.completion is not None:
                self.completion.append(delta.content)

    def fail(self, err: APIError) -> None:
        """The invocation ended with ``err`` (as a status before the first byte, or as an SSE error event)."""
        self.status, self.error_type, self.error_code = err.status, err.type, err.code
        if err.code == DEADLINE_EXCEEDED:
            self.deadline_stop = True
