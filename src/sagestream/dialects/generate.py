"""The prompt dialects' common ground: text-generation-inference's ``generate`` format, which LMI (DJL Serving)
also speaks. A prompt (chat rendered by a :mod:`~sagestream.dialects.prompts` template) and ``parameters``
go out; ``{"token": {"text", "special"}}`` events come back, the last one with ``details``
(``finish_reason``, ``generated_tokens``), or one ``generated_text`` answer.

:class:`GenerateDialect` builds the body from the class attributes and hooks each subclass sets
(:mod:`sagestream.dialects.tgi`, :mod:`sagestream.dialects.lmi`); the decoders read both containers.

Example::

    >>> decoder = GenerateStreamDecoder()
    >>> decoder.decode('{"index": 1, "token": {"id": 9, "text": "Hé", "special": false}}')
    [Delta(content='Hé')]
    >>> last = '{"token": {"text": "</s>", "special": true}, "details": {"finish_reason": "eos_token",'
    >>> decoder.decode(last + ' "generated_tokens": 2, "input_length": 5}}')
    [Delta(content='', finish_reason='stop', usage=Usage(prompt_tokens=5, completion_tokens=2, total_tokens=7))]
    >>> decoder.done
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import msgspec

from sagestream.delta import Delta, Usage
from sagestream.dialects import prompts
from sagestream.dialects._base import Dialect
from sagestream.dialects._read import (
    FINISH_REASONS,
    DecodeError,
    UpstreamStreamError,
    integer,
    load,
    obj,
    raise_if_error,
    string,
)
from sagestream.errors import APIError

if TYPE_CHECKING:
    from sagestream.dialects._base import AnyRequest
    from sagestream.protocols.openai.request import ChatCompletionRequest, CompletionRequest

__all__ = ["MESSAGES_API", "NOT_CARRIED", "GenerateDialect", "GenerateStreamDecoder", "LogprobsWanted"]

MESSAGES_API = (
    "this endpoint's model container takes a prompt, not OpenAI's chat request; tool calling needs a "
    "Messages-API container (TGI's Messages API, vLLM, SGLang or LMI's chat endpoint) deployed with "
    "UPSTREAM_FORMAT=openai"
)
NOT_CARRIED = "the model container's generate parameters have no such field"

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


class GenerateDialect(Dialect):
    """A container that takes ``{"inputs", "parameters", "stream"}``."""

    # Per field: why a field the client set cannot be carried. A field listed here is refused by name
    # whatever its value, except the values that ask for nothing (_NO_OP).
    refused: ClassVar[Mapping[str, str]]
    # The container's name for OpenAI's ``stop`` list.
    stop_name: ClassVar[str]

    def body(
        self,
        request: AnyRequest,
        *,
        prompt_template: str | None,
        stream: bool,
        max_tokens_default: int | None,
        in_call: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        for name, value in request.sent().items():
            reason = self.refused.get(name)
            if reason is not None and value not in _NO_OP.get(name, ()) and name not in in_call:
                self.refuse(name, reason)
        prompt = self._prompt(request, prompt_template)
        max_tokens = request.effective_max_tokens
        parameters = self._parameters(request, max_tokens_default if max_tokens is None else max_tokens)
        self.logprobs_parameters(request, stream, parameters)
        self.format_parameters(request, parameters)
        # EXTRA_REQUEST_FIELDS (top_k, repetition_penalty, ...) are generate parameters for these containers.
        self.add_vendor_fields(request, parameters)
        return {"inputs": prompt, "parameters": parameters, "stream": stream}

    def _prompt(self, request: AnyRequest, prompt_template: str | None) -> str:
        from sagestream.protocols.openai.request import CompletionRequest

        if isinstance(request, CompletionRequest):
            return request.prompt_text
        if prompt_template is None:
            raise APIError.invalid_request(
                "This endpoint's model container takes a prompt, not chat messages, and no prompt template is "
                f"configured. Set PROMPT_TEMPLATE to one of: {', '.join(prompts.names())}; "
                "or send a prompt to /v1/completions.",
                param="messages",
                code="prompt_template_required",
            )
        self._check_templatable(request)
        return prompts.template(prompt_template)(request.plain_messages())

    def _parameters(self, request: AnyRequest, max_tokens: int | None) -> dict[str, Any]:
        """The sampling parameters both containers name alike (the stop list under :attr:`stop_name`)."""
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
            parameters[self.stop_name] = request.stop_sequences
        if request.seed is not None:
            parameters["seed"] = request.seed
        # Same name and meaning (OpenAI's range, -2..2) in TGI's and LMI's parameters.
        if request.frequency_penalty is not None:
            parameters["frequency_penalty"] = request.frequency_penalty
        if request.presence_penalty is not None:  # where it is not in `refused`
            parameters["presence_penalty"] = request.presence_penalty
        return parameters

    def logprobs_parameters(self, request: AnyRequest, stream: bool, parameters: dict[str, Any]) -> None:
        """The parameters that ask for the logprobs ``request`` wants (each token's own comes with ``details``)."""

    def format_parameters(self, request: AnyRequest, parameters: dict[str, Any]) -> None:
        """The parameters that ask for ``response_format`` (guided decoding), where the container has one."""

    def _check_templatable(self, request: ChatCompletionRequest) -> None:
        """A prompt template carries each message's role and text; refuse by name what it cannot."""
        for n, message in enumerate(request.messages):
            if message.role == "function":
                self.refuse(f"messages.{n}.role", "'function' messages belong to tool calling; " + MESSAGES_API)
            for name in message.given():
                if name in ("role", "content", "tool_call_id"):
                    continue
                reason = (
                    MESSAGES_API
                    if name in ("tool_calls", "function_call")
                    else "a prompt template carries only role and text"
                )
                self.refuse(f"messages.{n}.{name}", reason)
            if isinstance(message.content, list):
                for m, part in enumerate(message.content):
                    if part.type != "text":
                        self.refuse(
                            f"messages.{n}.content.{m}", f"a prompt template carries text only, not {part.type}"
                        )

    def stream_decoder(self, request: AnyRequest | None = None) -> GenerateStreamDecoder:
        return GenerateStreamDecoder(LogprobsWanted.of(request))

    def decode_body(self, body: bytes, request: AnyRequest | None = None) -> Delta:
        data = load(body)
        # TGI answers a one-element list; LMI a bare object unless it imitates TGI.
        if isinstance(data, list):
            if not data:
                raise DecodeError("answer is an empty list")
            data = data[0]
        answer = obj(data, "answer")
        raise_if_error(answer)
        text = string(answer, "generated_text", "answer")
        if text is None:
            raise DecodeError("answer has no generated_text")
        finish_reason = usage = logprobs = None
        if answer.get("details") is not None:
            details = obj(answer["details"], "details")
            finish_reason, usage = _details(details)
            wanted = LogprobsWanted.of(request)
            if wanted is not None:
                logprobs = _LogprobsBuilder(wanted).of(_detail_tokens(details))
        return Delta(text, None, finish_reason, usage, logprobs=logprobs)


def _details(details: Mapping[str, Any]) -> tuple[str, Usage | None]:
    """``(finish_reason, usage)`` from a TGI/LMI ``details`` object."""
    reason = string(details, "finish_reason", "details")
    if reason == "error":  # LMI's way to say generation failed after the 200
        raise UpstreamStreamError("generation failed (finish_reason: error)")
    generated = integer(details, "generated_tokens", "details")
    usage = None
    if generated is not None:
        # TGI's streamed details say input_length; its whole answer does not, unless prefill is asked for.
        prompt = integer(details, "input_length", "details")
        if prompt is None and isinstance(details.get("prefill"), list) and details["prefill"]:
            prompt = len(details["prefill"])
        usage = Usage(prompt, generated, None if prompt is None else prompt + generated)
    return FINISH_REASONS.get(reason or "", "stop"), usage


class LogprobsWanted(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What the client asked of logprobs, for the dialects that send a logprob with every token."""

    kind: Literal["chat", "completion"]
    top: int = 0

    @classmethod
    def of(cls, request: ChatCompletionRequest | CompletionRequest | None) -> LogprobsWanted | None:
        if request is None:
            return None
        from sagestream.protocols.openai.request import ChatCompletionRequest, CompletionRequest

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
        top = obj(top, f"{where}[{n}]")
        logprob = _token_logprob(top, f"{where}[{n}]")
        if logprob is not None:
            tops.append((string(top, "text", f"{where}[{n}]") or "", logprob))
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
        event = obj(load(record), "event")
        raise_if_error(event)
        token = obj(event.get("token"), "token")
        text = string(token, "text", "token") or ""
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
            finish_reason, usage = _details(obj(event["details"], "details"))
            self.done = True
        if not text and finish_reason is None:
            return []
        return [Delta(text, None, finish_reason, usage, logprobs=logprobs)]


def _detail_tokens(details: Mapping[str, Any]) -> list[tuple[str, float, list[tuple[str, float]]]]:
    """TGI's ``details.tokens`` (and ``top_tokens``) as ``(text, logprob, tops)``, special tokens left out."""
    tokens = details.get("tokens")
    if not isinstance(tokens, list):
        return []
    tops = details.get("top_tokens")
    out = []
    for n, token in enumerate(tokens):
        token = obj(token, f"details.tokens[{n}]")
        if token.get("special") is True:
            continue
        logprob = _token_logprob(token, f"details.tokens[{n}]")
        if logprob is None:
            continue
        top = _top_tokens(tops[n], f"details.top_tokens[{n}]") if isinstance(tops, list) and n < len(tops) else []
        out.append((string(token, "text", f"details.tokens[{n}]") or "", logprob, top))
    return out
