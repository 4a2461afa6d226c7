"""The Anthropic Messages API: the events a stream is written as, the whole message, and Anthropic's error shape
on every refusal (the request's translation: test_messages_request.py).

The events are checked against the anthropic SDK's own accumulator (``accumulate_event``, what
``messages.stream()`` builds its final message with): it raises on an event out of order.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic._models import construct_type_unchecked
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent

from sagestream.config import Config
from sagestream.delta import Delta, Usage
from sagestream.dialects import dialect_named
from sagestream.errors import DEADLINE_EXCEEDED, APIError
from sagestream.messages import MessagesEncoder, message_json
from sagestream_local.endpoint import Scenario, exception_frame, payload_part_frame
from tests.fakes import Upstream, event_stream_response, stubbed_client
from tests.unit.test_app import app, run

ASK = [{"role": "user", "content": "Weather in Paris?"}]


def events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in data.decode().split("\n\n"):
        if block:
            name, payload = block.split("\n")
            assert name.startswith("event: ") and payload.startswith("data: ")
            out.append((name[7:], json.loads(payload[6:])))
    return out


def accumulated(data: bytes) -> Any:
    """The final message the SDK's stream helper builds from these events."""
    snapshot = None
    json_bufs: dict[int, bytes] = {}
    for name, payload in events(data):
        assert payload["type"] == name
        event = construct_type_unchecked(type_=RawMessageStreamEvent, value=payload)  # type: ignore[arg-type]
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
    return snapshot


# --- the stream ---------------------------------------------------------------------------------------------


def encoder(**kw: Any) -> MessagesEncoder:
    return MessagesEncoder(model="m", id="msg_1", **kw)


def test_a_text_stream_is_anthropics_events_in_order_and_the_sdk_builds_the_message() -> None:
    enc = encoder()
    data = enc.encode(Delta(role="assistant", content="Hé"))
    first = events(data)
    assert [name for name, _ in first] == ["message_start", "content_block_start", "content_block_delta"]
    assert first[0][1]["message"]["id"] == "msg_1" and first[0][1]["message"]["model"] == "m"
    data += enc.encode(Delta(content=" there"))
    data += enc.encode(Delta(finish_reason="stop", usage=Usage(7, 2, 9)))
    data += enc.done()
    names = [name for name, _ in events(data)]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    message = accumulated(data)
    assert message.content[0].text == "Hé there"
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (7, 2)


def test_each_text_delta_after_the_first_is_the_general_paths_event_byte_for_byte() -> None:
    fast, general = encoder(), encoder()
    fast.encode(Delta(content="a"))
    general.encode(Delta(content="a"))
    for text in ['"quoted"\n', "日本", "\x00", "</script>"]:
        assert fast.encode(Delta(content=text)) == general._encode(Delta(content=text))


def test_padding_is_a_comment_after_each_deltas_events_and_the_sdk_skips_it() -> None:
    padded, plain = encoder(pad_bytes=64), encoder()
    stream = [Delta(content="a"), Delta(content="b"), Delta(finish_reason="stop")]
    writes = [padded.encode(d) for d in stream]
    assert all(w.endswith(b":" + b" " * 61 + b"\n\n") for w in writes)
    assert [w.removesuffix(b":" + b" " * 61 + b"\n\n") for w in writes] == [plain.encode(d) for d in stream]
    from anthropic._streaming import SSEDecoder

    decoded = list(SSEDecoder().iter_bytes(iter([*writes, padded.done()])))
    assert [e.event for e in decoded][-2:] == ["message_delta", "message_stop"]


def test_thinking_then_tool_call_fragments_are_blocks_of_their_own() -> None:
    enc = encoder()
    head = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    fragments = ['{"ci', 'ty": "Pa', 'ris"}']
    deltas = [
        Delta(reasoning_content="Paris, "),
        Delta(reasoning_content="then."),
        Delta(tool_calls=[head]),
        *(Delta(tool_calls=[{"index": 0, "function": {"arguments": f}}]) for f in fragments),
        Delta(finish_reason="tool_calls"),
    ]
    data = b"".join(enc.encode(d) for d in deltas) + enc.done()
    parsed = events(data)
    json_deltas = [p["delta"]["partial_json"] for n, p in parsed if n == "content_block_delta" and p["index"] == 1]
    assert json_deltas == fragments  # each fragment as the container sent it
    message = accumulated(data)
    assert [b.type for b in message.content] == ["thinking", "tool_use"]
    assert message.content[0].thinking == "Paris, then."
    assert (message.content[1].id, message.content[1].name, message.content[1].input) == (
        "call_1",
        "get_weather",
        {"city": "Paris"},
    )
    assert message.stop_reason == "tool_use"


def test_two_tool_calls_are_two_tool_use_blocks() -> None:
    enc = encoder()
    calls = [
        Delta(tool_calls=[{"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x":1}'}}]),
        Delta(tool_calls=[{"index": 1, "id": "b", "function": {"name": "g", "arguments": '{"y":2}'}}]),
        Delta(finish_reason="tool_calls"),
    ]
    message = accumulated(b"".join(enc.encode(d) for d in calls) + enc.done())
    assert [(b.id, b.input) for b in message.content] == [("a", {"x": 1}), ("b", {"y": 2})]


def test_a_container_that_repeats_the_calls_id_in_every_chunk_still_makes_one_tool_use_block() -> None:
    # Some OpenAI-compatible servers send the call's id again with each argument fragment; only a new id (or
    # index) starts a new call.
    enc = encoder()
    fragments = ['{"ci', 'ty": "Paris"}']
    calls = [
        Delta(tool_calls=[{"index": 0, "id": "a", "function": {"name": "get_weather", "arguments": ""}}]),
        *(Delta(tool_calls=[{"index": 0, "id": "a", "function": {"arguments": f}}]) for f in fragments),
        Delta(tool_calls=[{"index": 0, "id": "b", "function": {"name": "get_time", "arguments": "{}"}}]),
        Delta(finish_reason="tool_calls"),
    ]
    message = accumulated(b"".join(enc.encode(d) for d in calls) + enc.done())
    assert [(b.id, b.name, b.input) for b in message.content] == [
        ("a", "get_weather", {"city": "Paris"}),
        ("b", "get_time", {}),
    ]


@pytest.mark.parametrize(
    ("finish", "stops", "text", "reason", "sequence"),
    [
        ("length", (), "abc", "max_tokens", None),
        ("stop", ("END",), "abc END", "stop_sequence", "END"),
        ("stop", ("END",), "abc", "end_turn", None),
        ("stop", (), "abc", "end_turn", None),
    ],
)
def test_the_stop_reason(finish: str, stops: tuple[str, ...], text: str, reason: str, sequence: str | None) -> None:
    enc = encoder(stop_sequences=stops)
    data = (
        enc.encode(Delta(content=text[:2]))
        + enc.encode(Delta(content=text[2:]))
        + enc.encode(Delta(finish_reason=finish))
    )
    message = accumulated(data + enc.done())
    assert (message.stop_reason, message.stop_sequence) == (reason, sequence)


def test_usage_counts_are_integers_zero_until_the_container_reports_them() -> None:
    # Anthropic's types declare input_tokens and output_tokens integers; the Vercel provider refused a null.
    enc = encoder()
    data = enc.encode(Delta(content="x")) + enc.encode(Delta(finish_reason="stop")) + enc.done()
    [(_, delta)] = [(n, p) for n, p in events(data) if n == "message_delta"]
    assert delta["usage"] == {"output_tokens": 0}
    start = events(data)[0][1]
    assert start["message"]["usage"] == {"input_tokens": 0, "output_tokens": 0}
    counted = encoder()
    data = counted.encode(Delta(content="x")) + counted.encode(Delta(finish_reason="stop", usage=Usage(7, 1, 8)))
    [(_, delta)] = [(n, p) for n, p in events(data + counted.done()) if n == "message_delta"]
    assert delta["usage"] == {"input_tokens": 7, "output_tokens": 1}, "the true prompt count comes at the end"


def test_a_deadline_ends_the_message_as_max_tokens_would_and_a_fault_is_an_error_event_without_message_stop() -> None:
    cut = encoder()
    data = cut.encode(Delta(content="Hi"))
    data += cut.encode(Delta(finish_reason="length"))  # what the relay encodes first on a deadline
    data += cut.error(APIError(504, "deadline", type="server_error", code=DEADLINE_EXCEEDED))
    assert accumulated(data).stop_reason == "max_tokens"
    assert events(data)[-1][0] == "message_stop"

    broken = encoder()
    data = broken.encode(Delta(content="Hi")) + broken.error(APIError.upstream(502, "the model died", code="x"))
    last = events(data)[-1]
    assert last == ("error", {"type": "error", "error": {"type": "api_error", "message": "the model died"}})
    assert "message_stop" not in [name for name, _ in events(data)]


def test_through_the_relay_a_deadline_cut_is_a_max_tokens_message() -> None:
    from sagestream.faults import DeadlineReached
    from sagestream.relay import relay

    def parts() -> Any:
        yield b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
        raise DeadlineReached()

    items = list(relay(parts(), dialect_named("openai").stream_decoder(), encoder()))
    err = items[-1][0]
    assert isinstance(err, APIError) and err.code == DEADLINE_EXCEEDED  # the record notes the deadline stop
    message = accumulated(b"".join(data for _, data in items))
    assert (message.content[0].text, message.stop_reason) == ("Hi", "max_tokens")


def test_a_whole_answer_is_one_message_with_the_same_blocks() -> None:
    answer = Delta(
        content="Checking.",
        reasoning_content="Paris.",
        finish_reason="tool_calls",
        usage=Usage(5, 3, 8),
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"city":"Paris"}'}}],
    )
    message = json.loads(message_json(answer, model="m", id="msg_1"))
    assert message["content"] == [
        {"type": "thinking", "thinking": "Paris.", "signature": ""},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "c1", "name": "f", "input": {"city": "Paris"}},
    ]
    assert message["stop_reason"] == "tool_use" and message["usage"] == {"input_tokens": 5, "output_tokens": 3}
    assert (message["type"], message["role"], message["model"]) == ("message", "assistant", "m")


def test_a_whole_answer_whose_tool_call_max_tokens_cut_is_a_max_tokens_message_not_a_502() -> None:
    # vLLM with a named tool_choice returns the generated text as the arguments, cut where max_tokens fell.
    # The container did nothing wrong: a 502 would say it had, and the SDKs would retry the same cut twice.
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"city": "Pa'}}
    message = json.loads(message_json(Delta(finish_reason="length", tool_calls=[call]), model="m"))
    assert message["stop_reason"] == "max_tokens"
    assert message["content"] == [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]
    # Not cut, the same arguments are the container's fault.
    with pytest.raises(APIError) as caught:
        message_json(Delta(finish_reason="tool_calls", tool_calls=[call]), model="m")
    assert caught.value.status == 502


# --- through the app ----------------------------------------------------------------------------------------


def messages_app(upstream: Upstream | None = None, **env: str) -> Any:
    config = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "unit-llm", "AUTH_MODE": "none", **env})
    return app.App(config, stubbed_client(upstream or Upstream()))


def anthropic_error(resp: Any) -> tuple[int, str, str]:
    body = json.loads(resp.body)
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    return resp.status, body["error"]["type"], body["error"]["message"]


ASK_BODY = {"model": "unit-llm", "max_tokens": 32, "messages": ASK}


def test_every_refusal_on_the_route_has_anthropics_shape_and_status() -> None:
    keyed = messages_app(AUTH_MODE="api_key", API_KEYS="k-1")
    assert anthropic_error(run(keyed, "POST", "/v1/messages", ASK_BODY))[:2] == (401, "authentication_error")
    for key in ({"x-api-key": "k-1"}, {"authorization": "Bearer k-1"}):  # what the SDK sends for api_key, auth_token
        ok = run(
            keyed, "POST", "/v1/messages", {**ASK_BODY, "stream": False}, {**key, "anthropic-version": "2023-06-01"}
        )
        assert ok.status == 200 and json.loads(ok.body)["type"] == "message"
    open_app = messages_app()
    assert anthropic_error(run(open_app, "POST", "/v1/messages", {**ASK_BODY, "model": "nope"}))[:2] == (
        404,
        "not_found_error",
    )
    huge = {**ASK_BODY, "messages": [{"role": "user", "content": "x" * 7_000_000}]}
    assert anthropic_error(run(open_app, "POST", "/v1/messages", huge))[:2] == (413, "request_too_large")
    assert anthropic_error(run(open_app, "GET", "/v1/messages"))[:2] == (405, "invalid_request_error")
    # Any beta is accepted (Claude Code sends eight): only a body field using what the relay lacks is refused.
    betas = "claude-code-20250219,context-management-2025-06-27,effort-2025-11-24,context-1m-2025-08-07"
    assert run(open_app, "POST", "/v1/messages", ASK_BODY, {"anthropic-beta": betas}).status == 200
    status, kind, message = anthropic_error(
        run(open_app, "POST", "/v1/messages", {**ASK_BODY, "container": "c-1"}, {"anthropic-beta": betas})
    )
    assert (status, kind) == (400, "invalid_request_error") and "'container'" in message
    # The OpenAI routes keep OpenAI's shape.
    assert "error" in json.loads(run(open_app, "POST", "/v1/chat/completions", {"messages": "x"}).body)


def test_an_anthropic_path_this_endpoint_lacks_is_refused_in_anthropics_shape() -> None:
    # client.messages.batches.create() and the like: the SDK's user gets Anthropic's error, key check first.
    keyed = messages_app(AUTH_MODE="api_key", API_KEYS="k-1")
    assert anthropic_error(run(keyed, "POST", "/v1/messages/batches", {}))[:2] == (401, "authentication_error")
    status, kind, message = anthropic_error(run(keyed, "POST", "/v1/messages/batches", {}, {"x-api-key": "k-1"}))
    assert (status, kind) == (404, "not_found_error") and "/v1/messages/batches" in message


def test_the_anthropic_sdk_finds_the_request_id_under_its_own_header() -> None:
    # The SDK reads request-id (message._request_id, APIStatusError.request_id), not x-request-id: the id a
    # user quotes to find the log record must reach it there, on answers and refusals alike.
    from anthropic import APIStatusError

    handler = messages_app()
    for method, path, body in (
        ("POST", "/v1/messages", {**ASK_BODY, "stream": False}),
        ("POST", "/v1/messages", {**ASK_BODY, "stream": True}),
        ("POST", "/v1/messages", {**ASK_BODY, "max_tokens": 0}),
        ("POST", "/v1/messages/count_tokens", {"model": "unit-llm", "messages": ASK}),
        ("POST", "/v1/messages/batches", {}),
    ):
        resp = run(handler, method, path, body)
        assert resp.headers["x-request-id"] and resp.headers.get("request-id") == resp.headers["x-request-id"], path
    refused = run(handler, "POST", "/v1/messages", {**ASK_BODY, "max_tokens": 0})
    import httpx

    err = APIStatusError(
        "refused",
        response=httpx.Response(refused.status, headers=refused.headers, request=httpx.Request("POST", "http://x")),
        body=json.loads(refused.body),
    )
    assert err.request_id == refused.headers["x-request-id"]
    # The OpenAI routes keep their one header.
    assert "request-id" not in run(handler, "POST", "/v1/chat/completions", {"messages": ASK}).headers


def test_a_stream_through_the_app_is_one_write_per_delta_and_ends_with_message_stop() -> None:
    upstream = Upstream(scenario=Scenario(ttft_ms=0, cadence_ms=0, tokens=5, non_ascii=0))
    stream = run(messages_app(upstream), "POST", "/v1/messages", {**ASK_BODY, "stream": True})
    assert stream.status == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    data = b"".join(stream.writes)
    message = accumulated(data)
    assert message.stop_reason == "end_turn" and message.usage.output_tokens == 5
    text_writes = [w for w in stream.writes if w.startswith(b"event: content_block_delta")]
    assert len(text_writes) >= 4  # one write per delta after the first
    sent = json.loads(upstream.calls[-1][3])
    assert sent["stream_options"] == {"include_usage": True}


def test_a_fault_after_the_first_byte_is_anthropics_error_event_and_no_message_stop() -> None:
    token = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    failure = exception_frame("ModelStreamError", {"Message": "the model died", "ErrorCode": "ModelError"})

    def fail_after_one_token(operation: str, payload: Any) -> Any:
        return event_stream_response([payload_part_frame(token), failure])

    stream = run(
        messages_app(Upstream(override=fail_after_one_token)), "POST", "/v1/messages", {**ASK_BODY, "stream": True}
    )
    parsed = events(b"".join(stream.writes))
    assert parsed[-1][0] == "error" and parsed[-1][1]["type"] == "error"
    assert "message_stop" not in [name for name, _ in parsed]


def test_count_tokens_is_the_containers_own_prompt_count() -> None:
    upstream = Upstream()
    resp = run(messages_app(upstream), "POST", "/v1/messages/count_tokens", {"model": "unit-llm", "messages": ASK})
    assert resp.status == 200
    sent = json.loads(upstream.calls[-1][3])
    assert sent["max_tokens"] == 1 and sent["stream"] is False
    whole = json.loads(dialects_answer(upstream))
    assert json.loads(resp.body) == {"input_tokens": whole["usage"]["prompt_tokens"]}


def test_count_tokens_notes_the_inference_id_its_call_carried_in_the_log_record() -> None:
    upstream = Upstream()
    handler = messages_app(upstream)
    records: list[Any] = []
    finish = handler.telemetry.finish
    handler.telemetry.finish = lambda record, **kw: (records.append(record), finish(record, **kw))
    resp = run(handler, "POST", "/v1/messages/count_tokens", {"model": "unit-llm", "messages": ASK})
    assert resp.status == 200
    sent = upstream.calls[-1][2]["X-Amzn-SageMaker-Inference-Id"]  # as the stub keeps it: str() of the bytes
    assert records[-1].inference_id is not None and sent == str(records[-1].inference_id.encode())


def dialects_answer(upstream: Upstream) -> bytes:
    from sagestream_local.endpoint import whole_answer

    _, _, _, body = upstream.calls[-1]
    return whole_answer(json.loads(body), upstream.scenario, "x")[0]


def test_count_tokens_takes_the_sdks_count_params_only() -> None:
    from anthropic.types import message_count_tokens_params, message_create_params

    count_only = set(message_count_tokens_params.MessageCountTokensParams.__annotations__)
    create = set(message_create_params.MessageCreateParamsBase.__annotations__) | {"stream", "temperature", "top_k"}
    for field in sorted(create - count_only):
        body = {"model": "unit-llm", "messages": ASK, field: None}
        status, _, message = anthropic_error(run(messages_app(), "POST", "/v1/messages/count_tokens", body))
        assert status == 400 and message == f"{field}: Extra inputs are not permitted"


def test_count_tokens_says_why_when_the_container_reports_no_prompt_count() -> None:
    upstream = Upstream(scenario=Scenario(ttft_ms=0, cadence_ms=0, tokens=3, dialect="tgi"))
    tgi = messages_app(upstream, UPSTREAM_FORMAT="tgi", PROMPT_TEMPLATE="chatml")
    status, kind, message = anthropic_error(
        run(tgi, "POST", "/v1/messages/count_tokens", {"model": "unit-llm", "messages": ASK})
    )
    assert (status, kind) == (501, "api_error") and "does not estimate" in message


def test_thinking_display_omitted_leaves_the_thoughts_out() -> None:
    enc = MessagesEncoder(model="m", show_thinking=False)
    data = enc.encode(Delta(reasoning_content="hmm")) + enc.encode(Delta(content="Hi", finish_reason="stop"))
    names = [n for n, _ in events(data + enc.done())]
    assert "thinking" not in json.dumps([p for _, p in events(data)]) and names[0] == "message_start"
    assert json.loads(message_json(Delta("Hi", reasoning_content="hmm"), model="m", show_thinking=False))[
        "content"
    ] == [{"type": "text", "text": "Hi"}]
