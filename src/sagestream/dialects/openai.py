"""The ``openai`` dialect: OpenAI's chat and completions bodies, as TGI's Messages API, vLLM, SGLang and LMI's
chat endpoint take them; ``chat.completion.chunk`` / ``text_completion`` events back, ending with ``[DONE]``.

The request is forwarded as the client sent it (the container validates what it does not know), less what
the function sets itself: ``model``, ``stream``, ``stream_options`` and the token limit.

Example::

    >>> decoder = OpenAIDialect().stream_decoder()
    >>> decoder.decode('{"choices": [{"index": 0, "delta": {"content": "Hé"}}]}')
    [Delta(content='Hé')]
    >>> decoder.decode("[DONE]"), decoder.done
    ([], True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from sagestream.delta import Delta, Usage
from sagestream.dialects._base import Dialect
from sagestream.dialects._read import FINISH_REASONS, DecodeError, load, obj, raise_if_error, string, usage_of

if TYPE_CHECKING:
    from sagestream.dialects._base import AnyRequest

__all__ = ["OpenAIDialect", "OpenAIStreamDecoder"]


class OpenAIDialect(Dialect):
    name = "openai"
    computed_fields = frozenset(
        {"model", "messages", "prompt", "stream", "stream_options", "max_tokens", "max_completion_tokens"}
    )
    carries_user = True
    carries_reasoning = True

    def body(
        self,
        request: AnyRequest,
        *,
        prompt_template: str | None,
        stream: bool,
        max_tokens_default: int | None,
        in_call: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """The request as the client sent it, less the fields the function sets (``in_call`` fields stay in)."""
        from sagestream.protocols.openai.request import ChatCompletionRequest

        max_tokens = request.effective_max_tokens
        if max_tokens is None:
            max_tokens = max_tokens_default
        # Everything the request validated is forwarded as the client sent it, save these.
        body = request.sent()
        for name in ("model", "max_tokens", "max_completion_tokens", "stream", "stream_options"):
            body.pop(name, None)
        if isinstance(request, ChatCompletionRequest):
            body["messages"] = [
                _message(m, sent) for m, sent in zip(request.messages, request.sent_messages(), strict=True)
            ]
        else:
            body["prompt"] = request.prompt_text
        body["stream"] = stream
        if stream and request.stream_options is not None:
            body["stream_options"] = request.sent()["stream_options"]
        if max_tokens is not None:
            # max_tokens is the name every OpenAI-compatible server knows; max_completion_tokens is newer.
            body["max_tokens"] = max_tokens
        self.add_vendor_fields(request, body)
        return body

    def stream_decoder(self, request: AnyRequest | None = None) -> OpenAIStreamDecoder:
        return OpenAIStreamDecoder()

    def decode_body(self, body: bytes, request: AnyRequest | None = None) -> Delta:
        answer = obj(load(body), "answer")
        raise_if_error(answer)
        if not isinstance(answer.get("choices"), list) or not answer["choices"]:
            raise DecodeError("answer has no choices")
        delta = _openai_choice(answer, usage_of(answer.get("usage"), "usage"))
        assert delta is not None  # choices is a non-empty list
        delta.system_fingerprint = string(answer, "system_fingerprint", "answer")
        return delta


def _message(message: Any, sent: dict[str, Any]) -> dict[str, Any]:
    """The message as the client sent it, its role and content in the words every chat template reads."""
    sent = dict(sent)
    if sent.get("role") == "developer":
        # OpenAI's newer name for system; chat templates of open models know only system.
        sent["role"] = "system"
    if message.role != "assistant" and isinstance(message.content, list) and message.has_only_text:
        # Plain-string content: every container's chat template reads it, not all read content parts.
        sent["content"] = message.text
    return sent


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
    choice = obj(choices[0], "choices[0]")
    finish_reason = string(choice, "finish_reason", "choices[0]")
    # TGI's Messages API before 2.0 put its own reasons (eos_token) in OpenAI's field.
    finish_reason = FINISH_REASONS.get(finish_reason, finish_reason) if finish_reason else finish_reason
    logprobs = choice.get("logprobs")
    if logprobs is not None:
        logprobs = obj(logprobs, "choices[0].logprobs")
    for key in ("delta", "message"):  # delta in chunks, message in a whole chat.completion
        if key in choice:
            where = f"choices[0].{key}"
            part = obj(choice[key] if choice[key] is not None else {}, where)
            return Delta(
                content=string(part, "content", where) or "",
                role=string(part, "role", where),
                finish_reason=finish_reason,
                usage=usage,
                tool_calls=_tool_calls(part, where),
                reasoning_content=string(part, "reasoning_content", where),
                reasoning=string(part, "reasoning", where),
                refusal=string(part, "refusal", where),
                logprobs=logprobs,
                extra={k: v for k, v in part.items() if k not in _DELTA_FIELDS and v is not None},
            )
    return Delta(string(choice, "text", "choices[0]") or "", None, finish_reason, usage, logprobs=logprobs)


class OpenAIStreamDecoder:
    """``chat.completion.chunk`` and ``text_completion`` events; ``[DONE]`` ends."""

    __slots__ = ("done", "fingerprinted")

    def __init__(self) -> None:
        self.done = False
        self.fingerprinted = False  # the answer's system_fingerprint was handed on (on its first delta)

    def decode(self, record: str) -> list[Delta]:
        record = record.strip()
        if self.done or not record:
            return []
        if record == "[DONE]":
            self.done = True
            return []
        chunk = obj(load(record), "chunk")
        if not self.fingerprinted and chunk.get("system_fingerprint") is not None:
            # Every chunk repeats it: the first one's goes on, with the first delta (or alone).
            self.fingerprinted = True
            fingerprint = string(chunk, "system_fingerprint", "chunk")
            deltas = self._decode(chunk) or [Delta()]
            deltas[0].system_fingerprint = fingerprint
            return deltas
        return self._decode(chunk)

    def _decode(self, chunk: dict[str, Any]) -> list[Delta]:
        text = _text_only(chunk)
        if text is not None:
            return [text]
        raise_if_error(chunk)
        usage = usage_of(chunk.get("usage"), "usage")
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
