"""What SageMaker is told about one call besides its body: the ids it routes and records the call by.

- ``InferenceId`` (header ``X-Amzn-SageMaker-Inference-Id``): the invocation's own request id, the
  ``x-request-id`` its client gets and the log record's ``function_request_id``, on every call, streamed
  or whole. SageMaker keeps it with the request (with data capture on, in each captured record), so one id
  follows a request from the client through the function into SageMaker.
- ``PrefixAwareId`` (header ``X-Amzn-SageMaker-Prefix-Aware-Id``): on an endpoint whose routing strategy
  is prefix-aware, calls with the same prompt prefix and the same id go to the same instance, which holds
  that prefix in its KV cache. It is OpenAI's ``prompt_cache_key`` (the request field made for that
  intent), sent only when ``PREFIX_AWARE_ROUTING`` (or the model's ``prefix_aware_routing`` in ``MODELS``)
  is on.

Both ids must fit SageMaker's rule for them (botocore's service model: 1-64 characters, the first not
blank, every one printable ASCII; ``\\A\\S[\\p{Print}]*\\z`` in Java's regex, where ``\\p{Print}`` is ASCII).
A ``prompt_cache_key`` outside it is refused with a 400 naming the field, never hashed into one that fits:
OpenAI itself refuses a key over 64 characters (``string_above_max_length``), so no client written for it
sends one; the id SageMaker routes by stays the one the client chose and an operator searches for; and
a hash would accept here what OpenAI refuses. The client learns the rule once and keeps its ids short.

Stateful sessions (``SessionId``) are not offered: see docs/observability.md, "SageMaker routing".

Environment variables read: none (``PREFIX_AWARE_ROUTING`` is :mod:`sagestream.config`'s).

Example::

    >>> ids = UpstreamIds.of("8f2c1c2e-0b5e-4a57-9d3e-1f0c9a4b7e21", "conversation-42")
    >>> ids.call_args()
    {'InferenceId': '8f2c1c2e-0b5e-4a57-9d3e-1f0c9a4b7e21', 'PrefixAwareId': 'conversation-42'}
    >>> UpstreamIds.of("r-1", None).call_args()
    {'InferenceId': 'r-1'}
    >>> prefix_aware_id("x" * 65)
    Traceback (most recent call last):
    ...
    sagestream.errors.APIError: Invalid 'prompt_cache_key': string too long. Expected a string with maximum ...
"""

from __future__ import annotations

import logging
import re

import msgspec

from sagestream.errors import APIError

__all__ = ["MAX_ID_CHARS", "UpstreamIds", "fits", "prefix_aware_id"]

logger = logging.getLogger(__name__)

# botocore's sagemaker-runtime model: InferenceIdHeader and PrefixAwareIdHeader, min 1, max 64, pattern
# \A\S[\p{Print}]*\z. tests/unit/test_sagemaker_ids.py reads those from the installed botocore and fails if they change.
MAX_ID_CHARS = 64
_ID = re.compile(r"[!-~][ -~]*")  # the first printable and not a space, the rest printable ASCII


def fits(value: str) -> bool:
    """Whether SageMaker takes ``value`` as an ``InferenceId`` or ``PrefixAwareId``.

    >>> fits("conversation-42"), fits(""), fits(" x"), fits("café"), fits("a" * 64), fits("a" * 65)
    (True, False, False, False, True, False)
    """
    return len(value) <= MAX_ID_CHARS and _ID.fullmatch(value) is not None


def prefix_aware_id(prompt_cache_key: str, *, field: str = "prompt_cache_key") -> str:
    """The ``PrefixAwareId`` for a request's ``prompt_cache_key``: the key itself, or a 400 naming ``field``.

    The Responses API (and any later route) calls it with its own request's value and field name.
    """
    if len(prompt_cache_key) > MAX_ID_CHARS:
        # OpenAI's own wording and code for this refusal.
        raise APIError.invalid_request(
            f"Invalid '{field}': string too long. Expected a string with maximum length {MAX_ID_CHARS}, "
            f"but got a string with length {len(prompt_cache_key)} instead.",
            param=field,
            code="string_above_max_length",
        )
    if not fits(prompt_cache_key):
        raise APIError.invalid_request(
            f"Invalid '{field}': with prefix-aware routing it is sent to SageMaker as the PrefixAwareId, which "
            "must be 1-64 printable ASCII characters, the first not a space.",
            param=field,
            code="invalid_value",
        )
    return prompt_cache_key


class UpstreamIds(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The ids one invocation's upstream calls carry, as botocore parameters (:meth:`call_args`)."""

    inference_id: str | None = None
    prefix_aware_id: str | None = None

    @classmethod
    def of(cls, request_id: str, prefix_aware: str | None) -> UpstreamIds:
        """``request_id`` as the ``InferenceId`` (left out, and logged, in the rare case SageMaker would refuse
        it: a test's or an emulator's made-up id, never Lambda's UUID); ``prefix_aware`` already checked."""
        if not fits(request_id):
            logger.warning(
                "the request id %r does not fit SageMaker's InferenceId; the call goes without it", request_id
            )
            return cls(None, prefix_aware)
        return cls(request_id, prefix_aware)

    def call_args(self) -> dict[str, str]:
        """botocore's parameter names (its service model serialises each into its header)."""
        args: dict[str, str] = {}
        if self.inference_id is not None:
            args["InferenceId"] = self.inference_id
        if self.prefix_aware_id is not None:
            args["PrefixAwareId"] = self.prefix_aware_id
        return args
