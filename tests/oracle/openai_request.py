"""The OpenAI requests the relay accepts, validated into pydantic models before anything is sent upstream.

The models mirror the openai SDK's request types (``openai.types.chat.completion_create_params`` and
``openai.types.completion_create_params``) field for field: a request an SDK can build parses here, and a
field the SDK does not know is refused with 400 naming it, as OpenAI's API does (``Unrecognized request
argument supplied``). Vendor extras a container understands (vLLM's ``top_k``, ``min_p``,
``repetition_penalty``, ``chat_template_kwargs``, ...) pass only when the deployment lists them in
``EXTRA_REQUEST_FIELDS``; they are kept apart in :attr:`OpenAIRequest.vendor_fields`, unvalidated, for the
dialect to place. Whether each field is forwarded, translated or refused is the dialect's decision
(:meth:`sagestream.dialects.Dialect.body`), made before the endpoint is called.

:func:`parse_chat` and :func:`parse_completion` take the raw request body and either return a model or
raise an :class:`~sagestream.errors.APIError` with status 400, type ``invalid_request_error`` and, where a
field is at fault, ``param`` set to its dotted path (``messages.0.role``). Every rejection is a 400 and
never a 422: OpenAI's API answers wrong types, out-of-range values and a too-large ``max_tokens`` with
400 ``invalid_request_error``, and its SDKs map 400 to ``BadRequestError``.

JSON types are not coerced (``"max_tokens": "5"`` or ``true`` is rejected, as OpenAI does) so that what
reaches the container is what the client meant. ``stream_options`` is ignored when not streaming, rather
than refused as OpenAI does, because some clients always send it. Limits that protect the endpoint:
``stop`` takes at most 4 strings of at most :data:`MAX_STOP_CHARS` characters, and the prompt's text
(every message's text, or ``prompt``) at most ``max_prompt_chars`` characters when the deployment sets
``MAX_PROMPT_CHARS``.

Example::

    >>> body = b'{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 9}'
    >>> request = parse_chat(body, max_tokens_limit=4096)
    >>> request.plain_messages(), request.effective_max_tokens, request.stream
    ([('user', 'Hi')], 9, False)
    >>> try:
    ...     parse_chat(b'{"messages": [{"role": "robot", "content": "Hi"}]}', max_tokens_limit=None)
    ... except APIError as err:
    ...     print(err.status, err.param)
    400 messages.0.role
    >>> try:
    ...     parse_chat(b'{"messages": [{"role": "user", "content": "Hi"}], "top_k": 5}', max_tokens_limit=None)
    ... except APIError as err:
    ...     print(err.param, err.message)
    top_k Unrecognized request argument supplied: top_k
    >>> parse_chat(b'{"messages": [{"role": "user", "content": "Hi"}], "top_k": 5}', max_tokens_limit=None,
    ...            extra_fields=frozenset({"top_k"})).vendor_fields
    {'top_k': 5}
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Any, Literal, TypeVar

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator

from sagestream.errors import APIError
from tests.oracle.requests import (
    RelayedObject,
    StrictModel,
    check_max_tokens,
    check_prompt_size,
    invalid,
    read_object,
)

__all__ = [
    "MAX_STOP_CHARS",
    "MAX_STOP_STRINGS",
    "AssistantMessage",
    "CacheBreakpoint",
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "ContentPart",
    "FunctionTool",
    "OpenAIRequest",
    "ResponseFormat",
    "StreamOptions",
    "TextPart",
    "ToolCall",
    "parse_chat",
    "parse_completion",
]

MAX_STOP_STRINGS = 4
"""OpenAI's own limit on ``stop``."""
MAX_STOP_CHARS = 256
"""Each stop string is matched against the text at every step; a long one costs the container on each token."""


class CacheBreakpoint(StrictModel):
    mode: Literal["explicit"]
    ttl: Literal["30m", "12h"] | None = None


class TextPart(StrictModel):
    type: Literal["text"]
    text: str
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class _ImageURL(StrictModel):
    url: str
    detail: Literal["auto", "low", "high", "original"] | None = None


class ImagePart(StrictModel):
    type: Literal["image_url"]
    image_url: _ImageURL
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class _InputAudio(StrictModel):
    data: str
    format: Literal["wav", "mp3"]


class AudioPart(StrictModel):
    type: Literal["input_audio"]
    input_audio: _InputAudio
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class _File(StrictModel):
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None


class FilePart(StrictModel):
    type: Literal["file"]
    file: _File
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class RefusalPart(StrictModel):
    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[TextPart | ImagePart | AudioPart | FilePart | RefusalPart, Field(discriminator="type")]


class _FunctionCall(StrictModel):
    name: str
    arguments: str


class ToolCall(StrictModel):
    """An assistant turn's call, as the client sends the history back."""

    id: str
    type: Literal["function"]
    function: _FunctionCall


class _CustomCall(StrictModel):
    name: str
    input: str


class CustomToolCall(StrictModel):
    id: str
    type: Literal["custom"]
    custom: _CustomCall


class _Message(StrictModel):
    """What every message has: a role and content (a string, content parts or, for some, none)."""

    @property
    def _content(self) -> str | list[Any] | None:
        content: str | list[Any] | None = getattr(self, "content", None)
        return content

    @property
    def text(self) -> str:
        """The text parts joined with newlines; ``""`` for none."""
        content = self._content
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        return "\n".join(part.text for part in content if isinstance(part, TextPart))

    @property
    def has_only_text(self) -> bool:
        content = self._content
        return not isinstance(content, list) or all(isinstance(p, TextPart) for p in content)


class SystemMessage(_Message):
    role: Literal["system", "developer"]
    content: str | list[TextPart]
    name: str | None = None


class UserMessage(_Message):
    role: Literal["user"]
    content: str | list[ContentPart]
    name: str | None = None


class _AudioRef(StrictModel):
    id: str


class AssistantMessage(_Message):
    role: Literal["assistant"]
    # None is what SDKs send back for an assistant turn that only called tools.
    content: str | list[ContentPart] | None = None
    name: str | None = None
    refusal: str | None = None
    tool_calls: list[Annotated[ToolCall | CustomToolCall, Field(discriminator="type")]] | None = None
    function_call: _FunctionCall | None = None
    audio: _AudioRef | None = None
    # What a reasoning model thought, sent back by clients that keep it (vLLM's and DeepSeek's names).
    reasoning_content: str | None = None
    reasoning: str | None = None


class ToolMessage(_Message):
    role: Literal["tool"]
    content: str | list[TextPart]
    tool_call_id: str


class FunctionMessage(_Message):
    role: Literal["function"]
    content: str | None
    name: str


ChatMessage = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage, Field(discriminator="role")
]


class _FunctionDefinition(StrictModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionTool(StrictModel):
    type: Literal["function"]
    function: _FunctionDefinition


class CustomTool(StrictModel):
    type: Literal["custom"]
    custom: RelayedObject


class _NamedFunction(StrictModel):
    name: str


class NamedToolChoice(StrictModel):
    type: Literal["function"]
    function: _NamedFunction


class _NamedCustom(StrictModel):
    name: str


class NamedCustomToolChoice(StrictModel):
    type: Literal["custom"]
    custom: _NamedCustom


class AllowedToolsChoice(StrictModel):
    type: Literal["allowed_tools"]
    allowed_tools: RelayedObject


ToolChoice = (
    Literal["none", "auto", "required"]
    | Annotated[NamedToolChoice | NamedCustomToolChoice | AllowedToolsChoice, Field(discriminator="type")]
)


class _JSONSchema(StrictModel):
    name: str
    description: str | None = None
    # "schema" is also a BaseModel attribute; the alias keeps the wire name.
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)


class ResponseFormatText(StrictModel):
    type: Literal["text"]


class ResponseFormatJSONObject(StrictModel):
    type: Literal["json_object"]


class ResponseFormatJSONSchema(StrictModel):
    type: Literal["json_schema"]
    json_schema: _JSONSchema


ResponseFormat = Annotated[
    ResponseFormatText | ResponseFormatJSONObject | ResponseFormatJSONSchema, Field(discriminator="type")
]


class StreamOptions(StrictModel):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class _LegacyFunction(StrictModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class OpenAIRequest(StrictModel):
    """The fields both endpoints share, with OpenAI's ranges."""

    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    stop: (
        Annotated[str, Field(max_length=MAX_STOP_CHARS)]
        | Annotated[list[Annotated[str, Field(max_length=MAX_STOP_CHARS)]], Field(max_length=MAX_STOP_STRINGS)]
        | None
    ) = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    seed: int | None = None
    user: str | None = None
    n: int | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    # Token id (as a JSON object key) -> bias; OpenAI's range.
    logit_bias: dict[str, Annotated[int, Field(ge=-100, le=100)]] | None = None

    _vendor_fields: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("stream_options")
    @classmethod
    def _only_when_streaming(cls, options: StreamOptions | None, info: ValidationInfo) -> StreamOptions | None:
        # As OpenAI: it shapes a stream, so without one it would be dropped without a word.
        if options is not None and info.data.get("stream") is not True:
            raise ValueError("'stream_options' is only allowed when 'stream' is true")
        return options

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int | None) -> int | None:
        # One choice per answer is what the relay carries: each delta is the first choice's.
        if n is not None and n != 1:
            raise ValueError("only n=1 is supported")
        return n

    @property
    def vendor_fields(self) -> dict[str, Any]:
        """The ``EXTRA_REQUEST_FIELDS`` the client sent, as sent."""
        return dict(self._vendor_fields)

    @property
    def effective_max_tokens(self) -> int | None:
        return self.max_tokens

    @property
    def stop_sequences(self) -> list[str] | None:
        """``stop`` as a list, the form TGI and LMI take."""
        if self.stop is None:
            return None
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream) and self.stream_options is not None and bool(self.stream_options.include_usage)

    def sent(self) -> dict[str, Any]:
        """The fields the client sent with a value (not null), as JSON values under their wire names."""
        data = self.model_dump(mode="json", exclude_unset=True, by_alias=True)
        return {key: value for key, value in data.items() if value is not None}

    def prompt_chars(self) -> int:
        raise NotImplementedError


# The SDK's Literal values for the OpenAI-platform options; anything else is refused as OpenAI refuses it.
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class ChatCompletionRequest(OpenAIRequest):
    messages: list[ChatMessage]
    # OpenAI's newer name for max_tokens; when both are sent it wins, as it does at OpenAI.
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    tools: list[Annotated[FunctionTool | CustomTool, Field(discriminator="type")]] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    functions: list[_LegacyFunction] | None = None
    function_call: Literal["none", "auto"] | _NamedFunction | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    reasoning_effort: ReasoningEffort | None = None
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = None
    store: bool | None = None
    audio: RelayedObject | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    moderation: RelayedObject | None = None
    prediction: RelayedObject | None = None
    prompt_cache_key: str | None = None
    prompt_cache_options: RelayedObject | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: str | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast"] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    web_search_options: RelayedObject | None = None

    @field_validator("top_logprobs")
    @classmethod
    def _with_logprobs(cls, top: int | None, info: ValidationInfo) -> int | None:
        # As OpenAI: top_logprobs is a detail of logprobs, not a way to ask for them.
        if top and info.data.get("logprobs") is not True:
            raise ValueError("'logprobs' must be true when 'top_logprobs' is set")
        return top

    @property
    def effective_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def plain_messages(self) -> list[tuple[str, str]]:
        """``(role, text)`` pairs for a prompt template.

        ``developer`` is OpenAI's new name for ``system``; text parts are joined with newlines.
        """
        return [("system" if m.role == "developer" else m.role, m.text) for m in self.messages]

    def prompt_chars(self) -> int:
        total = 0
        for message in self.messages:
            total += len(message.text)
            if isinstance(message, AssistantMessage) and message.tool_calls:
                total += sum(len(c.function.arguments) for c in message.tool_calls if isinstance(c, ToolCall))
        return total


class CompletionRequest(OpenAIRequest):
    # LangChain's OpenAI LLM sends a one-element list; token-id prompts are not text a template can carry.
    prompt: str | Annotated[list[str], Field(min_length=1)]
    best_of: int | None = None
    echo: bool | None = None
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt: str | list[str]) -> str | list[str]:
        if isinstance(prompt, list) and len(prompt) > 1:
            raise ValueError(
                f"{len(prompt)} prompts were sent; this endpoint completes one prompt per request "
                "(send a string or a one-element list)"
            )
        return prompt

    @property
    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    def prompt_chars(self) -> int:
        return len(self.prompt_text)


def parse_chat(
    body: bytes,
    *,
    max_tokens_limit: int | None,
    extra_fields: Collection[str] = frozenset(),
    max_prompt_chars: int | None = None,
) -> ChatCompletionRequest:
    """A ``/v1/chat/completions`` body as a request, or a 400 :class:`APIError` saying what is wrong."""
    request = parse_model(ChatCompletionRequest, body, extra_fields)
    if not request.messages:
        raise APIError.invalid_request("'messages' must contain at least one message.", param="messages")
    name = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
    check_max_tokens(request, name, max_tokens_limit)
    check_prompt_size(request, "messages", max_prompt_chars)
    _check_tool_choice(request)
    _check_tool_results(request)
    return request


def _check_tool_results(request: ChatCompletionRequest) -> None:
    """As OpenAI and Anthropic answer: a tool result must answer a call an earlier assistant turn made. A result
    for no call reached the container as an orphan ``tool`` message, which chat templates render (or reject)
    each their own way."""
    called: set[str] = set()
    for n, message in enumerate(request.messages):
        if isinstance(message, AssistantMessage):
            called.update(call.id for call in message.tool_calls or ())
        elif isinstance(message, ToolMessage) and message.tool_call_id not in called:
            raise APIError.invalid_request(
                f"Invalid parameter: 'messages.{n}' is a tool result for '{message.tool_call_id}', which no "
                "earlier assistant turn called.",
                param=f"messages.{n}",
                code="invalid_tool_result",
            )


def _check_tool_choice(request: ChatCompletionRequest) -> None:
    """As OpenAI: a ``tool_choice`` that requires a tool needs ``tools``, and a named one must be among them."""
    choice = request.tool_choice
    if choice is None or choice in ("none", "auto") or isinstance(choice, AllowedToolsChoice):
        return
    tools = request.tools or []
    if not tools:
        raise APIError.invalid_request(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
            param="tool_choice",
            code="invalid_value",
        )
    if isinstance(choice, NamedToolChoice):
        names = {tool.function.name for tool in tools if isinstance(tool, FunctionTool)}
        kind, name = "function", choice.function.name
    elif isinstance(choice, NamedCustomToolChoice):
        names = {str(getattr(tool.custom, "name", "")) for tool in tools if isinstance(tool, CustomTool)}
        kind, name = "custom tool", choice.custom.name
    else:
        return  # "required": any of the tools
    if name not in names:
        raise APIError.invalid_request(
            f"Invalid value for 'tool_choice': the {kind} '{name}' is not in 'tools'.",
            param="tool_choice",
            code="invalid_value",
        )


def parse_completion(
    body: bytes,
    *,
    max_tokens_limit: int | None,
    extra_fields: Collection[str] = frozenset(),
    max_prompt_chars: int | None = None,
) -> CompletionRequest:
    """A ``/v1/completions`` body as a request, or a 400 :class:`APIError` saying what is wrong."""
    request = parse_model(CompletionRequest, body, extra_fields)
    check_max_tokens(request, "max_tokens", max_tokens_limit)
    check_prompt_size(request, "prompt", max_prompt_chars)
    return request


# The free-form fields (JSON Schemas, relayed objects) where a deep nesting lives, "*" standing for a list index:
# a body nested too deeply is refused naming the field, not the path into it.
_FREE_FORM = (
    ("response_format", "json_schema", "schema"),
    ("tools", "*", "function", "parameters"),
    ("tools", "*", "custom"),
    ("functions", "*", "parameters"),
    ("tool_choice", "allowed_tools"),
)


_RequestT = TypeVar("_RequestT", bound=OpenAIRequest)


def parse_model(model: type[_RequestT], body: bytes, extra_fields: Collection[str]) -> _RequestT:
    data = read_object(body, _FREE_FORM)
    # A vendor extra is one the deployment allows and OpenAI's request does not define.
    vendor = {key: data.pop(key) for key in list(data) if key in extra_fields and key not in model.model_fields}
    try:
        request = model.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc.errors(include_url=False, include_input=False), data) from None
    except RecursionError:
        raise APIError.invalid_request("The request body is nested too deeply.", code="invalid_json") from None
    request._vendor_fields = vendor
    return request
