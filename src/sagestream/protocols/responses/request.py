"""The Responses API's request read: a ``/v1/responses`` body into its :mod:`.models` and translated into the
chat-shaped :class:`~sagestream.protocols.openai.request.ChatCompletionRequest` every dialect reads.

Apart from :mod:`sagestream.protocols.responses` so that the function's init does without these models: they
are imported (and built) by the first ``/v1/responses`` request. Each field is translated, echoed in the
response or refused with 400 naming it; a field OpenAI does not define is refused as OpenAI refuses it;
refusals of the chat-shaped request (its validation, a dialect's) are renamed to the Responses field
(:func:`renamed`). A namespace's functions are offered under one chat name each (:func:`chat_tool_name`),
OpenAI's hosted tools not at all (:func:`unoffered_tools`).

Environment variables read: none.

Example::

    >>> request, chat, origins = parse_responses(b'{"input": "Hi", "max_output_tokens": 5}', max_tokens_limit=None)
    >>> chat.plain_messages(), chat.max_tokens, origins
    ([('user', 'Hi')], 5, ['input'])
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from sagestream.errors import APIError
from sagestream.protocols._requests import check_entries, check_max_tokens, check_prompt_size, convert, read_object
from sagestream.protocols.openai.request import (
    ChatCompletionRequest,
    MetadataValue,
    _check_tool_choice,
    _check_tool_results,
    chat_from,
)
from sagestream.protocols.responses.models import (
    _ITEM_TYPES,
    STATELESS,
    FormatJSONObject,
    FormatJSONSchema,
    FormatText,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    InputFile,
    InputImage,
    InputText,
    ItemReference,
    OutputText,
    ReasoningItem,
    Refusal,
    ResponseCreateRequest,
    ToolChoiceAllowed,
    ToolChoiceFunction,
)
from sagestream.protocols.responses.sealing import unseal

__all__ = [
    "HOSTED_TOOLS",
    "NAMESPACE_SEPARATOR",
    "chat_tool_name",
    "namespaced_tools",
    "parse_responses",
    "renamed",
    "unoffered_tools",
]


# The free-form JSON of a Responses request, where a too-deep nesting is named (as chat's are in schema).
_FREE_FORM = (
    ("text", "format", "schema"),
    ("tools", "*", "parameters"),
    ("tools", "*", "format"),
    ("tool_choice", "tools"),
)


def parse_responses(
    body: bytes,
    *,
    max_tokens_limit: int | None,
    extra_fields: Collection[str] = frozenset(),
    max_prompt_chars: int | None = None,
) -> tuple[ResponseCreateRequest, ChatCompletionRequest, list[str]]:
    """A ``/v1/responses`` body as its request, the chat-shaped request it asks for and, per chat message,
    the Responses field it came from (to name it in a refusal); or a 400 naming the field at fault."""
    data = read_object(body, _FREE_FORM)
    _refuse_unknown_items(data)
    fields = ResponseCreateRequest.__struct_encode_fields__
    vendor = {key: data.pop(key) for key in list(data) if key in extra_fields and key not in fields}
    request = convert(ResponseCreateRequest, _typed_items(data))
    check_entries("metadata", request.metadata, MetadataValue)
    request._sent, request._vendor_fields = data, vendor
    request._previous_response_id, request._stored, request._background = None, False, False  # a store's to set
    chat, origins = _translate(request)
    _check_tool_choice(chat)  # as chat answers: required or a named tool needs tools holding it
    try:
        _check_tool_results(chat)  # a function_call_output answering no function_call
    except APIError as err:
        raise renamed(err, origins) from None
    check_max_tokens(chat, "max_output_tokens", max_tokens_limit)
    check_prompt_size(chat, "input", max_prompt_chars)
    chat._vendor_fields = vendor
    return request, chat, origins


def _typed_items(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each input item that has no ``type`` (the SDK's ``EasyInputMessage``) typed ``message``:
    the tag the items' union is told apart by. The body itself is left as the client sent it."""
    items = data.get("input")
    if not isinstance(items, list) or all(not isinstance(i, dict) or "type" in i for i in items):
        return data
    typed = [{"type": "message", **item} if isinstance(item, dict) and "type" not in item else item for item in items]
    return {**data, "input": typed}


def _refuse_unknown_items(data: dict[str, Any]) -> None:
    """An input item of a type this server cannot carry (a hosted tool's call, say), refused by its type."""
    items = data.get("input")
    if not isinstance(items, list):
        return
    for n, item in enumerate(items):
        if isinstance(item, dict) and "type" in item and not isinstance(item["type"], str):
            raise APIError.invalid_request(
                f"Invalid type for 'input.{n}.type': expected one of {', '.join(_ITEM_TYPES)}.",
                param=f"input.{n}.type",
                code="invalid_type",
            )
        if isinstance(item, dict) and isinstance(item.get("type"), str) and item["type"] not in _ITEM_TYPES:
            raise APIError.invalid_request(
                f"Input items of type '{item['type']}' are not supported: this endpoint carries messages, "
                "function_call, function_call_output and reasoning items.",
                param=f"input.{n}.type",
                code="unsupported_parameter",
            )


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
        offered = [chat_tool for n, tool in enumerate(request.tools) for chat_tool in _chat_tools(tool, n)]
        if offered or not request.tools:
            chat["tools"] = offered
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
        return chat_from(chat), origins
    except APIError as err:
        raise renamed(err, origins) from None


# Joins a namespace and a function's name into one chat tool name (chat tool names take [A-Za-z0-9_-]); the
# function_call items of the answer split it again (responses.ResponsesEncoder).
NAMESPACE_SEPARATOR = "__"


# OpenAI's hosted tools: OpenAI runs them on its own servers, and a model container cannot. Clients send them by
# default (Codex: web_search), so they are left out of what the model is offered, said in the response's
# x-sagestream-unoffered-tools header and counted in the log record; a tool_choice that requires one is refused.
HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "computer",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "tool_search",
    }
)


def chat_tool_name(namespace: str | None, name: str) -> str:
    """The chat tool name of a function, in its namespace if it has one.

    >>> chat_tool_name("multi_agent_v1", "spawn_agent"), chat_tool_name(None, "exec_command")
    ('multi_agent_v1__spawn_agent', 'exec_command')
    """
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def unoffered_tools(request: ResponseCreateRequest) -> tuple[str, ...]:
    """The hosted tools of ``request`` left out of what the model is offered."""
    return tuple(str(t.get("type")) for t in request.tools or () if t.get("type") in HOSTED_TOOLS)


def namespaced_tools(request: ResponseCreateRequest) -> dict[str, tuple[str, str]]:
    """Each chat tool name that came from a namespace: its namespace and the function's own name."""
    return {
        chat_tool_name(str(tool["name"]), str(inner.get("name"))): (str(tool["name"]), str(inner.get("name")))
        for tool in request.tools or ()
        if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list)
        for inner in tool["tools"]
        if isinstance(inner, dict)
    }


def _chat_tools(tool: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The chat tools a Responses tool offers the model: one function; a namespace's functions; a hosted tool none."""
    kind = tool.get("type")
    if not isinstance(kind, str):
        # Was a 500 (an unhashable type looked up among the hosted tools); the validation oracle found it.
        raise APIError.invalid_request(
            f"Invalid type for 'tools.{n}.type': expected a string.", param=f"tools.{n}.type", code="invalid_type"
        )
    if kind in HOSTED_TOOLS:
        return []
    if kind != "namespace":
        return [_chat_tool(tool, n)]
    name, inner = tool.get("name"), tool.get("tools")
    if not isinstance(name, str) or not name:
        raise APIError.invalid_request(f"Missing required parameter: 'tools.{n}.name'.", param=f"tools.{n}.name")
    if not isinstance(inner, list):
        raise APIError.invalid_request(f"'tools.{n}.tools' must be a list of function tools.", param=f"tools.{n}.tools")
    extra = set(tool) - {"type", "name", "description", "tools"}
    if extra:
        raise _refuse(f"tools.{n}.{sorted(extra)[0]}", "a namespace holds a name, a description and its tools")
    tools = []
    for m, function in enumerate(inner):
        if not isinstance(function, dict):
            raise APIError.invalid_request(f"'tools.{n}.tools.{m}' must be an object.", param=f"tools.{n}.tools.{m}")
        chat = _chat_tool(function, n, where=f"tools.{n}.tools.{m}")
        chat["function"]["name"] = chat_tool_name(name, chat["function"]["name"])
        described = " ".join(str(d) for d in (tool.get("description"), chat["function"].get("description")) if d)
        if described:
            chat["function"]["description"] = described
        tools.append(chat)
    return tools


def _chat_tool(tool: dict[str, Any], n: int, where: str | None = None) -> dict[str, Any]:
    where = where or f"tools.{n}"
    kind = tool.get("type")
    if kind != "function":
        raise APIError.invalid_request(
            f"Tools of type '{kind}' are not supported: this endpoint runs no hosted tools; declare a 'function' tool.",
            param=f"{where}.type",
            code="unsupported_parameter",
        )
    extra = set(tool) - {"type", "name", "parameters", "strict", "description"}
    for name in sorted(extra):
        if name in ("defer_loading", "allowed_callers", "output_schema") and tool[name] in (None, False):
            continue
        raise _refuse(f"{where}.{name}", "the chat-shaped tool the model container reads has no such field")
    try:
        function = convert(FunctionTool, tool)
    except APIError as err:
        raise renamed(err, [], prefix=where) from None
    definition = {name: value for name, value in function.given().items() if name != "type"}
    return {"type": "function", "function": definition}


def _chat_tool_choice(choice: str | dict[str, Any]) -> Any:
    if isinstance(choice, str):
        return choice
    try:
        if choice.get("type") == "function":
            return {"type": "function", "function": {"name": convert(ToolChoiceFunction, choice).name}}
        if choice.get("type") == "allowed_tools":
            allowed = convert(ToolChoiceAllowed, choice)
            tools = [
                {"type": "function", "function": {"name": t.get("name")}} if t.get("type") == "function" else t
                for t in allowed.tools
            ]
            return {"type": "allowed_tools", "allowed_tools": {"mode": allowed.mode, "tools": tools}}
    except APIError as err:
        raise renamed(err, [], prefix="tool_choice") from None
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
                unsealed = unseal(item.encrypted_content)
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
                "function": {"name": chat_tool_name(item.namespace, item.name), "arguments": item.arguments},
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


def renamed(err: APIError, origins: list[str], *, prefix: str | None = None) -> APIError:
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
