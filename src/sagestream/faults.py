"""What a client sees for every fault on the way to and from the endpoint: one table, one function.

:func:`error_from` is where faults get statuses: botocore's and urllib3's exceptions, SageMaker's error
codes, the parsers' own exceptions (:mod:`sagestream.lines`, :mod:`sagestream.dialects`) and the function's
own deadline (:class:`DeadlineReached`) each map, by table, to an :class:`~sagestream.errors.APIError`
in OpenAI's shape; each client protocol then writes it in its own error shape.

Environment variables read: none.

Example::

    >>> from sagestream.lines import LineTooLong
    >>> err = error_from(LineTooLong(1024))
    >>> err.status, err.code
    (502, 'upstream_line_too_long')
    >>> error_from(DeadlineReached()).code
    'deadline_exceeded'
"""

from __future__ import annotations

import http.client
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

import botocore.eventstream
import botocore.exceptions
import msgspec
import urllib3.exceptions

from sagestream.dialects import DecodeError, UpstreamStreamError, error_message
from sagestream.errors import DEADLINE_EXCEEDED, MAX_MESSAGE_CHARS, APIError
from sagestream.lines import LineTooLong, UndecodableLine

__all__ = [
    "CAPACITY_FAULTS",
    "MODEL_NOT_READY",
    "NO_CAPACITY",
    "RATE_LIMITED",
    "DeadlineReached",
    "container_message",
    "error_from",
]

logger = logging.getLogger(__name__)

_GENERIC_500 = "The server could not call the model endpoint. The operator can find the reason in the function's log."


class DeadlineReached(Exception):
    """The function's time limit, less its margin, came before the endpoint's answer ended."""

    def __init__(
        self,
        message: str = "The answer was cut short: the function reached its time limit. Ask for fewer tokens, "
        "or raise the function timeout.",
    ) -> None:
        super().__init__(message)


# --- what a client sees for each fault ----------------------------------------------------------------------


class _Fault(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One row of the table: the status, code and message a fault becomes.

    ``message`` may name ``{detail}``, the fault's own text (a parser's message, SageMaker's message).
    ``private`` faults say nothing to the client and are logged for the operator instead.
    """

    status: int
    code: str
    message: str
    headers: Mapping[str, str] = msgspec.field(default_factory=dict)
    private: bool = False

    def error(self, detail: str) -> APIError:
        if self.private:
            logger.error("upstream call failed (%s): %s", self.code, detail)
            return APIError.internal(_GENERIC_500)
        message = self.message.format(detail=detail[:MAX_MESSAGE_CHARS])
        return APIError.upstream(self.status, message, code=self.code, headers=self.headers)


def _retry_after(seconds: int) -> dict[str, str]:
    """``Retry-After`` in whole seconds (RFC 9110); ``retry-after-ms`` is the OpenAI SDKs' finer spelling of it."""
    return {"Retry-After": str(seconds), "retry-after-ms": str(seconds * 1000)}


# The capacity faults (sagestream.capacity holds and falls back on them): the endpoint is fine, but busy, or has
# no copy of the model running. Their codes are what the client reads, and what the hold loop asks about.
NO_CAPACITY = "no_capacity"
MODEL_NOT_READY = "model_not_ready"
RATE_LIMITED = "rate_limited"
CAPACITY_FAULTS = frozenset({NO_CAPACITY, MODEL_NOT_READY, RATE_LIMITED})

# Throttling is retried by botocore (UPSTREAM_MAX_ATTEMPTS calls): when it reaches the client the budget is spent,
# and error_from adds x-should-retry: false.
_RATE_LIMITED = _Fault(429, RATE_LIMITED, "The model endpoint is busy. Retry after a moment.", _retry_after(1))
# botocore retries neither of these (a 400 ValidationError; a 429 whose code is not a throttling one): one call
# was made, and a later one can find a copy running, so the SDKs are told to retry, after the wait a copy needs.
# A scale-to-zero inference component takes minutes to start one: retrying within a second only adds calls.
_NO_CAPACITY = _Fault(
    503,
    NO_CAPACITY,
    "The model has no copy running (its inference component is scaled to zero, or scaling out); one is starting. "
    "Retry in a minute.",
    {**_retry_after(30), "x-should-retry": "true"},
)
_NOT_READY = _Fault(
    503,
    MODEL_NOT_READY,
    "The model is still being loaded on the endpoint. Retry in a few seconds.",
    {**_retry_after(5), "x-should-retry": "true"},
)
_UNAVAILABLE = _Fault(503, "service_unavailable", "The model endpoint is not available right now.")
_NO_ACCESS = _Fault(500, "internal_error", "", private=True)
_FAILED = _Fault(502, "upstream_error", "The model endpoint failed. Try again.")

# SageMaker's error codes (``Error.Code``) and HTTP statuses: the first row that names either one wins.
_SERVICE_FAULTS: tuple[tuple[frozenset[str], frozenset[int], _Fault], ...] = (
    (
        frozenset({"ModelStreamError"}),
        frozenset(),
        _Fault(502, "model_stream_error", "The model failed while streaming: {detail}"),
    ),
    (
        frozenset({"InternalStreamFailure"}),
        frozenset(),
        _Fault(502, "internal_stream_failure", "The endpoint's stream failed. Try again."),
    ),
    (frozenset({"ThrottlingException", "TooManyRequestsException"}), frozenset({429}), _RATE_LIMITED),
    (frozenset({"ModelNotReadyException"}), frozenset(), _NOT_READY),
    (frozenset({"ServiceUnavailable"}), frozenset({503}), _UNAVAILABLE),
    (
        frozenset({"AccessDeniedException", "UnrecognizedClientException", "ExpiredTokenException"}),
        frozenset({403}),
        _NO_ACCESS,
    ),
    (frozenset({"InternalFailure"}), frozenset(range(500, 600)), _FAILED),
)

# Everything that is not SageMaker's own error answer, by exception class; the first matching row wins.
_EXCEPTION_FAULTS: tuple[tuple[tuple[type[BaseException], ...], _Fault], ...] = (
    ((DeadlineReached,), _Fault(504, DEADLINE_EXCEEDED, "{detail}")),
    ((LineTooLong,), _Fault(502, "upstream_line_too_long", "{detail}")),
    ((UndecodableLine,), _Fault(502, "upstream_invalid_utf8", "{detail}")),
    ((DecodeError,), _Fault(502, "upstream_decode_error", "{detail}")),
    ((UpstreamStreamError,), _Fault(502, "upstream_error", "{detail}")),
    (
        (botocore.exceptions.ReadTimeoutError, urllib3.exceptions.ReadTimeoutError, TimeoutError),
        _Fault(504, "upstream_timeout", "The model endpoint did not answer in time."),
    ),
    (
        (botocore.exceptions.ConnectTimeoutError,),
        _Fault(504, "upstream_timeout", "Could not connect to the model endpoint in time."),
    ),
    ((botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError), _NO_ACCESS),
    ((botocore.eventstream.ParserError,), _Fault(502, "upstream_stream_corrupt", "The endpoint's stream was corrupt.")),
    (
        (
            botocore.exceptions.EndpointConnectionError,
            botocore.exceptions.ConnectionClosedError,
            urllib3.exceptions.ProtocolError,
            urllib3.exceptions.HTTPError,
            botocore.exceptions.HTTPClientError,
            # What urllib3 would have wrapped as the above: the stream's body is read from http.client directly.
            http.client.HTTPException,
            OSError,
        ),
        _Fault(502, "upstream_connection_error", "The connection to the model endpoint broke."),
    ),
)

# A container's refusal that OpenAI would call context_length_exceeded (vLLM's, TGI's and LMI's wordings).
_CONTEXT_LENGTH = re.compile(
    r"context length|context_length|context window|maximum.{0,20}length|must be <= \d+|must have less than|"
    r"too long|too many tokens|exceeds? the (?:model'?s? )?max",
    re.IGNORECASE,
)
# What SageMaker adds around a container's message and a client must not see.
_PRIVATE = re.compile(r"arn:aws[\w:/.-]*|\b\d{12}\b")


def error_from(exc: BaseException) -> APIError:
    """What a client sees for a fault on the way to, or from, the endpoint (an :class:`APIError` as is).

    A 429 or 5xx comes after botocore has spent the retry budget (``UPSTREAM_MAX_ATTEMPTS`` calls in all):
    it says ``x-should-retry: false``, which both OpenAI SDKs obey, so that their own two retries do not
    multiply the endpoint calls (docs/configuration.md, "Retries").

    >>> error_from(DeadlineReached()).headers
    {'x-should-retry': 'false'}
    """
    return _budget_spent(_error_from(exc))


def _budget_spent(err: APIError) -> APIError:
    if err.status == 429 or err.status >= 500:
        err.headers.setdefault("x-should-retry", "false")
    return err


def _error_from(exc: BaseException) -> APIError:
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, botocore.exceptions.ClientError):
        return _service_error(exc)
    for types, fault in _EXCEPTION_FAULTS:
        if isinstance(exc, types):
            return fault.error(str(exc))
    logger.exception("unexpected upstream failure", exc_info=exc)
    return APIError.internal()


def _service_error(exc: botocore.exceptions.ClientError) -> APIError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    message = str(error.get("Message", "") or exc)
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    special = _SPECIAL_CODES.get(code)
    if special is not None:
        return special(exc.response, message)
    # A code names the fault exactly; a status only where no row names the code (ModelNotReadyException is a
    # 429 on the wire, but a model still loading is the endpoint's unavailability, not the caller's rate).
    row = next((f for codes, _, f in _SERVICE_FAULTS if code in codes), None)
    row = row or next((f for _, statuses, f in _SERVICE_FAULTS if status in statuses), None)
    if row is not None:
        return row.error(message)  # a private fault logs what it hides from the client
    logger.error("unexpected upstream error %s (%s): %s", code, status, message)
    return APIError.upstream(502, "The model endpoint answered with an error.", code="upstream_error")


def _model_error(response: Mapping[str, Any], message: str) -> APIError:
    """SageMaker's 424: the container answered with an error. A 4xx of the container stays a 4xx."""
    original = str(response.get("OriginalMessage") or message)
    try:
        original_status = int(response.get("OriginalStatusCode") or 0)
    except (TypeError, ValueError):
        original_status = 0
    said = _PRIVATE.sub("…", container_message(original))[:MAX_MESSAGE_CHARS]
    if 400 <= original_status < 500:
        code = "context_length_exceeded" if _CONTEXT_LENGTH.search(said) else "model_error"
        return APIError.upstream(original_status, said, code=code)
    return APIError.upstream(502, f"The model container returned an error: {said}", code="model_error")


# SageMaker's words for an inference component with no copy running (scaled to zero, or not yet scaled out):
# a ValidationError, HTTP 400, on both invoke operations, and the only sign of it (the metric it counts is
# NoCapacityInvocationFailures). "Inference Component has no capacity to process this request.
# ApplicationAutoScaling may be in-progress (if configured) or try to increase the capacity by invoking
# UpdateInferenceComponentRuntimeConfig API."
_NO_CAPACITY_WORDS = re.compile(r"has no capacity to process this request", re.IGNORECASE)


def _validation_error(response: Mapping[str, Any], message: str) -> APIError:
    if _NO_CAPACITY_WORDS.search(message):
        return _NO_CAPACITY.error(message)
    if "not found" in message.lower():
        # SageMaker's message names the account and the endpoint; the client learns neither.
        logger.error("upstream not found: %s", message)
        return APIError.not_found("The model endpoint was not found.", code="endpoint_not_found")
    return APIError.upstream(400, f"The endpoint rejected the request: {message}", code="upstream_validation_error")


# SageMaker's error codes whose answer depends on more than the code.
_SPECIAL_CODES: dict[str, Callable[[Mapping[str, Any], str], APIError]] = {
    "ModelError": _model_error,
    "ValidationError": _validation_error,
}


def container_message(text: str) -> str:
    """The message inside a container's JSON error body, or ``text`` itself if it holds none.

    vLLM sends ``{"object": "error", "message": ...}`` or ``{"error": {"message": ...}}``; TGI sends
    ``{"error": "...", "error_type": "..."}``.

    >>> container_message('{"object": "error", "message": "too long", "type": "BadRequestError"}')
    'too long'
    >>> container_message('{"error": "Input validation error", "error_type": "validation"}')
    'Input validation error'
    >>> container_message("plain text")
    'plain text'
    """
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if not isinstance(body, dict):
        return text
    message = error_message(body)
    if message is None and isinstance(body.get("message"), str):
        message = body["message"]  # SageMaker's own wrapping of a plain message
    return text if message is None else message
