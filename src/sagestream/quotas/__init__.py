"""Per-caller quotas: requests and tokens per minute, tokens per day and per month, counted in DynamoDB.

``QUOTAS`` turns them on (off by default). Its value is either the default limits of every caller as words
(``tokens_per_minute=20000 requests_per_minute=30``), or a JSON :class:`Policy`: ``default`` limits,
``groups`` of limits, and ``callers`` who get a group (by its name) or limits of their own::

    {"default": {"tokens_per_minute": 20000, "tokens_per_day": 500000},
     "groups": {"batch": {"tokens_per_minute": 200000, "tokens_per_day": null}},
     "callers": {"key:ci": "batch", "jwt:3f1c...": {"requests_per_minute": 5}}}

A limit left out of a group or caller is the default's; ``null`` is no limit; ``0`` refuses every request.

**Who a caller is** (:func:`subject`): the identity the function already checks. A JWT's subject
(``jwt:<sub>``, and its ``cognito:groups`` or ``groups`` claim names the groups it is in), an API key by
its name where ``API_KEYS_PARAMETER`` holds a JSON object (``key:<name>``) and always by its fingerprint
(``key:`` and the first 16 hex digits of its SHA-256: the table never holds a key), the id of the key
API Gateway checked (``apikey:<id>``), the signing IAM principal (``iam:<arn>``), and with
``AUTH_MODE=none`` the source address (``ip:<address>``).

**Counted exactly** (:class:`DynamoQuotas`). One item per caller and window (the UTC minute, day and
month, only those with a limit), keyed by a digest of the caller and the window's start, with DynamoDB's
TTL attribute ``expires_at``. Before the upstream call a conditional ``UpdateItem`` per window *reserves*
the request's worst case (the prompt's estimate, its UTF-8 bytes / 3 rounded up, plus its ``max_tokens``;
capped at the window's token limit, so that one large request can still run alone): DynamoDB applies it
only if the window still has room for all of it, so requests that run at once can never together pass a
limit with their reservations, whichever environments serve them. Several windows are asked at once
(threads: one round trip); if one refuses, what the others took is given back. Once the response is closed,
one ``UpdateItem`` per item *settles* it to the tokens really used: the container's usage where it reported one
(the function asks for it on every stream), else the estimate and the deltas written; a client that left is
charged what was generated until then, and a request that generated nothing is charged nothing. A write is
asked again (3 attempts) only when DynamoDB said it did not apply it (throttled, its own fault, a
transaction's lock) or the connection never opened; one whose answer was lost is not repeated, so nothing
counts twice. A settle not applied is logged with its items and amounts and counted (``QuotaSettleFailures``).
What the reservation could not bound still counts when it settles: a prompt the estimate under-counted, a
completion longer than ``reserve_max_tokens`` where nothing bounds it, one request larger than the window.

**Refusals**: 429 in the route's own error shape, with ``Retry-After`` (and ``retry-after-ms``) until the
window's end; a day's or month's budget spent is ``insufficient_quota`` with ``x-should-retry: false``
(the SDKs' retries would only fail again). The answer's rate-limit headers (:meth:`Reservation.headers`),
on successes too: OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``, and for the
budgets ``x-ratelimit-{limit,remaining}-tokens-{day,month}``; Anthropic's ``anthropic-ratelimit-*`` on
``/v1/messages``.

DynamoDB unreachable, slow, or refusing the function: every call is bounded in total (:mod:`sagestream.storage`,
3 s at most); ``QUOTAS_UNAVAILABLE`` ``closed`` (the default) answers 503 ``quota_unavailable`` with
``Retry-After``, ``open`` serves the request uncounted; both log it and count ``QuotaUnavailable``. Never a 500.

A module per job, their public names all here: :mod:`~sagestream.quotas._policy` (``QUOTAS`` read, the limits a
caller gets), :mod:`~sagestream.quotas._callers` (who a request counts against),
:mod:`~sagestream.quotas._estimates` (what is reserved, what is charged), :mod:`~sagestream.quotas._windows` (the
windows, the rate-limit headers and the 429s), :mod:`~sagestream.quotas._counter` (the counts in DynamoDB).

Environment variables read: none (``QUOTAS``, ``QUOTAS_TABLE``, ``QUOTAS_UNAVAILABLE`` through
:mod:`sagestream.config`); botocore reads the usual AWS ones, ``AWS_ENDPOINT_URL_DYNAMODB`` included.

Example::

    >>> policy = parse_policy("tokens_per_minute=1000 requests_per_minute=10")
    >>> policy.limits_for(Subject("key:ab", ("key:ab",))).tokens_per_minute
    1000
    >>> [(w.name, w.start, w.reset_s) for w in windows(Limits(requests_per_minute=5, tokens_per_day=9), 90061.5)]
    [('minute', '1501', 58.5), ('day', '1970-01-02', 82738.5)]
"""

from __future__ import annotations

from sagestream.quotas._callers import Subject, subject
from sagestream.quotas._counter import (
    ATTEMPTS,
    SETTLE_MIN_LEFT_S,
    UNAVAILABLE_RETRY_S,
    DynamoQuotas,
    QuotaUnavailable,
    Reservation,
)
from sagestream.quotas._estimates import MEDIA_TOKENS, estimate_tokens, tokens_used
from sagestream.quotas._policy import LIMIT_NAMES, NO_LIMITS, RESERVE_MAX_TOKENS, Limits, Policy, parse_policy
from sagestream.quotas._windows import KEEP_AFTER_S, Held, Window, duration, rate_headers, refusal, windows

__all__ = [
    "ATTEMPTS",
    "KEEP_AFTER_S",
    "LIMIT_NAMES",
    "MEDIA_TOKENS",
    "NO_LIMITS",
    "RESERVE_MAX_TOKENS",
    "SETTLE_MIN_LEFT_S",
    "UNAVAILABLE_RETRY_S",
    "DynamoQuotas",
    "Held",
    "Limits",
    "Policy",
    "QuotaUnavailable",
    "Reservation",
    "Subject",
    "Window",
    "duration",
    "estimate_tokens",
    "parse_policy",
    "rate_headers",
    "refusal",
    "subject",
    "tokens_used",
    "windows",
]
