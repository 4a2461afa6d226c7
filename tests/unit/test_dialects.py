"""The containers' streams decode to the same deltas however SageMaker cuts them, and bad input fails one way."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sagestream.delta import Delta, Usage
from sagestream.dialects import (
    COMPUTED_FIELDS,
    DIALECTS,
    DecodeError,
    Dialect,
    UpstreamStreamError,
    decode_body,
    stream_decoder,
    upstream_body,
)
from sagestream.errors import APIError
from sagestream.faults import error_from
from sagestream.schema import parse_chat, parse_completion
from tests.fakes import LMI, RECORDED, TGI, VLLM_CHAT, Recorded, relay_deltas


@pytest.mark.parametrize("recorded", RECORDED, ids=lambda r: r.name)
def test_a_recorded_stream_decodes_to_its_deltas(recorded: Recorded) -> None:
    assert relay_deltas(recorded.dialect, [recorded.body]) == recorded.deltas


@pytest.mark.parametrize("recorded", RECORDED, ids=lambda r: r.name)
def test_a_recorded_stream_fed_byte_by_byte_decodes_the_same(recorded: Recorded) -> None:
    body = recorded.body
    assert relay_deltas(recorded.dialect, [body[i : i + 1] for i in range(len(body))]) == recorded.deltas


@settings(max_examples=60, deadline=None)
@given(recorded=st.sampled_from(RECORDED), data=st.data())
def test_any_rechunking_of_a_recorded_stream_decodes_the_same(recorded: Recorded, data: st.DataObject) -> None:
    body = recorded.body
    points = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=30)))
    bounds = [0, *points, len(body)]
    parts = [body[a:b] for a, b in itertools.pairwise(bounds)]
    assert relay_deltas(recorded.dialect, parts) == relay_deltas(recorded.dialect, [body])


@pytest.mark.parametrize(
    ("recorded", "done_after"),
    [(TGI, True), (VLLM_CHAT, True), (LMI, True)],
    ids=["tgi-details", "openai-DONE", "lmi-details"],
)
def test_done_is_set_by_the_dialects_end(recorded: Recorded, done_after: bool) -> None:
    decoder = stream_decoder(recorded.dialect)
    assert decoder.done is False
    for raw in recorded.body.decode().splitlines():
        if raw.strip() and not raw.startswith(":"):
            decoder.decode(raw.removeprefix("data:").strip())
    assert decoder.done is done_after


def test_records_after_the_end_are_ignored() -> None:
    decoder = stream_decoder("openai")
    decoder.decode("[DONE]")
    assert decoder.decode('{"choices":[{"index":0,"delta":{"content":"late"}}]}') == []


def test_openai_finish_chunk_with_empty_delta_and_null_content() -> None:
    decoder = stream_decoder("openai")
    assert decoder.decode('{"choices":[{"index":0,"delta":{"content":null},"finish_reason":"stop"}]}') == [
        Delta("", finish_reason="stop")
    ]


def test_openai_usage_without_total_is_summed() -> None:
    [delta] = stream_decoder("openai").decode('{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3}}')
    assert delta.usage == Usage(2, 3, 5)


def test_openai_tgi_era_finish_reasons_become_openais() -> None:
    record = '{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"eos_token"}]}'
    assert stream_decoder("openai").decode(record) == [Delta("x", finish_reason="stop")]


def test_tgi_special_tokens_are_dropped_but_their_details_kept() -> None:
    decoder = stream_decoder("tgi")
    record = '{"token":{"text":"<|eot_id|>","special":true},"details":{"finish_reason":"length","generated_tokens":1}}'
    assert decoder.decode(record) == [Delta("", finish_reason="length", usage=Usage(None, 1, None))]


def test_tgi_stop_sequence_is_stop_and_prefill_counts_prompt_tokens() -> None:
    record = json.dumps(
        {
            "token": {"text": "!", "special": False},
            "details": {"finish_reason": "stop_sequence", "generated_tokens": 3, "prefill": [{}, {}]},
        }
    )
    assert stream_decoder("tgi").decode(record) == [Delta("!", finish_reason="stop", usage=Usage(2, 3, 5))]


def test_a_special_token_without_details_yields_nothing() -> None:
    assert stream_decoder("tgi").decode('{"token":{"text":"<s>","special":true}}') == []


@pytest.mark.parametrize(
    ("dialect", "record", "message"),
    [
        ("tgi", '{"error":"Request failed during generation: CUDA OOM","error_type":"generation"}', "CUDA OOM"),
        ("openai", '{"error":{"message":"vLLM engine died","type":"InternalServerError","code":500}}', "engine"),
        ("openai", '{"object":"error","message":"max context exceeded","type":"BadRequestError"}', "context"),
        ("lmi", '{"error":"invoke handler failure","code":424}', "handler failure"),
        (
            "lmi",
            '{"token":{"id":-1,"text":"","log_prob":-1,"special_token":true},"generated_text":"",'
            '"details":{"finish_reason":"error","generated_tokens":null,"inputs":null}}',
            "finish_reason: error",
        ),
    ],
)
def test_a_containers_error_event_raises_upstream_stream_error(dialect: Dialect, record: str, message: str) -> None:
    with pytest.raises(UpstreamStreamError) as info:
        stream_decoder(dialect).decode(record)
    assert message in error_from(info.value).message
    assert error_from(info.value).status == 502
    assert error_from(info.value).body()["error"]["type"] == "server_error"


@pytest.mark.parametrize(
    ("dialect", "record"),
    [
        ("openai", "{not json"),
        ("openai", "[1, 2]"),
        ("openai", '{"choices": {"0": {}}}'),
        ("openai", '{"choices": [{"delta": {"content": 5}}]}'),
        ("openai", '{"choices": [], "usage": {"prompt_tokens": "2"}}'),
        ("openai", '{"choices": [], "usage": {"prompt_tokens": true}}'),
        ("tgi", '{"index": 1}'),
        ("tgi", '{"token": "x"}'),
        ("tgi", '{"token": {"text": 1}}'),
        ("tgi", '{"token": {"text": "a"}, "details": {"generated_tokens": 1.5}}'),
        ("lmi", '{"token": {"text": "a"}, "details": []}'),
        ("lmi", "[" * 100_000),
    ],
)
def test_malformed_records_raise_decode_error(dialect: Dialect, record: str) -> None:
    with pytest.raises(DecodeError) as info:
        stream_decoder(dialect).decode(record)
    assert error_from(info.value).status == 502
    assert error_from(info.value).code == "upstream_decode_error"


def test_unknown_dialect_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="dialect"):
        stream_decoder("bedrock")  # type: ignore[arg-type]


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
_keys = st.sampled_from(
    [
        "token",
        "text",
        "special",
        "special_token",
        "details",
        "finish_reason",
        "generated_tokens",
        "input_length",
        "prefill",
        "choices",
        "delta",
        "content",
        "role",
        "usage",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "error",
        "object",
        "message",
    ]
)
# Objects built from the dialects' own keys reach far deeper into the decoders than random text does.
_shaped = st.recursive(
    _json_values,
    lambda inner: st.dictionaries(_keys, inner, max_size=4) | st.lists(inner, max_size=2),
    max_leaves=12,
)
_records = st.one_of(
    st.text(max_size=30),
    _shaped.map(json.dumps),
    st.sampled_from(["[DONE]", "", "null", "{}", '{"error": null}']),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dialect=st.sampled_from(DIALECTS), records=st.lists(_records, max_size=4))
def test_any_record_either_decodes_or_raises_only_the_decoders_errors(dialect: Dialect, records: list[str]) -> None:
    decoder = stream_decoder(dialect)
    for record in records:
        try:
            deltas = decoder.decode(record)
        except (DecodeError, UpstreamStreamError):
            return
        assert all(isinstance(delta, Delta) for delta in deltas)
        assert all(isinstance(delta.content, str) for delta in deltas)


@settings(max_examples=200, deadline=None)
@given(
    dialect=st.sampled_from(DIALECTS),
    body=st.one_of(st.binary(max_size=20), _shaped.map(lambda v: json.dumps(v).encode())),
)
def test_any_body_either_decodes_or_raises_only_the_decoders_errors(dialect: Dialect, body: bytes) -> None:
    try:
        delta = decode_body(dialect, body)
    except (DecodeError, UpstreamStreamError):
        return
    assert isinstance(delta.content, str)


# --- whole bodies ----------------------------------------------------------------------------------------


def test_openai_chat_completion_body() -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Salut 👋"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    assert decode_body("openai", json.dumps(body).encode()) == Delta(
        "Salut 👋", role="assistant", finish_reason="stop", usage=Usage(3, 2, 5)
    )


def test_openai_text_completion_body() -> None:
    body = {"object": "text_completion", "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}]}
    assert decode_body("openai", json.dumps(body).encode()) == Delta(" ok", finish_reason="length")


def test_openai_body_without_choices_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_body("openai", b'{"object": "chat.completion", "choices": []}')


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
    assert decode_body("tgi", json.dumps(body).encode()) == Delta("Grüße", finish_reason="stop", usage=Usage(3, 2, 5))


def test_lmi_body_is_an_object_and_details_are_optional() -> None:
    assert decode_body("lmi", b'{"generated_text": "plain"}') == Delta("plain")
    body = b'{"generated_text": "x", "details": {"finish_reason": "length", "generated_tokens": 8, "inputs": "q"}}'
    assert decode_body("lmi", body) == Delta("x", finish_reason="length", usage=Usage(None, 8, None))


def test_lmi_error_body_raises_upstream_stream_error() -> None:
    body = b'{"generated_text": "", "details": {"finish_reason": "error", "generated_tokens": null}}'
    with pytest.raises(UpstreamStreamError):
        decode_body("lmi", body)


@pytest.mark.parametrize("body", [b"", b"\xff", b"[]", b'{"details": {}}', b'[{"generated_text": 3}]'])
def test_malformed_generate_bodies_raise_decode_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_body("tgi", body)


# --- requests --------------------------------------------------------------------------------------------


def chat(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}], **fields}).encode()


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
    assert upstream_body("openai", request, prompt_template=None, stream=True, max_tokens_default=None) == {
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
    body = upstream_body("openai", request, prompt_template=None, stream=False, max_tokens_default=64)
    assert body == {"messages": [{"role": "system", "content": "a\nb"}], "stream": False, "max_tokens": 64}


def test_openai_stream_options_are_not_sent_when_not_asked() -> None:
    request = parse_chat(chat(stream=True), max_tokens_limit=None)
    assert "stream_options" not in upstream_body(
        "openai", request, prompt_template=None, stream=True, max_tokens_default=None
    )


def test_openai_completion_body() -> None:
    request = parse_completion(b'{"model": "m", "prompt": "Once", "max_tokens": 3}', max_tokens_limit=None)
    body = upstream_body("openai", request, prompt_template=None, stream=True, max_tokens_default=None)
    assert body == {"prompt": "Once", "stream": True, "max_tokens": 3}


def test_tgi_body_renders_the_prompt_and_asks_for_details() -> None:
    request = parse_chat(chat(max_tokens=5, temperature=0.7, top_p=0.95, stop="END", seed=1), max_tokens_limit=None)
    body = upstream_body("tgi", request, prompt_template="chatml", stream=True, max_tokens_default=None)
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


def test_lmi_body_names_stop_sequences_as_lmi_does() -> None:
    request = parse_completion(b'{"prompt": "Q:", "stop": ["\\n", "A:"]}', max_tokens_limit=None)
    body = upstream_body("lmi", request, prompt_template=None, stream=True, max_tokens_default=128)
    assert body == {
        "inputs": "Q:",
        "parameters": {"details": True, "max_new_tokens": 128, "stop_sequences": ["\n", "A:"]},
        "stream": True,
    }


def test_temperature_zero_is_greedy_for_tgi_which_refuses_zero() -> None:
    request = parse_chat(chat(temperature=0, top_p=0.5), max_tokens_limit=None)
    params = upstream_body("tgi", request, prompt_template="llama3", stream=False, max_tokens_default=None)[
        "parameters"
    ]
    assert params == {"details": True, "do_sample": False}


@pytest.mark.parametrize("dialect", ["tgi", "lmi"])
def test_top_p_zero_is_greedy_too_not_silently_full_sampling(dialect: str) -> None:
    request = parse_chat(chat(temperature=0.8, top_p=0), max_tokens_limit=None)
    params = upstream_body(dialect, request, prompt_template="llama3", stream=False, max_tokens_default=None)[
        "parameters"
    ]
    assert params == {"details": True, "do_sample": False}


def test_top_p_one_is_left_out_because_tgi_refuses_it() -> None:
    request = parse_chat(chat(top_p=1), max_tokens_limit=None)
    params = upstream_body("lmi", request, prompt_template="llama3", stream=False, max_tokens_default=None)[
        "parameters"
    ]
    assert params == {"details": True}


@pytest.mark.parametrize("dialect", ["tgi", "lmi"])
def test_chat_on_a_prompt_container_needs_a_template(dialect: Dialect) -> None:
    request = parse_chat(chat(), max_tokens_limit=None)
    with pytest.raises(APIError) as info:
        upstream_body(dialect, request, prompt_template=None, stream=True, max_tokens_default=None)
    assert (info.value.status, info.value.param, info.value.code) == (400, "messages", "prompt_template_required")
    assert "PROMPT_TEMPLATE" in info.value.message


# --- lossless: every field of the container's answer -------------------------------------------------------

_HEAD = '"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen"'


def vllm(delta: str, finish: str = "null", logprobs: str = "null") -> str:
    return f'{{{_HEAD},"choices":[{{"index":0,"delta":{delta},"logprobs":{logprobs},"finish_reason":{finish}}}]}}'


def test_a_vllm_tool_call_decodes_fragment_by_fragment_unchanged() -> None:
    decoder = stream_decoder("openai")
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


def test_reasoning_refusal_logprobs_and_unknown_delta_fields_are_kept() -> None:
    decoder = stream_decoder("openai")
    logprobs = {"content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}]}
    (delta,) = decoder.decode(
        vllm('{"reasoning":"think","refusal":"no","audio":{"id":"a1"},"content":"Hi"}', logprobs=json.dumps(logprobs))
    )
    assert delta == Delta("Hi", reasoning="think", refusal="no", logprobs=logprobs, extra={"audio": {"id": "a1"}})


def test_usage_details_pass_and_unknown_counts_stay_unknown() -> None:
    decoder = stream_decoder("openai")
    usage = (
        '{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14,"completion_tokens_details":{"reasoning_tokens":4}}'
    )
    (delta,) = decoder.decode(f'{{{_HEAD},"choices":[],"usage":{usage}}}')
    assert delta.usage == Usage(5, 9, 14, {"completion_tokens_details": {"reasoning_tokens": 4}})
    assert decoder.decode(f'{{{_HEAD},"choices":[],"usage":{{"prompt_tokens":5}}}}') == []


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
    delta = decode_body("openai", json.dumps(answer).encode())
    assert delta == Delta(
        "", role="assistant", finish_reason="tool_calls", usage=Usage(3, 2, 5), tool_calls=[call], reasoning_content="R"
    )


def test_a_whole_tgi_answer_does_not_invent_a_prompt_count() -> None:
    body = b'[{"generated_text":"x","details":{"finish_reason":"eos_token","generated_tokens":2,"seed":null}}]'
    assert decode_body("tgi", body).usage == Usage(None, 2, None)


def tgi_event(text: str, logprob: float, top: str = "null", details: str = "null") -> str:
    token = json.dumps({"id": 1, "text": text, "logprob": logprob, "special": False})
    return f'{{"token":{token},"top_tokens":{top},"details":{details}}}'


def test_tgi_token_logprobs_become_openais_chat_logprobs_when_asked() -> None:
    request = parse_chat(chat(logprobs=True, top_logprobs=1), max_tokens_limit=None)
    top = '[{"id":1,"text":"Hé","logprob":-0.5,"special":false},{"id":2,"text":"Ho","logprob":-2.0,"special":false}]'
    (delta,) = stream_decoder("tgi", request).decode(tgi_event("Hé", -0.5, top))
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
    (plain,) = stream_decoder("tgi", parse_chat(chat(), max_tokens_limit=None)).decode(tgi_event("Hé", -0.5))
    assert plain.logprobs is None


def test_tgi_logprobs_for_completions_carry_offsets() -> None:
    request = parse_completion(b'{"prompt": "Q", "logprobs": 0}', max_tokens_limit=None)
    decoder = stream_decoder("tgi", request)
    first, second = decoder.decode(tgi_event("ab", -1.0))[0], decoder.decode(tgi_event("c", -2.0))[0]
    assert first.logprobs == {"tokens": ["ab"], "token_logprobs": [-1.0], "top_logprobs": None, "text_offset": [0]}
    assert second.logprobs is not None and second.logprobs["text_offset"] == [2]


# --- requests: each field forwarded, translated or refused -------------------------------------------------

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
IMAGE = {"type": "image_url", "image_url": {"url": "https://x/y.png"}}


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
    body = upstream_body("openai", request, prompt_template=None, stream=False, max_tokens_default=None)
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


def test_vendor_fields_go_top_level_for_openai_and_into_parameters_for_tgi() -> None:
    request = parse_chat(chat(top_k=40), max_tokens_limit=None, extra_fields={"top_k"})
    assert upstream_body("openai", request, prompt_template=None, stream=True, max_tokens_default=None)["top_k"] == 40
    tgi = upstream_body("tgi", request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert tgi["parameters"]["top_k"] == 40


def test_tgi_translates_response_format_to_its_grammar() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "A", "schema": schema}}
    request = parse_chat(chat(response_format=fmt), max_tokens_limit=None)
    body = upstream_body("tgi", request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert body["parameters"]["grammar"] == {"type": "json", "value": schema}
    request = parse_chat(chat(response_format={"type": "json_object"}), max_tokens_limit=None)
    body = upstream_body("tgi", request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert body["parameters"]["grammar"] == {"type": "json", "value": {"type": "object"}}


def test_tgi_asks_for_top_tokens_when_top_logprobs_are_wanted() -> None:
    request = parse_chat(chat(logprobs=True, top_logprobs=3), max_tokens_limit=None)
    body = upstream_body("tgi", request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert body["parameters"]["top_n_tokens"] == 3


def refused(fmt: Dialect, raw: bytes, *, stream: bool = True, completion: bool = False) -> APIError:
    request = (parse_completion if completion else parse_chat)(raw, max_tokens_limit=None)
    with pytest.raises(APIError) as info:
        upstream_body(fmt, request, prompt_template="chatml", stream=stream, max_tokens_default=None)
    assert info.value.status == 400 and info.value.type == "invalid_request_error"
    return info.value


@pytest.mark.parametrize("fmt", ["tgi", "lmi"])
def test_tools_on_a_prompt_container_say_to_use_a_messages_api_container(fmt: Dialect) -> None:
    err = refused(fmt, chat(tools=[TOOL]))
    assert err.param == "tools" and "Messages-API container" in err.message and "UPSTREAM_FORMAT=openai" in err.message


@pytest.mark.parametrize(
    ("fmt", "fields", "param"),
    [
        ("tgi", {"presence_penalty": 0.5}, "presence_penalty"),
        ("tgi", {"logit_bias": {"1": 1}}, "logit_bias"),
        ("tgi", {"user": "u"}, "user"),
        ("lmi", {"response_format": {"type": "json_object"}}, "response_format"),
        ("lmi", {"logprobs": True, "top_logprobs": 2}, "top_logprobs"),
        ("tgi", {"messages": [{"role": "user", "content": "Hi", "name": "ana"}]}, "messages.0.name"),
        ("tgi", {"messages": [{"role": "assistant", "content": None, "tool_calls": [CALL]}]}, "messages.0.tool_calls"),
        (
            "lmi",
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, IMAGE]}]},
            "messages.0.content.1",
        ),
    ],
)
def test_what_a_prompt_container_cannot_carry_is_refused_by_name(
    fmt: Dialect, fields: dict[str, Any], param: str
) -> None:
    err = refused(fmt, chat(**fields))
    assert err.param == param and err.code == "unsupported_parameter"


def test_lmi_logprobs_need_a_stream_and_its_penalties_are_carried() -> None:
    assert refused("lmi", chat(logprobs=True), stream=False).param == "logprobs"
    request = parse_chat(chat(presence_penalty=0.3, frequency_penalty=0.2, logprobs=True), max_tokens_limit=None)
    body = upstream_body("lmi", request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert (body["parameters"]["presence_penalty"], body["parameters"]["frequency_penalty"]) == (0.3, 0.2)


@pytest.mark.parametrize("fmt", ["tgi", "lmi"])
def test_values_that_ask_for_nothing_pass_a_prompt_container(fmt: Dialect) -> None:
    request = parse_chat(
        chat(store=False, tool_choice="none", response_format={"type": "text"}, n=1), max_tokens_limit=None
    )
    body = upstream_body(fmt, request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert set(body) == {"inputs", "parameters", "stream"}


@pytest.mark.parametrize("fmt", ["tgi", "lmi"])
def test_prompt_cache_key_carried_by_the_call_is_not_refused_nor_put_in_a_generate_body(fmt: Dialect) -> None:
    request = parse_chat(chat(prompt_cache_key="conversation-1"), max_tokens_limit=None)
    assert refused(fmt, chat(prompt_cache_key="conversation-1")).param == "prompt_cache_key"
    carried = frozenset({"prompt_cache_key"})
    body = upstream_body(fmt, request, prompt_template="chatml", stream=True, max_tokens_default=None, in_call=carried)
    assert "conversation-1" not in json.dumps(body)


def test_prompt_cache_key_carried_by_the_call_is_still_forwarded_to_an_openai_container() -> None:
    request = parse_chat(chat(prompt_cache_key="conversation-1"), max_tokens_limit=None)
    carried = frozenset({"prompt_cache_key"})
    body = upstream_body("openai", request, prompt_template=None, stream=True, max_tokens_default=None, in_call=carried)
    assert body["prompt_cache_key"] == "conversation-1"


@pytest.mark.parametrize(
    ("dialect", "vendor"),
    [
        ("tgi", {"max_new_tokens": 200}),
        ("tgi", {"details": False}),
        ("tgi", {"stop": ["x"]}),
        ("lmi", {"max_new_tokens": 200}),
        ("lmi", {"stop_sequences": ["x"]}),
        ("openai", {"max_tokens": 200}),
        ("openai", {"stream": False}),
    ],
)
def test_a_vendor_field_never_replaces_one_the_function_computed(dialect: Dialect, vendor: dict[str, Any]) -> None:
    """Defence in depth: configuration refuses these names at init; were one to reach the body build anyway, it
    is refused by name, never merged over max_new_tokens (MAX_TOKENS_LIMIT), details or stream."""
    request = parse_chat(chat(max_tokens=16), max_tokens_limit=16)
    request._vendor_fields = vendor  # as parse_chat keeps them, had the deployment allowed these names
    (name,) = vendor
    assert name in COMPUTED_FIELDS[dialect]
    with pytest.raises(APIError) as info:
        upstream_body(dialect, request, prompt_template="chatml", stream=True, max_tokens_default=16)
    assert (info.value.status, info.value.param) == (400, name)


def test_the_computed_fields_are_those_the_body_build_sets() -> None:
    """Every parameter the build can set is listed, so no vendor field can ever shadow one."""
    ask = chat(
        max_tokens=5,
        temperature=0.5,
        top_p=0.5,
        stop=["x"],
        seed=1,
        frequency_penalty=0.1,
        logprobs=True,
        top_logprobs=2,
    )
    tgi = upstream_body(
        "tgi",
        parse_chat(
            ask.replace(b'"model"', b'"response_format": {"type": "json_object"}, "model"'), max_tokens_limit=None
        ),
        prompt_template="chatml",
        stream=True,
        max_tokens_default=None,
    )
    assert set(tgi["parameters"]) <= COMPUTED_FIELDS["tgi"]
    lmi_ask = chat(
        max_tokens=5, temperature=0.5, top_p=0.5, stop=["x"], seed=1, frequency_penalty=0.1, presence_penalty=0.1
    )
    lmi = upstream_body(
        "lmi",
        parse_chat(lmi_ask, max_tokens_limit=None),
        prompt_template="chatml",
        stream=True,
        max_tokens_default=None,
    )
    assert set(lmi["parameters"]) <= COMPUTED_FIELDS["lmi"]
