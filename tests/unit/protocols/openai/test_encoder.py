"""The SSE the relay writes is what OpenAI sends: the openai package's own models and client read it."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from sagestream.delta import Delta, Usage
from sagestream.errors import APIError
from sagestream.protocols.openai.encoder import DONE, ChunkEncoder, completion_json, error_event

ANSWER = [
    Delta("", role="assistant"),
    Delta("Grüß"),
    Delta(" dich 👋"),
    Delta("", finish_reason="stop"),
    Delta("", usage=Usage(12, 3, 15)),
]


def events(stream: bytes) -> list[Any]:
    """The data of each event, JSON-decoded ([DONE] stays a string); comments skipped."""
    assert stream.endswith(b"\n\n")
    out: list[Any] = []
    for event in stream[:-2].split(b"\n\n"):
        if event.startswith(b":"):
            continue
        assert event.startswith(b"data: ")
        data = event.removeprefix(b"data: ").decode()
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def encode_all(encoder: ChunkEncoder, deltas: list[Delta]) -> bytes:
    return b"".join(encoder.encode(delta) for delta in deltas) + encoder.done()


def test_each_event_is_one_compact_utf8_data_line() -> None:
    event = ChunkEncoder(model="m", kind="chat", include_usage=False).encode(Delta("é"))
    assert event.startswith(b"data: {") and event.endswith(b"}\n\n")
    assert event.count(b"\n") == 2
    assert "é".encode() in event and b"\\u00e9" not in event
    assert b", " not in event and b": " not in event[6:]


def test_the_first_chunk_names_the_assistant_and_later_ones_do_not() -> None:
    chunks = events(encode_all(ChunkEncoder(model="m", kind="chat", include_usage=False), ANSWER))
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks[:-1]]
    assert deltas == [{"role": "assistant", "content": ""}, {"content": "Grüß"}, {"content": " dich 👋"}, {}]
    assert chunks[-1] == "[DONE]"


def test_the_role_rides_on_the_first_content_when_no_role_chunk_came() -> None:
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=False)
    [chunk] = events(encoder.encode(Delta("Hi")))
    assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": "Hi"}


def test_chunks_share_id_created_and_model_and_validate_as_openai_chunks() -> None:
    encoder = ChunkEncoder(model="llama-3", kind="chat", include_usage=True)
    chunks = events(encode_all(encoder, ANSWER))[:-1]
    parsed = [ChatCompletionChunk.model_validate(chunk) for chunk in chunks]
    assert {(c.id, c.created, c.model, c.object) for c in parsed} == {
        (encoder.id, encoder.created, "llama-3", "chat.completion.chunk")
    }
    assert encoder.id.startswith("chatcmpl-")
    assert [c.choices[0].finish_reason for c in parsed[:-1]] == [None, None, None, "stop"]


def test_with_include_usage_chunks_carry_null_usage_and_a_last_chunk_carries_it() -> None:
    chunks = events(encode_all(ChunkEncoder(model="m", kind="chat", include_usage=True), ANSWER))
    assert all("usage" in chunk and chunk["usage"] is None for chunk in chunks[:-2])
    assert chunks[-2]["choices"] == []
    assert chunks[-2]["usage"] == {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    assert chunks[-1] == "[DONE]"


def test_without_include_usage_there_is_no_usage_field_or_chunk() -> None:
    chunks = events(encode_all(ChunkEncoder(model="m", kind="chat", include_usage=False), ANSWER))
    assert all("usage" not in chunk for chunk in chunks[:-1])
    assert len(chunks) == 5


def test_the_last_reported_usage_is_the_one_sent() -> None:
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=True)
    encoder.encode(Delta("a", usage=Usage(1, 1, 2)))
    encoder.encode(Delta("b", usage=Usage(1, 2, 3)))
    assert events(encoder.done())[0]["usage"]["total_tokens"] == 3


def test_a_usage_only_delta_sends_nothing_until_done() -> None:
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=True)
    encoder.encode(Delta("x"))
    assert encoder.encode(Delta("", usage=Usage(1, 1, 2))) == b""


def test_done_is_the_done_event() -> None:
    assert ChunkEncoder(model="m", kind="chat", include_usage=False).done() == b"data: [DONE]\n\n" == DONE


def test_completion_chunks_are_text_completions() -> None:
    encoder = ChunkEncoder(model="m", kind="completion", include_usage=True)
    stream = encode_all(encoder, [Delta(" naïve"), Delta(" ∑", finish_reason="length"), Delta(usage=Usage(2, 2, 4))])
    chunks = events(stream)
    assert encoder.id.startswith("cmpl-")
    assert [c["choices"][0]["text"] for c in chunks[:2]] == [" naïve", " ∑"]
    assert chunks[1]["choices"][0]["finish_reason"] == "length"
    assert chunks[2]["choices"] == [] and chunks[2]["usage"]["total_tokens"] == 4
    # OpenAI streams finish_reason null before the end; the SDK's Completion (a non-streaming model,
    # reused for chunks without validation) only accepts the chunks that have one.
    assert chunks[0]["choices"][0]["finish_reason"] is None
    for chunk in chunks[1:3]:
        assert Completion.model_validate(chunk).object == "text_completion"


def test_error_event_is_openais_error_shape() -> None:
    event = error_event(APIError.upstream(502, "model died", code="upstream_error"))
    assert events(event) == [
        {"error": {"message": "model died", "type": "server_error", "param": None, "code": "upstream_error"}}
    ]


def test_padding_is_an_sse_comment_of_exactly_the_asked_size_after_each_delta() -> None:
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=False, pad_bytes=64)
    plain = ChunkEncoder(model="m", kind="chat", include_usage=False, id=encoder.id, created=encoder.created)
    padded, unpadded = encoder.encode(Delta("a")), plain.encode(Delta("a"))
    assert padded.startswith(unpadded)
    padding = padded[len(unpadded) :]
    assert len(padding) == 64 and padding.startswith(b": ") and padding.endswith(b"\n\n")
    assert padding.count(b"\n") == 2
    assert encoder.done() == DONE


def test_padding_too_small_to_be_a_comment_is_refused() -> None:
    with pytest.raises(ValueError, match="pad_bytes"):
        ChunkEncoder(model="m", kind="chat", include_usage=False, pad_bytes=3)


def stream_through_openai_client(stream: bytes, *, completion: bool = False) -> list[Any]:
    """Iterate the openai SDK's own streaming client over ``stream`` served by a mock transport."""

    def respond(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=stream, headers={"content-type": "text/event-stream"})

    client = openai.OpenAI(
        api_key="k", base_url="http://relay.test/v1", http_client=httpx2.Client(transport=httpx2.MockTransport(respond))
    )
    if completion:
        return list(client.completions.create(model="m", prompt="p", stream=True))
    messages: list[Any] = [{"role": "user", "content": "Hi"}]
    return list(
        client.chat.completions.create(
            model="m", messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )


def test_the_openai_sdk_reads_a_whole_padded_stream() -> None:
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=True, pad_bytes=32)
    chunks = stream_through_openai_client(encode_all(encoder, ANSWER))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Grüß dich 👋"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 15


def test_the_openai_sdk_reads_a_completion_stream() -> None:
    encoder = ChunkEncoder(model="m", kind="completion", include_usage=False)
    chunks = stream_through_openai_client(
        encode_all(encoder, [Delta("a"), Delta("b", finish_reason="stop")]), completion=True
    )
    assert [c.choices[0].text for c in chunks] == ["a", "b"]


def test_the_openai_sdk_raises_on_the_error_event() -> None:
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=False)
    stream = encoder.encode(Delta("partial")) + error_event(APIError.upstream(502, "model died", code="x"))
    with pytest.raises(openai.APIError, match="model died"):
        stream_through_openai_client(stream)


def test_completion_json_is_an_openai_chat_completion() -> None:
    raw = completion_json(Delta("Grüße", finish_reason="length", usage=Usage(3, 2, 5)), model="m", kind="chat")
    completion = ChatCompletion.model_validate_json(raw)
    assert completion.object == "chat.completion" and completion.id.startswith("chatcmpl-")
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == "Grüße"
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.total_tokens == 5
    assert "Grüße".encode() in raw


def test_completion_json_without_a_finish_reason_says_stop_and_null_usage() -> None:
    data = json.loads(completion_json(Delta("x"), model="m", kind="chat", id="chatcmpl-9", created=5))
    assert (data["id"], data["created"], data["choices"][0]["finish_reason"], data["usage"]) == (
        "chatcmpl-9",
        5,
        "stop",
        None,
    )


def test_completion_json_for_completions_is_a_text_completion() -> None:
    completion = Completion.model_validate_json(completion_json(Delta(" end"), model="m", kind="completion"))
    assert (completion.object, completion.choices[0].text, completion.choices[0].finish_reason) == (
        "text_completion",
        " end",
        "stop",
    )


# --- lossless: tool calls, reasoning, refusal, logprobs, usage details ------------------------------------

CALL_HEAD = {"index": 0, "id": "call-1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
LOGPROBS = {"content": [{"token": "Hi", "logprob": -0.2, "bytes": [72, 105], "top_logprobs": []}], "refusal": None}


def test_tool_call_fragments_and_reasoning_go_out_as_the_container_sent_them() -> None:
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=True)
    deltas = [
        Delta("", role="assistant"),
        Delta(reasoning_content="Let me"),
        Delta(reasoning=" see"),
        Delta(tool_calls=[CALL_HEAD]),
        Delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city"'}}]),
        Delta(tool_calls=[{"index": 0, "function": {"arguments": ': "Oslo"}'}}]),
        Delta(finish_reason="tool_calls"),
        Delta(usage=Usage(7, 5, 12, {"completion_tokens_details": {"reasoning_tokens": 2}})),
    ]
    chunks = events(encode_all(encoder, deltas))
    assert [c["choices"][0]["delta"] for c in chunks[1:7]] == [
        {"reasoning_content": "Let me"},
        {"reasoning": " see"},
        {"tool_calls": [CALL_HEAD]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"city"'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ': "Oslo"}'}}]},
        {},
    ]
    assert chunks[6]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[7]["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 5,
        "total_tokens": 12,
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    # The SDK reads them as its own types.
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks[:-1]]
    assert parsed[3].choices[0].delta.tool_calls is not None
    assert parsed[3].choices[0].delta.tool_calls[0].function is not None
    assert parsed[3].choices[0].delta.tool_calls[0].function.name == "get_weather"
    assert parsed[-1].usage is not None and parsed[-1].usage.completion_tokens_details is not None
    assert parsed[-1].usage.completion_tokens_details.reasoning_tokens == 2


def test_logprobs_and_refusal_ride_on_their_chunk() -> None:
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=False)
    first, second = encoder.encode(Delta("Hi", logprobs=LOGPROBS)), encoder.encode(Delta(refusal="I can't"))
    assert events(first)[0]["choices"][0]["logprobs"] == LOGPROBS
    assert events(second)[0]["choices"][0]["delta"] == {"refusal": "I can't"}
    # A delta with only logprobs (a token whose text is empty) still goes out.
    assert encoder.encode(Delta(logprobs=LOGPROBS))


def test_usage_counts_are_integers_even_when_the_container_gave_no_prompt_count() -> None:
    # OpenAI's CompletionUsage declares all three as integers; strict clients refuse a usage without one.
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=True)
    encoder.encode(Delta("x"))
    encoder.encode(Delta(finish_reason="stop", usage=Usage(None, 4, None)))
    expected = {"prompt_tokens": 0, "completion_tokens": 4, "total_tokens": 4}
    assert events(encoder.done())[0]["usage"] == expected
    whole = json.loads(completion_json(Delta("x", usage=Usage(None, 4, None)), model="m", kind="chat"))
    assert whole["usage"] == expected


def test_a_whole_answer_keeps_tool_calls_reasoning_and_logprobs() -> None:
    call = {"id": "call-1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    delta = Delta(finish_reason="tool_calls", tool_calls=[call], reasoning_content="R", logprobs=LOGPROBS)
    answer = json.loads(completion_json(delta, model="m", kind="chat"))
    assert answer["choices"][0]["message"] == {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "reasoning_content": "R",
        "tool_calls": [call],
    }
    assert answer["choices"][0]["logprobs"] == LOGPROBS
    parsed = ChatCompletion.model_validate(answer)
    assert parsed.choices[0].message.tool_calls is not None
    assert parsed.choices[0].message.tool_calls[0].id == "call-1"


def test_completion_logprobs_go_out_on_text_chunks() -> None:
    logprobs = {"tokens": ["a"], "token_logprobs": [-1.0], "top_logprobs": None, "text_offset": [0]}
    encoder = ChunkEncoder(model="m", kind="completion", include_usage=False)
    (chunk,) = events(encoder.encode(Delta("a", finish_reason="stop", logprobs=logprobs)))
    assert chunk["choices"][0]["logprobs"] == logprobs
    parsed = Completion.model_validate(chunk).choices[0].logprobs
    assert parsed is not None and parsed.token_logprobs == [-1.0]


def test_the_containers_system_fingerprint_is_on_every_chunk_and_the_whole_answer() -> None:
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=False)
    events = [encoder.encode(Delta(role="assistant", system_fingerprint="vllm-0.32.0"))]
    events += [encoder.encode(Delta(text)) for text in ("a", "b")]  # the second is the text fast path's
    chunks = [ChatCompletionChunk.model_validate_json(event.removeprefix(b"data: ")) for event in events]
    assert [c.system_fingerprint for c in chunks] == ["vllm-0.32.0"] * 3
    whole = completion_json(Delta("x", finish_reason="stop", system_fingerprint="fp_1"), model="m", kind="chat")
    assert ChatCompletion.model_validate_json(whole).system_fingerprint == "fp_1"
    no_print = completion_json(Delta("x", finish_reason="stop"), model="m", kind="chat")
    assert json.loads(no_print)["system_fingerprint"] is None  # OpenAI's field, null when the container sent none
