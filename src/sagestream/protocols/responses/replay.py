"""Following a run: ``GET /v1/responses/{response_id}?stream=true&starting_after=N`` replays the run's events after
N from its log, then each new one until its end (:func:`sagestream.protocols.responses.eventlog.follow`; about
0.2 s behind the run, the log's batching and polling). A resume at or past the end is an event stream still.

Environment variables read: none.

Example::

    >>> starting_after({}), starting_after({"starting_after": "7"}), starting_after({"starting_after": "x"})
    (-1, 7, -2)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sagestream.errors import APIError
from sagestream.http import SSE_HEADERS
from sagestream.protocols._wire import dumps
from sagestream.protocols.responses import stored
from sagestream.protocols.responses.eventlog import follow as follow_events
from sagestream.protocols.responses.runs import Runs
from sagestream.protocols.responses.store import StoreError, owner_of
from sagestream.protocols.responses.stored import runs_for
from sagestream.relay import KEEPALIVE_EVENT

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = ["replay", "starting_after"]


def starting_after(query: Mapping[str, str]) -> int:
    """The sequence number a follower resumes after (-1: from the start; -2: not a whole number)."""
    after = query.get("starting_after")
    try:
        return -1 if after is None else int(after)
    except ValueError:
        return -2


def replay(call: Any, cfg: Config, caller: str, response_id: str, deadline: float) -> None:
    """The run's events after ``starting_after`` (all of them without it), then each new one until its end."""
    after = starting_after(call.request.query)
    if after < -1:
        raise APIError.invalid_request(
            "'starting_after' must be a whole number: the sequence_number of the last event received.",
            param="starting_after",
        )
    runs, owner = runs_for(cfg), owner_of(caller)
    try:
        state = runs.state(response_id, owner)
        found = state is not None or stored.store_for(cfg).get(response_id, owner) is not None  # type: ignore[union-attr]
    except StoreError as exc:
        raise stored.unavailable(exc) from exc
    if not found:
        raise stored.not_found(response_id)
    if state is None:
        raise APIError.invalid_request(
            f"The response '{response_id}' has no stored events to stream: only a background response, or a "
            "stream that ran with RESPONSES_RESUMABLE_STREAMS on, can be streamed again.",
            param="stream",
        )
    _follow(call, runs, response_id, owner, after, deadline, cfg.sse_keepalive_s, {})


def _follow(
    call: Any,
    runs: Runs,
    response_id: str,
    owner: str,
    after: int,
    deadline: float,
    keepalive_s: float,
    headers: Mapping[str, str],
) -> None:
    """Write the run's events after ``after`` as SSE until its end (or the deadline: the client resumes from the
    last ``sequence_number`` it got); an SSE comment after each ``keepalive_s`` without one."""
    writer, record = call.writer, call.record
    record.streamed = True
    sse = {**SSE_HEADERS, **headers}
    last_write = time.monotonic()
    try:
        for event in follow_events(runs, response_id, owner, after, until=deadline):
            now = time.monotonic()
            if event:
                writer.write(event, 200, sse)
                record.output_deltas += 1
                last_write = now
            elif not writer.started or now - last_write >= keepalive_s:
                writer.write(KEEPALIVE_EVENT, 200, sse)  # the first at once: the client knows it is following
                record.keepalives += 1
                last_write = now
        if not writer.started:
            # Resumed at or past its last event (its run has ended): an event stream still, with the route's
            # headers, holding only a comment that says so (every response writes a body byte).
            writer.write(f": no events after sequence number {after}\n\n".encode(), 200, sse)
    except StoreError as exc:
        err = stored.unavailable(exc)
        if not writer.started:
            raise err from exc
        record.fail(err)
        error = {"type": "error", "code": err.code, "message": err.message, "param": err.param}
        writer.write(b"event: error\ndata: " + dumps(error) + b"\n\n", 200, sse)
