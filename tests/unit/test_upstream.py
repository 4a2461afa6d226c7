"""How each way the call to SageMaker can fail reaches the client (status, code, and nothing private), and the
deadline as an upstream fault."""

from __future__ import annotations

import json
import time
from typing import Any

import botocore.exceptions
import pytest
import urllib3.exceptions

from sagestream.config import Config
from sagestream.dialects import DecodeError, UpstreamStreamError
from sagestream.errors import APIError
from sagestream.lines import LineTooLong, UndecodableLine
from sagestream.upstream import DeadlineReached, PayloadParts, error_from, invoke, open_stream
from sagestream_local.endpoint import payload_part_frame
from tests.fakes import Upstream, event_stream_response, response, stubbed_client


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
        (client_error("ModelNotReadyException", 429), 503, "service_unavailable"),
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


def test_a_containers_4xx_is_asked_once_whatever_the_attempts_allowed() -> None:
    upstream = Upstream(
        override=lambda op, _: response(
            424,
            json.dumps(
                {
                    "ErrorCode": "CLIENT_ERROR_FROM_MODEL",
                    "Message": WRAPPED.format("too long"),
                    "OriginalMessage": VLLM_CONTEXT,
                    "OriginalStatusCode": 400,
                    "LogStreamArn": ARN,
                }
            ).encode(),
            {"x-amzn-ErrorType": "ModelError:http://internal.amazon.com/coral/com.amazonaws.sagemaker/"},
        )
    )
    config = Config(endpoint_name="llm", max_attempts=3)
    client = stubbed_client(upstream, max_attempts=config.max_attempts)
    with pytest.raises(APIError) as info:
        open_stream(client, config, b"{}")
    assert (info.value.status, info.value.code) == (400, "context_length_exceeded")
    assert len(upstream.calls) == 1, "botocore retried a container's refusal"
    throttled = Upstream(
        override=lambda op, _: response(429, b'{"message": "slow down"}', {"x-amzn-ErrorType": "ThrottlingException"})
    )
    with pytest.raises(APIError):
        open_stream(stubbed_client(throttled, max_attempts=3), config, b"{}")
    assert len(throttled.calls) == 3, "a throttled call is retried: the attempts setting does reach botocore"


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


# --- the deadline while streaming ------------------------------------------------------------------------------


def stream_of(frames: list[bytes], seconds_left: float | None) -> PayloadParts:
    """The frames as an open stream whose deadline is ``seconds_left`` from now (the client is built first)."""
    upstream = Upstream(override=lambda op, _: event_stream_response(frames))
    client = stubbed_client(upstream)
    body = client.invoke_endpoint_with_response_stream(EndpointName="e", Body=b"{}", ContentType="application/json")
    deadline = None if seconds_left is None else time.monotonic() + seconds_left
    return PayloadParts(body["Body"], deadline=deadline)


def test_parts_before_the_deadline_pass_and_the_deadline_is_raised_at_the_next_read() -> None:
    frames = [payload_part_frame(b"data: [DONE]\n\n")] * 3
    got = []
    with pytest.raises(DeadlineReached):
        for part in stream_of(frames, seconds_left=0.5):
            got.append(part)
            time.sleep(0.7)
    assert got == [b"data: [DONE]\n\n"]


def test_no_deadline_or_a_far_one_changes_nothing() -> None:
    frames = [payload_part_frame(b"x")] * 3
    assert list(stream_of(frames, seconds_left=None)) == [b"x"] * 3
    assert list(stream_of(frames, seconds_left=60)) == [b"x"] * 3


@pytest.mark.parametrize("call", [open_stream, invoke], ids=["stream", "whole"])
def test_no_time_left_means_the_endpoint_is_not_called_and_the_client_gets_the_deadlines_504(call: Any) -> None:
    upstream = Upstream()
    with pytest.raises(APIError) as raised:
        call(stubbed_client(upstream), Config(endpoint_name="e"), b"{}", deadline=time.monotonic() - 1)
    assert (raised.value.status, raised.value.code) == (504, "deadline_exceeded")
    assert upstream.calls == []
