"""What a container writes for a request, per dialect: the streamed events and the whole answer.

What the "model" answers follows the request as the containers do, its decisions those of a small obedient
model (:mod:`sagestream_local.model`, via :mod:`~sagestream_local.endpoint.generation`). On ``openai``: with
``tools`` it calls the tool ``tool_choice`` and the prompt ask for the way vLLM's tool parsers stream it (a
head chunk with index, id, type and name, then one chunk per argument fragment, so the arguments span several
PayloadParts), ``finish_reason: "tool_calls"``, and answers in text using the tool results once they are in;
with ``Scenario.reasoning`` it thinks first (``reasoning_content`` chunks,
``completion_tokens_details.reasoning_tokens`` in usage); with ``logprobs`` each content chunk carries them
(``top_logprobs`` alternatives). A JSON ``response_format`` (or TGI's ``parameters.grammar``) makes the text a
JSON document valid for the schema, ``json_object`` one shaped by the prompt, so ``chat.completions.parse``,
instructor and LangChain's ``json_mode`` work. TGI's events carry ``top_tokens`` when ``top_n_tokens`` is
asked and its whole answer ``details.tokens``. A streaming request without ``"stream": true`` gets what a
container sends then: the whole JSON answer as one event.

Each :class:`ModelEvent` is one SSE event or jsonline at its model step (``slot``), which the server sends at
``ttft_ms + slot * cadence_ms``.

Example::

    >>> import json
    >>> from sagestream_local.endpoint.scenario import Scenario
    >>> events = stream_events({"inputs": "Hi", "stream": True}, Scenario(dialect="lmi", tokens=2), "req-1")
    >>> [json.loads(e.data)["token"]["text"] for e in events], json.loads(events[-1].data)["generated_text"]
    (['You', ' asked'], 'You asked')
    >>> whole_answer({"inputs": "Hi"}, Scenario(dialect="lmi", tokens=2), "req-1")
    (b'{"generated_text":"You asked"}', 'application/json')
"""

from __future__ import annotations

import json
import random
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sagestream_local.endpoint.generation import WORDS, Generation, generate
from sagestream_local.endpoint.scenario import Scenario


def token_id(text: str) -> int:
    return zlib.crc32(text.encode()) % 32000 + 3


def _json(obj: Any) -> bytes:
    # Raw UTF-8, not \\u escapes, as TGI (serde) and vLLM (pydantic) write it: multi-byte characters on the
    # wire are what the relay's byte handling must survive.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


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
    alternatives = [text, *(" " + w for w in rng.sample(WORDS, n))][:n]
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
