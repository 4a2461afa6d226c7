"""The Responses API's request as data: ``openai.types.responses.response_create_params`` field for field, as
msgspec Structs (content parts and input items as tagged unions); :mod:`.request` reads a body into them.

Environment variables read: none.

Example::

    >>> from sagestream.protocols._requests import convert
    >>> convert(ResponseCreateRequest, {"input": [{"type": "message", "role": "user", "content": "Hi"}]}).input
    [MessageItem(role='user', content='Hi', id=None, status=None, phase=None)]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
from msgspec import Meta

from sagestream.protocols._requests import Strict, Tagged
from sagestream.protocols.openai.request import CacheBreakpoint, ReasoningEffort, Relayed

__all__ = ["STATELESS", "ResponseCreateRequest"]

STATELESS = "this server is stateless and stores no responses or conversations; send the whole conversation in 'input'"


# --- the request ----------------------------------------------------------------------------------------


class InputText(Tagged, tag="input_text"):
    text: str
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class InputImage(Tagged, tag="input_image"):
    detail: Literal["auto", "low", "high", "original"] | None = None
    image_url: str | None = None
    file_id: str | None = None
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class InputFile(Tagged, tag="input_file"):
    detail: Literal["auto", "low", "high"] | None = None
    file_data: str | None = None
    file_id: str | None = None
    file_url: str | None = None
    filename: str | None = None
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class OutputText(Tagged, tag="output_text"):
    """An assistant turn's text, as clients send earlier answers back."""

    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class Refusal(Tagged, tag="refusal"):
    refusal: str


ContentPart = InputText | InputImage | InputFile | OutputText | Refusal


class MessageItem(Tagged, tag="message"):
    """``EasyInputMessage`` (``type`` optional: :func:`_typed_items` adds it), ``Message`` and an earlier
    ``ResponseOutputMessage``."""

    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(Tagged, tag="function_call"):
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    namespace: str | None = None


class FunctionCallOutputItem(Tagged, tag="function_call_output"):
    call_id: str
    output: str | list[ContentPart]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class _SummaryText(Strict):
    type: Literal["summary_text"]
    text: str


class _ReasoningText(Strict):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(Tagged, tag="reasoning"):
    id: str | None = None
    summary: list[_SummaryText] = []
    content: list[_ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class ItemReference(Tagged, tag="item_reference"):
    id: str


InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem | ItemReference
_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning", "item_reference")


class FunctionTool(Strict):
    type: Literal["function"]
    name: str
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class ToolChoiceFunction(Strict):
    type: Literal["function"]
    name: str


class ToolChoiceAllowed(Strict):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]]


class FormatText(Tagged, tag="text"):
    pass


class FormatJSONObject(Tagged, tag="json_object"):
    pass


class FormatJSONSchema(Tagged, tag="json_schema"):
    name: str
    json_schema: dict[str, Any] = msgspec.field(name="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(Strict):
    format: FormatText | FormatJSONObject | FormatJSONSchema | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(Strict):
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: str | None = None


class StreamOptions(Strict):
    include_obfuscation: bool | None = None


Includable = Literal[
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
]


class ResponseCreateRequest(Strict, dict=True, kw_only=True):
    """``ResponseCreateParams``: every field the SDK can send, each with its JSON type.

    ``dict=True``: the parse keeps the body's own values (``_sent``) and vendor fields beside the fields; with a
    store, ``_previous_response_id`` (the stored response it continues) and ``_stored`` (its answer is kept)."""

    model: str | None = None
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    max_output_tokens: Annotated[int, Meta(ge=1)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[dict[str, Any]] | None = None  # read one by one: a hosted tool is refused by its type's name
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, Any] | None = None  # each value a MetadataValue (checked entry by entry)
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_options: Relayed | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast"] | None = None
    moderation: Relayed | None = None
    store: bool | None = None
    # Codex's installation, session, thread and turn ids: OpenAI's API takes them; they cannot change the answer.
    client_metadata: dict[str, Any] | None = None
    include: list[Includable] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    # Read so that they are refused with a reason rather than as unknown.
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    background: bool | None = None
    prompt: dict[str, Any] | None = None
    max_tool_calls: int | None = None
    context_management: list[Any] | None = None
    access_programs: dict[str, Any] | None = None
    image: dict[str, Any] | None = None

    if TYPE_CHECKING:  # set by the parse beside the fields (dict=True), not fields themselves
        _sent: dict[str, Any]
        _vendor_fields: dict[str, Any]
        _previous_response_id: str | None
        _stored: bool
        _background: bool
        _owner: str
        _owner_digest: str  # a background run's owner, as its job keeps it
        _response_id: str  # a background run's id and creation time, made when it was queued
        _created_at: int

    def sent(self) -> dict[str, Any]:
        """The fields the client sent with a value (not null), as the JSON values it sent."""
        sent: dict[str, Any] = getattr(self, "_sent", None) or msgspec.to_builtins(self)
        return {key: value for key, value in sent.items() if value is not None}
