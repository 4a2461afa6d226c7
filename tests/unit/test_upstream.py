"""How each way the call to SageMaker can fail reaches the client: status, code, and nothing private."""

from __future__ import annotations

import botocore.exceptions
import pytest
import urllib3.exceptions

from sagestream.upstream import error_from


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
        (client_error("ModelNotReadyException", 429), 429, "rate_limited"),
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
    if status == 429:
        assert err.headers == {"Retry-After": "1"}


def test_a_model_error_carries_the_containers_message() -> None:
    err = error_from(client_error("ModelError", 424, "x", OriginalMessage="CUDA out of memory"))
    assert "CUDA out of memory" in err.message


def test_credential_problems_say_nothing_of_the_credentials() -> None:
    err = error_from(client_error("AccessDeniedException", 400, "User arn:aws:iam::1:role/secret-role denied"))
    assert "secret-role" not in err.message and err.type == "server_error"
