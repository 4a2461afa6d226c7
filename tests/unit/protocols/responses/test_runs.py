"""A response while it runs, on moto's DynamoDB server with the template's key schema: its state moves only the
ways a run may (claimed once, cancelled only while it runs and only in the background, never completed once
cancelled), only its owner sees it, and its events are written in batches (a few writes, not one per token) and
read back in order, replayed after any sequence number and followed until the end."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from sagestream.protocols.responses.runs import FLUSH_S, MAX_RUN_S, Batch, EventLog, Runs, follow, split_events
from sagestream.protocols.responses.store import DynamoStore, owner_of
from sagestream_local.dynamodb import LocalDynamoDB

ALICE, BOB = owner_of("key:alice"), owner_of("key:bob")


def event(seq: int, kind: str = "response.output_text.delta") -> bytes:
    return f'event: {kind}\ndata: {{"type":"{kind}","sequence_number":{seq}}}\n\n'.encode()


@pytest.fixture(scope="module")
def db() -> Iterator[LocalDynamoDB]:
    with LocalDynamoDB() as local:
        yield local


@pytest.fixture
def runs(db: LocalDynamoDB) -> Runs:
    return Runs(DynamoStore(db.table, ttl_s=3600, client=db.client()))


def new_id() -> str:
    return "resp_" + os.urandom(8).hex()


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


def test_tokens_25_ms_apart_take_a_write_per_flush_interval_not_one_each(runs: Runs) -> None:
    rid = new_id()
    log = EventLog(runs, rid, ALICE)
    started = time.monotonic()
    for seq in range(60):
        log.add(event(seq), seq, 1)
        time.sleep(0.025)
    log.close()
    elapsed = time.monotonic() - started
    # 60 events over about 1.5 s: a batch per FLUSH_S (0.1 s) is about 15 writes (a slow machine: fewer, larger).
    assert 2 <= log.writes <= elapsed / FLUSH_S + 2 and log.writes < 40 and log.failures == 0
    events = [e for batch in runs.batches(rid, 0) for e in batch.events()]
    assert [seq for seq, _ in events] == list(range(60))
    assert events[7][1] == event(7)


def test_a_batch_is_written_at_its_size_limit_without_waiting(runs: Runs) -> None:
    rid = new_id()
    log = EventLog(runs, rid, ALICE, flush_s=60.0, batch_bytes=1000)
    log.add(event(0) + b": " + b"x" * 1000 + b"\n\n", 0, 1)
    deadline = time.monotonic() + 5
    while log.writes == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log.writes == 1
    log.close()


def test_a_batch_too_large_for_one_item_is_split_between_events(runs: Runs) -> None:
    rid = new_id()
    noise = [os.urandom(120_000).hex().encode() for _ in range(3)]  # incompressible: 720 KB in all
    data = b"".join(f"event: e\ndata: {n}".encode() + noise[n] + b"\n\n" for n in range(3))
    assert runs.put_events(rid, ALICE, split_batch(data)) >= 2
    assert [seq for batch in runs.batches(rid, 0) for seq, _ in batch.events()] == [0, 1, 2]


def split_batch(data: bytes) -> Batch:
    return Batch(0, len(split_events(data, 0)) - 1, data)


def test_follow_replays_after_a_sequence_number_then_follows_to_the_terminal_event(runs: Runs) -> None:
    rid = new_id()
    runs.begin(rid, ALICE, {"id": rid}, background=False)
    log = EventLog(runs, rid, ALICE, flush_s=0.05)
    for seq in range(5):
        log.add(event(seq), seq, 1)
    time.sleep(0.2)

    def rest() -> None:
        for seq in range(5, 9):
            log.add(event(seq), seq, 1)
            time.sleep(0.05)
        log.add(event(9, "response.completed"), 9, 1)
        log.close()

    writer = threading.Thread(target=rest)
    writer.start()
    got = [e for e in follow(runs, rid, ALICE, 2, until=time.monotonic() + 10, poll_s=0.05) if e]
    writer.join()
    assert got == [event(n) for n in range(3, 9)] + [event(9, "response.completed")]


def test_follow_ends_when_the_run_ended_without_a_terminal_event(runs: Runs) -> None:
    rid = new_id()
    runs.begin(rid, ALICE, {"id": rid}, background=True, job={})
    runs.claim(rid)
    log = EventLog(runs, rid, ALICE, flush_s=0.01)
    log.add(event(0) + event(1), 0, 2)
    log.close()
    runs.cancel(rid, ALICE)
    started = time.monotonic()
    got = [e for e in follow(runs, rid, ALICE, -1, until=started + 10, poll_s=0.05) if e]
    assert got == [event(0), event(1)] and time.monotonic() - started < 5


def test_follow_gives_up_at_its_deadline(runs: Runs) -> None:
    rid = new_id()
    runs.begin(rid, ALICE, {"id": rid}, background=False)
    polls = list(follow(runs, rid, ALICE, -1, until=time.monotonic() + 0.3, poll_s=0.05))
    assert polls and set(polls) == {b""}


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


def test_a_queued_run_is_taken_out_of_the_queue_once_and_its_quota_given_back(runs: Runs) -> None:
    from sagestream.protocols.responses import background

    settled: list[object] = []

    class App:
        def settle_quota(self, record: object, job: object) -> None:
            settled.append((record, job))

    rid, quota = new_id(), {"request_id": "r1", "estimate": 5, "items": [["pk", 70]], "tokens": True}
    runs.begin(rid, ALICE, {"id": rid}, background=True, job={"quota": quota})
    assert runs.dequeue(rid, BOB) is False, "not another caller's to cancel"
    background.dequeue(App(), runs, rid, ALICE)
    background.dequeue(App(), runs, rid, ALICE)  # a second cancel (or a delete after it) gives back nothing more
    assert settled == [(None, quota)], "nothing generated: settled to nothing, once"
    state = runs.state(rid, ALICE)
    assert state is not None and state.status == "cancelled"
    assert runs.claim(rid) is False, "the run, when its event comes, does not start"
    started = new_id()
    runs.begin(started, ALICE, {"id": started}, background=True, job={"quota": quota})
    assert runs.claim(started)
    assert runs.dequeue(started, ALICE) is False, "a run that started settles itself"
