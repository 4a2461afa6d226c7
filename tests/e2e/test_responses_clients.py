"""The Responses API (``POST /v1/responses``) with real clients against the local stack.

The openai Python SDK (``responses.create`` streamed and not, the ``responses.stream()`` helper whose
accumulator checks the event order, ``responses.parse``, a tool round trip with ``function_call_output``),
the OpenAI Agents SDK with its default model class, pydantic-ai's default ``openai:`` agent and LangChain's
``ChatOpenAI(use_responses_api=True)``; the openai npm package in ``test_node_client.py``. Every SDK gets
the stack's loopback URL explicitly: without one it would call its public host.

The simulated endpoint calls the first tool whenever tools are given and the last turn is the user's, and
answers in text once a tool's result is in: enough for a round trip. (Once it honours ``tool_choice`` and
answers JSON that fits a schema, the tool and structured-output tests here can ask for more.)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from sagestream_local.endpoint import Record
from sagestream_local.stack import SIM_ENDPOINT_NAME, LocalStack
from tests.client import gaps_ms, request
from tests.e2e.conftest import GetStack

MODEL = SIM_ENDPOINT_NAME
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    },
    "strict": True,
}
ASK = "What is the weather in Paris this week?"


def loopback(stack: LocalStack) -> str:
    url = stack.url
    assert url.startswith(("http://127.0.0.1:", "http://localhost:")), f"not a loopback URL: {url!r}"
    return url + "/v1"


def client(stack: LocalStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=loopback(stack), api_key="unused", max_retries=0, timeout=30)


def last_record(stack: LocalStack) -> Record:
    assert stack.endpoint is not None
    return stack.endpoint.records[-1]


def sent_body(stack: LocalStack) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(last_record(stack).body)
    return body


# --- the openai SDK -----------------------------------------------------------------------------------------


def test_a_whole_response_has_the_text_the_endpoint_sent_and_its_usage(stack: LocalStack) -> None:
    response = client(stack).responses.create(model=MODEL, input="Hi", instructions="Be brief.", max_output_tokens=50)
    assert response.status == "completed" and response.object == "response"
    assert response.output_text and response.output[0].type == "message"
    assert sent_body(stack)["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert sent_body(stack)["max_tokens"] == 50
    assert response.usage is not None and response.usage.output_tokens > 0 and response.usage.input_tokens > 0
    assert response.store is False  # nothing is kept, whatever a client assumes


def test_a_streamed_response_is_openais_event_sequence_with_numbers_and_stable_ids(stack: LocalStack) -> None:
    events = list(client(stack).responses.create(model=MODEL, input="Hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len({e.item_id for e in deltas}) == 1 and {e.output_index for e in deltas} == {0}
    assert len(deltas) == len(last_record(stack).tokens)  # one event per token the endpoint sent
    completed = events[-1].response  # type: ignore[union-attr]
    assert completed.output_text == "".join(e.delta for e in deltas)
    assert completed.id == events[0].response.id  # type: ignore[union-attr]
    assert completed.usage is not None and completed.usage.output_tokens == len(deltas)


def test_the_stream_helper_accepts_the_sequence_and_gives_the_final_response(stack: LocalStack) -> None:
    with client(stack).responses.stream(model=MODEL, input="Hi") as stream:
        texts = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == "".join(texts) and len(texts) > 3


def test_the_first_token_shares_one_write_with_the_events_that_open_its_item(stack: LocalStack) -> None:
    resp = request(stack.url, "POST", "/v1/responses", {"input": "Hi", "stream": True})
    assert b"event: response.created" in resp.chunks[0].data and b"response.in_progress" in resp.chunks[0].data
    (first,) = [c.data for c in resp.chunks if b"response.output_text.delta" in c.data][:1]
    # The item and its part are announced in the write of the first token, never a write of their own before it.
    assert first.index(b"response.output_item.added") < first.index(b"response.content_part.added")
    assert first.index(b"response.content_part.added") < first.index(b"response.output_text.delta")
    assert first.count(b"event: response.output_text.delta") == 1


class Forecast(BaseModel):
    city: str
    days: int
    rain: bool


def test_parse_with_a_pydantic_model_gives_the_model(stack: LocalStack) -> None:
    response = client(stack).responses.parse(model=MODEL, input=ASK, text_format=Forecast)
    assert isinstance(response.output_parsed, Forecast)
    sent = sent_body(stack)["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "Forecast"
    assert sent["json_schema"]["schema"]["required"] == ["city", "days", "rain"]
    assert sent["json_schema"]["strict"] is True


def test_a_tool_call_round_trip_with_function_call_output(stack: LocalStack) -> None:
    sdk = client(stack)
    events = list(sdk.responses.create(model=MODEL, input=ASK, tools=[WEATHER], stream=True))  # type: ignore[list-item]
    sent = sent_body(stack)
    assert sent["tools"] == [
        {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}
    ]  # the Responses tool, chat-shaped
    fragments = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(fragments) == len(last_record(stack).tokens) - 1 > 3  # as the endpoint sent them, not re-chunked
    (call,) = [item for item in events[-1].response.output if item.type == "function_call"]  # type: ignore[union-attr]
    assert call.name == "get_weather" and call.arguments == "".join(fragments)
    assert json.loads(call.arguments).keys() == {"city", "days"}
    follow_up = sdk.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": ASK},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "clear"}'},
        ],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert follow_up.status == "completed" and follow_up.output_text
    messages = sent_body(stack)["messages"]
    assert messages[1]["tool_calls"] == [
        {"id": call.call_id, "type": "function", "function": {"name": "get_weather", "arguments": call.arguments}}
    ]
    assert messages[2] == {"role": "tool", "tool_call_id": call.call_id, "content": '{"sky": "clear"}'}


def test_a_whole_tool_call_is_a_function_call_item(stack: LocalStack) -> None:
    response = client(stack).responses.create(model=MODEL, input=ASK, tools=[WEATHER])  # type: ignore[list-item]
    (call,) = response.output
    assert call.type == "function_call" and call.name == "get_weather" and json.loads(call.arguments)


def test_reasoning_streams_as_a_reasoning_item_before_the_message(stack: LocalStack) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(reasoning=5)
    events = list(client(stack).responses.create(model=MODEL, input="Hi", stream=True))
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")  # type: ignore[union-attr]
    assert thought == " Let me think about what"
    final = events[-1].response  # type: ignore[union-attr]
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.usage.output_tokens_details.reasoning_tokens == 5


def test_a_cut_answer_ends_incomplete_with_its_reason(stack: LocalStack) -> None:
    events = list(client(stack).responses.create(model=MODEL, input="Hi", stream=True, max_output_tokens=3))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]
    whole = client(stack).responses.create(model=MODEL, input="Hi", max_output_tokens=3)
    assert whole.status == "incomplete" and whole.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]


def test_a_failure_after_the_first_byte_is_an_error_event_and_response_failed(stack: LocalStack) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(fault="model_stream_error", fault_after=3)
    events = list(client(stack).responses.create(model=MODEL, input="Hi", stream=True))
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1].response.status == "failed" and events[-1].response.error.message  # type: ignore[union-attr]
    assert "response.completed" not in [e.type for e in events]


def test_the_next_request_after_a_failure_is_served_normally(stack: LocalStack) -> None:
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(fault="model_stream_error", fault_after=3)
    list(client(stack).responses.create(model=MODEL, input="Hi", stream=True))
    stack.endpoint.reset_scenario()
    assert client(stack).responses.create(model=MODEL, input="Hi").status == "completed"


# --- state: nothing is stored -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("previous_response_id", "resp_123"), ("conversation", "conv_123"), ("background", True)],
)
def test_stateful_fields_are_refused_by_name_saying_the_server_is_stateless(
    stack: LocalStack, field: str, value: Any
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(stack).responses.create(model=MODEL, input="Hi", **{field: value})
    body: Any = info.value.body
    assert body["param"] == field and "stateless" in body["message"]
    assert stack.endpoint is not None and stack.endpoint.records == []


def test_a_stored_response_cannot_be_fetched_or_deleted(stack: LocalStack) -> None:
    sdk = client(stack)
    made = sdk.responses.create(model=MODEL, input="Hi", store=True)
    with pytest.raises(openai.NotFoundError) as info:
        sdk.responses.retrieve(made.id)
    assert "stateless" in info.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        sdk.responses.delete(made.id)


def test_hosted_tools_are_left_out_with_notice_and_refused_when_required(stack: LocalStack) -> None:
    raw = client(stack).responses.with_raw_response.create(
        model=MODEL,
        input="Hi",
        tools=[{"type": "web_search"}, WEATHER],  # type: ignore[list-item]
    )
    assert raw.headers["x-sagestream-unoffered-tools"] == "web_search"
    assert raw.parse().output_text and [t["function"]["name"] for t in sent_body(stack)["tools"]] == ["get_weather"]
    with pytest.raises(openai.BadRequestError) as info:
        client(stack).responses.create(
            model=MODEL, input="Hi", tools=[{"type": "web_search"}], tool_choice={"type": "web_search"}
        )
    assert info.value.body["param"] == "tool_choice.type"  # type: ignore[index]


def test_a_prompt_dialect_refuses_tools_under_the_responses_name(stack_for: GetStack) -> None:
    stack = stack_for(UPSTREAM_FORMAT="tgi", PROMPT_TEMPLATE="chatml")
    with pytest.raises(openai.BadRequestError) as info:
        client(stack).responses.create(
            model=MODEL, input="Hi", text={"format": {"type": "json_object"}}, tools=[WEATHER]
        )  # type: ignore[list-item]
    assert info.value.body["param"] == "tools"  # type: ignore[index]
    answer = client(stack).responses.create(model=MODEL, input="Hi", max_output_tokens=20)
    assert answer.output_text and sent_body(stack)["parameters"]["max_new_tokens"] == 20


# --- agent frameworks ---------------------------------------------------------------------------------------


def test_the_agents_sdk_default_model_runs_a_tool_and_streams_the_answer(stack: LocalStack) -> None:
    import agents

    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str, days: int) -> str:
        """The weather in a city."""
        calls.append(city)
        return "clear"

    async def run() -> tuple[str, list[str]]:
        agents.set_tracing_disabled(True)  # never call OpenAI's tracing host
        agents.set_default_openai_client(openai.AsyncOpenAI(base_url=loopback(stack), api_key="unused", max_retries=0))
        agent = agents.Agent(name="forecaster", instructions="Use the tool.", tools=[get_weather], model=MODEL)
        result = agents.Runner.run_streamed(agent, ASK)
        kinds = [event.type async for event in result.stream_events()]
        # The default model class is the Responses one: its responses carry our resp_ ids.
        ids = [r.response_id or "" for r in result.raw_responses]
        return str(result.final_output), kinds + ids

    final, seen = asyncio.run(run())
    assert len(calls) == 1 and final
    assert "raw_response_event" in seen
    assert len([s for s in seen if s.startswith("resp_")]) == 2  # the call, then the answer
    assert last_record(stack).request["messages"][-1]["role"] == "tool"  # the tool's result went back


def test_pydantic_ai_default_openai_agent_uses_the_responses_model_with_a_tool(stack: LocalStack) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIResponsesModel(MODEL, provider=OpenAIProvider(base_url=loopback(stack), api_key="unused"))
    agent = Agent(model, instructions="Use the tool.")
    calls: list[str] = []

    @agent.tool_plain
    def get_weather(city: str, days: int) -> str:
        """The weather in a city."""
        calls.append(city)
        return "clear"

    result = agent.run_sync(ASK)
    assert len(calls) == 1 and result.output
    ids = [getattr(m, "provider_response_id", None) or "" for m in result.all_messages()]
    assert len([i for i in ids if i.startswith("resp_")]) == 2
    assert last_record(stack).request["messages"][-1]["role"] == "tool"  # the tool's result went back


def test_langchain_chat_openai_with_the_responses_api(stack: LocalStack) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=MODEL, base_url=loopback(stack), api_key="unused", use_responses_api=True, max_retries=0)  # type: ignore[arg-type]
    answer = llm.invoke("Hi")
    assert answer.text and answer.response_metadata["id"].startswith("resp_")
    chunks = list(llm.stream("Hi"))
    assert len(chunks) > 3
    bound = llm.bind_tools([{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}])
    called = bound.invoke(ASK)
    assert called.tool_calls and called.tool_calls[0]["name"] == "get_weather"  # type: ignore[attr-defined]


def test_text_deltas_arrive_at_the_endpoints_cadence_with_no_burst(stack: LocalStack) -> None:
    """Each output_text.delta is written as its PayloadPart arrives: spread like the tokens, none bunched."""
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(cadence_ms=25, ttft_ms=20, tokens=12)
    resp = request(stack.url, "POST", "/v1/responses", {"input": "Hi", "stream": True})
    deltas = [e for e in resp.events() if e.data.startswith(b"event: response.output_text.delta")]
    sent = len(last_record(stack).tokens)
    assert len(deltas) == sent == 12
    spread_ms = (deltas[-1].at - deltas[0].at) * 1000
    assert spread_ms > 0.6 * (sent - 1) * 25, f"text deltas arrived within {spread_ms:.0f} ms: held back"
    assert sum(1 for g in gaps_ms(deltas) if g < 1.0) <= 1  # no burst: one write per delta
