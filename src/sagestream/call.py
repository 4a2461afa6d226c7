"""One invocation as the route handlers see it: the request, the writer of its answer, Lambda's context and the
invocation's log record, and what the walk learns on the way (the encoder, the upstream ids, the caller).

Example::

    >>> Call.__struct_fields__
    ('request', 'writer', 'context', 'record', 'params', 'encoder', 'ids', 'identity', 'payload', 'quota', 'after')
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from sagestream.http import Request, Writer
from sagestream.lambda_runtime import LambdaContext
from sagestream.record import StreamRecord

if TYPE_CHECKING:
    from sagestream.identity import Identity
    from sagestream.protocols import StreamEncoder
    from sagestream.quotas import Reservation
    from sagestream.sagemaker_ids import UpstreamIds

__all__ = ["Call"]


class Call(msgspec.Struct, forbid_unknown_fields=True):
    """One invocation as the route handlers see it."""

    request: Request
    writer: Writer
    context: LambdaContext
    record: StreamRecord
    params: dict[str, str] = msgspec.field(default_factory=dict)  # the route's path parameters ({response_id})
    encoder: StreamEncoder | None = None  # a streamed answer's, once it is made: it writes errors after the start
    ids: UpstreamIds | None = None  # what the upstream calls carry besides the body; set by the completion routes
    identity: Identity | None = None  # the caller's verified sign-in, with AUTH_MODE=jwt
    payload: bytes | None = None  # the upstream body, once made (a background run's job keeps it)
    quota: Reservation | None = None  # what the request holds of its caller's quota (sagestream.metering)
    # What runs once the response is closed (the quota's settle): the client has its whole answer by then.
    after: list[Callable[[], None]] = msgspec.field(default_factory=list)

    def deadline(self, margin_ms: int) -> float:
        """When the invocation's work must have ended (a :func:`time.monotonic` value): ``margin_ms`` before
        Lambda's own deadline. The one place the formula is written."""
        return time.monotonic() + (self.context.get_remaining_time_in_millis() - margin_ms) / 1000
