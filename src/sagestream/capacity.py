"""Cold and busy endpoints: hold a request while its model has no capacity, and fall back before the first byte.

An inference component scaled to zero answers every invoke with SageMaker's "no capacity" ValidationError until a
copy has started (minutes); a busy one throttles; a model still loading is ``ModelNotReadyException``.
:func:`first_answer` makes the upstream call of one request through that:

- **Fallbacks.** A model's upstreams (:attr:`sagestream.config.Config.upstreams`: its own, then each of its
  ``fallbacks`` in ``MODELS``) are tried in order. An upstream that answers one of those capacity faults, or a
  5xx, is passed over for the next, and *cools down*: for ``FALLBACK_COOLDOWN_S`` the requests of this execution
  environment skip it (the cooldowns live at module level, as the clients do: they outlive an invocation and
  hold nothing of one). All this happens before the call has an answer, so before the response's first byte;
  once a stream has started it is never moved (a client cannot be given half of two answers).
- **Circuit breakers.** Every call goes through its target's :class:`~sagestream.breaker.Breaker`: an open one
  refuses it at once (:class:`~sagestream.breaker.BreakerOpen`, a 503 with ``Retry-After``), which passes to the
  next upstream as any 5xx does; each call's outcome is reported to it, and the upstream client's own retries
  through :data:`sagestream.breaker.calling`. A held request waits out a breaker opened on capacity faults as it
  waits out the faults (one call per cooldown, the probe, instead of one per held request per round); one opened
  on failures ends the request at once.
- **Holding.** When every upstream answered a capacity fault, the request is held: the round is tried again
  after a capped exponential backoff with full jitter (``random() * min(cap, base * 2**n)``: AWS's "Exponential
  Backoff And Jitter", which spreads the held requests of a cold endpoint instead of waking them together), for
  up to the model's ``cold_wait_s`` (``COLD_WAIT_S``). The caller's ``wait`` sleeps between rounds: a stream's
  writes SSE keep-alive comments meanwhile, so a client that left raises out of it and stops the retries.
  The invocation's deadline always wins: no round starts that could not be asked and answered before it.
  Past the wait (or with it 0) the last fault is raised: a 503 (``no_capacity``, ``model_not_ready``) or 429
  (``rate_limited``) with ``Retry-After``, in the route's own error shape.

Environment variables read: none (``COLD_WAIT_S``, ``FALLBACK_COOLDOWN_S``, ``MODELS`` and the ``BREAKER_*``
settings through :mod:`sagestream.config`).

Example::

    >>> from sagestream.config import Config, Fallback
    >>> cfg = Config(endpoint_name="big", fallbacks=(Fallback("small"),))
    >>> def call(target):
    ...     if target.endpoint_name == "big":
    ...         raise APIError.upstream(503, "no copy", code="no_capacity")
    ...     return "answer from " + target.endpoint_name
    >>> held = Held()
    >>> first_answer(call, cfg.upstreams, held, deadline=time.monotonic() + 60, wait=time.sleep)
    'answer from small'
    >>> held.target, held.fallback, cooling("big")
    ('small', True, True)
    >>> forget_cooldowns(); forget_breakers()
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import msgspec

from sagestream.breaker import HALF_OPEN, OPEN, OPENED, BreakerOpen, breaker_for, calling, forget_breakers, trouble
from sagestream.errors import APIError
from sagestream.faults import CAPACITY_FAULTS

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = ["Held", "backoff_s", "cooling", "first_answer", "forget_breakers", "forget_cooldowns", "target_name"]

T = TypeVar("T")

# The backoff between two rounds: full jitter over min(cap, base * 2**n). A copy takes minutes to start, so the
# cap keeps a held request asking a few times a minute, not once in a long while.
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 10.0
# A round needs at least this long before the deadline to be worth asking for (as upstream's retry floor).
_ROUND_FLOOR_S = 0.5

# Module level, as invariant 7 allows: what outlives an invocation. An upstream's name -> the time.monotonic()
# its cooldown ends. Shared by the invocations of one environment (Lambda Managed Instances), hence the lock.
_cooldowns: dict[str, float] = {}
_lock = threading.Lock()


class Held(msgspec.Struct, forbid_unknown_fields=True):
    """What :func:`first_answer` did for one request, for its log record and metrics."""

    target: str | None = None  # the upstream that answered (endpoint, or endpoint/inference component)
    fallback: bool = False  # was it another than the model's own
    rounds: int = 0  # rounds waited for while held (0: not held)
    waited_s: float = 0.0  # from the first capacity fault to the answer (or to giving up), when held
    # What it met of the targets' circuit breakers (sagestream.breaker): None (all closed), "open" (a call was
    # refused), "half_open" (it probed one), "opened" (its failure opened one); the most telling of them.
    breaker: str | None = None

    def met(self, event: str | None) -> None:
        """Note a breaker event, keeping the most telling: opened, then refused, then probed."""
        if event is not None and _TELLING.index(event) > _TELLING.index(self.breaker):
            self.breaker = event


_TELLING = (None, HALF_OPEN, OPEN, OPENED)


def target_name(cfg: Config) -> str:
    """An upstream's name, as the ``x-sagestream-target`` header and the log record give it.

    >>> from sagestream.config import Config
    >>> target_name(Config(endpoint_name="llm", inference_component="qwen")), target_name(Config(endpoint_name="x"))
    ('llm/qwen', 'x')
    """
    name = cfg.endpoint_name
    if cfg.inference_component:
        name += "/" + cfg.inference_component
    if cfg.target_variant:
        name += ":" + cfg.target_variant
    return name


def backoff_s(round_: int, *, rand: Callable[[], float] = random.random) -> float:
    """The wait before round ``round_ + 1``: full jitter over the capped exponential.

    >>> backoff_s(0, rand=lambda: 1.0), backoff_s(3, rand=lambda: 1.0), backoff_s(10, rand=lambda: 1.0)
    (0.5, 4.0, 10.0)
    """
    return float(rand() * min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** min(round_, 32)))  # 2**1024 overflows


def cooling(name: str, now: float | None = None) -> bool:
    """Whether the upstream ``name`` is in its cooldown."""
    now = time.monotonic() if now is None else now
    with _lock:
        return _cooldowns.get(name, 0.0) > now


def forget_cooldowns() -> None:
    """Every upstream usable again (tests; a SnapStart restore would not need it: monotonic time restarts)."""
    with _lock:
        _cooldowns.clear()


def _cool(name: str, seconds: float) -> None:
    with _lock:
        _cooldowns[name] = max(_cooldowns.get(name, 0.0), time.monotonic() + seconds)


def _warm(name: str) -> None:
    with _lock:
        _cooldowns.pop(name, None)


def moves_on(err: APIError) -> bool:
    """Whether another upstream may do better: a capacity fault, a 5xx of the endpoint or the way to it (not
    the function's own deadline, nor its credentials: another upstream would meet both alike), or an open
    breaker."""
    return isinstance(err, BreakerOpen) or trouble(err)


def holds(err: APIError) -> bool:
    """Whether a held request may wait ``err`` out: a capacity fault, or a breaker opened on them."""
    return err.code in CAPACITY_FAULTS or (isinstance(err, BreakerOpen) and err.capacity)


def _ask(call: Callable[[Config], T], upstream: Config, name: str, held: Held) -> T:
    """``call(upstream)`` through the target's breaker: refused at once when it is open; the outcome told."""
    breaker = breaker_for(name, upstream)
    if breaker is None:
        return call(upstream)
    try:
        ticket = breaker.ask()
    except BreakerOpen:
        held.met(OPEN)
        raise
    token = calling.set(ticket)  # the upstream client's retries count through it
    try:
        answer = call(upstream)
    except APIError as err:
        ticket.failed(err)
        if ticket.event == OPENED:
            _retry_after(err, breaker.left_s())
            setattr(err, "breaker", OPENED)  # noqa: B010 - for the record (StreamRecord.fail), as BreakerOpen's
        raise
    else:
        ticket.answered()
        return answer
    finally:
        calling.reset(token)
        ticket.ended()  # anything else (a client gone): no verdict, and a probe's place is free again
        held.met(ticket.event)


def _retry_after(err: APIError, seconds: float) -> None:
    """``err`` opened its target's breaker: the client learns when the target is asked again (unless the fault
    says later already: no capacity's 30 s)."""
    whole = max(1, math.ceil(seconds))
    said = err.headers.get("Retry-After", "")
    if not said.isdigit() or int(said) < whole:
        err.headers.update({"Retry-After": str(whole), "retry-after-ms": str(whole * 1000)})
    err.headers["x-should-retry"] = "true"


def first_answer(
    call: Callable[[Config], T],
    upstreams: Sequence[Config],
    held: Held,
    *,
    deadline: float,
    wait: Callable[[float], None],
    cold_wait_s: float | None = None,
    cooldown_s: float | None = None,
) -> T:
    """``call``'s answer from the first upstream that has one, holding the request while none has capacity.

    ``upstreams``: the model's, in order (the first is the model's own; its ``cold_wait_s`` and
    ``fallback_cooldown_s`` apply unless given). ``deadline``: a :func:`time.monotonic` value no round may
    outlive. ``wait(seconds)``: sleeps between rounds (a stream's writes keep-alives; a client that left raises
    out of it). Raises the last fault once holding is over, or the first fault no other upstream can change.
    """
    own = upstreams[0]
    cold_wait_s = own.cold_wait_s if cold_wait_s is None else cold_wait_s
    cooldown_s = own.fallback_cooldown_s if cooldown_s is None else cooldown_s
    several = len(upstreams) > 1
    names = [target_name(u) for u in upstreams]
    held_since: float | None = None
    asked = 0  # rounds in which an endpoint was asked: the backoff's exponent
    while True:
        faults: list[APIError] = []
        for index in _order(names):
            try:
                answer = _ask(call, upstreams[index], names[index], held)
            except APIError as err:
                if not moves_on(err) or (not several and not holds(err)):
                    raise
                if several and not isinstance(err, BreakerOpen):
                    _cool(names[index], cooldown_s)
                faults.append(err)
                continue
            if several:
                _warm(names[index])
            held.target, held.fallback = names[index], index > 0
            if held_since is not None:
                held.waited_s = time.monotonic() - held_since
            return answer
        # What the client is told if this is the end: the first capacity fault (its Retry-After), else a breaker's
        # refusal a held request may wait out, else the last 5xx.
        last = next((f for f in faults if f.code in CAPACITY_FAULTS), None) or next(
            (f for f in faults if holds(f)), faults[-1]
        )
        now = time.monotonic()
        held_since = now if held_since is None else held_since
        held.waited_s = now - held_since
        if not holds(last) or now >= held_since + cold_wait_s:
            raise _ended(last, held)  # a 5xx everywhere is not worth holding for; or the wait is over
        refusals = [f.left_s for f in faults if isinstance(f, BreakerOpen)]
        if len(refusals) == len(faults):
            # Nothing was asked: wait for the soonest breaker's probe, spread over the backoff's first step (a
            # refusal is no answer of the endpoint's, so it does not lengthen the backoff).
            delay = min(refusals) + backoff_s(0)
        else:
            delay, asked = backoff_s(asked), asked + 1
        delay = min(delay, held_since + cold_wait_s - now)
        if now + delay + _ROUND_FLOOR_S >= deadline:
            raise _ended(last, held)  # the deadline wins: a round now could not be answered before it
        held.rounds += 1
        wait(delay)


def _ended(last: APIError, held: Held) -> APIError:
    """What a request is told when it gives up: ``last``; but a held request refused by a breaker opened on
    capacity faults is told what the endpoint itself said (``no_capacity``), the reason it was held for."""
    if isinstance(last, BreakerOpen) and last.capacity and held.rounds:
        return last.endpoint_said() or last
    return last


def _order(names: Sequence[str]) -> list[int]:
    """The upstreams to ask this round, in order: those not cooling down; if every one is, the one whose
    cooldown ends first (a request must ask someone, and that one is likeliest to answer)."""
    if len(names) == 1:
        return [0]
    now = time.monotonic()
    with _lock:
        ends = [_cooldowns.get(name, 0.0) for name in names]
    usable = [i for i, end in enumerate(ends) if end <= now]
    return usable or [min(range(len(names)), key=lambda i: ends[i])]
