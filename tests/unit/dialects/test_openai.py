"""The openai dialect: OpenAI chunks and answers read into deltas, every field kept; the body forwarded as sent."""

from __future__ import annotations

import json

import pytest

from sagestream.delta import Delta, Usage
from sagestream.dialects import DecodeError, dialect_named
from sagestream.protocols.openai.request import parse_chat, parse_completion
from tests.unit.test_dialects import CALL, TOOL, chat, vllm


def test_openai_finish_chunk_with_empty_delta_and_null_content() -> None:
    decoder = dialect_named("openai").stream_decoder()
    assert decoder.decode('{"choices":[{"index":0,"delta":{"content":null},"finish_reason":"stop"}]}') == [
        Delta("", finish_reason="stop")
    ]


def test_openai_usage_without_total_is_summed() -> None:
    [delta] = (
        dialect_named("openai")
        .stream_decoder()
        .decode('{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3}}')
    )
    assert delta.usage == Usage(2, 3, 5)


def test_openai_tgi_era_finish_reasons_become_openais() -> None:
    record = '{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"eos_token"}]}'
    assert dialect_named("openai").stream_decoder().decode(record) == [Delta("x", finish_reason="stop")]


def test_openai_chat_completion_body() -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Salut 👋"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    assert dialect_named("openai").decode_body(json.dumps(body).encode()) == Delta(
        "Salut 👋", role="assistant", finish_reason="stop", usage=Usage(3, 2, 5)
    )


def test_openai_text_completion_body() -> None:
    body = {"object": "text_completion", "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}]}
    assert dialect_named("openai").decode_body(json.dumps(body).encode()) == Delta(" ok", finish_reason="length")


def test_openai_body_without_choices_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        dialect_named("openai").decode_body(b'{"object": "chat.completion", "choices": []}')


def test_openai_chat_body_drops_model_and_forwards_the_rest() -> None:
    request = parse_chat(
        chat(
            max_tokens=5,
            temperature=0.2,
            top_p=0.9,
            stop=["\n"],
            seed=7,
            stream=True,
            stream_options={"include_usage": True},
            user="u1",
        ),
        max_tokens_limit=None,
    )
    assert dialect_named("openai").body(request, prompt_template=None, stream=True, max_tokens_default=None) == {
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 5,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": ["\n"],
        "seed": 7,
        "user": "u1",
    }


def test_openai_body_uses_the_default_max_tokens_and_flattens_content_parts() -> None:
    request = parse_chat(
        json.dumps(
            {
                "messages": [
                    {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
                ]
            }
        ).encode(),
        max_tokens_limit=None,
    )
    body = dialect_named("openai").body(request, prompt_template=None, stream=False, max_tokens_default=64)
    assert body == {"messages": [{"role": "system", "content": "a\nb"}], "stream": False, "max_tokens": 64}


def test_openai_stream_options_are_not_sent_when_not_asked() -> None:
    request = parse_chat(chat(stream=True), max_tokens_limit=None)
    assert "stream_options" not in dialect_named("openai").body(
        request, prompt_template=None, stream=True, max_tokens_default=None
    )


def test_openai_completion_body() -> None:
    request = parse_completion(b'{"model": "m", "prompt": "Once", "max_tokens": 3}', max_tokens_limit=None)
    body = dialect_named("openai").body(request, prompt_template=None, stream=True, max_tokens_default=None)
    assert body == {"prompt": "Once", "stream": True, "max_tokens": 3}


def test_a_vllm_tool_call_decodes_fragment_by_fragment_unchanged() -> None:
    decoder = dialect_named("openai").stream_decoder()
    head = {"index": 0, "id": "chatcmpl-tool-9", "type": "function", "function": {"name": "f", "arguments": ""}}
    records = [
        vllm('{"role":"assistant","content":""}'),
        vllm('{"reasoning_content":"Hm"}'),
        vllm(json.dumps({"tool_calls": [head]})),
        vllm('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"ci"}}]}'),
        vllm('{"tool_calls":[{"index":0,"function":{"arguments":"ty\\": 1}"}}]}'),
        vllm("{}", finish='"tool_calls"'),
    ]
    deltas = [d for r in records for d in decoder.decode(r)]
    assert deltas == [
        Delta("", role="assistant"),
        Delta(reasoning_content="Hm"),
        Delta(tool_calls=[head]),
        Delta(tool_calls=[{"index": 0, "function": {"arguments": '{"ci'}}]),
        Delta(tool_calls=[{"index": 0, "function": {"arguments": 'ty": 1}'}}]),
        Delta(finish_reason="tool_calls"),
    ]


def test_a_whole_openai_answer_keeps_tool_calls_and_reasoning() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    answer = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call], "reasoning_content": "R"},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    delta = dialect_named("openai").decode_body(json.dumps(answer).encode())
    assert delta == Delta(
        "", role="assistant", finish_reason="tool_calls", usage=Usage(3, 2, 5), tool_calls=[call], reasoning_content="R"
    )


def test_the_openai_dialect_forwards_an_agent_turn_as_sent() -> None:
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}], "name": "u"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    fields = {
        "tools": [TOOL],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "response_format": {"type": "json_object"},
        "logit_bias": {"7": 5},
        "logprobs": True,
        "top_logprobs": 2,
        "reasoning_effort": "high",
        "max_completion_tokens": 9,
    }
    request = parse_chat(chat(messages=messages, **fields), max_tokens_limit=None, extra_fields={"top_k"})
    body = dialect_named("openai").body(request, prompt_template=None, stream=False, max_tokens_default=None)
    assert body["messages"] == [
        {"role": "system", "content": "a\nb"},  # developer is system; text parts joined
        messages[1],  # an image stays a content part
        messages[2],
        messages[3],
    ]
    assert {k: body[k] for k in fields if k != "max_completion_tokens"} == {
        k: v for k, v in fields.items() if k != "max_completion_tokens"
    }
    assert body["max_tokens"] == 9 and "max_completion_tokens" not in body


def test_prompt_cache_key_carried_by_the_call_is_still_forwarded_to_an_openai_container() -> None:
    request = parse_chat(chat(prompt_cache_key="conversation-1"), max_tokens_limit=None)
    carried = frozenset({"prompt_cache_key"})
    body = dialect_named("openai").body(
        request, prompt_template=None, stream=True, max_tokens_default=None, in_call=carried
    )
    assert body["prompt_cache_key"] == "conversation-1"


def test_the_containers_system_fingerprint_comes_with_the_first_delta_only() -> None:
    decoder = dialect_named("openai").stream_decoder()
    first = {
        "system_fingerprint": "vllm-0.32.0",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
    }
    text = {"system_fingerprint": "vllm-0.32.0", "choices": [{"index": 0, "delta": {"content": "Hi"}}]}
    assert decoder.decode(json.dumps(first)) == [Delta(role="assistant", system_fingerprint="vllm-0.32.0")]
    assert decoder.decode(json.dumps(text)) == [Delta("Hi")]
    whole = {"system_fingerprint": "fp_1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]}
    assert dialect_named("openai").decode_body(json.dumps(whole).encode()).system_fingerprint == "fp_1"
