"""What the Responses API's run tests share: moto's DynamoDB on loopback with the template's key schema, the runs on
it, fresh ids, and an SSE event of the Responses encoder's shape."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

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
