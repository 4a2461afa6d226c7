"""Taking a queued background response out of the queue (a cancel, a delete), on moto's DynamoDB: once, its quota
given back once, and never a run that has started."""

from __future__ import annotations

from sagestream.protocols.responses import cancelling
from sagestream.protocols.responses.runs import Runs
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
