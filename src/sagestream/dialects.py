"""What the model containers send, turned into :class:`Delta` objects; and what they are sent.

A *dialect* is the body format a SageMaker model container speaks:

``openai``
    OpenAI ``chat.completion.chunk`` / ``text_completion`` events ending with ``[DONE]``: TGI's Messages
    API, vLLM, SGLang and LMI's chat endpoint.
``tgi``
    text-generation-inference ``generate_stream`` events: ``{"token": {"text", "special"}, "details"}``,
    ``details`` only on the last one.
``lmi``
    LMI (DJL Serving) rolling-batch jsonlines: ``{"token": {"text", "special_token"}}`` lines, the last
    one with ``details`` (``finish_reason``, ``generated_tokens``). It is TGI's event shape, so one decoder
    reads both; LMI alone reports a failed generation as ``finish_reason: "error"``.

A decoder is made per request by :func:`stream_decoder` and fed one record at a time (the text of one
line, see :mod:`sagestream.lines`). Whatever the record, it either returns deltas or raises one of two
plain exceptions: :class:`DecodeError` when the record is not what the dialect promises,
:class:`UpstreamStreamError` when the container itself reports an error. The statuses a client sees for
them are given in one place, :func:`sagestream.upstream.error_from`.

Example::

    >>> decoder = stream_decoder("tgi")
    >>> decoder.decode('{"index": 1, "token": {"id": 9, "text": "Hé", "special": false}}')
    [Delta(content='Hé', role=None, finish_reason=None, usage=None)]
    >>> last = '{"token": {"text": "</s>", "special": true}, "details": {"finish_reason": "eos_token",'
    >>> decoder.decode(last + ' "generated_tokens": 2, "input_length": 5}}')
    [Delta(content='', role=None, finish_reason='stop', usage=Usage(prompt_tokens=5, completion_tokens=2, \
total_tokens=7))]
    >>> decoder.done
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast, get_args

from sagestream import prompts
from sagestream.errors import APIError
from sagestream.schema import ChatCompletionRequest, CompletionRequest

__all__ = [
    "DIALECTS",
    "DecodeError",
    "Delta",
    "Dialect",
    "GenerateStreamDecoder",
    "OpenAIStreamDecoder",
    "StreamDecoder",
    "UpstreamStreamError",
    "Usage",
    "decode_body",
    "dialect_named",
    "stream_decoder",
    "upstream_body",
]

Dialect = Literal["openai", "tgi", "lmi"]
DIALECTS: tuple[Dialect, ...] = get_args(Dialect)


def dialect_named(name: str) -> Dialect:
    """``name`` as a :data:`Dialect`; ``ValueError`` naming the known ones if it is none of them.

    >>> dialect_named("tgi")
    'tgi'
    """
    if name not in DIALECTS:
        raise ValueError(f"Unknown dialect {name!r}; known dialects: {', '.join(DIALECTS)}.")
    return name


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass(frozen=True, slots=True)
class Delta:
    """One step of the answer: text to append, and, on the last steps, why it ended and what it cost."""

    content: str = ""
    role: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None


class DecodeError(Exception):
    """The container sent something its dialect does not allow; the answer cannot be read on."""

    def __init__(self, message: str) -> None:
        super().__init__(f"Unreadable answer from the model endpoint: {message}")


class UpstreamStreamError(Exception):
    """The container said, in its answer, that generation failed (TGI and vLLM send this mid-stream)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"The model endpoint reported an error: {message}")
        self.upstream_message = message


class StreamDecoder(Protocol):
    done: bool
    """The dialect's end was seen (``[DONE]``, or the event that carries ``details``)."""

    def decode(self, record: str) -> list[Delta]: ...


# --- reading JSON without trusting it -------------------------------------------------------------------

_MAX_ERROR_MESSAGE = 1000
# TGI's and LMI's reasons, in OpenAI's words; a reason neither documents still ended the answer.
_FINISH_REASONS = {"length": "length", "eos_token": "stop", "stop_sequence": "stop"}


def _load(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, UnicodeDecodeError
        raise DecodeError(f"not JSON ({exc.__class__.__name__})") from None


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DecodeError(f"{what} is not a JSON object")
    return cast(dict[str, Any], value)


def _str(obj: Mapping[str, Any], key: str, what: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise DecodeError(f"{what}.{key} is not a string")
    return value


def _int(obj: Mapping[str, Any], key: str, what: str) -> int | None:
    value = obj.get(key)
    # bool is an int to Python, not to JSON.
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise DecodeError(f"{what}.{key} is not an integer")
    return value


def _raise_if_error(obj: Mapping[str, Any]) -> None:
    """The container's own error object, in any of the shapes they send it."""
    if obj.get("error") is not None:
        error = obj["error"]
    elif obj.get("object") == "error":  # vLLM's older shape: the error's fields at top level
        error = obj
    else:
        return
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        message: str = error["message"]
    elif isinstance(error, str):
        message = error
    else:
        try:
            message = json.dumps(error)[:_MAX_ERROR_MESSAGE]
        except RecursionError:
            message = "an error object too deeply nested to show"
    raise UpstreamStreamError(message[:_MAX_ERROR_MESSAGE])


def _usage(value: Any, what: str) -> Usage | None:
    if value is None:
        return None
    usage = _object(value, what)
    prompt = _int(usage, "prompt_tokens", what) or 0
    completion = _int(usage, "completion_tokens", what) or 0
    total = _int(usage, "total_tokens", what)
    return Usage(prompt, completion, prompt + completion if total is None else total)


# --- openai ----------------------------------------------------------------------------------------------


def _openai_choice(chunk: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    """``(content, role, finish_reason)`` of the first choice; n is always 1 through the relay."""
    choices = chunk.get("choices")
    if choices is None:
        return "", None, None
    if not isinstance(choices, list):
        raise DecodeError("choices is not a list")
    if not choices:
        return "", None, None
    choice = _object(choices[0], "choices[0]")
    finish_reason = _str(choice, "finish_reason", "choices[0]")
    # TGI's Messages API before 2.0 put its own reasons (eos_token) in OpenAI's field.
    finish_reason = _FINISH_REASONS.get(finish_reason, finish_reason) if finish_reason else finish_reason
    for key in ("delta", "message"):  # delta in chunks, message in a whole chat.completion
        if key in choice:
            part = _object(choice[key] if choice[key] is not None else {}, f"choices[0].{key}")
            where = f"choices[0].{key}"
            return _str(part, "content", where) or "", _str(part, "role", where), finish_reason
    return _str(choice, "text", "choices[0]") or "", None, finish_reason


class OpenAIStreamDecoder:
    """``chat.completion.chunk`` and ``text_completion`` events; ``[DONE]`` ends."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False

    def decode(self, record: str) -> list[Delta]:
        record = record.strip()
        if self.done or not record:
            return []
        if record == "[DONE]":
            self.done = True
            return []
        chunk = _object(_load(record), "chunk")
        _raise_if_error(chunk)
        content, role, finish_reason = _openai_choice(chunk)
        usage = _usage(chunk.get("usage"), "usage")
        if not content and role is None and finish_reason is None and usage is None:
            return []
        return [Delta(content, role, finish_reason, usage)]


# --- tgi and lmi -----------------------------------------------------------------------------------------


def _details(details: Mapping[str, Any]) -> tuple[str, Usage | None]:
    """``(finish_reason, usage)`` from a TGI/LMI ``details`` object."""
    reason = _str(details, "finish_reason", "details")
    if reason == "error":  # LMI's way to say generation failed after the 200
        raise UpstreamStreamError("generation failed (finish_reason: error)")
    generated = _int(details, "generated_tokens", "details")
    usage = None
    if generated is not None:
        prompt = _int(details, "input_length", "details")
        if prompt is None:
            prefill = details.get("prefill")
            prompt = len(prefill) if isinstance(prefill, list) else 0
        usage = Usage(prompt, generated, prompt + generated)
    return _FINISH_REASONS.get(reason or "", "stop"), usage


class GenerateStreamDecoder:
    """TGI ``generate_stream`` events and LMI jsonlines lines; the event with ``details`` ends."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False

    def decode(self, record: str) -> list[Delta]:
        record = record.strip()
        if self.done or not record:
            return []
        event = _object(_load(record), "event")
        _raise_if_error(event)
        token = _object(event.get("token"), "token")
        text = _str(token, "text", "token") or ""
        # Special tokens (</s>, <|eot_id|>) are the model's control text, never the answer's.
        if token.get("special") is True or token.get("special_token") is True:
            text = ""
        finish_reason = usage = None
        if event.get("details") is not None:
            finish_reason, usage = _details(_object(event["details"], "details"))
            self.done = True
        if not text and finish_reason is None:
            return []
        return [Delta(text, None, finish_reason, usage)]


def stream_decoder(dialect: Dialect) -> StreamDecoder:
    """A fresh decoder for one streamed answer in ``dialect``."""
    if dialect_named(dialect) == "openai":
        return OpenAIStreamDecoder()
    return GenerateStreamDecoder()


# --- whole answers ---------------------------------------------------------------------------------------


def decode_body(dialect: Dialect, body: bytes) -> Delta:
    """The whole answer of a non-streaming InvokeEndpoint call as one delta."""
    dialect_named(dialect)
    data = _load(body)
    if dialect == "openai":
        answer = _object(data, "answer")
        _raise_if_error(answer)
        if not isinstance(answer.get("choices"), list) or not answer["choices"]:
            raise DecodeError("answer has no choices")
        content, role, finish_reason = _openai_choice(answer)
        return Delta(content, role, finish_reason, _usage(answer.get("usage"), "usage"))
    # TGI answers a one-element list; LMI a bare object unless it imitates TGI.
    if isinstance(data, list):
        if not data:
            raise DecodeError("answer is an empty list")
        data = data[0]
    answer = _object(data, "answer")
    _raise_if_error(answer)
    text = _str(answer, "generated_text", "answer")
    if text is None:
        raise DecodeError("answer has no generated_text")
    finish_reason = usage = None
    if answer.get("details") is not None:
        finish_reason, usage = _details(_object(answer["details"], "details"))
    return Delta(text, None, finish_reason, usage)


# --- requests --------------------------------------------------------------------------------------------


def upstream_body(
    dialect: Dialect,
    request: ChatCompletionRequest | CompletionRequest,
    *,
    prompt_template: str | None,
    stream: bool,
    max_tokens_default: int | None,
) -> dict[str, Any]:
    """The InvokeEndpoint body that asks the container speaking ``dialect`` for ``request``.

    ``prompt_template`` is a :mod:`sagestream.prompts` name, needed for chat on ``tgi`` and ``lmi``.
    ``model`` is left out: each endpoint serves one model, and vLLM refuses a name it does not serve.
    """
    max_tokens = request.effective_max_tokens
    if max_tokens is None:
        max_tokens = max_tokens_default
    if dialect_named(dialect) == "openai":
        return _openai_body(request, stream=stream, max_tokens=max_tokens)
    if isinstance(request, CompletionRequest):
        prompt = request.prompt
    elif prompt_template is None:
        raise APIError.invalid_request(
            "This endpoint's model container takes a prompt, not chat messages, and no prompt template is "
            f"configured. Set PROMPT_TEMPLATE to one of: {', '.join(prompts.names())}; "
            "or send a prompt to /v1/completions.",
            param="messages",
            code="prompt_template_required",
        )
    else:
        prompt = prompts.template(prompt_template)(request.plain_messages())
    parameters: dict[str, Any] = {"details": True}  # details carry finish_reason and the token count
    if max_tokens is not None:
        parameters["max_new_tokens"] = max_tokens
    if request.temperature == 0:
        # OpenAI's temperature 0 is greedy decoding; TGI refuses 0 and wants do_sample off instead.
        parameters["do_sample"] = False
    else:
        if request.temperature is not None:
            parameters["temperature"] = request.temperature
        # TGI refuses top_p outside (0, 1); 1 means no nucleus cut, so leaving it out is the same.
        if request.top_p is not None and 0 < request.top_p < 1:
            parameters["top_p"] = request.top_p
        if "temperature" in parameters or "top_p" in parameters:
            # LMI up to 0.31 ignores sampling parameters without it.
            parameters["do_sample"] = True
    if request.stop_sequences:
        # Same list, TGI's and LMI's names for it.
        parameters["stop" if dialect == "tgi" else "stop_sequences"] = request.stop_sequences
    if request.seed is not None:
        parameters["seed"] = request.seed
    return {"inputs": prompt, "parameters": parameters, "stream": stream}


def _openai_body(
    request: ChatCompletionRequest | CompletionRequest, *, stream: bool, max_tokens: int | None
) -> dict[str, Any]:
    body: dict[str, Any]
    if isinstance(request, ChatCompletionRequest):
        # Plain-string content: every container's chat template reads it, not all read content parts.
        body = {"messages": [{"role": role, "content": text} for role, text in request.plain_messages()]}
    else:
        body = {"prompt": request.prompt}
    body["stream"] = stream
    if stream and request.include_usage:
        body["stream_options"] = {"include_usage": True}
    optional = {
        "max_tokens": max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "stop": request.stop,
        "seed": request.seed,
    }
    body.update((key, value) for key, value in optional.items() if value is not None)
    return body
