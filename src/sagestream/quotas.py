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

DynamoDB unreachable, or refusing the function: ``QUOTAS_UNAVAILABLE`` ``closed`` (the default) answers
503 ``quota_unavailable`` with ``Retry-After``, ``open`` serves the request uncounted; both log it and
count ``QuotaUnavailable``. Never a 500.

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

import datetime
import hashlib
import logging
import math
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, NamedTuple

import msgspec

from sagestream.errors import APIError
from sagestream.storage import CALL_CAP_S, ConditionFailed, StorageError, Table

__all__ = [
    "DynamoQuotas",
    "Limits",
    "Policy",
    "QuotaUnavailable",
    "Reservation",
    "Subject",
    "estimate_tokens",
    "parse_policy",
    "tokens_used",
    "windows",
]

logger = logging.getLogger(__name__)

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Limit = NonNegative | None | msgspec.UnsetType
# What an inline image (or other medium) is estimated at: vision models take about 1-3 thousand tokens for one.
MEDIA_TOKENS = 1600
# The completion a request that sets no max_tokens reserves, where its model sets no MAX_TOKENS_LIMIT either.
RESERVE_MAX_TOKENS = 4096
# How long a refusal for want of DynamoDB asks the client to wait.
UNAVAILABLE_RETRY_S = 5
# A window's item outlives it by this much (DynamoDB's TTL deletes it within days after).
KEEP_AFTER_S = 3600


class QuotaUnavailable(Exception):
    """DynamoDB could not be asked, or refused the function (not a condition: a limit reached is a refusal)."""


class Limits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One set of limits; a field unset takes the default's, ``None`` is no limit."""

    requests_per_minute: Limit = msgspec.UNSET
    tokens_per_minute: Limit = msgspec.UNSET
    tokens_per_day: Limit = msgspec.UNSET
    tokens_per_month: Limit = msgspec.UNSET

    def over(self, base: Limits) -> Limits:
        """These limits, each unset one taken from ``base``."""
        pairs = zip(_values(self), _values(base), strict=True)
        return Limits(*(base_v if v is msgspec.UNSET else v for v, base_v in pairs))

    def get(self, name: str) -> int | None:
        value = getattr(self, name)
        return None if value is msgspec.UNSET else value

    @property
    def any(self) -> bool:
        return any(self.get(name) is not None for name in LIMIT_NAMES)


def _values(limits: Limits) -> tuple[Any, ...]:
    return tuple(getattr(limits, name) for name in LIMIT_NAMES)


LIMIT_NAMES: tuple[str, ...] = Limits.__struct_fields__
NO_LIMITS = Limits(None, None, None, None)


class Subject(NamedTuple):
    """Who a request counts against: ``key`` (what the counters are kept under), the names ``QUOTAS``'
    ``callers`` may give it, and the groups its sign-in says it is in."""

    key: str
    names: tuple[str, ...]
    groups: tuple[str, ...] = ()


class Policy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``QUOTAS`` as JSON: the default limits, named groups of limits, and callers' own (a group's name or limits)."""

    default: Limits = Limits()
    groups: dict[str, Limits] = {}
    callers: dict[str, str | Limits] = {}
    # The completion reserved for a request with no max_tokens whose model has no MAX_TOKENS_LIMIT.
    reserve_max_tokens: Annotated[int, msgspec.Meta(ge=1)] = RESERVE_MAX_TOKENS

    def limits_for(self, subject: Subject) -> Limits:
        """The caller's own limits if it has some, else its first group's (in the policy's order), else the
        default; every field set (``None``: no limit)."""
        for name in subject.names:
            own = self.callers.get(name)
            if own is not None:
                return (self.groups[own] if isinstance(own, str) else own).over(self.default).over(NO_LIMITS)
        for group, limits in self.groups.items():
            if group in subject.groups:
                return limits.over(self.default).over(NO_LIMITS)
        return self.default.over(NO_LIMITS)


def parse_policy(text: str) -> Policy:
    """``QUOTAS``' value: JSON (a :class:`Policy`) or ``name=value`` words (the default limits);
    :class:`ValueError` naming what is wrong.

    >>> parse_policy("tokens_per_hour=5")
    Traceback (most recent call last):
    ...
    ValueError: 'tokens_per_hour' is not a limit; the limits are requests_per_minute, tokens_per_minute, \
tokens_per_day, tokens_per_month
    """
    text = text.strip()
    if text.startswith("{"):
        try:
            policy = msgspec.json.decode(text, type=Policy)
        except msgspec.ValidationError as exc:
            raise ValueError(str(exc)) from None
        except msgspec.DecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        for caller, own in policy.callers.items():
            if isinstance(own, str) and own not in policy.groups:
                raise ValueError(f"caller {caller!r} is in group {own!r}, which 'groups' does not declare")
        return policy
    limits: dict[str, int | None] = {}
    for word in text.replace(",", " ").split():
        name, sep, value = word.partition("=")
        if name not in LIMIT_NAMES:
            raise ValueError(f"{name!r} is not a limit; the limits are {', '.join(LIMIT_NAMES)}")
        if not sep or not value.strip().isdigit():
            raise ValueError(f"{word!r}: a limit is name=N, N a whole number")
        limits[name] = int(value)
    if not limits:
        raise ValueError("no limit is set")
    return Policy(default=Limits(**limits))


def subject(
    auth_mode: str,
    *,
    issuer: str | None = None,
    sub: str | None = None,
    groups: tuple[str, ...] = (),
    key: tuple[str, str | None] | None = None,
    caller: str | None = None,
    source_ip: str | None = None,
) -> Subject:
    """Who a request counts against, from what the access check learnt: a token's ``issuer``, ``sub`` and
    ``groups``; the ``key`` the function checked (its SHA-256 in hex, and its name); the ``caller`` the front
    names (the IAM principal, or ``apikey:<id>`` of the key API Gateway checked); with ``AUTH_MODE=none`` the
    source address. An assumed role counts as its role, whatever its session's name: that name is the
    caller's to choose, and a fresh one would be a fresh quota. A federated user (``sts:GetFederationToken``)
    counts as its account's federated users together: its name is its minter's to choose, and the request
    names no minter (the Function URL's ``requestContext.authorizer.iam`` shows the federated user alone).

    >>> subject("api_key", key=("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "ci")).names
    ('key:ci', 'key:9f86d081884c7d65')
    >>> subject("iam", caller="arn:aws:sts::111122223333:assumed-role/app/any-session-name").key
    'iam:arn:aws:sts::111122223333:assumed-role/app'
    >>> subject("iam", caller="arn:aws:sts::111122223333:federated-user/any-name").key
    'iam:arn:aws:sts::111122223333:federated-user'
    """
    if sub is not None:
        return Subject(f"jwt:{issuer or ''}:{sub}", (f"jwt:{sub}",), groups)
    if key is not None:
        fingerprint = "key:" + key[0][:16]
        return Subject(fingerprint, ((f"key:{key[1]}",) if key[1] else ()) + (fingerprint,))
    if caller:
        if caller.startswith("apikey:"):
            return Subject(caller, (caller,))
        head, sep, _session = caller.rpartition("/")
        if sep and ":assumed-role/" in caller and head.count("/") == 1:
            principal = head  # the role, whatever the session's name
        elif sep and head.endswith(":federated-user") and head.startswith("arn:"):
            principal = head  # the account's federated users, whatever their names
        else:
            principal = caller
        return Subject(f"iam:{principal}", (f"iam:{principal}",))
    name = f"ip:{source_ip}" if auth_mode == "none" and source_ip else "anyone"
    return Subject(name, (name,))


def estimate_tokens(payload: bytes) -> int:
    """The prompt's tokens, estimated from the upstream body: its bytes / 3, rounded up (a tokenizer averages
    about 4 characters a token in English, fewer in code and in other scripts), except that an image or other
    medium sent inline (a base64 ``data:`` URL) is :data:`MEDIA_TOKENS`, not its bytes; the settle corrects it.

    >>> estimate_tokens(b'{"text": "abcdef", "url": "data:image/png;base64,' + b"A" * 300_000 + b'"}')
    1610
    """
    size, media = len(payload), 0
    if b";base64," in payload:
        import re

        for found in re.finditer(rb"data:[\w.+/-]+;base64,[A-Za-z0-9+/=]+", payload):
            size -= len(found.group())
            media += 1
    return math.ceil(size / 3) + media * MEDIA_TOKENS


def tokens_used(prompt_reported: int | None, completion_reported: int | None, written: int, estimate: int) -> int:
    """What a request is charged: the container's counts where it reported them (each part, else the
    estimate of the prompt and the deltas written); nothing when nothing was generated or reported.

    >>> tokens_used(12, 30, 29, 50), tokens_used(None, None, 7, 50), tokens_used(None, None, 0, 50)
    (42, 57, 0)
    """
    if completion_reported is None and written == 0:
        return 0
    prompt = estimate if prompt_reported is None else prompt_reported
    return prompt + (written if completion_reported is None else completion_reported)


class Window(NamedTuple):
    """One counting window: its name, when it began (the item's key), how long until it ends, its item's TTL."""

    name: str  # minute, day, month
    start: str
    reset_s: float
    expires_at: int


def windows(limits: Limits, now: float) -> list[Window]:
    """The windows ``limits`` counts in at ``now`` (a :func:`time.time`), shortest first."""
    found: list[Window] = []
    if limits.get("requests_per_minute") is not None or limits.get("tokens_per_minute") is not None:
        minute = int(now // 60)
        end = (minute + 1) * 60
        found.append(Window("minute", str(minute), end - now, end + KEEP_AFTER_S))
    day = datetime.datetime.fromtimestamp(now, datetime.UTC).date()
    if limits.get("tokens_per_day") is not None:
        end = _midnight(day + datetime.timedelta(days=1))
        found.append(Window("day", day.isoformat(), end - now, end + KEEP_AFTER_S))
    if limits.get("tokens_per_month") is not None:
        following = datetime.date(day.year + day.month // 12, day.month % 12 + 1, 1)
        end = _midnight(following)
        found.append(Window("month", day.strftime("%Y-%m"), end - now, end + KEEP_AFTER_S))
    return found


def _midnight(day: datetime.date) -> int:
    """The start of ``day``, UTC, as a :func:`time.time` value."""
    return int(datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.UTC).timestamp())


_TOKEN_LIMIT = {"minute": "tokens_per_minute", "day": "tokens_per_day", "month": "tokens_per_month"}


class Held(NamedTuple):
    """One window's item as a reservation left it: what it took, and the counts after."""

    window: Window
    pk: str
    tokens: int  # reserved in this window
    used_tokens: int
    used_requests: int


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
        return any(self.limits.get(_TOKEN_LIMIT[h.window.name]) is not None for h in self.held)

    @property
    def items(self) -> list[list[Any]]:
        """The items held, as ``[pk, tokens reserved]``."""
        return [[h.pk, h.tokens] for h in self.held]

    def headers(self, style: str, now: float | None = None) -> dict[str, str]:
        """The answer's rate-limit headers: ``openai`` or ``anthropic`` (``/v1/messages``)."""
        at = time.time() if now is None else now
        return rate_headers(self.limits, {h.window.name: h for h in self.held}, style, at)


def rate_headers(limits: Limits, held: Mapping[str, Held], style: str, now: float) -> dict[str, str]:
    """Rate-limit headers for the windows in ``held``.

    >>> w = Window("minute", "1", 12.5, 0)
    >>> h = rate_headers(Limits(10, 1000), {"minute": Held(w, "p", 40, 100, 3)}, "openai", 0.0)
    >>> h["x-ratelimit-remaining-tokens"], h["x-ratelimit-remaining-requests"], h["x-ratelimit-reset-tokens"]
    ('900', '7', '12.5s')
    """
    out: dict[str, str] = {}
    minute = held.get("minute")
    counts: list[tuple[str, int | None, int, float]] = []
    if minute is not None:
        counts.append(("requests", limits.get("requests_per_minute"), minute.used_requests, minute.window.reset_s))
        counts.append(("tokens", limits.get("tokens_per_minute"), minute.used_tokens, minute.window.reset_s))
    for kind, limit, used, reset_s in counts:
        if limit is None:
            continue
        remaining = str(max(0, limit - used))
        if style == "anthropic":
            at = datetime.datetime.fromtimestamp(math.ceil(now + reset_s), datetime.UTC)
            out[f"anthropic-ratelimit-{kind}-limit"] = str(limit)
            out[f"anthropic-ratelimit-{kind}-remaining"] = remaining
            out[f"anthropic-ratelimit-{kind}-reset"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        else:
            out[f"x-ratelimit-limit-{kind}"] = str(limit)
            out[f"x-ratelimit-remaining-{kind}"] = remaining
            out[f"x-ratelimit-reset-{kind}"] = duration(reset_s)
    for name in ("day", "month"):
        h, limit = held.get(name), limits.get(_TOKEN_LIMIT[name])
        if h is None or limit is None:
            continue
        remaining = str(max(0, limit - h.used_tokens))
        if style == "anthropic":
            out[f"anthropic-ratelimit-tokens-{name}-limit"] = str(limit)
            out[f"anthropic-ratelimit-tokens-{name}-remaining"] = remaining
        else:
            out[f"x-ratelimit-limit-tokens-{name}"] = str(limit)
            out[f"x-ratelimit-remaining-tokens-{name}"] = remaining
    return out


def duration(seconds: float) -> str:
    """A wait as OpenAI's reset headers write it: ``20ms``, ``1.5s``, ``6m0s``, ``1h2m3s``.

    >>> duration(0.02), duration(1.5), duration(360), duration(3723)
    ('20ms', '1.5s', '6m0s', '1h2m3s')
    """
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{hours}h" if hours else "") + f"{minutes}m{secs}s"


def refusal(
    window: Window, limits: Limits, used_tokens: int | None, used_requests: int | None, asked: int, style: str
) -> APIError:
    """The 429 for a window without room: which limit, how much is used, when it resets; the rate-limit
    headers as they stand (a count DynamoDB did not return is taken as the whole limit)."""
    headers = {
        "retry-after": str(max(1, math.ceil(window.reset_s))),
        "retry-after-ms": str(max(1, math.ceil(window.reset_s * 1000))),
    }
    rpm, token_limit = limits.get("requests_per_minute"), limits.get(_TOKEN_LIMIT[window.name])
    state = Held(
        window,
        "",
        0,
        token_limit or 0 if used_tokens is None else used_tokens,
        rpm or 0 if used_requests is None else used_requests,
    )
    headers.update(rate_headers(limits, {window.name: state}, style, time.time()))
    if window.name == "minute":
        full = used_requests >= rpm if rpm is not None and used_requests is not None else token_limit is None
        kind, limit, used, requested = (
            ("requests", rpm, used_requests, 1) if full else ("tokens", token_limit, used_tokens, asked)
        )
        what = "requests per minute (RPM)" if full else "tokens per minute (TPM)"
        message = (
            f"Rate limit reached for {what}: Limit {limit}, Used {_used(used)}, Requested {requested}. "
            f"Please try again in {duration(window.reset_s)}."
        )
        return APIError(429, message, type=kind, code="rate_limit_exceeded", headers=headers)
    message = (
        f"You have used your token budget for this {window.name}: Limit {token_limit}, Used {_used(used_tokens)}, "
        f"Requested {asked} (the prompt's estimate and max_tokens). It renews in {duration(window.reset_s)}; "
        "a lower max_tokens may fit what is left."
    )
    headers["x-should-retry"] = "false"
    return APIError(429, message, type="insufficient_quota", code="insufficient_quota", headers=headers)


def _used(value: int | None) -> str:
    return "unknown" if value is None else str(value)


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
            if limits.get(_TOKEN_LIMIT[window.name]) == 0:
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
        token_limit = limits.get(_TOKEN_LIMIT[window.name])
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
