"""Taking a queued background response out of the queue (a cancel, a delete), on moto's DynamoDB: once, its quota
given back once, and never a run that has started."""

from __future__ import annotations

import time

import pytest

from sagestream.protocols.responses import cancelling
from sagestream.protocols.responses.runs import MAX_QUEUED_S, Runs
from sagestream_local.dynamodb import LocalDynamoDB
from tests.unit.protocols.responses.conftest import ALICE, BOB, new_id


def test_a_queued_run_is_taken_out_of_the_queue_once_and_its_quota_given_back(runs: Runs) -> None:
    settled: list[object] = []

    class App:
        def settle_quota(self, record: object, job: object) -> None:
            settled.append((record, job))

    rid, quota = new_id(), {"request_id": "r1", "estimate": 5, "items": [["pk", 70]], "tokens": True}
    runs.begin(rid, ALICE, {"id": rid}, background=True, job={"quota": quota})
    assert runs.dequeue(rid, BOB) is False, "not another caller's to cancel"
    cancelling.dequeue(App(), runs, rid, ALICE)
    cancelling.dequeue(App(), runs, rid, ALICE)  # a second cancel (or a delete after it) gives back nothing more
    assert settled == [(None, quota)], "nothing generated: settled to nothing, once"
    state = runs.state(rid, ALICE)
    assert state is not None and state.status == "cancelled"
    assert runs.claim(rid) is False, "the run, when its event comes, does not start"
    started = new_id()
    runs.begin(started, ALICE, {"id": started}, background=True, job={"quota": quota})
    assert runs.claim(started)
    assert runs.dequeue(started, ALICE) is False, "a run that started settles itself"


def test_a_queued_run_lambda_never_delivered_reads_failed_and_gives_its_quota_back_once(
    runs: Runs, db: LocalDynamoDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    settled: list[object] = []

    class App:
        def settle_quota(self, record: object, job: object) -> None:
            settled.append((record, job))

    rid, quota = new_id(), {"request_id": "r2", "estimate": 5, "items": [["pk", 70]], "tokens": True}
    runs.begin(rid, ALICE, {"id": rid, "status": "queued"}, background=True, job={"quota": quota})
    monkeypatch.setattr(cancelling, "runs_for", lambda cfg: runs)
    fresh = cancelling.status(App(), None, "key:alice", rid)  # type: ignore[arg-type]
    assert fresh is not None and fresh["status"] == "queued" and settled == []
    stale = str(int(time.time()) - MAX_QUEUED_S - 60)
    key = {"id": {"S": f"{rid}#state"}, "part": {"N": "0"}}
    db.client().update_item(
        TableName=db.table,
        Key=key,
        UpdateExpression="SET started_at = :t",
        ExpressionAttributeValues={":t": {"N": stale}},
    )
    for _ in range(2):
        shown = cancelling.status(App(), None, "key:alice", rid)  # type: ignore[arg-type]
        assert shown is not None and shown["status"] == "failed" and shown["error"]["message"]
    assert settled == [(None, quota)], "given back once, by the first read that found it stale"
    assert runs.claim(rid) is False, "an event delivered after all does not start it"
