"""The Anthropic Messages API (``POST /v1/messages``) over the one pipeline: request, stream, whole answer, errors.

The request is modelled field by field on the anthropic SDK's ``MessageCreateParams`` (plus ``temperature``,
``top_p`` and ``top_k``, which the API still takes and LangChain sends) and translated into the chat-shaped
request the dialects speak, so that :func:`sagestream.dialects.upstream_body` places or refuses each field as
it does for chat completions:

- ``system`` (a string or text blocks) and ``system`` messages → a ``system`` message; text blocks → text
  parts; ``image`` blocks (base64 or URL) → ``image_url`` parts (a data URL for base64);
- ``tool_use`` blocks of an assistant turn → its ``tool_calls`` (``input`` as JSON arguments); ``tool_result``
  blocks → ``tool`` messages, before the rest of their user turn (``is_error`` puts ``Error:`` before the
  result: a chat template has no other way to tell the model the call failed); ``thinking`` blocks sent
  back → ``reasoning_content`` (their ``signature`` is accepted and not checked: none is issued here);
- ``tools`` (custom) → function tools, ``input_schema`` as ``parameters``; ``tool_choice`` ``auto``,
  ``any`` (→ ``required``), ``tool`` (→ the named function), ``none``; ``disable_parallel_tool_use`` →
  ``parallel_tool_calls: false``;
- ``stop_sequences`` → ``stop``; ``metadata.user_id`` → ``user``; ``output_config.effort`` →
  ``reasoning_effort``; ``output_config.format`` → ``response_format`` (``json_schema``, strict);
  ``top_k`` → the vendor field ``top_k`` when ``EXTRA_REQUEST_FIELDS`` lists it; ``thinking``
  ``enabled`` → vLLM's ``thinking_token_budget`` when ``EXTRA_REQUEST_FIELDS`` lists it (openai dialect);
- hints the containers follow on their own are accepted and send nothing: ``cache_control`` (vLLM and
  SGLang cache prefixes themselves), ``service_tier`` (there is one tier), ``speed: "standard"``,
  ``thinking`` ``adaptive`` / ``disabled`` (a reasoning container thinks as it is deployed to; its thoughts
  arrive as ``thinking`` blocks);
- everything else the SDK can send is refused by name: server tools, ``container``, ``diagnostics``,
  ``inference_geo``, ``user_profile_id``, ``workspace_id``, ``speed: "fast"``, ``redacted_thinking`` and the
  other block types, a last ``assistant`` turn (prefill: a chat template starts a new turn after it).

A refusal of the dialects (``'user' is not supported ...``) names the field as the client sent it
(``metadata.user_id``): :attr:`~sagestream.apis.Parsed.names`. Errors take Anthropic's shape,
``{"type": "error", "error": {"type", "message"}}``, with Anthropic's types for each status.

The stream is Anthropic's events, written as the deltas arrive: ``message_start`` with the first delta,
then per content block ``content_block_start``, its deltas (``text_delta``, ``thinking_delta``,
``input_json_delta`` with each argument fragment as the container sent it) and ``content_block_stop``;
``message_delta`` (``stop_reason``, usage) and ``message_stop`` at the end. Usage the container did not
report is ``null``, never 0 (``input_tokens`` is ``null`` in ``message_start``: no container reports it
before its first token; ``message_delta`` carries it when known).

Environment variables read: none.

Example::

    >>> from sagestream.config import Config
    >>> cfg = Config(endpoint_name="llm", model_id="m")
    >>> parsed = MESSAGES.parse(b'{"model": "m", "max_tokens": 5, "system": "Be brief.", '
    ...                         b'"messages": [{"role": "user", "content": "Hi"}]}', cfg)
    >>> parsed.request.plain_messages(), parsed.request.max_tokens
    ([('system', 'Be brief.'), ('user', 'Hi')], 5)
    >>> encoder = MESSAGES.encoder(parsed, cfg)
    >>> print(encoder.encode(Delta(content="Hello")).decode().split("\\n\\n")[2])
    event: content_block_delta
    data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}
    >>> MESSAGES.error_body(APIError.unauthorized())
    b'{"type":"error","error":{"type":"authentication_error","message":"Missing or invalid API key."}}'
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sagestream.apis import Parsed, in_client_terms
from sagestream.dialects import Delta, Usage
from sagestream.errors import DEADLINE_EXCEEDED, APIError
from sagestream.schema import ChatCompletionRequest, parse_chat
from sagestream.sse import MIN_PAD_BYTES

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = ["MESSAGES", "MessagesAPI", "MessagesEncoder", "MessagesRequest", "message_json"]

# anthropic-beta values whose behaviour the relay has anyway: tool input streamed fragment by fragment as
# the container writes it; thinking between tool calls, in the order the container sends it.
HONOURED_BETAS = frozenset({"fine-grained-tool-streaming-2025-05-14", "interleaved-thinking-2025-05-14"})
# Headers the SDK sends for its own parameters, which choose things this function does not have.
REFUSED_HEADERS = {
    "anthropic-workspace-id": "there are no workspaces here (the deployment is the workspace)",
    "anthropic-user-profile-id": "there are no user profiles here",
}

# Anthropic's error type for each status (docs: "Errors"); any other 4xx is invalid_request_error.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# Why a field cannot be honoured, for the fields that are refused whenever they are sent.
_NOT_HERE = {
    "container": "there are no code-execution containers here",
    "diagnostics": "no prompt-cache diagnostics are kept",
    "inference_geo": "the model runs where its SageMaker endpoint is",
    "user_profile_id": "there are no user profiles here",
    "workspace_id": "there are no workspaces here",
}


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class CacheControl(_Model):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class Metadata(_Model):
    user_id: str | None = None


class _OutputFormat(_Model):
    type: Literal["json_schema"]
    # "schema" is a BaseModel attribute too; the alias keeps the wire name.
    json_schema: dict[str, Any] = Field(alias="schema")

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)


class OutputConfig(_Model):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: _OutputFormat | None = None


class MessagesRequest(_Model):
    """``MessageCreateParams``, field by field; blocks, tools, tool choice and thinking are read on translation."""

    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1)]
    messages: list[dict[str, Any]]
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    temperature: Annotated[float, Field(ge=0, le=1)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    metadata: Metadata | None = None
    output_config: OutputConfig | None = None
    cache_control: CacheControl | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    speed: Literal["standard", "fast"] | None = None
    container: Any = None
    diagnostics: Any = None
    inference_geo: str | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None


# --- blocks ---------------------------------------------------------------------------------------------


class TextBlock(_Model):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: list[dict[str, Any]] | None = None


class _Base64Source(_Model):
    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class _URLSource(_Model):
    type: Literal["url"]
    url: str


class _FileSource(_Model):
    type: Literal["file"]
    file_id: str


class ImageBlock(_Model):
    type: Literal["image"]
    source: Annotated[_Base64Source | _URLSource | _FileSource, Field(discriminator="type")]
    cache_control: CacheControl | None = None
    transformations: dict[str, Any] | None = None


class ToolUseBlock(_Model):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: CacheControl | None = None
    caller: dict[str, Any] | None = None
    toolset_name: str | None = None


class ToolResultBlock(_Model):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None
    cache_control: CacheControl | None = None
    toolset_name: str | None = None


class ThinkingBlock(_Model):
    type: Literal["thinking"]
    thinking: str
    signature: str


_BLOCKS: dict[str, type[_Model]] = {
    "text": TextBlock,
    "image": ImageBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
    "thinking": ThinkingBlock,
}


class Tool(_Model):
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


class _ToolChoiceAuto(_Model):
    type: Literal["auto"]
    disable_parallel_tool_use: bool | None = None


class _ToolChoiceAny(_Model):
    type: Literal["any"]
    disable_parallel_tool_use: bool | None = None


class _ToolChoiceTool(_Model):
    type: Literal["tool"]
    name: str
    disable_parallel_tool_use: bool | None = None


class _ToolChoiceNone(_Model):
    type: Literal["none"]


_ToolChoices = _ToolChoiceAuto | _ToolChoiceAny | _ToolChoiceTool | _ToolChoiceNone


class ToolChoice(_Model):
    tool_choice: Annotated[_ToolChoices, Field(discriminator="type")]


class Thinking(_Model):
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: Annotated[int, Field(ge=1024)] | None = None
    display: Literal["summarized", "omitted"] | None = None


# --- errors ---------------------------------------------------------------------------------------------


def _object(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise APIError.invalid_request("The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise APIError.invalid_request("The request body must be a JSON object.")
    return data


def _refuse(path: str, reason: str) -> NoReturn:
    raise APIError.invalid_request(f"'{path}' is not supported by this endpoint: {reason}.", param=path)


def _validated(model: type[_Model], data: Any, path: str) -> Any:
    """``data`` as ``model``, or a 400 naming the field at fault under ``path``, in Anthropic's words."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(p for p in (path, _sent_path(error["loc"], data, error["type"] == "missing")) if p)
        if error["type"] == "extra_forbidden":
            raise APIError.invalid_request(f"{where}: Extra inputs are not permitted", param=where) from None
        if error["type"] == "missing":
            raise APIError.invalid_request(f"{where}: Field required", param=where) from None
        raise APIError.invalid_request(f"{where}: {error['msg']}", param=where) from None


def _sent_path(loc: tuple[int | str, ...], data: Any, missing: bool) -> str:
    """The keys and indexes of ``loc`` that are in the request as sent: pydantic's location also names union
    members (``str``) and discriminator tags, which are not fields.

    >>> _sent_path(("source", "url", "url"), {"source": {"type": "url", "url": 3}}, False)
    'source.url'
    """
    parts: list[str] = []
    here = data
    for n, part in enumerate(loc):
        in_list = isinstance(here, list) and isinstance(part, int) and 0 <= part < len(here)
        if in_list or (isinstance(here, dict) and part in here):
            parts.append(str(part))
            here = here[part]
        elif missing and n == len(loc) - 1:
            parts.append(str(part))  # a missing field is not in the request: name it all the same
    return ".".join(parts)


# --- translation ----------------------------------------------------------------------------------------


@dataclass
class _Translation:
    """The chat request being built, and the client's name for each of its paths."""

    messages: list[dict[str, Any]]
    names: dict[str, str]

    def add(self, message: dict[str, Any], path: str) -> int:
        self.names[f"messages.{len(self.messages)}"] = path
        self.messages.append(message)
        return len(self.messages) - 1


def _text_part(block: TextBlock, path: str) -> dict[str, Any]:
    if block.citations:
        _refuse(f"{path}.citations", "citations are Anthropic's own document search")
    return {"type": "text", "text": block.text}


def _text_parts(blocks: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    return [_text_part(_validated(TextBlock, raw, f"{path}.{k}"), f"{path}.{k}") for k, raw in enumerate(blocks)]


def _image_part(block: ImageBlock, path: str) -> dict[str, Any]:
    if block.transformations:
        _refuse(f"{path}.transformations", "images reach the container as sent")
    source = block.source
    if isinstance(source, _FileSource):
        _refuse(f"{path}.source", "there is no Files API here; send the image as base64 or a URL")
    if isinstance(source, _URLSource):
        return {"type": "image_url", "image_url": {"url": source.url}}
    return {"type": "image_url", "image_url": {"url": f"data:{source.media_type};base64,{source.data}"}}


def _tool_result(block: ToolResultBlock, path: str) -> dict[str, Any]:
    if block.toolset_name is not None:
        _refuse(f"{path}.toolset_name", "there are no toolsets here")
    content = block.content
    if isinstance(content, list):
        text = "\n".join(part["text"] for part in _text_parts(content, f"{path}.content"))
    else:
        text = content or ""
    if block.is_error:
        text = "Error: " + text
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": text}


def _block(raw: Any, path: str, role: str) -> _Model:
    kind = raw.get("type") if isinstance(raw, dict) else None
    model = _BLOCKS.get(kind) if isinstance(kind, str) else None
    if model is None:
        if not isinstance(kind, str):
            raise APIError.invalid_request(f"{path}.type: Field required", param=f"{path}.type")
        _refuse(f"{path}", f"'{kind}' blocks are not carried to the model container")
    block: _Model = _validated(model, raw, path)
    wrong = {"user": ("tool_use", "thinking"), "assistant": ("tool_result",)}.get(role, ())
    if kind in wrong:
        raise APIError.invalid_request(f"{path}: a '{kind}' block cannot be in a {role} turn.", param=path)
    return block


def _user_turn(content: list[dict[str, Any]], path: str, out: _Translation) -> None:
    parts: list[dict[str, Any]] = []
    names: dict[int, str] = {}
    for k, raw in enumerate(content):
        where = f"{path}.content.{k}"
        block = _block(raw, where, "user")
        if isinstance(block, ToolResultBlock):
            out.add(_tool_result(block, where), where)
        elif isinstance(block, TextBlock):
            names[len(parts)] = where
            parts.append(_text_part(block, where))
        elif isinstance(block, ImageBlock):
            names[len(parts)] = where
            parts.append(_image_part(block, where))
    if parts:
        n = out.add({"role": "user", "content": parts}, path)
        out.names.update({f"messages.{n}.content.{m}": where for m, where in names.items()})


def _assistant_turn(content: list[dict[str, Any]], path: str, out: _Translation) -> None:
    message: dict[str, Any] = {"role": "assistant"}
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    thoughts: list[str] = []
    names: dict[str, str] = {}
    for k, raw in enumerate(content):
        where = f"{path}.content.{k}"
        block = _block(raw, where, "assistant")
        if isinstance(block, TextBlock):
            names[f"content.{len(parts)}"] = where
            parts.append(_text_part(block, where))
        elif isinstance(block, ImageBlock):
            names[f"content.{len(parts)}"] = where
            parts.append(_image_part(block, where))
        elif isinstance(block, ToolUseBlock):
            if block.caller is not None and block.caller.get("type") != "direct":
                _refuse(f"{where}.caller", "there is no code execution here to call tools")
            if block.toolset_name is not None:
                _refuse(f"{where}.toolset_name", "there are no toolsets here")
            names.setdefault("tool_calls", where)
            names[f"tool_calls.{len(calls)}"] = where
            arguments = json.dumps(block.input, ensure_ascii=False, separators=(",", ":"))
            calls.append({"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}})
        elif isinstance(block, ThinkingBlock):
            names.setdefault("reasoning_content", where)
            thoughts.append(block.thinking)
    if len(parts) == 1 and parts[0]["type"] == "text":
        message["content"] = parts[0]["text"]
        names["content"] = names.pop("content.0")
    elif parts:
        message["content"] = parts
    if calls:
        message["tool_calls"] = calls
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    n = out.add(message, path)
    out.names.update({f"messages.{n}.{name}": where for name, where in names.items()})


def _messages(request: MessagesRequest, out: _Translation) -> None:
    if isinstance(request.system, str):
        out.add({"role": "system", "content": request.system}, "system")
    elif request.system is not None:
        out.add({"role": "system", "content": _text_parts(request.system, "system")}, "system")
    if not request.messages:
        raise APIError.invalid_request("messages: at least one message is required", param="messages")
    for i, raw in enumerate(request.messages):
        path = f"messages.{i}"
        if not isinstance(raw, dict):
            raise APIError.invalid_request(f"{path}: Input should be an object", param=path)
        role, content = raw.get("role"), raw.get("content")
        extra = set(raw) - {"role", "content"}
        if extra:
            name = f"{path}.{sorted(extra)[0]}"
            raise APIError.invalid_request(f"{name}: Extra inputs are not permitted", param=name)
        if role not in ("user", "assistant", "system"):
            raise APIError.invalid_request(
                f"{path}.role: Input should be 'user', 'assistant' or 'system'", param=f"{path}.role"
            )
        if "content" not in raw:
            raise APIError.invalid_request(f"{path}.content: Field required", param=f"{path}.content")
        if isinstance(content, str):
            out.add({"role": role, "content": content}, path)
        elif not isinstance(content, list):
            raise APIError.invalid_request(
                f"{path}.content: Input should be a string or a list of blocks", param=f"{path}.content"
            )
        elif not content:
            raise APIError.invalid_request(f"{path}.content: List should have at least 1 item", param=f"{path}.content")
        elif role == "system":
            out.add({"role": "system", "content": _text_parts(content, f"{path}.content")}, path)
        elif role == "user":
            _user_turn(content, path, out)
        else:
            _assistant_turn(content, path, out)
    if request.messages[-1].get("role") == "assistant":
        last = f"messages.{len(request.messages) - 1}"
        _refuse(last, "a last assistant turn asks to continue it (prefill); a chat template starts a new turn")


def _tools(request: MessagesRequest) -> list[dict[str, Any]]:
    tools = []
    for n, raw in enumerate(request.tools or []):
        path = f"tools.{n}"
        if isinstance(raw, dict) and raw.get("type") not in (None, "custom"):
            _refuse(
                f"{path}.type", f"'{raw.get('type')}' is one of Anthropic's server tools; only custom tools run here"
            )
        tool = _validated(Tool, raw, path)
        if tool.allowed_callers is not None and tool.allowed_callers != ["direct"]:
            _refuse(f"{path}.allowed_callers", "there is no code execution here to call tools")
        if tool.defer_loading:
            _refuse(f"{path}.defer_loading", "there is no tool search here: every tool is in the prompt")
        if tool.eager_input_streaming is False:
            _refuse(f"{path}.eager_input_streaming", "tool input is always streamed as the container writes it")
        if tool.input_examples:
            _refuse(f"{path}.input_examples", "a function tool has no place for examples")
        function: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
        if tool.description is not None:
            function["description"] = tool.description
        if tool.strict is not None:
            function["strict"] = tool.strict
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(request: MessagesRequest, body: dict[str, Any]) -> None:
    if request.tool_choice is None:
        return
    choice = _validated(ToolChoice, {"tool_choice": request.tool_choice}, "").tool_choice
    if isinstance(choice, _ToolChoiceAuto):
        body["tool_choice"] = "auto"
    elif isinstance(choice, _ToolChoiceAny):
        body["tool_choice"] = "required"
    elif isinstance(choice, _ToolChoiceTool):
        body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    else:
        body["tool_choice"] = "none"
    if getattr(choice, "disable_parallel_tool_use", None):
        body["parallel_tool_calls"] = False


def _thinking(request: MessagesRequest, cfg: Config, body: dict[str, Any], *, counting: bool) -> None:
    if request.thinking is None:
        return
    thinking = _validated(Thinking, request.thinking, "thinking")
    if thinking.display == "omitted":
        _refuse("thinking.display", "the container's thoughts are sent as it writes them")
    if thinking.type == "between_tools":
        _refuse("thinking.type", "'between_tools' thinking cannot be asked of a model container")
    if thinking.type != "enabled":
        return  # adaptive, disabled: the container thinks as it is deployed to
    if thinking.budget_tokens is None:
        raise APIError.invalid_request("thinking.budget_tokens: Field required", param="thinking.budget_tokens")
    if thinking.budget_tokens >= request.max_tokens and not counting:
        raise APIError.invalid_request(
            "`max_tokens` must be greater than `thinking.budget_tokens`.", param="thinking.budget_tokens"
        )
    if cfg.dialect != "openai" or "thinking_token_budget" not in cfg.extra_request_fields:
        _refuse(
            "thinking",
            f"the model container (UPSTREAM_FORMAT={cfg.dialect}) has no reasoning switch this deployment "
            "allows (vLLM's thinking_token_budget, with UPSTREAM_FORMAT=openai and "
            "EXTRA_REQUEST_FIELDS=thinking_token_budget)",
        )
    body["thinking_token_budget"] = thinking.budget_tokens


def translate(
    request: MessagesRequest, cfg: Config, *, counting: bool = False
) -> tuple[dict[str, Any], dict[str, str]]:
    """The chat request body for ``request``, and the client's name for each of its renamed paths
    (``counting``: for ``count_tokens``, whose ``max_tokens`` is not the client's)."""
    for name, reason in _NOT_HERE.items():
        if getattr(request, name) is not None:
            _refuse(name, reason)
    if request.speed == "fast":
        _refuse("speed", "the endpoint has one speed")
    out = _Translation([], {"user": "metadata.user_id", "stop": "stop_sequences"})
    _messages(request, out)
    body: dict[str, Any] = {"messages": out.messages, "max_tokens": request.max_tokens}
    if request.model is not None:
        body["model"] = request.model
    for name in ("temperature", "top_p"):
        if getattr(request, name) is not None:
            body[name] = getattr(request, name)
    if request.top_k is not None:
        if "top_k" not in cfg.extra_request_fields:
            _refuse("top_k", "the deployment does not pass top_k to its container (EXTRA_REQUEST_FIELDS=top_k)")
        body["top_k"] = request.top_k
    if request.stop_sequences is not None:
        body["stop"] = request.stop_sequences
    if request.stream:
        # Usage for message_delta: vLLM reports it only when asked.
        body["stream"], body["stream_options"] = True, {"include_usage": True}
    if request.tools is not None:
        body["tools"] = _tools(request)
        out.names.update(
            {f"tools.{n}.function.parameters": f"tools.{n}.input_schema" for n in range(len(body["tools"]))}
        )
    _tool_choice(request, body)
    if request.metadata is not None and request.metadata.user_id is not None:
        body["user"] = request.metadata.user_id
    if request.output_config is not None:
        if request.output_config.effort is not None:
            body["reasoning_effort"] = request.output_config.effort
            out.names["reasoning_effort"] = "output_config.effort"
        if request.output_config.format is not None:
            schema = request.output_config.format.json_schema
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": schema, "strict": True},
            }
            out.names["response_format"] = "output_config.format"
    _thinking(request, cfg, body, counting=counting)
    out.names["thinking_token_budget"] = "thinking"  # noqa: S105 (a field name)
    return body, out.names


# --- the API --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessagesAPI:
    """Anthropic's ``/v1/messages``."""

    kind: str = "messages"

    def check_headers(self, headers: Mapping[str, str]) -> None:
        for name, reason in REFUSED_HEADERS.items():
            if headers.get(name):
                _refuse(name, reason)
        betas = [b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()]
        for beta in betas:
            if beta not in HONOURED_BETAS:
                raise APIError.invalid_request(
                    f"anthropic-beta: '{beta}' cannot be honoured by this endpoint; it honours "
                    f"{', '.join(sorted(HONOURED_BETAS))}.",
                    param="anthropic-beta",
                )

    def parse(self, raw: bytes, cfg: Config) -> Parsed:
        return self._parse(_object(raw), cfg)

    def _parse(self, data: dict[str, Any], cfg: Config, *, counting: bool = False) -> Parsed:
        request = _validated(MessagesRequest, data, "")
        body, names = translate(request, cfg, counting=counting)
        extra = frozenset(k for k in ("top_k", "thinking_token_budget") if k in body)
        try:
            chat = parse_chat(
                json.dumps(body, ensure_ascii=False).encode(),
                max_tokens_limit=cfg.max_tokens_limit,
                extra_fields=extra,
                max_prompt_chars=cfg.max_prompt_chars,
            )
        except APIError as err:
            raise in_client_terms(err, names) from None
        return Parsed(chat, request, names)

    def count_request(self, raw: bytes, cfg: Config) -> Parsed:
        """A ``count_tokens`` body (``MessageCountTokensParams``: no ``max_tokens``, no ``stream``) as the
        request whose one-token answer reports the prompt's count."""
        data = _object(raw)
        for name in ("max_tokens", "stream", "stop_sequences", "temperature", "top_p", "top_k", "metadata"):
            if name in data:
                raise APIError.invalid_request(f"{name}: Extra inputs are not permitted", param=name)
        data["max_tokens"] = 1
        return self._parse(data, cfg, counting=True)

    def encoder(self, parsed: Parsed, cfg: Config) -> MessagesEncoder:
        return MessagesEncoder(model=cfg.model_id, stop_sequences=_stops(parsed), pad_bytes=cfg.sse_pad_bytes)

    def whole(self, answer: Delta, parsed: Parsed, cfg: Config) -> bytes:
        return message_json(answer, model=cfg.model_id, stop_sequences=_stops(parsed))

    def error_body(self, err: APIError) -> bytes:
        return _dumps(error_object(err))


MESSAGES = MessagesAPI()


def _stops(parsed: Parsed) -> tuple[str, ...]:
    request = parsed.request
    assert isinstance(request, ChatCompletionRequest)
    return tuple(request.stop_sequences or ())


def error_object(err: APIError) -> dict[str, Any]:
    kind = ERROR_TYPES.get(err.status) or ("invalid_request_error" if err.status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def _event(name: str, obj: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _dumps(obj) + b"\n\n"


# A JSON string as json.dumps(..., ensure_ascii=False) writes it, by an encoder made once, not per delta.
_STRING = json.JSONEncoder(ensure_ascii=False)
_MESSAGE_STOP = _event("message_stop", {"type": "message_stop"})


def _new_id() -> str:
    return "msg_" + uuid.uuid4().hex


def _stop_reason(
    finish_reason: str | None, text_tail: str, stops: tuple[str, ...], refused: bool
) -> tuple[str, str | None]:
    """Anthropic's ``stop_reason`` (and ``stop_sequence``) for the container's ``finish_reason``.

    Which stop sequence ended the text is known only where the container leaves it in (TGI, LMI do); vLLM
    takes it out, and such a stop reads as ``end_turn``.
    """
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason in ("tool_calls", "function_call"):
        return "tool_use", None
    if refused or finish_reason == "content_filter":
        return "refusal", None
    for stop in stops:
        if text_tail.endswith(stop):
            return "stop_sequence", stop
    return "end_turn", None


def _usage(usage: Usage | None) -> dict[str, Any]:
    """Anthropic's usage: what the container counted; a count it did not give is null, never 0."""
    if usage is None:
        return {"input_tokens": None, "output_tokens": None}
    return {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens}


Block = Literal["text", "thinking", "tool_use"]


class MessagesEncoder:
    """The events of one streamed message (see the module docstring for their order)."""

    def __init__(
        self, *, model: str, stop_sequences: tuple[str, ...] = (), pad_bytes: int = 0, id: str | None = None
    ) -> None:
        if pad_bytes and pad_bytes < MIN_PAD_BYTES:
            raise ValueError(f"pad_bytes must be 0 or at least {MIN_PAD_BYTES}")
        # SSE_PAD_BYTES as on the OpenAI routes: a comment after each delta's events, which the SDKs skip.
        self._padding = b":" + b" " * (pad_bytes - 3) + b"\n\n" if pad_bytes else b""
        self.model = model
        self.id = id if id is not None else _new_id()
        self.stops = stop_sequences
        self._tail_chars = max((len(s) for s in stop_sequences), default=0)
        self.tail = ""
        self.usage: Usage | None = None
        self.started = False
        self.block: Block | None = None
        self.index = -1  # of the open (or last) content block
        self.tool_index: Any = None  # the container's index of the call whose block is open
        self.finish_reason: str | None = None
        self.refused = False
        # The text_delta event of the open text block, cut where its text goes.
        self._text_event: tuple[bytes, bytes] = (b"", b"")

    def encode(self, delta: Delta) -> bytes:
        if (
            self.block == "text"
            and delta.content
            and delta.finish_reason is None
            and delta.tool_calls is None
            and delta.reasoning_content is None
            and delta.reasoning is None
            and delta.refusal is None
        ):
            # Most deltas are text and nothing else: the open block's event with the text put in.
            if delta.usage is not None:
                self.usage = delta.usage
            if self._tail_chars:
                self.tail = (self.tail + delta.content)[-self._tail_chars :]
            head, tail = self._text_event
            return head + _STRING.encode(delta.content).encode() + tail
        data = self._encode(delta)
        return data + self._padding if data else data

    def _encode(self, delta: Delta) -> bytes:
        out: list[bytes] = []
        if delta.usage is not None:
            self.usage = delta.usage
        if not self.started:
            self.started = True
            message: dict[str, Any] = {
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": None, "output_tokens": 0},
            }
            out.append(_event("message_start", {"type": "message_start", "message": message}))
        thought = delta.reasoning_content if delta.reasoning_content is not None else delta.reasoning
        if thought:
            self._open(out, "thinking", {"type": "thinking", "thinking": "", "signature": ""})
            out.append(self._delta({"type": "thinking_delta", "thinking": thought}))
        text = delta.content + (delta.refusal or "")
        self.refused = self.refused or bool(delta.refusal)
        if text:
            self._open(out, "text", {"type": "text", "text": ""})
            if self._tail_chars:
                self.tail = (self.tail + text)[-self._tail_chars :]
            out.append(self._delta({"type": "text_delta", "text": text}))
        for call in delta.tool_calls or ():
            function = call.get("function") or {}
            if call.get("id") or self.block != "tool_use" or call.get("index", self.tool_index) != self.tool_index:
                block: dict[str, Any] = {
                    "type": "tool_use",
                    "id": call.get("id") or "toolu_" + uuid.uuid4().hex[:24],
                    "name": function.get("name") or "",
                    "input": {},
                }
                self._open(out, "tool_use", block, force=True)
                self.tool_index = call.get("index")
            arguments = function.get("arguments")
            if arguments:
                out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        if delta.finish_reason is not None:
            self._close(out)
            self.finish_reason = delta.finish_reason
        return b"".join(out)

    def _open(self, out: list[bytes], block: Block, start: dict[str, Any], *, force: bool = False) -> None:
        if self.block == block and not force:
            return
        self._close(out)
        self.index += 1
        self.block = block
        out.append(
            _event("content_block_start", {"type": "content_block_start", "index": self.index, "content_block": start})
        )
        if block == "text":
            # The event _delta() would write, byte for byte (test_messages checks), cut where the text goes.
            head = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,' % self.index
            self._text_event = (head + b'"delta":{"type":"text_delta","text":', b"}}\n\n" + self._padding)

    def _close(self, out: list[bytes]) -> None:
        if self.block is not None:
            out.append(_event("content_block_stop", {"type": "content_block_stop", "index": self.index}))
            self.block = None

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def done(self) -> bytes:
        """``message_delta`` (why it ended, the usage) and ``message_stop``."""
        out: list[bytes] = []
        self._close(out)
        reason, sequence = _stop_reason(self.finish_reason, self.tail, self.stops, self.refused)
        usage = _usage(self.usage)
        if usage["input_tokens"] is None:
            del usage["input_tokens"]  # message_start's null stands
        out.append(
            _event(
                "message_delta",
                {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage},
            )
        )
        out.append(_MESSAGE_STOP)
        return b"".join(out)

    def error(self, err: APIError) -> bytes:
        """Anthropic's ``error`` event; but a deadline ends the message as ``max_tokens`` does (the relay has
        encoded ``finish_reason: "length"`` just before), the reason in the log record."""
        if err.code == DEADLINE_EXCEEDED:
            return self.done()
        return _event("error", error_object(err))


def message_json(answer: Delta, *, model: str, stop_sequences: tuple[str, ...] = (), id: str | None = None) -> bytes:
    """The whole ``message`` object for a whole answer: the same content blocks as the stream's."""
    content: list[dict[str, Any]] = []
    thought = answer.reasoning_content if answer.reasoning_content is not None else answer.reasoning
    if thought:
        content.append({"type": "thinking", "thinking": thought, "signature": ""})
    text = answer.content + (answer.refusal or "")
    if text:
        content.append({"type": "text", "text": text})
    for n, call in enumerate(answer.tool_calls or ()):
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            raise APIError.upstream(
                502, f"The model's arguments for tool call {n} are not JSON.", code="upstream_error"
            ) from None
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or "toolu_" + uuid.uuid4().hex[:24],
                "name": function.get("name") or "",
                "input": arguments,
            }
        )
    reason, sequence = _stop_reason(answer.finish_reason, text, stop_sequences, bool(answer.refusal))
    return _dumps(
        {
            "id": id if id is not None else _new_id(),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": _usage(answer.usage),
        }
    )
