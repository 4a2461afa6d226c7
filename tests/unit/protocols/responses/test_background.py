"""Background responses' pieces without a stack: which events are the function's own, and a foreground stream whose
events are kept for followers while it is written (on moto's DynamoDB server), ending its run however it ends."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from sagestream.config import Config
from sagestream.delta import Delta
from sagestream.errors import APIError
from sagestream.protocols import internal_handler
from sagestream.protocols.responses import RESPONSES
from sagestream.protocols.responses.background import INTERNAL_EVENT, ResumableEncoder, is_internal
from sagestream.protocols.responses.encoder import ResponsesEncoder
from sagestream.protocols.responses.runs import Runs, follow
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


def test_a_resumable_stream_is_followed_to_its_end_and_its_run_ends_completed(runs: Runs) -> None:
    inner = encoder()
    kept = ResumableEncoder(inner, runs, OWNER)
    written = kept.encode(Delta(content="Hel")) + kept.encode(Delta(content="lo", finish_reason="stop")) + kept.done()
    kept.ended()
    followed = b"".join(follow(runs, inner.id, OWNER, -1, until=float("inf"), poll_s=0.01))
    assert followed == written
    state = runs.state(inner.id, OWNER)
    assert state is not None and state.status == "completed" and not state.background
    assert kept.final is not None and json.loads(kept.final)["output"][0]["content"][0]["text"] == "Hello"


def test_a_resumable_stream_that_failed_or_lost_its_client_ends_its_run_failed(runs: Runs) -> None:
    failed, left = ResumableEncoder(encoder(), runs, OWNER), ResumableEncoder(encoder(), runs, OWNER)
    failed.encode(Delta(content="Hi"))
    failed.error(APIError(502, "the endpoint failed", type="server_error", code="upstream_error"))
    left.encode(Delta(content="Hi"))  # and then the client went away: no end event
    for kept in (failed, left):
        kept.ended()
        state = runs.state(kept.inner.id, OWNER)
        assert state is not None and state.status == "failed"


def test_a_stream_that_wrote_nothing_begins_no_run(runs: Runs) -> None:
    kept = ResumableEncoder(encoder(), runs, OWNER)
    kept.ended()
    assert runs.state(kept.inner.id, OWNER) is None
