"""Requests are checked the way OpenAI checks them, and every rejection is a 400 that names the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sagestream.dialects import dialect_named
from sagestream.errors import APIError
from sagestream.protocols._requests import MAX_JSON_DEPTH
from sagestream.protocols.openai.request import ChatCompletionRequest, chat_request, parse_chat, parse_completion

USER = {"role": "user", "content": "Hi"}


def body(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [USER], **fields}).encode()


def rejection(raw: bytes, limit: int | None = None) -> APIError:
    with pytest.raises(APIError) as info:
        parse_chat(raw, max_tokens_limit=limit)
    assert info.value.status == 400
    assert info.value.type == "invalid_request_error"
    return info.value


def test_a_full_request_parses() -> None:
    request = parse_chat(
        body(
            max_tokens=10,
            temperature=0,
            top_p=1,
            stop=["a", "b"],
            stream=True,
            stream_options={"include_usage": True},
            seed=-3,
            user="u",
            n=1,
        ),
        max_tokens_limit=10,
    )
    assert isinstance(request, ChatCompletionRequest)
    assert (request.effective_max_tokens, request.temperature, request.stop_sequences) == (10, 0.0, ["a", "b"])
    assert request.include_usage is True


def test_openais_other_fields_parse() -> None:
    request = parse_chat(body(logit_bias={"1": 2}, frequency_penalty=0.5), max_tokens_limit=None)
    assert request.plain_messages() == [("user", "Hi")]
    assert request.sent()["logit_bias"] == {"1": 2}


def test_content_parts_join_as_text_and_developer_is_system() -> None:
    messages = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
    ]
    request = parse_chat(json.dumps({"messages": messages}).encode(), max_tokens_limit=None)
    assert request.plain_messages() == [("system", "rules"), ("user", "one\ntwo"), ("assistant", ""), ("tool", "42")]


def test_max_completion_tokens_is_accepted_and_wins() -> None:
    request = parse_chat(body(max_tokens=5, max_completion_tokens=7), max_tokens_limit=None)
    assert request.effective_max_tokens == 7


def test_stop_as_a_string_is_a_one_element_list() -> None:
    assert parse_chat(body(stop="###"), max_tokens_limit=None).stop_sequences == ["###"]


def test_include_usage_needs_streaming() -> None:
    # As OpenAI: stream_options without a stream is a 400, not a wish quietly ignored.
    assert rejection(body(stream_options={"include_usage": True})).param == "stream_options"
    assert parse_chat(body(stream=True, stream_options={"include_usage": True}), max_tokens_limit=None).include_usage


def test_invalid_json_is_invalid_json() -> None:
    assert rejection(b'{"messages": [').code == "invalid_json"


@pytest.mark.parametrize("raw", [b'{"temperature": NaN, "messages": []}', b'{"top_p": Infinity}'])
def test_non_standard_json_numbers_are_invalid_json(raw: bytes) -> None:
    assert rejection(raw).code == "invalid_json"


def test_a_body_that_is_not_utf8_is_invalid_json() -> None:
    assert rejection(b'{"messages": "\xff"}').code == "invalid_json"


@pytest.mark.parametrize("raw", [b"[]", b'"hi"', b"3", b"null"])
def test_a_body_that_is_not_an_object_is_rejected(raw: bytes) -> None:
    assert "JSON object" in rejection(raw).message


def test_missing_messages_names_the_field() -> None:
    err = rejection(b'{"model": "m"}')
    assert (err.param, err.code) == ("messages", "missing_required_parameter")
    assert "'messages'" in err.message


def test_empty_messages_are_rejected() -> None:
    assert rejection(body(messages=[])).param == "messages"


def test_a_bad_role_names_its_dotted_path() -> None:
    err = rejection(body(messages=[USER, {"role": "robot", "content": "x"}]))
    assert err.param == "messages.1.role"
    assert "messages.1.role" in err.message and "'user'" in err.message


def test_a_bad_content_part_names_the_part_field() -> None:
    err = rejection(body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]))
    assert err.param == "messages.0.content.0.image_url.url"
    err = rejection(body(messages=[{"role": "user", "content": [{"type": "video", "video": {}}]}]))
    assert err.param == "messages.0.content.0.type"


def test_content_of_the_wrong_type_names_content_not_a_union_member() -> None:
    err = rejection(body(messages=[{"role": "user", "content": 5}]))
    assert err.param == "messages.0.content"
    assert err.code == "invalid_type"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 5.5}, "max_tokens"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": 3}, "stop"),
        ({"stream": "yes"}, "stream"),
        ({"stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
        ({"n": 2}, "n"),
        ({"seed": "x"}, "seed"),
        ({"model": 4}, "model"),
    ],
)
def test_out_of_range_and_wrong_type_fields_name_themselves(fields: dict[str, Any], param: str) -> None:
    err = rejection(body(**fields))
    assert err.param == param
    assert f"'{param}'" in err.message


def test_n_other_than_one_says_why() -> None:
    assert "only n=1" in rejection(body(n=3)).message


def test_max_tokens_over_the_limit() -> None:
    err = rejection(body(max_tokens=4097), limit=4096)
    assert (err.param, err.code) == ("max_tokens", "max_tokens_exceeded")
    assert "4096" in err.message


def test_max_completion_tokens_over_the_limit_names_that_field() -> None:
    assert rejection(body(max_completion_tokens=9), limit=8).param == "max_completion_tokens"


def test_max_tokens_at_the_limit_passes() -> None:
    assert parse_chat(body(max_tokens=4096), max_tokens_limit=4096).max_tokens == 4096


def test_completion_request() -> None:
    request = parse_completion(b'{"model": "m", "prompt": "Once", "max_tokens": 4, "stream": true}', max_tokens_limit=8)
    assert (request.prompt, request.effective_max_tokens, request.stream) == ("Once", 4, True)


def test_completion_requires_a_string_prompt() -> None:
    with pytest.raises(APIError) as info:
        parse_completion(b'{"prompt": ["a", "b"]}', max_tokens_limit=None)
    assert (info.value.status, info.value.param) == (400, "prompt")


def test_completion_max_tokens_over_the_limit() -> None:
    with pytest.raises(APIError) as info:
        parse_completion(b'{"prompt": "a", "max_tokens": 100}', max_tokens_limit=10)
    assert info.value.code == "max_tokens_exceeded"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
_message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "system", "assistant", "tool", "developer", "bot"]) | _json,
        "content": st.text(max_size=5)
        | st.lists(st.fixed_dictionaries({"type": st.just("text") | _json, "text": _json}))
        | _json,
    },
)
_request = st.fixed_dictionaries(
    {},
    optional={
        "messages": st.lists(_message, max_size=3) | _json,
        "model": _json,
        "max_tokens": st.integers(-2, 10) | _json,
        "max_completion_tokens": _json,
        "temperature": st.floats(-1, 3) | _json,
        "top_p": _json,
        "stop": _json,
        "stream": _json,
        "stream_options": st.fixed_dictionaries({}, optional={"include_usage": _json}) | _json,
        "n": _json,
        "seed": _json,
    },
)


def _accepted_or_4xx(raw: bytes) -> None:
    try:
        parse_chat(raw, max_tokens_limit=5)
    except APIError as err:
        assert 400 <= err.status < 500
        assert err.type == "invalid_request_error"
        assert err.message


@settings(max_examples=300, deadline=None)
@given(request=_request | _json)
def test_any_json_body_parses_or_is_a_4xx(request: Any) -> None:
    try:
        raw = json.dumps(request).encode()
    except ValueError:  # pragma: no cover - json.dumps refuses nothing hypothesis draws here
        return
    _accepted_or_4xx(raw)


@settings(max_examples=150, deadline=None)
@given(raw=st.binary(max_size=40))
def test_any_bytes_parse_or_are_a_4xx(raw: bytes) -> None:
    _accepted_or_4xx(raw)


def test_absurdly_nested_json_is_a_4xx() -> None:
    with pytest.raises(APIError) as raised:
        parse_chat(b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", max_tokens_limit=5)
    assert 400 <= raised.value.status < 500 and raised.value.type == "invalid_request_error"


# --- the whole request, as the openai SDK builds it -------------------------------------------------------

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}, "strict": True}}


def test_an_agent_turn_parses_with_every_message_kind() -> None:
    messages = [
        {"role": "developer", "content": "Use tools.", "name": "ops"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather here?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
            ],
            "name": "ana",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]},
    ]
    request = parse_chat(
        body(
            messages=messages,
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
            response_format={"type": "json_schema", "json_schema": {"name": "W", "schema": {"type": "object"}}},
            logprobs=True,
            top_logprobs=3,
            reasoning_effort="low",
            metadata={"k": "v"},
            store=False,
        ),
        max_tokens_limit=None,
    )
    sent = request.sent()
    # What the client sent comes back out under the same names, "schema" included.
    assert sent["messages"] == messages
    assert sent["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert sent["tools"] == [WEATHER] and sent["store"] is False
    assert request.plain_messages()[1] == ("user", "Weather here?")


def test_an_unknown_field_is_refused_as_openai_refuses_it() -> None:
    err = rejection(body(top_k=5))
    assert (err.param, err.code, err.message) == (
        "top_k",
        "unknown_parameter",
        "Unrecognized request argument supplied: top_k",
    )


def test_an_unknown_field_inside_a_message_names_its_path() -> None:
    err = rejection(body(messages=[{"role": "user", "content": "Hi", "mood": "happy"}]))
    assert err.param == "messages.0.mood" and err.code == "unknown_parameter"


def test_listed_vendor_fields_are_kept_apart_as_sent() -> None:
    extras = frozenset({"top_k", "chat_template_kwargs", "temperature"})
    request = parse_chat(
        body(top_k=40, chat_template_kwargs={"enable_thinking": False}, temperature=0.5),
        max_tokens_limit=None,
        extra_fields=extras,
    )
    # An OpenAI field is never a vendor field, even when listed: it is validated as OpenAI's.
    assert request.vendor_fields == {"top_k": 40, "chat_template_kwargs": {"enable_thinking": False}}
    assert request.temperature == 0.5
    assert "top_k" not in request.sent()
    assert rejection_with(body(min_p=0.1), extras).param == "min_p"


def rejection_with(raw: bytes, extras: frozenset[str]) -> APIError:
    with pytest.raises(APIError) as info:
        parse_chat(raw, max_tokens_limit=None, extra_fields=extras)
    assert info.value.status == 400
    return info.value


def test_top_logprobs_needs_logprobs() -> None:
    err = rejection(body(top_logprobs=2))
    assert err.param == "top_logprobs" and "'logprobs' must be true" in err.message


@pytest.mark.parametrize(
    ("stop", "param"),
    [(["a", "b", "c", "d", "e"], "stop"), ("x" * 257, "stop"), (["ok", "y" * 257], "stop.1")],
)
def test_stop_strings_are_bounded_in_count_and_length(stop: Any, param: str) -> None:
    assert rejection(body(stop=stop)).param == param


def test_stop_at_the_limits_passes() -> None:
    assert parse_chat(body(stop=["x" * 256] * 4), max_tokens_limit=None).stop_sequences == ["x" * 256] * 4


def test_the_prompt_size_limit_counts_every_message_and_names_the_field() -> None:
    two = [{"role": "system", "content": "a" * 6}, {"role": "user", "content": "b" * 5}]
    assert parse_chat(body(messages=two), max_tokens_limit=None, max_prompt_chars=11)
    with pytest.raises(APIError) as info:
        parse_chat(body(messages=two), max_tokens_limit=None, max_prompt_chars=10)
    assert (info.value.status, info.value.param, info.value.code) == (400, "messages", "prompt_too_long")
    assert "11 characters" in info.value.message and "at most 10" in info.value.message
    with pytest.raises(APIError) as info:
        parse_completion(b'{"prompt": "abcdef"}', max_tokens_limit=None, max_prompt_chars=5)
    assert info.value.param == "prompt"


def test_a_prompt_is_a_string_or_a_one_element_list() -> None:
    assert parse_completion(b'{"prompt": ["Once"]}', max_tokens_limit=None).prompt_text == "Once"
    for raw, why in (
        (b'{"prompt": ["a", "b"]}', "2 prompts were sent"),
        (b'{"prompt": []}', "length >= 1"),
        (b'{"prompt": [1, 2]}', "Expected `str`"),
    ):
        with pytest.raises(APIError) as info:
            parse_completion(raw, max_tokens_limit=None)
        assert info.value.param and info.value.param.startswith("prompt") and why in info.value.message, raw


# --- how deeply a request may nest, decided before any work ---


def nested_schema(levels: int) -> dict[str, Any]:
    """A JSON Schema ``levels`` objects deep (each ``properties`` adds a level of its own)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels - 1):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def schema_request(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "deep", "schema": schema}}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": schema_request(nested_schema(64))}, "response_format.json_schema.schema"),
        (
            {
                "tools": [
                    {"type": "function", "function": {"name": "ok"}},
                    {"type": "function", "function": {"name": "f", "parameters": nested_schema(64)}},
                ]
            },
            "tools.1.function.parameters",
        ),
        ({"functions": [{"name": "f", "parameters": nested_schema(64)}]}, "functions.0.parameters"),
        ({"audio": nested_schema(64)}, "audio"),
    ],
    ids=["response_format", "tools", "functions", "relayed-object"],
)
def test_a_request_nested_past_the_limit_is_a_400_naming_its_field(fields: dict[str, Any], param: str) -> None:
    raw = body(**fields)
    assert depth(json.loads(raw)) > MAX_JSON_DEPTH
    err = rejection(raw)
    assert (err.param, err.code) == (param, "invalid_value")
    assert str(MAX_JSON_DEPTH) in err.message


def test_a_request_at_the_depth_limit_parses_and_its_upstream_body_builds() -> None:
    # The deepest schema that fits: the body, response_format and json_schema take three levels.
    levels = (MAX_JSON_DEPTH - 3 + 1) // 2
    raw = body(response_format=schema_request(nested_schema(levels)))
    assert depth(json.loads(raw)) == MAX_JSON_DEPTH
    request = parse_chat(raw, max_tokens_limit=None)
    for dialect in ("openai", "tgi"):
        dialect_named(dialect).body(request, prompt_template="chatml", stream=True, max_tokens_default=None)


def test_the_depth_limit_keeps_well_under_what_the_body_build_can_serialise() -> None:
    """Three times the limit must still make an upstream body, so the limit is what a client meets, never a
    serialiser's own recursion limit after the request was accepted."""
    deep: dict[str, Any] = {}
    for _ in range(3 * MAX_JSON_DEPTH):
        deep = {"a": deep}
    tool = {"type": "function", "function": {"name": "f", "parameters": deep}}
    request = chat_request({"messages": [USER], "tools": [tool]}, max_tokens_limit=None)
    dialect_named("openai").body(request, prompt_template=None, stream=True, max_tokens_default=None)


def test_a_vendor_field_nested_past_the_limit_is_refused_by_its_name() -> None:
    with pytest.raises(APIError) as info:
        parse_chat(
            body(chat_template_kwargs=nested_schema(64)), max_tokens_limit=None, extra_fields={"chat_template_kwargs"}
        )
    assert info.value.param == "chat_template_kwargs"


# --- tool_choice asks for tools that are there ---

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    "fields",
    [
        {"tool_choice": "required"},
        {"tool_choice": "required", "tools": []},
        {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"tool_choice": {"type": "function", "function": {"name": "get_time"}}, "tools": [TOOL]},
        {"tool_choice": {"type": "custom", "custom": {"name": "grep"}}, "tools": [TOOL]},
    ],
    ids=["required-no-tools", "required-empty-tools", "named-no-tools", "named-not-in-tools", "custom-not-in-tools"],
)
def test_a_tool_choice_that_needs_a_tool_not_there_is_a_400_naming_tool_choice(fields: dict[str, Any]) -> None:
    err = rejection(body(**fields))
    assert (err.param, err.code) == ("tool_choice", "invalid_value")


@pytest.mark.parametrize(
    "fields",
    [
        {"tool_choice": "none"},
        {"tool_choice": "auto"},
        {"tool_choice": "required", "tools": [TOOL]},
        {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "tools": [TOOL]},
        {
            "tool_choice": {"type": "custom", "custom": {"name": "grep"}},
            "tools": [{"type": "custom", "custom": {"name": "grep"}}],
        },
    ],
)
def test_a_tool_choice_the_tools_can_meet_parses(fields: dict[str, Any]) -> None:
    assert parse_chat(body(**fields), max_tokens_limit=None).tool_choice is not None


def test_a_tool_result_that_answers_no_call_is_refused_by_its_message() -> None:
    body = {"messages": [{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "none", "content": "x"}]}
    with pytest.raises(APIError) as caught:
        parse_chat(json.dumps(body).encode(), max_tokens_limit=None)
    assert caught.value.param == "messages.1" and "'none'" in caught.value.message
    answered = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
    ]
    assert len(parse_chat(json.dumps({"messages": answered}).encode(), max_tokens_limit=None).messages) == 3
