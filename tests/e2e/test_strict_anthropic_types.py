"""Every Messages event and whole message, on every dialect, validates *strictly* against the anthropic SDK's
own types: the SDK builds its objects leniently, so a null where its types declare an integer (message_start's
``input_tokens``) passed its tests and failed the Vercel provider's zod schemas on every stream."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent

from tests.client import request
from tests.e2e.conftest import GetStack
from tests.e2e.test_relay import DIALECT_ENV

EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)
ASK = {"max_tokens": 8, "messages": [{"role": "user", "content": "Tell me about rivers"}]}
WEATHER = {
    "name": "get_weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_every_event_and_message_validates_strictly(stack_for: GetStack, dialect: str) -> None:
    stack = stack_for(**DIALECT_ENV[dialect])
    resp = request(stack.url, "POST", "/v1/messages", {**ASK, "stream": True})
    assert resp.status == 200, resp.body
    events = [EVENT.validate_python(e, strict=True) for e in resp.data_events()]
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    whole = request(stack.url, "POST", "/v1/messages", ASK)
    message = Message.model_validate(whole.json(), strict=True)
    # LMI's whole answer is its generated_text alone: it says not why it stopped, and the message says end_turn.
    assert message.stop_reason == ("end_turn" if dialect == "lmi" else "max_tokens")


def test_thinking_and_tool_use_validate_strictly(stack_for: GetStack) -> None:
    stack = stack_for()
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(reasoning=3)
    body = {**ASK, "max_tokens": 64, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
    resp = request(stack.url, "POST", "/v1/messages", {**body, "stream": True})
    events = [EVENT.validate_python(e, strict=True) for e in resp.data_events()]
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "tool_use"]
    message = Message.model_validate(request(stack.url, "POST", "/v1/messages", body).json(), strict=True)
    assert [b.type for b in message.content] == ["thinking", "tool_use"] and message.stop_reason == "tool_use"
