"""Arbitrary requests into the relay: always a 2xx or a 4xx in the one error shape, never an exception or a 5xx.

The relay runs in this process over a real boto3 client answered in-process (tests/fakes.py), so
the upstream always answers well: a 5xx here would be the relay's own failure. The line splitter and the
dialect decoders have their own arbitrary-input properties in tests/unit (test_lines, test_dialects).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sagestream.config import Config
from sagestream.function_url import build_event
from tests.fakes import RecordingStream, Upstream, context, load_app, stubbed_client

app = load_app()
UPSTREAM = Upstream()
RELAY = app.App(
    Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "fuzz-llm", "MAX_TOKENS_LIMIT": "64"}), stubbed_client(UPSTREAM)
)

ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/fuzz-llm", "/health", "/"]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]
CONTENT_TYPES = ["application/json", "application/json; charset=utf-8", "text/plain", "application/x+json", ""]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
content = st.one_of(
    st.text(max_size=40),
    st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "x"]), "text": st.text()})),
    json_values,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "wizard"]), "content": content},
    optional={"name": st.text(max_size=8), "tool_call_id": json_values},
)
# Near-valid requests, so that most get past validation and reach the upstream and the SSE encoder.
request_fields = st.fixed_dictionaries(
    {},
    optional={
        "messages": st.lists(message, max_size=4) | json_values,
        "prompt": st.text(max_size=40) | json_values,
        "model": st.sampled_from(["fuzz-llm", "gpt-4o", ""]) | json_values,
        "stream": st.booleans() | json_values,
        "max_tokens": st.integers(-5, 10**20) | json_values,
        "max_completion_tokens": st.integers(-5, 200),
        "temperature": st.floats(allow_nan=False) | json_values,
        "top_p": st.floats(allow_nan=False),
        "stop": st.text(max_size=5) | st.lists(st.text(max_size=5), max_size=5) | json_values,
        "stream_options": st.fixed_dictionaries({}, optional={"include_usage": json_values}) | json_values,
        "n": json_values,
        "seed": json_values,
    },
)
bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    request_fields.map(lambda v: json.dumps(v).encode()),
)
header_pairs = st.lists(st.tuples(st.text(min_size=1, max_size=12), st.text(max_size=30)), max_size=4)


def assert_well_answered(stream: RecordingStream, method: str = "POST") -> None:
    assert stream.started and stream.status is not None
    assert 200 <= stream.status < 500, (stream.status, stream.body[:500])
    assert stream.headers["x-request-id"] == "stub-invocation"
    if method == "HEAD" and stream.status < 400:
        assert stream.body == b"", "HEAD answers as GET does, without the body"
    elif stream.status >= 400:
        assert stream.headers["content-type"] == "application/json"
        error = json.loads(stream.body)["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert isinstance(error["message"], str) and error["message"]
        assert "Traceback" not in error["message"]
    elif stream.headers.get("content-type", "").startswith("text/event-stream"):
        events = stream.data_events()  # every event is whole JSON
        assert events[-1] == "[DONE]", events[-3:]
        assert all("error" not in e for e in events[:-1])
    elif stream.headers.get("content-type") == "application/json":
        json.loads(stream.body)


def run(method: str, path: str, headers: list[tuple[str, str]], body: bytes) -> RecordingStream:
    event = build_event(method=method, raw_path=path, raw_query="", headers=headers, body=body, source_ip="127.0.0.1")
    stream = RecordingStream()
    RELAY(event, stream, context())  # raises nothing: an escaped exception fails the example
    return stream


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    method=st.sampled_from(METHODS),
    path=st.sampled_from(ROUTES) | st.text(max_size=30).map(lambda p: "/" + p),
    content_type=st.sampled_from(CONTENT_TYPES) | st.text(max_size=20),
    extra=header_pairs,
    body=bodies,
)
@example(method="POST", path="/v1/chat/completions", content_type="application/json", extra=[], body=b"[" * 100_000)
@example(method="POST", path="/v1/chat/completions", content_type="application/json", extra=[], body=b'{"a": NaN}')
@example(
    method="POST",
    path="/v1/chat/completions",
    content_type="application/json",
    extra=[],
    body=b'{"messages": [{"role": "user", "content": "\\ud800"}], "stream": true}',
)
def test_any_request_gets_a_2xx_or_a_4xx_in_the_error_shape(
    method: str, path: str, content_type: str, extra: list[tuple[str, str]], body: bytes
) -> None:
    assert_well_answered(run(method, path, [("content-type", content_type), *extra], body), method)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=request_fields, route=st.sampled_from(["/v1/chat/completions", "/v1/completions"]))
def test_any_near_valid_completion_request_is_answered_whole_or_refused_in_the_error_shape(
    fields: dict[str, Any], route: str
) -> None:
    stream = run("POST", route, [("content-type", "application/json")], json.dumps(fields).encode())
    assert_well_answered(stream)


def test_the_fuzzing_reaches_the_upstream() -> None:
    """A guard on the strategies: valid requests stream and the stub saw their bodies."""
    before = len(UPSTREAM.calls)
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    stream = run("POST", "/v1/chat/completions", [("content-type", "application/json")], body)
    assert stream.status == 200 and stream.data_events()[-1] == "[DONE]"
    assert len(UPSTREAM.calls) == before + 1
