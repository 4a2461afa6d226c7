"""Reading a request body strictly, for every client protocol: the shared checks and the 400s that name a field.

The request models are ``msgspec.Struct`` classes (:class:`Strict`, :class:`Tagged`): unknown fields refused
by name, JSON types not coerced, constraints as ``Meta``, content parts and items as tagged unions.
:func:`read_object` reads the body (msgspec's decoder: NaN, Infinity and a lone surrogate are not JSON) and
refuses what is not an object or nests past :data:`MAX_JSON_DEPTH` (named by the free-form field it is in);
:func:`convert` validates it into a model, and turns msgspec's one error into the 400 OpenAI's API would
send, ``param`` the client's dotted path (``messages.0.role``); :func:`check_max_tokens` and
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
    >>> class Ask(Strict):
    ...     n: int
    >>> try:
    ...     convert(Ask, {"n": "5"})
    ... except APIError as err:
    ...     print(err.param, err.code)
    n invalid_type
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any, Protocol, TypeVar

import msgspec

from sagestream.errors import APIError

__all__ = [
    "MAX_JSON_DEPTH",
    "Strict",
    "Tagged",
    "check_entries",
    "check_max_tokens",
    "check_prompt_size",
    "convert",
    "describe",
    "invalid",
    "read_object",
]

MAX_JSON_DEPTH = 64
"""How deeply a request body may nest, the body itself being level 1 (so a ``response_format`` schema may
nest 61 levels under its field). A container's JSON parser, and any code that walks a schema, recurses once per
level: a quarter of Python's default recursion limit keeps every such walk far from it, while real JSON Schemas
nest a dozen levels at most (a schema level is two JSON levels, ``properties`` and the property; OpenAI's
structured outputs allow 10 schema levels)."""


class Strict(msgspec.Struct, forbid_unknown_fields=True):
    """The base of every request model: unknown fields refused (each named in the 400), no coercion."""

    def given(self) -> dict[str, Any]:
        """The fields that carry a value (not ``None``), under their Python names."""
        return {name: value for name in self.__struct_fields__ if (value := getattr(self, name)) is not None}


class Tagged(Strict, tag_field="type"):
    """A member of a union told apart by its ``type`` (a content part, a tool, an item)."""

    @property
    def type(self) -> str:
        return str(self.__struct_config__.tag)


ModelT = TypeVar("ModelT")


# --- reading the body ---------------------------------------------------------------------------------------

# Every byte but a quote and a bracket: what a body's structure is read without.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"{}[]')
# The nesting each bracket byte adds: +1 opens, -1 closes.
_STEP = [0] * 256
_STEP[ord("{")] = _STEP[ord("[")] = 1
_STEP[ord("}")] = _STEP[ord("]")] = -1
_LONE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def read_object(body: bytes, free_form: tuple[tuple[str, ...], ...] = ()) -> dict[str, Any]:
    """A request body read as the JSON object every API's request is; a 400 otherwise (not JSON, NaN or
    Infinity, not an object, a lone surrogate, nested deeper than :data:`MAX_JSON_DEPTH`: named by the field
    of ``free_form`` it is in: the request's free-form fields, ``*`` standing for a list index)."""
    try:
        data = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        if _LONE_SURROGATE.search(body):
            # JSON's grammar allows "\ud800" alone; no UTF-8 can carry it to the container.
            raise APIError.invalid_request(
                "The request body is not valid JSON (a \\u escape is an unpaired UTF-16 surrogate).",
                code="invalid_json",
            ) from None
        raise APIError.invalid_request(f"The request body is not valid JSON ({exc}).", code="invalid_json") from None
    except RecursionError:
        raise APIError.invalid_request(
            "The request body is not valid JSON (nested too deeply).", code="invalid_json"
        ) from None
    if not isinstance(data, dict):
        raise APIError.invalid_request("The request body must be a JSON object.", code="invalid_type")
    if _depth(body) > MAX_JSON_DEPTH:
        _refuse_deepest(data, free_form)
    return data


def _depth(body: bytes) -> int:
    """How deeply ``body`` (valid JSON) nests, from its bytes: its strings taken out, its brackets counted.

    Only C loops over the bytes (a regex over every string cost ten times as much): with the escaped
    backslashes, then the escaped quotes, gone, every quote left opens or closes a string, so the brackets
    outside strings are those between the even-numbered quotes. The decoded body is walked only to name the
    field of a body that is too deep.

    >>> _depth(b'{"a": [1, {"b": "]]]{{"}]}'), _depth(b'{"a": "' + b"[" * 99 + b'", "b": [[[]]]}')
    (0, 4)
    """
    if body.count(b"{") + body.count(b"[") <= MAX_JSON_DEPTH:
        return 0  # cannot nest that deep
    structure = body.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    brackets = b"".join(structure.split(b'"')[::2])
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _refuse_deepest(data: dict[str, Any], free_form: tuple[tuple[str, ...], ...]) -> None:
    """The 400 for a body nested too deeply, naming the field the first too-deep value is in."""
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


# --- validating it ------------------------------------------------------------------------------------------


def convert(model: type[ModelT], data: Any, *, at: str = "") -> ModelT:
    """``data`` (JSON values) as ``model``, or the 400 naming the field at fault; ``at`` is where ``data`` is
    in the request (``messages.2``), for a part validated on its own."""
    try:
        return msgspec.convert(data, model, strict=True)
    except msgspec.ValidationError as exc:
        raise invalid(exc, at, model=model, data=data) from None


# msgspec's one error per validation: "<what> - at `$.messages[0].role`" (no location: the object itself).
_ERROR = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<where>[^`]*)`)?$", re.DOTALL)
_STEP_IN_PATH = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\.\.\.\]")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>.*)`$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<name>.*)`$", re.DOTALL)


def _dotted(where: str) -> list[str]:
    """``.messages[0].content['a.b']`` as ``["messages", "0", "content", "a.b"]``."""
    return [
        m.group(1) or m.group(2) or m.group(3) or "" for m in _STEP_IN_PATH.finditer(where) if m.group(0) != "[...]"
    ]


def check_entries(param: str, entries: dict[str, Any] | None, value_type: Any) -> None:
    """Each value of the object ``entries`` (the field ``param``) as ``value_type``, or the 400 naming the entry
    (``metadata.user``). A model types such an object ``dict[str, Any]`` and calls this: msgspec's own error
    for an entry does not say which key it was at."""
    for key, value in (entries or {}).items():
        convert(value_type, value, at=f"{param}.{key}")


def describe(exc: msgspec.ValidationError) -> tuple[str, list[str], str]:
    """msgspec's one error as ``(kind, path, text)``: ``unknown`` or ``missing`` with the field's own path (the
    field's name last), or ``invalid`` with the path of the value at fault and msgspec's words for what is wrong.

    >>> describe(msgspec.ValidationError("Object missing required field `text` - at `$.content[0]`"))
    ('missing', ['content', '0', 'text'], 'Object missing required field `text`')
    """
    found = _ERROR.match(str(exc))
    assert found is not None  # the pattern matches any text
    what, path = found["what"], _dotted(found["where"] or "")
    unknown, missing = _UNKNOWN.match(what), _MISSING.match(what)
    if unknown is not None:
        return "unknown", [*path, unknown["name"]], what
    if missing is not None:
        return "missing", [*path, missing["name"]], what
    return "invalid", path, what


def invalid(exc: msgspec.ValidationError, at: str = "", *, model: Any = None, data: Any = None) -> APIError:
    """The 400 for msgspec's validation error, in OpenAI's words for the kind of fault.

    >>> invalid(msgspec.ValidationError("Object contains unknown field `top_k`")).message
    'Unrecognized request argument supplied: top_k'
    >>> invalid(msgspec.ValidationError("Invalid value 'robot' - at `$.messages[0].role`")).param
    'messages.0.role'
    """
    kind, steps, what = describe(exc)
    param = ".".join([at, *steps] if at else steps)
    if kind == "unknown":
        # OpenAI's own words for a field it does not define.
        return APIError.invalid_request(
            f"Unrecognized request argument supplied: {param}", param=param, code="unknown_parameter"
        )
    if kind == "missing":
        return APIError.invalid_request(
            f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
        )
    code = "invalid_type" if what.startswith("Expected `") and ", got `" in what else "invalid_value"
    if what.startswith(("Invalid value ", "Invalid enum value ")) and model is not None:
        choices = _expected(model, data, steps)
        if choices:
            what += "; expected one of " + ", ".join(f"'{c}'" for c in choices)
    return APIError.invalid_request(f"Invalid value for '{param or 'body'}': {what}.", param=param or None, code=code)


def _expected(model: Any, data: Any, path: list[str]) -> tuple[str, ...]:
    """The values ``model`` takes at ``path`` in ``data``: a union's tags (``role``, ``type``) or a Literal's.
    Only an error's message needs them: msgspec names the value it refused, not those it would take."""
    import msgspec.inspect as inspect  # on the error path only

    info: Any = inspect.type_info(model)
    here = data
    for n, step in enumerate(path):
        members = info.types if isinstance(info, inspect.UnionType) else (info,)
        structs = [m for m in members if isinstance(m, inspect.StructType)]
        if isinstance(here, dict) and structs:
            tag_field = structs[0].tag_field
            if tag_field is not None and step == tag_field and n == len(path) - 1:
                return tuple(str(m.tag) for m in structs)
            struct = next((m for m in structs if tag_field is None or m.tag == here.get(tag_field)), None)
            field = next((f for f in struct.fields if f.encode_name == step), None) if struct else None
            if field is None:
                return ()
            info, here = field.type, here.get(step)
        elif isinstance(here, dict):
            mapping = next((m for m in members if isinstance(m, inspect.DictType)), None)
            if mapping is None:
                return ()
            info, here = mapping.value_type, here.get(step)
        elif isinstance(here, list) and step.isdigit() and int(step) < len(here):
            items = next((m for m in members if isinstance(m, inspect.ListType)), None)
            if items is None:
                return ()
            info, here = items.item_type, here[int(step)]
        else:
            return ()
    members = info.types if isinstance(info, inspect.UnionType) else (info,)
    return tuple(str(v) for m in members if isinstance(m, inspect.LiteralType) for v in m.values)


class _Limited(Protocol):
    @property
    def effective_max_tokens(self) -> int | None: ...

    def prompt_chars(self) -> int: ...


def check_max_tokens(request: _Limited, name: str, limit: int | None) -> None:
    wanted = request.effective_max_tokens
    if limit is not None and wanted is not None and wanted > limit:
        raise APIError.invalid_request(
            f"{name} is too large: {wanted}. This endpoint supports at most {limit} completion tokens.",
            param=name,
            code="max_tokens_exceeded",
        )


def check_prompt_size(request: _Limited, name: str, limit: int | None) -> None:
    size = request.prompt_chars()
    if limit is not None and size > limit:
        raise APIError.invalid_request(
            f"The prompt is {size} characters; this endpoint takes at most {limit} (MAX_PROMPT_CHARS).",
            param=name,
            code="prompt_too_long",
        )
