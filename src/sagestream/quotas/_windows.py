"""The counting windows (the UTC minute, day and month: :func:`windows`), and what they tell a client: the
rate-limit headers (:func:`rate_headers`, OpenAI's or Anthropic's) and the 429 of a window without room
(:func:`refusal`).

Environment variables read: none.

Example::

    >>> [(w.name, w.start, w.reset_s) for w in windows(Limits(requests_per_minute=5, tokens_per_day=9), 90061.5)]
    [('minute', '1501', 58.5), ('day', '1970-01-02', 82738.5)]
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Mapping
from typing import NamedTuple

from sagestream.errors import APIError
from sagestream.quotas._policy import Limits

__all__ = ["KEEP_AFTER_S", "TOKEN_LIMIT", "Held", "Window", "duration", "rate_headers", "refusal", "windows"]

# A window's item outlives it by this much (DynamoDB's TTL deletes it within days after).
KEEP_AFTER_S = 3600


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


# The token limit that counts in each window.
TOKEN_LIMIT = {"minute": "tokens_per_minute", "day": "tokens_per_day", "month": "tokens_per_month"}


class Held(NamedTuple):
    """One window's item as a reservation left it: what it took, and the counts after."""

    window: Window
    pk: str
    tokens: int  # reserved in this window
    used_tokens: int
    used_requests: int


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
        h, limit = held.get(name), limits.get(TOKEN_LIMIT[name])
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
    rpm, token_limit = limits.get("requests_per_minute"), limits.get(TOKEN_LIMIT[window.name])
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
