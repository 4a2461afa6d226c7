"""The Responses API's route through the app: streamed through the one pipeline, a failure mid-stream, stored ids."""

from __future__ import annotations

import json
from typing import Any

from sagestream_local.endpoint import Scenario, exception_frame, payload_part_frame
from tests.fakes import Upstream, event_stream_response
from tests.unit.protocols.responses.test_encoder import app, sdk_accumulates, split
from tests.unit.protocols.responses.test_request import CFG
from tests.unit.test_app import run


def test_the_route_streams_through_the_one_pipeline() -> None:
    upstream = Upstream(scenario=Scenario(ttft_ms=0, cadence_ms=0, tokens=4, non_ascii=0))
    handler = app.App(CFG, __import__("tests.fakes", fromlist=["stubbed_client"]).stubbed_client(upstream))
    stream = run(handler, "POST", "/v1/responses", {"input": "Hi", "stream": True})
    assert stream.status == 200
    _, final = sdk_accumulates(stream.writes)
    assert final.status == "completed" and final.output_text


def test_a_stored_response_is_a_404_that_says_nothing_is_stored() -> None:
    handler = app.App(CFG, None)
    for method in ("GET", "DELETE"):
        stream = run(handler, method, "/v1/responses/resp_123")
        assert stream.status == 404
        assert "stateless" in json.loads(stream.body)["error"]["message"]


def test_a_failure_mid_stream_through_the_route_is_response_failed() -> None:
    token = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    failure = exception_frame("ModelStreamError", {"Message": "the model died", "ErrorCode": "ModelError"})

    def fail_after_one_token(operation: str, payload: Any) -> Any:
        return event_stream_response([payload_part_frame(token), failure])

    from tests.fakes import stubbed_client

    handler = app.App(CFG, stubbed_client(Upstream(override=fail_after_one_token)))
    stream = run(handler, "POST", "/v1/responses", {"input": "Hi", "stream": True})
    kinds = [p["type"] for w in stream.writes for p in split(w)]
    assert kinds[-2:] == ["error", "response.failed"] and "response.completed" not in kinds
