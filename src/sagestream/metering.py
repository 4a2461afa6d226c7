"""Where a completion meets its caller's quota (:mod:`sagestream.quotas`): reserved before the upstream call,
settled once the client has the whole answer (after the stream is closed: the settle never delays its end).

:func:`reserve` is called by the app's completion pipeline once the upstream body is made, before the answer
starts (a refusal is still a status): it tells the answer's writer the rate-limit headers, and leaves the
settle to run after the response is closed (:attr:`sagestream.call.Call.after`), whatever ends the answer: its
last byte, a fault, a deadline, or a client that left. A background Responses run is settled by the run
itself, in the invocation that generates it (:func:`settle_job`).

Example::

    >>> style_of("messages"), style_of("chat")
    ('anthropic', 'openai')
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sagestream import quotas
from sagestream.errors import APIError

if TYPE_CHECKING:
    from sagestream.auth import Authenticator
    from sagestream.call import Call
    from sagestream.config import Config
    from sagestream.protocols import ClientAPI, Parsed
    from sagestream.record import StreamRecord

__all__ = ["reserve", "settle", "settle_job", "style_of"]

logger = logging.getLogger(__name__)


def style_of(kind: str) -> str:
    """Whose rate-limit headers an API's answers carry: Anthropic's on ``/v1/messages``, OpenAI's elsewhere."""
    return "anthropic" if kind == "messages" else "openai"


def reserve(
    meter: quotas.DynamoQuotas,
    auth: Authenticator,
    call: Call,
    cfg: Config,
    api: ClientAPI,
    parsed: Parsed,
    payload: bytes,
    *,
    tokens: bool = True,
) -> None:
    """Reserve the request's worst case against its caller's limits (``tokens`` False: a count, which is a
    request and no tokens, as Anthropic limits count_tokens by requests alone); a 429 (over a limit) or, with DynamoDB
    unreachable and ``QUOTAS_UNAVAILABLE=closed``, a 503; nothing else can come of it."""
    record, request = call.record, call.request
    identity = call.identity
    who = quotas.subject(
        cfg.auth_mode,
        issuer=cfg.jwt_issuer,
        sub=identity.sub if identity is not None else None,
        groups=identity.groups if identity is not None else (),
        key=auth.matched_key(request.headers),
        caller=request.caller,
        source_ip=request.source_ip,
    )
    record.quota_subject = who.names[0]
    prompt = quotas.estimate_tokens(payload) if tokens else 0
    most = parsed.request.effective_max_tokens or cfg.max_tokens_limit or meter.policy.reserve_max_tokens
    completion = most if tokens else 0
    # Bounded by the answer's own deadline too (storage caps one call at a few seconds): a table that does not
    # answer is a 503 long before the function's timeout, never the front's 502.
    deadline = call.deadline(cfg.deadline_margin_ms)
    try:
        held = meter.reserve(
            who, prompt, completion, call.context.aws_request_id, style=style_of(api.kind), deadline=deadline
        )
    except quotas.QuotaUnavailable as exc:
        record.quota = "unavailable"
        logger.error("the quota of %s could not be checked: %s", who.names[0], exc)
        if cfg.quotas_unavailable == "open":
            return  # QUOTAS_UNAVAILABLE=open: served uncounted
        raise APIError(
            503,
            "Usage limits cannot be checked right now. Try again shortly.",
            type="server_error",
            code="quota_unavailable",
            headers={"retry-after": str(quotas.UNAVAILABLE_RETRY_S)},
        ) from exc
    except APIError as err:
        record.quota = "refused"
        logger.info("%s is over its limit: %s", who.names[0], err.message)
        raise
    if held is None:
        return  # no limit applies to this caller
    record.quota = "reserved"
    call.writer.extra_headers.update(held.headers(style_of(api.kind)))
    call.quota = held
    if not tokens:
        held.settled = True  # a count: its request is counted, and it has no tokens to settle
        return
    context = call.context
    call.after.append(lambda: settle(meter, record, held, lambda: context.get_remaining_time_in_millis() / 1000))


def settle(meter: quotas.DynamoQuotas, record: StreamRecord, held: quotas.Reservation, time_left: Any = None) -> None:
    """Charge the reservation what the request really used (the record's counts), unless a background run
    has taken it over, or no token limit applies to the caller (then its requests are all that count)."""
    if held.handed_off or held.settled:
        return
    held.settled = True
    if not held.counts_tokens:
        return
    _charge(meter, record, held.items, held.request_id, held.prompt_estimate, time_left)


def settle_job(meter: quotas.DynamoQuotas | None, record: StreamRecord, job: dict[str, Any] | None) -> None:
    """A background run's settle, of the reservation its job carries (:meth:`quotas.Reservation.job`)."""
    if meter is not None and job:
        record.quota = "reserved"
        if job.get("tokens", True):
            _charge(meter, record, job["items"], str(job["request_id"]), int(job["estimate"]))


def _charge(
    meter: quotas.DynamoQuotas,
    record: StreamRecord,
    items: list[Any],
    request_id: str,
    estimate: int,
    time_left: Any = None,
) -> None:
    """Settle ``items`` to the record's usage; a settle that fails is logged with its amounts and counted,
    never raised (the client has its answer)."""
    used = quotas.tokens_used(record.prompt_tokens, record.usage_tokens, record.output_deltas, estimate)
    record.quota_tokens = used
    try:
        attempts = meter.settle(items, request_id, used, time_left=time_left)
    except quotas.QuotaUnavailable as exc:
        record.quota_settle_failed = True
        logger.error("%s", exc)
        return
    record.quota_settle_retries = max(0, attempts - 1)
