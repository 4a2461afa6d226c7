"""Real OpenAI clients against the local stack: what agents and structured output need arrives whole.

The openai Python SDK (tools streamed and not, ``chat.completions.parse``, logprobs, reasoning), LangChain's
``ChatOpenAI`` (``bind_tools``, ``with_structured_output``) and, in ``test_node_client.py``, the openai npm
package. The simulated endpoint answers as vLLM does; the tests compare what the client got with what the
endpoint sent and was sent.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from sagestream_local.endpoint import Record, whole_answer
from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.client import gaps_ms, request
from tests.e2e.conftest import GetStack

MODEL = SIM_ENDPOINT_NAME  # MODEL_ID defaults to the endpoint's name
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"}},
            "required": ["city", "days", "metric"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris this week?"}]


def client(stack: LocalStack) -> openai.OpenAI:
    # max_retries=0: a test must see the first answer, not a retried one.
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=0, timeout=30)


def last_record(stack: LocalStack) -> Record:
    assert stack.endpoint is not None
    return stack.endpoint.records[-1]


def sent_arguments(record: Record) -> str:
    """The tool call's arguments as the endpoint sent them."""
    if record.operation == "InvokeEndpointWithResponseStream":
        return "".join(t.text for t in record.tokens[1:])  # fragment by fragment; token 0 is the call's head
    # A whole answer is not recorded token by token; the simulator answers the same request the same way.
    answer = json.loads(whole_answer(record.request, record.scenario, record.id)[0])
    return str(answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])


# --- tools --------------------------------------------------------------------------------------------------


def test_a_streamed_tool_call_reaches_the_sdk_fragment_by_fragment(stack: LocalStack) -> None:
    chunks = list(client(stack).chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], stream=True))
    record = last_record(stack)
    assert json.loads(record.body)["tools"] == [WEATHER]  # forwarded as sent
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    head = calls[0][0]
    assert (head.index, head.type, head.function.name) == (0, "function", "get_weather")
    assert head.id and head.id.startswith("chatcmpl-tool-")
    fragments = [call[0].function.arguments for call in calls[1:]]
    # Each fragment the endpoint sent is its own chunk: arguments flow like text does.
    assert len(fragments) == len(record.tokens) - 1 > 3
    assert "".join(fragments) == sent_arguments(record)
    assert json.loads("".join(fragments)).keys() == {"city", "days", "metric"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert len({c.id for c in chunks}) == 1 and {c.model for c in chunks} == {MODEL}


def test_tool_call_arguments_flow_like_text_one_arrival_per_fragment(stack: LocalStack) -> None:
    """Each argument fragment is written as its PayloadPart arrives, not gathered until the call is whole."""
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(cadence_ms=25, ttft_ms=20)
    body = {"messages": ASK, "tools": [WEATHER], "stream": True}
    resp = request(stack.url, "POST", "/v1/chat/completions", body)
    fragments = [e for e in resp.events() if b'"arguments":"' in e.data and b'"name":' not in e.data]
    sent = len(last_record(stack).tokens) - 1
    assert len(fragments) == sent > 3
    spread_ms = (fragments[-1].at - fragments[0].at) * 1000
    assert spread_ms > 0.6 * (sent - 1) * 25, f"argument fragments arrived within {spread_ms:.0f} ms: held back"
    assert sum(1 for g in gaps_ms(fragments) if g < 1.0) <= 1


def test_a_tool_call_in_a_whole_answer_and_the_conversation_that_follows(stack: LocalStack) -> None:
    sdk = client(stack)
    answer = sdk.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required")
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather"
    assert call.function.arguments == sent_arguments(last_record(stack))
    # The tool's result goes back with the call it answers; the endpoint sees both as the client sent them.
    history: list[Any] = [
        *ASK,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear"}'},
    ]
    follow_up = sdk.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER])
    assert follow_up.choices[0].finish_reason == "stop" and follow_up.choices[0].message.content
    sent = json.loads(last_record(stack).body)["messages"]
    assert sent[1]["tool_calls"][0] == {"id": call.id, "type": "function", "function": call.function.model_dump()}
    assert sent[2] == {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear"}'}


# --- structured output --------------------------------------------------------------------------------------


class Forecast(BaseModel):
    city: str
    days: int
    rain: bool
    hours: list[float]


def test_parse_with_a_pydantic_model_gives_the_model(stack: LocalStack) -> None:
    completion = client(stack).chat.completions.parse(model=MODEL, messages=ASK, response_format=Forecast)
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Forecast)
    sent = json.loads(last_record(stack).body)["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "Forecast"
    assert sent["json_schema"]["schema"]["required"] == ["city", "days", "rain", "hours"]


# --- logprobs, reasoning, usage -----------------------------------------------------------------------------


def test_logprobs_pass_through_streamed_and_whole(stack: LocalStack) -> None:
    sdk = client(stack)
    whole = sdk.chat.completions.create(model=MODEL, messages=ASK, logprobs=True, top_logprobs=2)
    content = whole.choices[0].logprobs and whole.choices[0].logprobs.content
    assert content and "".join(t.token for t in content) == whole.choices[0].message.content
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)
    chunks = list(sdk.chat.completions.create(model=MODEL, messages=ASK, logprobs=True, top_logprobs=1, stream=True))
    streamed = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content or []]
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert [t.token for t in streamed] == texts and len(texts) > 3


def test_reasoning_and_its_token_count_reach_the_client(stack: LocalStack) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(reasoning=5)
    stream = client(stack).chat.completions.create(
        model=MODEL, messages=ASK, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    thoughts = [
        getattr(c.choices[0].delta, "reasoning_content", None) for c in chunks if c.choices and c.choices[0].delta
    ]
    thought = "".join(t for t in thoughts if t)
    assert thought == " Let me think about what"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens_details is not None
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == 5
    whole = client(stack).chat.completions.create(model=MODEL, messages=ASK)
    assert getattr(whole.choices[0].message, "reasoning_content", None) == thought


# --- completions --------------------------------------------------------------------------------------------


def test_completions_take_a_one_element_prompt_list_and_refuse_two(stack: LocalStack) -> None:
    sdk = client(stack)
    answer = sdk.completions.create(model=MODEL, prompt=["Once upon a time"], max_tokens=5)
    assert answer.choices[0].text and json.loads(last_record(stack).body)["prompt"] == "Once upon a time"
    with pytest.raises(openai.BadRequestError) as info:
        sdk.completions.create(model=MODEL, prompt=["one", "two"], max_tokens=5)
    assert info.value.body["param"] == "prompt"  # type: ignore[index]
    assert "one prompt per request" in info.value.body["message"]  # type: ignore[index]


# --- what is refused ----------------------------------------------------------------------------------------


def test_an_unknown_field_is_refused_by_name_and_never_reaches_the_endpoint(stack: LocalStack) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(stack).chat.completions.create(model=MODEL, messages=ASK, extra_body={"top_k": 5})
    assert info.value.body == {  # type: ignore[comparison-overlap]
        "message": "Unrecognized request argument supplied: top_k",
        "type": "invalid_request_error",
        "param": "top_k",
        "code": "unknown_parameter",
    }
    assert stack.endpoint is not None and stack.endpoint.records == []


def test_listed_vendor_extras_reach_the_container(stack_for: GetStack) -> None:
    stack = stack_for(EXTRA_REQUEST_FIELDS="top_k,chat_template_kwargs")
    extras = {"top_k": 5, "chat_template_kwargs": {"enable_thinking": False}}
    client(stack).chat.completions.create(model=MODEL, messages=ASK, extra_body=extras)
    sent = json.loads(last_record(stack).body)
    assert {k: sent[k] for k in extras} == extras
    with pytest.raises(openai.BadRequestError) as info:
        client(stack).chat.completions.create(model=MODEL, messages=ASK, extra_body={"min_p": 0.1})
    assert info.value.body["param"] == "min_p"  # type: ignore[index]


def test_a_prompt_over_the_containers_context_is_the_containers_400_and_is_not_retried(stack: LocalStack) -> None:
    """Needs issue 12's faults.error_from (a ModelError 424 with a 4xx original is that 4xx)."""
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(context_length=16)
    long = [{"role": "user", "content": "word " * 40}]
    # The SDK's own retries on: a 5xx would be retried twice, a 400 is not.
    sdk = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", max_retries=2, timeout=30)
    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model=MODEL, messages=long, max_tokens=8)
    error = info.value.body
    assert isinstance(error, dict)
    assert error["code"] == "context_length_exceeded"
    assert "maximum context length is 16 tokens" in error["message"]
    assert "arn:aws" not in error["message"] and "123456789012" not in error["message"]
    assert len(stack.endpoint.records) == 1


# --- LangChain ----------------------------------------------------------------------------------------------


def langchain(stack: LocalStack, **options: Any) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=stack.url + "/v1", api_key="unused", max_retries=0, **options)  # type: ignore[arg-type]


def test_langchain_bind_tools_gets_the_tool_call(stack: LocalStack) -> None:
    for streaming in (False, True):
        message = langchain(stack, streaming=streaming).bind_tools([WEATHER]).invoke(ASK[0]["content"])
        (call,) = message.tool_calls  # type: ignore[attr-defined]
        assert call["name"] == "get_weather"
        assert json.dumps(call["args"]) == json.dumps(json.loads(sent_arguments(last_record(stack))))


def test_langchain_with_structured_output_gives_the_model(stack: LocalStack) -> None:
    forecast = langchain(stack).with_structured_output(Forecast).invoke(ASK[0]["content"])
    assert isinstance(forecast, Forecast)
    assert json.loads(last_record(stack).body)["response_format"]["type"] == "json_schema"


def test_raw_request_still_ends_with_done(stack: LocalStack) -> None:
    resp = request(stack.url, "POST", "/v1/chat/completions", {"messages": ASK, "tools": [WEATHER], "stream": True})
    assert resp.status == 200 and resp.data_events()[-1] == "[DONE]"
