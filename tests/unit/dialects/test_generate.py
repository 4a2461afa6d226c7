"""The prompt dialects' common ground: templates, greedy decoding, and what a prompt container refuses by name."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sagestream.dialects import DecodeError, dialect_named
from sagestream.errors import APIError
from sagestream.protocols.openai.request import parse_chat
from tests.unit.test_dialects import CALL, IMAGE, TOOL, chat, refused


def test_a_special_token_without_details_yields_nothing() -> None:
    assert dialect_named("tgi").stream_decoder().decode('{"token":{"text":"<s>","special":true}}') == []


@pytest.mark.parametrize("body", [b"", b"\xff", b"[]", b'{"details": {}}', b'[{"generated_text": 3}]'])
def test_malformed_generate_bodies_raise_decode_error(body: bytes) -> None:
    with pytest.raises(DecodeError):
        dialect_named("tgi").decode_body(body)


@pytest.mark.parametrize("dialect", ["tgi", "lmi"])
def test_top_p_zero_is_greedy_too_not_silently_full_sampling(dialect: str) -> None:
    request = parse_chat(chat(temperature=0.8, top_p=0), max_tokens_limit=None)
    params = dialect_named(dialect).body(request, prompt_template="llama3", stream=False, max_tokens_default=None)[
        "parameters"
    ]
    assert params == {"details": True, "do_sample": False}


@pytest.mark.parametrize("dialect", ["tgi", "lmi"])
def test_chat_on_a_prompt_container_needs_a_template(dialect: str) -> None:
    request = parse_chat(chat(), max_tokens_limit=None)
    with pytest.raises(APIError) as info:
        dialect_named(dialect).body(request, prompt_template=None, stream=True, max_tokens_default=None)
    assert (info.value.status, info.value.param, info.value.code) == (400, "messages", "prompt_template_required")
    assert "PROMPT_TEMPLATE" in info.value.message


@pytest.mark.parametrize("fmt", ["tgi", "lmi"])
def test_tools_on_a_prompt_container_say_to_use_a_messages_api_container(fmt: str) -> None:
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
def test_what_a_prompt_container_cannot_carry_is_refused_by_name(fmt: str, fields: dict[str, Any], param: str) -> None:
    err = refused(fmt, chat(**fields))
    assert err.param == param and err.code == "unsupported_parameter"


@pytest.mark.parametrize("fmt", ["tgi", "lmi"])
def test_values_that_ask_for_nothing_pass_a_prompt_container(fmt: str) -> None:
    request = parse_chat(
        chat(store=False, tool_choice="none", response_format={"type": "text"}, n=1), max_tokens_limit=None
    )
    body = dialect_named(fmt).body(request, prompt_template="chatml", stream=True, max_tokens_default=None)
    assert set(body) == {"inputs", "parameters", "stream"}


@pytest.mark.parametrize("fmt", ["tgi", "lmi"])
def test_prompt_cache_key_carried_by_the_call_is_not_refused_nor_put_in_a_generate_body(fmt: str) -> None:
    request = parse_chat(chat(prompt_cache_key="conversation-1"), max_tokens_limit=None)
    assert refused(fmt, chat(prompt_cache_key="conversation-1")).param == "prompt_cache_key"
    carried = frozenset({"prompt_cache_key"})
    body = dialect_named(fmt).body(
        request, prompt_template="chatml", stream=True, max_tokens_default=None, in_call=carried
    )
    assert "conversation-1" not in json.dumps(body)
