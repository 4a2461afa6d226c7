"""What goes wrong on the simulated endpoint, as a real one says it: service errors, container refusals, faults.

Fault names (``Scenario.fault``) and what botocore raises for them (status and code as a real endpoint sends
them):

=========================== ==========================================================================
``http_400``                ``ClientError`` ValidationError, 400
``http_424``                ``ClientError`` ModelError, 424 (``OriginalStatusCode``, ``OriginalMessage``,
                            ``LogStreamArn`` in ``e.response``)
``http_429``                ``ClientError`` ModelNotReadyException, 429 (the only 429 in SageMaker's model)
``throttling``              ``ClientError`` ThrottlingException, **400** with ``{"message": null}``, as
                            SageMaker really sends it (botocore's retry rules expect exactly that pair)
``http_500``                ``ClientError`` InternalFailure, 500
``http_503``                ``ClientError`` ServiceUnavailable, 503
``no_capacity``             ``ClientError`` ValidationError, 400, "Inference Component has no capacity to
                            process this request. ..." (an inference component scaled to zero: the
                            scenario's ``scaled_to_zero_s``, not a ``fault``)
``model_stream_error``      ``EventStreamError`` ModelStreamError (an exception frame)
``internal_stream_failure`` ``EventStreamError`` InternalStreamFailure (exception frame)
``corrupt_crc``             ``botocore.eventstream.ChecksumMismatch`` (a PayloadPart with a bad message CRC)
``reset``                   TCP RST (``SO_LINGER`` 0, then close)
``stall``                   nothing more is sent; the connection stays open until the client goes
=========================== ==========================================================================

Stream faults fire once ``fault_after`` tokens have gone (0: before the first PayloadPart, after the 200
headers), at the time the next token was due. ``InvokeEndpoint`` honours the HTTP-status faults and
``reset``/``stall`` (before its answer); the other stream faults do not apply to it. ``reset`` and ``stall``
are socket actions, done by :mod:`~sagestream_local.endpoint.server`; this module writes everything else.

Besides the injected faults, a request meets what a real endpoint checks: SigV4's presence
(:func:`auth_error`), the endpoint's name, the content type, a body the container cannot read
(:func:`container_error`) and, with ``Scenario.context_length``, a prompt plus ``max_tokens`` over it
(:func:`context_length_error`: vLLM's 400 for a prompt past it, TGI's 422 and LMI's 400 for prompt plus
``max_tokens`` past it). A container's refusal reaches the client
wrapped as SageMaker wraps it (:func:`model_error`): a ``ModelError`` 424 with ``OriginalStatusCode`` and
``OriginalMessage``.

Example::

    >>> error = service_error("throttling", "llm", "AllTraffic")
    >>> error.status, error.code, error.body
    (400, 'ThrottlingException', {'message': None})
    >>> wrapped = model_error(422, "missing field `inputs`", "llm", "AllTraffic")
    >>> wrapped.status, wrapped.body["OriginalStatusCode"], wrapped.body["ErrorCode"]
    (424, 422, 'CLIENT_ERROR_FROM_MODEL')
    >>> stream_fault_frame("reset", None) is None
    True
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message
from typing import Any

from sagestream_local.endpoint.eventstream import exception_frame, payload_part_frame, with_bad_crc
from sagestream_local.endpoint.generation import prompt_size
from sagestream_local.endpoint.scenario import Scenario

ACCOUNT_ID = "123456789012"
REGION = "us-east-1"


def container_error(request: Any, scenario: Scenario) -> tuple[int, str] | None:
    """What the container would refuse (status, message), so a relay sending the wrong body learns it."""
    if not isinstance(request, dict):
        return 400, "request body must be a JSON object"
    if scenario.dialect == "openai":
        if not isinstance(request.get("messages"), list) and not isinstance(request.get("prompt"), str):
            return 400, "either 'messages' or 'prompt' is required"
    elif not isinstance(request.get("inputs"), str):
        return (422 if scenario.dialect == "tgi" else 400), "missing field `inputs`"
    return None


def context_length_error(request: Any, scenario: Scenario) -> tuple[int, str] | None:
    """The container's refusal of a prompt longer than its context: (status, its JSON error body).

    Each in its container's words and shape: vLLM's 400 error object, TGI's 422 validation error, LMI's 400.
    """
    if scenario.context_length is None or not isinstance(request, dict):
        return None
    params = request.get("parameters") if isinstance(request.get("parameters"), dict) else {}
    limit = request.get("max_tokens") if scenario.dialect == "openai" else params.get("max_new_tokens")
    wanted = limit if isinstance(limit, int) and not isinstance(limit, bool) else 0
    size = prompt_size(request)
    if scenario.dialect == "openai":
        return _vllm_context_error(size, wanted, scenario.context_length)
    if size + wanted <= scenario.context_length:
        return None
    if scenario.dialect == "tgi":
        message = (
            f"Input validation error: `inputs` tokens + `max_new_tokens` must be <= {scenario.context_length}. "
            f"Given: {size} `inputs` tokens and {wanted} `max_new_tokens`"
        )
        return 422, json.dumps({"error": message, "error_type": "validation"})
    message = f"Input length {size} exceeds the maximum model length {scenario.context_length}"
    return 400, json.dumps({"error": message, "code": 400})


def _vllm_context_error(size: int, wanted: int, context: int) -> tuple[int, str] | None:
    """vLLM's (0.32, as tests/engine saw it): a prompt past the context, or max_tokens past it alone, is a 400;
    a prompt that fits with max_tokens that does not is served, its completion ending at the context."""
    if wanted > context:
        message = (
            f"max_tokens={wanted} cannot be greater than max_model_len={context}. Please request fewer output "
            f"tokens. (parameter=max_tokens, value={wanted})"
        )
        param = "max_tokens"
    elif size > context:
        message = (
            f"This model's maximum context length is {context} tokens. However, your prompt contains {size} input "
            "tokens, which exceeds this limit even without any output tokens. Please reduce the length of the "
            "input prompt."
        )
        param = "input_tokens"
    else:
        return None
    return 400, json.dumps({"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}})


@dataclass(frozen=True)
class ServiceError:
    """A SageMaker Runtime error response: status, ``x-amzn-ErrorType`` code and JSON body."""

    status: int
    code: str
    body: Mapping[str, Any]

    def headers(self) -> dict[str, str]:
        return {
            "x-amzn-ErrorType": f"{self.code}:http://internal.amazon.com/coral/com.amazon.sagemaker.runtime/",
            "Content-Type": "application/json",
        }


def service_error(fault: str, endpoint: str, variant: str) -> ServiceError:
    """The error a real endpoint returns for an HTTP-status fault."""
    group = f"/aws/sagemaker/Endpoints/{endpoint}"
    if fault == "http_400":
        return ServiceError(400, "ValidationError", {"message": not_found_message(endpoint)})
    if fault == "http_424":
        return model_error(400, '{"error": "simulated container failure"}', endpoint, variant)
    if fault == "http_429":
        return ServiceError(
            429,
            "ModelNotReadyException",
            {"message": f"Model for endpoint {endpoint} is not ready yet. Please retry after some time."},
        )
    if fault == "throttling":
        return ServiceError(400, "ThrottlingException", {"message": None})
    if fault == "http_500":
        return ServiceError(500, "InternalFailure", {"message": "An internal error occurred. Retry the request."})
    if fault == "http_503":
        return ServiceError(
            503,
            "ServiceUnavailable",
            {"message": f"A transient exception occurred while retrieving variant instances. {group}"},
        )
    raise ValueError(f"not an HTTP-status fault: {fault}")


# SageMaker's words, on both invoke operations, while an inference component has no copy running.
NO_CAPACITY_MESSAGE = (
    "Inference Component has no capacity to process this request. ApplicationAutoScaling may be in-progress "
    "(if configured) or try to increase the capacity by invoking UpdateInferenceComponentRuntimeConfig API."
)


def no_capacity_error() -> ServiceError:
    """What an endpoint answers while the inference component called has no copy (scaled to zero)."""
    return ServiceError(400, "ValidationError", {"message": NO_CAPACITY_MESSAGE})


def not_found_message(endpoint: str) -> str:
    return f"Endpoint {endpoint} of account {ACCOUNT_ID} not found."


def model_error(original_status: int, original_message: str, endpoint: str, variant: str) -> ServiceError:
    group = f"/aws/sagemaker/Endpoints/{endpoint}"
    kind = "client" if original_status < 500 else "server"
    message = (
        f'Received {kind} error ({original_status}) from {variant} with message "{original_message}". '
        f"See https://{REGION}.console.aws.amazon.com/cloudwatch/home?region={REGION}#logEventViewer:group="
        f"{group} in account {ACCOUNT_ID} for more information."
    )
    return ServiceError(
        424,
        "ModelError",
        {
            "ErrorCode": f"{kind.upper()}_ERROR_FROM_MODEL",
            "LogStreamArn": f"arn:aws:logs:{REGION}:{ACCOUNT_ID}:log-group:{group}",
            "Message": message,
            "OriginalMessage": original_message,
            "OriginalStatusCode": original_status,
        },
    )


_CREDENTIAL = re.compile(r"Credential=[^/,\s]+/\d{8}/[a-z0-9-]+/(?P<service>[a-z0-9-]+)/aws4_request")


def auth_error(headers: Message[str, str]) -> ServiceError | None:
    """SigV4 presence checks (the signature itself is not verified: any key signs for the simulator)."""
    authorization = headers.get("Authorization")
    if not authorization:
        return ServiceError(403, "MissingAuthenticationTokenException", {"message": "Missing Authentication Token"})
    match = _CREDENTIAL.search(authorization)
    if not (
        authorization.startswith("AWS4-HMAC-SHA256 ")
        and match
        and "SignedHeaders=" in authorization
        and "Signature=" in authorization
    ):
        message = f"Authorization header requires Credential, Signature, SignedHeaders: {authorization}"
        return ServiceError(403, "IncompleteSignatureException", {"message": message})
    if match["service"] != "sagemaker":
        message = "Credential should be scoped to correct service: 'sagemaker'. "
        return ServiceError(403, "InvalidSignatureException", {"message": message})
    if not headers.get("X-Amz-Date"):
        message = "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
        return ServiceError(403, "IncompleteSignatureException", {"message": message})
    return None


def stream_fault_frame(fault: str, data: bytes | None) -> bytes | None:
    """The frame a stream fault sends in place of the PayloadPart that would carry ``data`` (None: the stream
    had no more to send); None for ``reset`` and ``stall``, which send nothing."""
    if fault == "model_stream_error":
        members = {
            "Message": "Model invocation time exceeded (simulated).",
            "ErrorCode": "ModelInvocationTimeExceeded",
        }
        return exception_frame("ModelStreamError", members)
    if fault == "internal_stream_failure":
        return exception_frame("InternalStreamFailure", {"Message": "The stream processing failed (simulated)."})
    if fault == "corrupt_crc":
        return with_bad_crc(payload_part_frame(data if data is not None else b"data: [DONE]\n\n"))
    return None
