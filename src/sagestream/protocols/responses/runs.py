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

Events are written by :class:`EventLog`, a thread of the run's own, in batches: one ``PutItem`` once
:data:`FLUSH_S` has passed since the batch's first event, or at :data:`BATCH_BYTES`, or at the end; never one
write per token (400 tokens 25 ms apart take about 100 writes, not 400). A follower polls every
:data:`POLL_S`, so it sees an event at most about 0.2 s after the client that started the stream did (the run's
creator gets its events from the run itself, at the endpoint's cadence).

Every item carries ``owner`` (the digest :func:`~sagestream.protocols.responses.store.owner_of` makes) and
``expires_at`` (the store's TTL); another owner's run reads as missing.

Environment variables read: none.

Example::

    >>> [seq for seq, _ in split_events(b"event: a\\ndata: {}\\n\\n: pad\\n\\nevent: b\\ndata: {}\\n\\n", 7)]
    [7, 8]
    >>> is_terminal(b"event: response.completed\\ndata: {}\\n\\n")
    True
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sagestream.protocols.responses.store import PART_BYTES, DynamoStore, StoreError, decode, encode

__all__ = [
    "ACTIVE",
    "BATCH_BYTES",
    "FLUSH_S",
    "MAX_RUN_S",
    "POLL_S",
    "TERMINAL",
    "Batch",
    "EventLog",
    "RunState",
    "Runs",
    "follow",
    "is_terminal",
    "split_events",
]

logger = logging.getLogger(__name__)

ACTIVE = ("queued", "in_progress")
TERMINAL = frozenset({"completed", "incomplete", "failed", "cancelled"})
# A batch is written this long after its first event (or sooner, at BATCH_BYTES, or at the end). With POLL_S, what
# a follower waits beyond the run's own client: at most FLUSH_S + POLL_S and a write's and a read's round trips
# (about 0.2 s, within the 250 ms the docs promise); 400 tokens 25 ms apart take about 100 writes, not 400.
FLUSH_S = 0.1
BATCH_BYTES = 256 * 1024
# Longer than any invocation runs (Lambda's 15 minutes, and a minute more): a run still in progress after it is dead.
MAX_RUN_S = 16 * 60
# How often a follower asks the table for new events.
POLL_S = 0.1
_TERMINAL_EVENTS = (b"event: response.completed\n", b"event: response.incomplete\n", b"event: response.failed\n")


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


def is_terminal(event: bytes) -> bool:
    """Whether ``event`` ends the stream (``response.completed``, ``.incomplete`` or ``.failed``)."""
    return event.startswith(_TERMINAL_EVENTS)


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

        names = {f"#{n}": n for n in (*sets, "status", "owner", "background")}
        given = {f":{n}": v for n, v in sets.items()}
        given.update({f":expected{i}": {"S": s} for i, s in enumerate(expected)})
        given.update(values or {})
        expected_in = ", ".join(f":expected{i}" for i in range(len(expected)))
        if not also:
            names = {k: v for k, v in names.items() if k[1:] in sets or k == "#status"}
        try:
            self._call(
                "update_item",
                Key=_key(response_id, "state"),
                UpdateExpression="SET " + ", ".join(f"#{n} = :{n}" for n in sets),
                ConditionExpression=f"#status IN ({expected_in}){also}",
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
        keys = [_key(response_id, "job")]
        more: dict[str, Any] = {}
        while True:
            answer = self._call(
                "query",
                KeyConditionExpression="id = :id",
                ExpressionAttributeValues={":id": {"S": f"{response_id}#events"}},
                ProjectionExpression="id, part",
                ConsistentRead=True,
                **more,
            )
            keys += [{"id": i["id"], "part": i["part"]} for i in answer.get("Items", [])]
            if "LastEvaluatedKey" not in answer:
                break
            more = {"ExclusiveStartKey": answer["LastEvaluatedKey"]}
        for key in [*keys, _key(response_id, "state")]:
            self._call("delete_item", Key=key)

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
        out: list[Batch] = []
        more: dict[str, Any] = {}
        while True:
            answer = self._call(
                "query",
                KeyConditionExpression="id = :id AND part >= :from",
                ExpressionAttributeValues={":id": {"S": f"{response_id}#events"}, ":from": {"N": str(from_seq)}},
                ConsistentRead=True,
                **more,
            )
            for item in answer.get("Items", []):
                out.append(Batch(int(item["part"]["N"]), int(item["last"]["N"]), decode_events(item["data"]["B"])))
            if "LastEvaluatedKey" not in answer:
                return out
            more = {"ExclusiveStartKey": answer["LastEvaluatedKey"]}


def encode_events(data: bytes) -> bytes:
    import zlib

    return zlib.compress(data, 6)


def decode_events(data: bytes) -> bytes:
    import zlib

    return zlib.decompress(data)


class EventLog:
    """The events of one stream, written to the table in batches by a thread of its own (so that no token
    waits for DynamoDB): :meth:`add` each write's events, :meth:`close` at the end (flushes and waits).

    A failed write is logged and counted (``failures``); the stream it records goes on regardless.
    """

    def __init__(
        self,
        runs: Runs,
        response_id: str,
        owner: str,
        *,
        flush_s: float = FLUSH_S,
        batch_bytes: int = BATCH_BYTES,
        begin: Callable[[], None] | None = None,
        watch_s: float | None = None,
    ) -> None:
        self.runs = runs
        self.response_id = response_id
        self.owner = owner
        self.flush_s = flush_s
        self.batch_bytes = batch_bytes
        self.writes = 0
        self.failures = 0
        self._begin = begin  # run by the thread before its first write (a foreground run's state)
        # A background run's log also asks, every watch_s, whether the run was cancelled (or deleted): on this
        # thread, so the stream only reads a flag (`stopped`) between two deltas, never the table.
        self.watch_s = watch_s
        self.stopped = False
        self._watched = time.monotonic()
        self._pending: list[bytes] = []
        self._size = 0
        self._first = 0  # the first pending event's sequence number
        self._next = 0  # the next event's
        self._since = 0.0
        self._closed = False
        self._lock = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"events-{response_id}", daemon=True)
        self._thread.start()

    def add(self, data: bytes, first_seq: int, count: int) -> None:
        """``count`` events (and perhaps padding comments) numbered from ``first_seq``."""
        if not count:
            return
        with self._lock:
            if not self._pending:
                self._first, self._since = first_seq, time.monotonic()
            self._pending.append(data)
            self._size += len(data)
            self._next = first_seq + count
            if self._size >= self.batch_bytes:
                self._lock.notify()
            elif len(self._pending) == 1:
                self._lock.notify()  # the thread starts its timer

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._thread.join()

    def _take(self) -> Batch | None:
        """The next batch once it is due (None when closed and nothing is left); a background run's log also
        wakes every ``watch_s`` to ask whether the run was cancelled."""
        while True:
            with self._lock:
                while True:
                    now = time.monotonic()
                    if self._pending:
                        due = self._since + self.flush_s - now
                        if self._closed or self._size >= self.batch_bytes or due <= 0:
                            batch = Batch(self._first, self._next - 1, b"".join(self._pending))
                            self._pending, self._size = [], 0
                            return batch
                    elif self._closed:
                        return None
                    else:
                        due = None
                    watch = None if self.watch_s is None else self._watched + self.watch_s - now
                    if watch is not None and watch <= 0:
                        break  # time to ask the table, outside the lock
                    waits = [w for w in (due, watch) if w is not None]
                    self._lock.wait(min(waits) if waits else None)
            self._watched = time.monotonic()
            try:
                if self.runs.cancelled(self.response_id):
                    self.stopped = True
                    self.watch_s = None  # once is enough
            except StoreError as exc:
                logger.warning("whether %s was cancelled could not be read: %s", self.response_id, exc)

    def _run(self) -> None:
        if self._begin is not None:
            try:
                self._begin()
            except StoreError as exc:
                self.failures += 1
                logger.error("the run of %s was not begun: %s", self.response_id, exc)
        while (batch := self._take()) is not None:
            try:
                self.writes += self.runs.put_events(self.response_id, self.owner, batch)
            except StoreError as exc:
                self.failures += 1
                logger.error("events %d-%d of %s were not kept: %s", batch.first, batch.last, self.response_id, exc)


def follow(
    runs: Runs,
    response_id: str,
    owner: str,
    after: int,
    *,
    until: float,
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[bytes]:
    """The run's events after sequence number ``after``, as they are written, until its terminal event (or its
    state is terminal and no event is left) or the monotonic time ``until``; ``b""`` after each poll that found
    nothing (the caller's chance to send a keep-alive)."""
    seen = after
    from_seq = 0  # the first poll reads every batch: one that began before `after` may end after it
    state_checked = 0.0
    while time.monotonic() < until:
        found = False
        for batch in runs.batches(response_id, from_seq):
            for seq, event in batch.events():
                if seq <= seen:
                    continue
                seen = seq
                found = True
                yield event
                if is_terminal(event):
                    return
            from_seq = batch.last + 1
        if found:
            continue
        now = time.monotonic()
        if now - state_checked >= 4 * poll_s:
            state_checked = now
            state = runs.state(response_id, owner)
            if state is None or state.terminal:
                # Ended without a terminal event (cancelled, or cut): whatever was written last is read once more.
                for batch in runs.batches(response_id, from_seq):
                    for seq, event in batch.events():
                        if seq > seen:
                            seen = seq
                            yield event
                return
        yield b""
        sleep(poll_s)
