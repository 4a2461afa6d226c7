"""A local stand-in of an API Gateway REST API streaming the function (``Front=RestApi``): ``make run FRONT=rest``.

The HTTP side is the local Function URL's (:class:`~sagestream_local.function_url.FunctionURL`: the same
framing rules, the same streaming of each chunk the moment it arrives, the same runtime API behind it); what
differs is what API Gateway does before the function runs and what the function receives:

- the event is the REST proxy integration's payload 1.0 (:func:`sagestream.function_url.build_rest_event`),
  for a ``{proxy+}`` resource with the stage mapped at the root, as the template's custom domain maps it;
- with keys (``AUTH_MODE=api_key``; the keys of ``API_KEYS``), every request needs one of them as ``x-api-key``,
  as the template's methods do (``ApiKeyRequired``): a missing or unknown key is API Gateway's own 403
  ``{"message":"Forbidden"}``, never the function's; the event carries the key and its id
  (``requestContext.identity.apiKey``/``apiKeyId``), which the function logs as the caller;
- each key has the usage plan's rate and burst (``ThrottleRate``, ``ThrottleBurst``): past them, API Gateway's
  429 ``{"message":"Too Many Requests"}``. API Gateway's throttle is a token bucket (its guide, "Throttle requests
  to your REST APIs"): ``burst`` tokens, refilled at ``rate`` a second, one per request. Written here, in a dozen
  lines, rather than taken from a rate-limiting package: it is that bucket and nothing more.

Not emulated: CORS (the template configures none on the REST API: preflights reach the function), the
execute-api URL's stage prefix, AWS_IAM signatures, WAF.

Example::

    >>> plan = UsagePlan(rate=1, burst=2)
    >>> [plan.admit("key-a", now=0.0) for _ in range(3)], plan.admit("key-a", now=1.0)
    ([True, True, False], True)
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from sagestream.function_url import build_rest_event
from sagestream_local.function_url import FunctionURL
from sagestream_local.runtime_api import Pool

FORBIDDEN = (403, {"Content-Type": "application/json", "x-amzn-ErrorType": "ForbiddenException"})
TOO_MANY = (429, {"Content-Type": "application/json", "x-amzn-ErrorType": "TooManyRequestsException"})
THROTTLE_RATE = 10.0  # the template's defaults
THROTTLE_BURST = 20


class UsagePlan:
    """The usage plan's throttle: a token bucket per key."""

    def __init__(self, rate: float = THROTTLE_RATE, burst: int = THROTTLE_BURST) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, tuple[float, float]] = {}  # key id: (tokens, when counted)
        self._lock = threading.Lock()

    def admit(self, key_id: str, now: float) -> bool:
        with self._lock:
            tokens, then = self._buckets.get(key_id, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - then) * self.rate)
            admitted = tokens >= 1.0
            self._buckets[key_id] = (tokens - 1.0 if admitted else tokens, now)
            return admitted


def key_id(key: str) -> str:
    """A stable id for a key (API Gateway's are ten letters and digits), which tells nothing of the key."""
    return hashlib.sha256(key.encode()).hexdigest()[:10]


class ApiGateway:
    """What API Gateway does before the function: the key check and the usage plan, and the 1.0 event."""

    def __init__(self, keys: Iterable[str] = (), plan: UsagePlan | None = None, stage: str = "api") -> None:
        self.keys = {key: key_id(key) for key in keys}
        self.plan = plan or UsagePlan()
        self.stage = stage

    def gate(self, method: str, raw_path: str, headers: Mapping[str, str]) -> tuple[int, dict[str, str], bytes] | None:
        """API Gateway's own answer, or None to invoke the function."""
        if not self.keys:
            return None
        presented = (headers.get("x-api-key") or "").strip()
        if presented not in self.keys:
            return (*FORBIDDEN, _body("Forbidden", method))
        if not self.plan.admit(self.keys[presented], time.monotonic()):
            return (*TOO_MANY, _body("Too Many Requests", method))
        return None

    def event(self, *, headers: Iterable[tuple[str, str]], **request: Any) -> dict[str, Any]:
        pairs = list(headers)
        presented = next((v.strip() for k, v in pairs if k.lower() == "x-api-key"), None)
        known = presented if presented in self.keys else None
        return build_rest_event(
            headers=pairs,
            stage=self.stage,
            api_key=known,
            api_key_id=self.keys[known] if known else None,
            **request,
        )


def _body(message: str, method: str) -> bytes:
    return b"" if method == "HEAD" else json.dumps({"message": message}, separators=(",", ":")).encode()


def rest_front(pool: Pool, gateway: ApiGateway, **front: Any) -> FunctionURL:
    """The local front with API Gateway's REST behaviour: its gate before the function, its event to it."""
    return FunctionURL(pool, interceptor=gateway.gate, event_builder=gateway.event, **front)
