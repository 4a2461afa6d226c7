"""The Anthropic Messages API's request read: a body into its :mod:`.models` (``MessageCreateParams``, field by
field) and translated into the chat request; :mod:`sagestream.protocols.anthropic` has what each field becomes.

Imported on the first ``/v1/messages`` request, not at init: its twenty-odd request models cost a cold
start 20-40 ms (here) that a deployment serving only OpenAI clients would pay for nothing.

Environment variables read: none.

Example::

    >>> from sagestream.config import Config
    >>> parsed = parse({"max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}], "metadata": {"user_id": "u"}},
    ...                Config(endpoint_name="llm", model_id="m"))
    >>> parsed.request.user, parsed.names["user"]
    ('u', 'metadata.user_id')
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec
import msgspec.structs

from sagestream.dialects import dialect_named
from sagestream.errors import APIError
from sagestream.protocols._api import Parsed, in_client_terms
from sagestream.protocols._requests import Strict, describe, read_object
from sagestream.protocols.anthropic.models import (
    _BLOCKS,
    ClearThinking,
    ImageBlock,
    MessagesRequest,
    TextBlock,
    Thinking,
    ThinkingBlock,
    Tool,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
    _FileSource,
    _KeepAll,
    _ToolChoiceAny,
    _ToolChoiceAuto,
    _ToolChoiceTool,
    _URLSource,
)
from sagestream.protocols.openai.request import chat_request

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = ["MessagesRequest", "body_of", "count_body", "parse", "translate"]

# Why a field cannot be honoured, for the fields that are refused whenever they are sent.
_NOT_HERE = {
    "container": "there are no code-execution containers here",
    "diagnostics": "no prompt-cache diagnostics are kept",
    "inference_geo": "the model runs where its SageMaker endpoint is",
    "user_profile_id": "there are no user profiles here",
    "workspace_id": "there are no workspaces here",
}


# --- blocks ---------------------------------------------------------------------------------------------


# --- errors ---------------------------------------------------------------------------------------------


# The free-form JSON of a Messages request, where a too-deep nesting is named (as chat's are in schema).
_FREE_FORM = (
    ("tools", "*", "input_schema"),
    ("messages", "*", "content", "*", "input"),
    ("output_config", "format", "schema"),
)


def body_of(raw: bytes) -> dict[str, Any]:
    """The body as every route reads one (:func:`sagestream.protocols._requests.read_object`): JSON, an object,
    no NaN, no lone surrogate, no deeper than the depth limit; a 400 otherwise. A reader of its own let a lone surrogate
    through to a 500, and a tool_use input nested 6,000 deep or holding NaN through to the container."""
    return read_object(raw, _FREE_FORM)


def _refuse(path: str, reason: str) -> NoReturn:
    raise APIError.invalid_request(f"'{path}' is not supported by this endpoint: {reason}.", param=path)


def _validated(model: type[Strict], data: Any, path: str) -> Any:
    """``data`` as ``model``, or a 400 naming the field at fault under ``path``, in Anthropic's words."""
    try:
        return msgspec.convert(data, model, strict=True)
    except msgspec.ValidationError as exc:
        kind, steps, what = describe(exc)
        where = ".".join([path, *steps] if path else steps)
        if kind == "unknown":
            raise APIError.invalid_request(f"{where}: Extra inputs are not permitted", param=where) from None
        if kind == "missing":
            raise APIError.invalid_request(f"{where}: Field required", param=where) from None
        raise APIError.invalid_request(f"{where}: {what}", param=where or None) from None


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


def _block(raw: Any, path: str, role: str) -> Strict:
    kind = raw.get("type") if isinstance(raw, dict) else None
    model = _BLOCKS.get(kind) if isinstance(kind, str) else None
    if model is None:
        if not isinstance(kind, str):
            raise APIError.invalid_request(f"{path}.type: Field required", param=f"{path}.type")
        _refuse(f"{path}", f"'{kind}' blocks are not carried to the model container")
    block: Strict = _validated(model, raw, path)
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


def _tools(request: MessagesRequest, noops: list[str]) -> list[dict[str, Any]]:
    tools = []
    for n, raw in enumerate(request.tools or []):
        path = f"tools.{n}"
        kind = raw.get("type") if isinstance(raw, dict) else None
        if kind is not None and not isinstance(kind, str):
            raise APIError.invalid_request(f"{path}.type: Input should be 'custom'", param=f"{path}.type")
        if kind not in (None, "custom"):
            _refuse(f"{path}.type", f"'{kind}' is one of Anthropic's server tools; only custom tools run here")
        tool = _validated(Tool, raw, path)
        if tool.allowed_callers is not None and tool.allowed_callers != ["direct"]:
            _refuse(f"{path}.allowed_callers", "there is no code execution here to call tools")
        if tool.defer_loading:
            noops.append("tools.defer_loading")  # no tool search here: every tool is offered to the model
        if tool.cache_control is not None:
            noops.append("tools.cache_control")
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


def _thinking(request: MessagesRequest, cfg: Config, body: dict[str, Any], noops: list[str], *, counting: bool) -> None:
    if request.thinking is None:
        return
    thinking = _validated(Thinking, request.thinking, "thinking")
    if thinking.display in ("summarized", "updates"):
        noops.append("thinking.display")  # the thoughts are streamed whole, as the container writes them
    if thinking.type == "between_tools":
        _refuse("thinking.type", "'between_tools' thinking cannot be asked of a model container")
    if thinking.type != "enabled":
        if thinking.type == "adaptive":
            noops.append("thinking.type")  # the model decides how much to think: the container's default
        return  # adaptive, disabled: the container thinks as it is deployed to
    if thinking.budget_tokens is None:
        raise APIError.invalid_request("thinking.budget_tokens: Field required", param="thinking.budget_tokens")
    if thinking.budget_tokens >= request.max_tokens and not counting:
        raise APIError.invalid_request(
            "`max_tokens` must be greater than `thinking.budget_tokens`.", param="thinking.budget_tokens"
        )
    if not dialect_named(cfg.dialect).carries_reasoning or "thinking_token_budget" not in cfg.extra_request_fields:
        _refuse(
            "thinking",
            f"the model container (UPSTREAM_FORMAT={cfg.dialect}) has no reasoning switch this deployment "
            "allows (vLLM's thinking_token_budget, with UPSTREAM_FORMAT=openai and "
            "EXTRA_REQUEST_FIELDS=thinking_token_budget)",
        )
    body["thinking_token_budget"] = thinking.budget_tokens


def _clear_thinking(request: MessagesRequest) -> MessagesRequest:
    """``request`` with its ``context_management`` edits applied to its turns (the one kind the relay can do
    exactly: ``clear_thinking_20251015``, the thinking of all but the last ``keep`` assistant turns that have
    some removed, 1 by default as Anthropic's); any other edit is refused by name."""
    if request.context_management is None:
        return request
    extra = set(request.context_management) - {"edits"}
    if extra:
        name = f"context_management.{sorted(extra)[0]}"
        raise APIError.invalid_request(f"{name}: Extra inputs are not permitted", param=name)
    edits = request.context_management.get("edits") or []
    if not isinstance(edits, list):
        raise APIError.invalid_request(
            "context_management.edits: Input should be a list", param="context_management.edits"
        )
    messages = request.messages
    for n, raw in enumerate(edits):
        path = f"context_management.edits.{n}"
        if not isinstance(raw, dict) or raw.get("type") != "clear_thinking_20251015":
            kind = raw.get("type") if isinstance(raw, dict) else None
            _refuse(
                path,
                f"'{kind}' edits change the prompt in ways the relay does not reproduce; only "
                "clear_thinking_20251015 is applied here",
            )
        edit = _validated(ClearThinking, raw, path)
        keep = edit.keep
        if keep == "all" or isinstance(keep, _KeepAll):
            continue
        count = 1 if keep is None else keep.value
        thinking_turns = [
            i
            for i, m in enumerate(messages)
            if isinstance(m, dict)
            and m.get("role") == "assistant"
            and isinstance(m.get("content"), list)
            and any(_is_thinking(b) for b in m["content"])
        ]
        cleared = set(thinking_turns[: max(0, len(thinking_turns) - count)])
        messages = [
            {**m, "content": [b for b in m["content"] if not _is_thinking(b)]} if i in cleared else m
            for i, m in enumerate(messages)
        ]
    return msgspec.structs.replace(request, messages=messages)


def _is_thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "thinking"


def _cache_hints(request: MessagesRequest) -> int:
    """How many ``cache_control`` hints the request carries (a no-op: no prompt cache is kept here)."""
    count = int(request.cache_control is not None)
    blocks = [*(request.system if isinstance(request.system, list) else [])]
    for message in request.messages:
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            blocks += message["content"]
    return count + sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control") is not None)


def translate(
    request: MessagesRequest, cfg: Config, *, counting: bool = False
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """The chat request body for ``request``, the client's name for each of its renamed paths, and the fields
    accepted as documented no-ops (``counting``: for ``count_tokens``, whose ``max_tokens`` is not the client's)."""
    for name, reason in _NOT_HERE.items():
        if getattr(request, name) is not None:
            _refuse(name, reason)
    if request.speed == "fast":
        _refuse("speed", "the endpoint has one speed")
    noops: list[str] = ["cache_control"] * _cache_hints(request)
    request = _clear_thinking(request)
    out = _Translation([], {"user": "metadata.user_id", "stop": "stop_sequences"})
    _messages(request, out)
    max_tokens = request.max_tokens
    if cfg.max_tokens_limit is not None and max_tokens > cfg.max_tokens_limit and not counting:
        # Anthropic's max_tokens is a ceiling the model may stop before: clients send their model's own (Claude
        # Code 32000). Here the deployment's MAX_TOKENS_LIMIT is the ceiling, and stop_reason says max_tokens.
        max_tokens = cfg.max_tokens_limit
        noops.append("max_tokens.capped")
    body: dict[str, Any] = {"messages": out.messages, "max_tokens": max_tokens}
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
        for n, stop in enumerate(request.stop_sequences):
            if not stop:  # Anthropic's own refusal: every text ends with "", so it would match at once
                raise APIError.invalid_request(
                    f"stop_sequences.{n}: each stop sequence must be non-empty", param=f"stop_sequences.{n}"
                )
        body["stop"] = request.stop_sequences
    if request.stream:
        # Usage for message_delta: vLLM reports it only when asked.
        body["stream"], body["stream_options"] = True, {"include_usage": True}
    if request.tools is not None:
        body["tools"] = _tools(request, noops)
        out.names.update(
            {f"tools.{n}.function.parameters": f"tools.{n}.input_schema" for n in range(len(body["tools"]))}
        )
    _tool_choice(request, body)
    if request.metadata is not None and request.metadata.user_id is not None:
        if dialect_named(cfg.dialect).carries_user:
            body["user"] = request.metadata.user_id
        else:
            noops.append("metadata.user_id")  # a prompt container has no place for a caller id
    if request.output_config is not None:
        if request.output_config.effort is not None:
            if dialect_named(cfg.dialect).carries_reasoning:
                body["reasoning_effort"] = request.output_config.effort
                out.names["reasoning_effort"] = "output_config.effort"
            else:
                noops.append("output_config.effort")  # a prompt container has no reasoning switch
        if request.output_config.format is not None:
            schema = request.output_config.format.json_schema
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": schema, "strict": True},
            }
            out.names["response_format"] = "output_config.format"
    _thinking(request, cfg, body, noops, counting=counting)
    out.names["thinking_token_budget"] = "thinking"  # noqa: S105 (a field name)
    return body, out.names, noops


def parse(data: dict[str, Any], cfg: Config, *, counting: bool = False) -> Parsed:
    """``data`` (a Messages body) as the chat request the pipeline runs, or a 400 in the client's names."""
    request = _validated(MessagesRequest, data, "")
    body, names, noops = translate(request, cfg, counting=counting)
    extra = frozenset(k for k in ("top_k", "thinking_token_budget") if k in body)
    try:
        chat = chat_request(body, cfg.max_tokens_limit, extra, cfg.max_prompt_chars)
    except APIError as err:
        raise in_client_terms(err, names) from None
    return Parsed(chat, request, names, noops=tuple(noops))


_GENERATION_ONLY = ("max_tokens", "stream", "stop_sequences", "temperature", "top_p", "top_k")


def count_body(raw: bytes) -> dict[str, Any]:
    """A ``count_tokens`` body (``MessageCountTokensParams``: no ``max_tokens``, no ``stream``, no sampling) as
    the Messages body whose one-token answer reports the prompt's count."""
    data = body_of(raw)
    # MessageCreateParams's fields that MessageCountTokensParams does not have.
    for name in (*_GENERATION_ONLY, "container", "diagnostics", "inference_geo", "metadata", "service_tier"):
        if name in data:
            raise APIError.invalid_request(f"{name}: Extra inputs are not permitted", param=name)
    data["max_tokens"] = 1
    return data
