"""A Responses stream whose events are kept while it is written (:class:`ResumableEncoder`): a stored foreground
stream (``RESPONSES_RESUMABLE_STREAMS``), which another connection can follow while it runs, and every background
run, whose log also watches for a cancel (``stopped``, read by the pipeline between two deltas: ``wake_s``). What
it keeps is written by its log's thread; its end (the last batch, the run's state) runs once the response is
closed (``ended``, a :attr:`sagestream.call.Call.after` step).

Environment variables read: none.

Example::

    >>> CANCEL_CHECK_S
    0.5
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from sagestream.delta import Delta
from sagestream.errors import APIError
from sagestream.protocols.responses.encoder import ResponsesEncoder
from sagestream.protocols.responses.eventlog import EventLog
from sagestream.protocols.responses.runs import Runs
from sagestream.protocols.responses.store import StoreError, owner_of
from sagestream.protocols.responses.stored import runs_for

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = ["CANCEL_CHECK_S", "ResumableEncoder", "resumable"]

logger = logging.getLogger(__name__)

# How often a background run asks whether it was cancelled (a strongly consistent read of its state, on its log's
# thread), and so how long the upstream read waits at most before the pipeline sees the answer.
CANCEL_CHECK_S = 0.5


class ResumableEncoder:
    """A Responses stream's encoder that also hands each write's events to an
    :class:`~sagestream.protocols.responses.runs.EventLog`; :meth:`ended` (after the response is closed)
    closes it and ends the run. A background run's (``background``) was begun when it was queued, and its log
    watches for a cancel or a delete (``stopped``), which the pipeline reads between two deltas (``wake_s``)."""

    def __init__(self, inner: ResponsesEncoder, runs: Runs, owner: str, *, background: bool = False) -> None:
        self.inner = inner
        self.runs = runs
        self.owner = owner
        self.background = background
        self.wake_s = CANCEL_CHECK_S if background else None
        self.log: EventLog | None = None
        self._seq = 0
        if background:
            self.log = EventLog(runs, inner.id, owner, watch_s=CANCEL_CHECK_S)

    @property
    def final(self) -> bytes | None:
        return self.inner.final

    @property
    def stopped(self) -> bool:
        return self.log is not None and self.log.stopped

    @property
    def outcome(self) -> str:
        """The run's status as this encoder ends it."""
        if self.stopped:
            return "cancelled"
        final = self.inner.final
        return str(json.loads(final)["status"]) if final is not None else "failed"

    def _kept(self, data: bytes) -> bytes:
        if self.log is None:
            # Begun by the log's own thread, before its first batch: the first token waits for no write.
            snapshot = json.loads(self.inner.snapshot("in_progress"))
            self.log = EventLog(
                self.runs,
                self.inner.id,
                self.owner,
                begin=lambda: self.runs.begin(self.inner.id, self.owner, snapshot, background=False),
            )
        self.log.add(data, self._seq, self.inner.sequence - self._seq)
        self._seq = self.inner.sequence
        return data

    def encode(self, delta: Delta) -> bytes:
        data = self.inner.encode(delta)
        return self._kept(data) if data else data

    def done(self) -> bytes:
        return self._kept(self.inner.done())

    def error(self, err: APIError) -> bytes:
        return self._kept(self.inner.error(err))

    def ended(self) -> None:
        """After the response is closed, however it ended: the rest of its events written, and its state ended
        (a run deleted while it ran leaves nothing behind)."""
        if self.log is None:
            return
        if self.background and self.inner.final is None and self.inner.failed is None and not self.stopped:
            # Ended before its answer (the endpoint refused or failed before the stream): its followers are told.
            self.error(APIError(502, "The run ended before its answer.", type="server_error", code="server_error"))
        self.log.close()
        final = self.inner.final or self.inner.failed
        # No end event written: the client left, and the upstream stream was closed with it; or it was cancelled.
        response = json.loads(final) if final is not None else json.loads(self.inner.snapshot("failed"))
        if self.stopped:
            response["status"] = "cancelled"
        try:
            if (
                not self.runs.finish(self.inner.id, response["status"], response)
                and self.runs.state(self.inner.id, self.owner) is None
            ):
                self.runs.delete_items(self.inner.id)  # deleted while it ran: what it wrote since goes too
        except StoreError as exc:
            logger.error("the run of %s could not be ended: %s", self.inner.id, exc)


def resumable(encoder: ResponsesEncoder, cfg: Config, owner: str, *, background: bool = False) -> ResumableEncoder:
    """``encoder``, its events also kept for followers (``owner``: the caller, as the parse was told; a
    background run's: the digest its job keeps)."""
    return ResumableEncoder(encoder, runs_for(cfg), owner if background else owner_of(owner), background=background)
