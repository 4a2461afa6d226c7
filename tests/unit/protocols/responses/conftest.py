"""What the Responses API's run tests share: moto's DynamoDB on loopback with the template's key schema, the runs on
it, fresh ids, and an SSE event of the Responses encoder's shape."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sagestream.config import Config
from sagestream.protocols.responses import stored
from sagestream.protocols.responses.runs import Runs
from sagestream.protocols.responses.store import DynamoStore, owner_of
from sagestream_local.dynamodb import LocalDynamoDB

ALICE, BOB = owner_of("key:alice"), owner_of("key:bob")


def event(seq: int, kind: str = "response.output_text.delta") -> bytes:
    return f'event: {kind}\ndata: {{"type":"{kind}","sequence_number":{seq}}}\n\n'.encode()


def new_id() -> str:
    return "resp_" + os.urandom(8).hex()


@pytest.fixture(scope="module")
def db() -> Iterator[LocalDynamoDB]:
    with LocalDynamoDB() as local:
        yield local


@pytest.fixture
def runs(db: LocalDynamoDB) -> Runs:
    return Runs(DynamoStore(db.table, ttl_s=3600, client=db.client()))


@pytest.fixture(scope="module")
def cfg(db: LocalDynamoDB) -> Iterator[Config]:
    """A configuration whose store is ``db``'s table, reached as the function reaches it (its own client, by
    botocore's environment), with chains of at most 2 responses."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in {
            "AWS_ENDPOINT_URL_DYNAMODB": db.url,
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": db.region,
        }.items():
            env.setenv(name, value)
        stored._STORES.clear()
        stored._RUNS.clear()
        yield Config(endpoint_name="e", responses_store="dynamodb", responses_table=db.table, responses_max_chain=2)
        stored._STORES.clear()
        stored._RUNS.clear()
