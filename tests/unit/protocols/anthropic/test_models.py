"""The Messages request as data: image sources and tool choices told apart by their tags, constraints held."""

from __future__ import annotations

import msgspec
import pytest

from sagestream.protocols.anthropic.models import ImageBlock, MessagesRequest, ToolChoice, _ToolChoiceTool, _URLSource


def test_an_image_source_and_a_tool_choice_are_read_by_their_type() -> None:
    image = msgspec.convert({"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}, ImageBlock)
    assert image.source == _URLSource(url="https://x/a.png")
    choice = msgspec.convert({"tool_choice": {"type": "tool", "name": "f"}}, ToolChoice).tool_choice
    assert isinstance(choice, _ToolChoiceTool) and choice.name == "f"


@pytest.mark.parametrize(
    ("body", "fault"),
    [
        ({"messages": []}, "missing required field `max_tokens`"),
        ({"max_tokens": 0, "messages": []}, ">= 1"),
        ({"max_tokens": 1, "messages": [], "temperature": 1.5}, "<= 1.0"),
        ({"max_tokens": 1, "messages": [], "speed": "warp"}, "Invalid enum value 'warp'"),
    ],
)
def test_what_the_request_takes_is_held_to_its_types_and_ranges(body: dict[str, object], fault: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=fault.replace("(", r"\(")):
        msgspec.convert(body, MessagesRequest, strict=True)
