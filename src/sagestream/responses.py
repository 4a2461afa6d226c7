"""OpenAI's Responses API (``POST /v1/responses``), stateless, over the one pipeline.

The request is modelled on the openai SDK's ``openai.types.responses.response_create_params`` field for
field and translated into the chat-shaped :class:`~sagestream.schema.ChatCompletionRequest`, so every
dialect builds its body from it unchanged (:func:`sagestream.dialects.upstream_body`); a refusal there
names the Responses field (``max_output_tokens``, ``text.format``, ``input.2``), not the chat one.
Each field is translated, echoed in the response, or refused by name; a field OpenAI does not define is
refused as OpenAI refuses it (``Unrecognized request argument supplied``).

Nothing is stored: ``previous_response_id``, ``conversation``, ``background`` and ``item_reference``
inputs are refused with 400 naming the field; ``store: true`` (OpenAI's default) is accepted and the
response says ``"store": false``: no object is kept for a later ``GET``, which is a 404 (``app``).

The stream is OpenAI's event sequence, one :class:`ResponsesEncoder` per answer over the same
:class:`~sagestream.dialects.Delta` objects the chat encoder reads: ``response.created`` and
``response.in_progress`` go out in the first delta's write; each output item (``reasoning``, ``message``,
``function_call``) is added when its first fragment arrives, its text or argument fragments go out as they
came (one ``*.delta`` event per container fragment, never re-chunked), and it is closed (``*.done``,
``output_item.done``) when the next item starts or the answer ends. The done events repeat the whole
text, as the protocol asks: that text is kept, so this encoder's memory grows with the answer (bounded
by ``max_output_tokens``), not only with the longest line.

The end: ``response.completed`` with ``usage`` (the counts the container reported; ``null`` if none);
``response.incomplete`` with ``incomplete_details.reason`` ``max_output_tokens`` for ``finish_reason:
length`` and for the function's deadline (the chat route's ``length`` too), ``content_filter`` for
``content_filter``; after any other fault an ``error`` event and ``response.failed`` (invariant 6: no
``response.completed``).

Environment variables read: none.

Example::

    >>> from sagestream.config import Config
    >>> cfg = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "e", "AUTH_MODE": "none"})
    >>> parsed = RESPONSES.parse(b'{"input": "Hi", "instructions": "Be brief."}', cfg)
    >>> parsed.request.plain_messages()
    [('system', 'Be brief.'), ('user', 'Hi')]
    >>> encoder = ResponsesEncoder(parsed.original, model="m", id="resp_1", created_at=0)
    >>> [event.split(b"\\n")[0] for event in encoder.encode(Delta(content="Hi")).split(b"\\n\\n")[:-1]]
    [b'event: response.created', b'event: response.in_progress', b'event: response.output_item.added', \
b'event: response.content_part.added', b'event: response.output_text.delta']
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, Tag, ValidationError

from sagestream.apis import Parsed
from sagestream.dialects import Delta, Usage
from sagestream.errors import DEADLINE_EXCEEDED, APIError
from sagestream.schema import (
    ChatCompletionRequest,
    ReasoningEffort,
    _check_max_tokens,
    _check_prompt_size,
    _has_lone_surrogate,
    _invalid,
    _reason,
    _reject_constant,
)

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = ["RESPONSES", "ResponseCreateRequest", "ResponsesAPI", "ResponsesEncoder", "response_json"]

STATELESS = "this server is stateless and stores no responses or conversations; send the whole conversation in 'input'"


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class _Relayed(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


# --- the request ----------------------------------------------------------------------------------------


class _CacheBreakpoint(_Model):
    mode: Literal["explicit"]
    ttl: Literal["30m", "12h"] | None = None


class InputText(_Model):
    type: Literal["input_text"]
    text: str
    prompt_cache_breakpoint: _CacheBreakpoint | None = None


class InputImage(_Model):
    type: Literal["input_image"]
    detail: Literal["auto", "low", "high", "original"] | None = None
    image_url: str | None = None
    file_id: str | None = None
    prompt_cache_breakpoint: _CacheBreakpoint | None = None


class InputFile(_Model):
    type: Literal["input_file"]
    detail: Literal["auto", "low", "high"] | None = None
    file_data: str | None = None
    file_id: str | None = None
    file_url: str | None = None
    filename: str | None = None
    prompt_cache_breakpoint: _CacheBreakpoint | None = None


class OutputText(_Model):
    """An assistant turn's text, as clients send earlier answers back."""

    type: Literal["output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class Refusal(_Model):
    type: Literal["refusal"]
    refusal: str


ContentPart = Annotated[InputText | InputImage | InputFile | OutputText | Refusal, Field(discriminator="type")]


class MessageItem(_Model):
    """``EasyInputMessage`` (``type`` optional), ``Message`` and an earlier ``ResponseOutputMessage``."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(_Model):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    namespace: str | None = None


class FunctionCallOutputItem(_Model):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ContentPart]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class _SummaryText(_Model):
    type: Literal["summary_text"]
    text: str


class _ReasoningText(_Model):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Model):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[_SummaryText] = []
    content: list[_ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class ItemReference(_Model):
    type: Literal["item_reference"]
    id: str


def _item_kind(item: Any) -> str:
    if isinstance(item, dict):
        return str(item.get("type", "message"))
    return str(getattr(item, "type", "message"))


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[ItemReference, Tag("item_reference")],
    Discriminator(_item_kind),
]
_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning", "item_reference")


class FunctionTool(_Model):
    type: Literal["function"]
    name: str
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class ToolChoiceFunction(_Model):
    type: Literal["function"]
    name: str


class ToolChoiceAllowed(_Model):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]]


class FormatText(_Model):
    type: Literal["text"]


class FormatJSONObject(_Model):
    type: Literal["json_object"]


class FormatJSONSchema(_Model):
    type: Literal["json_schema"]
    name: str
    json_schema: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)


class TextConfig(_Model):
    format: Annotated[FormatText | FormatJSONObject | FormatJSONSchema, Field(discriminator="type")] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(_Model):
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: str | None = None


class StreamOptions(_Model):
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


class ResponseCreateRequest(_Model):
    """``ResponseCreateParams``: every field the SDK can send, each with its JSON type."""

    model: str | None = None
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[dict[str, Any]] | None = None  # read one by one: a hosted tool is refused by its type's name
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_options: _Relayed | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast"] | None = None
    moderation: _Relayed | None = None
    store: bool | None = None
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

    _vendor_fields: dict[str, Any] = PrivateAttr(default_factory=dict)

    def sent(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", exclude_unset=True, by_alias=True)
        return {key: value for key, value in data.items() if value is not None}


# Fields with no meaning here and why; each refused by name when set to anything but its no-op value.
_REFUSED: dict[str, tuple[str, tuple[Any, ...]]] = {
    "previous_response_id": (STATELESS, ()),
    "conversation": (STATELESS, ()),
    "background": (STATELESS + " (a background response is one to fetch later)", (False,)),
    "prompt": ("stored prompts live on OpenAI's platform; " + STATELESS, ()),
    "max_tool_calls": ("it limits OpenAI's hosted tool calls; this endpoint runs no tools itself", ()),
    "context_management": ("context compaction is OpenAI's server-side state; " + STATELESS, ([],)),
    "access_programs": ("an OpenAI-platform access program; a SageMaker endpoint has none", ()),
    "image": ("an OpenAI image-input setting; the model container has no such option", ()),
    "truncation": (
        "the input is never cut to fit here ('disabled'); a too-long input is the model container's to refuse",
        ("disabled",),
    ),
}

_HONOURED = ("message.output_text.logprobs", "reasoning.encrypted_content")
# A reasoning item's encrypted_content, when a client asks for it (store: false clients such as Codex do, to send
# reasoning back on the next turn): the reasoning text itself in base64 behind this prefix. Not encrypted (the
# client was sent the text in the clear anyway): it only has to come back here and be read.
SEALED_REASONING = "sagestream.reasoning.v1:"


def _seal(text: str) -> str:
    return SEALED_REASONING + base64.b64encode(text.encode()).decode()


def _unseal(sealed: str) -> str | None:
    if not sealed.startswith(SEALED_REASONING):
        return None
    try:
        return base64.b64decode(sealed[len(SEALED_REASONING) :], validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None


# The chat-shaped request's field names that a Responses request spells otherwise.
_CHAT_NAMES = {
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "reasoning_effort": "reasoning.effort",
    "verbosity": "text.verbosity",
    "logprobs": "include",
    "stream_options": "stream",
}


def parse_responses(
    body: bytes,
    *,
    max_tokens_limit: int | None,
    extra_fields: Collection[str] = frozenset(),
    max_prompt_chars: int | None = None,
) -> tuple[ResponseCreateRequest, ChatCompletionRequest, list[str]]:
    """A ``/v1/responses`` body as its request, the chat-shaped request it asks for and, per chat message,
    the Responses field it came from (to name it in a refusal); or a 400 naming the field at fault."""
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise APIError.invalid_request(
            f"The request body is not valid JSON ({_reason(exc)}).", code="invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise APIError.invalid_request("The request body must be a JSON object.", code="invalid_type")
    if re.search(rb"\\u[dD][89a-fA-F]", body) and _has_lone_surrogate(data):
        raise APIError.invalid_request(
            "The request body is not valid JSON (a \\u escape is an unpaired UTF-16 surrogate).", code="invalid_json"
        )
    _refuse_unknown_items(data)
    vendor = {
        key: data.pop(key)
        for key in list(data)
        if key in extra_fields and key not in ResponseCreateRequest.model_fields
    }
    try:
        request = ResponseCreateRequest.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc.errors(include_url=False, include_input=False), data) from None
    except RecursionError:
        raise APIError.invalid_request("The request body is nested too deeply.", code="invalid_json") from None
    request._vendor_fields = vendor
    chat, origins = _translate(request)
    _check_max_tokens(chat, "max_output_tokens", max_tokens_limit)
    _check_prompt_size(chat, "input", max_prompt_chars)
    chat._vendor_fields = vendor
    return request, chat, origins


def _refuse_unknown_items(data: dict[str, Any]) -> None:
    """An input item of a type this server cannot carry (a hosted tool's call, say), refused by its type."""
    items = data.get("input")
    if not isinstance(items, list):
        return
    for n, item in enumerate(items):
        if isinstance(item, dict) and isinstance(item.get("type"), str) and item["type"] not in _ITEM_TYPES:
            raise APIError.invalid_request(
                f"Input items of type '{item['type']}' are not supported: this endpoint carries messages, "
                "function_call, function_call_output and reasoning items.",
                param=f"input.{n}.type",
                code="unsupported_parameter",
            )


def _refuse(param: str, reason: str) -> APIError:
    return APIError.invalid_request(
        f"'{param}' is not supported by this endpoint: {reason}.", param=param, code="unsupported_parameter"
    )


def _translate(request: ResponseCreateRequest) -> tuple[ChatCompletionRequest, list[str]]:
    """The chat-shaped request, and for each of its messages the Responses field it came from."""
    sent = request.sent()
    for name, (reason, no_op) in _REFUSED.items():
        if name in sent and sent[name] not in no_op:
            raise _refuse(name, reason)
    if request.input is None:
        raise APIError.invalid_request(
            "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
        )
    chat: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    origins: list[str] = []
    if request.instructions is not None:
        messages.append({"role": "system", "content": request.instructions})
        origins.append("instructions")
    if isinstance(request.input, str):
        messages.append({"role": "user", "content": request.input})
        origins.append("input")
    else:
        _input_messages(request.input, messages, origins)
    if not messages:
        raise APIError.invalid_request("'input' must contain at least one item.", param="input")
    chat["messages"] = messages
    for name in (
        "model",
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "service_tier",
    ):
        if name in sent:
            chat[name] = sent[name]
    for name in ("prompt_cache_options", "moderation"):
        if name in sent:
            chat[name] = sent[name]
    if request.max_output_tokens is not None:
        chat["max_tokens"] = request.max_output_tokens
    if request.stream:
        # The container's usage is what response.completed reports; OpenAI-dialect servers send it when asked.
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    if request.stream_options is not None and request.stream_options.include_obfuscation:
        raise _refuse("stream_options.include_obfuscation", "no obfuscation padding is added to stream events")
    if request.tools is not None:
        chat["tools"] = [_chat_tool(tool, n) for n, tool in enumerate(request.tools)]
    if request.tool_choice is not None:
        chat["tool_choice"] = _chat_tool_choice(request.tool_choice)
    if request.text is not None:
        if request.text.format is not None:
            chat["response_format"] = _chat_format(request.text.format)
        if request.text.verbosity is not None:
            chat["verbosity"] = request.text.verbosity
    if request.reasoning is not None:
        for name in ("context", "mode"):
            if getattr(request.reasoning, name) is not None:
                raise _refuse(f"reasoning.{name}", "an OpenAI-platform reasoning option with no container equivalent")
        if request.reasoning.effort is not None:
            chat["reasoning_effort"] = request.reasoning.effort
        # summary / generate_summary: accepted; the reasoning item carries the model's whole reasoning text.
    for value in request.include or ():
        if value not in _HONOURED:
            raise _refuse(
                "include",
                f"'{value}' cannot be honoured: this endpoint runs no hosted tools and stores no inputs; "
                f"only {' and '.join(repr(v) for v in _HONOURED)} are",
            )
    if "message.output_text.logprobs" in (request.include or ()) or request.top_logprobs:
        chat["logprobs"] = True
        if request.top_logprobs:
            chat["top_logprobs"] = request.top_logprobs
    try:
        return ChatCompletionRequest.model_validate(chat), origins
    except ValidationError as exc:
        raise _renamed(_invalid(exc.errors(include_url=False, include_input=False), chat), origins) from None


def _chat_tool(tool: dict[str, Any], n: int) -> dict[str, Any]:
    kind = tool.get("type")
    if kind != "function":
        raise APIError.invalid_request(
            f"Tools of type '{kind}' are not supported: this endpoint runs no hosted tools; declare a 'function' tool.",
            param=f"tools.{n}.type",
            code="unsupported_parameter",
        )
    extra = set(tool) - {"type", "name", "parameters", "strict", "description"}
    for name in sorted(extra):
        if name in ("defer_loading", "allowed_callers", "output_schema") and tool[name] in (None, False):
            continue
        raise _refuse(f"tools.{n}.{name}", "the chat-shaped tool the model container reads has no such field")
    try:
        function = FunctionTool.model_validate(tool)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        err = _invalid(errors, tool)
        raise _renamed(err, [], prefix=f"tools.{n}") from None
    definition = function.model_dump(exclude={"type"}, exclude_none=True)
    return {"type": "function", "function": definition}


def _chat_tool_choice(choice: str | dict[str, Any]) -> Any:
    if isinstance(choice, str):
        return choice
    try:
        if choice.get("type") == "function":
            return {"type": "function", "function": {"name": ToolChoiceFunction.model_validate(choice).name}}
        if choice.get("type") == "allowed_tools":
            allowed = ToolChoiceAllowed.model_validate(choice)
            tools = [
                {"type": "function", "function": {"name": t.get("name")}} if t.get("type") == "function" else t
                for t in allowed.tools
            ]
            return {"type": "allowed_tools", "allowed_tools": {"mode": allowed.mode, "tools": tools}}
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        raise _renamed(_invalid(errors, choice), [], prefix="tool_choice") from None
    raise APIError.invalid_request(
        f"tool_choice of type '{choice.get('type')}' is not supported: this endpoint runs no hosted tools.",
        param="tool_choice.type",
        code="unsupported_parameter",
    )


def _chat_format(fmt: FormatText | FormatJSONObject | FormatJSONSchema) -> dict[str, Any]:
    if isinstance(fmt, FormatJSONSchema):
        schema: dict[str, Any] = {"name": fmt.name, "schema": fmt.json_schema}
        if fmt.description is not None:
            schema["description"] = fmt.description
        if fmt.strict is not None:
            schema["strict"] = fmt.strict
        return {"type": "json_schema", "json_schema": schema}
    return {"type": fmt.type}


def _chat_part(part: Any, param: str) -> dict[str, Any]:
    if isinstance(part, InputText | OutputText):
        return {"type": "text", "text": part.text}
    if isinstance(part, InputImage):
        if part.image_url is None:
            raise _refuse(f"{param}.file_id", "files are stored on OpenAI's platform; send the image as image_url")
        image: dict[str, Any] = {"url": part.image_url}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if isinstance(part, InputFile):
        if part.file_url is not None:
            raise _refuse(f"{param}.file_url", "the model container fetches no URLs; send the file as file_data")
        file = {k: v for k, v in (("file_data", part.file_data), ("file_id", part.file_id)) if v is not None}
        if part.filename is not None:
            file["filename"] = part.filename
        return {"type": "file", "file": file}
    raise _refuse(f"{param}.type", "a refusal belongs to an assistant message")


def _input_messages(items: list[Any], messages: list[dict[str, Any]], origins: list[str]) -> None:
    """The input items as chat messages: function calls join the assistant turn they follow, reasoning
    goes on the assistant turn that comes after it."""
    reasoning: list[str] = []

    def assistant(n: int) -> dict[str, Any]:
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and not reasoning:
            return last
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
            reasoning.clear()
        messages.append(message)
        origins.append(f"input.{n}")
        return message

    for n, item in enumerate(items):
        if isinstance(item, ItemReference):
            raise _refuse(f"input.{n}", "an item_reference names a stored item; " + STATELESS)
        if isinstance(item, ReasoningItem):
            if item.content or item.summary:
                reasoning.extend(part.text for part in item.content or item.summary)
            elif item.encrypted_content is not None:
                unsealed = _unseal(item.encrypted_content)
                if unsealed is None:
                    raise _refuse(
                        f"input.{n}.encrypted_content",
                        "it is not reasoning this server sent (OpenAI's encrypted reasoning cannot be read here)",
                    )
                reasoning.append(unsealed)
        elif isinstance(item, FunctionCallItem):
            message = assistant(n)
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            message.setdefault("tool_calls", []).append(call)
        elif isinstance(item, FunctionCallOutputItem):
            if isinstance(item.output, str):
                output: Any = item.output
            else:
                output = [_chat_part(p, f"input.{n}.output.{m}") for m, p in enumerate(item.output)]
                if any(p["type"] != "text" for p in output):
                    raise _refuse(f"input.{n}.output", "a tool result carries text only here")
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
            origins.append(f"input.{n}")
        elif item.role == "assistant":
            message = {"role": "assistant", "content": None}
            if reasoning:
                message["reasoning_content"] = "".join(reasoning)
                reasoning.clear()
            if isinstance(item.content, str):
                message["content"] = item.content
            else:
                text = [p.text for p in item.content if isinstance(p, OutputText | InputText)]
                refusals = [p.refusal for p in item.content if isinstance(p, Refusal)]
                for m, p in enumerate(item.content):
                    if not isinstance(p, OutputText | InputText | Refusal):
                        raise _refuse(f"input.{n}.content.{m}", "an assistant turn carries text and refusals")
                message["content"] = "".join(text) if text else None
                if refusals:
                    message["refusal"] = "".join(refusals)
            messages.append(message)
            origins.append(f"input.{n}")
        else:
            content: Any = item.content
            if not isinstance(content, str):
                for m, p in enumerate(content):
                    if isinstance(p, OutputText | Refusal):
                        raise _refuse(f"input.{n}.content.{m}.type", f"{p.type} belongs to an assistant message")
                content = [_chat_part(p, f"input.{n}.content.{m}") for m, p in enumerate(content)]
                if item.role in ("system", "developer") and any(p["type"] != "text" for p in content):
                    raise _refuse(f"input.{n}.content", f"a {item.role} message carries text only")
            messages.append({"role": item.role, "content": content})
            origins.append(f"input.{n}")
    if reasoning:
        # Reasoning with no turn after it still belongs to the conversation: an assistant turn of its own.
        messages.append({"role": "assistant", "content": None, "reasoning_content": "".join(reasoning)})
        origins.append(f"input.{len(items) - 1}")


def _renamed(err: APIError, origins: list[str], *, prefix: str | None = None) -> APIError:
    """``err`` of the chat-shaped request with the Responses field in its ``param`` and message."""
    param = err.param
    if param is None:
        return err
    if prefix is not None:
        new = f"{prefix}.{param}" if param else prefix
    else:
        head, _, rest = param.partition(".")
        if head == "messages" and rest:
            index = rest.partition(".")[0]
            new = origins[int(index)] if index.isdigit() and int(index) < len(origins) else "input"
        elif head == "tools" and rest:
            new = re.sub(r"^tools\.(\d+)\.function", r"tools.\1", param)
        elif head in _CHAT_NAMES:
            new = _CHAT_NAMES[head]
        else:
            new = param
    if new == param:
        return err
    message = err.message.replace(f"'{param}'", f"'{new}'").replace(f"{param} ", f"{new} ", 1)
    renamed = APIError(err.status, message, type=err.type, code=err.code, param=new, headers=err.headers)
    return renamed


# --- the answer ---------------------------------------------------------------------------------------------


def _usage(usage: Usage | None) -> dict[str, Any] | None:
    """The Responses usage object: the counts the container gave, under OpenAI's names; none invented."""
    if usage is None:
        return None
    out: dict[str, Any] = {}
    if usage.prompt_tokens is not None:
        out["input_tokens"] = usage.prompt_tokens
    prompt_details = usage.details.get("prompt_tokens_details")
    if isinstance(prompt_details, dict):
        out["input_tokens_details"] = prompt_details
    out["output_tokens"] = usage.completion_tokens
    completion_details = usage.details.get("completion_tokens_details")
    if isinstance(completion_details, dict):
        out["output_tokens_details"] = completion_details
    if usage.total_tokens is not None:
        out["total_tokens"] = usage.total_tokens
    return out


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


def _not_json(obj: Any) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


# json's C encoder, made once with json.dumps(ensure_ascii=False, separators=(",", ":"))'s options and no
# circular-reference check (events are built from JSON values): JSONEncoder.encode builds one per call, which
# is half of what serialising a small event costs, and a response writes several per item.
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_c_encode_basestring: Any = getattr(json.encoder, "c_encode_basestring", None)
_C_ENCODER: Any = (
    _c_make_encoder(None, _not_json, _c_encode_basestring, None, ":", ",", False, False, True)
    if _c_make_encoder is not None and _c_encode_basestring is not None
    else None
)
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _dumps(obj: Any) -> bytes:
    """``obj`` as compact JSON bytes, as ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))``."""
    if _C_ENCODER is not None:
        return "".join(_C_ENCODER(obj, 0)).encode()
    return _JSON.encode(obj).encode()


# json's own C encoder of one string (what json.dumps(s, ensure_ascii=False) runs), without the Python frame
# of JSONEncoder.encode around it: the text-delta path runs it once per delta.
_json_string: Any = getattr(json.encoder, "c_encode_basestring", None) or json.encoder.encode_basestring


def _echo(request: ResponseCreateRequest) -> dict[str, Any]:
    """The request's settings as the response object repeats them (OpenAI's defaults where not sent)."""
    text = request.text.model_dump(mode="json", by_alias=True, exclude_none=True) if request.text else {}
    text.setdefault("format", {"type": "text"})
    reasoning = request.reasoning.model_dump(mode="json", exclude_none=True) if request.reasoning else {}
    return {
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "metadata": dict(request.metadata or {}),
        "parallel_tool_calls": True if request.parallel_tool_calls is None else request.parallel_tool_calls,
        "previous_response_id": None,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "safety_identifier": request.safety_identifier,
        "prompt_cache_key": request.prompt_cache_key,
        "service_tier": request.service_tier,
        "store": False,  # whatever was asked: nothing is kept
        "temperature": request.temperature,
        "text": text,
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": list(request.tools or []),
        "top_logprobs": request.top_logprobs,
        "top_p": request.top_p,
        "truncation": request.truncation or "disabled",
        "user": request.user,
    }


def _response(
    *,
    id: str,
    created_at: int,
    model: str,
    echo: dict[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: Usage | None = None,
    error: dict[str, Any] | None = None,
    incomplete: str | None = None,
) -> dict[str, Any]:
    return {
        "id": id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "error": error,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "model": model,
        "output": output,
        **echo,
        "usage": _usage(usage),
    }


# finish_reason → the response's status and incomplete_details.reason.
def _ending(finish_reason: str | None) -> tuple[str, str | None]:
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    if finish_reason == "content_filter":
        return "incomplete", "content_filter"
    return "completed", None


def _logprobs(delta_logprobs: dict[str, Any] | None) -> list[Any]:
    """Chat's logprobs content entries have the Responses shape already (token, logprob, bytes, top_logprobs)."""
    if not delta_logprobs:
        return []
    content = delta_logprobs.get("content")
    return list(content) if isinstance(content, list) else []


@dataclass(slots=True)
class _Item:
    """One output item while it is streamed."""

    kind: Literal["message", "refusal", "reasoning", "function_call"]  # a refusal is a message with a refusal part
    id: str
    output_index: int
    parts: list[str]  # its text or argument fragments, for the done events
    call_id: str = ""
    name: str = ""
    tool_index: int | None = None
    logprobs: list[Any] | None = None


class ResponsesEncoder:
    """The SSE events of one streamed response (see the module's docstring for the sequence)."""

    def __init__(
        self,
        request: ResponseCreateRequest,
        *,
        model: str,
        pad_bytes: int = 0,
        id: str | None = None,
        created_at: int | None = None,
    ) -> None:
        self.request = request
        self.model = model
        self.id = id if id is not None else _new_id("resp_")
        self.created_at = created_at if created_at is not None else int(time.time())
        self.usage: Usage | None = None
        self._echo = _echo(request)
        self._echo_json: bytes | None = None
        self._padding = b":" + b" " * (pad_bytes - 3) + b"\n\n" if pad_bytes else b""
        self._seq = 0
        self._started = False
        self._open: _Item | None = None
        self._done: list[dict[str, Any]] = []  # the finished items, in output order, each text a marker
        # Each finished item's marker (as JSON) and its text (as JSON): the done events and the final response
        # repeat an item's whole text, which is serialised once and put in where its marker is.
        self._texts: list[tuple[bytes, bytes]] = []
        self._finish: str | None = None
        self._with_logprobs = bool(request.top_logprobs or "message.output_text.logprobs" in (request.include or ()))
        self._sealed_reasoning = "reasoning.encrypted_content" in (request.include or ())
        # While a message is open: its text-delta event with %d for the sequence number and %s for the text,
        # and the list its text goes to.
        self._text_event: bytes | None = None
        self._text_parts: list[str] = []

    # -- events

    def _event(self, kind: str, body: dict[str, Any]) -> bytes:
        seq = self._seq
        self._seq += 1
        return (
            b"event: " + kind.encode() + b"\ndata: " + _dumps({"type": kind, **body, "sequence_number": seq}) + b"\n\n"
        )

    def _fill(self, data: bytes) -> bytes:
        for marker, text in self._texts:
            data = data.replace(marker, text)
        return data

    def _snapshot(self, status: str, *, error: dict[str, Any] | None = None, incomplete: str | None = None) -> bytes:
        """The response object as it stands, as JSON; the request's settings in it are serialised once."""
        if self._echo_json is None:
            self._echo_json = _dumps(self._echo)[1:-1]
        head = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "model": self.model,
            "output": self._done,
        }
        usage = _dumps(_usage(self.usage))
        return self._fill(_dumps(head)[:-1] + b"," + self._echo_json + b',"usage":' + usage + b"}")

    def _lifecycle(self, kind: str, response: bytes) -> bytes:
        """A ``response.*`` event around the response's JSON."""
        seq = self._seq
        self._seq += 1
        name = kind.encode()
        return (
            b"event: "
            + name
            + b'\ndata: {"type":"'
            + name
            + b'","response":'
            + response
            + b',"sequence_number":'
            + str(seq).encode()
            + b"}\n\n"
        )

    def _item_json(self, item: _Item, status: str, text: str) -> dict[str, Any]:
        if item.kind == "message":
            part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
            if self._with_logprobs:
                part["logprobs"] = item.logprobs or []
            return {"id": item.id, "type": "message", "status": status, "role": "assistant", "content": [part]}
        if item.kind == "refusal":
            part = {"type": "refusal", "refusal": text}
            return {"id": item.id, "type": "message", "status": status, "role": "assistant", "content": [part]}
        if item.kind == "reasoning":
            reasoning: dict[str, Any] = {
                "id": item.id,
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": text}],
                "status": status,
            }
            if self._sealed_reasoning:
                reasoning["encrypted_content"] = None if status == "in_progress" else "\x00sealed" + item.id
            return reasoning
        return {
            "id": item.id,
            "type": "function_call",
            "status": status,
            "call_id": item.call_id,
            "name": item.name,
            "arguments": text,
        }

    def _open_item(self, item: _Item) -> bytes:
        self._open = item
        added = self._item_json(item, "in_progress", "")
        if item.kind != "function_call":
            added["content"] = []  # its part is added by the next event, as OpenAI does
        out = self._event("response.output_item.added", {"output_index": item.output_index, "item": added})
        if item.kind == "message":
            part = {"type": "output_text", "text": "", "annotations": []}
            if self._with_logprobs:
                part["logprobs"] = []
            out += self._event(
                "response.content_part.added",
                {"item_id": item.id, "output_index": item.output_index, "content_index": 0, "part": part},
            )
            if not self._with_logprobs:
                self._text_event = (
                    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"'
                    + item.id.encode()
                    + b'","output_index":'
                    + str(item.output_index).encode()
                    + b',"content_index":0,"delta":%s,"logprobs":[],"sequence_number":%d}\n\n'
                    + self._padding.replace(b"%", b"%%")
                )
                self._text_parts = item.parts
        elif item.kind == "refusal":
            out += self._event(
                "response.content_part.added",
                {
                    "item_id": item.id,
                    "output_index": item.output_index,
                    "content_index": 0,
                    "part": {"type": "refusal", "refusal": ""},
                },
            )
        elif item.kind == "reasoning":
            out += self._event(
                "response.content_part.added",
                {
                    "item_id": item.id,
                    "output_index": item.output_index,
                    "content_index": 0,
                    "part": {"type": "reasoning_text", "text": ""},
                },
            )
        return out

    def _close(self, status: str) -> bytes:
        item = self._open
        if item is None:
            return b""
        self._open = None
        self._text_event = None
        where = {"item_id": item.id, "output_index": item.output_index}
        marker = "\x00" + item.id  # a NUL (escaped in JSON) and a random id: never in the answer by chance
        whole = "".join(item.parts)
        text_json = _json_string(whole).encode()
        self._texts.append((_dumps(marker), text_json))
        if item.kind == "reasoning" and self._sealed_reasoning:
            self._texts.append((_dumps("\x00sealed" + item.id), _dumps(_seal(whole))))
        done = self._item_json(item, status, marker)
        self._done.append(done)
        if item.kind == "message" and not self._with_logprobs:
            return self._message_done(item, status, text_json)
        if item.kind == "message":
            text: dict[str, Any] = {**where, "content_index": 0, "text": done["content"][0]["text"]}
            text["logprobs"] = item.logprobs or []
            out = self._event("response.output_text.done", text)
            out += self._event("response.content_part.done", {**where, "content_index": 0, "part": done["content"][0]})
        elif item.kind == "refusal":
            part = done["content"][0]
            out = self._event("response.refusal.done", {**where, "content_index": 0, "refusal": part["refusal"]})
            out += self._event("response.content_part.done", {**where, "content_index": 0, "part": part})
        elif item.kind == "reasoning":
            part = done["content"][0]
            out = self._event("response.reasoning_text.done", {**where, "content_index": 0, "text": part["text"]})
            out += self._event("response.content_part.done", {**where, "content_index": 0, "part": part})
        else:
            out = self._event(
                "response.function_call_arguments.done", {**where, "name": item.name, "arguments": done["arguments"]}
            )
        out += self._event("response.output_item.done", {"output_index": item.output_index, "item": done})
        return self._fill(out)

    def _message_done(self, item: _Item, status: str, text_json: bytes) -> bytes:
        """The three events that close a message item, written around its text's JSON: the end of every text
        answer, and the longest events of the response (each repeats the whole text)."""
        seq = self._seq
        self._seq = seq + 3
        item_id = b'"' + item.id.encode() + b'"'
        where = b'"item_id":' + item_id + b',"output_index":' + str(item.output_index).encode() + b',"content_index":0'
        part = b'{"type":"output_text","text":' + text_json + b',"annotations":[]}'
        return (
            b'event: response.output_text.done\ndata: {"type":"response.output_text.done",'
            + where
            + b',"text":'
            + text_json
            + b',"logprobs":[],"sequence_number":'
            + str(seq).encode()
            + b'}\n\nevent: response.content_part.done\ndata: {"type":"response.content_part.done",'
            + where
            + b',"part":'
            + part
            + b',"sequence_number":'
            + str(seq + 1).encode()
            + b'}\n\nevent: response.output_item.done\ndata: {"type":"response.output_item.done","output_index":'
            + str(item.output_index).encode()
            + b',"item":{"id":'
            + item_id
            + b',"type":"message","status":"'
            + status.encode()
            + b'","role":"assistant","content":['
            + part
            + b']},"sequence_number":'
            + str(seq + 2).encode()
            + b"}\n\n"
        )

    def _next_index(self) -> int:
        return len(self._done) + (self._open is not None)

    def encode(self, delta: Delta) -> bytes:
        """The events for ``delta``; empty bytes if it carries nothing to send now."""
        if (
            self._text_event is not None
            and delta.content
            and delta.finish_reason is None
            and delta.tool_calls is None
            and delta.reasoning_content is None
            and delta.reasoning is None
            and delta.logprobs is None
            and delta.refusal is None
        ):
            # Most deltas are text while a message is open: the event is a template with its sequence number
            # and the text's JSON string put in, one string encoded instead of the whole event.
            if delta.usage is not None:
                self.usage = delta.usage
            self._text_parts.append(delta.content)
            seq = self._seq
            self._seq = seq + 1
            return self._text_event % (_json_string(delta.content).encode(), seq)
        return self._encode(delta)

    def _encode(self, delta: Delta) -> bytes:
        if delta.usage is not None:
            self.usage = delta.usage
        out = b""
        if not self._started:
            self._started = True
            snapshot = self._snapshot("in_progress")
            out = self._lifecycle("response.created", snapshot) + self._lifecycle("response.in_progress", snapshot)
        reasoning = delta.reasoning_content if delta.reasoning_content is not None else delta.reasoning
        if reasoning:
            if self._open is None or self._open.kind != "reasoning":
                out += self._close("completed")
                out += self._open_item(_Item("reasoning", _new_id("rs_"), self._next_index(), []))
            item = self._open
            assert item is not None
            item.parts.append(reasoning)
            out += self._event(
                "response.reasoning_text.delta",
                {"item_id": item.id, "output_index": item.output_index, "content_index": 0, "delta": reasoning},
            )
        if delta.refusal:
            if self._open is None or self._open.kind != "refusal":
                out += self._close("completed")
                out += self._open_item(_Item("refusal", _new_id("msg_"), self._next_index(), []))
            item = self._open
            assert item is not None
            item.parts.append(delta.refusal)
            out += self._event(
                "response.refusal.delta",
                {"item_id": item.id, "output_index": item.output_index, "content_index": 0, "delta": delta.refusal},
            )
        text = delta.content
        if text:
            if self._open is None or self._open.kind != "message":
                out += self._close("completed")
                out += self._open_item(_Item("message", _new_id("msg_"), self._next_index(), [], logprobs=[]))
            item = self._open
            assert item is not None
            item.parts.append(text)
            logprobs = _logprobs(delta.logprobs)
            if item.logprobs is not None:
                item.logprobs.extend(logprobs)
            out += self._event(
                "response.output_text.delta",
                {
                    "item_id": item.id,
                    "output_index": item.output_index,
                    "content_index": 0,
                    "delta": text,
                    "logprobs": logprobs,
                },
            )
        for call in delta.tool_calls or ():
            out += self._tool_fragment(call)
        if delta.finish_reason is not None:
            self._finish = delta.finish_reason
            status, _ = _ending(delta.finish_reason)
            out += self._close(status)
        return out + self._padding if out else out

    def _tool_fragment(self, call: dict[str, Any]) -> bytes:
        out = b""
        index = call.get("index", 0)
        function = call.get("function") or {}
        item = self._open
        if item is None or item.kind != "function_call" or item.tool_index != index:
            out += self._close("completed")
            call_id = call.get("id") or _new_id("call_")
            item = _Item(
                "function_call",
                _new_id("fc_"),
                self._next_index(),
                [],
                call_id=str(call_id),
                name=str(function.get("name") or ""),
                tool_index=index,
            )
            out += self._open_item(item)
        arguments = function.get("arguments")
        if arguments:
            item.parts.append(arguments)
            out += self._event(
                "response.function_call_arguments.delta",
                {"item_id": item.id, "output_index": item.output_index, "delta": arguments},
            )
        return out

    def done(self) -> bytes:
        """``response.completed``, or ``response.incomplete`` when the answer was cut."""
        out = self._close("completed")
        status, reason = _ending(self._finish)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return out + self._lifecycle(kind, self._snapshot(status, incomplete=reason))

    def error(self, err: APIError) -> bytes:
        """After the first byte: the deadline as ``response.incomplete``; any other fault as OpenAI's ``error``
        event and ``response.failed``."""
        if err.code == DEADLINE_EXCEEDED:
            # The relay closed the answer with finish_reason "length" first: what was written stays correct.
            out = self._close("incomplete")
            return out + self._lifecycle(
                "response.incomplete", self._snapshot("incomplete", incomplete="max_output_tokens")
            )
        out = self._close("incomplete")
        out += self._event("error", {"code": err.code, "message": err.message, "param": err.param})
        code = "rate_limit_exceeded" if err.status == 429 else "server_error"
        failed = self._snapshot("failed", error={"code": code, "message": err.message})
        return out + self._lifecycle("response.failed", failed)


def response_json(
    answer: Delta,
    request: ResponseCreateRequest,
    *,
    model: str,
    id: str | None = None,
    created_at: int | None = None,
) -> bytes:
    """The whole ``response`` object of a non-streamed answer: the same items a stream would have built."""
    status, reason = _ending(answer.finish_reason)
    item_status = status
    output: list[dict[str, Any]] = []
    reasoning = answer.reasoning_content if answer.reasoning_content is not None else answer.reasoning
    if reasoning:
        item: dict[str, Any] = {
            "id": _new_id("rs_"),
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": reasoning}],
            "status": item_status,
        }
        if "reasoning.encrypted_content" in (request.include or ()):
            item["encrypted_content"] = _seal(reasoning)
        output.append(item)
    if answer.refusal:
        refusal = {"type": "refusal", "refusal": answer.refusal}
        output.append(
            {"id": _new_id("msg_"), "type": "message", "status": item_status, "role": "assistant", "content": [refusal]}
        )
    text = answer.content
    if text or not (answer.tool_calls or answer.refusal):
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        if request.top_logprobs or "message.output_text.logprobs" in (request.include or ()):
            part["logprobs"] = _logprobs(answer.logprobs)
        output.append(
            {"id": _new_id("msg_"), "type": "message", "status": item_status, "role": "assistant", "content": [part]}
        )
    for call in answer.tool_calls or ():
        function = call.get("function") or {}
        output.append(
            {
                "id": _new_id("fc_"),
                "type": "function_call",
                "status": item_status,
                "call_id": str(call.get("id") or _new_id("call_")),
                "name": str(function.get("name") or ""),
                "arguments": str(function.get("arguments") or ""),
            }
        )
    return _dumps(
        _response(
            id=id if id is not None else _new_id("resp_"),
            created_at=created_at if created_at is not None else int(time.time()),
            model=model,
            echo=_echo(request),
            status=status,
            output=output,
            usage=answer.usage,
            incomplete=reason,
        )
    )


@dataclass(frozen=True, slots=True)
class ResponsesAPI:
    """``/v1/responses`` on the one pipeline: :class:`~sagestream.apis.ClientAPI`."""

    kind: str = "response"

    def parse(self, raw: bytes, cfg: Config) -> Parsed:
        from sagestream import dialects

        request, chat, origins = parse_responses(
            raw,
            max_tokens_limit=cfg.max_tokens_limit,
            extra_fields=cfg.extra_request_fields,
            max_prompt_chars=cfg.max_prompt_chars,
        )
        try:
            # The dialect's refusals, checked here so that they name the Responses field; app builds the body again.
            dialects.upstream_body(
                cfg.dialect,
                chat,
                prompt_template=cfg.prompt_template,
                stream=bool(chat.stream),
                max_tokens_default=cfg.max_tokens_limit,
            )
        except APIError as err:
            raise _renamed(err, origins) from None
        return Parsed(chat, request)

    def encoder(self, parsed: Parsed, cfg: Config) -> ResponsesEncoder:
        return ResponsesEncoder(parsed.original, model=cfg.model_id, pad_bytes=cfg.sse_pad_bytes)

    def whole(self, answer: Delta, parsed: Parsed, cfg: Config) -> bytes:
        return response_json(answer, parsed.original, model=cfg.model_id)

    def error_body(self, err: APIError) -> bytes:
        return err.json_bytes()


RESPONSES = ResponsesAPI()
