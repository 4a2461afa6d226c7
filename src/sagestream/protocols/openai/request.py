"""The OpenAI requests the relay accepts, validated into msgspec Structs before anything is sent upstream.

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
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import Meta

from sagestream.errors import APIError
from sagestream.protocols._requests import (
    Strict,
    Tagged,
    check_entries,
    check_max_tokens,
    check_prompt_size,
    convert,
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
    "chat_from",
    "chat_request",
    "parse_chat",
    "parse_completion",
]

MAX_STOP_STRINGS = 4
"""OpenAI's own limit on ``stop``."""
MAX_STOP_CHARS = 256
"""Each stop string is matched against the text at every step; a long one costs the container on each token."""

# An object the relay passes on without reading inside it (OpenAI-platform options, JSON Schemas).
Relayed = dict[str, Any]


class CacheBreakpoint(Strict):
    mode: Literal["explicit"]
    ttl: Literal["30m", "12h"] | None = None


class TextPart(Tagged, tag="text"):
    text: str
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class _ImageURL(Strict):
    url: str
    detail: Literal["auto", "low", "high", "original"] | None = None


class ImagePart(Tagged, tag="image_url"):
    image_url: _ImageURL
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class _InputAudio(Strict):
    data: str
    format: Literal["wav", "mp3"]


class AudioPart(Tagged, tag="input_audio"):
    input_audio: _InputAudio
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class _File(Strict):
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None


class FilePart(Tagged, tag="file"):
    file: _File
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class RefusalPart(Tagged, tag="refusal"):
    refusal: str


ContentPart = TextPart | ImagePart | AudioPart | FilePart | RefusalPart


class _FunctionCall(Strict):
    name: str
    arguments: str


class ToolCall(Tagged, tag="function"):
    """An assistant turn's call, as the client sends the history back."""

    id: str
    function: _FunctionCall


class _CustomCall(Strict):
    name: str
    input: str


class CustomToolCall(Tagged, tag="custom"):
    id: str
    custom: _CustomCall


class _Message(Strict, tag_field="role"):
    """What every message has: a role (its tag) and content (a string, content parts or, for some, none)."""

    @property
    def role(self) -> str:
        return str(self.__struct_config__.tag)

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


class SystemMessage(_Message, tag="system"):
    content: str | list[TextPart]
    name: str | None = None


class DeveloperMessage(SystemMessage, tag="developer"):
    """OpenAI's newer name for a system message."""


class UserMessage(_Message, tag="user"):
    content: str | list[ContentPart]
    name: str | None = None


class _AudioRef(Strict):
    id: str


class AssistantMessage(_Message, tag="assistant"):
    # None is what SDKs send back for an assistant turn that only called tools.
    content: str | list[ContentPart] | None = None
    name: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall | CustomToolCall] | None = None
    function_call: _FunctionCall | None = None
    audio: _AudioRef | None = None
    # What a reasoning model thought, sent back by clients that keep it (vLLM's and DeepSeek's names).
    reasoning_content: str | None = None
    reasoning: str | None = None


class ToolMessage(_Message, tag="tool"):
    content: str | list[TextPart]
    tool_call_id: str


class FunctionMessage(_Message, tag="function"):
    content: str | None
    name: str


ChatMessage = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage


class _FunctionDefinition(Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionTool(Tagged, tag="function"):
    function: _FunctionDefinition


class CustomTool(Tagged, tag="custom"):
    custom: Relayed


class _NamedFunction(Strict):
    name: str


class NamedToolChoice(Tagged, tag="function"):
    function: _NamedFunction


class _NamedCustom(Strict):
    name: str


class NamedCustomToolChoice(Tagged, tag="custom"):
    custom: _NamedCustom


class AllowedToolsChoice(Tagged, tag="allowed_tools"):
    allowed_tools: Relayed


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice | NamedCustomToolChoice | AllowedToolsChoice


class _JSONSchema(Strict):
    name: str
    description: str | None = None
    json_schema: dict[str, Any] | None = msgspec.field(default=None, name="schema")
    strict: bool | None = None


class ResponseFormatText(Tagged, tag="text"):
    pass


class ResponseFormatJSONObject(Tagged, tag="json_object"):
    pass


class ResponseFormatJSONSchema(Tagged, tag="json_schema"):
    json_schema: _JSONSchema


ResponseFormat = ResponseFormatText | ResponseFormatJSONObject | ResponseFormatJSONSchema


class StreamOptions(Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class _LegacyFunction(Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


StopString = Annotated[str, Meta(max_length=MAX_STOP_CHARS)]
MetadataValue = Annotated[str, Meta(max_length=512)]
Bias = Annotated[int, Meta(ge=-100, le=100)]
Penalty = Annotated[float, Meta(ge=-2, le=2)]


class OpenAIRequest(Strict, dict=True, kw_only=True):
    """The fields both endpoints share, with OpenAI's ranges.

    ``dict=True``: a request also carries what the parse kept beside its fields (``_sent``, the body's own
    values; ``_vendor_fields``), which are not request fields. ``kw_only``: a subclass's required fields
    (``messages``, ``prompt``) follow these optional ones."""

    model: str | None = None
    max_tokens: Annotated[int, Meta(ge=1)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(ge=0, le=1)] | None = None
    stop: StopString | Annotated[list[StopString], Meta(max_length=MAX_STOP_STRINGS)] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    seed: int | None = None
    user: str | None = None
    n: int | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    # Token id (as a JSON object key) -> bias; OpenAI's range (checked entry by entry, to name the entry).
    logit_bias: dict[str, Any] | None = None

    if TYPE_CHECKING:  # set by the parse beside the fields (dict=True), not fields themselves
        _sent: dict[str, Any]
        _vendor_fields: dict[str, Any]

    @property
    def vendor_fields(self) -> dict[str, Any]:
        """The ``EXTRA_REQUEST_FIELDS`` the client sent, as sent."""
        return dict(getattr(self, "_vendor_fields", {}))

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
        """The fields the client sent with a value (not null), as the JSON values it sent."""
        sent: dict[str, Any] = getattr(self, "_sent", None) or msgspec.to_builtins(self)
        return {key: value for key, value in sent.items() if value is not None}

    def prompt_chars(self) -> int:
        raise NotImplementedError

    def _check(self) -> None:
        """What one field's type cannot say: the rules between fields, as OpenAI states them."""
        if self.stream_options is not None and self.stream is not True:
            # As OpenAI: it shapes a stream, so without one it would be dropped without a word.
            _invalid_value("stream_options", "'stream_options' is only allowed when 'stream' is true")
        if self.n is not None and self.n != 1:
            # One choice per answer is what the relay carries: each delta is the first choice's.
            _invalid_value("n", "only n=1 is supported")
        check_entries("logit_bias", self.logit_bias, Bias)


def _invalid_value(param: str, reason: str) -> None:
    raise APIError.invalid_request(f"Invalid value for '{param}': {reason}.", param=param, code="invalid_value")


# The SDK's Literal values for the OpenAI-platform options; anything else is refused as OpenAI refuses it.
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class ChatCompletionRequest(OpenAIRequest):
    messages: list[ChatMessage]
    # OpenAI's newer name for max_tokens; when both are sent it wins, as it does at OpenAI.
    max_completion_tokens: Annotated[int, Meta(ge=1)] | None = None
    tools: list[FunctionTool | CustomTool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    functions: list[_LegacyFunction] | None = None
    function_call: Literal["none", "auto"] | _NamedFunction | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    reasoning_effort: ReasoningEffort | None = None
    metadata: dict[str, Any] | None = None  # each value a MetadataValue (checked entry by entry)
    store: bool | None = None
    audio: Relayed | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    moderation: Relayed | None = None
    prediction: Relayed | None = None
    prompt_cache_key: str | None = None
    prompt_cache_options: Relayed | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: str | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast"] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    web_search_options: Relayed | None = None

    def _check(self) -> None:
        super()._check()
        check_entries("metadata", self.metadata, MetadataValue)
        if self.top_logprobs and self.logprobs is not True:
            # As OpenAI: top_logprobs is a detail of logprobs, not a way to ask for them.
            _invalid_value("top_logprobs", "'logprobs' must be true when 'top_logprobs' is set")

    @property
    def effective_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def sent_messages(self) -> list[dict[str, Any]]:
        """Each message as the client sent it (its JSON values, nulls included)."""
        sent = getattr(self, "_sent", None)
        if sent is not None:
            return list(sent["messages"])
        return [msgspec.to_builtins(message) for message in self.messages]

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
    prompt: str | Annotated[list[str], Meta(min_length=1)]
    best_of: int | None = None
    echo: bool | None = None
    logprobs: Annotated[int, Meta(ge=0, le=5)] | None = None
    suffix: str | None = None

    def _check(self) -> None:
        super()._check()
        if isinstance(self.prompt, list) and len(self.prompt) > 1:
            _invalid_value(
                "prompt",
                f"{len(self.prompt)} prompts were sent; this endpoint completes one prompt per request "
                "(send a string or a one-element list)",
            )

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
    return chat_request(read_object(body, _FREE_FORM), max_tokens_limit, extra_fields, max_prompt_chars)


def chat_request(
    data: dict[str, Any],
    max_tokens_limit: int | None,
    extra_fields: Collection[str] = frozenset(),
    max_prompt_chars: int | None = None,
) -> ChatCompletionRequest:
    """A chat request from its JSON object (read from a body, or translated from another protocol's)."""
    request = _validated(ChatCompletionRequest, data, extra_fields)
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
        names = {str(tool.custom.get("name", "")) for tool in tools if isinstance(tool, CustomTool)}
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
    request = _validated(CompletionRequest, read_object(body, _FREE_FORM), extra_fields)
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


def _validated(model: type[_RequestT], data: dict[str, Any], extra_fields: Collection[str]) -> _RequestT:
    # A vendor extra is one the deployment allows and OpenAI's request does not define.
    fields = model.__struct_encode_fields__
    vendor = {key: data.pop(key) for key in list(data) if key in extra_fields and key not in fields}
    request = convert(model, data)
    request._check()
    request._sent, request._vendor_fields = data, vendor
    return request


def chat_from(data: dict[str, Any]) -> ChatCompletionRequest:
    """The chat request another protocol's translation built (JSON values), validated as a client's would be;
    the caller checks the limits and names a fault in its own client's terms."""
    return _validated(ChatCompletionRequest, data, ())


# msgspec compiles a model's validation plan (every nested type's) on its first use: here, at init, where a cold
# start pays it once, rather than on the first request's way to its first token (about 2.7 ms of CPU measured).
convert(ChatCompletionRequest, {"messages": [{"role": "user", "content": ""}]})
convert(CompletionRequest, {"prompt": ""})
