"""The containers' streams decode to the same deltas however SageMaker cuts them, and bad input fails one way."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sagestream.delta import Delta, Usage
from sagestream.dialects import DIALECTS, DecodeError, UpstreamStreamError, dialect_named
from sagestream.errors import APIError
from sagestream.faults import error_from
from sagestream.protocols.openai.request import parse_chat, parse_completion
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
    decoder = dialect_named(recorded.dialect).stream_decoder()
    assert decoder.done is False
    for raw in recorded.body.decode().splitlines():
        if raw.strip() and not raw.startswith(":"):
            decoder.decode(raw.removeprefix("data:").strip())
    assert decoder.done is done_after


def test_records_after_the_end_are_ignored() -> None:
    decoder = dialect_named("openai").stream_decoder()
    decoder.decode("[DONE]")
    assert decoder.decode('{"choices":[{"index":0,"delta":{"content":"late"}}]}') == []


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
def test_a_containers_error_event_raises_upstream_stream_error(dialect: str, record: str, message: str) -> None:
    with pytest.raises(UpstreamStreamError) as info:
        dialect_named(dialect).stream_decoder().decode(record)
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
def test_malformed_records_raise_decode_error(dialect: str, record: str) -> None:
    with pytest.raises(DecodeError) as info:
        dialect_named(dialect).stream_decoder().decode(record)
    assert error_from(info.value).status == 502
    assert error_from(info.value).code == "upstream_decode_error"


def test_unknown_dialect_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="dialect"):
        dialect_named("bedrock").stream_decoder()  # type: ignore[arg-type]


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
def test_any_record_either_decodes_or_raises_only_the_decoders_errors(dialect: str, records: list[str]) -> None:
    decoder = dialect_named(dialect).stream_decoder()
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
def test_any_body_either_decodes_or_raises_only_the_decoders_errors(dialect: str, body: bytes) -> None:
    try:
        delta = dialect_named(dialect).decode_body(body)
    except (DecodeError, UpstreamStreamError):
        return
    assert isinstance(delta.content, str)


# --- whole bodies ----------------------------------------------------------------------------------------


# --- requests --------------------------------------------------------------------------------------------


def chat(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}], **fields}).encode()


# --- lossless: every field of the container's answer -------------------------------------------------------

_HEAD = '"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen"'


def vllm(delta: str, finish: str = "null", logprobs: str = "null") -> str:
    return f'{{{_HEAD},"choices":[{{"index":0,"delta":{delta},"logprobs":{logprobs},"finish_reason":{finish}}}]}}'


def test_reasoning_refusal_logprobs_and_unknown_delta_fields_are_kept() -> None:
    decoder = dialect_named("openai").stream_decoder()
    logprobs = {"content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": []}]}
    (delta,) = decoder.decode(
        vllm('{"reasoning":"think","refusal":"no","audio":{"id":"a1"},"content":"Hi"}', logprobs=json.dumps(logprobs))
    )
    assert delta == Delta("Hi", reasoning="think", refusal="no", logprobs=logprobs, extra={"audio": {"id": "a1"}})


def test_usage_details_pass_and_unknown_counts_stay_unknown() -> None:
    decoder = dialect_named("openai").stream_decoder()
    usage = (
        '{"prompt_tokens":5,"completion_tokens":9,"total_tokens":14,"completion_tokens_details":{"reasoning_tokens":4}}'
    )
    (delta,) = decoder.decode(f'{{{_HEAD},"choices":[],"usage":{usage}}}')
    assert delta.usage == Usage(5, 9, 14, {"completion_tokens_details": {"reasoning_tokens": 4}})
    assert decoder.decode(f'{{{_HEAD},"choices":[],"usage":{{"prompt_tokens":5}}}}') == []


def tgi_event(text: str, logprob: float, top: str = "null", details: str = "null") -> str:
    token = json.dumps({"id": 1, "text": text, "logprob": logprob, "special": False})
    return f'{{"token":{token},"top_tokens":{top},"details":{details}}}'


# --- requests: each field forwarded, translated or refused -------------------------------------------------

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
IMAGE = {"type": "image_url", "image_url": {"url": "https://x/y.png"}}


def test_vendor_fields_go_top_level_for_openai_and_into_parameters_for_tgi() -> None:
    request = parse_chat(chat(top_k=40), max_tokens_limit=None, extra_fields={"top_k"})
    assert (
        dialect_named("openai").body(request, prompt_template=None, stream=True, max_tokens_default=None)["top_k"] == 40
    )
    tgi = dialect_named("tgi").body(request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert tgi["parameters"]["top_k"] == 40


def refused(fmt: str, raw: bytes, *, stream: bool = True, completion: bool = False) -> APIError:
    request = (parse_completion if completion else parse_chat)(raw, max_tokens_limit=None)
    with pytest.raises(APIError) as info:
        dialect_named(fmt).body(request, prompt_template="chatml", stream=stream, max_tokens_default=None)
    assert info.value.status == 400 and info.value.type == "invalid_request_error"
    return info.value


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
def test_a_vendor_field_never_replaces_one_the_function_computed(dialect: str, vendor: dict[str, Any]) -> None:
    """Defence in depth: configuration refuses these names at init; were one to reach the body build anyway, it
    is refused by name, never merged over max_new_tokens (MAX_TOKENS_LIMIT), details or stream."""
    request = parse_chat(chat(max_tokens=16), max_tokens_limit=16)
    request._vendor_fields = vendor  # as parse_chat keeps them, had the deployment allowed these names
    (name,) = vendor
    assert name in dialect_named(dialect).computed_fields
    with pytest.raises(APIError) as info:
        dialect_named(dialect).body(request, prompt_template="chatml", stream=True, max_tokens_default=16)
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
    tgi = dialect_named("tgi").body(
        parse_chat(
            ask.replace(b'"model"', b'"response_format": {"type": "json_object"}, "model"'), max_tokens_limit=None
        ),
        prompt_template="chatml",
        stream=True,
        max_tokens_default=None,
    )
    assert set(tgi["parameters"]) <= dialect_named("tgi").computed_fields
    lmi_ask = chat(
        max_tokens=5, temperature=0.5, top_p=0.5, stop=["x"], seed=1, frequency_penalty=0.1, presence_penalty=0.1
    )
    lmi = dialect_named("lmi").body(
        parse_chat(lmi_ask, max_tokens_limit=None),
        prompt_template="chatml",
        stream=True,
        max_tokens_default=None,
    )
    assert set(lmi["parameters"]) <= dialect_named("lmi").computed_fields
