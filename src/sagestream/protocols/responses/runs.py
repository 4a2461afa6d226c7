"""A response while it runs: its state, the request a background run answers, and its streamed events, on the
stored-responses table (:mod:`sagestream.protocols.responses.store`), so that another invocation can show it,
replay it and follow it (``GET /v1/responses/{id}?stream=true&starting_after=N``) or cancel it.

Items, beside a stored response's own (partition key ``id``, sort key ``part``, as the table has them):

- ``{id}#state``, part 0: ``status`` (``queued`` -> ``in_progress`` -> ``completed`` / ``incomplete`` /
  ``failed``; ``cancelled`` from either of the first two), ``background``, ``cancel_requested``, the response
  object as last known (compressed) and ``owner``. Every change is a conditional ``UpdateItem`` on the status it
  expects, so a run is claimed once (Lambda may deliver an asynchronous event twice), a cancelled run never reads
  as completed, and a finished one cannot be cancelled.
- ``{id}#job``, part 0: what a background run needs to answer (the request as read, the upstream body), written
  with the state by the invocation that queued it.
- ``{id}#events``, part ``first_seq``: a batch of the stream's SSE events, consecutive by ``sequence_number``
  from ``first_seq`` to ``last``, compressed. A ``Query`` from a sequence number reads the batches in order.

Events are written in batches by :class:`~sagestream.protocols.responses.eventlog.EventLog` and read by its
``follow`` (:mod:`sagestream.protocols.responses.eventlog`); this module is the table's side of a run.

Every item carries ``owner`` (the digest :func:`~sagestream.protocols.responses.store.owner_of` makes) and
``expires_at`` (the store's TTL); another owner's run reads as missing.

Environment variables read: none.

Example::

    >>> [seq for seq, _ in split_events(b"event: a\\ndata: {}\\n\\n: pad\\n\\nevent: b\\ndata: {}\\n\\n", 7)]
    [7, 8]
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from sagestream.protocols.responses.store import PART_BYTES, DynamoStore, StoreError, decode, encode

__all__ = [
    "ACTIVE",
    "MAX_QUEUED_S",
    "MAX_RUN_S",
    "TERMINAL",
    "Batch",
    "RunState",
    "Runs",
    "split_events",
]

logger = logging.getLogger(__name__)

ACTIVE = ("queued", "in_progress")
TERMINAL = frozenset({"completed", "incomplete", "failed", "cancelled"})
# Longer than any invocation runs (Lambda's 15 minutes, and a minute more): a run still in progress after it is dead.
MAX_RUN_S = 16 * 60
# A background run's event waits in Lambda's queue at most the template's MaximumEventAgeInSeconds (300 s: its
# EventInvokeConfig), its retries included: one still queued a minute after that will never start.
MAX_QUEUED_S = 6 * 60


class Conflict(Exception):
    """A conditional write found the run in another state than it expected."""


@dataclass(frozen=True, slots=True)
class RunState:
    """A run as the table holds it: its status, whether it runs in the background, and its response object
    (with that status)."""

    status: str
    background: bool
    cancel_requested: bool
    response: dict[str, Any]

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True, slots=True)
class Batch:
    first: int
    last: int
    data: bytes  # the SSE events, as the stream wrote them

    def events(self) -> list[tuple[int, bytes]]:
        return split_events(self.data, self.first)


def split_events(data: bytes, first_seq: int) -> list[tuple[int, bytes]]:
    """The SSE events of ``data`` with their sequence numbers, counted from ``first_seq``; comments (padding)
    dropped. The Responses encoder numbers its events consecutively and writes no blank line inside one."""
    out = []
    seq = first_seq
    for block in data.split(b"\n\n"):
        if not block or block.startswith(b":"):
            continue
        out.append((seq, block + b"\n\n"))
        seq += 1
    return out


def _key(response_id: str, kind: str, part: int = 0) -> dict[str, Any]:
    return {"id": {"S": f"{response_id}#{kind}"}, "part": {"N": str(part)}}


class Runs:
    """Runs on the table of ``store`` (its client, its TTL)."""

    def __init__(self, store: DynamoStore) -> None:
        self.store = store

    def _call(self, operation: str, **args: Any) -> Any:
        return self.store._call(operation, **args)

    def _expires(self) -> dict[str, str]:
        return {"N": str(int(time.time()) + self.store.ttl_s)}

    def begin(
        self, response_id: str, owner: str, response: dict[str, Any], *, background: bool, job: Any = None
    ) -> None:
        """A new run: ``queued`` with its job (a background run another invocation answers), or ``in_progress``
        (one that runs here: a foreground stream, or a background one its creator streams)."""
        expires = self._expires()
        if job is not None:
            self._call(
                "put_item",
                Item={
                    **_key(response_id, "job"),
                    "owner": {"S": owner},
                    "expires_at": expires,
                    "data": {"B": encode(job)},
                },
                ConditionExpression="attribute_not_exists(id)",
            )
        self._call(
            "put_item",
            Item={
                **_key(response_id, "state"),
                "owner": {"S": owner},
                "expires_at": expires,
                "status": {"S": "queued" if job is not None else "in_progress"},
                "started_at": {"N": str(int(time.time()))},
                "background": {"BOOL": background},
                "cancel_requested": {"BOOL": False},
                "response": {"B": encode(response)},
            },
            ConditionExpression="attribute_not_exists(id)",
        )

    def job(self, response_id: str) -> tuple[str, Any] | None:
        """The owner and the job of a queued run, or None."""
        item = self._call("get_item", Key=_key(response_id, "job"), ConsistentRead=True).get("Item")
        if item is None:
            return None
        return item["owner"]["S"], decode(item["data"]["B"])

    def state(self, response_id: str, owner: str) -> RunState | None:
        """The run for ``owner``, or None (none, another owner's, or expired)."""
        item = self._call("get_item", Key=_key(response_id, "state"), ConsistentRead=True).get("Item")
        if item is None or item.get("owner", {}).get("S") != owner:
            return None
        if int(item.get("expires_at", {}).get("N", "0")) <= time.time():
            return None
        status = item["status"]["S"]
        response = decode(item["response"]["B"])
        started = int(item.get("started_at", {}).get("N", "0"))
        if status == "in_progress" and time.time() - started > MAX_RUN_S:
            # Longer than any invocation lives: the run's environment died before its end (it ends itself at its
            # deadline otherwise). Shown as failed, so that nobody waits for it.
            status = "failed"
            response = {**response, "error": {"code": "server_error", "message": "The run ended before its answer."}}
        elif status == "queued" and time.time() - started > MAX_QUEUED_S:
            # Lambda dropped its event (past its maximum age, or its retries spent): it will never run.
            status = "failed"
            response = {**response, "error": {"code": "server_error", "message": "The run never started."}}
        return RunState(
            status=status,
            background=bool(item.get("background", {}).get("BOOL")),
            cancel_requested=bool(item.get("cancel_requested", {}).get("BOOL")),
            response={**response, "status": status},
        )

    def _update(
        self,
        response_id: str,
        expected: tuple[str, ...],
        sets: dict[str, Any],
        *,
        also: str = "",
        values: dict[str, Any] | None = None,
    ) -> None:
        """SET ``sets`` on the state when its status is one of ``expected`` (and ``also`` holds);
        :class:`Conflict` when it is not."""
        from sagestream.storage import ConditionFailed

        given = {f":{n}": v for n, v in sets.items()}
        given.update({f":expected{i}": {"S": s} for i, s in enumerate(expected)})
        given.update(values or {})
        expected_in = ", ".join(f":expected{i}" for i in range(len(expected)))
        update = "SET " + ", ".join(f"#{n} = :{n}" for n in sets)
        condition = f"#status IN ({expected_in}){also}"
        # Every attribute by a name (some are DynamoDB's reserved words), and only those used: DynamoDB refuses
        # an unused one.
        used = {*sets, "status", *(n for n in ("owner", "background", "started_at") if f"#{n}" in also)}
        names = {f"#{n}": n for n in used}
        try:
            self._call(
                "update_item",
                Key=_key(response_id, "state"),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=given,
            )
        except StoreError as exc:
            if isinstance(exc.__cause__, ConditionFailed):
                raise Conflict(response_id) from exc
            raise

    def claim(self, response_id: str) -> bool:
        """``queued`` -> ``in_progress``, once: False when it is not queued (run already, or cancelled)."""
        try:
            self._update(
                response_id, ("queued",), {"status": {"S": "in_progress"}, "started_at": {"N": str(int(time.time()))}}
            )
        except Conflict:
            return False
        return True

    def finish(self, response_id: str, status: str, response: dict[str, Any]) -> bool:
        """A running run's end, with its last response object; False when it was cancelled meanwhile (the
        cancelled state then keeps that response object, its status ``cancelled``)."""
        try:
            self._update(response_id, ACTIVE, {"status": {"S": status}, "response": {"B": encode(response)}})
            return True
        except Conflict:
            pass
        with contextlib.suppress(Conflict):
            self._update(response_id, ("cancelled",), {"response": {"B": encode(response)}})
        return False

    def cancel(self, response_id: str, owner: str) -> RunState | None:
        """Ask a background run to stop: its status is ``cancelled`` at once, and the run stops its upstream
        within about half a second. The state after (None when the owner has no such run); a run already ended
        keeps its status (the caller tells which answer that is)."""
        # A Conflict: not this owner's, not a background run, or ended already; the state read after says which.
        with contextlib.suppress(Conflict):
            self._update(
                response_id,
                ACTIVE,
                {"status": {"S": "cancelled"}, "cancel_requested": {"BOOL": True}},
                also=" AND #owner = :owner AND #background = :true",
                values={":owner": {"S": owner}, ":true": {"BOOL": True}},
            )
        return self.state(response_id, owner)

    def dequeue(self, response_id: str, owner: str) -> bool:
        """Cancel ``owner``'s background run that has not started: True for the one request that took it out
        of ``queued`` (the run will not claim it, so nothing else will: what it held is the caller's to give back)."""
        try:
            self._update(
                response_id,
                ("queued",),
                {"status": {"S": "cancelled"}, "cancel_requested": {"BOOL": True}},
                also=" AND #owner = :owner AND #background = :true",
                values={":owner": {"S": owner}, ":true": {"BOOL": True}},
            )
        except Conflict:
            return False
        return True

    def give_up(self, response_id: str, response: dict[str, Any]) -> bool:
        """A run still queued past :data:`MAX_QUEUED_S` marked ``failed``, with ``response`` (saying why): True for
        the one request that did it (the run will never claim it, so what it held is that request's to give
        back)."""
        try:
            self._update(
                response_id,
                ("queued",),
                {"status": {"S": "failed"}, "response": {"B": encode(response)}},
                also=" AND #started_at < :stale",
                values={":stale": {"N": str(int(time.time()) - MAX_QUEUED_S)}},
            )
        except Conflict:
            return False
        return True

    def cancelled(self, response_id: str) -> bool:
        """Whether the run was asked to stop, or deleted (a strongly consistent read of its state)."""
        item = self._call("get_item", Key=_key(response_id, "state"), ConsistentRead=True).get("Item")
        return item is None or bool(item.get("cancel_requested", {}).get("BOOL"))

    def delete(self, response_id: str, owner: str) -> bool:
        """Delete the run's items (state, job, events) when they are ``owner``'s; False when there is no such run."""
        item = self._call("get_item", Key=_key(response_id, "state"), ConsistentRead=True).get("Item")
        if item is None or item.get("owner", {}).get("S") != owner:
            return False
        self.delete_items(response_id)
        return True

    def delete_items(self, response_id: str) -> None:
        """Delete every item of the run (its job, its events, its state last: a run half deleted is still found);
        also what a run wrote after a delete it noticed late."""
        events = self._query(
            KeyConditionExpression="id = :id",
            ExpressionAttributeValues={":id": {"S": f"{response_id}#events"}},
            ProjectionExpression="id, part",
        )
        keys = [_key(response_id, "job"), *({"id": i["id"], "part": i["part"]} for i in events)]
        for key in [*keys, _key(response_id, "state")]:
            self._call("delete_item", Key=key)

    def _query(self, **args: Any) -> list[dict[str, Any]]:
        """Every item a strongly consistent ``Query`` finds, page after page."""
        items: list[dict[str, Any]] = []
        more: dict[str, Any] = {}
        while True:
            answer = self._call("query", ConsistentRead=True, **args, **more)
            items += answer.get("Items", [])
            if "LastEvaluatedKey" not in answer:
                return items
            more = {"ExclusiveStartKey": answer["LastEvaluatedKey"]}

    def put_events(self, response_id: str, owner: str, batch: Batch) -> int:
        """Write ``batch``; in several items when it is too large for one (split between events). The number of
        writes it took."""
        data = encode_events(batch.data)
        if len(data) > PART_BYTES:
            events = batch.events()
            if len(events) < 2:
                raise StoreError(f"one event is {len(data)} bytes compressed, more than an item takes")
            half = len(events) // 2
            return sum(
                self.put_events(response_id, owner, Batch(group[0][0], group[-1][0], b"".join(e for _, e in group)))
                for group in (events[:half], events[half:])
            )
        self._call(
            "put_item",
            Item={
                **_key(response_id, "events", batch.first),
                "last": {"N": str(batch.last)},
                "owner": {"S": owner},
                "expires_at": self._expires(),
                "data": {"B": data},
            },
        )
        return 1

    def batches(self, response_id: str, from_seq: int) -> list[Batch]:
        """The batches whose first event is at ``from_seq`` or later, in order (every page of the query)."""
        items = self._query(
            KeyConditionExpression="id = :id AND part >= :from",
            ExpressionAttributeValues={":id": {"S": f"{response_id}#events"}, ":from": {"N": str(from_seq)}},
        )
        return [Batch(int(i["part"]["N"]), int(i["last"]["N"]), decode_events(i["data"]["B"])) for i in items]


def encode_events(data: bytes) -> bytes:
    import zlib

    return zlib.compress(data, 6)


def decode_events(data: bytes) -> bytes:
    import zlib

    return zlib.decompress(data)
