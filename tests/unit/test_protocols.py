"""The client-API seam: a route's API reads the request and writes its answers and errors, over the one pipeline.

A made-up API (``Bracketed``) stands in for a second client protocol: its refusals, its streamed events, its
error event after the first byte and its whole answer must each reach the client in its own format, while the
OpenAI routes keep theirs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sagestream import http
from sagestream.config import Config
from sagestream.delta import Delta
from sagestream.errors import APIError
from sagestream.protocols import _requests
from sagestream.protocols._api import Parsed, completion_route
from sagestream.protocols.openai import CHAT
from sagestream_local.endpoint import Scenario, exception_frame, payload_part_frame
from tests.fakes import Upstream, event_stream_response, load_app, stubbed_client
from tests.unit.test_app import run

app = load_app()


@dataclass
class BracketEncoder:
    """Each text delta as ``[text]``, the end as ``<end>``, an error as ``<error:code>``."""

    wrote: list[str] = field(default_factory=list)

    def encode(self, delta: Delta) -> bytes:
        return f"[{delta.content}]".encode() if delta.content else b""

    def done(self) -> bytes:
        return b"<end>"

    def error(self, err: APIError) -> bytes:
        return f"<error:{err.code}>".encode()


class Bracketed:
    kind = "bracketed"

    def check_headers(self, headers: Any) -> tuple[str, ...]:
        return ()

    def parse(self, raw: bytes, cfg: Config, caller: str = "") -> Parsed:
        return Parsed(CHAT.parse(raw, cfg).request, original="mine")

    def encoder(self, parsed: Parsed, cfg: Config) -> BracketEncoder:
        assert parsed.original == "mine"
        return BracketEncoder()

    def whole(self, answer: Delta, parsed: Parsed, cfg: Config) -> bytes:
        return f"whole:{answer.content}:{answer.finish_reason}".encode()

    def error_body(self, err: APIError) -> bytes:
        return json.dumps({"kind": "bracket-error", "status": err.status, "what": err.param}).encode()

    id_headers = ("x-request-id",)


def bracketed_app(upstream: Upstream) -> Any:
    config = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "unit-llm", "AUTH_MODE": "none"})
    handler = app.App(config, stubbed_client(upstream))
    api = Bracketed()
    # A new protocol registers its routes; the app's pipeline serves them as it serves the others'.
    handler.routes = http.Routes([*handler.routes.exact.values(), completion_route("/v1/bracketed", api)])
    return handler


ASK = {"messages": [{"role": "user", "content": "Hi"}], "stream": True}


def test_a_streamed_answer_is_written_by_the_apis_encoder_event_by_event() -> None:
    upstream = Upstream(scenario=Scenario(ttft_ms=0, cadence_ms=0, tokens=4, non_ascii=0))
    stream = run(bracketed_app(upstream), "POST", "/v1/bracketed", ASK)
    assert stream.status == 200
    texts = [w.decode() for w in stream.writes]
    assert texts[-1] == "<end>"
    assert len(texts) >= 5 and all(t.startswith("[") and t.endswith("]") for t in texts[:-1])


def test_an_error_after_the_first_byte_is_the_apis_error_event_and_the_normal_end_never_follows() -> None:
    token = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    failure = exception_frame("ModelStreamError", {"Message": "the model died", "ErrorCode": "ModelError"})

    def fail_after_one_token(operation: str, payload: Any) -> Any:
        return event_stream_response([payload_part_frame(token), failure])

    stream = run(bracketed_app(Upstream(override=fail_after_one_token)), "POST", "/v1/bracketed", ASK)
    assert stream.status == 200
    texts = [w.decode() for w in stream.writes]
    assert texts == ["[Hi]", "<error:model_stream_error>"]


def test_a_whole_answer_is_the_apis_own_body() -> None:
    upstream = Upstream(scenario=Scenario(ttft_ms=0, cadence_ms=0, tokens=3, non_ascii=0))
    stream = run(bracketed_app(upstream), "POST", "/v1/bracketed", {**ASK, "stream": False})
    assert stream.status == 200
    kind, text, reason = stream.body.decode().split(":")
    assert kind == "whole" and text and reason == "stop"


def test_events_are_serialised_as_json_dumps_would() -> None:
    from sagestream.protocols._wire import dumps as _dumps

    value = {"é": ["😀", 1.5, -0.0, 10**20, True, None, {"a": '\x00\n"\\'}], "n": 3}
    assert _dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    with pytest.raises(TypeError):
        _dumps({"x": object()})


def _walked_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_walked_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_walked_depth, value), default=0)
    return 0


json_text = st.text(alphabet=st.sampled_from('ab"\\[]{}\n\u00e9'), max_size=6)
json_values = st.recursive(
    st.none() | st.integers() | json_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(json_text, inner, max_size=3),
    max_leaves=200,
)


@settings(max_examples=400, deadline=None)
@given(json_values, st.integers(0, 70))
def test_the_depth_read_from_the_bytes_is_the_depth_of_the_value(value: Any, wrap: int) -> None:
    # Wrapped deep enough that the count of brackets alone cannot settle it: the bytes are read.
    for _ in range(wrap):
        value = [value]
    raw = json.dumps({"v": value}, ensure_ascii=False).encode()
    expected = _walked_depth({"v": value})
    got = _requests._depth(raw)
    assert got == expected or (got == 0 and raw.count(b"{") + raw.count(b"[") <= _requests.MAX_JSON_DEPTH)
