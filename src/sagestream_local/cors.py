"""The CORS answers of a Function URL, for local runs, from the same ``ALLOWED_ORIGINS`` the template passes on.

On AWS the Function URL answers preflights itself and adds the CORS headers to every response; the
function never sees either. Locally :class:`Cors` does the same through the front's two hooks: ``preflight``
answers an ``OPTIONS`` that carries ``Origin`` and ``Access-Control-Request-Method`` before the function,
``headers`` adds ``Access-Control-Allow-Origin`` and ``Access-Control-Expose-Headers`` to a response whose
request came from an allowed origin. Methods, headers, exposed headers and max age are those of
``template.yaml``'s ``FunctionUrlConfig.Cors``; this module owns the lists and ``tests/deploy`` checks
that the template says the same.

Environment variables read (by :class:`~sagestream_local.stack.LocalStack`): ``ALLOWED_ORIGINS``,
comma-separated origins or ``*`` (the default, as in the template).

Example::

    >>> cors = Cors.from_setting("https://chat.example.com")
    >>> cors.headers({"origin": "https://chat.example.com"})["Access-Control-Allow-Origin"]
    'https://chat.example.com'
    >>> cors.headers({"origin": "https://elsewhere.example"})
    {}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# As template.yaml's FunctionUrlConfig.Cors (tests/deploy compares them).
ALLOW_METHODS = ("GET", "POST")
# authorization carries the API key (Bearer) or a SigV4 signature; the x-amz-* headers are the rest of a
# signed browser request.
AUTH_HEADERS = (
    "authorization",
    "content-type",
    "x-api-key",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
)
# What the OpenAI JS SDK sends from a browser (openai npm 6.x: internal/detect-platform.mjs, client.mjs):
# its platform headers on every request, its retry count and timeout, the helper and polling headers of
# its helpers, the organization, project and beta headers, and an idempotency key where a client sets one.
# A preflight that asks for one header not allowed fails the whole call, so all of them are here.
SDK_HEADERS = (
    "x-stainless-lang",
    "x-stainless-package-version",
    "x-stainless-os",
    "x-stainless-arch",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-retry-count",
    "x-stainless-timeout",
    "x-stainless-helper-method",
    "x-stainless-poll-helper",
    "x-stainless-custom-poll-interval",
    "openai-organization",
    "openai-project",
    "openai-beta",
    "idempotency-key",
)
# What the Anthropic TS SDK sends from a page (@anthropic-ai/sdk 1.x: client.mjs buildHeaders, its helpers)
# beside x-api-key and the x-stainless-* above: the API version on every request, the opt-in its browser
# mode announces, beta flags where a client sets them (/v1/messages refuses the ones it cannot honour, in
# Anthropic's shape: a preflight failure would say nothing), and the helper name of messages.stream(); the
# workspace and user-profile headers its workspace_id / user_profile_id parameters send, for the same reason.
ANTHROPIC_SDK_HEADERS = (
    "anthropic-version",
    "anthropic-dangerous-direct-browser-access",
    "anthropic-beta",
    "x-stainless-helper",
    "anthropic-workspace-id",
    "anthropic-user-profile-id",
)
ALLOW_HEADERS = AUTH_HEADERS + SDK_HEADERS + ANTHROPIC_SDK_HEADERS
# Response headers a page's script may read: the request id (to find the log record; request-id is where the
# Anthropic SDK reads it on /v1/messages), and what the SDKs' retry logic reads (without them a browser SDK
# would retry what the function said not to, at once), and which upstream served a model with fallbacks.
EXPOSE_HEADERS = (
    "x-request-id",
    "x-should-retry",
    "retry-after",
    "retry-after-ms",
    "request-id",
    "x-sagestream-target",
    # QUOTAS' rate-limit headers (sagestream.quotas), for a page that shows what is left.
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "x-ratelimit-limit-tokens-day",
    "x-ratelimit-remaining-tokens-day",
    "x-ratelimit-limit-tokens-month",
    "x-ratelimit-remaining-tokens-month",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-tokens-day-limit",
    "anthropic-ratelimit-tokens-day-remaining",
    "anthropic-ratelimit-tokens-month-limit",
    "anthropic-ratelimit-tokens-month-remaining",
)
MAX_AGE_S = 86400


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


@dataclass(frozen=True)
class Cors:
    origins: tuple[str, ...]  # "*" alone: any origin

    @classmethod
    def from_setting(cls, value: str | None) -> Cors:
        origins = tuple(o.strip().rstrip("/") for o in (value if value is not None else "*").split(",") if o.strip())
        return cls(origins)

    def allow_origin(self, origin: str | None) -> str | None:
        """The ``Access-Control-Allow-Origin`` value for a request from ``origin``, or None."""
        if not origin:
            return None
        if "*" in self.origins:
            return "*"
        return origin if origin.rstrip("/") in self.origins else None

    def headers(self, request_headers: Mapping[str, str]) -> dict[str, str]:
        """What a streamed response gets on top of the function's own headers."""
        allowed = self.allow_origin(_lower(request_headers).get("origin"))
        if allowed is None:
            return {}
        return {
            "Access-Control-Allow-Origin": allowed,
            "Access-Control-Expose-Headers": ", ".join(EXPOSE_HEADERS),
            "Vary": "Origin",
        }

    def preflight(
        self, method: str, path: str, request_headers: Mapping[str, str]
    ) -> tuple[int, dict[str, str], bytes] | None:
        """The answer to a preflight (before the function runs); None for every other request."""
        headers = _lower(request_headers)
        if method != "OPTIONS" or "origin" not in headers or "access-control-request-method" not in headers:
            return None
        allowed = self.allow_origin(headers["origin"])
        if allowed is None:
            return 200, {"Vary": "Origin"}, b""  # no CORS headers: the browser refuses the call
        wanted = [h.strip().lower() for h in headers.get("access-control-request-headers", "").split(",") if h.strip()]
        return (
            200,
            {
                "Access-Control-Allow-Origin": allowed,
                "Access-Control-Allow-Methods": ", ".join(ALLOW_METHODS),
                "Access-Control-Allow-Headers": ", ".join(h for h in wanted if h in ALLOW_HEADERS)
                or ", ".join(ALLOW_HEADERS),
                "Access-Control-Max-Age": str(MAX_AGE_S),
                "Vary": "Origin",
            },
            b"",
        )
