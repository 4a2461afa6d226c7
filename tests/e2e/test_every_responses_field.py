"""Every field of the openai SDK's ``ResponseCreateParams``, per dialect: forwarded, translated or refused by name.

The fields are read from the installed SDK (``openai.types.responses.response_create_params``), so a newer
SDK with a field this table does not know fails here until someone decides what ``/v1/responses`` does with
it. Each field is sent alone (with ``input``) through the local stack, streamed; the simulated endpoint shows
what arrived and the events show what came back. Nothing may be dropped: a 200 comes with evidence that the
field did something, a refusal names the field (or the part of it at fault) and never reaches the endpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from openai.types.responses import response_create_params

from sagestream_local.stack import SIM_ENDPOINT_NAME
from tests.client import StreamedResponse, request
from tests.e2e.conftest import GetStack
from tests.e2e.test_relay import DIALECT_ENV

# What the endpoint received, and what the client got back.
Evidence = Callable[[dict[str, Any], StreamedResponse], bool]
REFUSE = "refuse"


def events(resp: StreamedResponse) -> list[dict[str, Any]]:
    return [e for e in resp.data_events() if isinstance(e, dict)]


def final(resp: StreamedResponse) -> dict[str, Any]:
    last = events(resp)[-1]
    assert last["type"] in ("response.completed", "response.incomplete"), last
    response: dict[str, Any] = last["response"]
    return response


def has_logprobs(resp: StreamedResponse) -> bool:
    return any(e["type"] == "response.output_text.delta" and e.get("logprobs") for e in events(resp))


def params(sent: dict[str, Any]) -> dict[str, Any]:
    parameters: dict[str, Any] = sent["parameters"]
    return parameters


RIVER = {"type": "object", "properties": {"name": {"type": "string"}}}
SAMPLES: dict[str, dict[str, Any]] = {
    "input": {"input": "Tell me about rivers"},
    "model": {"model": SIM_ENDPOINT_NAME},
    "access_programs": {"access_programs": {"cyber": "standard"}},
    "background": {"background": True},
    "context_management": {"context_management": [{"type": "compaction", "compact_threshold": 1000}]},
    "conversation": {"conversation": "conv_123"},
    "image": {"image": {"context_compression": "auto"}},
    "include": {"include": ["message.output_text.logprobs"]},
    "instructions": {"instructions": "Answer like a geographer."},
    "max_output_tokens": {"max_output_tokens": 5},
    "max_tool_calls": {"max_tool_calls": 3},
    "metadata": {"metadata": {"team": "rivers"}},
    "moderation": {"moderation": {"model": "omni-moderation-latest"}},
    "parallel_tool_calls": {"parallel_tool_calls": False},
    "previous_response_id": {"previous_response_id": "resp_123"},
    "prompt": {"prompt": {"id": "pmpt_123"}},
    "prompt_cache_key": {"prompt_cache_key": "rivers"},
    "prompt_cache_options": {"prompt_cache_options": {"mode": "implicit"}},
    "prompt_cache_retention": {"prompt_cache_retention": "24h"},
    "reasoning": {"reasoning": {"effort": "low"}},
    "safety_identifier": {"safety_identifier": "user-1"},
    "service_tier": {"service_tier": "flex"},
    "store": {"store": True},
    "stream": {"stream": True},
    "stream_options": {"stream_options": {"include_obfuscation": True}},
    "temperature": {"temperature": 0.5},
    "text": {"text": {"format": {"type": "json_schema", "name": "River", "schema": RIVER}}},
    "tool_choice": {"tool_choice": "auto"},
    "tools": {"tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]},
    "top_logprobs": {"top_logprobs": 2},
    "top_p": {"top_p": 0.5},
    "truncation": {"truncation": "auto"},
    "user": {"user": "user-1"},
}


def forwarded(name: str, value: Any) -> Evidence:
    return lambda sent, _: sent.get(name) == value


# The same outcome on every dialect: the state the server does not keep, OpenAI-platform features, and what
# the function answers itself.
EVERYWHERE: dict[str, Evidence | str] = {
    "input": lambda sent, _: "Tell me about rivers" in json.dumps(sent),
    "model": lambda sent, resp: "model" not in sent and final(resp)["model"] == SIM_ENDPOINT_NAME,
    "access_programs": REFUSE,
    "background": REFUSE,
    "context_management": REFUSE,
    "conversation": REFUSE,
    "image": REFUSE,
    "max_tool_calls": REFUSE,
    "previous_response_id": REFUSE,
    "prompt": REFUSE,
    "truncation": REFUSE,
    "stream_options": REFUSE,  # include_obfuscation: no padding field is added
    # Echoed in the response object, not the container's business.
    "metadata": lambda sent, resp: "metadata" not in sent and final(resp)["metadata"] == {"team": "rivers"},
    # Nothing is stored, and the response says so.
    "store": lambda sent, resp: "store" not in sent and final(resp)["store"] is False,
    "instructions": lambda sent, _: "Answer like a geographer." in json.dumps(sent),
}
OPENAI: dict[str, Evidence | str] = {
    "include": lambda sent, resp: sent["logprobs"] is True and has_logprobs(resp),
    "max_output_tokens": lambda sent, _: sent["max_tokens"] == 5,
    "moderation": forwarded("moderation", {"model": "omni-moderation-latest"}),
    "parallel_tool_calls": forwarded("parallel_tool_calls", False),
    "prompt_cache_key": forwarded("prompt_cache_key", "rivers"),
    "prompt_cache_options": forwarded("prompt_cache_options", {"mode": "implicit"}),
    "prompt_cache_retention": forwarded("prompt_cache_retention", "24h"),
    "reasoning": forwarded("reasoning_effort", "low"),
    "safety_identifier": forwarded("safety_identifier", "user-1"),
    "service_tier": forwarded("service_tier", "flex"),
    "stream": lambda sent, resp: sent["stream"] is True and sent["stream_options"] == {"include_usage": True},
    "temperature": forwarded("temperature", 0.5),
    "text": lambda sent, _: (
        sent["response_format"] == {"type": "json_schema", "json_schema": {"name": "River", "schema": RIVER}}
    ),
    "tool_choice": forwarded("tool_choice", "auto"),
    "tools": forwarded("tools", [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]),
    "top_logprobs": lambda sent, resp: sent["top_logprobs"] == 2 and sent["logprobs"] is True and has_logprobs(resp),
    "top_p": forwarded("top_p", 0.5),
    "user": forwarded("user", "user-1"),
}
_PROMPT: dict[str, Evidence | str] = {
    "include": lambda _, resp: has_logprobs(resp),  # from each token's logprob
    "max_output_tokens": lambda sent, _: params(sent)["max_new_tokens"] == 5,
    "stream": lambda sent, resp: sent["stream"] is True and final(resp)["usage"]["output_tokens"] > 0,
    "temperature": lambda sent, _: params(sent)["temperature"] == 0.5,
    "top_p": lambda sent, _: params(sent)["top_p"] == 0.5,
}
PROMPT_DIALECTS: dict[str, dict[str, Evidence | str]] = {
    "tgi": {
        **_PROMPT,
        "text": lambda sent, _: params(sent)["grammar"] == {"type": "json", "value": RIVER},
        "top_logprobs": lambda sent, resp: params(sent)["top_n_tokens"] == 2 and has_logprobs(resp),
    },
    "lmi": _PROMPT,
}


def expected(dialect: str, field: str) -> Evidence | str:
    if field in EVERYWHERE:
        return EVERYWHERE[field]
    if dialect == "openai":
        return OPENAI[field]
    return PROMPT_DIALECTS[dialect].get(field, REFUSE)


def sdk_fields() -> list[str]:
    fields = set(response_create_params.ResponseCreateParamsBase.__annotations__)
    return sorted(fields | set(response_create_params.ResponseCreateParamsStreaming.__annotations__))


def test_every_sdk_field_has_a_sample_and_an_outcome_on_the_openai_dialect() -> None:
    assert sorted(SAMPLES) == sdk_fields()
    assert sorted({*EVERYWHERE, *OPENAI}) == sdk_fields()


@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_every_responses_field_is_forwarded_translated_or_refused_by_name(stack_for: GetStack, dialect: str) -> None:
    stack = stack_for(**DIALECT_ENV[dialect])
    assert stack.endpoint is not None
    outcomes: dict[str, str] = {}
    for field in sdk_fields():
        stack.endpoint.clear_records()
        body = {**SAMPLES["input"], "stream": True, **SAMPLES[field]}
        resp = request(stack.url, "POST", "/v1/responses", body)
        want = expected(dialect, field)
        if want == REFUSE:
            assert resp.status == 400, (field, resp.body)
            error = resp.json()["error"]
            assert error["param"].split(".")[0] == field and error["param"] in error["message"], (field, error)
            assert stack.endpoint.records == [], f"{field}: a refused request must not reach the endpoint"
            outcomes[field] = "refused"
            continue
        assert resp.status == 200, (field, resp.body)
        (record,) = stack.endpoint.records
        sent = json.loads(record.body)
        assert callable(want)
        assert want(sent, resp), (field, sent, events(resp)[-1])
        outcomes[field] = "translated"
    assert set(outcomes) == set(sdk_fields())
