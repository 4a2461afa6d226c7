"""Real Anthropic clients against the local stack's ``/v1/messages``: text, thinking and tool use arrive whole.

The anthropic Python SDK (``messages.create`` streamed and not, the ``messages.stream()`` helper, a tool-use
round trip with ``tool_result``), LangChain's ``ChatAnthropic`` (``bind_tools``, ``with_structured_output``),
pydantic-ai's Anthropic model with a tool, and (``test_node_client.py``) the ``@anthropic-ai/sdk`` npm
package. Every client is given the stack's loopback URL and refuses any other: left on its default it would
call api.anthropic.com. The simulated endpoint answers as vLLM does (it calls the first tool when tools are
given after a user turn); the tests compare what the client got with what the endpoint sent and was sent.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest
from langchain_anthropic import ChatAnthropic
from pydantic import BaseModel

from sagestream_local.endpoint import Record
from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.client import gaps_ms, request
from tests.e2e.test_openai_clients import sent_arguments

MODEL = SIM_ENDPOINT_NAME
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris this week?"}]


def loopback(stack: LocalStack) -> str:
    """The stack's base URL, checked: an SDK without one would call its public host."""
    url = stack.url
    assert url and url.startswith("http://127.0.0.1:"), f"not a loopback URL: {url!r}"
    return url


def client(stack: LocalStack) -> anthropic.Anthropic:
    # max_retries=0: a test must see the first answer, not a retried one.
    return anthropic.Anthropic(base_url=loopback(stack), api_key="unused", max_retries=0, timeout=30)


def records(stack: LocalStack) -> list[Record]:
    assert stack.endpoint is not None
    return stack.endpoint.records


def sent(stack: LocalStack) -> dict[str, Any]:
    """What the endpoint was sent, last."""
    return json.loads(records(stack)[-1].body)


def streamed_text(record: Record) -> str:
    return "".join(t.text for t in record.tokens)


# --- the anthropic SDK --------------------------------------------------------------------------------------


def test_a_whole_message(stack: LocalStack) -> None:
    message = client(stack).messages.create(model=MODEL, max_tokens=64, system="Be brief.", messages=ASK)
    assert message.type == "message" and message.role == "assistant" and message.model == MODEL
    assert message.id.startswith("msg_")
    (block,) = message.content
    assert block.type == "text" and block.text
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == len(block.text.split()) or message.usage.output_tokens > 0
    body = sent(stack)
    assert body["messages"][0] == {"role": "system", "content": "Be brief."} and body["max_tokens"] == 64


def test_a_streamed_message_event_by_event(stack: LocalStack) -> None:
    stream = client(stack).messages.create(model=MODEL, max_tokens=64, messages=ASK, stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[1] == "content_block_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    texts = [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    record = records(stack)[-1]
    assert [t.text for t in record.tokens] == texts and len(texts) > 3  # one event per token the endpoint sent
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.delta.stop_reason == "end_turn" and delta.usage.output_tokens == len(record.tokens)


def test_the_stream_helper_gives_the_text_and_the_final_message(stack: LocalStack) -> None:
    with client(stack).messages.stream(model=MODEL, max_tokens=5, messages=ASK) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == streamed_text(records(stack)[-1]) and final.content[0].text == text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 5
    assert final.usage.input_tokens and final.usage.input_tokens > 0


def test_a_tool_use_round_trip_with_tool_result(stack: LocalStack) -> None:
    sdk = client(stack)
    with sdk.messages.stream(model=MODEL, max_tokens=256, messages=ASK, tools=[WEATHER]) as stream:
        fragments = [e.partial_json for e in stream if e.type == "input_json"]
        first = stream.get_final_message()
    record = records(stack)[-1]
    assert fragments == [t.text for t in record.tokens[1:]] and len(fragments) > 3  # as the container sent them
    assert first.stop_reason == "tool_use"
    (call,) = first.content
    assert call.type == "tool_use" and call.name == "get_weather"
    assert call.input == json.loads(sent_arguments(record))
    body = sent(stack)
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
    history = [
        *ASK,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": '{"sky": "clear"}'}]},
    ]
    answer = sdk.messages.create(model=MODEL, max_tokens=64, messages=history, tools=[WEATHER])
    assert answer.stop_reason == "end_turn" and answer.content[0].type == "text"
    messages = sent(stack)["messages"]
    assert messages[1]["tool_calls"][0]["id"] == call.id
    assert json.loads(messages[1]["tool_calls"][0]["function"]["arguments"]) == call.input
    assert messages[2] == {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear"}'}


def test_each_token_is_written_as_it_arrives_no_bursts(stack: LocalStack) -> None:
    """Invariant 1 on this route: one text_delta event per token, spread as the endpoint spread them."""
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(cadence_ms=25, ttft_ms=20, tokens=12)
    resp = request(
        loopback(stack), "POST", "/v1/messages", {"model": MODEL, "max_tokens": 64, "messages": ASK, "stream": True}
    )
    texts = [e for e in resp.events() if b'"text_delta"' in e.data]
    sent = len(records(stack)[-1].tokens)
    assert len(texts) == sent == 12
    spread_ms = (texts[-1].at - texts[0].at) * 1000
    assert spread_ms > 0.6 * (sent - 1) * 25, f"text deltas arrived within {spread_ms:.0f} ms: held back"
    assert sum(1 for g in gaps_ms(texts) if g < 1.0) <= 1


def test_thinking_streams_as_a_thinking_block(stack: LocalStack) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(reasoning=5)
    with client(stack).messages.stream(model=MODEL, max_tokens=64, messages=ASK) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == " Let me think about what"


def test_errors_are_the_sdks_own_exceptions_naming_the_field(stack: LocalStack) -> None:
    sdk = client(stack)
    with pytest.raises(anthropic.NotFoundError) as missing:
        sdk.messages.create(model="no-such-model", max_tokens=8, messages=ASK)
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.messages.create(model=MODEL, max_tokens=8, messages=ASK, extra_body={"top_k": 3})
    assert "top_k" in refused.value.message
    assert records(stack) == []  # refused before the endpoint


def test_a_fault_mid_stream_reaches_the_sdk_as_an_error_after_the_text_before_it(stack: LocalStack) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(fault="model_stream_error", fault_after=3, non_ascii=0.0)
    texts: list[str] = []
    stream = client(stack).messages.stream(model=MODEL, max_tokens=64, messages=ASK)
    with pytest.raises(anthropic.APIStatusError) as failed, stream as events:
        texts.extend(events.text_stream)
    assert "".join(texts) == streamed_text(records(stack)[-1])  # what reached the client before stays correct
    assert failed.value.body["error"]["type"] in ("api_error", "overloaded_error")  # type: ignore[index]
    stack.endpoint.reset_scenario()
    assert client(stack).messages.create(model=MODEL, max_tokens=8, messages=ASK).stop_reason == "max_tokens"


def test_count_tokens_is_the_containers_count(stack: LocalStack) -> None:
    counted = client(stack).messages.count_tokens(model=MODEL, messages=ASK)
    record = records(stack)[-1]
    assert record.operation == "InvokeEndpoint" and json.loads(record.body)["max_tokens"] == 1
    answered = client(stack).messages.create(model=MODEL, max_tokens=4, messages=ASK)
    assert counted.input_tokens == answered.usage.input_tokens > 0


def test_a_page_may_send_the_anthropic_sdks_headers(stack: LocalStack) -> None:
    """The preflight a browser makes before the TS SDK's first call (dangerouslyAllowBrowser: true)."""
    wanted = (
        "anthropic-version,anthropic-dangerous-direct-browser-access,content-type,x-api-key,x-stainless-arch,"
        "x-stainless-lang,x-stainless-os,x-stainless-package-version,x-stainless-retry-count,x-stainless-runtime,"
        "x-stainless-runtime-version,x-stainless-timeout,x-stainless-helper"
    )
    headers = {
        "Origin": "https://chat.example.com",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": wanted,
    }
    resp = request(loopback(stack), "OPTIONS", "/v1/messages", headers=headers)
    allowed = (resp.header("access-control-allow-headers") or "").split(", ")
    assert sorted(allowed) == sorted(wanted.split(","))


# --- LangChain ----------------------------------------------------------------------------------------------


class Forecast(BaseModel):
    city: str
    days: int


def langchain(stack: LocalStack, **options: Any) -> ChatAnthropic:
    return ChatAnthropic(  # type: ignore[call-arg]
        model=MODEL, base_url=loopback(stack), api_key="unused", max_retries=0, max_tokens=256, **options
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_langchain_bind_tools_gets_the_tool_call(stack: LocalStack, streaming: bool) -> None:
    message = langchain(stack, streaming=streaming).bind_tools([WEATHER]).invoke(ASK[0]["content"])
    (call,) = message.tool_calls  # type: ignore[attr-defined]
    assert call["name"] == "get_weather"
    assert call["args"] == json.loads(sent_arguments(records(stack)[-1]))


def test_langchain_with_structured_output_gives_the_model(stack: LocalStack) -> None:
    forecast = langchain(stack).with_structured_output(Forecast).invoke(ASK[0]["content"])
    assert isinstance(forecast, Forecast)
    body = sent(stack)
    # A forced tool call: Anthropic's tool_choice "tool" arrives as the named function.
    assert body["tool_choice"] == {"type": "function", "function": {"name": "Forecast"}}
    assert forecast.model_dump() == json.loads(sent_arguments(records(stack)[-1]))


# --- pydantic-ai --------------------------------------------------------------------------------------------


def test_pydantic_ai_runs_its_tool_and_answers(stack: LocalStack) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    provider = AnthropicProvider(base_url=loopback(stack), api_key="unused")
    agent = Agent(AnthropicModel(MODEL, provider=provider))
    seen: list[tuple[str, int]] = []

    @agent.tool_plain
    def get_weather(city: str, days: int) -> str:
        """The weather in a city."""
        seen.append((city, days))
        return "clear"

    result = agent.run_sync(ASK[0]["content"])
    assert len(seen) == 1  # the model's call ran the tool
    assert isinstance(result.output, str) and result.output
    messages = sent(stack)["messages"]
    assert messages[-1]["role"] == "tool" and "clear" in messages[-1]["content"]
