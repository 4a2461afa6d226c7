"""A run's event log on moto's DynamoDB: events written in batches (a few writes, not one per token), read back in
order, replayed after any sequence number and followed until the end, its deadline, or a run ended without one."""

from __future__ import annotations

import os
import threading
import time

from sagestream.protocols.responses.eventlog import FLUSH_S, EventLog, follow
from sagestream.protocols.responses.runs import Batch, Runs, split_events
from tests.unit.protocols.responses.conftest import ALICE, event, new_id


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
