"""The containers' streams decode to the same deltas however SageMaker cuts them, and bad input fails one way."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sagestream.dialects import (
    DIALECTS,
    DecodeError,
    Delta,
    Dialect,
    UpstreamStreamError,
    Usage,
    decode_body,
    stream_decoder,
    upstream_body,
)
from sagestream.errors import APIError
from sagestream.schema import parse_chat, parse_completion
from tests.unit.streams import LMI, RECORDED, TGI, VLLM_CHAT, Recorded, relay_deltas


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
    assert message in info.value.message
    assert info.value.status == 502
    assert info.value.body()["error"]["type"] == "server_error"


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
    assert info.value.status == 502
    assert info.value.code == "upstream_decode_error"


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
