"""The counters in DynamoDB (:class:`DynamoQuotas`): a request's worst case reserved in each of its caller's windows
before the upstream call (:meth:`DynamoQuotas.reserve`), settled to its usage after (:meth:`DynamoQuotas.settle`),
through :mod:`sagestream.storage` (one client, made at init; every call bounded in total).

Environment variables read: none; botocore reads the usual AWS ones, ``AWS_ENDPOINT_URL_DYNAMODB`` included.

Example::

    >>> minute = Held(Window("minute", "29515230", 30.0, 0), "9f86d081#minute#29515230", 60, 60, 1)
    >>> held = Reservation("r-1", Limits(tokens_per_minute=100), 10, [minute])
    >>> held.items, held.counts_tokens, held.job()["estimate"]
    ([['9f86d081#minute#29515230', 60]], True, 10)
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sagestream.quotas._callers import Subject
from sagestream.quotas._policy import Limits, Policy
from sagestream.quotas._windows import TOKEN_LIMIT, Held, Window, rate_headers, refusal, windows
from sagestream.storage import CALL_CAP_S, ConditionFailed, StorageError, Table

__all__ = ["ATTEMPTS", "SETTLE_MIN_LEFT_S", "UNAVAILABLE_RETRY_S", "DynamoQuotas", "QuotaUnavailable", "Reservation"]

logger = logging.getLogger(__name__)

# How long a refusal for want of DynamoDB asks the client to wait.
UNAVAILABLE_RETRY_S = 5


class QuotaUnavailable(Exception):
    """DynamoDB could not be asked, or refused the function (not a condition: a limit reached is a refusal)."""


class Reservation:
    """A request's reservation: the items it holds, and what the answer's rate-limit headers say of them."""

    def __init__(self, request_id: str, limits: Limits, prompt_estimate: int, held: list[Held]) -> None:
        self.request_id, self.limits, self.prompt_estimate, self.held = request_id, limits, prompt_estimate, held
        self.settled = False
        self.handed_off = False  # a background run settles it, in another invocation

    def job(self) -> dict[str, Any]:
        """What a background run needs to settle this reservation."""
        return {
            "request_id": self.request_id,
            "estimate": self.prompt_estimate,
            "items": self.items,
            "tokens": self.counts_tokens,
        }

    @property
    def counts_tokens(self) -> bool:
        """Whether a token limit applies (else only requests count, and nothing needs settling)."""
        return any(self.limits.get(TOKEN_LIMIT[h.window.name]) is not None for h in self.held)

    @property
    def items(self) -> list[list[Any]]:
        """The items held, as ``[pk, tokens reserved]``."""
        return [[h.pk, h.tokens] for h in self.held]

    def headers(self, style: str, now: float | None = None) -> dict[str, str]:
        """The answer's rate-limit headers: ``openai`` or ``anthropic`` (``/v1/messages``)."""
        at = time.time() if now is None else now
        return rate_headers(self.limits, {h.window.name: h for h in self.held}, style, at)


ATTEMPTS = 3  # a write DynamoDB surely did not apply (it said so, or the connection never opened) is asked again
# A settle is not started with less than this left of the invocation (one call's bound, storage.CALL_CAP_S, and a
# margin): the invocation's own log record and metrics must still be written.
SETTLE_MIN_LEFT_S = 3.5
# What a settle leaves of the invocation, at the least, when its call ends: the log record's time.
SETTLE_MARGIN_S = SETTLE_MIN_LEFT_S - CALL_CAP_S


class DynamoQuotas:
    """The counters, in one DynamoDB table (partition key ``pk``, a string), through the process's one client
    (:mod:`sagestream.storage`, made with this at init, never on a request; ``client`` in the tests).

    Every write is an ``UpdateItem`` bounded in total (:meth:`sagestream.storage.Table.call`: by the caller's
    deadline, and never longer than :data:`sagestream.storage.CALL_CAP_S`; a table that answers a byte a second
    is unavailable once that is up, not after the function's timeout), asked again (:data:`ATTEMPTS`) only when
    DynamoDB surely did not apply it: one whose answer was lost (a read timeout, a reset, the bound) may have
    been applied, and is not repeated, so that no write counts twice."""

    def __init__(self, table: str, policy: Policy, client: Any = None) -> None:
        self.table = table
        self.policy = policy
        self.db = Table(table, client)
        # The reservations of several windows, made at once: three for each invocation running at once (Lambda
        # Managed Instances run several). Its threads start when first needed, the pool itself here.
        self._pool = ThreadPoolExecutor(max_workers=48, thread_name_prefix="quotas")

    @property
    def client(self) -> Any:
        return self.db.client

    def reserve(
        self,
        subject: Subject,
        prompt: int,
        completion: int,
        request_id: str,
        *,
        style: str = "openai",
        now: float | None = None,
        deadline: float | None = None,
    ) -> Reservation | None:
        """Reserve the worst case (``prompt``'s estimate and ``completion``, the most it may generate) and one
        request in each of the caller's windows; None when it has no limits. A window without room is its 429
        (:func:`refusal`, its headers in ``style``), the windows reserved before it given back; DynamoDB not
        answering, by ``deadline`` (a :func:`time.monotonic` value) or within its bound, is
        :class:`QuotaUnavailable`."""
        limits = self.policy.limits_for(subject)
        if not limits.any:
            return None
        now = time.time() if now is None else now
        digest = hashlib.sha256(subject.key.encode()).hexdigest()[:32]
        found = windows(limits, now)
        tokens = prompt + completion
        for window in found:  # a zero limit refuses before anything is written
            if limits.get(TOKEN_LIMIT[window.name]) == 0:
                raise refusal(window, limits, 0, None, tokens, style)
            if window.name == "minute" and limits.get("requests_per_minute") == 0:
                raise refusal(window, limits, None, 0, tokens, style)
        if len(found) == 1:
            only = self._take(digest, found[0], limits, tokens, style, deadline)
            return Reservation(request_id, limits, prompt, [only])
        # Several windows: asked at once (one round trip before the first token, not three); any that refuses
        # has those that did not given back, and the shortest window's refusal is the answer.
        asked = [self._pool.submit(self._take, digest, w, limits, tokens, style, deadline) for w in found]
        held: list[Held] = []
        failure: BaseException | None = None
        for future in asked:
            try:
                held.append(future.result())
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            self._give_back(held)
            raise failure
        return Reservation(request_id, limits, prompt, held)

    def _take(
        self, digest: str, window: Window, limits: Limits, tokens: int, style: str, deadline: float | None
    ) -> Held:
        token_limit = limits.get(TOKEN_LIMIT[window.name])
        request_limit = limits.get("requests_per_minute") if window.name == "minute" else None
        if token_limit is not None:
            tokens = min(tokens, token_limit)
        conditions, values = [], {":t": {"N": str(tokens)}, ":one": {"N": "1"}, ":exp": {"N": str(window.expires_at)}}
        if token_limit is not None:
            conditions.append("(attribute_not_exists(tokens) OR tokens <= :troom)")
            values[":troom"] = {"N": str(token_limit - tokens)}
        if request_limit is not None:
            conditions.append("(attribute_not_exists(requests) OR requests <= :rroom)")
            values[":rroom"] = {"N": str(request_limit - 1)}
        pk = f"{digest}#{window.name}#{window.start}"
        try:
            answer, _ = self._write(
                deadline,
                Key={"pk": {"S": pk}},
                UpdateExpression="ADD tokens :t, requests :one SET expires_at = :exp",
                ConditionExpression=" AND ".join(conditions),
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ConditionFailed as failed:
            old = failed.item
            used_tokens, used_requests = _number(old, "tokens"), _number(old, "requests")
            if old and used_tokens is None:  # an item without counts yet: nothing used
                used_tokens = used_requests = 0
            raise refusal(window, limits, used_tokens, used_requests, tokens, style) from None
        item = answer.get("Attributes") or {}
        return Held(window, pk, tokens, _number(item, "tokens") or tokens, _number(item, "requests") or 1)

    def _give_back(self, held: list[Held]) -> None:
        """Undo reservations a later window refused (an error here only over-counts, and is logged)."""
        for h in held:
            try:
                self._write(
                    None,
                    Key={"pk": {"S": h.pk}},
                    UpdateExpression="ADD tokens :t, requests :one",
                    ExpressionAttributeValues={":t": {"N": str(-h.tokens)}, ":one": {"N": "-1"}},
                )
            except Exception as exc:
                logger.error("a quota reservation could not be given back (%s, %d tokens): %s", h.pk, h.tokens, exc)

    def settle(
        self, items: list[list[Any]], request_id: str, used: int, *, time_left: Any = None, sleep: Any = time.sleep
    ) -> int:
        """Settle reserved ``items`` (``[pk, reserved]``) to ``used`` tokens: one ``UpdateItem`` per item whose
        reservation differs (plain updates: a transaction would conflict with the caller's next reservations of
        the same items). The attempts the slowest took; :class:`QuotaUnavailable` naming what was not applied.
        ``time_left`` (seconds, a callable): no attempt starts without :data:`SETTLE_MIN_LEFT_S` of it, and none
        outlives what it leaves but :data:`SETTLE_MARGIN_S`."""
        deltas = [(str(pk), used - int(reserved)) for pk, reserved in items if used != int(reserved)]
        most, missed = 0, []
        for pk, delta in deltas:
            left = None if time_left is None else float(time_left())
            if left is not None and left < SETTLE_MIN_LEFT_S:
                missed.append((pk, delta, "no time left in the invocation"))
                continue
            try:
                _, attempts = self._write(
                    None if left is None else time.monotonic() + left - SETTLE_MARGIN_S,
                    Key={"pk": {"S": pk}},
                    UpdateExpression="ADD tokens :d",
                    # An item gone (its window ended over an hour ago, then TTL): nothing is left to correct.
                    ConditionExpression="attribute_exists(pk)",
                    ExpressionAttributeValues={":d": {"N": str(delta)}},
                    sleep=sleep,
                )
                most = max(most, attempts)
            except ConditionFailed:
                continue
            except QuotaUnavailable as exc:
                missed.append((pk, delta, str(exc)))
        if missed:
            raise QuotaUnavailable(f"the quota settle of {request_id} was not applied to {missed}")
        return most

    def _write(self, deadline: float | None, *, sleep: Any = time.sleep, **args: Any) -> tuple[Any, int]:
        """One ``UpdateItem`` (:meth:`sagestream.storage.Table.call`), asked again while DynamoDB surely did not
        apply it; its answer and the attempts it took. :class:`~sagestream.storage.ConditionFailed` when its
        condition did not hold, :class:`QuotaUnavailable` when it could not be made (or may have been, its answer
        lost)."""
        pauses: list[float] = []

        def pause(seconds: float) -> None:  # each pause comes before an attempt: they count them
            pauses.append(seconds)
            sleep(seconds)

        try:
            answer = self.db.call("update_item", deadline=deadline, attempts=ATTEMPTS, sleep=pause, **args)
        except ConditionFailed:
            raise
        except StorageError as exc:
            raise QuotaUnavailable(f"DynamoDB UpdateItem on {self.table} failed: {exc}") from exc
        return answer, len(pauses) + 1


def _number(item: Mapping[str, Any], name: str) -> int | None:
    value = item.get(name, {}).get("N")
    return None if value is None else int(value)
