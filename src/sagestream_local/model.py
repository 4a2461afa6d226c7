"""The simulated endpoint's model: what a small, obedient model decides to say, deterministically.

Laptop only, never deployed. :mod:`sagestream_local.endpoint` owns the wire (dialects, events, timing,
faults); this module owns the decisions a model makes about a request, so that agent loops and
structured-output clients can finish on the simulator:

- :func:`tool_to_call`: whether to call a tool and which, honouring ``tool_choice`` (``none``, ``auto``,
  ``required``, a named function) and the tool results already in the conversation;
- :func:`arguments_for`, :func:`document_for`: JSON valid for a JSON Schema (a tool's parameters,
  ``response_format``'s ``json_schema``, TGI's ``grammar``), with values taken from the prompt where it gives them;
- :func:`json_wanted_in_text`: the JSON a prompt asks for (a schema embedded the way instructor's
  ``Mode.JSON``/``MD_JSON`` and LangChain's format instructions put it, or keys named in the prompt);
- :func:`answer_opening`: the first words of a text answer (one that uses the tool results once they are in).

Nothing here is random in the run-to-run sense: every choice follows from the request (a ``random.Random``
seeded from the prompt where variety is wanted), so a test can compute what the endpoint sent.

Example::

    >>> weather = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
    ...     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    >>> ask = {"messages": [{"role": "user", "content": "How is the weather in Paris?"}], "tools": [weather]}
    >>> call = tool_to_call(ask)
    >>> call.name, arguments_for(call.parameters, "How is the weather in Paris?")
    ('get_weather', {'city': 'Paris'})
    >>> tool_to_call({**ask, "tool_choice": "none"}) is None
    True
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# Words that say nothing about which tool a prompt wants.
_STOPWORD_TEXT = (
    "a an the and or of to in on at for from by with about into over under is are was were be been am do does "
    "did can could would should will shall may might must i you he she it we they me my your our their this "
    "that these those what which who whom whose when where why how please tell give show let get set make use "
    "call run tool tools function functions some any all there here not no yes if then than so as its just also"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")
# Words for values the prompt does not give (tokens of the endpoint's own prose).
_FILLER = ("river", "mill", "garden", "summer", "light", "water", "beans", "evening", "clouds", "wind", "hills")


def words_of(text: str) -> list[str]:
    """Lower-case content words, ``snake_case`` and ``camelCase`` split, a plural ``s`` dropped."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text.replace("_", " ").replace("-", " "))
    out = []
    for word in _WORD.findall(spaced):
        word = word.lower()
        if word in _STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.append(word)
    return out


# ------------------------------------------------------------------------------------------------ messages


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _messages(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = request.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def instructions_of(request: Mapping[str, Any]) -> str:
    """Every system and user text of the conversation (a prompt dialect's whole ``inputs``), in order."""
    if not isinstance(request.get("messages"), list):
        for key in ("prompt", "inputs"):
            if isinstance(request.get(key), str):
                return str(request[key])
        return ""
    return "\n".join(
        _text(m.get("content")) for m in _messages(request) if m.get("role") in ("system", "developer", "user")
    )


@dataclass(frozen=True)
class ToolResult:
    """A tool's answer that came back after the last user message."""

    name: str  # the function called, "" when the call it answers is not in the conversation
    content: str


def tool_results(request: Mapping[str, Any]) -> list[ToolResult]:
    """The ``tool`` messages after the last user message, each with the name of the call it answers."""
    messages = _messages(request)
    last_user = max((n for n, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    names: dict[str, str] = {}
    results = []
    for message in messages[last_user + 1 :]:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                names[str(call.get("id"))] = str(call["function"].get("name", ""))
        if message.get("role") == "tool":
            results.append(ToolResult(names.get(str(message.get("tool_call_id")), ""), _text(message.get("content"))))
    return results


def _called_since_user(request: Mapping[str, Any]) -> set[str]:
    return {r.name for r in tool_results(request)}


# ------------------------------------------------------------------------------------------------- tools


@dataclass(frozen=True)
class ToolCall:
    """The function the model calls and the JSON Schema its arguments must follow."""

    name: str
    parameters: Mapping[str, Any]


def _functions(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        t["function"]
        for t in request.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
    ]


def _relevance(function: Mapping[str, Any], prompt: str) -> tuple[int, int, int]:
    """(named outright, name words in the prompt, description words in the prompt)."""
    name = str(function["name"])
    asked = set(words_of(prompt))
    named = re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", prompt) is not None
    in_name = len(asked & set(words_of(name)))
    in_description = len(asked & set(words_of(str(function.get("description") or ""))))
    return int(named), in_name, in_description


def tool_to_call(request: Mapping[str, Any]) -> ToolCall | None:
    """The call a small obedient model makes for ``request``, or None when it answers in text.

    - ``tool_choice`` ``none``: never; a named function: that one, every turn (the choice forces it);
      ``required``: a tool every turn, once results are in preferring one not yet called since the user spoke
      (an agent's "final result" tool after its helper tools);
    - ``auto`` (the default with tools): only while the user's last message is unanswered by tool results,
      and only when it names a tool, one of the tool name's words, or two words of its description.

    Among candidates the best match with the user's last message wins, ties to the first listed.
    """
    functions = _functions(request)
    choice = request.get("tool_choice", "auto")
    if not functions or choice == "none" or not _messages(request):
        return None
    if isinstance(choice, dict):
        # chat completions' {"type": "function", "function": {"name": ...}}, or the Responses API's flat one
        function = choice.get("function")
        wanted = function.get("name") if isinstance(function, dict) else choice.get("name")
        named = [f for f in functions if f["name"] == wanted]
        return _call(named[0]) if named else None
    prompt = _last_user_text(request)
    scored = sorted(functions, key=lambda f: _relevance(f, prompt), reverse=True)  # stable: ties keep order
    if choice == "required":
        called = _called_since_user(request)
        fresh = [f for f in scored if f["name"] not in called]
        return _call((fresh or scored)[0])
    # A system turn after the user's (Claude Code adds one) is instructions, not an answer to the user.
    spoken = [m for m in _messages(request) if m.get("role") not in ("system", "developer")]
    if not spoken or spoken[-1].get("role") != "user":
        return None  # tool results (or the model's own turn) came last: answer in text
    best = scored[0]
    named_outright, in_name, in_description = _relevance(best, prompt)
    return _call(best) if named_outright or in_name or in_description >= 2 else None


def _call(function: Mapping[str, Any]) -> ToolCall:
    parameters = function.get("parameters")
    return ToolCall(str(function["name"]), parameters if isinstance(parameters, dict) else {"type": "object"})


def _last_user_text(request: Mapping[str, Any]) -> str:
    for message in reversed(_messages(request)):
        if message.get("role") == "user":
            return _text(message.get("content"))
    return ""


def what_was_said(request: Mapping[str, Any]) -> str:
    """The text a tool call's argument values come from: the user's last message and the tool results since."""
    return "\n".join([_last_user_text(request), *(r.content for r in tool_results(request))])


def answer_opening(request: Mapping[str, Any]) -> list[str] | None:
    """The first words of a text answer that reports the tool results, or None without results.

    >>> answer_opening({"messages": [{"role": "user", "content": "Weather?"},
    ...     {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "get_weather"}}]},
    ...     {"role": "tool", "tool_call_id": "c1", "content": '{"sky": "clear"}'}]})
    ['get_weather', 'returned', '{"sky":', '"clear"}.']
    """
    results = tool_results(request)
    if not results:
        return None
    words: list[str] = []
    for result in results:
        said = result.content.split()[:40] or ["nothing"]
        said[-1] += "."
        words += [result.name or "The", *([] if result.name else ["tool"]), "returned", *said]
    return words


# ---------------------------------------------------------------------------------------------- documents


def arguments_for(parameters: Mapping[str, Any], prompt: str) -> Any:
    """A tool's arguments: its required parameters, and the optional ones the prompt mentions, valid for
    the schema, with values the prompt gives where it gives them."""
    return _Sampler(parameters, prompt, every_property=False).value(parameters)


def document_for(schema: Mapping[str, Any], prompt: str) -> Any:
    """A JSON document for a structured-output schema: every property filled, valid for the schema."""
    return _Sampler(schema, prompt, every_property=True).value(schema)


# The last JSON Schema a prompt embeds: instructor (Mode.JSON, MD_JSON) puts one in its system message,
# LangChain's format instructions an example schema first and the real one after "Here is the output schema".
_SCHEMA_KEYS = ("properties", "$defs", "definitions", "anyOf", "items")


def embedded_schema(text: str) -> dict[str, Any] | None:
    """The last JSON object in ``text`` that is a JSON Schema (has ``properties``, ``$defs`` ...)."""
    found = None
    for value, _, _ in _json_objects(text):
        if _looks_like_schema(value):
            found = value
    return found


def _json_objects(text: str) -> Iterator[tuple[Any, int, int]]:
    """Each JSON object in ``text`` (a ``{`` that starts one), with where it starts and ends."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        yield value, start, end
        start = text.find("{", end)


def _looks_like_schema(value: Any) -> bool:
    # LangChain's instructions also show a non-instance {"properties": {"foo": ["bar", "baz"]}}: subschemas
    # are objects, so that one is not taken for a schema.
    if not isinstance(value, dict) or not any(k in value for k in _SCHEMA_KEYS):
        return False
    properties = value.get("properties", {})
    return isinstance(properties, dict) and all(isinstance(v, dict) for v in properties.values())


_KEY_LIST = re.compile(
    r"\b(?:keys?|fields?|properties|attributes)\b\s*(?:named|called)?\s*:?\s*"
    r"((?:[`'\"]?[A-Za-z_][\w]*[`'\"]?(?:\s*,\s*|\s*,?\s+and\s+|\s+or\s+)?)+)",
    re.IGNORECASE,
)
# Keys a prompt names whose values are counts rather than words.
_NUMBER_NAME_TEXT = "age count number total days hours years price amount quantity score year size population"
_NUMBER_NAMES = frozenset(_NUMBER_NAME_TEXT.split())


def keys_asked(text: str) -> list[str]:
    """Keys a prompt asks for: ``keys a, b and c`` / ``fields `a` and `b```, or words in backticks.

    >>> keys_asked("Reply in JSON with the keys city, days and rain.")
    ['city', 'days', 'rain']
    """
    match = _KEY_LIST.search(text)
    if match:
        keys = [k for k in re.findall(r"[A-Za-z_]\w*", match[1]) if k.lower() not in ("and", "or")]
        if keys:
            return list(dict.fromkeys(keys))
    quoted = re.findall(r"`([A-Za-z_]\w*)`", text)
    return list(dict.fromkeys(quoted))


def json_object_schema(request: Mapping[str, Any]) -> dict[str, Any]:
    """The shape a ``json_object`` answer takes: the prompt's embedded schema, else its named keys, else
    ``{"answer": ...}``."""
    instructions = instructions_of(request)
    schema = embedded_schema(instructions)
    if schema is not None:
        return schema
    keys = keys_asked(_last_user_text(request) or instructions)
    if keys:
        properties = {k: {"type": "integer" if k.lower() in _NUMBER_NAMES else "string"} for k in keys}
        return {"type": "object", "properties": properties, "required": keys}
    return {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def json_wanted_in_text(request: Mapping[str, Any]) -> tuple[dict[str, Any], bool] | None:
    """Without a JSON ``response_format``: the schema of the JSON the prompt asks for in plain text, and
    whether to fence it (```json), or None when the prompt does not ask for JSON."""
    instructions = instructions_of(request)
    if "json" not in instructions.lower():
        return None
    schema = embedded_schema(instructions)
    if schema is None:
        return None
    fenced = "```json" in instructions or re.search(r"code ?block", instructions, re.IGNORECASE) is not None
    return schema, fenced


# ------------------------------------------------------------------------------------------------ sampler

_FORMATS = {
    "date-time": "2026-01-02T03:04:05Z",
    "date": "2026-01-02",
    "time": "03:04:05Z",
    "duration": "PT1H",
    "email": "river@example.com",
    "idn-email": "river@example.com",
    "uri": "https://example.com/river",
    "iri": "https://example.com/river",
    "uri-reference": "https://example.com/river",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uuid": "6f1c1a5e-8c2a-4d3b-9f1e-2a7b4c5d6e7f",
}
_MAX_DEPTH = 6  # past it a recursive schema ($ref to itself) takes its smallest valid shape
_CONNECTOR = r"(?:\s*(?:[:=]|\bis\b|\bare\b|\bof\b|\bto\b|\bbe\b|\bequals\b))*\s*(?:(?:the|a|an)\s+)?"


class _Sampler:
    """One walk over a schema: ``$ref`` resolved against the root, values from the prompt where it has them."""

    def __init__(self, root: Mapping[str, Any], prompt: str, *, every_property: bool) -> None:
        self.root = root
        self.every_property = every_property
        self.rng = random.Random(prompt)
        # Values come from what the prompt says, not from a schema or an example it embeds.
        prompt = self.prompt = _without_json(prompt)
        self.numbers = [float(n) for n in re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])", prompt)]
        # Capitalised words not opening a sentence: the names a prompt is about ("weather in Paris").
        self.names = [
            m[1]
            for m in re.finditer(r"(?<=[a-z0-9,;:] )([A-Z][a-z][\w'-]*)", prompt)  # "JSON" is no name
            if m[1].lower() not in _STOPWORDS and m[1] != "I"
        ]

    def value(self, schema: Any, name: str = "", salt: int = 0, depth: int = 0) -> Any:
        if not isinstance(schema, Mapping):
            return None if schema is False else self.rng.choice(_FILLER)
        if depth > 8 * _MAX_DEPTH:
            return {}  # a schema with no finite instance (a required $ref cycle): stop rather than overflow
        if "$ref" in schema:
            return self.value(self._resolve(str(schema["$ref"])), name, salt, depth + 1)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self._enum(schema["enum"], name, salt)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return self.value(self._branch(schema[key], depth), name, salt, depth + 1)
        if isinstance(schema.get("allOf"), list) and schema["allOf"]:
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                part = self._resolve(str(part["$ref"])) if isinstance(part, Mapping) and "$ref" in part else part
                if isinstance(part, Mapping):
                    merged = _merge(merged, part)
            return self.value(merged, name, salt, depth + 1)
        kind = schema.get("type")
        if kind is None:
            kind = (
                "object"
                if "properties" in schema or "additionalProperties" in schema
                else "array"
                if "items" in schema or "prefixItems" in schema
                else "string"
            )
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, name, depth)
        if kind in ("integer", "number"):
            return self._number(schema, name, salt, integer=kind == "integer")
        if kind == "boolean":
            return self._boolean(name, salt)
        if kind == "null":
            return None
        return self._string(schema, name, salt)

    def _resolve(self, ref: str) -> Any:
        target: Any = self.root
        for part in ref.removeprefix("#").strip("/").split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return target

    def _branch(self, branches: list[Any], depth: int) -> Any:
        usable = [b for b in branches if isinstance(b, Mapping)]
        null = [b for b in usable if b.get("type") == "null"]
        if depth >= _MAX_DEPTH and null:
            return null[0]  # end a recursion where the schema allows
        return next((b for b in usable if b.get("type") != "null"), branches[0])

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        deep = depth >= _MAX_DEPTH

        def wanted(n: str) -> bool:
            return n in required or (not deep and (self.every_property or self._mentioned(n)))

        out = {n: self.value(sub, n, depth=depth + 1) for n, sub in properties.items() if wanted(n)}
        for n in required:  # required but not described: any value will do
            if n not in out:
                out[n] = self.value(schema.get("additionalProperties", {}), n, depth=depth + 1)
        extra = schema.get("additionalProperties")
        minimum = int(schema.get("minProperties") or 0)
        n = 0
        while len(out) < minimum or (not out and not properties and isinstance(extra, Mapping) and depth == 0):
            key = f"key{n}" if n else "key"
            n += 1
            if key not in out:
                out[key] = self.value(extra if isinstance(extra, Mapping) else {}, key, salt=n, depth=depth + 1)
        return out

    def _array(self, schema: Mapping[str, Any], name: str, depth: int) -> list[Any]:
        prefix = [s for s in schema.get("prefixItems") or [] if isinstance(s, Mapping)]
        items = schema.get("items")
        low = int(schema.get("minItems") or 0)
        high = schema.get("maxItems")
        count = max(low, len(prefix), 0 if depth >= _MAX_DEPTH else 2)
        if isinstance(high, int):
            count = min(count, high)
        if items is False:
            count = min(count, len(prefix))
        out = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else items if isinstance(items, Mapping) else {}
            out.append(self.value(sub, name, salt=i, depth=depth + 1))
        if schema.get("uniqueItems"):
            unique: list[Any] = []
            for item in out:
                if item not in unique:
                    unique.append(item)
            out = unique if len(unique) >= low else out
        return out

    def _enum(self, values: list[Any], name: str, salt: int) -> Any:
        lowered = self.prompt.lower()
        for value in values:
            if isinstance(value, str) and value and re.search(rf"\b{re.escape(value.lower())}\b", lowered):
                return value
        return values[salt % len(values)]

    def _mentioned(self, name: str) -> bool:
        if not name:
            return False
        spoken = re.escape(name).replace("_", "[ _]")
        return re.search(rf"\b{spoken}\b", self.prompt, re.IGNORECASE) is not None

    def _after_name(self, name: str, value: str) -> str | None:
        """The value written next to the property's name in the prompt (``city: Paris``, ``3 days``)."""
        if not name:
            return None
        spoken = re.escape(name).replace("_", "[ _]")
        after = re.search(rf"\b{spoken}\b{_CONNECTOR}({value})", self.prompt, re.IGNORECASE)
        if after:
            return after[1]
        before = re.search(rf"({value})\s+{spoken}\b", self.prompt, re.IGNORECASE)
        return before[1] if before else None

    def _number(self, schema: Mapping[str, Any], name: str, salt: int, *, integer: bool) -> int | float:
        said = self._after_name(name, r"-?\d+(?:\.\d+)?")
        candidates = [float(said)] if said is not None else []
        candidates += [*self.numbers[salt : salt + 1], 7.0 + salt if integer else 2.5 + salt]
        for candidate in candidates:
            value = self._fit(candidate, schema, integer=integer)
            if value is not None:
                return value
        return self._fit(None, schema, integer=integer) or 0

    @staticmethod
    def _fit(value: float | None, schema: Mapping[str, Any], *, integer: bool) -> int | float | None:
        """``value`` if the schema's bounds allow it; with None, the smallest value they allow."""
        low, high = schema.get("minimum"), schema.get("maximum")
        ex_low, ex_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        multiple = schema.get("multipleOf")

        def ok(v: float) -> bool:
            return (
                (low is None or v >= low)
                and (high is None or v <= high)
                and (ex_low is None or isinstance(ex_low, bool) or v > ex_low)
                and (ex_high is None or isinstance(ex_high, bool) or v < ex_high)
                and (not multiple or abs(v / multiple - round(v / multiple)) < 1e-9)
            )

        if value is not None:
            if integer and value != int(value):
                return None
            v: int | float = int(value) if integer else value
            return v if ok(v) else None
        start = low if low is not None else (ex_low if isinstance(ex_low, int | float) else 0)
        step = multiple or (1 if integer else 0.5)
        v = (int(start) // step) * step if integer else start
        for _ in range(1000):
            candidate = int(v) if integer else float(v)
            if ok(candidate):
                return candidate
            v += step
        return int(start) if integer else float(start)

    def _boolean(self, name: str, salt: int) -> bool:
        said = self._after_name(name, r"true|false|yes|no")
        if said is not None:
            return said.lower() in ("true", "yes")
        return salt % 2 == 0

    def _string(self, schema: Mapping[str, Any], name: str, salt: int) -> str:
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in _FORMATS:
            return _FORMATS[fmt]
        said = self._after_name(name, r"\"[^\"]*\"|'[^']*'|[\w][\w'-]*")
        candidates = [said.strip("\"'")] if said is not None and said.lower() not in _STOPWORDS else []
        candidates += self.names[salt : salt + 1]
        candidates.append(_FILLER[(self.rng.randrange(len(_FILLER)) + salt) % len(_FILLER)])
        low = int(schema.get("minLength") or 0)
        high = schema.get("maxLength")
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            # No generator for regular expressions: a word of the prompt that matches ("OSL" for ^[A-Z]{3}$),
            # else the value stays invalid (docs/development.md, "The simulated model").
            candidates[1:1] = re.findall(r"[\w@.:/+-]+", self.prompt)
        for candidate in candidates:
            if (
                len(candidate) >= low
                and (not isinstance(high, int) or len(candidate) <= high)
                and (not isinstance(pattern, str) or _matches(pattern, candidate))
            ):
                return candidate
        text = (candidates[-1] * (low // max(1, len(candidates[-1])) + 1))[: max(low, 1)]
        return text[:high] if isinstance(high, int) else text


def _matches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:  # ECMA-262 syntax Python's re does not know: take the value
        return True


def _without_json(text: str) -> str:
    """``text`` less the JSON objects in it."""
    out, start = [], 0
    for _, at, end in _json_objects(text):
        out.append(text[start:at])
        start = end
    out.append(text[start:])
    return " ".join(out)


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """allOf's parts as one schema: properties and required joined, other keywords from the later part."""
    merged = {**a, **b}
    if isinstance(a.get("properties"), Mapping) and isinstance(b.get("properties"), Mapping):
        merged["properties"] = {**a["properties"], **b["properties"]}
    if isinstance(a.get("required"), list) and isinstance(b.get("required"), list):
        merged["required"] = list(dict.fromkeys([*a["required"], *b["required"]]))
    return merged
