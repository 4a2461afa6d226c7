"""What a client gets through sagestream equals what the same vLLM engine gives it directly, at temperature 0.

Through sagestream: the local stack (Function URL, runtime processes, boto3) calling the SageMaker front over
the engine's ``/invocations`` with ``UPSTREAM_FORMAT=openai``. Directly: the same SDK against the engine's own
OpenAI (``/v1/chat/completions``) or Anthropic (``/v1/messages``) route. The tiny model's answers are
nonsense, but deterministic, prompt-dependent and made of real vLLM chunks (partial UTF-8 included).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import openai
import pytest

from sagestream_local.stack import LocalStack
from sagestream_local.vllm_engine import VllmEngine

# The first test pays for the session's engine start (20-60 s on two shared cores) within its own timeout.
pytestmark = pytest.mark.timeout(300)

MAX_TOKENS = 8
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 8}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 6}, "days": {"type": "integer", "maximum": 9}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


def _loopback(url: str) -> str:
    assert url.startswith("http://127.0.0.1:"), f"not a loopback URL: {url!r}"  # an SDK without one calls its host
    return url


def relayed(stack: LocalStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=_loopback(stack.url) + "/v1", api_key="unused", max_retries=0, timeout=60)


def direct(engine: VllmEngine) -> openai.OpenAI:
    return openai.OpenAI(base_url=_loopback(engine.url) + "/v1", api_key="unused", max_retries=0, timeout=60)


def both(engine_stack: LocalStack, engine: VllmEngine) -> tuple[openai.OpenAI, openai.OpenAI]:
    return relayed(engine_stack), direct(engine)


def _chat(client: openai.OpenAI, model: str, **fields: Any) -> Any:
    request = {"model": model, "messages": ASK, "max_tokens": MAX_TOKENS, "temperature": 0, **fields}
    return client.chat.completions.create(**request)


def _streamed(client: openai.OpenAI, model: str, **fields: Any) -> dict[str, Any]:
    """A streamed chat answer gathered: text, tool calls' names and arguments, finish reason, usage, logprobs."""
    out: dict[str, Any] = {"text": "", "calls": {}, "finish": None, "usage": None, "logprobs": []}
    for chunk in _chat(client, model, stream=True, stream_options={"include_usage": True}, **fields):
        if chunk.usage is not None:
            out["usage"] = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens, chunk.usage.total_tokens)
        for choice in chunk.choices:
            out["text"] += choice.delta.content or ""
            out["finish"] = choice.finish_reason or out["finish"]
            for call in choice.delta.tool_calls or []:
                entry = out["calls"].setdefault(call.index, {"name": "", "arguments": ""})
                entry["name"] += (call.function and call.function.name) or ""
                entry["arguments"] += (call.function and call.function.arguments) or ""
            if choice.logprobs and choice.logprobs.content:
                out["logprobs"] += [(t.token, round(t.logprob, 4)) for t in choice.logprobs.content]
    return out


def _whole(client: openai.OpenAI, model: str, **fields: Any) -> dict[str, Any]:
    answer = _chat(client, model, **fields)
    choice = answer.choices[0]
    calls = {
        i: {"name": c.function.name, "arguments": c.function.arguments}
        for i, c in enumerate(choice.message.tool_calls or [])
    }
    logprobs = [(t.token, round(t.logprob, 4)) for t in (choice.logprobs.content if choice.logprobs else None) or []]
    usage = (answer.usage.prompt_tokens, answer.usage.completion_tokens, answer.usage.total_tokens)
    return {
        "text": choice.message.content or "",
        "calls": calls,
        "finish": choice.finish_reason,
        "usage": usage,
        "logprobs": logprobs,
    }


@pytest.mark.parametrize("gather", [_streamed, _whole], ids=["stream", "whole"])
def test_chat_text_and_usage_equal_the_engines(engine_stack: LocalStack, engine: VllmEngine, gather: Any) -> None:
    ours, theirs = (gather(client, engine.model_name) for client in both(engine_stack, engine))
    assert theirs["text"] and theirs["usage"][1] == MAX_TOKENS and theirs["finish"] == "length"
    assert ours == theirs


@pytest.mark.parametrize("gather", [_streamed, _whole], ids=["stream", "whole"])
@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}], ids=["required", "named"]
)
def test_forced_tool_calls_equal_the_engines(
    engine_stack: LocalStack, engine: VllmEngine, gather: Any, tool_choice: Any
) -> None:
    # a forced call is a JSON document the grammar holds the random model to; 80 tokens are enough to end it
    fields = {"tools": [WEATHER], "tool_choice": tool_choice, "max_tokens": 80}
    ours, theirs = (gather(client, engine.model_name, **fields) for client in both(engine_stack, engine))
    if tool_choice == "required" and theirs["finish"] == "length":
        # vLLM's required grammar is an array of one or more calls, and the random model goes on to a second
        # until max_tokens: streamed, the calls as far as they got; whole, no call at all. Either way, the same.
        assert theirs["usage"][1] == 80
    else:
        assert [c["name"] for c in theirs["calls"].values()] == ["get_weather"], theirs
        # valid for the schema, but for raw control characters the grammar lets into strings (strict=False)
        assert set(json.loads(theirs["calls"][0]["arguments"], strict=False)) == {"city"}
    assert ours["calls"] == theirs["calls"]
    assert (ours["text"], ours["usage"]) == (theirs["text"], theirs["usage"])


@pytest.mark.parametrize("gather", [_streamed, _whole], ids=["stream", "whole"])
def test_json_schema_output_equals_the_engines(engine_stack: LocalStack, engine: VllmEngine, gather: Any) -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA, "strict": True}}
    fields = {"response_format": schema, "max_tokens": 40}
    ours, theirs = (gather(client, engine.model_name, **fields) for client in both(engine_stack, engine))
    assert set(json.loads(theirs["text"])) == {"city", "days"}, theirs
    assert ours == theirs


@pytest.mark.parametrize("gather", [_streamed, _whole], ids=["stream", "whole"])
def test_logprobs_equal_the_engines(engine_stack: LocalStack, engine: VllmEngine, gather: Any) -> None:
    fields = {"logprobs": True, "top_logprobs": 2}
    ours, theirs = (gather(client, engine.model_name, **fields) for client in both(engine_stack, engine))
    assert len(theirs["logprobs"]) == MAX_TOKENS
    assert ours == theirs


def test_responses_text_equals_the_engines_chat_answer(engine_stack: LocalStack, engine: VllmEngine) -> None:
    ours = relayed(engine_stack).responses.create(
        model=engine.model_name,
        instructions="Be brief.",
        input="What is the weather in Paris?",
        max_output_tokens=MAX_TOKENS,
        temperature=0,
    )
    theirs = _chat(
        direct(engine),
        engine.model_name,
        messages=[{"role": "system", "content": "Be brief."}, *ASK],
    )
    assert ours.output_text == theirs.choices[0].message.content != ""
    assert ours.usage is not None
    assert (ours.usage.input_tokens, ours.usage.output_tokens) == (
        theirs.usage.prompt_tokens,
        theirs.usage.completion_tokens,
    )


def test_a_responses_function_call_equals_the_engines_chat_call(engine_stack: LocalStack, engine: VllmEngine) -> None:
    tool = {
        "type": "function",
        "name": "get_weather",
        **{k: WEATHER["function"][k] for k in ("description", "parameters")},
    }
    ours = relayed(engine_stack).responses.create(
        model=engine.model_name,
        input="What is the weather in Paris?",
        tools=[tool],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=80,
        temperature=0,
    )
    named = {"type": "function", "function": {"name": "get_weather"}}
    theirs = _chat(direct(engine), engine.model_name, tools=[WEATHER], tool_choice=named, max_tokens=80)
    calls = [item for item in ours.output if item.type == "function_call"]
    expected = theirs.choices[0].message.tool_calls[0].function
    assert [(c.name, c.arguments) for c in calls] == [(expected.name, expected.arguments)]


def anthropic_client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=_loopback(url), api_key="unused", max_retries=0, timeout=60)


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "whole"])
def test_messages_equal_the_engines_own_messages_route(
    engine_stack: LocalStack, engine: VllmEngine, streaming: bool
) -> None:
    # the pinned SDK takes no temperature argument; the field goes in the body all the same
    request: dict[str, Any] = {
        "model": engine.model_name,
        "max_tokens": MAX_TOKENS,
        "system": "Be brief.",
        "messages": ASK,
        "extra_body": {"temperature": 0},
    }
    answers = []
    for url in (engine_stack.url, engine.url):
        client = anthropic_client(url)
        if streaming:
            with client.messages.stream(**request) as stream:
                message = stream.get_final_message()
        else:
            message = client.messages.create(**request)
        text = "".join(block.text for block in message.content if block.type == "text")
        answers.append((text, message.stop_reason, message.usage.input_tokens, message.usage.output_tokens))
    ours, theirs = answers
    assert theirs[0] and theirs[1] in ("max_tokens", "end_turn")
    assert ours == theirs


LONG = "weather " * 600  # past the tiny model's 512-token context


def test_a_prompt_past_the_context_is_a_400_on_every_route(engine_stack: LocalStack, engine: VllmEngine) -> None:
    sdk = relayed(engine_stack)
    with pytest.raises(openai.BadRequestError) as chat:
        _chat(sdk, engine.model_name, messages=[{"role": "user", "content": LONG}])
    with pytest.raises(openai.BadRequestError) as responses:
        sdk.responses.create(model=engine.model_name, input=LONG, max_output_tokens=MAX_TOKENS)
    with pytest.raises(anthropic.BadRequestError) as messages:
        anthropic_client(engine_stack.url).messages.create(
            model=engine.model_name, max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": LONG}]
        )
    assert chat.value.code == responses.value.code == "context_length_exceeded", (chat.value, responses.value)
    for raised in (chat.value, responses.value, messages.value):
        assert "maximum context length is 512 tokens" in str(raised), raised
    # the engine says the same directly
    with pytest.raises(openai.BadRequestError):
        _chat(direct(engine), engine.model_name, messages=[{"role": "user", "content": LONG}])


def test_sixteen_concurrent_streams_each_get_their_own_tokens(engine_stack: LocalStack, engine: VllmEngine) -> None:
    prompts = [f"Count {n} days in Oslo and {n * 7} in Berlin" for n in range(16)]
    ask = lambda client, prompt: _streamed(  # noqa: E731
        client, engine.model_name, messages=[{"role": "user", "content": prompt}]
    )
    theirs = [ask(direct(engine), prompt) for prompt in prompts]
    assert len({t["text"] for t in theirs}) > 8, "the prompts should give the tiny model different answers"
    with ThreadPoolExecutor(16) as pool:
        ours = list(pool.map(lambda prompt: ask(relayed(engine_stack), prompt), prompts))
    assert ours == theirs


def test_the_engines_system_fingerprint_reaches_the_client(engine_stack: LocalStack, engine: VllmEngine) -> None:
    ours, theirs = (_chat(client, engine.model_name) for client in both(engine_stack, engine))
    assert theirs.system_fingerprint and theirs.system_fingerprint.startswith("vllm-")
    assert ours.system_fingerprint == theirs.system_fingerprint
    # Streamed, vLLM sends it on the usage chunk: the stream's last chunk carries it through sagestream too.
    streams = [
        list(_chat(client, engine.model_name, stream=True, stream_options={"include_usage": True}))
        for client in both(engine_stack, engine)
    ]
    assert [chunks[-1].system_fingerprint for chunks in streams] == [theirs.system_fingerprint] * 2


def test_a_prompt_that_leaves_no_room_for_max_tokens(engine_stack: LocalStack, engine: VllmEngine) -> None:
    """The prompt fits, prompt plus max_tokens does not: what vLLM answers, the client gets through sagestream."""
    prompt = [{"role": "user", "content": "weather " * 220}]
    outcomes = []
    for client in both(engine_stack, engine):
        try:
            answer = _chat(client, engine.model_name, messages=prompt, max_tokens=300)
            outcomes.append(("ok", answer.usage.prompt_tokens, answer.usage.completion_tokens))
        except openai.BadRequestError as exc:
            outcomes.append(("400", exc.code, exc.message))
    assert outcomes[0] == outcomes[1]


def test_a_forced_messages_tool_use_whose_arguments_are_not_json(engine_stack: LocalStack, engine: VllmEngine) -> None:
    """The named call's arguments hold a raw control character (the grammar lets it in; see the chat test above):
    vLLM's own /v1/messages answers 400 as if the client erred; sagestream says the model did (502 api_error)."""
    tool = {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": WEATHER["function"]["parameters"],
    }
    request: dict[str, Any] = {
        "model": engine.model_name,
        "max_tokens": 80,
        "messages": ASK,
        "tools": [tool],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "extra_body": {"temperature": 0},
    }
    named = {"type": "function", "function": {"name": "get_weather"}}
    arguments = _whole(direct(engine), engine.model_name, tools=[WEATHER], tool_choice=named, max_tokens=80)
    with pytest.raises(json.JSONDecodeError, match="Invalid control character"):
        json.loads(arguments["calls"][0]["arguments"])  # what both routes get from the engine
    with pytest.raises(anthropic.BadRequestError, match="Invalid control character"):
        anthropic_client(engine.url).messages.create(**request)
    with pytest.raises(anthropic.InternalServerError) as ours:
        anthropic_client(engine_stack.url).messages.create(**request)
    assert ours.value.status_code == 502
    assert ours.value.body == {
        "type": "error",
        "error": {"type": "api_error", "message": "The model's arguments for tool call 0 are not JSON."},
    }
