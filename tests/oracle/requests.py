"""Reading a request body strictly, for every client protocol: the shared checks and the 400s that name a field.

:func:`read_object` refuses what is not a JSON object (NaN and Infinity, a lone surrogate, nesting past
:data:`MAX_JSON_DEPTH`, named by the free-form field it is in); :class:`StrictModel` is the base of every
request model (strict types, unknown fields refused by name); :func:`invalid` turns a validation's errors
into one 400 naming the first field at fault in the client's own dotted path; :func:`check_max_tokens` and
:func:`check_prompt_size` enforce the deployment's limits.

Environment variables read: none.

Example::

    >>> read_object(b'{"model": "m"}')
    {'model': 'm'}
    >>> try:
    ...     read_object(b'{"n": NaN}')
    ... except APIError as err:
    ...     print(err.status, err.code)
    400 invalid_json
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel, ConfigDict
from pydantic_core import ErrorDetails

from sagestream.errors import APIError

if TYPE_CHECKING:
    from tests.oracle.openai_request import OpenAIRequest

__all__ = [
    "MAX_JSON_DEPTH",
    "RelayedObject",
    "StrictModel",
    "check_max_tokens",
    "check_prompt_size",
    "invalid",
    "read_object",
]


MAX_JSON_DEPTH = 64
"""How deeply a request body may nest, the body itself being level 1 (so a ``response_format`` schema may
nest 61 levels under its field). pydantic's JSON serializer gives up at about 255 levels (its recursion
guard), in the upstream body build, after the request was accepted: a quarter of that leaves it far out of
reach, while real JSON Schemas nest a dozen levels at most (a schema level is two JSON levels, ``properties``
and the property; OpenAI's structured outputs allow 10 schema levels)."""


class StrictModel(BaseModel):
    """The base of every request model here and in the other APIs' request modules: strict types, unknown
    fields refused (each is named in the 400), immutable."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class RelayedObject(BaseModel):
    """An object the relay passes on without reading inside it (OpenAI-platform options, JSON Schemas)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)


def read_object(body: bytes, free_form: tuple[tuple[str, ...], ...] = ()) -> dict[str, Any]:
    """A request body read as the JSON object every API's request is; a 400 otherwise (not JSON, NaN or
    Infinity, not an object, a lone surrogate, nested deeper than :data:`MAX_JSON_DEPTH`: named by the field
    of ``free_form`` it is in: the request's free-form fields, ``*`` standing for a list index).

    >>> read_object(b'{"model": "m"}')
    {'model': 'm'}
    """
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
    _check_depth(body, data, free_form)
    return data


def _check_depth(body: bytes, data: dict[str, Any], free_form: tuple[tuple[str, ...], ...] = ()) -> None:
    """A 400 naming the field when the body nests deeper than :data:`MAX_JSON_DEPTH`.

    Decided here, before any work: pydantic would accept the request and then fail to serialise it for the
    endpoint ("Maximum serialization depth exceeded"), a 500 a client could cause at will.

    >>> _check_depth(b"{}", {"tools": [{"function": {"parameters": {"a": {}}}}]}) is None
    True
    """
    if body.count(b"{") + body.count(b"[") < MAX_JSON_DEPTH:
        return  # cannot nest that deep: no walk
    pending: list[tuple[Any, int, tuple[str, ...]]] = [(data, 1, ())]
    while pending:
        value, depth, path = pending.pop()
        if depth > MAX_JSON_DEPTH:
            field = _field_of(path, free_form)
            raise APIError.invalid_request(
                f"'{field}' is nested too deeply: a request may nest at most {MAX_JSON_DEPTH} levels of objects "
                "and arrays.",
                param=field,
                code="invalid_value",
            )
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        pending.extend((child, depth + 1, (*path, str(key))) for key, child in items if isinstance(child, dict | list))


def _field_of(path: tuple[str, ...], free_form: tuple[tuple[str, ...], ...] = ()) -> str:
    """The field a deep path is in: a free-form field of ``free_form`` (patterns, ``*`` for an index), else
    the top-level field.

    >>> tools = (("tools", "*", "function", "parameters"),)
    >>> _field_of(("tools", "3", "function", "parameters", "properties", "a"), tools)
    'tools.3.function.parameters'
    >>> _field_of(("top_k", "0", "0"), tools)
    'top_k'
    """
    for pattern in free_form:
        head = path[: len(pattern)]
        if len(head) < len(pattern):
            continue
        if all(p == h or (p == "*" and h.isdigit()) for p, h in zip(pattern, head, strict=True)):
            return ".".join(head)
    return path[0] if path else "body"


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


def _param(error: ErrorDetails, data: Any) -> str:
    """The dotted path of the error in the request as sent.

    pydantic's location also holds union members (``str``, ``list[...]``) and discriminator tags
    (``user``); walking the request itself keeps only the keys and indexes the client wrote.
    """
    parts: list[str] = []
    here: Any = data
    loc = error["loc"]
    for i, part in enumerate(loc):
        tags = (here.get("type"), here.get("role")) if isinstance(here, Mapping) else ()
        if isinstance(part, str) and part in tags and i + 1 < len(loc) and loc[i + 1] in here:
            # The oracle's one change to the old code: a union's tag in pydantic's location ("text" for a text
            # part) was taken for the field of that name, so an unknown field of a text part was named
            # "content.0.text". The msgspec validation names it; the oracle now does too.
            continue
        if isinstance(part, int) and isinstance(here, list) and 0 <= part < len(here):
            parts.append(str(part))
            here = here[part]
        elif isinstance(part, str) and isinstance(here, Mapping) and part in here:
            parts.append(part)
            here = here[part]
        elif isinstance(part, str) and error["type"] == "missing" and i == len(loc) - 1:
            parts.append(part)  # a missing field is not in the request: name it all the same
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        # The tag itself is at fault (a role or part type no member has): name its field.
        parts.append(str(error.get("ctx", {}).get("discriminator", "")).strip("'"))
    return ".".join(parts)


def invalid(errors: list[ErrorDetails], data: Any) -> APIError:
    unknown = [_param(error, data) for error in errors if error["type"] == "extra_forbidden"]
    if unknown:
        # OpenAI's own words for a field it does not define.
        name = min(unknown, key=lambda p: (p.count("."), p))
        return APIError.invalid_request(
            f"Unrecognized request argument supplied: {name}", param=name, code="unknown_parameter"
        )
    # The deepest location is the most specific: for a list of content parts with a bad part it is the
    # part's field, not "content should be a string" from the other member of the union.
    param = max((_param(error, data) for error in errors), key=lambda p: p.count(".") + bool(p))
    here = [error for error in errors if _param(error, data) == param]
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


def check_max_tokens(request: OpenAIRequest, name: str, limit: int | None) -> None:
    wanted = request.effective_max_tokens
    if limit is not None and wanted is not None and wanted > limit:
        raise APIError.invalid_request(
            f"{name} is too large: {wanted}. This endpoint supports at most {limit} completion tokens.",
            param=name,
            code="max_tokens_exceeded",
        )


def check_prompt_size(request: OpenAIRequest, name: str, limit: int | None) -> None:
    size = request.prompt_chars()
    if limit is not None and size > limit:
        raise APIError.invalid_request(
            f"The prompt is {size} characters; this endpoint takes at most {limit} (MAX_PROMPT_CHARS).",
            param=name,
            code="prompt_too_long",
        )
