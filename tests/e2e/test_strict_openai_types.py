"""Every chat and completions object, streamed or whole, on every dialect, validates *strictly* against the
openai SDK's own types: no coercion, every field its types require present with its declared type.

The Python SDK itself builds its objects leniently (``construct``), so it would not notice a missing count;
typed clients in other languages and zod schemas (the Vercel providers) do. A usage without ``prompt_tokens``
(TGI and LMI report no prompt count) was such a failure.
"""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from tests.client import request
from tests.e2e.conftest import GetStack
from tests.e2e.test_relay import DIALECT_ENV

ASK = [{"role": "user", "content": "What is the weather in Paris this week?"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def streamed(stack_url: str, path: str, body: dict[str, Any]) -> list[Any]:
    resp = request(stack_url, "POST", path, {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert resp.status == 200, resp.body
    events = resp.data_events()
    assert events[-1] == "[DONE]"
    return events[:-1]


def whole(stack_url: str, path: str, body: dict[str, Any]) -> Any:
    resp = request(stack_url, "POST", path, body)
    assert resp.status == 200, resp.body
    return resp.json()


@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_chat_chunks_and_answers_validate_strictly_on_every_dialect(stack_for: GetStack, dialect: str) -> None:
    stack = stack_for(**DIALECT_ENV[dialect])
    body: dict[str, Any] = {"messages": ASK, "max_tokens": 6}
    if dialect != "lmi":  # LMI gives no top-token lists; its per-token logprobs stream only
        body |= {"logprobs": True, "top_logprobs": 1}
    chunks = [
        ChatCompletionChunk.model_validate(c, strict=True) for c in streamed(stack.url, "/v1/chat/completions", body)
    ]
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == []
    assert usage.completion_tokens == 6 and usage.total_tokens == usage.prompt_tokens + 6
    answer = ChatCompletion.model_validate(whole(stack.url, "/v1/chat/completions", body), strict=True)
    assert answer.choices[0].message.content
    if dialect != "lmi":  # LMI's whole answer is its generated_text alone: no usage to report, and it says so
        assert answer.usage is not None and answer.usage.completion_tokens == 6
        assert answer.usage.total_tokens == answer.usage.prompt_tokens + 6


@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_completions_validate_strictly_on_every_dialect(stack_for: GetStack, dialect: str) -> None:
    stack = stack_for(**DIALECT_ENV[dialect])
    body = {"prompt": "Once upon a time", "max_tokens": 5}
    events = streamed(stack.url, "/v1/completions", body)
    # OpenAI streams `"finish_reason": null` until the last choice, as this does; openai-python reuses the whole
    # answer's type for chunks, whose finish_reason may not be null, so only the chunks that end are strict.
    assert all(e["choices"][0]["finish_reason"] is None for e in events[:-2])
    chunks = [Completion.model_validate(c, strict=True) for c in events[-2:]]
    assert chunks[0].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    answer = Completion.model_validate(whole(stack.url, "/v1/completions", body), strict=True)
    assert answer.choices[0].text


def test_tool_calls_and_reasoning_validate_strictly(stack_for: GetStack) -> None:
    stack = stack_for()
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(reasoning=3)
    body = {"messages": ASK, "tools": [WEATHER], "tool_choice": "required"}
    chunks = [
        ChatCompletionChunk.model_validate(c, strict=True) for c in streamed(stack.url, "/v1/chat/completions", body)
    ]
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert calls and calls[0].function is not None and calls[0].function.name == "get_weather"
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 3
    answer = ChatCompletion.model_validate(whole(stack.url, "/v1/chat/completions", body), strict=True)
    assert answer.choices[0].finish_reason == "tool_calls" and answer.choices[0].message.tool_calls


RESPONSE_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)


@pytest.mark.parametrize("dialect", ["openai", "tgi", "lmi"])
def test_every_responses_event_and_object_validates_strictly(stack_for: GetStack, dialect: str) -> None:
    """Usage with both details objects, completed_at, the sampling actually asked for (not null), echoed tools
    with strict: what strict clients and the Open Responses schema require of the response object."""
    stack = stack_for(**DIALECT_ENV[dialect])
    body: dict[str, Any] = {"input": "Tell me about rivers", "max_output_tokens": 6}
    resp = request(stack.url, "POST", "/v1/responses", {**body, "stream": True})
    assert resp.status == 200, resp.body
    events = [RESPONSE_EVENT.validate_python(e, strict=True) for e in resp.data_events()]
    final = events[-1].response
    assert events[-1].type == "response.incomplete" and final.usage is not None
    assert final.usage.output_tokens == 6 and final.temperature == 1.0 and final.service_tier == "default"
    whole = Response.model_validate(request(stack.url, "POST", "/v1/responses", body).json(), strict=True)
    assert whole.output_text


def test_responses_reasoning_summaries_and_tools_validate_strictly(stack_for: GetStack) -> None:
    stack = stack_for()
    assert stack.endpoint is not None
    stack.endpoint.set_scenario(reasoning=3)
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    body = {"input": "Weather in Paris?", "tools": [tool], "reasoning": {"summary": "auto"}}
    resp = request(stack.url, "POST", "/v1/responses", {**body, "stream": True})
    events = [RESPONSE_EVENT.validate_python(e, strict=True) for e in resp.data_events()]
    final = events[-1].response
    assert final.status == "completed" and final.completed_at is not None and final.tools[0].strict is False
    assert [item.type for item in final.output] == ["reasoning", "function_call"]
    assert final.output[0].summary and final.usage is not None
    assert final.usage.output_tokens_details.reasoning_tokens == 3
