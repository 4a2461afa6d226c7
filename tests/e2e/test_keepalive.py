"""Keep-alives through the whole local chain: while the model is silent (a long time to first token), the
stream carries SSE comments every ``SSE_KEEPALIVE_S``, and the real clients of each protocol (the openai SDK's
chat and Responses streams, the anthropic SDK's Messages stream) skip them and get the model's text. Once a
keep-alive has gone out the status is 200, so a container fault after it is the protocol's error event; a
stream whose first token comes within the interval carries none, and its faults keep their status."""

from __future__ import annotations

import anthropic
import openai
import pytest

from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.client import request
from tests.e2e.conftest import GetStack
from tests.e2e.test_anthropic_clients import loopback
from tests.e2e.test_relay import model_text

KEEPALIVE = {"SSE_KEEPALIVE_S": "0.25"}
SILENT_MS = 1200  # the model's time to first token: four or five keep-alive intervals
ASK = [{"role": "user", "content": "Say something"}]
COMMENT = b": keep-alive"


@pytest.fixture
def slow_stack(stack_for: GetStack) -> LocalStack:
    stack = stack_for(**KEEPALIVE)
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(ttft_ms=SILENT_MS, tokens=5)
    return stack


def test_a_silent_model_gets_keepalives_before_its_first_token(slow_stack: LocalStack) -> None:
    resp = request(slow_stack.url, "POST", "/v1/chat/completions", {"messages": ASK, "stream": True})
    assert resp.status == 200
    events = [e.data for e in resp.events()]
    first_data = next(n for n, e in enumerate(events) if e.startswith(b"data:"))
    assert 2 <= first_data <= 7 and all(e == COMMENT for e in events[:first_data]), events[: first_data + 1]
    assert events[-1] == b"data: [DONE]" and COMMENT not in events[first_data:]


def test_every_protocols_sdk_skips_the_keepalives(slow_stack: LocalStack) -> None:
    sdk = openai.OpenAI(base_url=loopback(slow_stack) + "/v1", api_key="unused", max_retries=0, timeout=30)
    chunks = list(sdk.chat.completions.create(model=SIM_ENDPOINT_NAME, messages=ASK, stream=True))  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == model_text(slow_stack)
    events = list(sdk.responses.create(model=SIM_ENDPOINT_NAME, input="Say something", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == model_text(slow_stack)
    claude = anthropic.Anthropic(base_url=loopback(slow_stack), api_key="unused", max_retries=0, timeout=30)
    with claude.messages.stream(model=SIM_ENDPOINT_NAME, max_tokens=50, messages=ASK) as stream:  # type: ignore[arg-type]
        message = stream.get_final_message()
    assert message.content[0].type == "text" and message.content[0].text == model_text(slow_stack)


def test_a_fault_after_a_keepalive_is_the_protocols_error_event(slow_stack: LocalStack) -> None:
    assert slow_stack.endpoint is not None
    slow_stack.endpoint.set_scenario(ttft_ms=SILENT_MS, fault="model_stream_error", fault_after=0)
    resp = request(slow_stack.url, "POST", "/v1/chat/completions", {"messages": ASK, "stream": True})
    assert resp.status == 200, "the keep-alives committed the status"
    events = resp.data_events()
    assert events and events[-1]["error"]["code"] == "model_stream_error" and "[DONE]" not in events


def test_a_prompt_first_token_gets_no_keepalive_and_its_fault_keeps_its_status(stack_for: GetStack) -> None:
    stack = stack_for(**KEEPALIVE)
    assert stack.endpoint is not None
    resp = request(stack.url, "POST", "/v1/chat/completions", {"messages": ASK, "stream": True})
    assert resp.status == 200 and COMMENT not in resp.body
    stack.endpoint.set_scenario(fault="model_stream_error", fault_after=0)
    resp = request(stack.url, "POST", "/v1/chat/completions", {"messages": ASK, "stream": True})
    assert resp.status == 502 and COMMENT not in resp.body
