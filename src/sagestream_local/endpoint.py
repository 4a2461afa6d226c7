"""A simulated SageMaker Runtime endpoint on loopback, speaking its real restJson1 + event-stream protocol.

Laptop only, never deployed. boto3 reaches it through its own endpoint override
(``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME=http://127.0.0.1:PORT``), so the botocore path under test is the
real one. It answers

- ``POST /endpoints/{name}/invocations-response-stream``: ``application/vnd.amazon.eventstream`` frames,
  one ``PayloadPart`` per model event (or per split piece), each frame one socket send at its scheduled time;
- ``POST /endpoints/{name}/invocations``: the whole model answer as one JSON body;
- ``/_sim/scenario`` (``GET``; ``POST`` a partial JSON update; ``DELETE`` resets) and ``/_sim/records``
  (``GET``; ``DELETE`` clears them and the prefix cache), so other processes (browser test, benchmark) can
  steer and observe it.

Each record keeps the SageMaker headers the call came with (``inference_id``, ``prefix_aware_id``,
``session_id``, as botocore serialised ``InferenceId``, ``PrefixAwareId`` and ``SessionId``). Prefix-aware
routing is simulated as its effect: a call whose ``PrefixAwareId`` an earlier call already brought finds
its prefix in the (one) instance's KV cache and its first token comes after ``Scenario.prefix_hit_ttft_ms``
instead of ``ttft_ms`` (``null``: no such effect); the record says ``prefix_hit``. The endpoint remembers
the last :data:`PREFIX_CACHE_IDS` ids, as a cache evicts.

What the "model container" emits is chosen by :class:`Scenario`: its ``dialect`` (``openai`` = TGI Messages
API / vLLM / LMI chat SSE, ``tgi`` = TGI ``generate_stream`` SSE, ``lmi`` = LMI/DJL jsonlines), token timing,
how the bytes are cut into PayloadParts, the HTTP framing and one injected fault.

Fault names and what botocore raises for them (status and code as a real endpoint sends them):

=========================== ==========================================================================
``http_400``                ``ClientError`` ValidationError, 400
``http_424``                ``ClientError`` ModelError, 424 (``OriginalStatusCode``, ``OriginalMessage``,
                            ``LogStreamArn`` in ``e.response``)
``http_429``                ``ClientError`` ModelNotReadyException, 429 (the only 429 in SageMaker's model)
``throttling``              ``ClientError`` ThrottlingException, **400** with ``{"message": null}``, as
                            SageMaker really sends it (botocore's retry rules expect exactly that pair)
``http_500``                ``ClientError`` InternalFailure, 500
``http_503``                ``ClientError`` ServiceUnavailable, 503
``model_stream_error``      ``EventStreamError`` ModelStreamError (an exception frame)
``internal_stream_failure`` ``EventStreamError`` InternalStreamFailure (exception frame)
``corrupt_crc``             ``botocore.eventstream.ChecksumMismatch`` (a PayloadPart with a bad message CRC)
``reset``                   TCP RST (``SO_LINGER`` 0, then close)
``stall``                   nothing more is sent; the connection stays open until the client goes
=========================== ==========================================================================

What the "model" answers follows the request as the containers do, its decisions those of a small obedient
model (:mod:`sagestream_local.model`). On ``openai``: with ``tools`` it calls the tool ``tool_choice`` and the
prompt ask for the way vLLM's tool parsers stream it (a head chunk with index, id, type and name, then one
chunk per argument fragment, so the arguments span several PayloadParts), ``finish_reason: "tool_calls"``,
and answers in text using the tool results once they are in; with ``Scenario.reasoning`` it thinks first
(``reasoning_content`` chunks, ``completion_tokens_details.reasoning_tokens`` in usage); with ``logprobs``
each content chunk carries them (``top_logprobs`` alternatives). A JSON ``response_format`` (or TGI's
``parameters.grammar``) makes the text a JSON document valid for the schema, ``json_object`` one shaped by
the prompt, so ``chat.completions.parse``, instructor and LangChain's ``json_mode`` work.
TGI's events carry ``top_tokens`` when ``top_n_tokens`` is asked and
its whole answer ``details.tokens``. With ``Scenario.context_length``, a prompt plus ``max_tokens`` over it
gets the container's refusal (vLLM's 400, TGI's 422, LMI's 400) wrapped as SageMaker wraps it: a
``ModelError`` 424 with ``OriginalStatusCode`` and ``OriginalMessage``.

Stream faults fire once ``fault_after`` tokens have gone (0: before the first PayloadPart, after the 200
headers), at the time the next token was due. ``InvokeEndpoint`` honours the HTTP-status faults and
``reset``/``stall`` (before its answer); the other stream faults do not apply to it. A streaming request
without ``"stream": true`` gets what a container sends then: the whole JSON answer as one event.

Environment variables read: none (the CLI takes flags; clients read ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``).

Example::

    >>> import boto3
    >>> from sagestream_local.endpoint import SimulatedEndpoint, Scenario
    >>> with SimulatedEndpoint(Scenario(dialect="tgi", ttft_ms=0, cadence_ms=0, tokens=4)) as sim:
    ...     client = boto3.client("sagemaker-runtime", region_name="us-east-1", endpoint_url=sim.url,
    ...                           aws_access_key_id="testing", aws_secret_access_key="testing")
    ...     resp = client.invoke_endpoint_with_response_stream(
    ...         EndpointName="llm", ContentType="application/json",
    ...         Body=b'{"inputs": "Hello there", "stream": true}')
    ...     body = b"".join(e["PayloadPart"]["Bytes"] for e in resp["Body"])
    ...     sim.records[-1].outcome
    'completed'
    >>> body.startswith(b'data:{"index":1,"token":')
    True

Standalone: ``python -m sagestream_local.endpoint --port 8089 --dialect openai --cadence-ms 30``.
"""

from __future__ import annotations

import argparse
import binascii
import dataclasses
import ipaddress
import itertools
import json
import random
import re
import select
import socket
import struct
import threading
import time
import uuid
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, NoReturn, get_args
from urllib.parse import unquote

from sagestream_local import model

Dialect = Literal["openai", "tgi", "lmi"]
Framing = Literal["chunked", "close"]
Split = Literal["none", "midline", "utf8", "coalesce", "bytes"]
Fault = Literal[
    "none",
    "model_stream_error",
    "internal_stream_failure",
    "reset",
    "stall",
    "corrupt_crc",
    "http_400",
    "http_424",
    "http_429",
    "throttling",
    "http_500",
    "http_503",
]
Outcome = Literal["streaming", "completed", "client_closed", "reset", "server_stopped"]
CHOICES: dict[str, tuple[str, ...]] = {
    "dialect": get_args(Dialect),
    "framing": get_args(Framing),
    "split": get_args(Split),
    "fault": get_args(Fault),
}

ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
EVENTSTREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"
# How many PrefixAwareIds the simulated instance keeps the prefixes of (its KV cache, least recently used out).
PREFIX_CACHE_IDS = 1024


# --------------------------------------------------------------------------------------------- event stream
# botocore only decodes event streams, and moto's encoder (moto.core.eventstream) cannot be imported without
# moto.core appending its BotocoreStubber to botocore's BUILTIN_HANDLERS, i.e. into every boto3 client the
# process creates afterwards, the very clients this simulator exists to test. Only string headers are needed,
# so the encoder is these few lines.

_HEADER_TYPE_STRING = 7


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (total and headers length, CRC), headers, payload, message CRC."""
    encoded_headers = b"".join(
        struct.pack("!B", len(name.encode()))
        + name.encode()
        # string header: type 7, u16 length, utf-8 value
        + struct.pack("!BH", _HEADER_TYPE_STRING, len(value.encode()))
        + value.encode()
        for name, value in headers.items()
    )
    total_length = 12 + len(encoded_headers) + len(payload) + 4
    prelude = struct.pack("!II", total_length, len(encoded_headers))
    prelude += struct.pack("!I", binascii.crc32(prelude))
    message = prelude + encoded_headers + payload
    return message + struct.pack("!I", binascii.crc32(message))


def payload_part_frame(data: bytes) -> bytes:
    """The ``PayloadPart`` event carrying one slice of the model output."""
    return encode_message(
        {
            ":event-type": "PayloadPart",
            ":content-type": "application/octet-stream",
            ":message-type": "event",
        },
        data,
    )


def exception_frame(exception_type: str, members: Mapping[str, str]) -> bytes:
    """A modeled stream exception (``ModelStreamError``, ``InternalStreamFailure``) with its JSON members."""
    return encode_message(
        {
            ":exception-type": exception_type,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps(dict(members)).encode(),
    )


def with_bad_crc(frame: bytes) -> bytes:
    """The same frame with its trailing message CRC flipped, so a decoder must reject it."""
    (crc,) = struct.unpack("!I", frame[-4:])
    return frame[:-4] + struct.pack("!I", crc ^ 0xFFFFFFFF)


# ------------------------------------------------------------------------------------------------- scenario


@dataclass(frozen=True)
class Scenario:
    """Everything that shapes one simulated response. A request takes a snapshot when it arrives."""

    dialect: Dialect = "openai"
    ttft_ms: float = 150.0  # request received -> first token's first byte
    cadence_ms: float = 25.0  # between consecutive tokens
    tokens: int = 48  # tokens generated when the request sets no lower max_tokens / max_new_tokens
    non_ascii: float = 0.1  # share of generated words that are multi-byte UTF-8 (café, 日本語, emoji)
    framing: Framing = "chunked"
    split: Split = "none"
    coalesce: int = 3  # model events per PayloadPart when split == "coalesce"
    fault: Fault = "none"
    fault_after: int = 0  # tokens sent before a stream fault; HTTP-status faults always come first
    variant: str = "AllTraffic"  # answered when the request names no target variant
    endpoint_names: tuple[str, ...] | None = None  # None: every name exists; else others get ValidationError
    model: str = "sim-llm"  # the "model" field of OpenAI chunks
    reasoning: int = 0  # openai dialect: reasoning_content tokens before the answer, as vLLM's reasoning parsers send
    context_length: int | None = None  # prompt + max tokens over this: the container's 4xx, as a ModelError 424
    # A PrefixAwareId seen before: its prefix is cached, and the first token comes this soon instead (None: off).
    prefix_hit_ttft_ms: float | None = 30.0

    def __post_init__(self) -> None:
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, not {getattr(self, name)!r}")
        # the control API brings JSON; catch a "10" or 10.5 here rather than mid-stream
        for names, kinds in (
            (("tokens", "coalesce", "fault_after", "reasoning"), (int,)),
            (("ttft_ms", "cadence_ms", "non_ascii"), (int, float)),
            (("variant", "model"), (str,)),
        ):
            for n in names:
                value = getattr(self, n)
                if isinstance(value, bool) or not isinstance(value, kinds):
                    raise ValueError(f"{n} must be {' or '.join(k.__name__ for k in kinds)}, not {value!r}")
        if self.tokens < 1 or self.coalesce < 1 or self.fault_after < 0 or self.reasoning < 0:
            raise ValueError("tokens and coalesce must be >= 1, fault_after and reasoning >= 0")
        if self.context_length is not None and (
            isinstance(self.context_length, bool) or not isinstance(self.context_length, int) or self.context_length < 1
        ):
            raise ValueError(f"context_length must be a whole number >= 1 or null, not {self.context_length!r}")
        if self.prefix_hit_ttft_ms is not None and (
            isinstance(self.prefix_hit_ttft_ms, bool)
            or not isinstance(self.prefix_hit_ttft_ms, int | float)
            or self.prefix_hit_ttft_ms < 0
        ):
            raise ValueError(f"prefix_hit_ttft_ms must be a number >= 0 or null, not {self.prefix_hit_ttft_ms!r}")
        if self.ttft_ms < 0 or self.cadence_ms < 0 or not 0.0 <= self.non_ascii <= 1.0:
            raise ValueError("ttft_ms and cadence_ms must be >= 0, non_ascii within [0, 1]")
        if self.endpoint_names is not None:
            # JSON brings lists; a frozen scenario keeps a tuple
            object.__setattr__(self, "endpoint_names", tuple(self.endpoint_names))

    def replace(self, **changes: Any) -> Scenario:
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown scenario fields: {sorted(unknown)}")
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if self.endpoint_names is not None:
            data["endpoint_names"] = list(self.endpoint_names)
        return data


# ----------------------------------------------------------------------------------------- the "model" text

_PROSE = (
    "the river runs quietly past an old mill where children gather every summer to watch light "
    "move across water while a patient gardener tends rows of beans and tall sunflowers that lean "
    "toward evening clouds because warm wind carries stories from distant hills into small towns "
    "with bright markets bakeries libraries and narrow streets full of music laughter and bicycles"
)
_WORDS = _PROSE.split()
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
        word = rng.choice(_NON_ASCII_WORDS) if rng.random() < non_ascii else rng.choice(_WORDS)
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


def token_id(text: str) -> int:
    return zlib.crc32(text.encode()) % 32000 + 3


def _json(obj: Any) -> bytes:
    # Raw UTF-8, not \\u escapes, as TGI (serde) and vLLM (pydantic) write it: multi-byte characters on the
    # wire are what the relay's byte handling must survive.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


# --------------------------------------------------------------------------------------------- the dialects


@dataclass(frozen=True)
class ModelEvent:
    """One event the container writes (an SSE event or a jsonline), at model step ``slot``."""

    data: bytes
    slot: int
    token: int | None = None  # index of the model token this event carries, None for role/usage/[DONE]
    text: str = ""
    special: bool = False


# finish_reason per dialect for Generation.finish
FINISH: dict[str, dict[str, str]] = {
    "openai": {"length": "length", "eos": "stop", "stop": "stop", "tool_calls": "tool_calls"},
    "tgi": {"length": "length", "eos": "eos_token", "stop": "stop_sequence"},
    "lmi": {"length": "length", "eos": "eos_token", "stop": "stop_sequence"},
}


def stream_events(request: Mapping[str, Any], scenario: Scenario, request_id: str) -> list[ModelEvent]:
    """The container's streamed body as events (without ``"stream": true``: the whole answer at once)."""
    gen = generate(request, scenario)
    if request.get("stream") is not True:
        body, _ = whole_answer(request, scenario, request_id)
        return [ModelEvent(body, gen.steps - 1, 0, gen.text)]
    if scenario.dialect == "openai":
        return _openai_events(request, scenario, gen, request_id)
    if scenario.dialect == "tgi":
        return _tgi_events(gen, _top_n(request))
    return _lmi_events(gen)


def _top_n(request: Mapping[str, Any]) -> int:
    params = request.get("parameters")
    top_n = params.get("top_n_tokens") if isinstance(params, dict) else None
    return top_n if isinstance(top_n, int) and not isinstance(top_n, bool) and top_n > 0 else 0


def _top_tokens(text: str, rng: random.Random, n: int) -> list[dict[str, Any]]:
    """TGI's top_tokens: the chosen token first, then likelier-looking alternatives, most likely first."""
    alternatives = [text, *(" " + w for w in rng.sample(_WORDS, n))][:n]
    logprob = -0.05
    out = []
    for alt in alternatives:
        out.append({"id": token_id(alt), "text": alt, "logprob": round(logprob, 4), "special": False})
        logprob -= 0.5 + rng.random()
    return out


def _logprobs_content(text: str, rng: random.Random, top: int) -> dict[str, Any]:
    """OpenAI's (vLLM's) chat logprobs for one token, with ``top`` alternatives."""
    tops = [
        {"token": t["text"], "logprob": t["logprob"], "bytes": list(t["text"].encode())}
        for t in _top_tokens(text, rng, top)
    ]
    entry = {"token": text, "logprob": tops[0]["logprob"] if tops else -0.05, "bytes": list(text.encode())}
    return {"content": [{**entry, "top_logprobs": tops}]}


def _tgi_events(gen: Generation, top_n: int = 0) -> list[ModelEvent]:
    """TGI generate_stream: ``data:{token, generated_text, details}``; on eos a last special ``</s>`` token.

    With ``parameters.top_n_tokens`` each event also has ``top_tokens``, the n likeliest at that step.
    """
    rng = random.Random(gen.prompt)
    every = [(t, token_id(t), False) for t in gen.tokens] + ([("</s>", 2, True)] if gen.finish == "eos" else [])
    events = []
    for i, (text, tid, special) in enumerate(every):
        final = i == len(every) - 1
        details = {
            "finish_reason": FINISH["tgi"][gen.finish],
            "generated_tokens": len(every),
            "seed": None,
            "input_length": gen.prompt_tokens,
        }
        event = {
            "index": i + 1,
            "token": {"id": tid, "text": text, "logprob": round(-rng.random() * 2, 4), "special": special},
            "generated_text": gen.text if final else None,
            "details": details if final else None,
            "top_tokens": _top_tokens(text, rng, top_n) if top_n else None,
        }
        events.append(ModelEvent(b"data:" + _json(event) + b"\n\n", i, i, text, special))
    return events


def _lmi_events(gen: Generation) -> list[ModelEvent]:
    """LMI jsonlines: one Token object per line; the last line also carries generated_text and details."""
    rng = random.Random(gen.prompt)
    events = []
    for i, text in enumerate(gen.tokens):
        line: dict[str, Any] = {"token": {"id": token_id(text), "text": text, "log_prob": round(-rng.random() * 2, 4)}}
        if i == len(gen.tokens) - 1:
            line["generated_text"] = gen.text
            line["details"] = {
                "finish_reason": FINISH["lmi"][gen.finish],
                "generated_tokens": len(gen.tokens),
                "inputs": gen.prompt,
            }
        events.append(ModelEvent(_json(line) + b"\n", i, i, text))
    return events


def _openai_events(
    request: Mapping[str, Any], scenario: Scenario, gen: Generation, request_id: str
) -> list[ModelEvent]:
    """vLLM's stream: role chunk, reasoning_content chunks, content or tool-call chunks, finish, usage, [DONE].

    A tool call goes as vLLM's tool parsers send it: a first chunk with the call's index, id, type, name
    and empty arguments, then one chunk per argument fragment, each its own event (and so PayloadPart).
    """
    chat = "messages" in request
    created = int(time.time())
    base = {
        "id": ("chatcmpl-" if chat else "cmpl-") + request_id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": scenario.model,
    }
    finish = FINISH["openai"][gen.finish]
    logprobs = request.get("logprobs") is True and chat
    top = request.get("top_logprobs") if isinstance(request.get("top_logprobs"), int) else 0
    rng = random.Random(gen.prompt)

    def chunk(choice: dict[str, Any], **extra: Any) -> bytes:
        return b"data: " + _json({**base, "choices": [{"index": 0, **choice}], **extra}) + b"\n\n"

    events: list[ModelEvent] = []
    if chat:
        role = {"delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        events.append(ModelEvent(chunk(role), 0))
    step = 0
    for text in gen.reasoning:
        piece = {"delta": {"reasoning_content": text}, "logprobs": None, "finish_reason": None}
        events.append(ModelEvent(chunk(piece), step, step, text))
        step += 1
    for text in gen.tokens:
        piece = {"delta": {"content": text}} if chat else {"text": text}
        token_logprobs = _logprobs_content(text, rng, top) if logprobs else None
        events.append(ModelEvent(chunk({**piece, "logprobs": token_logprobs, "finish_reason": None}), step, step, text))
        step += 1
    if gen.tool_name is not None:
        head = {"index": 0, "id": _tool_call_id(request_id), "type": "function"}
        call = {**head, "function": {"name": gen.tool_name, "arguments": ""}}
        piece = {"delta": {"tool_calls": [call]}, "logprobs": None, "finish_reason": None}
        events.append(ModelEvent(chunk(piece), step, step, ""))
        step += 1
        for fragment in gen.tool_arguments:
            call = {"index": 0, "function": {"arguments": fragment}}
            piece = {"delta": {"tool_calls": [call]}, "logprobs": None, "finish_reason": None}
            events.append(ModelEvent(chunk(piece), step, step, fragment))
            step += 1
    last = gen.steps - 1
    end: dict[str, Any] = {"delta": {}} if chat else {"text": ""}
    events.append(ModelEvent(chunk({**end, "logprobs": None, "finish_reason": finish}), last))
    stream_options = request.get("stream_options")
    if isinstance(stream_options, dict) and stream_options.get("include_usage"):
        usage = _usage(gen)
        events.append(ModelEvent(b"data: " + _json({**base, "choices": [], "usage": usage}) + b"\n\n", last))
    events.append(ModelEvent(b"data: [DONE]\n\n", last))
    return events


def _tool_call_id(request_id: str) -> str:
    return "chatcmpl-tool-" + request_id.replace("-", "")[:16]


def _usage(gen: Generation) -> dict[str, Any]:
    completion = gen.completion_tokens
    usage: dict[str, Any] = {
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": gen.prompt_tokens + completion,
    }
    if gen.reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": len(gen.reasoning)}
    return usage


def whole_answer(request: Mapping[str, Any], scenario: Scenario, request_id: str) -> tuple[bytes, str]:
    """The non-streaming answer (``/invocations``) and its content type."""
    gen = generate(request, scenario)
    rng = random.Random(gen.prompt)
    if scenario.dialect == "openai":
        finish = FINISH["openai"][gen.finish]
        chat = "messages" in request
        choice: dict[str, Any]
        logprobs = None
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": gen.text if gen.tool_name is None else None}
            if gen.reasoning:
                message["reasoning_content"] = "".join(gen.reasoning)
            if gen.tool_name is not None:
                function = {"name": gen.tool_name, "arguments": "".join(gen.tool_arguments)}
                message["tool_calls"] = [{"id": _tool_call_id(request_id), "type": "function", "function": function}]
            choice = {"message": message}
            if request.get("logprobs") is True:
                top = request.get("top_logprobs") if isinstance(request.get("top_logprobs"), int) else 0
                logprobs = {"content": [_logprobs_content(t, rng, top)["content"][0] for t in gen.tokens]}
        else:
            choice = {"text": gen.text}
        answer: Any = {
            "id": ("chatcmpl-" if chat else "cmpl-") + request_id,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": scenario.model,
            "choices": [{"index": 0, **choice, "logprobs": logprobs, "finish_reason": finish}],
            "usage": _usage(gen),
        }
    elif scenario.dialect == "tgi":
        generated = len(gen.tokens) + (gen.finish == "eos")  # the eos token counts
        # TGI's whole answer has no input_length: the prompt's size is not known from it.
        details: dict[str, Any] = {
            "finish_reason": FINISH["tgi"][gen.finish],
            "generated_tokens": generated,
            "seed": None,
        }
        details["tokens"] = [
            {"id": token_id(t), "text": t, "logprob": round(-rng.random() * 2, 4), "special": False} for t in gen.tokens
        ]
        if top_n := _top_n(request):
            details["top_tokens"] = [_top_tokens(t, rng, top_n) for t in gen.tokens]
        answer = [{"generated_text": gen.text, "details": details}]
    else:
        answer = {"generated_text": gen.text}
    return _json(answer), "application/json"


def container_error(request: Any, scenario: Scenario) -> tuple[int, str] | None:
    """What the container would refuse (status, message), so a relay sending the wrong body learns it."""
    if not isinstance(request, dict):
        return 400, "request body must be a JSON object"
    if scenario.dialect == "openai":
        if not isinstance(request.get("messages"), list) and not isinstance(request.get("prompt"), str):
            return 400, "either 'messages' or 'prompt' is required"
    elif not isinstance(request.get("inputs"), str):
        return (422 if scenario.dialect == "tgi" else 400), "missing field `inputs`"
    return None


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


def context_length_error(request: Any, scenario: Scenario) -> tuple[int, str] | None:
    """The container's refusal of a prompt longer than its context: (status, its JSON error body).

    Each in its container's words and shape: vLLM's 400 error object, TGI's 422 validation error, LMI's 400.
    """
    if scenario.context_length is None or not isinstance(request, dict):
        return None
    params = request.get("parameters") if isinstance(request.get("parameters"), dict) else {}
    limit = request.get("max_tokens") if scenario.dialect == "openai" else params.get("max_new_tokens")
    wanted = limit if isinstance(limit, int) and not isinstance(limit, bool) else 0
    size = prompt_size(request)
    if size + wanted <= scenario.context_length:
        return None
    if scenario.dialect == "openai":
        message = (
            f"This model's maximum context length is {scenario.context_length} tokens. However, you requested "
            f"{size + wanted} tokens ({size} in the messages, {wanted} in the completion). Please reduce the "
            "length of the messages or completion."
        )
        return 400, json.dumps(
            {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
        )
    if scenario.dialect == "tgi":
        message = (
            f"Input validation error: `inputs` tokens + `max_new_tokens` must be <= {scenario.context_length}. "
            f"Given: {size} `inputs` tokens and {wanted} `max_new_tokens`"
        )
        return 422, json.dumps({"error": message, "error_type": "validation"})
    message = f"Input length {size} exceeds the maximum model length {scenario.context_length}"
    return 400, json.dumps({"error": message, "code": 400})


# ------------------------------------------------------------------------------------------- payload parts


@dataclass(frozen=True)
class Piece:
    """Bytes for one PayloadPart, the model step it is due at and the tokens whose first byte it carries."""

    data: bytes
    slot: int
    starts: tuple[ModelEvent, ...] = ()


def pieces(events: list[ModelEvent], split: Split, coalesce: int) -> list[Piece]:
    """Cut the container's events into PayloadPart payloads the way SageMaker may deliver them."""
    out: list[Piece] = []
    if split == "coalesce":
        for start in range(0, len(events), coalesce):
            group = events[start : start + coalesce]
            data = b"".join(e.data for e in group)
            out.append(Piece(data, group[-1].slot, tuple(e for e in group if e.token is not None)))
        return out
    for event in events:
        starts = (event,) if event.token is not None else ()
        data = event.data
        cuts: list[int] = []
        if split == "midline" and len(data) > 1:
            cut = len(data) // 2
            while cut > 1 and data[cut] & 0xC0 == 0x80:  # keep midline cuts on characters; utf8 is its own case
                cut -= 1
            cuts = [cut]
        elif split == "utf8":
            lead = next((i for i, b in enumerate(data) if b >= 0xC0), None)
            cuts = [lead + 1] if lead is not None else []
        elif split == "bytes":
            cuts = list(range(1, len(data)))
        bounds = [0, *cuts, len(data)]
        for n, (a, b) in enumerate(itertools.pairwise(bounds)):
            out.append(Piece(data[a:b], event.slot, starts if n == 0 else ()))
    return out


# ------------------------------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class ServiceError:
    """A SageMaker Runtime error response: status, ``x-amzn-ErrorType`` code and JSON body."""

    status: int
    code: str
    body: Mapping[str, Any]

    def headers(self) -> dict[str, str]:
        return {
            "x-amzn-ErrorType": f"{self.code}:http://internal.amazon.com/coral/com.amazon.sagemaker.runtime/",
            "Content-Type": "application/json",
        }


def service_error(fault: str, endpoint: str, variant: str) -> ServiceError:
    """The error a real endpoint returns for an HTTP-status fault."""
    group = f"/aws/sagemaker/Endpoints/{endpoint}"
    if fault == "http_400":
        return ServiceError(400, "ValidationError", {"message": not_found_message(endpoint)})
    if fault == "http_424":
        return model_error(400, '{"error": "simulated container failure"}', endpoint, variant)
    if fault == "http_429":
        return ServiceError(
            429,
            "ModelNotReadyException",
            {"message": f"Model for endpoint {endpoint} is not ready yet. Please retry after some time."},
        )
    if fault == "throttling":
        return ServiceError(400, "ThrottlingException", {"message": None})
    if fault == "http_500":
        return ServiceError(500, "InternalFailure", {"message": "An internal error occurred. Retry the request."})
    if fault == "http_503":
        return ServiceError(
            503,
            "ServiceUnavailable",
            {"message": f"A transient exception occurred while retrieving variant instances. {group}"},
        )
    raise ValueError(f"not an HTTP-status fault: {fault}")


def not_found_message(endpoint: str) -> str:
    return f"Endpoint {endpoint} of account {ACCOUNT_ID} not found."


def model_error(original_status: int, original_message: str, endpoint: str, variant: str) -> ServiceError:
    group = f"/aws/sagemaker/Endpoints/{endpoint}"
    kind = "client" if original_status < 500 else "server"
    message = (
        f'Received {kind} error ({original_status}) from {variant} with message "{original_message}". '
        f"See https://{REGION}.console.aws.amazon.com/cloudwatch/home?region={REGION}#logEventViewer:group="
        f"{group} in account {ACCOUNT_ID} for more information."
    )
    return ServiceError(
        424,
        "ModelError",
        {
            "ErrorCode": f"{kind.upper()}_ERROR_FROM_MODEL",
            "LogStreamArn": f"arn:aws:logs:{REGION}:{ACCOUNT_ID}:log-group:{group}",
            "Message": message,
            "OriginalMessage": original_message,
            "OriginalStatusCode": original_status,
        },
    )


_CREDENTIAL = re.compile(r"Credential=[^/,\s]+/\d{8}/[a-z0-9-]+/(?P<service>[a-z0-9-]+)/aws4_request")


def auth_error(headers: Message[str, str]) -> ServiceError | None:
    """SigV4 presence checks (the signature itself is not verified: any key signs for the simulator)."""
    authorization = headers.get("Authorization")
    if not authorization:
        return ServiceError(403, "MissingAuthenticationTokenException", {"message": "Missing Authentication Token"})
    match = _CREDENTIAL.search(authorization)
    if not (
        authorization.startswith("AWS4-HMAC-SHA256 ")
        and match
        and "SignedHeaders=" in authorization
        and "Signature=" in authorization
    ):
        message = f"Authorization header requires Credential, Signature, SignedHeaders: {authorization}"
        return ServiceError(403, "IncompleteSignatureException", {"message": message})
    if match["service"] != "sagemaker":
        message = "Credential should be scoped to correct service: 'sagemaker'. "
        return ServiceError(403, "InvalidSignatureException", {"message": message})
    if not headers.get("X-Amz-Date"):
        message = "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."
        return ServiceError(403, "IncompleteSignatureException", {"message": message})
    return None


# ------------------------------------------------------------------------------------------------ records


@dataclass
class TokenSend:
    """When the first byte of one model token left (``time.monotonic_ns`` and ``time.time_ns``)."""

    index: int
    text: str
    special: bool
    monotonic_ns: int
    wall_ns: int


@dataclass
class Record:
    """One request as the endpoint saw it. Mutated by its connection thread until ``outcome`` is final."""

    id: str
    operation: Literal["InvokeEndpointWithResponseStream", "InvokeEndpoint"]
    endpoint: str
    target_variant: str | None
    inference_component: str | None
    content_type: str | None
    accept: str | None
    body: bytes
    request: Any  # the body as JSON, None if it is not JSON
    scenario: Scenario
    received_monotonic_ns: int
    received_wall_ns: int
    # The SageMaker headers of routing and correlation, as sent (None: absent).
    inference_id: str | None = None
    prefix_aware_id: str | None = None
    session_id: str | None = None
    prefix_hit: bool = False  # its PrefixAwareId came before: the first token after prefix_hit_ttft_ms
    ttft_ms: float = 0.0  # when its first token is due, from its arrival
    status: int = 0
    invoked_variant: str | None = None
    tokens: list[TokenSend] = field(default_factory=list)
    outcome: Outcome = "streaming"
    fault: str = "none"  # the fault actually injected into this response
    ended_monotonic_ns: int | None = None
    ended_wall_ns: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["body"] = self.body.decode("utf-8", "replace")
        data["scenario"] = self.scenario.to_json()
        data["tokens"] = [dataclasses.asdict(t) for t in self.tokens]
        return data


# ------------------------------------------------------------------------------------------------- server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, address: tuple[str, int], endpoint: SimulatedEndpoint) -> None:
        self.endpoint = endpoint
        self.stopping = threading.Event()
        self.aborted: set[socket.socket] = set()
        super().__init__(address, _Handler)

    def shutdown_request(self, request: Any) -> None:
        if request in self.aborted:
            # no shutdown(SHUT_WR): a FIN first would turn the reset into an orderly close
            self.aborted.discard(request)
            request.close()
            return
        super().shutdown_request(request)


class _ClientGone(Exception):
    """The client went away (or the server is stopping); ``outcome`` says which."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome)
        self.outcome: Outcome = outcome


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # TCP_NODELAY: one frame, one send, on the wire now
    server: _Server
    _headers_buffer: list[bytes]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # --- routing

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def _route(self, method: str) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?", 1)[0]
        sim = self.server.endpoint
        if path.startswith("/_sim/"):
            self._control(method, path, body)
            return
        match = re.fullmatch(r"/endpoints/([^/]+)/(invocations|invocations-response-stream)", path)
        if method != "POST" or not match:
            err = ServiceError(404, "UnknownOperationException", {"message": None})
            self._send_json(err.status, err.body, err.headers())
            return
        streaming = match[2] == "invocations-response-stream"
        try:
            request = json.loads(body) if body else None
        except ValueError:
            request = None
        record = Record(
            id=str(uuid.uuid4()),
            operation="InvokeEndpointWithResponseStream" if streaming else "InvokeEndpoint",
            endpoint=unquote(match[1]),
            target_variant=self.headers.get("X-Amzn-SageMaker-Target-Variant"),
            inference_component=self.headers.get("X-Amzn-SageMaker-Inference-Component"),
            content_type=self.headers.get("Content-Type"),
            # botocore sends the streaming operation's Accept member as X-Amzn-SageMaker-Accept
            accept=self.headers.get("X-Amzn-SageMaker-Accept" if streaming else "Accept"),
            body=body,
            request=request,
            scenario=sim.scenario,
            received_monotonic_ns=time.monotonic_ns(),
            received_wall_ns=time.time_ns(),
            inference_id=self.headers.get("X-Amzn-SageMaker-Inference-Id"),
            prefix_aware_id=self.headers.get("X-Amzn-SageMaker-Prefix-Aware-Id"),
            session_id=self.headers.get("X-Amzn-SageMaker-Session-Id"),
        )
        record.prefix_hit = record.prefix_aware_id is not None and sim._prefix_seen(record.prefix_aware_id)
        hit_ttft = record.scenario.prefix_hit_ttft_ms
        record.ttft_ms = hit_ttft if record.prefix_hit and hit_ttft is not None else record.scenario.ttft_ms
        sim._add(record)
        try:
            self._invoke(record, streaming)
        except _ClientGone as gone:
            record.outcome = gone.outcome
            self.close_connection = True
        finally:
            if record.outcome == "streaming":
                record.outcome = "completed"
            record.ended_monotonic_ns = time.monotonic_ns()
            record.ended_wall_ns = time.time_ns()
            sim._changed()

    def _control(self, method: str, path: str, body: bytes) -> None:
        sim = self.server.endpoint
        if path == "/_sim/scenario" and method in ("GET", "POST", "DELETE"):
            try:
                if method == "POST":
                    changes = json.loads(body or b"{}")
                    if not isinstance(changes, dict):
                        raise ValueError("a JSON object of scenario fields is expected")
                    sim.set_scenario(**changes)
                elif method == "DELETE":
                    sim.reset_scenario()
            except (ValueError, TypeError) as exc:
                self._send_json(400, {"message": str(exc)})
                return
            self._send_json(200, sim.scenario.to_json())
        elif path == "/_sim/records" and method in ("GET", "DELETE"):
            if method == "DELETE":
                sim.clear_records()
            self._send_json(200, [r.to_json() for r in sim.records])
        else:
            self._send_json(404, {"message": f"no {method} {path}"})

    # --- the two operations

    def _invoke(self, record: Record, streaming: bool) -> None:
        scenario = record.scenario
        error = auth_error(self.headers)
        if error is None and scenario.endpoint_names is not None and record.endpoint not in scenario.endpoint_names:
            error = ServiceError(400, "ValidationError", {"message": not_found_message(record.endpoint)})
        variant = record.target_variant or scenario.variant
        record.invoked_variant = variant
        if error is None and (scenario.fault.startswith("http_") or scenario.fault == "throttling"):
            record.fault = scenario.fault
            error = service_error(scenario.fault, record.endpoint, variant)
        content_type = (record.content_type or "application/json").split(";")[0].strip().lower()
        if error is None and content_type != "application/json":
            error = model_error(415, f"unsupported content type {record.content_type}", record.endpoint, variant)
        if error is None and (refusal := container_error(record.request, scenario)):
            error = model_error(refusal[0], json.dumps({"error": refusal[1]}), record.endpoint, variant)
        if error is None and (too_long := context_length_error(record.request, scenario)):
            error = model_error(too_long[0], too_long[1], record.endpoint, variant)
        if error is not None:
            record.status = error.status
            self._send_json(error.status, error.body, error.headers())
            return
        if streaming:
            self._stream(record, variant)
        else:
            self._whole(record, variant)

    def _whole(self, record: Record, variant: str) -> None:
        scenario = record.scenario
        gen = generate(record.request, scenario)
        # a non-streaming container answers once the whole generation is done
        done_at = _slot_ns(record, gen.steps - 1)
        if scenario.fault in ("reset", "stall"):
            record.fault = scenario.fault
            self._wait_until(_slot_ns(record, 0))
            if scenario.fault == "reset":
                self._reset()
            self._wait_until(None)  # stall: until the client goes
        self._wait_until(done_at)
        body, content_type = whole_answer(record.request, scenario, record.id)
        record.status = 200
        self._send_json(200, None, {"Content-Type": content_type, "X-Amzn-Invoked-Production-Variant": variant}, body)

    def _stream(self, record: Record, variant: str) -> None:
        scenario = record.scenario
        events = stream_events(record.request, scenario, record.id)
        model_type = "application/jsonlines" if scenario.dialect == "lmi" else "text/event-stream"
        if record.request.get("stream") is not True:
            model_type = "application/json"
        chunked = scenario.framing == "chunked"
        self.send_response(200)
        self.send_header("x-amzn-RequestId", record.id)
        self.send_header("Content-Type", EVENTSTREAM_CONTENT_TYPE)
        self.send_header("X-Amzn-Invoked-Production-Variant", variant)
        self.send_header("X-Amzn-SageMaker-Content-Type", model_type)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        record.status = 200
        self._send_raw(self._headers_buffer_bytes())

        after = scenario.fault_after
        faulty = scenario.fault != "none"  # HTTP-status faults were answered before this point
        for n, piece in enumerate(pieces(events, scenario.split, scenario.coalesce)):
            self._wait_until(_slot_ns(record, piece.slot))
            if faulty and (
                (after == 0 and n == 0) or any(e.token is not None and e.token >= after for e in piece.starts)
            ):
                self._fault(record, piece)
                break
            self._send_frame(payload_part_frame(piece.data), chunked, record, piece.starts)
        else:
            if faulty:  # fewer tokens than fault_after: the fault ends the stream
                self._fault(record, None)
        if chunked:
            self._send_raw(b"0\r\n\r\n")

    def _fault(self, record: Record, piece: Piece | None) -> None:
        """Inject the scenario's stream fault in place of ``piece``; reset and stall never return."""
        fault = record.scenario.fault
        chunked = record.scenario.framing == "chunked"
        record.fault = fault
        if fault == "model_stream_error":
            members = {
                "Message": "Model invocation time exceeded (simulated).",
                "ErrorCode": "ModelInvocationTimeExceeded",
            }
            self._send_frame(exception_frame("ModelStreamError", members), chunked, record, ())
        elif fault == "internal_stream_failure":
            members = {"Message": "The stream processing failed (simulated)."}
            self._send_frame(exception_frame("InternalStreamFailure", members), chunked, record, ())
        elif fault == "corrupt_crc":
            data = piece.data if piece is not None else b"data: [DONE]\n\n"
            self._send_frame(with_bad_crc(payload_part_frame(data)), chunked, record, ())
        elif fault == "reset":
            self._reset()
        elif fault == "stall":
            self._wait_until(None)

    # --- socket work

    def _headers_buffer_bytes(self) -> bytes:
        # end_headers() would write through wfile; taking the buffer keeps "one write, one send" visible here
        self._headers_buffer.append(b"\r\n")
        data = b"".join(self._headers_buffer)
        self._headers_buffer = []
        return data

    def _send_frame(self, frame: bytes, chunked: bool, record: Record, starts: tuple[ModelEvent, ...]) -> None:
        data = b"%x\r\n%s\r\n" % (len(frame), frame) if chunked else frame
        mono, wall = time.monotonic_ns(), time.time_ns()
        self._send_raw(data)
        for event in starts:
            assert event.token is not None
            record.tokens.append(TokenSend(event.token, event.text, event.special, mono, wall))
        self.server.endpoint._changed()

    def _send_raw(self, data: bytes) -> None:
        try:
            self.connection.sendall(data)
        except OSError as exc:  # BrokenPipe, ConnectionReset: the client is gone
            raise _ClientGone("client_closed") from exc

    def _reset(self) -> NoReturn:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.server.aborted.add(self.connection)
        raise _ClientGone("reset")

    def _wait_until(self, deadline_ns: int | None) -> None:
        """Sleep until ``deadline_ns`` (None: forever) while watching for the client leaving."""
        watch = True
        while True:
            if self.server.stopping.is_set():
                raise _ClientGone("server_stopped")
            now = time.monotonic_ns()
            if deadline_ns is not None and now >= deadline_ns:
                return
            step = 0.05 if deadline_ns is None else min(0.05, (deadline_ns - now) / 1e9)
            if not watch:
                time.sleep(step)
                continue
            readable, _, _ = select.select([self.connection], [], [], step)
            if readable:
                try:
                    peeked = self.connection.recv(1, socket.MSG_PEEK)
                except OSError as exc:
                    raise _ClientGone("client_closed") from exc
                if not peeked:
                    raise _ClientGone("client_closed")
                watch = False  # a pipelined request, not a goodbye: stop polling a socket that stays readable

    def _send_json(
        self, status: int, obj: Any, headers: Mapping[str, str] | None = None, raw: bytes | None = None
    ) -> None:
        body = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
        headers = {"Content-Type": "application/json", **(headers or {})}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self._send_raw(self._headers_buffer_bytes() + body)


def _slot_ns(record: Record, slot: int) -> int:
    return record.received_monotonic_ns + int((record.ttft_ms + slot * record.scenario.cadence_ms) * 1e6)


class SimulatedEndpoint:
    """The simulated endpoint: a threaded HTTP server on 127.0.0.1, one thread per connection.

    ``records`` keeps the last ``record_limit`` requests, oldest first.
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        record_limit: int = 1000,
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback or ipaddress.ip_address(host).version != 4:
            raise ValueError(f"the simulated endpoint binds 127.0.0.1 only, not {host}")
        self._initial = scenario or Scenario()
        self._scenario = self._initial
        self._records: deque[Record] = deque(maxlen=record_limit)
        self._prefixes: OrderedDict[str, None] = OrderedDict()  # PrefixAwareIds seen, least recent first
        self._changes = threading.Condition()
        self._server = _Server((host, port), self)
        self._thread: threading.Thread | None = None

    # --- lifecycle

    def start(self) -> SimulatedEndpoint:
        # a short poll interval so stop() returns promptly
        serve = self._server.serve_forever
        self._thread = threading.Thread(target=serve, args=(0.05,), name="sim-endpoint", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> SimulatedEndpoint:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # --- scenario

    @property
    def scenario(self) -> Scenario:
        return self._scenario

    def set_scenario(self, **changes: Any) -> Scenario:
        """Replace the scenario for requests that arrive from now on; in-flight streams keep theirs."""
        self._scenario = self._scenario.replace(**changes)
        return self._scenario

    def reset_scenario(self) -> Scenario:
        """Back to the scenario given at construction."""
        self._scenario = self._initial
        return self._scenario

    # --- records

    @property
    def records(self) -> list[Record]:
        with self._changes:
            return list(self._records)

    def clear_records(self) -> None:
        """Forget every record, and every prefix cached: the next call with any PrefixAwareId is a miss."""
        with self._changes:
            self._records.clear()
            self._prefixes.clear()

    def _prefix_seen(self, prefix_aware_id: str) -> bool:
        """Whether an earlier call brought ``prefix_aware_id`` (its prefix is cached); remember it either way."""
        with self._changes:
            seen = prefix_aware_id in self._prefixes
            self._prefixes[prefix_aware_id] = None
            self._prefixes.move_to_end(prefix_aware_id)
            while len(self._prefixes) > PREFIX_CACHE_IDS:
                self._prefixes.popitem(last=False)
            return seen

    def wait_for_record(self, predicate: Callable[[Record], bool], timeout: float = 5.0) -> Record:
        """The newest record satisfying ``predicate``, waiting up to ``timeout`` seconds for one to appear."""
        deadline = time.monotonic() + timeout
        with self._changes:
            while True:
                for record in reversed(self._records):
                    if predicate(record):
                        return record
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("no record matched within the timeout")
                self._changes.wait(remaining)

    def _add(self, record: Record) -> None:
        with self._changes:
            self._records.append(record)
            self._changes.notify_all()

    def _changed(self) -> None:
        with self._changes:
            self._changes.notify_all()


def iter_frames(data: bytes) -> Iterator[bytes]:
    """Split a buffer of whole event-stream messages by their prelude lengths (for debugging and tests)."""
    while data:
        (length,) = struct.unpack("!I", data[:4])
        yield data[:length]
        data = data[length:]


# ------------------------------------------------------------------------------------------------------ CLI


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sagestream_local.endpoint", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8089)
    defaults = Scenario()
    for f in dataclasses.fields(Scenario):
        value = getattr(defaults, f.name)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            choices = CHOICES.get(f.name)
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(value), default=value, choices=choices)
    args = vars(parser.parse_args(argv))
    port = args.pop("port")
    sim = SimulatedEndpoint(Scenario(**args), port=port).start()
    print(
        f"simulated SageMaker endpoint at {sim.url}  (AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME={sim.url})",
        flush=True,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()


if __name__ == "__main__":
    main()
