"""The tgi dialect: special tokens, details, logprobs and top tokens, its grammar, and the body it is sent."""

from __future__ import annotations

import json

from sagestream.delta import Delta, Usage
from sagestream.dialects import dialect_named
from sagestream.protocols.openai.request import parse_chat, parse_completion
from tests.unit.test_dialects import chat, tgi_event


def test_tgi_special_tokens_are_dropped_but_their_details_kept() -> None:
    decoder = dialect_named("tgi").stream_decoder()
    record = '{"token":{"text":"<|eot_id|>","special":true},"details":{"finish_reason":"length","generated_tokens":1}}'
    assert decoder.decode(record) == [Delta("", finish_reason="length", usage=Usage(None, 1, None))]


def test_tgi_stop_sequence_is_stop_and_prefill_counts_prompt_tokens() -> None:
    record = json.dumps(
        {
            "token": {"text": "!", "special": False},
            "details": {"finish_reason": "stop_sequence", "generated_tokens": 3, "prefill": [{}, {}]},
        }
    )
    assert dialect_named("tgi").stream_decoder().decode(record) == [
        Delta("!", finish_reason="stop", usage=Usage(2, 3, 5))
    ]


def test_tgi_body_is_a_one_element_list() -> None:
    body = [
        {
            "generated_text": "Grüße",
            "details": {
                "finish_reason": "eos_token",
                "generated_tokens": 2,
                "prefill": [{"id": 1}, {"id": 2}, {"id": 3}],
            },
        }
    ]
    assert dialect_named("tgi").decode_body(json.dumps(body).encode()) == Delta(
        "Grüße", finish_reason="stop", usage=Usage(3, 2, 5)
    )


def test_tgi_body_renders_the_prompt_and_asks_for_details() -> None:
    request = parse_chat(chat(max_tokens=5, temperature=0.7, top_p=0.95, stop="END", seed=1), max_tokens_limit=None)
    body = dialect_named("tgi").body(request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert body == {
        "inputs": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        "parameters": {
            "details": True,
            "max_new_tokens": 5,
            "temperature": 0.7,
            "top_p": 0.95,
            "do_sample": True,
            "stop": ["END"],
            "seed": 1,
        },
        "stream": True,
    }


def test_temperature_zero_is_greedy_for_tgi_which_refuses_zero() -> None:
    request = parse_chat(chat(temperature=0, top_p=0.5), max_tokens_limit=None)
    params = dialect_named("tgi").body(request, prompt_template="llama3", stream=False, max_tokens_default=None)[
        "parameters"
    ]
    assert params == {"details": True, "do_sample": False}


def test_top_p_one_is_left_out_because_tgi_refuses_it() -> None:
    request = parse_chat(chat(top_p=1), max_tokens_limit=None)
    params = dialect_named("lmi").body(request, prompt_template="llama3", stream=False, max_tokens_default=None)[
        "parameters"
    ]
    assert params == {"details": True}


def test_a_whole_tgi_answer_does_not_invent_a_prompt_count() -> None:
    body = b'[{"generated_text":"x","details":{"finish_reason":"eos_token","generated_tokens":2,"seed":null}}]'
    assert dialect_named("tgi").decode_body(body).usage == Usage(None, 2, None)


def test_tgi_token_logprobs_become_openais_chat_logprobs_when_asked() -> None:
    request = parse_chat(chat(logprobs=True, top_logprobs=1), max_tokens_limit=None)
    top = '[{"id":1,"text":"Hé","logprob":-0.5,"special":false},{"id":2,"text":"Ho","logprob":-2.0,"special":false}]'
    (delta,) = dialect_named("tgi").stream_decoder(request).decode(tgi_event("Hé", -0.5, top))
    assert delta.logprobs == {
        "content": [
            {
                "token": "Hé",
                "logprob": -0.5,
                "bytes": list("Hé".encode()),
                "top_logprobs": [{"token": "Hé", "logprob": -0.5, "bytes": list("Hé".encode())}],
            }
        ],
        "refusal": None,
    }
    # Not asked: none, as OpenAI sends none.
    (plain,) = (
        dialect_named("tgi").stream_decoder(parse_chat(chat(), max_tokens_limit=None)).decode(tgi_event("Hé", -0.5))
    )
    assert plain.logprobs is None


def test_tgi_logprobs_for_completions_carry_offsets() -> None:
    request = parse_completion(b'{"prompt": "Q", "logprobs": 0}', max_tokens_limit=None)
    decoder = dialect_named("tgi").stream_decoder(request)
    first, second = decoder.decode(tgi_event("ab", -1.0))[0], decoder.decode(tgi_event("c", -2.0))[0]
    assert first.logprobs == {"tokens": ["ab"], "token_logprobs": [-1.0], "top_logprobs": None, "text_offset": [0]}
    assert second.logprobs is not None and second.logprobs["text_offset"] == [2]


def test_tgi_translates_response_format_to_its_grammar() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "A", "schema": schema}}
    request = parse_chat(chat(response_format=fmt), max_tokens_limit=None)
    body = dialect_named("tgi").body(request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert body["parameters"]["grammar"] == {"type": "json", "value": schema}
    request = parse_chat(chat(response_format={"type": "json_object"}), max_tokens_limit=None)
    body = dialect_named("tgi").body(request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert body["parameters"]["grammar"] == {"type": "json", "value": {"type": "object"}}


def test_tgi_asks_for_top_tokens_when_top_logprobs_are_wanted() -> None:
    request = parse_chat(chat(logprobs=True, top_logprobs=3), max_tokens_limit=None)
    body = dialect_named("tgi").body(request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert body["parameters"]["top_n_tokens"] == 3
