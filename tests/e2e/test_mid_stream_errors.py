"""Errors after the first byte, decided: an SSE error event and a clean end, not the Runtime API's trailers.

AWS's custom-runtime guide says a streamed response ended with the ``Lambda-Runtime-Function-Error-*``
trailers is treated by Lambda as a successful response (so they would not count in the ``Errors`` metric),
and what a Function URL client sees of them is not documented; cargo-lambda cuts the client's transfer.
So sagestream's handled mid-stream failures end cleanly, and the trailers stay for a handler that raised
(tests/protocol/test_runtime.py). The full reasoning is in ``StreamingResponse.fail`` and
docs/limits-and-troubleshooting.md.
"""

from __future__ import annotations

from tests.client import request
from tests.e2e.conftest import GetStack


def test_a_handled_fault_after_the_first_byte_ends_the_runtime_api_body_cleanly(stack_for: GetStack) -> None:
    # One process of its own, so its last_error is this invocation's.
    stack = stack_for(concurrency=1, SAGESTREAM_TEST_STACK="mid-stream-errors")
    assert stack.endpoint is not None and stack.pool is not None
    stack.endpoint.set_scenario(fault="model_stream_error", fault_after=3, non_ascii=0.0)
    body = {"messages": [{"role": "user", "content": "Tell me about rivers"}], "stream": True}
    resp = request(stack.url, "POST", "/v1/chat/completions", body)
    assert resp.status == 200 and resp.complete
    last = resp.data_events()[-1]
    assert set(last) == {"error"} and last["error"]["code"] == "model_stream_error"
    environment = stack.pool.environments[0]
    # The local Runtime API records the trailers as a FunctionError(started=True); a clean end records None.
    assert environment.last_error is None
    assert environment.last_response_headers["trailer"].startswith("Lambda-Runtime-Function-Error-Type")
