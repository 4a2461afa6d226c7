"""The Anthropic Messages API's request as data: ``MessageCreateParams`` field by field, its blocks, tools, tool
choices, thinking and context edits, as msgspec Structs; :mod:`.request` reads a body into them (blocks one by
one, so that each refusal names its block) and translates it.

Environment variables read: none.

Example::

    >>> msgspec.convert({"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}, ImageBlock).source
    _URLSource(url='https://x/a.png')
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from sagestream.protocols._requests import Strict, Tagged

__all__ = ["ClearThinking", "ImageBlock", "MessagesRequest", "TextBlock", "Thinking", "Tool", "ToolChoice"]


class CacheControl(Strict):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class Metadata(Strict):
    user_id: str | None = None


class _OutputFormat(Strict):
    type: Literal["json_schema"]
    json_schema: dict[str, Any] = msgspec.field(name="schema")


class OutputConfig(Strict):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: _OutputFormat | None = None


class MessagesRequest(Strict, kw_only=True):
    """``MessageCreateParams``, field by field; blocks, tools, tool choice and thinking are read on translation."""

    model: str | None = None
    max_tokens: Annotated[int, Meta(ge=1)]
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    temperature: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    metadata: Metadata | None = None
    output_config: OutputConfig | None = None
    cache_control: CacheControl | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    speed: Literal["standard", "fast"] | None = None
    context_management: dict[str, Any] | None = None
    container: Any = None
    diagnostics: Any = None
    inference_geo: str | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None


class TextBlock(Strict):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: list[dict[str, Any]] | None = None


class _Base64Source(Tagged, tag="base64"):
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class _URLSource(Tagged, tag="url"):
    url: str


class _FileSource(Tagged, tag="file"):
    file_id: str


class ImageBlock(Strict):
    type: Literal["image"]
    source: _Base64Source | _URLSource | _FileSource
    cache_control: CacheControl | None = None
    transformations: dict[str, Any] | None = None


class ToolUseBlock(Strict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: CacheControl | None = None
    caller: dict[str, Any] | None = None
    toolset_name: str | None = None


class ToolResultBlock(Strict):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None
    cache_control: CacheControl | None = None
    toolset_name: str | None = None


class ThinkingBlock(Strict):
    type: Literal["thinking"]
    thinking: str
    signature: str


_BLOCKS: dict[str, type[Strict]] = {
    "text": TextBlock,
    "image": ImageBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
    "thinking": ThinkingBlock,
}


class Tool(Strict):
    name: str
    input_schema: dict[str, Any]
    description: str | None = None
    type: Literal["custom"] | None = None
    strict: bool | None = None
    cache_control: CacheControl | None = None
    allowed_callers: list[str] | None = None
    defer_loading: bool | None = None
    eager_input_streaming: bool | None = None
    input_examples: list[dict[str, Any]] | None = None


class _ToolChoiceAuto(Tagged, tag="auto"):
    disable_parallel_tool_use: bool | None = None


class _ToolChoiceAny(Tagged, tag="any"):
    disable_parallel_tool_use: bool | None = None


class _ToolChoiceTool(Tagged, tag="tool"):
    name: str
    disable_parallel_tool_use: bool | None = None


class _ToolChoiceNone(Tagged, tag="none"):
    pass


_ToolChoices = _ToolChoiceAuto | _ToolChoiceAny | _ToolChoiceTool | _ToolChoiceNone


class ToolChoice(Strict):
    tool_choice: _ToolChoices


class Thinking(Strict):
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: Annotated[int, Meta(ge=1024)] | None = None
    # summarized and updates: display choices a container has no switch for; the thoughts are streamed whole
    # as the container writes them (a documented no-op). omitted: honoured, the thoughts are left out.
    display: Literal["summarized", "omitted", "updates"] | None = None


class _KeepTurns(Tagged, tag="thinking_turns"):
    value: Annotated[int, Meta(ge=0)]


class _KeepAll(Tagged, tag="all"):
    pass


class ClearThinking(Strict):
    """``context_management.edits[]`` of type ``clear_thinking_20251015``: older turns' thinking removed."""

    type: Literal["clear_thinking_20251015"]
    keep: _KeepTurns | _KeepAll | Literal["all"] | None = None
