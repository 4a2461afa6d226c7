"""The simulated endpoint's model (sagestream_local.model): tool choice, arguments and JSON documents.

Its JSON is checked with the ``jsonschema`` validator and with pydantic itself, over hand-written schemas,
the schemas pydantic writes for typical models, and schemas hypothesis makes up.
"""

from __future__ import annotations

import datetime
import decimal
import doctest
import enum
import ipaddress
import json
import uuid
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.output_parsers import PydanticOutputParser
from pydantic import BaseModel, Field, HttpUrl

from sagestream_local import model
from sagestream_local.endpoint import Scenario, generate

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "hourly": {"type": "boolean"},
            },
            "required": ["city", "unit"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_flights",
        "description": "Find flights between two airports on a date",
        "parameters": {
            "type": "object",
            "properties": {"origin": {"type": "string"}, "destination": {"type": "string"}},
            "required": ["origin", "destination"],
        },
    },
}
FINAL = {
    "type": "function",
    "function": {
        "name": "final_result",
        "description": "The final response which ends this conversation",
        "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]},
    },
}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def after_call(name: str, result: str) -> list[dict[str, Any]]:
    """The assistant's call of ``name`` and the tool's answer, as a client sends them back."""
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": result},
    ]


def chosen(messages: list[dict[str, Any]], tools: list[dict[str, Any]], choice: Any = None) -> str | None:
    request: dict[str, Any] = {"messages": messages, "tools": tools}
    if choice is not None:
        request["tool_choice"] = choice
    call = model.tool_to_call(request)
    return call.name if call else None


# --- tool_choice --------------------------------------------------------------------------------------------


def test_auto_calls_the_tool_the_prompt_asks_for_and_answers_other_prompts_in_text() -> None:
    tools = [SEARCH, WEATHER]
    assert chosen([user("What is the weather in Oslo?")], tools) == "get_weather"
    assert chosen([user("Find me flights from OSL to LHR")], tools) == "search_flights"
    assert chosen([user("Please call search_flights now")], tools) == "search_flights"
    assert chosen([user("Tell me a joke about cats")], tools) is None
    assert chosen([user("What is the weather in Oslo?")], tools, "auto") == "get_weather"


def test_auto_answers_in_text_once_the_tool_results_are_in() -> None:
    messages = [user("What is the weather in Oslo?"), *after_call("get_weather", '{"sky": "clear"}')]
    assert chosen(messages, [WEATHER]) is None


def test_none_never_calls() -> None:
    assert chosen([user("Call get_weather for Oslo")], [WEATHER], "none") is None


def test_required_calls_a_tool_even_for_an_unrelated_prompt_and_after_results() -> None:
    assert chosen([user("Tell me a joke")], [WEATHER], "required") == "get_weather"
    messages = [user("What is the weather in Oslo?"), *after_call("get_weather", '{"sky": "clear"}')]
    assert chosen(messages, [WEATHER], "required") == "get_weather"


def test_required_after_results_prefers_a_tool_not_called_yet_like_an_agents_final_result() -> None:
    messages = [user("What is the weather in Oslo?"), *after_call("get_weather", '{"sky": "clear"}')]
    assert chosen([user("What is the weather in Oslo?")], [WEATHER, FINAL], "required") == "get_weather"
    assert chosen(messages, [WEATHER, FINAL], "required") == "final_result"


def test_a_named_function_is_called_whatever_the_prompt_and_every_turn() -> None:
    named = {"type": "function", "function": {"name": "search_flights"}}
    assert chosen([user("What is the weather in Oslo?")], [WEATHER, SEARCH], named) == "search_flights"
    messages = [user("Flights please"), *after_call("search_flights", "[]")]
    assert chosen(messages, [WEATHER, SEARCH], named) == "search_flights"


def test_the_responses_apis_flat_named_function_is_honoured_too() -> None:
    named = {"type": "function", "name": "search_flights"}
    assert chosen([user("What is the weather in Oslo?")], [WEATHER, SEARCH], named) == "search_flights"


def test_a_call_after_tool_results_takes_its_values_from_them() -> None:
    messages = [user("Summarise the weather"), *after_call("get_weather", "Rain in Bergen all week")]
    gen = generate({"messages": messages, "tools": [WEATHER, FINAL], "tool_choice": "required"}, Scenario())
    assert gen.tool_name == "final_result"
    assert json.loads("".join(gen.tool_arguments)) == {"summary": "Bergen"}


def test_the_text_answer_after_tool_results_reports_them() -> None:
    messages = [user("What is the weather in Oslo?"), *after_call("get_weather", '{"sky": "clear"}')]
    gen = generate({"messages": messages, "tools": [WEATHER]}, Scenario(tokens=8))
    assert gen.tool_name is None and gen.finish == "eos"
    assert gen.text.startswith('get_weather returned {"sky": "clear"}.')


# --- arguments ------------------------------------------------------------------------------------------------


def test_arguments_fill_the_required_parameters_with_values_from_the_prompt() -> None:
    parameters = WEATHER["function"]["parameters"]  # type: ignore[index]
    args = model.arguments_for(parameters, "What is the weather in Oslo, in fahrenheit?")
    jsonschema.validate(args, parameters)
    assert args == {"city": "Oslo", "unit": "fahrenheit"}  # optional ones the prompt does not mention are left out
    args = model.arguments_for(parameters, "Weather for city: Bergen over 3 days, hourly: yes")
    jsonschema.validate(args, parameters)
    assert args == {"city": "Bergen", "unit": "celsius", "days": 3, "hourly": True}


def test_a_number_outside_the_schemas_bounds_is_not_taken() -> None:
    parameters = WEATHER["function"]["parameters"]  # type: ignore[index]
    args = model.arguments_for(parameters, "Weather in Oslo for the next 40 days")
    jsonschema.validate(args, parameters)
    assert 1 <= args["days"] <= 14


def test_the_streamed_call_carries_those_arguments() -> None:
    request = {"messages": [user("What is the weather in Oslo?")], "tools": [SEARCH, WEATHER], "stream": True}
    gen = generate(request, Scenario())
    assert gen.tool_name == "get_weather" and gen.finish == "tool_calls"
    assert json.loads("".join(gen.tool_arguments)) == {"city": "Oslo", "unit": "celsius"}


def test_prompt_dialects_never_call_tools() -> None:
    request = {"inputs": "What is the weather in Oslo?", "tools": [WEATHER], "tool_choice": "required"}
    assert generate(request, Scenario(dialect="tgi")).tool_name is None


# --- JSON documents ------------------------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(BaseModel):
    street: str
    zip_code: Annotated[str, Field(min_length=5, max_length=5)]


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Person(BaseModel):
    """Someone the text mentions."""

    name: str
    age: Annotated[int, Field(ge=0, le=130)]
    email: str | None = None
    address: Address
    previous: list[Address] = []
    favourite: Color
    tags: set[str]
    scores: dict[str, float]
    born: datetime.date
    seen: datetime.datetime
    id: uuid.UUID
    pair: tuple[int, str]
    ratio: Annotated[float, Field(gt=0, lt=1)]
    step: Annotated[int, Field(multiple_of=5, gt=12)]
    pet: Cat | Dog = Field(discriminator="kind")
    nickname: Annotated[str, Field(max_length=3)]


class Node(BaseModel):
    value: int
    children: list[Node]
    parent: Node | None = None


class Forecast(BaseModel):
    city: str
    days: int
    rain: bool
    hours: list[float]


class Odds(BaseModel):
    price: decimal.Decimal
    site: HttpUrl
    ip: ipaddress.IPv4Address
    wait: datetime.timedelta
    at: datetime.time
    level: Literal[1, 2, 3]
    codes: frozenset[int]
    meta: dict[str, list[int]] | None
    blob: bytes
    few: Annotated[list[int], Field(min_length=3, max_length=5)]
    airport: Annotated[str, Field(pattern=r"^[A-Z]{3}$")]


PYDANTIC_MODELS: list[type[BaseModel]] = [Person, Node, Forecast, Address, Cat, Odds]


@pytest.mark.parametrize("cls", PYDANTIC_MODELS, ids=lambda c: c.__name__)
def test_documents_for_pydantic_schemas_validate_and_parse(cls: type[BaseModel]) -> None:
    schema = cls.model_json_schema()
    document = model.document_for(schema, "Jason Smith is 25 years old and lives in Oslo (OSL).")
    jsonschema.validate(document, schema)
    cls.model_validate(document)  # pydantic's own reading, formats (dates, uuid) included
    cls.model_validate_json(json.dumps(document))


def test_a_schema_without_a_finite_instance_ends_the_walk_instead_of_overflowing() -> None:
    loop = {
        "$ref": "#/$defs/L",
        "$defs": {"L": {"type": "object", "properties": {"next": {"$ref": "#/$defs/L"}}, "required": ["next"]}},
    }
    document = model.document_for(loop, "")
    depth = 0
    while document:
        document, depth = document["next"], depth + 1
    assert depth > 10


def test_a_document_takes_its_values_from_the_prompt() -> None:
    class User(BaseModel):
        name: str
        age: int

    document = model.document_for(User.model_json_schema(), "Extract: Jason is 25 years old")
    assert document == {"name": "Jason", "age": 25}


def test_a_pattern_is_met_by_a_word_of_the_prompt() -> None:
    schema = {"type": "object", "properties": {"origin": {"type": "string", "pattern": "^[A-Z]{3}$"}}}
    assert model.document_for(schema, "Flights from Oslo (OSL) to London") == {"origin": "OSL"}


def test_enums_follow_the_prompt() -> None:
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]}
    assert model.document_for(schema, "The sky is blue today") == {"color": "blue"}
    assert model.document_for(schema, "Nothing about colours")["color"] in ("red", "green", "blue")


# A strategy for JSON Schemas of the kinds structured output uses; every one has at least one instance.
_leaf = st.one_of(
    st.just({"type": "string"}),
    st.builds(
        lambda lo, extra: {"type": "string", "minLength": lo, "maxLength": lo + extra},
        st.integers(0, 8),
        st.integers(0, 8),
    ),
    st.sampled_from([{"type": "string", "format": f} for f in ("date", "date-time", "email", "uri", "uuid")]),
    st.just({"type": "integer"}),
    st.builds(
        lambda lo, extra: {"type": "integer", "minimum": lo, "maximum": lo + extra},
        st.integers(-50, 50),
        st.integers(0, 20),
    ),
    st.builds(
        lambda lo, m: {"type": "integer", "exclusiveMinimum": lo, "multipleOf": m},
        st.integers(-20, 20),
        st.integers(1, 7),
    ),
    st.builds(
        lambda lo: {"type": "number", "exclusiveMinimum": lo, "exclusiveMaximum": lo + 1},
        st.floats(-100, 100, allow_nan=False),
    ),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.lists(st.one_of(st.text(min_size=1, max_size=5), st.integers()), min_size=1, max_size=4, unique=True).map(
        lambda values: {"enum": values}
    ),
    st.builds(lambda v: {"const": v}, st.one_of(st.text(max_size=5), st.integers(), st.booleans())),
)


def _compound(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    names = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)
    return st.one_of(
        st.builds(
            lambda props, data: {
                "type": "object",
                "properties": props,
                "required": [k for k in props if data.draw(st.booleans())],
                "additionalProperties": False,
            },
            st.dictionaries(names, children, max_size=4),
            st.data(),
        ),
        st.builds(
            lambda items, lo, extra: {"type": "array", "items": items, "minItems": lo, "maxItems": lo + extra},
            children,
            st.integers(0, 3),
            st.integers(0, 3),
        ),
        st.builds(lambda a, b: {"anyOf": [a, b]}, children, children),
        st.builds(lambda a: {"anyOf": [a, {"type": "null"}]}, children),
        st.builds(lambda t: {"type": [t, "null"]}, st.sampled_from(["string", "integer", "boolean"])),
        st.builds(lambda s: {"type": "object", "additionalProperties": s}, children),
    )


SCHEMAS = st.recursive(_leaf, _compound, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(schema=SCHEMAS, prompt=st.text(max_size=60))
def test_any_generated_schema_gets_a_valid_document(schema: dict[str, Any], prompt: str) -> None:
    jsonschema.validate(model.document_for(schema, prompt), schema)
    jsonschema.validate(model.arguments_for(schema, prompt), schema)


@settings(max_examples=100, deadline=None)
@given(schema=SCHEMAS, prompt=st.text(max_size=60))
def test_schemas_behind_refs_get_valid_documents(schema: dict[str, Any], prompt: str) -> None:
    wrapped = {
        "type": "object",
        "properties": {
            "first": {"$ref": "#/$defs/Inner"},
            "rest": {"type": "array", "items": {"$ref": "#/$defs/Inner"}},
        },
        "required": ["first", "rest"],
        "$defs": {"Inner": schema},
    }
    jsonschema.validate(model.document_for(wrapped, prompt), wrapped)


# --- json_object: what the prompt asks for --------------------------------------------------------------------


def test_json_object_follows_a_schema_embedded_in_the_system_message() -> None:
    schema = Forecast.model_json_schema()
    system = f"Answer with JSON that matches this json_schema:\n\n{json.dumps(schema, indent=2)}\n\nOnly JSON."
    request = {"messages": [{"role": "system", "content": system}, user("Forecast for Oslo, 3 days")]}
    document = model.document_for(model.json_object_schema(request), "Forecast for Oslo, 3 days")
    forecast = Forecast.model_validate(document)
    assert (forecast.city, forecast.days) == ("Oslo", 3)


def test_json_object_follows_langchains_format_instructions_not_their_example() -> None:
    instructions = PydanticOutputParser(pydantic_object=Forecast).get_format_instructions()
    request = {"messages": [user(f"Forecast for Oslo.\n{instructions}")]}
    assert set(model.json_object_schema(request)["properties"]) == {"city", "days", "rain", "hours"}


def test_json_object_uses_the_keys_the_prompt_names() -> None:
    request = {"messages": [user("Reply in JSON with the keys city, country and population.")]}
    document = model.document_for(model.json_object_schema(request), "Paris")
    assert list(document) == ["city", "country", "population"]
    request = {"messages": [user("Return a JSON object with `title` and `year`.")]}
    assert set(model.document_for(model.json_object_schema(request), "")) == {"title", "year"}


def test_json_object_without_a_shape_is_a_sensible_object() -> None:
    request = {"messages": [user("Say hello in JSON")]}
    assert model.json_object_schema(request)["required"] == ["answer"]


def test_a_prompt_asking_for_a_json_code_block_gets_one_without_response_format() -> None:
    schema = json.dumps(Forecast.model_json_schema())
    request = {
        "messages": [
            {"role": "system", "content": f"Give the parsed objects in json that match this json_schema:\n{schema}"},
            user("Forecast for Oslo"),
            user("Return the correct JSON response within a ```json codeblock. not the JSON_SCHEMA"),
        ]
    }
    text = generate(request, Scenario()).text
    assert text.startswith("```json\n") and text.endswith("\n```")
    Forecast.model_validate_json(text.removeprefix("```json\n").removesuffix("\n```"))
    assert generate({"messages": [user("Tell me about JSON")]}, Scenario()).text.startswith("You asked")


def test_the_modules_examples_hold() -> None:
    result = doctest.testmod(model)
    assert result.attempted > 0 and result.failed == 0
