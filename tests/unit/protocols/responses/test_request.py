"""The Responses API's request: read as the SDK's ``ResponseCreateParams``, translated into the chat-shaped request
every dialect reads, and refused by its own field names (``text.format``, ``input.2``) wherever it cannot be carried.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sagestream.config import Config
from sagestream.delta import Delta
from sagestream.dialects import dialect_named
from sagestream.errors import APIError
from sagestream.protocols.responses import RESPONSES
from tests.unit.test_app import make as make_app
from tests.unit.test_app import run

CFG = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "unit-llm", "AUTH_MODE": "none"})
TGI = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "unit-llm", "UPSTREAM_FORMAT": "tgi", "PROMPT_TEMPLATE": "chatml"})
LMI = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "unit-llm", "UPSTREAM_FORMAT": "lmi", "PROMPT_TEMPLATE": "llama3"})
TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": True}


def parse(body: dict[str, Any], cfg: Config = CFG) -> Any:
    return RESPONSES.parse(json.dumps(body).encode(), cfg)


def refusal(body: dict[str, Any], cfg: Config = CFG) -> APIError:
    with pytest.raises(APIError) as info:
        parse(body, cfg)
    assert info.value.status == 400
    return info.value


def test_a_string_input_with_instructions_is_a_system_and_a_user_message() -> None:
    parsed = parse({"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 9, "stream": True})
    assert parsed.request.plain_messages() == [("system", "Be brief."), ("user", "Hi")]
    assert parsed.request.effective_max_tokens == 9
    # The container's usage is what response.completed reports: asked for on every streamed request.
    assert parsed.request.include_usage


def test_items_become_the_chat_conversation_calls_joined_to_their_turn_and_reasoning_kept() -> None:
    parsed = parse(
        {
            "input": [
                {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": "Hm"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "c2", "output": "rain"},
                {
                    "type": "message",
                    "role": "assistant",
                    "id": "msg_1",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Sunny, then rain.", "annotations": []}],
                },
                {"role": "user", "content": "Thanks"},
            ],
            "tools": [TOOL],
        }
    )
    body = dialect_named("openai").body(parsed.request, prompt_template=None, stream=False, max_tokens_default=None)
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Hm",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
        {"role": "assistant", "content": "Sunny, then rain."},
        {"role": "user", "content": "Thanks"},
    ]
    assert body["tools"] == [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}, "strict": True}}
    ]


def test_text_format_reasoning_and_the_rest_reach_their_chat_names() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    parsed = parse(
        {
            "input": "Hi",
            "text": {"format": {"type": "json_schema", "name": "A", "schema": schema, "strict": True}},
            "reasoning": {"effort": "low", "summary": "auto"},
            "tool_choice": {"type": "function", "name": "get_weather"},
            "tools": [TOOL],
            "prompt_cache_key": "k",
            "include": ["message.output_text.logprobs"],
            "top_logprobs": 2,
        }
    )
    sent = parsed.request.sent()
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "A", "schema": schema, "strict": True},
    }
    assert sent["reasoning_effort"] == "low" and sent["prompt_cache_key"] == "k"
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)


def test_an_unknown_field_is_refused_as_openai_refuses_it() -> None:
    err = refusal({"input": "Hi", "top_k": 5})
    assert (err.param, err.message, err.code) == (
        "top_k",
        "Unrecognized request argument supplied: top_k",
        "unknown_parameter",
    )


@pytest.mark.parametrize(
    ("field", "value"), [("previous_response_id", "resp_1"), ("conversation", {"id": "conv_1"}), ("background", True)]
)
def test_stateful_fields_are_refused_naming_the_field_and_the_stateless_server(field: str, value: Any) -> None:
    err = refusal({"input": "Hi", field: value})
    assert err.param == field and "stateless" in err.message


def test_store_true_is_accepted_and_the_response_says_nothing_is_stored() -> None:
    parsed = parse({"input": "Hi", "store": True})
    assert "store" not in parsed.request.sent()
    assert json.loads(RESPONSES.whole(Delta("Hi", finish_reason="stop"), parsed, CFG))["store"] is False


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "Hi", "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}, "tool_choice.type"),
        ({"input": "Hi", "tools": [{"type": "web_search"}], "tool_choice": "required"}, "tool_choice"),
        (
            {
                "input": "Hi",
                "tools": [{"type": "namespace", "name": "ns", "description": "d", "tools": [{"type": "x"}]}],
            },
            "tools.0.tools.0.type",
        ),
        ({"input": "Hi", "tool_choice": {"type": "function", "name": "absent"}}, "tool_choice"),
        ({"input": [{"type": "web_search_call", "id": "x"}]}, "input.0.type"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0"),
        ({"input": "Hi", "include": ["file_search_call.results"]}, "include"),
        ({"input": "Hi", "truncation": "auto"}, "truncation"),
        ({"input": "Hi", "tools": [{**TOOL, "parameters": "no"}]}, "tools.0.parameters"),
        ({"input": [{"role": "robot", "content": "Hi"}]}, "input.0.role"),
        ({"input": "Hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({}, "input"),
    ],
)
def test_what_cannot_be_carried_is_refused_by_its_responses_name(body: dict[str, Any], param: str) -> None:
    assert refusal(body).param == param


def test_max_output_tokens_over_the_limit_is_refused_under_its_own_name() -> None:
    cfg = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "unit-llm", "MAX_TOKENS_LIMIT": "100"})
    err = refusal({"input": "Hi", "max_output_tokens": 101}, cfg)
    assert err.param == "max_output_tokens" and "max_output_tokens" in err.message


@pytest.mark.parametrize(
    ("cfg", "body", "param"),
    [
        (TGI, {"input": "Hi", "reasoning": {"effort": "low"}}, "reasoning.effort"),
        (TGI, {"input": "Hi", "tools": [TOOL]}, "tools"),
        (LMI, {"input": "Hi", "text": {"format": {"type": "json_object"}}}, "text.format"),
        (
            TGI,
            {
                "input": [
                    {"role": "user", "content": [{"type": "input_image", "image_url": "data:,", "detail": "auto"}]}
                ]
            },
            "input.0",
        ),
    ],
)
def test_a_prompt_dialects_refusal_names_the_responses_field(cfg: Config, body: dict[str, Any], param: str) -> None:
    # The dialect refuses while the upstream body is built, after the parse: app renames it with the parse's
    # rename, as here.
    parsed = parse(body, cfg)
    with pytest.raises(APIError) as info:
        dialect_named(cfg.dialect).body(
            parsed.request, prompt_template=cfg.prompt_template, stream=False, max_tokens_default=None
        )
    err = parsed.in_client_terms(info.value)
    assert err.status == 400 and err.param == param and f"'{param}'" in err.message


def test_the_route_answers_a_dialects_refusal_under_the_responses_name() -> None:
    handler, upstream = make_app(UPSTREAM_FORMAT="tgi", PROMPT_TEMPLATE="chatml", AUTH_MODE="none")
    answer = run(handler, "POST", "/v1/responses", {"input": "Hi", "reasoning": {"effort": "low"}})
    assert answer.status == 400 and json.loads(answer.body)["error"]["param"] == "reasoning.effort"
    assert upstream.calls == []


def test_every_dialect_builds_its_body_from_the_translated_request() -> None:
    for cfg in (CFG, TGI, LMI):
        parsed = parse({"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 7, "temperature": 0.5}, cfg)
        body = dialect_named(cfg.dialect).body(
            parsed.request, prompt_template=cfg.prompt_template, stream=False, max_tokens_default=None
        )
        assert "Be brief." in json.dumps(body) and "Hi" in json.dumps(body)


def test_encrypted_reasoning_from_elsewhere_is_refused_by_name() -> None:
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB-openai-blob"}
    assert refusal({"input": [item, {"role": "user", "content": "Hi"}]}).param == "input.0.encrypted_content"


def _nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": _nested(130)}}},
            "text.format.schema",
        ),
        ({"input": "Hi", "tools": [{**TOOL, "parameters": _nested(130)}]}, "tools.0.parameters"),
    ],
)
def test_a_schema_nested_past_the_limit_is_a_400_naming_its_field_before_any_work(
    body: dict[str, Any], param: str
) -> None:
    # It was a 500: pydantic accepted it and then could not serialise the upstream body.
    err = refusal(body)
    assert err.param == param and "nested too deeply" in err.message
    ordinary = {"input": "Hi", "tools": [{**TOOL, "parameters": _nested(20)}]}
    assert parse(ordinary).request.tools  # a deep but ordinary schema still goes through


def test_codexs_defaults_are_accepted_hosted_tools_left_out_and_namespaces_flattened() -> None:
    namespace = {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Agents.",
        "tools": [{"type": "function", "name": "spawn_agent", "description": "Start one.", "parameters": {}}],
    }
    body = {
        "input": "Hi",
        "tools": [TOOL, namespace, {"type": "web_search"}],
        "client_metadata": {"session_id": "s-1"},
        "reasoning": {"summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    parsed = RESPONSES.parse(json.dumps(body).encode(), CFG)
    names = [tool.function.name for tool in parsed.request.tools]
    assert names == [TOOL["name"], "multi_agent_v1__spawn_agent"]
    assert parsed.request.tools[1].function.description == "Agents. Start one."
    assert sorted(parsed.noops) == ["client_metadata", "tools.web_search"]
    assert parsed.headers == {"x-sagestream-unoffered-tools": "web_search"}
    # A call of a namespaced function sent back carries its namespace; the model sees the joined name.
    back = {
        "type": "function_call",
        "call_id": "c1",
        "name": "spawn_agent",
        "namespace": "multi_agent_v1",
        "arguments": "{}",
    }
    again = RESPONSES.parse(
        json.dumps(
            {**body, "input": [back, {"type": "function_call_output", "call_id": "c1", "output": "ok"}]}
        ).encode(),
        CFG,
    )
    assert again.request.messages[0].tool_calls[0].function.name == "multi_agent_v1__spawn_agent"


def test_an_item_type_that_is_no_string_and_an_orphan_output_are_named_in_the_clients_terms() -> None:
    for body, param in (
        ({"input": [{"type": 5}]}, "input.0.type"),
        ({"input": [{"type": "function_call_output", "call_id": "none", "output": "x"}]}, "input.0"),
    ):
        with pytest.raises(APIError) as caught:
            RESPONSES.parse(json.dumps(body).encode(), CFG)
        assert caught.value.status == 400 and caught.value.param == param, caught.value.message
