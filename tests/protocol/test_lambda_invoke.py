"""The stand-in of Lambda's asynchronous Invoke, over real sockets as botocore calls it (through
``AWS_ENDPOINT_URL_LAMBDA``'s endpoint): an ``Event`` invocation of the stack's function is answered 202 and its
event handed to the pool; any other invocation type, or another function, is refused in Lambda's terms."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import botocore.session
import pytest

from sagestream_local.lambda_invoke import LambdaInvoke


class FakePool:
    function_name = "sagestream-local"

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.submitted = threading.Event()

    def submit(self, event: Any, sink: Any, wait_s: float | None = None) -> None:
        self.events.append(event)
        self.submitted.set()


@pytest.fixture
def invoke() -> Iterator[tuple[LambdaInvoke, FakePool, Any]]:
    pool = FakePool()
    with LambdaInvoke() as stand_in:
        stand_in.pool = pool  # type: ignore[assignment]
        client = botocore.session.get_session().create_client(
            "lambda",
            region_name="us-east-1",
            endpoint_url=stand_in.url,
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
        yield stand_in, pool, client


def test_an_event_invocation_is_accepted_at_once_and_its_event_runs(invoke: tuple[LambdaInvoke, FakePool, Any]) -> None:
    stand_in, pool, client = invoke
    event = {"sagestream": "responses.background", "response_id": "resp_1"}
    answer = client.invoke(FunctionName="sagestream-local", InvocationType="Event", Payload=json.dumps(event))
    assert answer["StatusCode"] == 202
    assert pool.submitted.wait(5) and pool.events == [event] and stand_in.queued == 1
    qualified = client.invoke(FunctionName="sagestream-local", InvocationType="Event", Payload=b"{}", Qualifier="live")
    assert qualified["StatusCode"] == 202


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"FunctionName": "sagestream-local", "InvocationType": "RequestResponse"}, "InvalidParameterValueException"),
        ({"FunctionName": "another-function", "InvocationType": "Event"}, "ResourceNotFoundException"),
    ],
)
def test_what_it_does_not_serve_is_refused_as_lambda_refuses_it(
    invoke: tuple[LambdaInvoke, FakePool, Any], args: dict[str, str], code: str
) -> None:
    _, pool, client = invoke
    with pytest.raises(botocore.exceptions.ClientError) as info:
        client.invoke(Payload=b"{}", **args)
    assert info.value.response["Error"]["Code"] == code and pool.events == []
