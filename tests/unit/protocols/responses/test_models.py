"""The Responses request as data: its unions told apart by their tags, the body's nulls and absences kept apart."""

from __future__ import annotations

import pytest

from sagestream.errors import APIError
from sagestream.protocols._requests import convert
from sagestream.protocols.responses.models import FunctionCallItem, MessageItem, ResponseCreateRequest


def test_items_are_told_apart_by_their_type() -> None:
    request = convert(
        ResponseCreateRequest,
        {
            "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            ]
        },
    )
    assert isinstance(request.input, list)
    assert [type(item) for item in request.input] == [MessageItem, FunctionCallItem]
    assert request.input[0].type == "message" and request.input[0].content[0].type == "input_text"


def test_a_part_of_no_known_type_is_named_with_the_types_it_could_have() -> None:
    with pytest.raises(APIError) as info:
        convert(ResponseCreateRequest, {"input": [{"type": "message", "role": "user", "content": [{"type": "x"}]}]})
    assert info.value.param == "input.0.content.0.type"
    assert "'input_text'" in info.value.message and "'refusal'" in info.value.message
