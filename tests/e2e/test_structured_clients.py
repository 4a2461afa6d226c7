"""Agent loops and structured-output clients finish on the local stack's simulated model.

The simulated endpoint answers like a small obedient model (``sagestream_local.model``): it honours
``tool_choice``, calls the tool the prompt asks for, answers in text once the results are in, and writes
JSON that fits the schema or what the prompt asks for. These tests drive it with the clients that need
exactly that: the openai SDK's tool loop, LangChain (``bind_tools`` agent loop, ``json_mode``), instructor
(``Mode.JSON``, ``Mode.MD_JSON``) and pydantic-ai (``output_type`` with a tool, over chat completions).
"""

from __future__ import annotations

import json
from typing import Any

import instructor
import openai
import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.output_parsers import PydanticOutputParser
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.e2e.conftest import GetStack

MODEL = SIM_ENDPOINT_NAME
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a timezone",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
    },
}


def base_url(stack: LocalStack) -> str:
    # Every SDK here would call its public host without one.
    assert stack.url.startswith("http://127.0.0.1:"), stack.url
    return stack.url + "/v1"


def sdk(stack: LocalStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url(stack), api_key="unused", max_retries=0, timeout=30)


def sent(stack: LocalStack) -> list[dict[str, Any]]:
    """The request bodies the endpoint received, oldest first."""
    assert stack.endpoint is not None
    return [json.loads(r.body) for r in stack.endpoint.records]


def assistant_turn(message: Any) -> dict[str, Any]:
    """The assistant's tool-calling turn as a client sends it back (the stream helper's parsed extras left out)."""
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for c in message.tool_calls
    ]
    return {"role": "assistant", "content": message.content, "tool_calls": calls}


class User(BaseModel):
    name: str
    age: int


class Forecast(BaseModel):
    city: str
    days: int
    rain: bool


# --- the openai SDK's tool loop -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_openai_tool_loop_ends_in_text_that_uses_the_result(stack: LocalStack, stream: bool) -> None:
    client = sdk(stack)
    messages: list[Any] = [{"role": "user", "content": "What time is it in Tokyo?"}]
    calls: list[str] = []
    for _ in range(3):
        if stream:
            with client.chat.completions.stream(model=MODEL, messages=messages, tools=[WEATHER, TIME]) as events:
                message = events.get_final_completion().choices[0].message
        else:
            message = (
                client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER, TIME]).choices[0].message
            )
        if not message.tool_calls:
            break
        messages.append(assistant_turn(message))
        for call in message.tool_calls:
            calls.append(call.function.name)
            assert json.loads(call.function.arguments) == {"timezone": "Tokyo"}
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "09:30"})
    assert calls == ["get_time"]  # the tool the prompt asked for, not the first one listed
    assert message.content and "09:30" in message.content


def test_tool_choice_required_calls_every_turn_and_a_named_tool_is_the_one_called(stack: LocalStack) -> None:
    client = sdk(stack)
    ask: list[Any] = [{"role": "user", "content": "Tell me a joke"}]
    first = client.chat.completions.create(model=MODEL, messages=ask, tools=[WEATHER, TIME], tool_choice="required")
    (call,) = first.choices[0].message.tool_calls or []
    assert first.choices[0].finish_reason == "tool_calls"
    history = [
        *ask,
        assistant_turn(first.choices[0].message),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    again = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER, TIME], tool_choice="required")
    assert again.choices[0].finish_reason == "tool_calls"
    # nothing in the prompt matches a tool: the first listed, then the one not called yet
    assert call.function.name == "get_weather"
    assert [c.function.name for c in again.choices[0].message.tool_calls or []] == ["get_time"]
    # after the results, "auto" answers in text
    done = client.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER, TIME], tool_choice="auto")
    assert done.choices[0].message.tool_calls is None and "sunny" in (done.choices[0].message.content or "")

    named = {"type": "function", "function": {"name": "get_time"}}
    weather_question: list[Any] = [{"role": "user", "content": "What is the weather in Oslo?"}]
    forced = client.chat.completions.create(
        model=MODEL, messages=weather_question, tools=[WEATHER, TIME], tool_choice=named
    )
    assert [c.function.name for c in forced.choices[0].message.tool_calls or []] == ["get_time"]
    unforced = client.chat.completions.create(model=MODEL, messages=weather_question, tools=[WEATHER, TIME])
    (weather,) = unforced.choices[0].message.tool_calls or []
    assert weather.function.name == "get_weather"
    assert json.loads(weather.function.arguments) == {"city": "Oslo", "unit": "celsius"}
    none = client.chat.completions.create(
        model=MODEL, messages=weather_question, tools=[WEATHER, TIME], tool_choice="none"
    )
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content
    assert [b.get("tool_choice") for b in sent(stack)] == ["required", "required", "auto", named, None, "none"]


# --- LangChain ----------------------------------------------------------------------------------------------


def langchain(stack: LocalStack, **options: Any) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=base_url(stack), api_key="unused", max_retries=0, **options)  # type: ignore[arg-type]


@tool
def get_time(timezone: str) -> str:
    """The local time in a timezone."""
    return f"09:30 in {timezone}"


@pytest.mark.parametrize("streaming", [False, True])
def test_langchain_bind_tools_agent_loop_ends_in_text(stack: LocalStack, streaming: bool) -> None:
    llm = langchain(stack, streaming=streaming).bind_tools([get_time])
    messages: list[Any] = [HumanMessage("What time is it in Tokyo?")]
    for _ in range(3):
        reply = llm.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:  # type: ignore[attr-defined]
            break
        for call in reply.tool_calls:  # type: ignore[attr-defined]
            messages.append(ToolMessage(get_time.invoke(call["args"]), tool_call_id=call["id"]))
    assert [type(m).__name__ for m in messages] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert messages[1].tool_calls[0]["args"] == {"timezone": "Tokyo"}
    assert "09:30 in Tokyo" in messages[-1].content


def test_langchain_json_mode_follows_the_format_instructions_in_the_prompt(stack: LocalStack) -> None:
    parser = PydanticOutputParser(pydantic_object=Forecast)
    prompt = f"Give the forecast for Oslo for 3 days.\n{parser.get_format_instructions()}"
    forecast = langchain(stack).with_structured_output(Forecast, method="json_mode").invoke(prompt)
    assert isinstance(forecast, Forecast) and (forecast.city, forecast.days) == ("Oslo", 3)
    assert sent(stack)[-1]["response_format"] == {"type": "json_object"}


def test_langchain_json_mode_gives_the_keys_the_prompt_names(stack: LocalStack) -> None:
    prompt = "Describe Paris as a JSON object with the keys city, country and population."
    answer = langchain(stack).with_structured_output(method="json_mode").invoke(prompt)
    assert isinstance(answer, dict) and list(answer) == ["city", "country", "population"]
    assert isinstance(answer["population"], int)


# --- instructor ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [instructor.Mode.JSON, instructor.Mode.MD_JSON], ids=lambda m: m.name)
def test_instructor_gives_the_pydantic_model(stack: LocalStack, mode: instructor.Mode) -> None:
    client = instructor.from_openai(sdk(stack), mode=mode)
    user = client.chat.completions.create(
        model=MODEL,
        response_model=User,
        messages=[{"role": "user", "content": "Extract: Jason is 25 years old."}],
        max_retries=0,
    )
    assert isinstance(user, User) and user.model_dump() == {"name": "Jason", "age": 25}
    body = sent(stack)[-1]
    assert len(sent(stack)) == 1  # no retry needed
    if mode is instructor.Mode.JSON:
        assert body["response_format"] == {"type": "json_object"}
    else:
        assert "response_format" not in body


@pytest.mark.parametrize(
    ("env", "mode"),
    [
        ({"UPSTREAM_FORMAT": "tgi", "PROMPT_TEMPLATE": "chatml"}, instructor.Mode.JSON),
        ({"UPSTREAM_FORMAT": "tgi", "PROMPT_TEMPLATE": "chatml"}, instructor.Mode.MD_JSON),
        # LMI has no guided decoding (json_object is refused by name), but a prompt can still ask for JSON
        ({"UPSTREAM_FORMAT": "lmi", "PROMPT_TEMPLATE": "llama3"}, instructor.Mode.MD_JSON),
    ],
    ids=["tgi-JSON", "tgi-MD_JSON", "lmi-MD_JSON"],
)
def test_instructor_on_prompt_dialects(stack_for: GetStack, env: dict[str, str], mode: instructor.Mode) -> None:
    stack = stack_for(**env)
    client = instructor.from_openai(sdk(stack), mode=mode)
    user = client.chat.completions.create(
        model=MODEL,
        response_model=User,
        messages=[{"role": "user", "content": "Extract: Jason is 25 years old."}],
        max_retries=0,
    )
    assert user.model_dump() == {"name": "Jason", "age": 25}
    parameters = sent(stack)[-1]["parameters"]
    if mode is instructor.Mode.JSON:  # TGI's grammar for json_object: any object, shaped by the prompt
        assert parameters["grammar"] == {"type": "json", "value": {"type": "object"}}
    else:
        assert "grammar" not in parameters


def test_tgi_grammar_from_a_json_schema_response_format(stack_for: GetStack) -> None:
    stack = stack_for(UPSTREAM_FORMAT="tgi", PROMPT_TEMPLATE="chatml")
    ask = [{"role": "user", "content": "Forecast for Oslo, 3 days"}]
    forecast = sdk(stack).chat.completions.parse(model=MODEL, messages=ask, response_format=Forecast)
    parsed = forecast.choices[0].message.parsed
    assert isinstance(parsed, Forecast) and (parsed.city, parsed.days) == ("Oslo", 3)
    assert sent(stack)[-1]["parameters"]["grammar"]["value"]["required"] == ["city", "days", "rain"]


# --- pydantic-ai --------------------------------------------------------------------------------------------


def test_pydantic_ai_output_type_with_a_tool(stack: LocalStack) -> None:
    provider = OpenAIProvider(
        openai_client=openai.AsyncOpenAI(base_url=base_url(stack), api_key="unused", max_retries=0)
    )
    agent = Agent(OpenAIChatModel(MODEL, provider=provider), output_type=Forecast)
    seen: list[str] = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather forecast for a city."""
        seen.append(city)
        return f"rain in {city} for 3 days"

    result = agent.run_sync("What is the weather forecast for Oslo?")
    assert seen == ["Oslo"]
    assert isinstance(result.output, Forecast) and result.output.city == "Oslo"
    first, second = sent(stack)  # the tool's call, then the output tool's: two model turns
    assert {t["function"]["name"] for t in first["tools"]} == {"get_weather", "final_result"}
    # text is no output here, so each turn must call a tool: the weather first, the output tool once it is in
    assert first["tool_choice"] == second["tool_choice"] == "required"
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": second["messages"][-2]["tool_calls"][0]["id"],
        "content": "rain in Oslo for 3 days",
    }
