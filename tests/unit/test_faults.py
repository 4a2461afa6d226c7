"""How each way the call to SageMaker can fail reaches the client: status, code, and nothing private."""

from __future__ import annotations

import http.client
import json
import ssl

import botocore.exceptions
import pytest
import urllib3.exceptions

from sagestream.dialects import DecodeError, UpstreamStreamError
from sagestream.faults import DeadlineReached, error_from
from sagestream.lines import LineTooLong, UndecodableLine


def client_error(code: str, status: int, message: str = "msg", **extra: object) -> botocore.exceptions.ClientError:
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}, **extra}
    return botocore.exceptions.ClientError(response, "InvokeEndpointWithResponseStream")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (
            client_error("ValidationError", 400, "Endpoint e of account 123456789012 not found."),
            404,
            "endpoint_not_found",
        ),
        (client_error("ValidationError", 400, "Input too long"), 400, "upstream_validation_error"),
        (client_error("ModelError", 424, "x", OriginalMessage="CUDA out of memory"), 502, "model_error"),
        (client_error("ThrottlingException", 400, ""), 429, "rate_limited"),
        (client_error("ModelNotReadyException", 429), 503, "model_not_ready"),
        (client_error("ServiceUnavailable", 503), 503, "service_unavailable"),
        (client_error("InternalFailure", 500), 502, "upstream_error"),
        (
            client_error("AccessDeniedException", 400, "User arn:aws:iam::1:role/x is not authorized"),
            500,
            "internal_error",
        ),
        (client_error("UnrecognizedClientException", 403, "The security token is invalid"), 500, "internal_error"),
        (botocore.exceptions.NoCredentialsError(), 500, "internal_error"),
        (botocore.exceptions.ReadTimeoutError(endpoint_url="http://x"), 504, "upstream_timeout"),
        (botocore.exceptions.ConnectTimeoutError(endpoint_url="http://x"), 504, "upstream_timeout"),
        (urllib3.exceptions.ProtocolError("Connection broken"), 502, "upstream_connection_error"),
        # The stream's body is read from http.client under urllib3, whose wrapping of these is skipped.
        (http.client.IncompleteRead(b"", 12), 502, "upstream_connection_error"),
        (ConnectionResetError(104, "Connection reset by peer"), 502, "upstream_connection_error"),
        (ssl.SSLError(1, "bad record mac"), 502, "upstream_connection_error"),
        (TimeoutError("timed out"), 504, "upstream_timeout"),
        (botocore.exceptions.EndpointConnectionError(endpoint_url="http://x"), 502, "upstream_connection_error"),
    ],
)
def test_each_upstream_failure_maps_to_its_status_and_code(exc: Exception, status: int, code: str) -> None:
    err = error_from(exc)
    assert (err.status, err.code) == (status, code)
    assert "123456789012" not in err.message and "arn:aws" not in err.message
    # Every 429 and 5xx comes after botocore spent the budget: the SDKs are told not to multiply it.
    expected = {"x-should-retry": "false"} if status == 429 or status >= 500 else {}
    if status == 429:
        expected |= {"Retry-After": "1", "retry-after-ms": "1000"}
    if code == "model_not_ready":  # botocore never retried it: the SDKs may, after the wait it names
        expected = {"Retry-After": "5", "retry-after-ms": "5000", "x-should-retry": "true"}
    assert err.headers == expected


def test_a_containers_own_refusal_leaves_the_retry_decision_to_the_client() -> None:
    err = error_from(client_error("ModelError", 424, "x", OriginalStatusCode=400, OriginalMessage="bad"))
    assert err.status == 400 and "x-should-retry" not in err.headers


def test_a_model_error_carries_the_containers_message() -> None:
    err = error_from(client_error("ModelError", 424, "x", OriginalMessage="CUDA out of memory"))
    assert "CUDA out of memory" in err.message


def test_credential_problems_say_nothing_of_the_credentials() -> None:
    err = error_from(client_error("AccessDeniedException", 400, "User arn:aws:iam::1:role/secret-role denied"))
    assert "secret-role" not in err.message and err.type == "server_error"


# --- a container's own refusal (SageMaker's ModelError, 424) ---------------------------------------------------

ARN = "arn:aws:logs:us-east-1:123456789012:log-group:/aws/sagemaker/Endpoints/llm"
WRAPPED = 'Received client error (400) from primary with message "{}". See ... in account 123456789012.'


def model_error(original_status: int, original_message: str) -> botocore.exceptions.ClientError:
    return client_error(
        "ModelError",
        424,
        WRAPPED.format(original_message),
        OriginalStatusCode=original_status,
        OriginalMessage=original_message,
        LogStreamArn=ARN,
    )


VLLM_CONTEXT = json.dumps(
    {
        "object": "error",
        "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
)
VLLM_NESTED = json.dumps({"error": {"message": "temperature must be non-negative", "type": "BadRequestError"}})
TGI_CONTEXT = json.dumps(
    {
        "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` "
        "tokens and 200 `max_new_tokens`",
        "error_type": "validation",
    }
)
TGI_OTHER = json.dumps({"error": "Input validation error: `top_p` must be > 0.0 and < 1.0", "error_type": "validation"})


@pytest.mark.parametrize(
    ("status", "original", "message", "code"),
    [
        (400, VLLM_CONTEXT, "This model's maximum context length is 4096 tokens.", "context_length_exceeded"),
        (400, VLLM_NESTED, "temperature must be non-negative", "model_error"),
        (422, TGI_CONTEXT, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096.", None),
        (422, TGI_OTHER, "Input validation error: `top_p` must be > 0.0 and < 1.0", "model_error"),
        (413, "request entity too large", "request entity too large", None),
    ],
    ids=["vllm-context", "vllm-nested", "tgi-context", "tgi-other", "plain-text"],
)
def test_a_containers_4xx_stays_that_4xx_with_its_own_message(
    status: int, original: str, message: str, code: str | None
) -> None:
    err = error_from(model_error(status, original))
    assert err.status == status and err.type == "invalid_request_error"
    assert err.message.startswith(message)
    if code is not None:
        assert err.code == code
    if "context" in message or "must be <=" in message:
        assert err.code == "context_length_exceeded"
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}
    assert "123456789012" not in err.message and "arn:aws" not in err.message and "Received client" not in err.message


def test_a_containers_5xx_stays_a_502_with_its_message() -> None:
    err = error_from(model_error(500, json.dumps({"error": "CUDA out of memory"})))
    assert (err.status, err.code) == (502, "model_error")
    assert "CUDA out of memory" in err.message and '{"error"' not in err.message


def test_an_account_id_or_arn_in_a_containers_message_is_not_passed_on() -> None:
    err = error_from(model_error(400, f"bad input; see {ARN} of 123456789012"))
    assert err.status == 400 and "123456789012" not in err.message and "arn:aws" not in err.message


# --- the parsers' faults and the deadline, by table -------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (LineTooLong(10), 502, "upstream_line_too_long"),
        (UndecodableLine("byte 0"), 502, "upstream_invalid_utf8"),
        (DecodeError("chunk is not an object"), 502, "upstream_decode_error"),
        (UpstreamStreamError("out of memory"), 502, "upstream_error"),
        (DeadlineReached(), 504, "deadline_exceeded"),
    ],
)
def test_the_parsers_faults_and_the_deadline_get_their_status_here(exc: Exception, status: int, code: str) -> None:
    err = error_from(exc)
    assert (err.status, err.code, err.message) == (status, code, str(exc))


def test_an_unknown_exception_is_a_500_that_says_nothing_of_it() -> None:
    err = error_from(RuntimeError("secret detail"))
    assert (err.status, err.code) == (500, "internal_error") and "secret" not in err.message


# --- capacity: the exact answers SageMaker sends, read by botocore's own parser, on both invoke operations -------

NO_CAPACITY_MESSAGE = (
    "Inference Component has no capacity to process this request. ApplicationAutoScaling may be in-progress "
    "(if configured) or try to increase the capacity by invoking UpdateInferenceComponentRuntimeConfig API."
)
NOT_READY_MESSAGE = "Model for endpoint llm is not ready yet. Please retry after some time."
OPERATIONS = ("InvokeEndpoint", "InvokeEndpointWithResponseStream")


def wire_error(operation: str, status: int, code: str, body: bytes) -> botocore.exceptions.ClientError:
    """The ClientError botocore raises for this HTTP answer: its rest-json parser reads status, headers and body."""
    import botocore.awsrequest
    import botocore.parsers
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    headers = botocore.awsrequest.HeadersDict(
        {
            "x-amzn-ErrorType": f"{code}:http://internal.amazon.com/coral/com.amazon.sagemaker.runtime/",
            "Content-Type": "application/json",
            "x-amzn-RequestId": "0f0f0f0f-0000-4000-8000-000000000000",
        }
    )
    parsed = botocore.parsers.create_parser("rest-json").parse(
        {"status_code": status, "headers": headers, "body": body}, model.operation_model(operation).output_shape
    )
    return botocore.exceptions.ClientError(parsed, operation)  # type: ignore[arg-type]


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize(
    ("status", "code", "body", "expected"),
    [
        # An inference component scaled to zero (or not yet scaled out): SageMaker's 400 ValidationError.
        (
            400,
            "ValidationError",
            json.dumps({"message": NO_CAPACITY_MESSAGE}).encode(),
            (503, "no_capacity", {"Retry-After": "30", "retry-after-ms": "30000", "x-should-retry": "true"}),
        ),
        # Throttling: a 400 with a null message (as botocore's retry rules expect it), or a 429.
        (
            400,
            "ThrottlingException",
            b'{"message": null}',
            (429, "rate_limited", {"Retry-After": "1", "retry-after-ms": "1000", "x-should-retry": "false"}),
        ),
        (
            429,
            "ThrottlingException",
            b'{"message": "Rate exceeded"}',
            (429, "rate_limited", {"Retry-After": "1", "retry-after-ms": "1000", "x-should-retry": "false"}),
        ),
        # A model still loading (serverless, multi-model): SageMaker's 429 ModelNotReadyException.
        (
            429,
            "ModelNotReadyException",
            json.dumps({"message": NOT_READY_MESSAGE}).encode(),
            (503, "model_not_ready", {"Retry-After": "5", "retry-after-ms": "5000", "x-should-retry": "true"}),
        ),
    ],
)
def test_each_capacity_fault_is_recognised_by_its_code_and_message(
    operation: str, status: int, code: str, body: bytes, expected: tuple[int, str, dict[str, str]]
) -> None:
    err = error_from(wire_error(operation, status, code, body))
    assert (err.status, err.code, err.headers) == expected
    assert err.type == ("rate_limit_error" if expected[0] == 429 else "server_error")


@pytest.mark.parametrize("operation", OPERATIONS)
def test_another_validation_error_is_still_the_callers_400(operation: str) -> None:
    body = json.dumps({"message": "Inference Component Name header is required for endpoints with components."})
    err = error_from(wire_error(operation, 400, "ValidationError", body.encode()))
    assert (err.status, err.code) == (400, "upstream_validation_error") and "Retry-After" not in err.headers
