"""A response while it runs, on moto's DynamoDB server with the template's key schema: its state moves only the
ways a run may (claimed once, cancelled only while it runs and only in the background, never completed once
cancelled), only its owner sees it, and a delete takes every item of it."""

from __future__ import annotations

import time

from sagestream.protocols.responses.eventlog import EventLog, follow
from sagestream.protocols.responses.runs import MAX_RUN_S, Runs
from sagestream_local.dynamodb import LocalDynamoDB
from tests.unit.protocols.responses.conftest import ALICE, BOB, event, new_id


def test_a_background_run_is_claimed_once_and_ends_once(runs: Runs) -> None:
    rid = new_id()
    runs.begin(rid, ALICE, {"id": rid, "output": []}, background=True, job={"body": "x"})
    assert runs.job(rid) == (ALICE, {"body": "x"})
    state = runs.state(rid, ALICE)
    assert state is not None and state.status == "queued" and state.background and state.response["id"] == rid
    assert runs.claim(rid) is True
    assert runs.claim(rid) is False, "a second delivery of the same event does not run it again"
    assert runs.finish(rid, "completed", {"id": rid, "output": [1]}) is True
    state = runs.state(rid, ALICE)
    assert state is not None and state.status == "completed" and state.response["output"] == [1]
    assert state.response["status"] == "completed"


def test_only_the_owner_sees_or_cancels_a_run(runs: Runs) -> None:
    rid = new_id()
    runs.begin(rid, ALICE, {"id": rid}, background=True, job={})
    assert runs.state(rid, BOB) is None and runs.cancel(rid, BOB) is None
    state = runs.state(rid, ALICE)
    assert state is not None and state.status == "queued" and not state.cancel_requested


def test_a_cancelled_run_stays_cancelled_and_keeps_its_last_response(runs: Runs) -> None:
    rid = new_id()
    runs.begin(rid, ALICE, {"id": rid, "output": []}, background=True, job={})
    assert runs.claim(rid)
    first = runs.cancel(rid, ALICE)
    assert first is not None and first.status == "cancelled" and first.cancel_requested and runs.cancelled(rid)
    again = runs.cancel(rid, ALICE)
    assert again is not None and again.status == "cancelled"
    assert runs.finish(rid, "completed", {"id": rid, "output": ["part"]}) is False
    state = runs.state(rid, ALICE)
    assert state is not None and state.status == "cancelled" and state.response["output"] == ["part"]


def test_a_finished_or_foreground_run_is_not_cancelled(runs: Runs) -> None:
    done, foreground = new_id(), new_id()
    runs.begin(done, ALICE, {"id": done}, background=True, job={})
    runs.claim(done)
    runs.finish(done, "completed", {"id": done})
    state = runs.cancel(done, ALICE)
    assert state is not None and state.status == "completed" and not state.cancel_requested
    runs.begin(foreground, ALICE, {"id": foreground}, background=False)
    state = runs.cancel(foreground, ALICE)
    assert state is not None and state.status == "in_progress" and not state.background


def test_a_queued_run_cancelled_before_it_starts_is_never_claimed(runs: Runs) -> None:
    rid = new_id()
    runs.begin(rid, ALICE, {"id": rid}, background=True, job={})
    runs.cancel(rid, ALICE)
    assert runs.claim(rid) is False


def test_delete_removes_the_runs_every_item_for_its_owner_only(runs: Runs, db: LocalDynamoDB) -> None:
    rid = new_id()
    runs.begin(rid, ALICE, {"id": rid}, background=True, job={"raw": "the prompt"})
    log = EventLog(runs, rid, ALICE, flush_s=0.01)
    log.add(event(0), 0, 1)
    log.close()
    log = EventLog(runs, rid, ALICE, flush_s=0.01)
    log.add(event(1), 1, 1)
    log.close()
    assert runs.delete(rid, BOB) is False and runs.state(rid, ALICE) is not None
    assert runs.delete(rid, ALICE) is True
    for kind in ("state", "job", "events"):
        left = db.client().query(
            TableName=db.table,
            KeyConditionExpression="id = :i",
            ExpressionAttributeValues={":i": {"S": f"{rid}#{kind}"}},
        )
        assert left["Items"] == [], kind
    assert runs.delete(rid, ALICE) is False


def test_a_run_in_progress_for_longer_than_an_invocation_lives_reads_as_failed(runs: Runs, db: LocalDynamoDB) -> None:
    rid = new_id()
    runs.begin(rid, ALICE, {"id": rid, "output": []}, background=True, job={})
    runs.claim(rid)
    long_ago = str(int(time.time()) - MAX_RUN_S - 1)
    db.client().update_item(
        TableName=db.table,
        Key={"id": {"S": f"{rid}#state"}, "part": {"N": "0"}},
        UpdateExpression="SET started_at = :t",
        ExpressionAttributeValues={":t": {"N": long_ago}},
    )
    state = runs.state(rid, ALICE)
    assert state is not None and state.status == "failed" and state.terminal and state.response["error"]
    assert list(follow(runs, rid, ALICE, -1, until=time.monotonic() + 5, poll_s=0.01)) == [], "its followers end"
