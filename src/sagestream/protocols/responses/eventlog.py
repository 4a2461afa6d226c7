"""The events of a run: written to the table in batches by a thread of the run's own (:class:`EventLog`), and
read back by a follower (:func:`follow`) while the run goes on, over the run's items
(:class:`~sagestream.protocols.responses.runs.Runs`).

A batch is one ``PutItem`` once :data:`FLUSH_S` has passed since its first event, or at :data:`BATCH_BYTES`, or
at the end; never one write per token (400 tokens 25 ms apart take about 100 writes, not 400). A follower polls
every :data:`POLL_S`, so it sees an event at most about 0.2 s after the run wrote it (FLUSH_S + POLL_S and a
write's and a read's round trips); the run's own client (a background stream's creator) gets its events from the
run itself, at the endpoint's cadence. A background run's log also watches for a cancel (or a delete) on its
thread, so the stream only reads a flag between two deltas, never the table.

Environment variables read: none.

Example::

    >>> is_terminal(b"event: response.completed\\ndata: {}\\n\\n"), is_terminal(b"event: response.created\\n")
    (True, False)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

from sagestream.protocols.responses.runs import Batch, Runs
from sagestream.protocols.responses.store import StoreError

__all__ = ["BATCH_BYTES", "FLUSH_S", "POLL_S", "EventLog", "follow", "is_terminal"]

logger = logging.getLogger(__name__)

# A batch is written this long after its first event (or sooner, at BATCH_BYTES, or at the end). With POLL_S, what
# a follower waits beyond the run's own client: at most FLUSH_S + POLL_S and a write's and a read's round trips
# (about 0.2 s, within the 250 ms the docs promise).
FLUSH_S = 0.1
BATCH_BYTES = 256 * 1024
# How often a follower asks the table for new events.
POLL_S = 0.1
_TERMINAL_EVENTS = (b"event: response.completed\n", b"event: response.incomplete\n", b"event: response.failed\n")


def is_terminal(event: bytes) -> bool:
    """Whether ``event`` ends the stream (``response.completed``, ``.incomplete`` or ``.failed``)."""
    return event.startswith(_TERMINAL_EVENTS)


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
