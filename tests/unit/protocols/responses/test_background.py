"""Background responses' pieces without a stack: which events are the function's own (never an HTTP front's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sagestream.config import Config
from sagestream.protocols import internal_handler
from sagestream.protocols.responses import RESPONSES
from sagestream.protocols.responses.background import INTERNAL_EVENT, is_internal
from sagestream.protocols.responses.encoder import ResponsesEncoder
from sagestream.protocols.responses.runs import Runs
from sagestream.protocols.responses.store import DynamoStore, owner_of
from sagestream_local.dynamodb import LocalDynamoDB

OWNER = owner_of("key:alice")


@pytest.fixture(scope="module")
def runs() -> Iterator[Runs]:
    with LocalDynamoDB() as db:
        yield Runs(DynamoStore(db.table, ttl_s=3600, client=db.client()))


def encoder() -> ResponsesEncoder:
    parsed = RESPONSES.parse(b'{"input": "Hi", "stream": true}', Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "e"}))
    return ResponsesEncoder(parsed.original, model="m")


@pytest.mark.parametrize(
    ("event", "internal"),
    [
        ({"sagestream": INTERNAL_EVENT, "response_id": "resp_1"}, True),
        ({"sagestream": INTERNAL_EVENT, "requestContext": {"http": {"method": "POST"}}}, False),  # through the URL
        ({"sagestream": INTERNAL_EVENT, "httpMethod": "POST"}, False),  # through API Gateway
        ({"sagestream": "something.else"}, False),
        ({"rawPath": "/v1/responses"}, False),
    ],
)
def test_only_the_functions_own_event_is_internal(event: dict[str, object], internal: bool) -> None:
    assert is_internal(event) is internal
    assert (internal_handler(event) is not None) is internal
