"""The stored-responses table over HTTP, as botocore reaches DynamoDB: moto's server on loopback with the
template's key schema. A response reads back whole (several items when it is large), only for its owner,
never after it expires, and is written once."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sagestream.protocols.responses.store import PART_BYTES, DynamoStore, StoreError, owner_of
from sagestream_local.dynamodb import LocalDynamoDB

ALICE, BOB = owner_of("key:alice"), owner_of("key:bob")
RESPONSE = {"id": "resp_1", "object": "response", "output": [{"type": "message", "content": []}]}


@pytest.fixture(scope="module")
def db() -> Iterator[LocalDynamoDB]:
    with LocalDynamoDB() as local:
        yield local


@pytest.fixture
def store(db: LocalDynamoDB) -> DynamoStore:
    return DynamoStore(db.table, ttl_s=3600, client=db.client())


def test_a_response_reads_back_whole_for_its_owner_only(store: DynamoStore) -> None:
    store.put("resp_1", ALICE, RESPONSE, [{"role": "user", "content": "Hi"}], depth=1)
    stored = store.get("resp_1", ALICE)
    assert stored is not None and stored.response == RESPONSE and stored.depth == 1
    assert stored.input_items == [{"role": "user", "content": "Hi"}]
    assert store.get("resp_1", BOB) is None, "another caller's response is as missing as one never written"
    assert store.get("resp_none", ALICE) is None


def test_a_large_response_spans_several_items_and_reads_back_whole(store: DynamoStore) -> None:
    noise = os.urandom(PART_BYTES * 3).hex()  # incompressible: about six parts
    store.put("resp_big", ALICE, RESPONSE, [{"role": "user", "content": noise}], depth=3)
    stored = store.get("resp_big", ALICE)
    assert stored is not None and stored.input_items[0]["content"] == noise


def test_a_response_is_written_once(store: DynamoStore) -> None:
    store.put("resp_once", ALICE, RESPONSE, [], depth=1)
    with pytest.raises(StoreError):
        store.put("resp_once", BOB, {"id": "resp_once", "replaced": True}, [], depth=1)
    stored = store.get("resp_once", ALICE)
    assert stored is not None and stored.response == RESPONSE


def test_an_expired_response_is_gone_before_dynamodb_deletes_it(db: LocalDynamoDB) -> None:
    store = DynamoStore(db.table, ttl_s=1, client=db.client())
    store.put("resp_old", ALICE, RESPONSE, [], depth=1)
    assert store.get("resp_old", ALICE) is not None
    time.sleep(2.1)
    assert store.get("resp_old", ALICE) is None


def test_delete_is_for_the_owner_and_removes_every_part(store: DynamoStore, db: LocalDynamoDB) -> None:
    store.put("resp_del", ALICE, RESPONSE, [os.urandom(PART_BYTES).hex()], depth=1)
    assert store.delete("resp_del", BOB) is False and store.get("resp_del", ALICE) is not None
    assert store.delete("resp_del", ALICE) is True
    left: Any = db.client().query(
        TableName=db.table, KeyConditionExpression="id = :i", ExpressionAttributeValues={":i": {"S": "resp_del"}}
    )
    assert left["Items"] == [] and store.delete("resp_del", ALICE) is False


def test_a_response_cut_short_by_a_failed_write_is_not_a_response(store: DynamoStore, db: LocalDynamoDB) -> None:
    store.put("resp_cut", ALICE, RESPONSE, [os.urandom(PART_BYTES).hex()], depth=1)
    db.client().delete_item(TableName=db.table, Key={"id": {"S": "resp_cut"}, "part": {"N": "1"}})
    assert store.get("resp_cut", ALICE) is None


def test_a_service_failure_is_a_store_error(db: LocalDynamoDB) -> None:
    store = DynamoStore("no-such-table", ttl_s=60, client=db.client())
    with pytest.raises(StoreError):
        store.get("resp_1", ALICE)
