"""A circuit breaker per upstream target: an endpoint in trouble is not stormed by the clients that retry.

Agents and SDKs retry a 5xx whatever the answer asks (Codex CLI, the Vercel AI SDK), so a failing endpoint meets
more calls the longer it fails. Each upstream target (an endpoint, an inference component, a variant: its
:func:`sagestream.capacity.target_name`) has a :class:`Breaker` per execution environment, at module level as the
clients and the fallback cooldowns are (invariant 7: it outlives an invocation and holds nothing of one):

- **closed** (the usual state): every call goes. Each call that fails in a way that says "the endpoint is in
  trouble" (:func:`trouble`: a 5xx of SageMaker or the container, a broken connection, a timeout, no capacity,
  not ready, throttling) counts; an answer resets the count; a client's 4xx, the function's own deadline and its
  own credentials count neither way. The function's own retries (botocore's, :mod:`sagestream.upstream`) count
  attempt by attempt, so ``failures`` in a row is ``failures`` endpoint calls, however they were made.
- **open**, after ``failures`` in a row: calls are refused at once, without calling the endpoint, with a
  :class:`BreakerOpen` (a 503 ``breaker_open`` with ``Retry-After``: the cooldown left) which the route writes in
  its own error shape; a model with fallbacks passes to the next one (:mod:`sagestream.capacity`).
- **half-open**, once the cooldown is over: the next call is the probe, alone (the others are refused meanwhile).
  Its answer closes the breaker; its trouble opens it again for twice the last cooldown (up to
  ``max_cooldown_s``: an endpoint down for long is probed less and less often, as Envoy's outlier ejection does;
  not for capacity faults, whose copy is awaited by held requests: those keep the first cooldown); anything else
  (a 4xx) leaves the next call to probe.

Only the call up to the answer's head is judged: a stream's first byte means "answered" (a fault in mid-stream is
the stream's, after it). Transitions are logged (``upstream breaker opened`` / ``closed``), and a request's own
part (it was refused, it probed, its failure opened the breaker) reaches its log record and metrics through
:class:`sagestream.capacity.Held`.

Environment variables read: none (``BREAKER_FAILURES``, ``BREAKER_COOLDOWN_S`` and ``BREAKER_MAX_COOLDOWN_S``
through :mod:`sagestream.config`).

Example::

    >>> clock = [0.0]
    >>> b = Breaker(failures=2, cooldown_s=10, max_cooldown_s=60, clock=lambda: clock[0])
    >>> failed = APIError.upstream(502, "The model endpoint failed.", code="upstream_error")
    >>> for _ in range(2):
    ...     b.ask().failed(failed)
    >>> b.state
    'open'
    >>> try:
    ...     b.ask()
    ... except BreakerOpen as refused:
    ...     print(refused.status, refused.headers["Retry-After"])
    503 10
    >>> clock[0] = 10.0
    >>> probe = b.ask()
    >>> probe.probe, b.state
    (True, 'half_open')
    >>> probe.answered()
    >>> b.state
    'closed'
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING

from sagestream.errors import DEADLINE_EXCEEDED, APIError
from sagestream.faults import CAPACITY_FAULTS

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = [
    "BREAKER_OPEN",
    "CLOSED",
    "HALF_OPEN",
    "OPEN",
    "OPENED",
    "Breaker",
    "BreakerOpen",
    "Ticket",
    "breaker_for",
    "calling",
    "forget_breakers",
    "trouble",
]

logger = logging.getLogger(__name__)

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
# What a request did to a breaker, for its log record: besides OPEN (refused) and HALF_OPEN (probed), it opened one.
OPENED = "opened"
# The refusal's code, as the client and the log record read it.
BREAKER_OPEN = "breaker_open"


def trouble(err: APIError) -> bool:
    """Whether a failed call says the endpoint (or the way to it) is in trouble: a 5xx, no capacity, not ready,
    throttled. Not a client's 4xx, nor the function's own deadline or credentials (``internal_error``): another
    call would meet those alike, and they say nothing of the endpoint.

    >>> trouble(APIError.upstream(502, "failed", code="model_error"))
    True
    >>> trouble(APIError.upstream(429, "busy", code="rate_limited"))
    True
    >>> trouble(APIError.upstream(400, "too long", code="context_length_exceeded")), trouble(APIError.internal())
    (False, False)
    """
    if err.code in CAPACITY_FAULTS:
        return True
    return err.status >= 500 and err.code not in (DEADLINE_EXCEEDED, "internal_error", BREAKER_OPEN)


class BreakerOpen(APIError):
    """A call refused by an open (or probing) breaker: a 503 ``breaker_open`` with ``Retry-After``.

    ``capacity``: the breaker opened on capacity faults (no copy, not ready, throttled), which a held request may
    wait out (:mod:`sagestream.capacity`); on failures it may not. ``x-should-retry: true``: the SDKs retry once
    ``Retry-After`` has passed, which is when the breaker lets a call through again.
    """

    def __init__(self, left_s: float, last: APIError | None) -> None:
        seconds = max(1, math.ceil(left_s))
        said = f" (its last answer: {last.code})" if last is not None and last.code else ""
        super().__init__(
            503,
            f"The model endpoint is failing{said}: it is not being called for {seconds} s, so that it can recover. "
            f"Retry after {seconds} s.",
            type="server_error",
            code=BREAKER_OPEN,
            headers={"Retry-After": str(seconds), "retry-after-ms": str(seconds * 1000), "x-should-retry": "true"},
        )
        self.last = last
        self.left_s = left_s
        self.capacity = last is not None and last.code in CAPACITY_FAULTS
        self.breaker = OPEN  # for the record (sagestream.record.StreamRecord.fail)

    def endpoint_said(self) -> APIError | None:
        """What the endpoint itself last answered, as the client would have had it (a copy: the original may be
        raised in another invocation), for a held request that was refused to the end of its wait."""
        last = self.last
        if last is None:
            return None
        said = APIError(last.status, last.message, type=last.type, code=last.code, param=last.param)
        said.headers = dict(last.headers)
        setattr(said, "breaker", OPEN)  # noqa: B010 - for the record, as a refusal's
        return said


class Breaker:
    """One upstream target's breaker; shared by the invocations of an environment, hence its lock."""

    def __init__(
        self,
        *,
        failures: int,
        cooldown_s: float,
        max_cooldown_s: float,
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.failures = failures
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max(cooldown_s, max_cooldown_s)
        self._clock = clock
        self._lock = threading.Lock()
        self.state = CLOSED
        self._count = 0  # trouble in a row (closed)
        self._opens = 0  # openings since the breaker last closed: each one doubles the cooldown
        self._until = 0.0  # when an open breaker's cooldown ends (the clock's time)
        self._probing = False  # half-open: a probe is out
        self._last: APIError | None = None  # the trouble that opened it

    def ask(self) -> Ticket:
        """A :class:`Ticket` for one call, or :class:`BreakerOpen` when the call must not be made."""
        with self._lock:
            now = self._clock()
            if self.state == OPEN:
                if now < self._until:
                    raise self._refusal(self._until - now)
                self.state, self._probing = HALF_OPEN, False
            if self.state == HALF_OPEN:
                if self._probing:
                    raise self._refusal(0.0)  # the probe is out: its answer decides
                self._probing = True
                return Ticket(self, probe=True)
            return Ticket(self, probe=False)

    def left_s(self) -> float:
        """The cooldown left (0 unless open)."""
        with self._lock:
            return max(0.0, self._until - self._clock()) if self.state == OPEN else 0.0

    def _refusal(self, left_s: float) -> BreakerOpen:
        return BreakerOpen(left_s, self._last)

    def _settle(self, ticket: Ticket, err: APIError | None, *, answered: bool) -> str | None:
        """``ticket``'s call answered, failed with ``err`` (trouble or not), or ended with neither (``err`` None,
        not answered). Returns :data:`OPENED` when this opened the breaker."""
        with self._lock:
            if ticket.probe:
                self._probing = False
                if answered:
                    self._close()
                elif err is not None and trouble(err):
                    return self._open(err)
                return None  # a 4xx, or no verdict: the next call probes
            if self.state != CLOSED:
                return None  # a call let through before it opened: the breaker decided already
            if answered:
                self._count = 0
            elif err is not None and trouble(err):
                self._count += 1
                if self._count >= self.failures:
                    return self._open(err)
            return None

    def _open(self, err: APIError) -> str:
        # A failing endpoint is probed less and less often; one without capacity as often as a held request
        # would ask (the copy it waits for is noticed within a cooldown, however long it took to start).
        doubling = 0 if err.code in CAPACITY_FAULTS else min(self._opens, 32)
        cooldown = min(self.max_cooldown_s, self.cooldown_s * 2.0**doubling)
        self.state, self._until, self._last = OPEN, self._clock() + cooldown, err
        self._opens += 1
        self._count = 0
        logger.warning(
            "upstream breaker opened",
            extra={"target": self.name, "cooldown_s": cooldown, "error_code": err.code, "failures": self.failures},
        )
        return OPENED

    def _close(self) -> None:
        self.state, self._count, self._opens, self._last = CLOSED, 0, 0, None
        logger.info("upstream breaker closed", extra={"target": self.name})


class Ticket:
    """One call's leave to go, and its report back: exactly one of :meth:`answered`, :meth:`failed` or
    :meth:`ended` counts (later ones do nothing). ``event``: what the call did to the breaker, for its record."""

    __slots__ = ("breaker", "done", "event", "probe")

    def __init__(self, breaker: Breaker, *, probe: bool) -> None:
        self.breaker = breaker
        self.probe = probe
        self.done = False
        self.event: str | None = HALF_OPEN if probe else None

    def answered(self) -> None:
        self._settle(None, answered=True)

    def failed(self, err: APIError) -> None:
        self._settle(err, answered=False)

    def ended(self) -> None:
        """The call ended with neither an answer nor an upstream fault (the client left): no verdict."""
        self._settle(None, answered=False)

    def may_retry(self, err: APIError) -> bool:
        """A failed attempt the upstream client would try again (``err``: what it was). It counts as one
        failure; the retry may go only while the breaker stays closed, and never for a probe (one call)."""
        if self.done:
            return False
        if self.probe:
            self.failed(err)
            return False
        if self.breaker._settle(self, err, answered=False) == OPENED:
            self.event, self.done = OPENED, True
            return False
        if self.breaker.state != CLOSED:
            self.done = True  # opened by others meanwhile: this attempt is the call's last, and counted
            return False
        return True

    def _settle(self, err: APIError | None, *, answered: bool) -> None:
        if self.done:
            return
        self.done = True
        if self.breaker._settle(self, err, answered=answered) == OPENED:
            self.event = OPENED


# The ticket of the call this thread or task is making, for the upstream client's retry hook.
calling: ContextVar[Ticket | None] = ContextVar("sagestream_breaker_ticket", default=None)

# Module level, as invariant 7 allows: a target's name -> its breaker, for the life of the environment.
_breakers: dict[str, Breaker] = {}
_lock = threading.Lock()


def breaker_for(name: str, cfg: Config) -> Breaker | None:
    """The breaker of the target ``name`` (made on its first call, with ``cfg``'s settings); None when
    ``BREAKER_FAILURES`` is 0 (off)."""
    if cfg.breaker_failures <= 0:
        return None
    breaker = _breakers.get(name)
    if breaker is not None:
        return breaker
    with _lock:
        return _breakers.setdefault(
            name,
            Breaker(
                failures=cfg.breaker_failures,
                cooldown_s=cfg.breaker_cooldown_s,
                max_cooldown_s=cfg.breaker_max_cooldown_s,
                name=name,
            ),
        )


def forget_breakers() -> None:
    """Every breaker closed again (tests)."""
    with _lock:
        _breakers.clear()
