"""The calls to SageMaker: the retry budget as botocore spends it, and the deadline as an upstream fault
(what a client sees for each fault is tests/unit/test_faults.py's)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from sagestream.config import Config
from sagestream.errors import APIError
from sagestream.faults import DeadlineReached
from sagestream.upstream import PayloadParts, invoke, open_stream
from sagestream_local.endpoint import payload_part_frame
from tests.fakes import Upstream, event_stream_response, response, stubbed_client
from tests.unit.test_faults import ARN, VLLM_CONTEXT, WRAPPED


def test_a_containers_4xx_is_asked_once_whatever_the_attempts_allowed() -> None:
    upstream = Upstream(
        override=lambda op, _: response(
            424,
            json.dumps(
                {
                    "ErrorCode": "CLIENT_ERROR_FROM_MODEL",
                    "Message": WRAPPED.format("too long"),
                    "OriginalMessage": VLLM_CONTEXT,
                    "OriginalStatusCode": 400,
                    "LogStreamArn": ARN,
                }
            ).encode(),
            {"x-amzn-ErrorType": "ModelError:http://internal.amazon.com/coral/com.amazonaws.sagemaker/"},
        )
    )
    config = Config(endpoint_name="llm", max_attempts=3)
    client = stubbed_client(upstream, max_attempts=config.max_attempts)
    with pytest.raises(APIError) as info:
        open_stream(client, config, b"{}")
    assert (info.value.status, info.value.code) == (400, "context_length_exceeded")
    assert len(upstream.calls) == 1, "botocore retried a container's refusal"
    throttled = Upstream(
        override=lambda op, _: response(429, b'{"message": "slow down"}', {"x-amzn-ErrorType": "ThrottlingException"})
    )
    with pytest.raises(APIError):
        open_stream(stubbed_client(throttled, max_attempts=3), config, b"{}")
    assert len(throttled.calls) == 3, "a throttled call is retried: the attempts setting does reach botocore"


# --- the deadline while streaming ------------------------------------------------------------------------------


def stream_of(frames: list[bytes], seconds_left: float | None) -> PayloadParts:
    """The frames as an open stream whose deadline is ``seconds_left`` from now (the client is built first)."""
    upstream = Upstream(override=lambda op, _: event_stream_response(frames))
    client = stubbed_client(upstream)
    body = client.invoke_endpoint_with_response_stream(EndpointName="e", Body=b"{}", ContentType="application/json")
    deadline = None if seconds_left is None else time.monotonic() + seconds_left
    return PayloadParts(body["Body"], deadline=deadline)


def test_parts_before_the_deadline_pass_and_the_deadline_is_raised_at_the_next_read() -> None:
    frames = [payload_part_frame(b"data: [DONE]\n\n")] * 3
    got = []
    with pytest.raises(DeadlineReached):
        for part in stream_of(frames, seconds_left=0.5):
            got.append(part)
            time.sleep(0.7)
    assert got == [b"data: [DONE]\n\n"]


def test_no_deadline_or_a_far_one_changes_nothing() -> None:
    frames = [payload_part_frame(b"x")] * 3
    assert list(stream_of(frames, seconds_left=None)) == [b"x"] * 3
    assert list(stream_of(frames, seconds_left=60)) == [b"x"] * 3


@pytest.mark.parametrize("call", [open_stream, invoke], ids=["stream", "whole"])
def test_no_time_left_means_the_endpoint_is_not_called_and_the_client_gets_the_deadlines_504(call: Any) -> None:
    upstream = Upstream()
    with pytest.raises(APIError) as raised:
        call(stubbed_client(upstream), Config(endpoint_name="e"), b"{}", deadline=time.monotonic() - 1)
    assert (raised.value.status, raised.value.code) == (504, "deadline_exceeded")
    assert upstream.calls == []
