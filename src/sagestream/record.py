"""What one invocation did: data only, filled in by the handler, read by :mod:`sagestream.telemetry`.

A :class:`StreamRecord` is made per invocation and dropped with it (invariant 7 of
docs/architecture.md). Data only: it does no I/O and knows no service. The walk sets its fields as it learns
them (the model, the ids, the target, the quota, the breaker's state); it computes in two methods only,
:meth:`StreamRecord.wrote` after each delta the relay produced, and :meth:`StreamRecord.fail` when the
invocation ends in an error. :class:`Cadence` keeps
the gaps between delta writes, and ``relay`` each delta's time from the upstream read that completed it
to its write, both as a :class:`Histogram`: memory that does not grow with the stream (invariant 3).

Output tokens are the container's own count (its usage) when it sent one, else the number of deltas
that carried text: a container that reports no usage streams one token per delta.

Environment variables read: none.

Example::

    >>> from sagestream.delta import Delta, Usage
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
from typing import Any

import msgspec

from sagestream.delta import Delta
from sagestream.errors import DEADLINE_EXCEEDED, APIError

__all__ = ["Cadence", "GuardrailNote", "Histogram", "StreamRecord"]


class Histogram:
    """Durations in milliseconds, counted in log-spaced buckets 1 % wide, so that a stream of a million
    deltas keeps a summary of a few hundred counts: quantiles within 1 %, the maximum and minimum exact.

    The buckets span a microsecond to a day in fewer than 2,900 keys (and far fewer in practice: values a
    stream produces are within a few orders of magnitude of each other), whatever the number of values.

    >>> h = Histogram()
    >>> for ms in (0.1, 0.2, 0.2, 0.3, 5.0):
    ...     h.add(ms)
    >>> round(h.quantile(0.5), 2), h.quantile(0.99), h.count
    (0.2, 5.0, 5)
    """

    _STEP = math.log(1.01)
    _FLOOR_MS = 0.001  # values below a microsecond share one bucket

    __slots__ = ("_buckets", "count", "max_ms", "min_ms")

    def __init__(self) -> None:
        self.count = 0
        self.max_ms: float | None = None
        self.min_ms: float | None = None
        self._buckets: dict[int, int] = {}

    def add(self, ms: float) -> None:
        if self.max_ms is None or ms > self.max_ms:
            self.max_ms = ms
        if self.min_ms is None or ms < self.min_ms:
            self.min_ms = ms
        key = -1 if ms <= self._FLOOR_MS else int(math.log(ms / self._FLOOR_MS) / self._STEP)
        self._buckets[key] = self._buckets.get(key, 0) + 1
        self.count += 1

    def quantile(self, q: float) -> float | None:
        """The smallest value with at least a share ``q`` of the values at or below it, within 1 %."""
        if not self.count or self.max_ms is None or self.min_ms is None:
            return None
        rank = max(1, math.ceil(q * self.count))
        if rank >= self.count:
            return self.max_ms
        seen = 0
        for key in sorted(self._buckets):
            seen += self._buckets[key]
            if seen >= rank:
                value = 0.0 if key < 0 else self._FLOOR_MS * math.exp((key + 0.5) * self._STEP)
                return min(max(value, self.min_ms), self.max_ms)
        return self.max_ms  # pragma: no cover - the counts always reach the rank


class Cadence:
    """The gaps between consecutive delta writes, as a :class:`Histogram` (memory that does not grow with
    the stream): the maximum exact, the median within 1 %.

    >>> c = Cadence()
    >>> for t in (0.0, 0.010, 0.020, 0.050):
    ...     c.add(t)
    >>> round(c.max_ms, 3), abs(c.median_ms - 10) < 0.1
    (30.0, True)
    """

    __slots__ = ("_last", "gaps")

    def __init__(self) -> None:
        self._last: float | None = None
        self.gaps = Histogram()

    def add(self, now: float) -> None:
        last, self._last = self._last, now
        if last is not None:
            self.gaps.add((now - last) * 1000)

    @property
    def count(self) -> int:
        return self.gaps.count

    @property
    def max_ms(self) -> float | None:
        return self.gaps.max_ms

    @property
    def median_ms(self) -> float | None:
        return self.gaps.quantile(0.5)


class GuardrailNote(msgspec.Struct, forbid_unknown_fields=True):
    """What the guardrail did on one request (:mod:`sagestream.guardrails`): its assessments and the text units
    they were billed, where it intervened (``prompt`` or ``output``) and why, and the calls that failed."""

    assessments: int = 0
    text_units: int = 0
    intervened: str | None = None
    reasons: list[str] = msgspec.field(default_factory=list)
    errors: int = 0
    prompt_ms: float | None = None  # the prompt's assessment, before the endpoint was called


class StreamRecord(msgspec.Struct, forbid_unknown_fields=True):
    """What one invocation did, for its log record and metrics; made per request, never kept.

    Times are :func:`time.monotonic` values. ``streamed`` says the client asked for a streamed answer
    (the request's ``stream: true``), not that a response was started.
    """

    method: str = ""
    path: str = ""
    kind: str | None = None  # the route's client API ("chat", "completion", "messages") on a completion route
    # The model the request was served by, its endpoint and dialect; None before one was chosen.
    model: str | None = None
    endpoint: str | None = None
    dialect: str | None = None
    # What the upstream calls carried (sagestream.sagemaker_ids): the InferenceId (the request id) and PrefixAwareId.
    inference_id: str | None = None
    prefix_aware_id: str | None = None
    caller: str | None = None  # the signing IAM principal (AUTH_MODE=iam), or the token's sub (AUTH_MODE=jwt)
    caller_details: dict[str, str] | None = None  # a JWT caller's client id and user name, where the token has them
    started: float = msgspec.field(default_factory=time.monotonic)
    status: int = 200
    streamed: bool = False
    upstream_started: float | None = None
    upstream_first_byte: float | None = None
    first_delta: float | None = None
    cadence: Cadence = msgspec.field(default_factory=Cadence)  # bounded: a stream's length must not grow memory
    # The function's own cost: the invocation thread's CPU (time.thread_time) at the event's arrival and at the first
    # delta written, and per delta the time from the upstream read that completed it to its write.
    started_cpu: float = msgspec.field(default_factory=time.thread_time)
    first_delta_cpu: float | None = None
    relay: Histogram = msgspec.field(default_factory=Histogram)
    output_deltas: int = 0
    usage_tokens: int | None = None
    prompt_tokens: int | None = None  # the container's count of the prompt, where its usage gave one
    finish_reason: str | None = None
    error_type: str | None = None
    error_code: str | None = None
    client_disconnected: bool = False
    deadline_stop: bool = False
    stored: bool | None = None  # a Responses answer kept in the store (None: not asked to be)
    keepalives: int = 0  # SSE comments written while the endpoint was silent, or the request held (SSE_KEEPALIVE_S)
    # Cold and busy endpoints (sagestream.capacity): for a model with fallbacks, the upstream that answered and
    # whether it was a fallback; how long the request was held (rounds waited for; from the first capacity fault
    # to the answer or the refusal), for any model.
    target: str | None = None
    fallback: bool = False
    cold_wait_rounds: int = 0
    cold_wait_ms: float | None = None
    # The circuit breakers (sagestream.breaker) as the request met them (sagestream.capacity.Held.breaker): None
    # (closed), "open" (a call refused), "half_open" (it probed a target), "opened" (its failure opened one).
    breaker: str | None = None
    # Quotas (sagestream.quotas): who the request counted against, what came of its reservation (reserved,
    # refused, unavailable), the tokens it was charged, and its settle's retries and failure.
    quota_subject: str | None = None
    quota: str | None = None
    quota_tokens: int | None = None
    quota_settle_retries: int = 0
    quota_settle_failed: bool = False
    prompt: Any = None  # the request's messages or prompt, kept only when LOG_PAYLOADS=true
    completion: list[str] | None = None  # the answer's text, kept only when LOG_PAYLOADS=true
    # Request fields and headers accepted as documented no-ops (invariant 8), by the client's name, with a count.
    noops: dict[str, int] = msgspec.field(default_factory=dict)
    guardrail: GuardrailNote | None = None  # GUARDRAIL_ID: what the guardrail did (None: no guardrail)

    @property
    def output_tokens(self) -> int:
        """The container's count when it reported usage, else the deltas that carried text, tools or reasoning."""
        return self.usage_tokens if self.usage_tokens is not None else self.output_deltas

    def wrote(self, delta: Delta, data: bytes, now: float | None = None, read_at: float | None = None) -> None:
        """``delta`` was produced and its bytes ``data`` written (``b""``: nothing to write for it).

        ``read_at`` is when the upstream read that completed the delta returned (same clock as ``now``).
        """
        if data:
            now = time.monotonic() if now is None else now
            if self.first_delta is None:
                self.first_delta = now
                self.first_delta_cpu = time.thread_time()
            self.cadence.add(now)
            if read_at is not None:
                self.relay.add((now - read_at) * 1000)
        if delta.finish_reason:
            self.finish_reason = delta.finish_reason
        if delta.usage is not None:
            self.usage_tokens = delta.usage.completion_tokens
            if delta.usage.prompt_tokens is not None:
                self.prompt_tokens = delta.usage.prompt_tokens
        if delta.content or delta.tool_calls or delta.reasoning_content or delta.reasoning or delta.refusal:
            self.output_deltas += 1  # each such delta is one generated token on the servers that stream
        if delta.content and self.completion is not None:
            self.completion.append(delta.content)

    def noted(self, names: tuple[str, ...]) -> None:
        """The request carried ``names``, fields or headers accepted as no-ops: counted for the log record.

        >>> record = StreamRecord()
        >>> record.noted(("client_metadata", "anthropic-beta", "client_metadata"))
        >>> record.noops
        {'client_metadata': 2, 'anthropic-beta': 1}
        """
        for name in names:
            self.noops[name] = self.noops.get(name, 0) + 1

    def fail(self, err: APIError) -> None:
        """The invocation ended with ``err`` (as a status before the first byte, or as an SSE error event)."""
        self.status, self.error_type, self.error_code = err.status, err.type, err.code
        self.breaker = self.breaker or getattr(err, "breaker", None)  # refused by an open breaker
        if err.code == DEADLINE_EXCEEDED:
            self.deadline_stop = True
