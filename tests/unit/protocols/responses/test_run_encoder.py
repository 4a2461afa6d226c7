"""A stream whose events are kept while it is written, on moto's DynamoDB server: a foreground stream followed to
its end, its run ended however it ends; a background run's log watching for a cancel or a delete, which the
pipeline reads as ``stopped``, and a deleted run leaving none of its items behind once it has ended."""

from __future__ import annotations

import json
import time

from sagestream.config import Config
from sagestream.delta import Delta
from sagestream.errors import APIError
from sagestream.protocols.responses import RESPONSES
from sagestream.protocols.responses.encoder import ResponsesEncoder
from sagestream.protocols.responses.eventlog import follow
from sagestream.protocols.responses.run_encoder import ResumableEncoder
from sagestream.protocols.responses.runs import Runs
from tests.unit.protocols.responses.conftest import ALICE as OWNER
from tests.unit.protocols.responses.conftest import new_id


def encoder(response_id: str | None = None) -> ResponsesEncoder:
    parsed = RESPONSES.parse(b'{"input": "Hi", "stream": true}', Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "e"}))
    return ResponsesEncoder(parsed.original, model="m", id=response_id)


def until(condition: object, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.02)


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


def test_a_background_runs_log_sees_a_cancel_and_the_stream_stops_with_it(runs: Runs) -> None:
    rid = new_id()
    runs.begin(rid, OWNER, {"id": rid, "status": "in_progress"}, background=True)
    kept = ResumableEncoder(encoder(rid), runs, OWNER, background=True)
    assert kept.wake_s is not None and not kept.stopped
    kept.encode(Delta(content="Hel"))
    assert runs.cancel(rid, OWNER) is not None
    until(lambda: kept.stopped)
    assert kept.outcome == "cancelled"
    kept.ended()
    state = runs.state(rid, OWNER)
    assert state is not None and state.status == "cancelled"


def test_a_background_run_deleted_while_it_runs_stops_and_leaves_nothing(runs: Runs) -> None:
    rid = new_id()
    runs.begin(rid, OWNER, {"id": rid, "status": "in_progress"}, background=True)
    kept = ResumableEncoder(encoder(rid), runs, OWNER, background=True)
    kept.encode(Delta(content="Hel"))
    assert runs.delete(rid, OWNER)
    until(lambda: kept.stopped)
    kept.encode(Delta(content="lo"))  # written after the delete noticed: gone too once the run ends
    kept.ended()
    assert runs.state(rid, OWNER) is None and runs.batches(rid, 0) == []
