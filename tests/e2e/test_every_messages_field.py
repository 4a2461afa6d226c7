"""Every field of the anthropic SDK's ``MessageCreateParams``, per dialect: forwarded, translated or refused by name.

The fields are read from the installed SDK (``MessageCreateParamsBase`` and ``MessageCreateParamsStreaming``),
with the sampling fields the API still takes and LangChain sends (``temperature``, ``top_p``, ``top_k``): a
newer SDK with a field this table does not know fails here until someone decides what the relay does with
it. Each field is sent alone (with what it needs beside it) through the local stack, deployed with
``EXTRA_REQUEST_FIELDS=top_k,thinking_token_budget`` so that the vendor fields have somewhere to go; the
simulated endpoint shows what arrived. A field accepted as a hint (``cache_control``, ``service_tier``) must
leave what the endpoint is sent unchanged: docs/api.md says why it needs nothing sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from anthropic.types import message_create_params

from sagestream_local.stack import SIM_ENDPOINT_NAME
from tests.client import StreamedResponse, request
from tests.e2e.conftest import GetStack
from tests.e2e.test_every_request_field import params
from tests.e2e.test_relay import DIALECT_ENV

Evidence = Callable[[dict[str, Any]], bool]  # what the endpoint received
REFUSE = "refuse"  # 400 invalid_request_error, the message naming the field; nothing reaches the endpoint
HINT = "hint"  # accepted; the endpoint is sent exactly what it is sent without the field
WIRE_ONLY = ("temperature", "top_p", "top_k")  # taken by the API, not in this SDK's types
ENV = {"EXTRA_REQUEST_FIELDS": "top_k,thinking_token_budget"}

TOOL = {"name": "f", "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}}
BASE = {"model": SIM_ENDPOINT_NAME, "max_tokens": 32, "messages": [{"role": "user", "content": "Tell me about rivers"}]}
SAMPLES: dict[str, dict[str, Any]] = {
    "max_tokens": {"max_tokens": 5},
    "messages": {"messages": BASE["messages"]},
    "model": {"model": SIM_ENDPOINT_NAME},
    "cache_control": {"cache_control": {"type": "ephemeral", "ttl": "5m"}},
    "container": {"container": "container_1"},
    "diagnostics": {"diagnostics": {"previous_message_id": "msg_1"}},
    "inference_geo": {"inference_geo": "us"},
    "metadata": {"metadata": {"user_id": "user-1"}},
    "output_config": {"output_config": {"effort": "low"}},
    "service_tier": {"service_tier": "standard_only"},
    "speed": {"speed": "fast"},
    "stop_sequences": {"stop_sequences": ["\n\n"]},
    "stream": {"stream": True},
    "system": {"system": "Be brief."},
    "thinking": {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048},
    "tool_choice": {"tool_choice": {"type": "auto"}},
    "tools": {"tools": [TOOL]},
    "user_profile_id": {"user_profile_id": "profile-1"},
    "workspace_id": {"workspace_id": "wrkspc_1"},
    "temperature": {"temperature": 0.5},
    "top_p": {"top_p": 0.5},
    "top_k": {"top_k": 5},
}

# In every dialect.
_COMMON: dict[str, Evidence | str] = {
    "model": lambda sent: "model" not in sent,  # chooses the model (MODEL_ID, MODELS), not sent
    "cache_control": HINT,  # vLLM and SGLang cache prefixes on their own
    "service_tier": HINT,  # one tier
    "container": REFUSE,
    "diagnostics": REFUSE,
    "inference_geo": REFUSE,
    "speed": REFUSE,  # "fast"; "standard" is a hint
    "user_profile_id": REFUSE,
    "workspace_id": REFUSE,
    "stream": lambda sent: sent["stream"] is True,
}
OPENAI: dict[str, Evidence | str] = {
    **_COMMON,
    "max_tokens": lambda sent: sent["max_tokens"] == 5,
    "messages": lambda sent: sent["messages"] == BASE["messages"],
    "metadata": lambda sent: sent["user"] == "user-1",
    "output_config": lambda sent: sent["reasoning_effort"] == "low",
    "stop_sequences": lambda sent: sent["stop"] == ["\n\n"],
    "system": lambda sent: sent["messages"][0] == {"role": "system", "content": "Be brief."},
    "thinking": lambda sent: sent["thinking_token_budget"] == 1024,
    "tool_choice": lambda sent: sent["tool_choice"] == "auto",
    "tools": lambda sent: (
        sent["tools"] == [{"type": "function", "function": {"name": "f", "parameters": TOOL["input_schema"]}}]
    ),
    "temperature": lambda sent: sent["temperature"] == 0.5,
    "top_p": lambda sent: sent["top_p"] == 0.5,
    "top_k": lambda sent: sent["top_k"] == 5,
}
PROMPT: dict[str, Evidence | str] = {
    **_COMMON,
    "max_tokens": lambda sent: params(sent)["max_new_tokens"] == 5,
    "messages": lambda sent: "Tell me about rivers" in sent["inputs"],
    "system": lambda sent: "Be brief." in sent["inputs"],
    "temperature": lambda sent: params(sent)["temperature"] == 0.5,
    "top_p": lambda sent: params(sent)["top_p"] == 0.5,
    "top_k": lambda sent: params(sent)["top_k"] == 5,
    # The generate parameters have no user, effort, tools or reasoning switch. A caller id and an effort hint
    # cannot change what a prompt container generates: documented no-ops, counted in the log record.
    "metadata": HINT,
    "output_config": HINT,
    "thinking": REFUSE,
    "tool_choice": REFUSE,
    "tools": REFUSE,
}
EXPECTED: dict[str, dict[str, Evidence | str]] = {
    "openai": OPENAI,
    "tgi": {**PROMPT, "stop_sequences": lambda sent: params(sent)["stop"] == ["\n\n"]},
    "lmi": {**PROMPT, "stop_sequences": lambda sent: params(sent)["stop_sequences"] == ["\n\n"]},
}


def sdk_fields() -> list[str]:
    fields = set(message_create_params.MessageCreateParamsBase.__annotations__)
    return sorted(fields | set(message_create_params.MessageCreateParamsStreaming.__annotations__) | set(WIRE_ONLY))


def test_every_sdk_field_has_a_sample_and_an_outcome_per_dialect() -> None:
    assert sorted(SAMPLES) == sdk_fields()
    for table in EXPECTED.values():
        assert sorted(table) == sdk_fields()


def ended_normally(resp: StreamedResponse) -> bool:
    return resp.status == 200 and resp.data_events()[-1] == {"type": "message_stop"}


@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_every_field_is_forwarded_translated_or_refused_by_name(stack_for: GetStack, dialect: str) -> None:
    stack = stack_for(**DIALECT_ENV[dialect], **ENV)
    assert stack.endpoint is not None
    base = {**BASE, "stream": True}
    baseline = request(stack.url, "POST", "/v1/messages", base)
    assert ended_normally(baseline), baseline.body
    baseline_sent = json.loads(stack.endpoint.records[-1].body)
    outcomes: dict[str, str] = {}
    for field in sdk_fields():
        stack.endpoint.clear_records()
        resp = request(stack.url, "POST", "/v1/messages", {**base, **SAMPLES[field]})
        want = EXPECTED[dialect][field]
        if want == REFUSE:
            assert resp.status == 400, (field, resp.body)
            body = resp.json()
            assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", (field, body)
            assert field in body["error"]["message"], (field, body)
            assert stack.endpoint.records == [], f"{field}: a refused request must not reach the endpoint"
            outcomes[field] = "refused"
            continue
        assert ended_normally(resp), (field, resp.body)
        (record,) = stack.endpoint.records
        sent = json.loads(record.body)
        if want == HINT:
            assert sent == baseline_sent, field
            outcomes[field] = "accepted as a hint"
        else:
            assert callable(want)
            assert want(sent), (field, sent)
            outcomes[field] = "forwarded or translated"
    assert set(outcomes) == set(sdk_fields())
