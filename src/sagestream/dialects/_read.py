"""Reading a container's JSON without trusting it: each helper raises :class:`DecodeError` naming the field.

Shared by every dialect's decoder; the two exceptions are the only ones a decoder raises
(:func:`sagestream.faults.error_from` gives each its status).

Example::

    >>> usage_of({"prompt_tokens": 3, "completion_tokens": 2}, "usage")
    Usage(prompt_tokens=3, completion_tokens=2, total_tokens=5)
    >>> string({"text": 7}, "text", "token")
    Traceback (most recent call last):
    ...
    sagestream.dialects._read.DecodeError: Unreadable answer from the model endpoint: token.text is not a string
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

import msgspec

from sagestream.delta import Usage
from sagestream.errors import MAX_MESSAGE_CHARS

__all__ = [
    "FINISH_REASONS",
    "DecodeError",
    "UpstreamStreamError",
    "error_message",
    "integer",
    "load",
    "obj",
    "raise_if_error",
    "string",
    "usage_of",
]


class DecodeError(Exception):
    """The container sent something its dialect does not allow; the answer cannot be read on."""

    def __init__(self, message: str) -> None:
        super().__init__(f"Unreadable answer from the model endpoint: {message}")


class UpstreamStreamError(Exception):
    """The container said, in its answer, that generation failed (TGI and vLLM send this mid-stream)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"The model endpoint reported an error: {message}")


# TGI's and LMI's reasons, in OpenAI's words; a reason neither documents still ended the answer.
FINISH_REASONS = {"length": "length", "eos_token": "stop", "stop_sequence": "stop"}


# msgspec's JSON decoder reads a container's chunk in a third of json.loads's instructions (9.9 k against 29.6 k,
# callgrind, a vLLM text chunk) and gives the same values; what it refuses, json.loads reads as before.
_decode = msgspec.json.Decoder().decode


def load(text: str | bytes) -> Any:
    """A container's JSON; :class:`DecodeError` if it is not JSON, as ``json.loads`` reads it.

    msgspec decodes; the few inputs it refuses that ``json.loads`` reads (``NaN``, ``1e400``, a lone
    surrogate escape, UTF-16 bytes) go to ``json.loads``, so the values are its values (a property test in
    tests/unit/dialects/test_read.py holds the two to it).
    """
    try:
        return _decode(text)
    except (msgspec.MsgspecError, RecursionError):
        pass
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, UnicodeDecodeError
        raise DecodeError(f"not JSON ({exc.__class__.__name__})") from None


def obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DecodeError(f"{what} is not a JSON object")
    return cast(dict[str, Any], value)


def string(obj: Mapping[str, Any], key: str, what: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise DecodeError(f"{what}.{key} is not a string")
    return value


def integer(obj: Mapping[str, Any], key: str, what: str) -> int | None:
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


def raise_if_error(obj: Mapping[str, Any]) -> None:
    message = error_message(obj)
    if message is not None:
        raise UpstreamStreamError(message)


def usage_of(value: Any, what: str) -> Usage | None:
    """The container's usage; ``None`` when it says nothing about the completion's tokens."""
    if value is None:
        return None
    usage = obj(value, what)
    prompt = integer(usage, "prompt_tokens", what)
    completion = integer(usage, "completion_tokens", what)
    total = integer(usage, "total_tokens", what)
    if completion is None:
        return None
    if total is None and prompt is not None:
        total = prompt + completion
    details = {k: v for k, v in usage.items() if k not in ("prompt_tokens", "completion_tokens", "total_tokens")}
    return Usage(prompt, completion, total, details)
