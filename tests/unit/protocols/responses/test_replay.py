"""Following a run from its log, on moto's DynamoDB: the events after a sequence number, then the end; a resume at
or past the end is still an event stream with the route's headers (one comment, every response has a body);
a starting_after that is not a whole number is refused by name."""

from __future__ import annotations

import time

import pytest

from sagestream.delta import Delta
from sagestream.http import Request
from sagestream.protocols.responses.replay import _follow, starting_after
from sagestream.protocols.responses.run_encoder import ResumableEncoder
from sagestream.protocols.responses.runs import Runs
from tests.fakes import call_of
from tests.unit.protocols.responses.conftest import ALICE
from tests.unit.protocols.responses.test_run_encoder import encoder


def finished_run(runs: Runs) -> tuple[str, int]:
    inner = encoder()
    kept = ResumableEncoder(inner, runs, ALICE)
    kept.encode(Delta(content="Hel"))
    kept.encode(Delta(content="lo", finish_reason="stop"))
    kept.done()
    kept.ended()
    return inner.id, inner.sequence - 1


def followed(runs: Runs, response_id: str, after: int) -> tuple[bytes, dict[str, str]]:
    asked = call_of(Request(method="GET", path=f"/v1/responses/{response_id}", headers={}, body=b""))
    _follow(asked, runs, response_id, ALICE, after, time.monotonic() + 10, 15.0, {})
    stream = asked.writer.stream
    return stream.body, dict(stream.headers)


def test_the_events_after_a_sequence_number_then_the_end(runs: Runs) -> None:
    response_id, last = finished_run(runs)
    body, headers = followed(runs, response_id, last - 2)
    assert headers["content-type"].startswith("text/event-stream") and headers["x-request-id"]
    assert body.count(b"\nevent: ") + body.startswith(b"event: ") == 2 and b"response.completed" in body


@pytest.mark.parametrize("past", [0, 5])
def test_a_resume_at_or_past_the_end_is_an_event_stream_with_a_comment(runs: Runs, past: int) -> None:
    response_id, last = finished_run(runs)
    body, headers = followed(runs, response_id, last + past)
    assert headers["content-type"].startswith("text/event-stream") and headers["x-request-id"]
    assert body.startswith(b":") and b"data:" not in body


def test_starting_after_is_a_whole_number_or_refused() -> None:
    assert starting_after({}) == -1 and starting_after({"starting_after": "3"}) == 3
    assert starting_after({"starting_after": "three"}) < -1
