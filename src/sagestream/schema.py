"""The OpenAI requests the relay accepts, validated into pydantic models before anything is sent upstream.

:func:`parse_chat` and :func:`parse_completion` take the raw request body and either return a model or
raise an :class:`~sagestream.errors.APIError` with status 400, type ``invalid_request_error`` and, where a
field is at fault, ``param`` set to its dotted path (``messages.0.role``). Every rejection is a 400 and
never a 422: OpenAI's API answers wrong types, out-of-range values and a too-large ``max_tokens`` with
400 ``invalid_request_error``, and its SDKs map 400 to ``BadRequestError``; one status for every
invalid request is what clients are written against.

What is checked, and why so strictly: JSON types are not coerced (``"max_tokens": "5"`` or ``true`` is
rejected, as OpenAI does) so that what reaches the container is what the client meant. Unknown fields
are ignored, so newer SDKs that send more fields keep working. ``stream_options`` is ignored when not
streaming, rather than refused as OpenAI does, because some clients always send it.

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
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Literal, NoReturn, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from sagestream.errors import APIError

__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "CompletionRequest",
    "StreamOptions",
    "TextPart",
    "parse_chat",
    "parse_completion",
]

Role = Literal["system", "developer", "user", "assistant", "tool"]


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class TextPart(_Model):
    """A content part; only text is relayed, the containers behind the relay read no images."""

    type: Literal["text"]
    text: str


class ChatMessage(_Model):
    role: Role
    # None is what SDKs send back for an assistant turn that only called tools.
    content: str | list[TextPart] | None = None

    @property
    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content)


class StreamOptions(_Model):
    include_usage: bool = False


class _Sampling(_Model):
    """The fields both endpoints share, with OpenAI's ranges."""

    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    seed: int | None = None
    user: str | None = None
    n: int | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int | None) -> int | None:
        if n is not None and n != 1:
            raise ValueError("only n=1 is supported")
        return n

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
        return self.stream and self.stream_options is not None and self.stream_options.include_usage


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage]
    # OpenAI's newer name for max_tokens; when both are sent it wins, as it does at OpenAI.
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None

    @property
    def effective_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def plain_messages(self) -> list[tuple[str, str]]:
        """``(role, text)`` pairs for a prompt template.

        ``developer`` is OpenAI's new name for ``system``; text parts are joined with newlines.
        """
        return [("system" if m.role == "developer" else m.role, m.text) for m in self.messages]


class CompletionRequest(_Sampling):
    prompt: str


_RequestT = TypeVar("_RequestT", bound=_Sampling)

# The names pydantic puts in an error's location that are not fields: union members ("str",
# "list[TextPart]") and validator tags. Only real field names and list indexes make the param.
_FIELD_NAMES = frozenset(
    name
    for model in (ChatCompletionRequest, CompletionRequest, ChatMessage, TextPart, StreamOptions)
    for name in model.model_fields
)


def parse_chat(body: bytes, *, max_tokens_limit: int | None) -> ChatCompletionRequest:
    """A ``/v1/chat/completions`` body as a request, or a 400 :class:`APIError` saying what is wrong."""
    request = _parse(ChatCompletionRequest, body)
    if not request.messages:
        raise APIError.invalid_request("'messages' must contain at least one message.", param="messages")
    name = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
    _check_max_tokens(request, name, max_tokens_limit)
    return request


def parse_completion(body: bytes, *, max_tokens_limit: int | None) -> CompletionRequest:
    """A ``/v1/completions`` body as a request, or a 400 :class:`APIError` saying what is wrong."""
    request = _parse(CompletionRequest, body)
    _check_max_tokens(request, "max_tokens", max_tokens_limit)
    return request


def _parse(model: type[_RequestT], body: bytes) -> _RequestT:
    try:
        # NaN and Infinity are not JSON; refusing them here keeps them out of every number field.
        data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError and UnicodeDecodeError; RecursionError, absurd nesting.
        raise APIError.invalid_request(
            f"The request body is not valid JSON ({_reason(exc)}).", code="invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise APIError.invalid_request("The request body must be a JSON object.", code="invalid_type")
    if re.search(rb"\\u[dD][89a-fA-F]", body) and _has_lone_surrogate(data):
        # JSON's grammar allows "\ud800" alone; no UTF-8 can carry it to the container.
        raise APIError.invalid_request(
            "The request body is not valid JSON (a \\u escape is an unpaired UTF-16 surrogate).", code="invalid_json"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc.errors(include_url=False, include_input=False)) from None
    except RecursionError:
        raise APIError.invalid_request("The request body is nested too deeply.", code="invalid_json") from None


def _has_lone_surrogate(data: object) -> bool:
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except RecursionError:
        return False  # nested too deeply to check here; validation says so
    return False


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc)


def _param(error: ErrorDetails) -> str:
    return ".".join(str(part) for part in error["loc"] if isinstance(part, int) or part in _FIELD_NAMES)


def _invalid(errors: list[ErrorDetails]) -> APIError:
    # The deepest location is the most specific: for a list of content parts with a bad part it is the
    # part's field, not "content should be a string" from the other member of the union.
    param = max((_param(error) for error in errors), key=lambda p: p.count(".") + bool(p))
    here = [error for error in errors if _param(error) == param]
    if any(error["type"] == "missing" for error in here):
        return APIError.invalid_request(
            f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
        )
    reasons: list[str] = []
    for error in here:
        reason = error["msg"].removeprefix("Value error, ")
        if reasons:
            reason = reason[:1].lower() + reason[1:]
        if reason not in reasons:
            reasons.append(reason)
    code = "invalid_type" if all(error["type"].endswith("_type") for error in here) else "invalid_value"
    return APIError.invalid_request(
        f"Invalid value for '{param or 'body'}': {' or '.join(reasons)}.", param=param or None, code=code
    )


def _check_max_tokens(request: _Sampling, name: str, limit: int | None) -> None:
    wanted = request.effective_max_tokens
    if limit is not None and wanted is not None and wanted > limit:
        raise APIError.invalid_request(
            f"{name} is too large: {wanted}. This endpoint supports at most {limit} completion tokens.",
            param=name,
            code="max_tokens_exceeded",
        )
