"""SageMaker Runtime's front over vLLM, at the protocol level: boto3's own calls against it."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from sagestream_local.container_front import ContainerFront
from sagestream_local.vllm_engine import VllmEngine
from tests.engine.conftest import ENDPOINT_NAME

# The first test pays for the session's engine start (20-60 s on two shared cores) within its own timeout.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def runtime(front: ContainerFront) -> Any:
    return boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        endpoint_url=front.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}, proxies={}),
    )


def _chat(**fields: Any) -> bytes:
    body = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "max_tokens": 6}
    return json.dumps({**body, "temperature": 0, **fields}).encode()


def _sse_data(stream: bytes) -> list[Any]:
    lines = [line[len(b"data: ") :] for line in stream.split(b"\n") if line.startswith(b"data: ")]
    return [json.loads(line) if line != b"[DONE]" else "[DONE]" for line in lines]


def test_a_stream_is_the_containers_bytes_in_payload_parts(runtime: Any, engine: VllmEngine) -> None:
    response = runtime.invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT_NAME,
        ContentType="application/json",
        Body=_chat(stream=True, stream_options={"include_usage": True}),
    )
    parts = [event["PayloadPart"]["Bytes"] for event in response["Body"]]
    assert response["ContentType"].startswith("text/event-stream")
    assert response["InvokedProductionVariant"] == "AllTraffic"
    events = _sse_data(b"".join(parts))
    assert events[-1] == "[DONE]"
    assert len(parts) >= 6, "each token the engine flushes is its own PayloadPart, not one buffered body"
    chunks = events[:-1]
    # what vLLM sends and the simulator never did: usage in a chunk of its own with no choices
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
    # the same request unstreamed through the front, and directly to the engine's OpenAI route
    whole = runtime.invoke_endpoint(EndpointName=ENDPOINT_NAME, ContentType="application/json", Body=_chat())
    answer = json.loads(whole["Body"].read())
    assert whole["ContentType"] == "application/json"
    assert answer["choices"][0]["message"]["content"] == text != ""


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "whole"])
def test_a_container_refusal_is_a_424_model_error_with_the_original(runtime: Any, streaming: bool) -> None:
    call = runtime.invoke_endpoint_with_response_stream if streaming else runtime.invoke_endpoint
    with pytest.raises(ClientError) as raised:
        call(EndpointName=ENDPOINT_NAME, ContentType="application/json", Body=_chat(max_tokens=600, stream=streaming))
    error = raised.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert error["Error"]["Code"] == "ModelError"
    assert error["OriginalStatusCode"] == 400
    original = json.loads(error["OriginalMessage"])
    assert "max_model_len=512" in original["error"]["message"]
    assert "Received client error (400)" in error["Error"]["Message"]


def test_an_unsigned_call_is_refused_as_the_service_refuses_it(front: ContainerFront) -> None:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{front.url}/endpoints/x/invocations", data=_chat(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=10)
    assert raised.value.code == 403
    assert raised.value.headers["x-amzn-ErrorType"].startswith("MissingAuthenticationTokenException")


def test_a_container_that_cannot_be_reached_is_an_internal_failure() -> None:
    with ContainerFront("http://127.0.0.1:9") as dead:
        client = boto3.client(
            "sagemaker-runtime",
            region_name="us-east-1",
            endpoint_url=dead.url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=Config(retries={"max_attempts": 1}, proxies={}),
        )
        with pytest.raises(ClientError) as raised:
            client.invoke_endpoint(EndpointName="x", ContentType="application/json", Body=_chat())
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert raised.value.response["Error"]["Code"] == "InternalFailure"
