"""The output items of a streamed response: one open at a time, each closed before the next kind starts."""

from __future__ import annotations

import json
from typing import Any

from sagestream.protocols.responses.events import EventSequence
from sagestream.protocols.responses.items import OutputItems, function_name, logprobs_of
from sagestream.protocols.responses.snapshot import ResponseSnapshot
from tests.unit.protocols.responses.test_request import parse


def _types(data: bytes) -> list[str]:
    return [json.loads(e.split(b"\n")[1].removeprefix(b"data: "))["type"] for e in data.split(b"\n\n")[:-1]]


def _items(body: dict[str, Any]) -> tuple[OutputItems, ResponseSnapshot]:
    request = parse(body).original
    response = ResponseSnapshot(request, model="m", id="resp_1", created_at=0)
    return OutputItems(request, response, EventSequence(), b""), response


def test_reasoning_then_text_closes_the_reasoning_item_before_the_message_opens() -> None:
    items, response = _items({"input": "Hi"})
    out = items.reasoning("think") + items.text("Hi", None) + items.close("completed")
    opened = ["response.output_item.added", "response.content_part.added"]
    closed = ["response.content_part.done", "response.output_item.done"]
    assert _types(out) == [
        *opened,
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        *closed,
        *opened,
        "response.output_text.delta",
        "response.output_text.done",
        *closed,
    ]
    assert [item["type"] for item in response.output] == ["reasoning", "message"]
    assert [item["status"] for item in response.output] == ["completed", "completed"]
    assert items.open is None and items.text_event is None


def test_an_open_message_offers_the_text_template_with_its_sequence_number_to_fill() -> None:
    items, _ = _items({"input": "Hi"})
    items.text("a", None)
    assert items.text_event is not None and items.text_parts == ["a"]
    event = items.text_event % (b'"b"', 9)
    assert json.loads(event.split(b"\n")[1].removeprefix(b"data: "))["sequence_number"] == 9


def test_a_new_tool_index_is_a_new_function_call_item() -> None:
    items, response = _items({"input": "Hi", "tools": [{"type": "function", "name": "f", "parameters": {}}]})
    first = {"index": 0, "id": "call_a", "function": {"name": "f", "arguments": "{}"}}
    second = {"index": 1, "id": "call_b", "function": {"name": "f", "arguments": "{}"}}
    items.tool_fragment(first)
    items.tool_fragment(second)
    items.close("completed")
    assert [(item["type"], item["call_id"]) for item in response.output] == [
        ("function_call", "call_a"),
        ("function_call", "call_b"),
    ]


def test_helpers_read_the_chat_shapes() -> None:
    assert logprobs_of(None) == [] and logprobs_of({"content": "not a list"}) == []
    assert function_name("a", {"a": ("ns", "b")}) == {"name": "b", "namespace": "ns"}
