"""The function, unchanged, under cargo-lambda's Runtime API and streaming Function URL.

What cargo-lambda does differently from Lambda, and the runtime copes with: ``AWS_LAMBDA_RUNTIME_API`` is a
URL with a path, ``Lambda-Runtime-Deadline-Ms`` is a duration (600000), the prelude must carry ``cookies`` and
arrive as one chunk with the separator as the next, and the streamed ``/response`` POST is answered ``200``
before its body ends.
"""

from __future__ import annotations

import json
import time

from tests.client import gaps_ms, request
from tests.emulator.conftest import Emulated

CHAT = "/v1/chat/completions"


def _chat(emulated: Emulated, **kw: object) -> dict:
    return {"messages": [{"role": "user", "content": "Tell me about rivers."}], "stream": True, **kw}


def _content(resp) -> list[str]:
    return [
        e["choices"][0]["delta"]["content"]
        for e in resp.data_events()
        if isinstance(e, dict) and e.get("choices") and e["choices"][0].get("delta", {}).get("content")
    ]


def _records(emulated: Emulated, name: str) -> list[dict]:
    out = []
    for line in emulated.log_lines(name):
        if line.startswith("{") and '"message":"invocation"' in line:
            out.append(json.loads(line))
    return out


def _wait_for_record(emulated: Emulated, name: str, request_id: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in _records(emulated, name):
            if record.get("function_request_id") == request_id:
                return record
        time.sleep(0.05)
    raise AssertionError(f"no log record for invocation {request_id} within {timeout} s")


def test_a_streamed_chat_arrives_delta_by_delta_twice_in_a_row(cargo_lambda: Emulated) -> None:
    cargo_lambda.endpoint.set_scenario(ttft_ms=5, cadence_ms=25, tokens=12)
    try:
        bursts_per_try = []
        for _ in range(2):  # two invocations in a row through the same runtime process
            resp = request(
                cargo_lambda.url, "POST", cargo_lambda.path("sagestream", CHAT), _chat(cargo_lambda), timeout=60
            )
            assert resp.status == 200 and resp.complete, resp.body[:300]
            assert resp.header("content-type").startswith("text/event-stream")
            tokens = _content(resp)
            assert len(tokens) == 12
            assert resp.data_events()[-1] == "[DONE]"
            content_chunks = [c for c in resp.chunks if b'"content":"' in c.data and b'"role"' not in c.data]
            # One HTTP chunk per delta at the client: cargo-lambda relays each chunk as it comes.
            assert len(content_chunks) == 12
            bursts_per_try.append(sum(1 for g in gaps_ms(content_chunks) if g < 1.0))
        # 25 ms apart at the model: a relay that held deltas back would deliver them together.
        assert min(bursts_per_try) == 0, f"deltas that arrived together, per invocation: {bursts_per_try}"
    finally:
        cargo_lambda.endpoint.reset_scenario()


def test_an_error_before_the_first_byte_is_openais_shape_with_its_status(cargo_lambda: Emulated) -> None:
    resp = request(
        cargo_lambda.url,
        "POST",
        cargo_lambda.path("sagestream", CHAT),
        b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 400
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_json"
    assert set(error) == {"message", "type", "param", "code"}
    unknown = request(
        cargo_lambda.url, "POST", cargo_lambda.path("sagestream", CHAT), _chat(cargo_lambda, model="no-such-model")
    )
    assert unknown.status == 404 and unknown.json()["error"]["code"] == "model_not_found"


def test_a_client_that_leaves_is_seen_by_the_function(cargo_lambda: Emulated) -> None:
    cargo_lambda.endpoint.set_scenario(ttft_ms=5, cadence_ms=50, tokens=200)
    try:
        resp = request(
            cargo_lambda.url, "POST", cargo_lambda.path("sagestream", CHAT), _chat(cargo_lambda), stop_after=4
        )
        assert resp.status == 200 and len(resp.chunks) == 4
        # Found by its own id: a record is written after its response ends, so the one before may land late.
        request_id = resp.header("x-request-id")
        assert request_id
        record = _wait_for_record(cargo_lambda, "sagestream", request_id)
        assert record["client_disconnected"] is True
        # 200 tokens 50 ms apart take 10 s; the function stopped long before.
        assert record["output_tokens"] < 100 and record["duration_ms"] < 5000
    finally:
        cargo_lambda.endpoint.reset_scenario()


def test_a_handled_error_after_the_first_byte_is_an_sse_error_event_and_a_clean_end(cargo_lambda: Emulated) -> None:
    """sagestream's own mid-stream errors end cleanly, no trailers: see StreamingResponse.fail for why."""
    cargo_lambda.endpoint.set_scenario(fault="model_stream_error", fault_after=3, non_ascii=0.0)
    try:
        resp = request(cargo_lambda.url, "POST", cargo_lambda.path("sagestream", CHAT), _chat(cargo_lambda))
    finally:
        cargo_lambda.endpoint.reset_scenario()
    assert resp.status == 200 and resp.complete, "the stream must end with its last chunk"
    assert len(_content(resp)) == 3
    last = resp.data_events()[-1]
    assert set(last) == {"error"} and last["error"]["code"] == "model_stream_error"


def test_an_unhandled_error_after_the_first_byte_ends_with_the_trailers_and_the_next_invocation_is_served(
    cargo_lambda: Emulated,
) -> None:
    """What cargo-lambda makes of the error trailers: the body so far intact, then (in most tries here, not
    all: it races) the client's transfer ends without its terminating chunk. The runtime's part is the same
    either way, and the process goes on to the next invocation."""
    resp = request(cargo_lambda.url, "POST", cargo_lambda.path("fails", "/"), {"after": 2})
    assert resp.status == 200
    assert resp.body == b"part 0\npart 1\n"
    assert "ValueError: the handler failed on purpose" in "\n".join(cargo_lambda.log_lines("fails"))
    # The next invocation is served: the runtime finished the failed one cleanly.
    again = request(cargo_lambda.url, "POST", cargo_lambda.path("fails", "/"), {"after": 1})
    assert again.status == 200 and again.body == b"part 0\n"
