"""The ids SageMaker routes and records a call by: botocore's own names and rules for them, the refusals of a
``prompt_cache_key`` SageMaker could not take, and the headers botocore's own serializer makes of them on the
function's client (built as at init, parameter validation off) for both operations."""

from __future__ import annotations

from typing import Any

import botocore.awsrequest
import botocore.session
import botocore.validate
import pytest

from sagestream import upstream
from sagestream.config import Config
from sagestream.errors import APIError
from sagestream.sagemaker_ids import MAX_ID_CHARS, UpstreamIds, fits, prefix_aware_id
from tests.fakes import event_stream_response, response
from tests.unit.test_upstream_client import ENV

OPERATIONS = ("InvokeEndpoint", "InvokeEndpointWithResponseStream")
HEADERS = {"InferenceId": "X-Amzn-SageMaker-Inference-Id", "PrefixAwareId": "X-Amzn-SageMaker-Prefix-Aware-Id"}
LAMBDA_REQUEST_ID = "8f2c1c2e-0b5e-4a57-9d3e-1f0c9a4b7e21"


def service_model() -> Any:
    return botocore.session.get_session().get_service_model("sagemaker-runtime")


# --- botocore's service model is the source of the names and the rule ------------------------------------


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("parameter", sorted(HEADERS))
def test_both_operations_take_each_id_as_the_header_and_rule_routing_assumes(operation: str, parameter: str) -> None:
    members = service_model().operation_model(operation).input_shape.members
    assert parameter in members, f"the installed botocore's {operation} has no {parameter}"
    shape = members[parameter]
    assert (shape.serialization["location"], shape.serialization["name"]) == ("header", HEADERS[parameter])
    assert (shape.metadata["min"], shape.metadata["max"]) == (1, MAX_ID_CHARS)
    # Java's \p{Print} is printable ASCII: routing.fits is written for exactly this pattern.
    assert shape.metadata["pattern"] == r"\A\S[\p{Print}]*\z"


def test_what_fits_passes_botocores_own_validation_and_an_empty_id_does_not() -> None:
    shape = service_model().operation_model("InvokeEndpointWithResponseStream").input_shape
    validator = botocore.validate.ParamValidator()
    base = {"EndpointName": "llm", "Body": b"{}"}
    for value in ("a", "conversation-42", "~" * MAX_ID_CHARS, LAMBDA_REQUEST_ID):
        assert fits(value)
        assert not validator.validate({**base, "PrefixAwareId": value}, shape).has_errors(), value
    assert not fits("x" * (MAX_ID_CHARS + 1))  # botocore's validator checks no maximum; SageMaker does
    assert not fits("")
    assert validator.validate({**base, "PrefixAwareId": ""}, shape).has_errors()


# --- prompt_cache_key -> PrefixAwareId -------------------------------------------------------------------


def test_a_key_that_fits_is_the_prefix_aware_id_unchanged() -> None:
    for key in ("rivers", "user-7:thread-3", "a" * MAX_ID_CHARS, "key with inner spaces "):
        assert prefix_aware_id(key) == key


def test_a_key_over_64_characters_is_refused_as_openai_refuses_it() -> None:
    with pytest.raises(APIError) as refused:
        prefix_aware_id("k" * 65)
    err = refused.value
    assert (err.status, err.param, err.code) == (400, "prompt_cache_key", "string_above_max_length")
    assert "maximum length 64" in err.message and "length 65" in err.message


@pytest.mark.parametrize("key", ["", " leading-space", "café", "line\nbreak", "tab\there", "日本語"])
def test_a_key_sagemaker_cannot_carry_is_refused_naming_the_field_and_the_rule(key: str) -> None:
    with pytest.raises(APIError) as refused:
        prefix_aware_id(key)
    err = refused.value
    assert (err.status, err.param, err.code) == (400, "prompt_cache_key", "invalid_value")
    assert "printable ASCII" in err.message and "PrefixAwareId" in err.message


def test_another_route_names_its_own_field() -> None:
    with pytest.raises(APIError) as refused:
        prefix_aware_id("", field="prompt_cache_key_of_another_shape")
    assert refused.value.param == "prompt_cache_key_of_another_shape"


def test_a_request_id_sagemaker_would_refuse_is_left_out_not_sent() -> None:
    assert UpstreamIds.of("not a uuid \u00e9", "k").call_args() == {"PrefixAwareId": "k"}
    assert UpstreamIds.of(LAMBDA_REQUEST_ID, None).call_args() == {"InferenceId": LAMBDA_REQUEST_ID}


# --- botocore's own request building, on the function's client -------------------------------------------


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[botocore.awsrequest.AWSPreparedRequest]]:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    client = upstream.make_client(Config(endpoint_name="llm"))
    # The client as the function makes it: no validation in front of botocore's serializer, which alone turns
    # each parameter into its header (and fails on a name the service model does not have).
    assert not isinstance(client._serializer, botocore.validate.ParamValidationDecorator)
    requests: list[botocore.awsrequest.AWSPreparedRequest] = []

    def answer(request: botocore.awsrequest.AWSPreparedRequest, **_: Any) -> botocore.awsrequest.AWSResponse:
        requests.append(request)
        if request.url.endswith("/invocations-response-stream"):
            return event_stream_response([])
        return response(200, b"{}")

    client.meta.events.register("before-send.sagemaker-runtime.*", answer)
    return client, requests


def _header(request: botocore.awsrequest.AWSPreparedRequest, name: str) -> str | None:
    value = request.headers.get(name)
    return value.decode() if isinstance(value, bytes) else value


def test_both_calls_carry_the_ids_in_sagemakers_headers(sent: tuple[Any, list[Any]]) -> None:
    client, requests = sent
    ids = UpstreamIds.of(LAMBDA_REQUEST_ID, "conversation-42")
    config = Config(endpoint_name="llm")
    assert upstream.invoke(client, config, b"{}", ids=ids) == b"{}"
    with upstream.open_stream(client, config, b"{}", ids=ids) as parts:
        assert list(parts) == []
    whole, streamed = requests
    assert whole.url.endswith("/endpoints/llm/invocations")
    assert streamed.url.endswith("/endpoints/llm/invocations-response-stream")
    for request in requests:
        assert _header(request, "X-Amzn-SageMaker-Inference-Id") == LAMBDA_REQUEST_ID
        assert _header(request, "X-Amzn-SageMaker-Prefix-Aware-Id") == "conversation-42"
        assert b"X-Amzn-SageMaker-Session-Id" not in {k.encode() for k in request.headers}


def test_without_ids_a_call_is_as_before(sent: tuple[Any, list[Any]]) -> None:
    client, requests = sent
    upstream.invoke(client, Config(endpoint_name="llm"), b"{}")
    (request,) = requests
    assert _header(request, "X-Amzn-SageMaker-Inference-Id") is None
    assert _header(request, "X-Amzn-SageMaker-Prefix-Aware-Id") is None
