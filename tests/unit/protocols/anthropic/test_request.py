"""The Anthropic Messages request: each field translated into the chat request the dialects speak, or refused by
the name the client sent it under."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sagestream.config import Config
from sagestream.dialects import dialect_named
from sagestream.errors import APIError
from sagestream.protocols.anthropic import MESSAGES

CFG = Config(endpoint_name="llm", model_id="m")
ASK = [{"role": "user", "content": "Weather in Paris?"}]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def parse(cfg: Config = CFG, **fields: Any) -> Any:
    return MESSAGES.parse(json.dumps({"model": "m", "max_tokens": 64, "messages": ASK, **fields}).encode(), cfg)


def chat_body(cfg: Config = CFG, **fields: Any) -> dict[str, Any]:
    """What the container is sent for the request, as the app builds it."""
    parsed = parse(cfg, **fields)
    try:
        return dialect_named(cfg.dialect).body(
            parsed.request, prompt_template=cfg.prompt_template, stream=False, max_tokens_default=None
        )
    except APIError as err:
        raise parsed.in_client_terms(err) from None


def refusal(cfg: Config = CFG, **fields: Any) -> APIError:
    with pytest.raises(APIError) as caught:
        chat_body(cfg, **fields)
    assert caught.value.status == 400
    return caught.value


# --- the request --------------------------------------------------------------------------------------------


def test_system_blocks_and_a_tool_round_trip_become_the_chat_conversation() -> None:
    history = [
        {"role": "user", "content": [{"type": "text", "text": "Weather?", "cache_control": {"type": "ephemeral"}}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "They want Paris.", "signature": "sig"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    body = chat_body(system=[{"type": "text", "text": "Be brief."}], messages=history, tools=[WEATHER])
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
            "reasoning_content": "They want Paris.",
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": WEATHER["input_schema"],
                "description": WEATHER["description"],
            },
        }
    ]


def test_a_failed_tool_says_so_in_the_tool_message_and_images_go_as_image_parts() -> None:
    messages = [
        {"role": "user", "content": "Look"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": "no such city", "is_error": True},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            ],
        },
    ]
    sent = chat_body(messages=messages)["messages"]
    assert sent[2] == {"role": "tool", "tool_call_id": "t", "content": "Error: no such city"}
    assert sent[3]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]


@pytest.mark.parametrize(
    ("choice", "chat_choice"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "tool", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
        ({"type": "none"}, "none"),
    ],
)
def test_tool_choice_is_the_chat_tool_choice(choice: dict[str, Any], chat_choice: Any) -> None:
    body = chat_body(tools=[WEATHER], tool_choice=choice)
    assert body["tool_choice"] == chat_choice
    assert "parallel_tool_calls" not in body
    single = {**choice, "disable_parallel_tool_use": True}
    if choice["type"] == "none":  # no such field on "none", as in the SDK
        assert refusal(tools=[WEATHER], tool_choice=single).param == "tool_choice.disable_parallel_tool_use"
    else:
        assert chat_body(tools=[WEATHER], tool_choice=single)["parallel_tool_calls"] is False


def test_the_top_level_fields_are_translated_to_their_chat_names() -> None:
    body = chat_body(
        stop_sequences=["\n\nHuman:"],
        temperature=0.3,
        top_p=0.9,
        metadata={"user_id": "u-1"},
        output_config={"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}},
    )
    assert body["stop"] == ["\n\nHuman:"] and body["temperature"] == 0.3 and body["top_p"] == 0.9
    assert body["user"] == "u-1" and body["reasoning_effort"] == "low"
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": {"type": "object"}, "strict": True},
    }
    # The stream asks for usage: message_delta reports it.
    assert parse(stream=True).request.include_usage


def test_hints_the_container_follows_on_its_own_send_nothing() -> None:
    plain = chat_body()
    hinted = chat_body(
        cache_control={"type": "ephemeral"},
        service_tier="standard_only",
        speed="standard",
        thinking={"type": "adaptive"},
    )
    assert hinted == plain
    assert chat_body(thinking={"type": "disabled"}) == plain


def test_top_k_and_thinking_reach_the_container_only_where_the_deployment_allows_their_field() -> None:
    assert "top_k" in refusal(top_k=5).message
    assert refusal(max_tokens=8192, thinking={"type": "enabled", "budget_tokens": 2048}).param == "thinking"
    allowed = Config(
        endpoint_name="llm", model_id="m", extra_request_fields=frozenset({"top_k", "thinking_token_budget"})
    )
    body = chat_body(allowed, max_tokens=8192, top_k=5, thinking={"type": "enabled", "budget_tokens": 2048})
    assert body["top_k"] == 5 and body["thinking_token_budget"] == 2048
    # Anthropic's own rule: the budget is part of max_tokens.
    assert refusal(allowed, thinking={"type": "enabled", "budget_tokens": 4096}).param == "thinking.budget_tokens"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
        ({"messages": [*ASK, {"role": "assistant", "content": "The weather is"}]}, "messages.1"),
        ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "messages.0.content.0"),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
            "messages.0.content.0",
        ),
        ({"messages": [{"role": "user", "content": []}]}, "messages.0.content"),
        ({"container": "c-1"}, "container"),
        ({"inference_geo": "us"}, "inference_geo"),
        ({"speed": "fast"}, "speed"),
        ({"frequency_penalty": 1}, "frequency_penalty"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"temperature": 1.5}, "temperature"),
    ],
)
def test_what_cannot_be_carried_is_refused_by_its_anthropic_name(fields: dict[str, Any], param: str) -> None:
    err = refusal(**fields)
    assert err.param == param and param in err.message


def test_a_missing_max_tokens_is_refused_as_anthropic_refuses_it() -> None:
    with pytest.raises(APIError) as caught:
        MESSAGES.parse(json.dumps({"model": "m", "messages": ASK}).encode(), CFG)
    assert caught.value.param == "max_tokens" and "max_tokens: Field required" in caught.value.message


def test_a_dialects_refusal_names_the_field_the_client_sent() -> None:
    tgi = Config(endpoint_name="llm", model_id="m", dialect="tgi", prompt_template="chatml")
    history = [*ASK, {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]
    history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]})
    assert refusal(tgi, messages=history).param == "messages.1.content.0"
    assert refusal(tgi, stop_sequences=["a", "b", "c", "d", "e"]).param == "stop_sequences"
    err = refusal(tgi, temperature=0.5, top_k=3)
    assert err.param == "top_k"


def test_what_cannot_change_the_answer_is_a_counted_no_op_on_every_dialect() -> None:
    tgi = Config(endpoint_name="llm", model_id="m", dialect="tgi", prompt_template="chatml")
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    fields = {"system": system, "metadata": {"user_id": '{"session": "s-1"}'}, "output_config": {"effort": "high"}}
    parsed = parse(tgi, **fields)
    assert sorted(parsed.noops) == ["cache_control", "metadata.user_id", "output_config.effort"]
    assert "user" not in chat_body(tgi, **fields)  # a prompt container has no place for it
    parsed = parse(CFG, metadata={"user_id": "u"}, output_config={"effort": "max"})
    assert (parsed.request.user, parsed.request.reasoning_effort, parsed.noops) == ("u", "max", ())


def test_max_tokens_past_the_deployments_limit_is_capped_and_noted() -> None:
    # Claude Code asks for 32000; Anthropic's max_tokens is a ceiling the model may stop before.
    limited = Config(endpoint_name="llm", model_id="m", max_tokens_limit=32)
    parsed = parse(limited, max_tokens=32000)
    assert parsed.request.max_tokens == 32 and parsed.noops == ("max_tokens.capped",)


def test_clear_thinking_removes_older_turns_thinking_and_other_edits_are_refused_by_name() -> None:
    def turn(thought: str) -> dict[str, Any]:
        thinking = {"type": "thinking", "thinking": thought, "signature": "s"}
        return {"role": "assistant", "content": [thinking, {"type": "text", "text": "ok"}]}

    history = [*ASK, turn("one"), {"role": "user", "content": "and?"}, turn("two"), {"role": "user", "content": "so?"}]

    def thoughts(**fields: Any) -> list[str]:
        messages = chat_body(CFG, messages=history, **fields)["messages"]
        return [m["reasoning_content"] for m in messages if m.get("reasoning_content")]

    assert thoughts() == ["one", "two"]
    assert thoughts(context_management={"edits": [{"type": "clear_thinking_20251015"}]}) == ["two"]  # keep: 1
    keep_all = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    assert thoughts(context_management=keep_all) == ["one", "two"]
    keep_none = {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}}]}
    assert thoughts(context_management=keep_none) == []
    tools = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    with pytest.raises(APIError) as caught:
        parse(CFG, messages=history, context_management=tools)
    assert caught.value.param == "context_management.edits.0"


def test_claude_codes_thinking_and_deferred_tools_are_accepted() -> None:
    deferred = {**WEATHER, "defer_loading": True}
    parsed = parse(CFG, thinking={"type": "adaptive", "display": "updates"}, tools=[deferred])
    assert sorted(parsed.noops) == ["thinking.display", "thinking.type", "tools.defer_loading"]
    assert chat_body(CFG, tools=[deferred])["tools"][0]["function"]["name"] == "get_weather"  # offered all the same


def test_the_request_models_load_on_the_first_messages_request_not_at_init() -> None:
    """A cold start that serves only OpenAI clients does not pay for them (20-40 ms of model classes)."""
    import os
    import subprocess
    import sys

    code = "import sys, sagestream.app; print('sagestream.protocols.anthropic.request' in sys.modules)"
    env = {**os.environ, "SAGEMAKER_ENDPOINT_NAME": "unit-llm", "AWS_DEFAULT_REGION": "us-east-1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    parse()  # and the first request loads them
    assert "sagestream.protocols.anthropic.request" in sys.modules


def test_an_empty_stop_sequence_is_refused_as_anthropic_refuses_it() -> None:
    # Every text ends with "": carried, it would stop the container at once (vLLM, TGI match it anywhere) and
    # turn every natural end into stop_reason "stop_sequence" with stop_sequence "".
    err = refusal(stop_sequences=["END", ""])
    assert err.param == "stop_sequences.1" and "non-empty" in err.message
    assert chat_body(stop_sequences=["\n", "END"])["stop"] == ["\n", "END"]


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": [{"role": "user", "content": "lone \ud800"}]}, None),
        ({"system": "lone \udfff"}, None),
        ({"metadata": {"user_id": "\ud800"}}, None),
        (
            {
                "messages": [
                    *ASK,
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"x": float("nan")}}],
                    },
                ]
            },
            None,
        ),
        (
            {
                "messages": [
                    *ASK,
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": deep(6000)}],
                    },
                ]
            },
            "messages.1.content.0.input",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "none", "content": "x"}]}
                ]
            },
            "messages.0.content.0",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "url", "url": "https://x", "extra": 1}}],
                    }
                ]
            },
            "messages.0.content.0.source.extra",
        ),
        ({"tools": [{"type": 5, "name": "f", "input_schema": {}}]}, "tools.0.type"),
    ],
    ids=[
        "surrogate-content",
        "surrogate-system",
        "surrogate-user-id",
        "nan-input",
        "deep-input",
        "orphan-result",
        "source-key",
        "tool-type",
    ],
)
def test_a_bad_body_is_a_400_naming_the_field_never_a_500(fields: dict[str, Any], param: str | None) -> None:
    """Issue 32's probe: the Messages route read its body with a reader of its own (500s, or NaN and 6,000 levels
    forwarded), and named some fields wrongly."""
    create = json.dumps({"model": "m", "max_tokens": 64, "messages": ASK, **fields}).encode()
    count = json.dumps({"model": "m", "messages": ASK, **fields}).encode()
    for parse_body, body in ((MESSAGES.parse, create), (MESSAGES.count_request, count)):
        with pytest.raises(APIError) as caught:
            parse_body(body, CFG)
        assert caught.value.status == 400 and caught.value.param == param, caught.value.message
