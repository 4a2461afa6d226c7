"""The sequence numbers of one response's events: each once, in order, whoever builds the event."""

from __future__ import annotations

import json

from sagestream.protocols.responses.events import EventSequence


def test_events_lifecycles_and_taken_numbers_share_one_sequence() -> None:
    events = EventSequence()
    first = events.event("response.output_text.delta", {"delta": 'say "hi"'})
    second = events.lifecycle("response.created", b'{"id":"resp_1"}')
    taken = events.take(3)
    last = events.event("response.completed", {})
    numbers = [json.loads(e.split(b"\n")[1].removeprefix(b"data: "))["sequence_number"] for e in (first, second, last)]
    assert numbers == [0, 1, 5] and taken == 2 and events.seq == 6


def test_a_lifecycle_event_carries_the_response_json_as_given() -> None:
    event = EventSequence().lifecycle("response.in_progress", b'{"id":"resp_1","status":"in_progress"}')
    head, data, end = event.split(b"\n", 2)
    assert head == b"event: response.in_progress" and end == b"\n"
    body = json.loads(data.removeprefix(b"data: "))
    assert body == {
        "type": "response.in_progress",
        "response": {"id": "resp_1", "status": "in_progress"},
        "sequence_number": 0,
    }
