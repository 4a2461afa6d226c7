"""The Anthropic Messages API: the events a stream is written as, the whole message, and Anthropic's error shape
on every refusal (the request's translation: test_request.py beside this).

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
from sagestream.protocols.anthropic.encoder import MessagesEncoder, message_json
from tests.fakes import Upstream, stubbed_client
from tests.unit.test_app import app

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


def dialects_answer(upstream: Upstream) -> bytes:
    from sagestream_local.endpoint import whole_answer

    _, _, _, body = upstream.calls[-1]
    return whole_answer(json.loads(body), upstream.scenario, "x")[0]


def test_thinking_display_omitted_leaves_the_thoughts_out() -> None:
    enc = MessagesEncoder(model="m", show_thinking=False)
    data = enc.encode(Delta(reasoning_content="hmm")) + enc.encode(Delta(content="Hi", finish_reason="stop"))
    names = [n for n, _ in events(data + enc.done())]
    assert "thinking" not in json.dumps([p for _, p in events(data)]) and names[0] == "message_start"
    assert json.loads(message_json(Delta("Hi", reasoning_content="hmm"), model="m", show_thinking=False))[
        "content"
    ] == [{"type": "text", "text": "Hi"}]
