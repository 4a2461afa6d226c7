"""What the simulated model generates for a request: :class:`Generation`, the tokens and why they stopped.

The decisions (which tool to call, the JSON a schema or the prompt wants, how a text answer opens) are
:mod:`sagestream_local.model`'s; this module applies the request's token limit and stop sequences per
dialect and turns the decisions into tokens: readable English echoing the prompt, JSON a few characters per
token as guided decoding writes it, a tool call's arguments in fragments, reasoning first where the scenario
asks. Deterministic per prompt, so a test can compute what the endpoint sent.

Example::

    >>> from sagestream_local.endpoint.scenario import Scenario
    >>> request = {"inputs": "Tell me about Lisbon", "parameters": {"max_new_tokens": 5}}
    >>> gen = generate(request, Scenario(dialect="tgi"))
    >>> gen.tokens, gen.finish
    (('You', ' asked', ' about', ' Tell', ' me'), 'length')
    >>> prompt_size({"messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Hi"}]})
    3
"""

from __future__ import annotations

import dataclasses
import json
import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sagestream_local import model
from sagestream_local.endpoint.scenario import Scenario

_PROSE = (
    "the river runs quietly past an old mill where children gather every summer to watch light "
    "move across water while a patient gardener tends rows of beans and tall sunflowers that lean "
    "toward evening clouds because warm wind carries stories from distant hills into small towns "
    "with bright markets bakeries libraries and narrow streets full of music laughter and bicycles"
)
WORDS = _PROSE.split()
_NON_ASCII_WORDS = (
    "café",
    "naïve",
    "日本語",
    "Zürich",
    "façade",
    "привет",
    "数据",
    "über",
    "🙂",
    "🚀",
    "crème",
    "€5",
)


@dataclass(frozen=True)
class Generation:
    """The tokens a request gets and why generation stopped."""

    prompt: str
    tokens: tuple[str, ...]
    finish: Literal["length", "eos", "stop", "tool_calls"]
    reasoning: tuple[str, ...] = ()  # reasoning tokens, before the answer
    tool_name: str | None = None  # the function the model calls, instead of answering in text
    tool_arguments: tuple[str, ...] = ()  # its JSON arguments, one fragment per model step

    @property
    def steps(self) -> int:
        """Model steps, each one event: reasoning, text, the call's head and its argument fragments."""
        call = 1 + len(self.tool_arguments) if self.tool_name else 0
        return max(1, len(self.reasoning) + len(self.tokens) + call)

    @property
    def completion_tokens(self) -> int:
        return len(self.reasoning) + len(self.tokens) + len(self.tool_arguments)

    @property
    def text(self) -> str:
        return "".join(self.tokens)

    @property
    def prompt_tokens(self) -> int:
        return max(1, len(self.prompt.split()))


def prompt_of(request: Mapping[str, Any]) -> str:
    """The text a container would condition on: last user message, ``prompt`` or ``inputs``."""
    if isinstance(request.get("messages"), list):
        for message in reversed(request["messages"]):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, list):  # content parts
                    return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
                return str(content or "")
        return ""
    for key in ("prompt", "inputs"):
        if isinstance(request.get(key), str):
            return str(request[key])
    return ""


def readable_tokens(prompt: str, count: int, non_ascii: float, opening: list[str] | None = None) -> list[str]:
    """``count`` BPE-like tokens (leading spaces) of deterministic English echoing the prompt (or starting
    with ``opening``'s words)."""
    rng = random.Random(zlib.crc32(prompt.encode()))
    echo = [w.strip(".,!?;:\"'") for w in prompt.split()[:4]]
    words = ["You", "asked", "about", *[w for w in echo if w]] if any(echo) else ["Here", "is", "a", "story"]
    words[-1] += "."
    if opening:
        words = list(opening)
    capitalize = True
    while len(words) < count:
        word = rng.choice(_NON_ASCII_WORDS) if rng.random() < non_ascii else rng.choice(WORDS)
        if capitalize:
            word = word[:1].upper() + word[1:]
        capitalize = rng.random() < 0.12
        words.append(word + ("." if capitalize else ""))
    return [w if i == 0 else " " + w for i, w in enumerate(words[:count])]


def generate(request: Mapping[str, Any], scenario: Scenario) -> Generation:
    """Apply the request's token limit and stop sequences to the scenario's text.

    What the model says follows :mod:`sagestream_local.model`: on ``openai`` a call of the tool
    ``tool_choice`` and the prompt ask for (:func:`~sagestream_local.model.tool_to_call`), with arguments valid
    for its parameters' schema; JSON valid for a JSON ``response_format`` (or TGI's ``grammar``), or for the
    schema a prompt embeds when it asks for JSON in text; otherwise text, opening with the tool results once
    they are in.
    """
    gen = _generate_text(request, scenario)
    reasoning = tuple(_REASONING[: scenario.reasoning]) if scenario.dialect == "openai" else ()
    call = model.tool_to_call(request) if scenario.dialect == "openai" else None
    if call is not None:
        arguments = json.dumps(model.arguments_for(call.parameters, model.what_was_said(request)), ensure_ascii=False)
        fragments = tuple(arguments[i : i + 7] for i in range(0, len(arguments), 7))
        return Generation(gen.prompt, (), "tool_calls", reasoning, call.name, fragments)
    return dataclasses.replace(gen, reasoning=reasoning)


_REASONING = [" Let", " me", " think", " about", " what", " was", " asked", " and", " answer", " it", "."]


def _json_wanted(request: Mapping[str, Any], scenario: Scenario) -> tuple[Mapping[str, Any], bool] | None:
    """The schema the answer must follow and whether to fence it as Markdown: OpenAI's response_format,
    TGI's grammar, or (on any dialect) a schema the prompt embeds when it asks for JSON in text."""
    if scenario.dialect == "openai":
        fmt = request.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_object":
            return model.json_object_schema(request), False
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("json_schema"), dict):
            schema = fmt["json_schema"].get("schema")
            return (schema if isinstance(schema, dict) else {"type": "object"}), False
    elif scenario.dialect == "tgi":
        params = request.get("parameters")
        grammar = params.get("grammar") if isinstance(params, dict) else None
        if isinstance(grammar, dict) and grammar.get("type") == "json" and isinstance(grammar.get("value"), dict):
            # {"type": "object"} is what json_object becomes: any object, so the prompt shapes it
            value = grammar["value"]
            return (model.json_object_schema(request) if value == {"type": "object"} else value), False
    return model.json_wanted_in_text(request)


def _generate_text(request: Mapping[str, Any], scenario: Scenario) -> Generation:
    params = request.get("parameters") if isinstance(request.get("parameters"), dict) else {}
    assert isinstance(params, dict)
    if scenario.dialect == "openai":
        limit = request.get("max_completion_tokens", request.get("max_tokens"))
        stop = request.get("stop")
    else:
        limit = params.get("max_new_tokens")
        stop = params.get("stop_sequences" if scenario.dialect == "lmi" else "stop")
    stops = [stop] if isinstance(stop, str) else [s for s in (stop or []) if isinstance(s, str) and s]
    prompt = prompt_of(request)
    count = scenario.tokens
    finish: Literal["length", "eos", "stop"] = "eos"
    if isinstance(limit, int) and 0 < limit < count:
        count, finish = limit, "length"
    wanted = _json_wanted(request, scenario)
    if wanted is not None:
        # JSON as a model under guided decoding writes it: a few characters per token.
        schema, fenced = wanted
        document = json.dumps(model.document_for(schema, prompt), ensure_ascii=False)
        if fenced:
            document = f"```json\n{document}\n```"
        parts = [document[i : i + 4] for i in range(0, len(document), 4)]
        if isinstance(limit, int) and 0 < limit < len(parts):
            return Generation(prompt, tuple(parts[:limit]), "length")
        return Generation(prompt, tuple(parts), "eos")
    tokens = readable_tokens(prompt, count, scenario.non_ascii, model.answer_opening(request))
    text = ""
    for i, token in enumerate(tokens):
        text += token
        if any(s in text for s in stops):
            return Generation(prompt, tuple(tokens[: i + 1]), "stop")
    return Generation(prompt, tuple(tokens), finish)


def prompt_size(request: Mapping[str, Any]) -> int:
    """The prompt's length in the simulator's tokens (words), over every message, as a container counts."""
    if isinstance(request.get("messages"), list):
        words = 0
        for message in request["messages"]:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            words += len(str(content or "").split())
        return max(1, words)
    return max(1, len(prompt_of(request).split()))
