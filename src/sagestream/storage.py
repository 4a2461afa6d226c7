"""DynamoDB, as every part of the function reaches it: stored responses, their runs, quota windows.

One botocore client per process, made at init by whatever configures a table (:func:`dynamodb`), never on a
request: making one parses the service model (tens of milliseconds holding the GIL), which on a request's
path would hold a running stream's deltas back. One mapping of botocore's errors (:class:`StorageError`, with
whether the write surely was *not* applied, and :class:`ConditionFailed`). One deadline rule: every call ends
by :func:`bound` of the caller's deadline, in total, not per socket read (botocore's ``read_timeout`` bounds
one read; a table answering a byte a second would hold a call for ever). The call runs on a worker thread of
this module and the caller waits for it at most that long; a call that outlives its bound is abandoned to the
worker (its socket's own timeouts end it) and the caller gets :class:`StorageError` at once.

Asking again is the caller's choice (:meth:`Table.call`'s ``attempts``), taken only when DynamoDB surely did
not apply the write: it said so (throttling, its own faults), or the connection never opened. An answer that
was lost (a read timeout, a reset, the bound) may have been applied, and is never asked again: a counter must
not count twice.

Environment variables read: none; botocore reads the usual AWS ones, ``AWS_ENDPOINT_URL_DYNAMODB`` included
(moto's server under ``make run`` and in the tests).

Example::

    >>> bound(100.0, now=10.0, cap_s=3.0), bound(11.0, now=10.0, cap_s=3.0)
    (13.0, 11.0)
    >>> StorageError("x", operation="query", applied=None).retryable
    False
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

__all__ = ["CALL_CAP_S", "ConditionFailed", "StorageError", "Table", "bound", "dynamodb", "forget_connections"]

# The longest one call may take, whatever the deadline: a table that has not answered by then is unavailable.
CALL_CAP_S = 3.0
# botocore's own limits on one attempt, under the bound: a connection that does not open within a second will
# not; a read that waits 2 s is a table in trouble.
CONNECT_TIMEOUT_S = 1.0
READ_TIMEOUT_S = 2.0
# Between attempts of a write DynamoDB surely did not apply, jittered.
BACKOFF_S = (0.02, 0.1, 0.2)

# DynamoDB's answers that say the request was not applied and may be asked again.
_NOT_APPLIED = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
    }
)

_clients: dict[str | None, Any] = {}
_lock = threading.Lock()
# Workers for the calls (several invocations at once on Managed Instances, several windows per quota check);
# threads are started as calls need them, none at import.
_workers = ThreadPoolExecutor(max_workers=64, thread_name_prefix="dynamodb")


class StorageError(Exception):
    """A call that did not succeed. ``applied``: False when DynamoDB surely did not apply it (it said so, or the
    connection never opened), None when nobody knows (its answer was lost, or it outlived its bound)."""

    def __init__(
        self, message: str, *, operation: str, applied: bool | None, retryable: bool = False, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.operation, self.applied, self.retryable, self.code = operation, applied, retryable, code


class ConditionFailed(StorageError):
    """A conditional write whose condition did not hold; ``item`` is the item as it was, where DynamoDB returned
    it (``ReturnValuesOnConditionCheckFailure``)."""

    def __init__(self, operation: str, item: dict[str, Any]) -> None:
        super().__init__("the condition did not hold", operation=operation, applied=False, code="ConditionFailed")
        self.item = item


def dynamodb() -> Any:
    """The process's one DynamoDB client, made on the first call: call it at init. One per endpoint botocore is
    pointed at (``AWS_ENDPOINT_URL_DYNAMODB``): on Lambda that is one; a test process meets several local tables."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ.get("AWS_ENDPOINT_URL")
    with _lock:
        client = _clients.get(endpoint)
        if client is None:
            import botocore.config
            import botocore.session

            config = botocore.config.Config(
                connect_timeout=CONNECT_TIMEOUT_S,
                read_timeout=READ_TIMEOUT_S,
                # Asking again is the caller's decision (Table.call), made knowing whether the write was applied.
                retries={"mode": "standard", "total_max_attempts": 1},
                max_pool_connections=32,
            )
            client = _clients[endpoint] = botocore.session.get_session().create_client("dynamodb", config=config)
        return client


def forget_connections() -> None:
    """Close the clients' pooled connections (SnapStart's restore: those made before the snapshot lead nowhere),
    so that each next call opens a fresh one."""
    with _lock:
        for client in _clients.values():
            client._endpoint.http_session.close()  # botocore's URLLib3Session: clears its urllib3 pools


def bound(deadline: float | None, *, now: float | None = None, cap_s: float = CALL_CAP_S) -> float:
    """When a call made now must have ended: the caller's ``deadline`` (a :func:`time.monotonic` value), and
    never later than ``cap_s`` from now."""
    now = time.monotonic() if now is None else now
    latest = now + cap_s
    return latest if deadline is None else min(deadline, latest)


class Table:
    """One table, through the process's client (``client`` in the tests: a fake or another endpoint's)."""

    def __init__(self, name: str, client: Any = None, *, cap_s: float = CALL_CAP_S) -> None:
        self.name = name
        self.cap_s = cap_s
        self.client = dynamodb() if client is None else client

    def call(
        self,
        operation: str,
        *,
        deadline: float | None = None,
        attempts: int = 1,
        sleep: Callable[[float], None] = time.sleep,
        **args: Any,
    ) -> dict[str, Any]:
        """``operation`` (botocore's snake-case name) on the table, ended by :func:`bound` of ``deadline``;
        asked up to ``attempts`` times while DynamoDB surely did not apply it and time is left."""
        ends = bound(deadline, cap_s=self.cap_s)
        for attempt in range(1, attempts + 1):
            try:
                return self._once(operation, ends, args)
            except StorageError as exc:
                pause = BACKOFF_S[min(attempt, len(BACKOFF_S)) - 1] * (0.5 + random.random())
                if not exc.retryable or attempt == attempts or time.monotonic() + pause >= ends:
                    raise
                sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _once(self, operation: str, ends: float, args: dict[str, Any]) -> dict[str, Any]:
        left = ends - time.monotonic()
        if left <= 0:
            raise StorageError(
                f"DynamoDB {operation} on {self.name}: no time left before the deadline",
                operation=operation,
                applied=False,
            )
        future = _workers.submit(_ask, self.client, operation, self.name, args)
        try:
            return future.result(timeout=left)
        except FutureTimeout:
            # Not yet started: never sent, so surely not applied; started: its socket's own timeouts end it.
            never_sent = future.cancel()
            raise StorageError(
                f"DynamoDB {operation} on {self.name} did not answer within {max(left, 0):.1f} s",
                operation=operation,
                applied=False if never_sent else None,
            ) from None


def _ask(client: Any, operation: str, table: str, args: dict[str, Any]) -> dict[str, Any]:
    """One attempt, on a worker: botocore's exceptions as :class:`StorageError`."""
    import botocore.exceptions

    try:
        answer: dict[str, Any] = getattr(client, operation)(TableName=table, **args)
        return answer
    except botocore.exceptions.ClientError as exc:
        error = exc.response.get("Error", {})
        code = error.get("Code")
        if code == "ConditionalCheckFailedException":
            raise ConditionFailed(operation, exc.response.get("Item") or {}) from None
        # DynamoDB answered: it did not apply the request; some answers say asking again may succeed.
        raise StorageError(
            f"DynamoDB {operation} on {table} failed: {exc}",
            operation=operation,
            applied=False,
            retryable=code in _NOT_APPLIED,
            code=code,
        ) from exc
    except (botocore.exceptions.ConnectTimeoutError, botocore.exceptions.EndpointConnectionError) as exc:
        # Never sent: asking again cannot apply it twice.
        raise StorageError(
            f"DynamoDB {operation} on {table} failed: {exc}", operation=operation, applied=False, retryable=True
        ) from exc
    except Exception as exc:  # a lost answer (read timeout, reset), or anything unforeseen: may have been applied
        raise StorageError(
            f"DynamoDB {operation} on {table} failed: {exc!r}", operation=operation, applied=None
        ) from exc
