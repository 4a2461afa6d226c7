"""The one DynamoDB adapter: every call bounded in total, botocore's errors mapped once, asked again only when
DynamoDB surely did not apply it; against moto's server where the answer matters, a fake where the fault does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import pytest

from sagestream import storage
from sagestream.storage import ConditionFailed, StorageError, Table, bound
from sagestream_local.dynamodb import LocalDynamoDB


@pytest.fixture(scope="module")
def db() -> Iterator[LocalDynamoDB]:
    with LocalDynamoDB() as local:
        yield local


def client_error(code: str, item: dict[str, Any] | None = None) -> botocore.exceptions.ClientError:
    response: dict[str, Any] = {"Error": {"Code": code, "Message": code}}
    if item is not None:
        response["Item"] = item
    return botocore.exceptions.ClientError(response, "UpdateItem")  # type: ignore[arg-type]


class Scripted:
    """A client whose ``update_item`` answers (or raises) what it is given, in order, counting the calls."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0
        self.release = threading.Event()

    def update_item(self, **_: Any) -> dict[str, Any]:
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if outcome == "stall":
            self.release.wait(10)
            return {}
        if isinstance(outcome, BaseException):
            raise outcome
        return dict(outcome)


def test_a_call_reads_and_writes_through_the_tables_client(db: LocalDynamoDB) -> None:
    table = Table(db.table, db.client())
    key = {"id": {"S": "resp_storage"}, "part": {"N": "0"}}
    table.call("put_item", Item={**key, "data": {"S": "x"}}, ConditionExpression="attribute_not_exists(id)")
    assert table.call("get_item", Key=key, ConsistentRead=True)["Item"]["data"] == {"S": "x"}
    with pytest.raises(ConditionFailed) as failed:
        table.call("put_item", Item={**key, "data": {"S": "y"}}, ConditionExpression="attribute_not_exists(id)")
    assert failed.value.applied is False and not failed.value.retryable


def test_a_stalled_call_ends_at_its_bound_not_at_botocores_read_timeout() -> None:
    stalled = Scripted("stall")
    table = Table("t", stalled, cap_s=0.3)
    begun = time.monotonic()
    with pytest.raises(StorageError) as failed:
        table.call("update_item", attempts=3, Key={})
    took = time.monotonic() - begun
    stalled.release.set()
    assert 0.25 <= took < 5, took  # bounded in total, and never asked again: its answer may yet apply it
    assert failed.value.applied is None and stalled.calls == 1


def test_the_callers_deadline_bounds_the_call_when_it_is_nearer() -> None:
    stalled = Scripted("stall")
    begun = time.monotonic()
    with pytest.raises(StorageError):
        Table("t", stalled, cap_s=30).call("update_item", deadline=begun + 0.2, Key={})
    stalled.release.set()
    assert time.monotonic() - begun < 5


def test_a_write_dynamodb_did_not_apply_is_asked_again_and_a_lost_answer_is_not() -> None:
    throttled = Scripted(client_error("ThrottlingException"), {"Attributes": {"n": {"N": "1"}}})
    answer = Table("t", throttled).call("update_item", attempts=3, sleep=lambda s: None, Key={})
    assert answer == {"Attributes": {"n": {"N": "1"}}} and throttled.calls == 2

    lost = Scripted(botocore.exceptions.ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), {})
    with pytest.raises(StorageError) as failed:
        Table("t", lost).call("update_item", attempts=3, sleep=lambda s: None, Key={})
    assert failed.value.applied is None and lost.calls == 1

    never_sent = Scripted(botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), {})
    assert Table("t", never_sent).call("update_item", attempts=3, sleep=lambda s: None, Key={}) == {}
    assert never_sent.calls == 2


def test_a_refusal_is_not_asked_again_and_a_failed_condition_carries_the_old_item() -> None:
    refused = Scripted(client_error("ValidationException"))
    with pytest.raises(StorageError) as failed:
        Table("t", refused).call("update_item", attempts=3, Key={})
    assert failed.value.code == "ValidationException" and failed.value.applied is False and refused.calls == 1

    condition = Scripted(client_error("ConditionalCheckFailedException", {"n": {"N": "5"}}))
    with pytest.raises(ConditionFailed) as held:
        Table("t", condition).call("update_item", attempts=3, Key={})
    assert held.value.item == {"n": {"N": "5"}} and condition.calls == 1


def test_the_bound_is_the_nearer_of_the_deadline_and_the_cap() -> None:
    assert bound(None, now=1.0, cap_s=2.0) == 3.0
    assert bound(2.5, now=1.0, cap_s=2.0) == 2.5


def test_one_client_per_endpoint_and_its_connections_closed_on_restore(
    db: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", db.url)
    for name, value in {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", db.region)
    client = storage.dynamodb()
    assert storage.dynamodb() is client
    assert Table(db.table).client is client
    Table(db.table).call("get_item", Key={"id": {"S": "none"}, "part": {"N": "0"}})
    storage.forget_connections()  # the next call opens a fresh connection
    assert "Item" not in Table(db.table).call("get_item", Key={"id": {"S": "none"}, "part": {"N": "0"}})
