"""Every field of the openai SDK's request types, per dialect: forwarded, translated or refused by name.

The fields are read from the installed SDK (``CompletionCreateParamsBase`` of chat and of completions), so a
newer SDK with a field this table does not know fails here until someone decides what the relay does with
it. Each field is sent alone (with what it needs beside it) through the local stack; the simulated endpoint
shows what arrived. Nothing may be dropped: a 200 must come with evidence that the field did something.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import pytest
from openai.types import completion_create_params
from openai.types.chat import completion_create_params as chat_create_params

from sagestream_local.endpoint import Record
from sagestream_local.stack import SIM_ENDPOINT_NAME
from tests.client import StreamedResponse, request
from tests.e2e.conftest import GetStack
from tests.e2e.test_relay import DIALECT_ENV

Kind = Literal["chat", "completion"]
# What the endpoint received, and what the client got back.
Evidence = Callable[[dict[str, Any], StreamedResponse], bool]
FORWARD = "forward"  # the openai dialect: the same name and value arrive
REFUSE = "refuse"  # 400 invalid_request_error with param = the field


def params(sent: dict[str, Any]) -> dict[str, Any]:
    parameters = sent.get("parameters")
    assert isinstance(parameters, dict)
    return parameters


def chunks(resp: StreamedResponse) -> list[dict[str, Any]]:
    return [e for e in resp.data_events() if isinstance(e, dict)]


def has_logprobs(resp: StreamedResponse) -> bool:
    return any(c["choices"] and c["choices"][0].get("logprobs") for c in chunks(resp))


def has_usage(resp: StreamedResponse) -> bool:
    return any(c.get("usage") and c["usage"].get("completion_tokens") for c in chunks(resp))


# A value for each field that asks for something (a default would prove nothing), with any field it needs.
CHAT_SAMPLES: dict[str, dict[str, Any]] = {
    "messages": {"messages": [{"role": "user", "content": "Tell me about rivers"}]},
    "model": {"model": SIM_ENDPOINT_NAME},
    "audio": {"audio": {"voice": "alloy", "format": "wav"}},
    "frequency_penalty": {"frequency_penalty": 0.5},
    "function_call": {"function_call": "auto"},
    "functions": {"functions": [{"name": "f", "parameters": {"type": "object"}}]},
    "logit_bias": {"logit_bias": {"50256": -100}},
    "logprobs": {"logprobs": True},
    "max_completion_tokens": {"max_completion_tokens": 5},
    "max_tokens": {"max_tokens": 5},
    "metadata": {"metadata": {"team": "rivers"}},
    "modalities": {"modalities": ["text", "audio"]},
    "moderation": {"moderation": {"model": "omni-moderation-latest"}},
    "n": {"n": 2},
    "parallel_tool_calls": {"parallel_tool_calls": False},
    "prediction": {"prediction": {"type": "content", "content": "Rivers run"}},
    "presence_penalty": {"presence_penalty": 0.5},
    "prompt_cache_key": {"prompt_cache_key": "rivers"},
    "prompt_cache_options": {"prompt_cache_options": {"mode": "implicit"}},
    "prompt_cache_retention": {"prompt_cache_retention": "24h"},
    "reasoning_effort": {"reasoning_effort": "low"},
    "response_format": {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "River", "schema": {"type": "object", "properties": {"name": {"type": "string"}}}},
        }
    },
    "safety_identifier": {"safety_identifier": "user-1"},
    "seed": {"seed": 7},
    "service_tier": {"service_tier": "flex"},
    "stop": {"stop": ["\n\n"]},
    "store": {"store": True},
    "stream": {"stream": True},
    "stream_options": {"stream_options": {"include_usage": True}},
    "temperature": {"temperature": 0.5},
    "tool_choice": {"tool_choice": "auto"},
    "tools": {"tools": [{"type": "function", "function": {"name": "f"}}]},
    "top_logprobs": {"top_logprobs": 2, "logprobs": True},
    "top_p": {"top_p": 0.5},
    "user": {"user": "user-1"},
    "verbosity": {"verbosity": "low"},
    "web_search_options": {"web_search_options": {"search_context_size": "low"}},
}

COMPLETION_SAMPLES: dict[str, dict[str, Any]] = {
    "prompt": {"prompt": "Once upon a time"},
    "model": {"model": SIM_ENDPOINT_NAME},
    "best_of": {"best_of": 2},
    "echo": {"echo": True},
    "frequency_penalty": {"frequency_penalty": 0.5},
    "logit_bias": {"logit_bias": {"50256": -100}},
    "logprobs": {"logprobs": 2},
    "max_tokens": {"max_tokens": 5},
    "n": {"n": 2},
    "presence_penalty": {"presence_penalty": 0.5},
    "seed": {"seed": 7},
    "stop": {"stop": ["\n\n"]},
    "stream": {"stream": True},
    "stream_options": {"stream_options": {"include_usage": True}},
    "suffix": {"suffix": "The end."},
    "temperature": {"temperature": 0.5},
    "top_p": {"top_p": 0.5},
    "user": {"user": "user-1"},
}

# Where a translated field shows, for the prompt dialects (tgi: TGI generate; lmi: LMI rolling batch).
_SHARED: dict[str, Evidence | str] = {
    "messages": lambda sent, _: "Tell me about rivers" in sent["inputs"],
    "prompt": lambda sent, _: sent["inputs"] == "Once upon a time",
    "model": lambda sent, _: "model" not in sent,  # checked against MODEL_ID (a wrong one is a 404), not sent
    "frequency_penalty": lambda sent, _: params(sent)["frequency_penalty"] == 0.5,
    "max_completion_tokens": lambda sent, _: params(sent)["max_new_tokens"] == 5,
    "max_tokens": lambda sent, _: params(sent)["max_new_tokens"] == 5,
    "seed": lambda sent, _: params(sent)["seed"] == 7,
    "stream": lambda sent, _: sent["stream"] is True,
    "stream_options": lambda _, resp: has_usage(resp),  # from the token count in details
    "temperature": lambda sent, _: params(sent)["temperature"] == 0.5,
    "top_p": lambda sent, _: params(sent)["top_p"] == 0.5,
    "n": REFUSE,  # one choice per answer, in every dialect
}
PROMPT_DIALECTS: dict[str, dict[str, Evidence | str]] = {
    "tgi": {
        **_SHARED,
        "stop": lambda sent, _: params(sent)["stop"] == ["\n\n"],
        "logprobs": lambda _, resp: has_logprobs(resp),  # from each token's logprob
        "top_logprobs": lambda sent, resp: params(sent)["top_n_tokens"] == 2 and has_logprobs(resp),
        "response_format": lambda sent, _: params(sent)["grammar"]["type"] == "json",
    },
    "lmi": {
        **_SHARED,
        "stop": lambda sent, _: params(sent)["stop_sequences"] == ["\n\n"],
        "presence_penalty": lambda sent, _: params(sent)["presence_penalty"] == 0.5,
        "logprobs": lambda _, resp: has_logprobs(resp),
    },
}
# The completions logprobs field is a count: with one, TGI sends top tokens; LMI cannot.
COMPLETION_OVERRIDES: dict[str, dict[str, Evidence | str]] = {
    "tgi": {"logprobs": lambda sent, resp: params(sent)["top_n_tokens"] == 2 and has_logprobs(resp)},
    "lmi": {"logprobs": REFUSE},
}


def expected(dialect: str, kind: Kind, field: str) -> Evidence | str:
    if dialect == "openai":
        special: dict[str, Evidence | str] = {
            "model": _SHARED["model"],
            "n": REFUSE,
            # The name every OpenAI-compatible server knows.
            "max_completion_tokens": lambda sent, _: sent["max_tokens"] == 5 and "max_completion_tokens" not in sent,
            "prompt": lambda sent, _: sent["prompt"] == "Once upon a time",
        }
        return special.get(field, FORWARD)
    table = {**PROMPT_DIALECTS[dialect], **(COMPLETION_OVERRIDES[dialect] if kind == "completion" else {})}
    return table.get(field, REFUSE)


def sdk_fields(kind: Kind) -> list[str]:
    module = chat_create_params if kind == "chat" else completion_create_params
    fields = set(module.CompletionCreateParamsBase.__annotations__)
    return sorted(fields | set(module.CompletionCreateParamsStreaming.__annotations__))


def test_every_sdk_field_has_a_sample() -> None:
    assert sorted(CHAT_SAMPLES) == sdk_fields("chat")
    assert sorted(COMPLETION_SAMPLES) == sdk_fields("completion")


@pytest.mark.parametrize("kind", ["chat", "completion"])
@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_every_field_is_forwarded_translated_or_refused_by_name(stack_for: GetStack, dialect: str, kind: Kind) -> None:
    stack = stack_for(**DIALECT_ENV[dialect])
    assert stack.endpoint is not None
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    samples = CHAT_SAMPLES if kind == "chat" else COMPLETION_SAMPLES
    base = {**samples["messages" if kind == "chat" else "prompt"], "stream": True}
    outcomes: dict[str, str] = {}
    for field in sdk_fields(kind):
        stack.endpoint.clear_records()
        body = {**base, **samples[field]}
        resp = request(stack.url, "POST", path, body)
        want = expected(dialect, kind, field)
        records: list[Record] = stack.endpoint.records
        if want == REFUSE:
            assert resp.status == 400, (field, resp.body)
            error = resp.json()["error"]
            assert error["param"] == field and field in error["message"], (field, error)
            assert records == [], f"{field}: a refused request must not reach the endpoint"
            outcomes[field] = "refused"
            continue
        assert resp.status == 200, (field, resp.body)
        assert resp.data_events()[-1] == "[DONE]", field
        (record,) = records
        sent = json.loads(record.body)
        if want == FORWARD:
            for name, value in samples[field].items():
                assert sent.get(name) == value, (field, name, sent)
            outcomes[field] = "forwarded"
        else:
            assert callable(want)
            assert want(sent, resp), (field, sent)
            outcomes[field] = "translated"
    assert set(outcomes) == set(sdk_fields(kind))
