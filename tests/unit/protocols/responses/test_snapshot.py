"""The response object: what it repeats of the request, its usage, and its snapshots while it streams."""

from __future__ import annotations

import json

from sagestream.delta import Usage
from sagestream.protocols.responses.snapshot import ResponseSnapshot, echo, queued_response, usage_json
from tests.unit.protocols.responses.test_request import parse


def test_usage_has_every_field_strict_clients_require_and_null_without_counts() -> None:
    assert usage_json(None) is None
    usage = usage_json(Usage(None, 4, None))
    assert usage is not None
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (0, 4, 4)
    assert usage["input_tokens_details"] == {"cached_tokens": 0, "cache_write_tokens": 0}


def test_the_echo_repeats_what_was_sent_and_openais_defaults_for_the_rest() -> None:
    settings = echo(parse({"input": "Hi", "temperature": 0.2, "metadata": {"k": "v"}}).original)
    assert settings["temperature"] == 0.2 and settings["metadata"] == {"k": "v"}
    assert (settings["top_p"], settings["tool_choice"], settings["truncation"]) == (1.0, "auto", "disabled")
    assert settings["text"] == {"format": {"type": "text"}}


def test_a_snapshot_puts_each_finished_items_text_where_its_marker_is() -> None:
    snapshot = ResponseSnapshot(parse({"input": "Hi"}).original, model="m", id="resp_1", created_at=7)
    snapshot.output.append({"id": "msg_1", "type": "message", "content": [{"text": "\x00msg_1"}]})
    snapshot.texts.append((json.dumps("\x00msg_1").encode(), json.dumps('a "quoted" answer').encode()))
    body = json.loads(snapshot.json("completed", Usage(2, 3, 5)))
    assert body["output"][0]["content"][0]["text"] == 'a "quoted" answer'
    assert (body["id"], body["created_at"], body["status"], body["usage"]["total_tokens"]) == (
        "resp_1",
        7,
        "completed",
        5,
    )
    assert isinstance(body["completed_at"], int)
    assert json.loads(snapshot.json("in_progress", None))["completed_at"] is None


def test_a_queued_response_has_no_output_and_no_usage_yet() -> None:
    body = json.loads(queued_response(parse({"input": "Hi"}).original, model="m", id="resp_q", created_at=1))
    assert (body["status"], body["output"], body["usage"], body["id"]) == ("queued", [], None, "resp_q")
