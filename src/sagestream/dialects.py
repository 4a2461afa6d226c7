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
them are given in one place, :func:`sagestream.faults.error_from`.

Example::

    >>> decoder = stream_decoder("tgi")
    >>> decoder.decode('{"index": 1, "token": {"id": 9, "text": "Hé", "special": false}}')
    [Delta(content='Hé')]
    >>> last = '{"token": {"text": "</s>", "special": true}, "details": {"finish_reason": "eos_token",'
    >>> decoder.decode(last + ' "generated_tokens": 2, "input_length": 5}}')
    [Delta(content='', finish_reason='stop', usage=Usage(prompt_tokens=5, completion_tokens=2, total_tokens=7))]
    >>> decoder.done
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol, cast, get_args

from sagestream import prompts
from sagestream.delta import Delta, Usage
from sagestream.errors import MAX_MESSAGE_CHARS, APIError

if TYPE_CHECKING:
    # At run time the request models (and pydantic) are imported where a request is at hand, so that the
    # function's init does without them (see docs/benchmark.md, cold start).
    from sagestream.schema import ChatCompletionRequest, CompletionRequest

__all__ = [
    "COMPUTED_FIELDS",
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


class DecodeError(Exception):
    """The container sent something its dialect does not allow; the answer cannot be read on."""

    def __init__(self, message: str) -> None:
        super().__init__(f"Unreadable answer from the model endpoint: {message}")


class UpstreamStreamError(Exception):
    """The container said, in its answer, that generation failed (TGI and vLLM send this mid-stream)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"The model endpoint reported an error: {message}")


class StreamDecoder(Protocol):
    done: bool
    """The dialect's end was seen (``[DONE]``, or the event that carries ``details``)."""

    def decode(self, record: str) -> list[Delta]: ...


# --- reading JSON without trusting it -------------------------------------------------------------------

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


def error_message(obj: Mapping[str, Any]) -> str | None:
    """The message of a container's own error object, in any of the shapes they send it; None if it is none.

    vLLM sends ``{"error": {"message": ...}}`` (or, older, ``{"object": "error", "message": ...}``); TGI
    sends ``{"error": "...", "error_type": "..."}``.

    >>> error_message({"object": "error", "message": "too long", "type": "BadRequestError"})
    'too long'
    >>> error_message({"error": "Input validation error", "error_type": "validation"})
    'Input validation error'
    >>> error_message({"choices": []}) is None
    True
    """
    if obj.get("error") is not None:
        error = obj["error"]
    elif obj.get("object") == "error":  # vLLM's older shape: the error's fields at top level
        error = obj
    else:
        return None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        message: str = error["message"]
    elif isinstance(error, str):
        message = error
    else:
        try:
            message = json.dumps(error)[:MAX_MESSAGE_CHARS]
        except RecursionError:
            message = "an error object too deeply nested to show"
    return message[:MAX_MESSAGE_CHARS]


def _raise_if_error(obj: Mapping[str, Any]) -> None:
    message = error_message(obj)
    if message is not None:
        raise UpstreamStreamError(message)


def _usage(value: Any, what: str) -> Usage | None:
    """The container's usage; ``None`` when it says nothing about the completion's tokens."""
    if value is None:
        return None
    usage = _object(value, what)
    prompt = _int(usage, "prompt_tokens", what)
    completion = _int(usage, "completion_tokens", what)
    total = _int(usage, "total_tokens", what)
    if completion is None:
        return None
    if total is None and prompt is not None:
        total = prompt + completion
    details = {k: v for k, v in usage.items() if k not in ("prompt_tokens", "completion_tokens", "total_tokens")}
    return Usage(prompt, completion, total, details)


# --- openai ----------------------------------------------------------------------------------------------

# The delta (or message) fields the relay names; any other field the container sends goes in Delta.extra.
_DELTA_FIELDS = ("content", "role", "tool_calls", "reasoning_content", "reasoning", "refusal")


def _tool_calls(part: Mapping[str, Any], where: str) -> list[dict[str, Any]] | None:
    calls = part.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, list) or not all(isinstance(call, dict) for call in calls):
        raise DecodeError(f"{where}.tool_calls is not a list of objects")
    # vLLM sends [] on chunks that carry text; an empty list says nothing.
    return cast(list[dict[str, Any]], calls) or None


def _openai_choice(chunk: Mapping[str, Any], usage: Usage | None) -> Delta | None:
    """The first choice of a chunk or answer as a delta; n is always 1 through the relay."""
    choices = chunk.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list):
        raise DecodeError("choices is not a list")
    if not choices:
        return None
    choice = _object(choices[0], "choices[0]")
    finish_reason = _str(choice, "finish_reason", "choices[0]")
    # TGI's Messages API before 2.0 put its own reasons (eos_token) in OpenAI's field.
    finish_reason = _FINISH_REASONS.get(finish_reason, finish_reason) if finish_reason else finish_reason
    logprobs = choice.get("logprobs")
    if logprobs is not None:
        logprobs = _object(logprobs, "choices[0].logprobs")
    for key in ("delta", "message"):  # delta in chunks, message in a whole chat.completion
        if key in choice:
            where = f"choices[0].{key}"
            part = _object(choice[key] if choice[key] is not None else {}, where)
            return Delta(
                content=_str(part, "content", where) or "",
                role=_str(part, "role", where),
                finish_reason=finish_reason,
                usage=usage,
                tool_calls=_tool_calls(part, where),
                reasoning_content=_str(part, "reasoning_content", where),
                reasoning=_str(part, "reasoning", where),
                refusal=_str(part, "refusal", where),
                logprobs=logprobs,
                extra={k: v for k, v in part.items() if k not in _DELTA_FIELDS and v is not None},
            )
    return Delta(_str(choice, "text", "choices[0]") or "", None, finish_reason, usage, logprobs=logprobs)


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
        text = _text_only(chunk)
        if text is not None:
            return [text]
        _raise_if_error(chunk)
        usage = _usage(chunk.get("usage"), "usage")
        delta = _openai_choice(chunk, usage) or Delta(usage=usage)
        return [] if delta.is_empty else [delta]


def _text_only(chunk: Mapping[str, Any]) -> Delta | None:
    """The delta of the commonest chunk, text and nothing else, or None for any other shape.

    Most chunks of a stream carry one piece of text: this reads them with a few type checks instead of the
    general path's per-field reading, and gives the very Delta the general path would (a property test
    holds the two to it). Anything else, an error or a bad type included, is left to the general path.
    """
    if chunk.get("usage") is not None or chunk.get("error") is not None or chunk.get("object") == "error":
        return None
    choices = chunk.get("choices")
    if type(choices) is not list or not choices:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None or choice.get("logprobs") is not None:
        return None
    part = choice.get("delta")
    if type(part) is not dict:
        return None
    content = part.get("content")
    if type(content) is not str or not content:
        return None
    role = None
    for key, value in part.items():
        if key == "content" or value is None:
            continue
        if key != "role" or type(value) is not str:
            return None  # a tool call, reasoning, a field the relay passes on in extra: the general path
        role = value
    return Delta(content, role)


# --- tgi and lmi -----------------------------------------------------------------------------------------


def _details(details: Mapping[str, Any]) -> tuple[str, Usage | None]:
    """``(finish_reason, usage)`` from a TGI/LMI ``details`` object."""
    reason = _str(details, "finish_reason", "details")
    if reason == "error":  # LMI's way to say generation failed after the 200
        raise UpstreamStreamError("generation failed (finish_reason: error)")
    generated = _int(details, "generated_tokens", "details")
    usage = None
    if generated is not None:
        # TGI's streamed details say input_length; its whole answer does not, unless prefill is asked for.
        prompt = _int(details, "input_length", "details")
        if prompt is None and isinstance(details.get("prefill"), list) and details["prefill"]:
            prompt = len(details["prefill"])
        usage = Usage(prompt, generated, None if prompt is None else prompt + generated)
    return _FINISH_REASONS.get(reason or "", "stop"), usage


@dataclass(frozen=True, slots=True)
class LogprobsWanted:
    """What the client asked of logprobs, for the dialects that send a logprob with every token."""

    kind: Literal["chat", "completion"]
    top: int = 0

    @classmethod
    def of(cls, request: ChatCompletionRequest | CompletionRequest | None) -> LogprobsWanted | None:
        if request is None:
            return None
        from sagestream.schema import ChatCompletionRequest, CompletionRequest

        if isinstance(request, ChatCompletionRequest) and request.logprobs:
            return cls("chat", request.top_logprobs or 0)
        if isinstance(request, CompletionRequest) and request.logprobs is not None:
            return cls("completion", request.logprobs)
        return None


def _token_logprob(token: Mapping[str, Any], where: str) -> float | None:
    # TGI names it logprob, LMI log_prob.
    value = token.get("logprob", token.get("log_prob"))
    if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
        raise DecodeError(f"{where}.logprob is not a number")
    return None if value is None else float(value)


def _top_tokens(value: Any, where: str) -> list[tuple[str, float]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DecodeError(f"{where} is not a list")
    tops = []
    for n, top in enumerate(value):
        top = _object(top, f"{where}[{n}]")
        logprob = _token_logprob(top, f"{where}[{n}]")
        if logprob is not None:
            tops.append((_str(top, "text", f"{where}[{n}]") or "", logprob))
    return tops


class _LogprobsBuilder:
    """OpenAI's logprobs objects from the per-token logprobs TGI and LMI send."""

    __slots__ = ("offset", "wanted")

    def __init__(self, wanted: LogprobsWanted) -> None:
        self.wanted = wanted
        self.offset = 0  # text_offset of completions: where each token starts in the answer

    def of(self, tokens: list[tuple[str, float, list[tuple[str, float]]]]) -> dict[str, Any] | None:
        if not tokens:
            return None
        if self.wanted.kind == "chat":
            return {
                "content": [
                    {
                        "token": text,
                        "logprob": logprob,
                        "bytes": list(text.encode()),
                        "top_logprobs": [
                            {"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in tops[: self.wanted.top]
                        ],
                    }
                    for text, logprob, tops in tokens
                ],
                "refusal": None,
            }
        offsets = []
        for text, _, _ in tokens:
            offsets.append(self.offset)
            self.offset += len(text)
        return {
            "tokens": [text for text, _, _ in tokens],
            "token_logprobs": [logprob for _, logprob, _ in tokens],
            "top_logprobs": [dict(tops[: self.wanted.top]) for _, _, tops in tokens] if self.wanted.top else None,
            "text_offset": offsets,
        }


class GenerateStreamDecoder:
    """TGI ``generate_stream`` events and LMI jsonlines lines; the event with ``details`` ends.

    With ``logprobs`` the token's own logprob (and TGI's ``top_tokens``) become OpenAI's logprobs.
    """

    __slots__ = ("_logprobs", "done")

    def __init__(self, logprobs: LogprobsWanted | None = None) -> None:
        self.done = False
        self._logprobs = _LogprobsBuilder(logprobs) if logprobs is not None else None

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
        logprobs = None
        if self._logprobs is not None and text:
            logprob = _token_logprob(token, "token")
            if logprob is not None:
                logprobs = self._logprobs.of([(text, logprob, _top_tokens(event.get("top_tokens"), "top_tokens"))])
        finish_reason = usage = None
        if event.get("details") is not None:
            finish_reason, usage = _details(_object(event["details"], "details"))
            self.done = True
        if not text and finish_reason is None:
            return []
        return [Delta(text, None, finish_reason, usage, logprobs=logprobs)]


def stream_decoder(dialect: Dialect, request: ChatCompletionRequest | CompletionRequest | None = None) -> StreamDecoder:
    """A fresh decoder for one streamed answer in ``dialect`` to ``request`` (its logprobs wish)."""
    if dialect_named(dialect) == "openai":
        return OpenAIStreamDecoder()
    return GenerateStreamDecoder(LogprobsWanted.of(request))


# --- whole answers ---------------------------------------------------------------------------------------


def decode_body(
    dialect: Dialect, body: bytes, request: ChatCompletionRequest | CompletionRequest | None = None
) -> Delta:
    """The whole answer of a non-streaming InvokeEndpoint call as one delta."""
    dialect_named(dialect)
    data = _load(body)
    if dialect == "openai":
        answer = _object(data, "answer")
        _raise_if_error(answer)
        if not isinstance(answer.get("choices"), list) or not answer["choices"]:
            raise DecodeError("answer has no choices")
        delta = _openai_choice(answer, _usage(answer.get("usage"), "usage"))
        assert delta is not None  # choices is a non-empty list
        return delta
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
    finish_reason = usage = logprobs = None
    if answer.get("details") is not None:
        details = _object(answer["details"], "details")
        finish_reason, usage = _details(details)
        wanted = LogprobsWanted.of(request)
        if wanted is not None:
            logprobs = _LogprobsBuilder(wanted).of(_detail_tokens(details))
    return Delta(text, None, finish_reason, usage, logprobs=logprobs)


def _detail_tokens(details: Mapping[str, Any]) -> list[tuple[str, float, list[tuple[str, float]]]]:
    """TGI's ``details.tokens`` (and ``top_tokens``) as ``(text, logprob, tops)``, special tokens left out."""
    tokens = details.get("tokens")
    if not isinstance(tokens, list):
        return []
    tops = details.get("top_tokens")
    out = []
    for n, token in enumerate(tokens):
        token = _object(token, f"details.tokens[{n}]")
        if token.get("special") is True:
            continue
        logprob = _token_logprob(token, f"details.tokens[{n}]")
        if logprob is None:
            continue
        top = _top_tokens(tops[n], f"details.top_tokens[{n}]") if isinstance(tops, list) and n < len(tops) else []
        out.append((_str(token, "text", f"details.tokens[{n}]") or "", logprob, top))
    return out


# --- requests --------------------------------------------------------------------------------------------

_MESSAGES_API = (
    "this endpoint's model container takes a prompt, not OpenAI's chat request; tool calling needs a "
    "Messages-API container (TGI's Messages API, vLLM, SGLang or LMI's chat endpoint) deployed with "
    "UPSTREAM_FORMAT=openai"
)
_NOT_CARRIED = "the model container's generate parameters have no such field"

# Per field, for the prompt dialects: why a field the client set cannot be carried. A field listed
# here is refused by name whatever its value, except the values that ask for nothing (_NO_OP).
_REFUSED: dict[Dialect, dict[str, str]] = {
    "tgi": {
        "tools": _MESSAGES_API,
        "tool_choice": _MESSAGES_API,
        "parallel_tool_calls": _MESSAGES_API,
        "functions": _MESSAGES_API,
        "function_call": _MESSAGES_API,
        "presence_penalty": _NOT_CARRIED + " (TGI has frequency_penalty and repetition_penalty)",
        "logit_bias": _NOT_CARRIED,
        "user": _NOT_CARRIED,
        "metadata": _NOT_CARRIED,
        "store": _NOT_CARRIED + " (nothing is stored)",
        "audio": _NOT_CARRIED,
        "modalities": _NOT_CARRIED,
        "moderation": _NOT_CARRIED,
        "prediction": _NOT_CARRIED,
        "prompt_cache_key": _NOT_CARRIED,
        "prompt_cache_options": _NOT_CARRIED,
        "prompt_cache_retention": _NOT_CARRIED,
        "safety_identifier": _NOT_CARRIED,
        "service_tier": _NOT_CARRIED,
        "verbosity": _NOT_CARRIED,
        "web_search_options": _NOT_CARRIED,
        "reasoning_effort": _NOT_CARRIED,
        "best_of": _NOT_CARRIED,
        "echo": _NOT_CARRIED,
        "suffix": _NOT_CARRIED,
    },
}
_REFUSED["lmi"] = {
    **{k: v for k, v in _REFUSED["tgi"].items() if k != "presence_penalty"},
    "top_logprobs": _NOT_CARRIED + " (LMI's stream carries each token's own logprob only)",
    "response_format": _NOT_CARRIED + " (no guided decoding parameter in LMI's rolling-batch request)",
    "best_of": _NOT_CARRIED,
}
# Values that ask for nothing a prompt container would do differently.
_NO_OP: dict[str, tuple[Any, ...]] = {
    "store": (False,),
    "tool_choice": ("none",),
    "modalities": (["text"],),
    "top_logprobs": (0,),
    "response_format": ({"type": "text"},),
    "echo": (False,),
    "best_of": (1,),
}


# The fields of the upstream body the function sets or limits itself, per dialect (on tgi and lmi, inside
# ``parameters``, where the vendor fields go). A vendor field (EXTRA_REQUEST_FIELDS) may never take one of
# these names: sagestream.config refuses them at init, and the body build never lets one replace them.
COMPUTED_FIELDS: dict[Dialect, frozenset[str]] = {
    "openai": frozenset(
        {"model", "messages", "prompt", "stream", "stream_options", "max_tokens", "max_completion_tokens"}
    ),
    "tgi": frozenset(
        {
            "details",
            "max_new_tokens",
            "do_sample",
            "temperature",
            "top_p",
            "stop",
            "seed",
            "frequency_penalty",
            "top_n_tokens",
            "grammar",
        }
    ),
    "lmi": frozenset(
        {
            "details",
            "max_new_tokens",
            "do_sample",
            "temperature",
            "top_p",
            "stop_sequences",
            "seed",
            "frequency_penalty",
            "presence_penalty",
        }
    ),
}


def _add_vendor_fields(
    request: ChatCompletionRequest | CompletionRequest, dialect: Dialect, fields: dict[str, Any]
) -> None:
    """The request's EXTRA_REQUEST_FIELDS into ``fields``; never in place of one the function sets or limits."""
    for name, value in request.vendor_fields.items():
        if name in COMPUTED_FIELDS[dialect] or name in fields:
            _refuse(name, "the function sets this field itself, so EXTRA_REQUEST_FIELDS may not name it", dialect)
        fields[name] = value


def _refuse(field: str, reason: str, dialect: Dialect) -> NoReturn:
    raise APIError.invalid_request(
        f"'{field}' is not supported by this endpoint (UPSTREAM_FORMAT={dialect}): {reason}.",
        param=field,
        code="unsupported_parameter",
    )


def upstream_body(
    dialect: Dialect,
    request: ChatCompletionRequest | CompletionRequest,
    *,
    prompt_template: str | None,
    stream: bool,
    max_tokens_default: int | None,
    in_call: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The InvokeEndpoint body that asks the container speaking ``dialect`` for ``request``.

    Every field the request carries is placed here or refused with a 400 naming it (docs/api.md's
    "OpenAI compatibility" table says which, per dialect). ``prompt_template`` is a
    :mod:`sagestream.prompts` name, needed for chat on ``tgi`` and ``lmi``. ``model`` is left out: each
    endpoint serves one model, and vLLM refuses a name it does not serve. ``in_call`` names the fields the
    call carries outside the body (``prompt_cache_key`` as SageMaker's ``PrefixAwareId``): a prompt dialect
    does not refuse them, the ``openai`` dialect still forwards them in the body.

    Example::

        >>> from sagestream.schema import parse_chat
        >>> chat = parse_chat(b'{"messages": [{"role": "user", "content": "Hi"}], "tools": []}', max_tokens_limit=None)
        >>> upstream_body("openai", chat, prompt_template=None, stream=True, max_tokens_default=None)
        {'messages': [{'role': 'user', 'content': 'Hi'}], 'tools': [], 'stream': True}
        >>> try:
        ...     upstream_body("tgi", chat, prompt_template="chatml", stream=True, max_tokens_default=None)
        ... except APIError as err:
        ...     print(err.param)
        tools
    """
    from sagestream.schema import ChatCompletionRequest, CompletionRequest

    max_tokens = request.effective_max_tokens
    if max_tokens is None:
        max_tokens = max_tokens_default
    if dialect_named(dialect) == "openai":
        return _openai_body(request, stream=stream, max_tokens=max_tokens)
    sent = request.sent()
    for name, value in sent.items():
        reason = _REFUSED[dialect].get(name)
        if reason is not None and value not in _NO_OP.get(name, ()) and name not in in_call:
            _refuse(name, reason, dialect)
    if isinstance(request, CompletionRequest):
        prompt = request.prompt_text
    elif prompt_template is None:
        raise APIError.invalid_request(
            "This endpoint's model container takes a prompt, not chat messages, and no prompt template is "
            f"configured. Set PROMPT_TEMPLATE to one of: {', '.join(prompts.names())}; "
            "or send a prompt to /v1/completions.",
            param="messages",
            code="prompt_template_required",
        )
    else:
        _check_templatable(request, dialect)
        prompt = prompts.template(prompt_template)(request.plain_messages())
    parameters: dict[str, Any] = {"details": True}  # details carry finish_reason and the token count
    if max_tokens is not None:
        parameters["max_new_tokens"] = max_tokens
    if request.temperature == 0 or request.top_p == 0:
        # OpenAI's temperature 0 is greedy decoding, and so is top_p 0 (a nucleus of the top token alone);
        # TGI refuses 0 for either and wants do_sample off instead.
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
    # Same name and meaning (OpenAI's range, -2..2) in TGI's and LMI's parameters.
    if request.frequency_penalty is not None:
        parameters["frequency_penalty"] = request.frequency_penalty
    if request.presence_penalty is not None:  # lmi only: tgi refused it above
        parameters["presence_penalty"] = request.presence_penalty
    _logprobs_parameters(request, dialect, stream, parameters)
    if isinstance(request, ChatCompletionRequest) and request.response_format is not None:
        grammar = _grammar(request)
        if grammar is not None:  # tgi only: lmi refused json formats above
            parameters["grammar"] = grammar
    # EXTRA_REQUEST_FIELDS (top_k, repetition_penalty, ...) are generate parameters for these containers.
    _add_vendor_fields(request, dialect, parameters)
    return {"inputs": prompt, "parameters": parameters, "stream": stream}


def _check_templatable(request: ChatCompletionRequest, dialect: Dialect) -> None:
    """A prompt template carries each message's role and text; refuse by name what it cannot."""
    for n, message in enumerate(request.messages):
        if message.role == "function":
            _refuse(f"messages.{n}.role", "'function' messages belong to tool calling; " + _MESSAGES_API, dialect)
        sent = message.model_dump(exclude_unset=True, exclude_none=True)
        for name in sent:
            if name in ("role", "content", "tool_call_id"):
                continue
            reason = (
                _MESSAGES_API
                if name in ("tool_calls", "function_call")
                else "a prompt template carries only role and text"
            )
            _refuse(f"messages.{n}.{name}", reason, dialect)
        if isinstance(message.content, list):
            for m, part in enumerate(message.content):
                if part.type != "text":
                    _refuse(
                        f"messages.{n}.content.{m}", f"a prompt template carries text only, not {part.type}", dialect
                    )


def _logprobs_parameters(
    request: ChatCompletionRequest | CompletionRequest, dialect: Dialect, stream: bool, parameters: dict[str, Any]
) -> None:
    wanted = LogprobsWanted.of(request)
    if wanted is None:
        return
    name = "logprobs"
    if dialect == "lmi" and not stream:
        _refuse(name, "LMI sends each token's logprob only in its stream; ask with stream=true", dialect)
    if wanted.top:
        if dialect == "lmi":
            _refuse("top_logprobs" if wanted.kind == "chat" else name, _REFUSED["lmi"]["top_logprobs"], dialect)
        # TGI's own name: the n most likely tokens at each step, sent as top_tokens.
        parameters["top_n_tokens"] = wanted.top


def _grammar(request: ChatCompletionRequest) -> dict[str, Any] | None:
    """TGI's grammar for OpenAI's response_format: guided decoding to a JSON Schema."""
    response_format = request.response_format
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return {"type": "json", "value": {"type": "object"}}
    return {"type": "json", "value": response_format.json_schema.json_schema or {"type": "object"}}


def _openai_message(message: Any) -> dict[str, Any]:
    sent: dict[str, Any] = message.model_dump(mode="json", exclude_unset=True, by_alias=True)
    if sent.get("role") == "developer":
        # OpenAI's newer name for system; chat templates of open models know only system.
        sent["role"] = "system"
    if message.role != "assistant" and isinstance(message.content, list) and message.has_only_text:
        # Plain-string content: every container's chat template reads it, not all read content parts.
        sent["content"] = message.text
    return sent


def _openai_body(
    request: ChatCompletionRequest | CompletionRequest, *, stream: bool, max_tokens: int | None
) -> dict[str, Any]:
    from sagestream.schema import ChatCompletionRequest

    # Everything the request validated is forwarded as the client sent it, save these.
    body = request.sent()
    for name in ("model", "max_tokens", "max_completion_tokens", "stream", "stream_options"):
        body.pop(name, None)
    if isinstance(request, ChatCompletionRequest):
        body["messages"] = [_openai_message(message) for message in request.messages]
    else:
        body["prompt"] = request.prompt_text
    body["stream"] = stream
    if stream and request.stream_options is not None:
        body["stream_options"] = request.sent()["stream_options"]
    if max_tokens is not None:
        # max_tokens is the name every OpenAI-compatible server knows; max_completion_tokens is newer.
        body["max_tokens"] = max_tokens
    _add_vendor_fields(request, "openai", body)
    return body
