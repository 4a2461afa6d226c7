"""Streamed answers shaped as the containers send them, with the deltas each one must decode to.

Each stream is the byte body of one InvokeEndpointWithResponseStream answer, before SageMaker cuts it
into PayloadParts. They carry multi-byte UTF-8 (2-, 3- and 4-byte characters) so that re-chunking can
split a character, and one of them ends its lines with CRLF.
"""

from __future__ import annotations

from dataclasses import dataclass

from sagestream.dialects import Delta, Dialect, Usage, stream_decoder
from sagestream.lines import LineSplitter, decode_line, sse_data


@dataclass(frozen=True)
class Recorded:
    name: str
    dialect: Dialect
    body: bytes
    deltas: list[Delta]


# text-generation-inference /generate_stream (what SageMaker's TGI container sends for "stream": true):
# axum SSE without the space after "data:", the EOS token marked special, details on the last event.
TGI = Recorded(
    "tgi",
    "tgi",
    (
        'data:{"index":1,"token":{"id":15043,"text":"Café","logprob":-0.3,"special":false},'
        '"generated_text":null,"details":null}\n\n'
        'data:{"index":2,"token":{"id":29871,"text":" 日本","logprob":-1.1,"special":false},'
        '"generated_text":null,"details":null}\n\n'
        'data:{"index":3,"token":{"id":243,"text":" 🙂","logprob":-0.9,"special":false},'
        '"generated_text":null,"details":null}\n\n'
        'data:{"index":4,"token":{"id":2,"text":"</s>","logprob":-0.01,"special":true},'
        '"generated_text":"Café 日本 🙂","details":{"finish_reason":"eos_token","generated_tokens":4,'
        '"seed":null,"input_length":7}}\n\n'
    ).encode(),
    [
        Delta("Café"),
        Delta(" 日本"),
        Delta(" 🙂"),
        Delta("", finish_reason="stop", usage=Usage(7, 4, 11)),
    ],
)

# vLLM's OpenAI server, chat with stream_options.include_usage: role chunk, content chunks, a finish
# chunk, the usage chunk with empty choices, [DONE].
_VLLM_HEAD = '"id":"chatcmpl-8f2","object":"chat.completion.chunk","created":1735000000,"model":"llama"'
VLLM_CHAT = Recorded(
    "vllm-chat",
    "openai",
    (
        f'data: {{{_VLLM_HEAD},"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},'
        '"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        f'data: {{{_VLLM_HEAD},"choices":[{{"index":0,"delta":{{"content":"Grüß"}},'
        '"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        f'data: {{{_VLLM_HEAD},"choices":[{{"index":0,"delta":{{"content":" dich 👋"}},'
        '"logprobs":null,"finish_reason":null}],"usage":null}\n\n'
        f'data: {{{_VLLM_HEAD},"choices":[{{"index":0,"delta":{{"content":""}},'
        '"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":null}\n\n'
        f'data: {{{_VLLM_HEAD},"choices":[],'
        '"usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3}}\n\n'
        "data: [DONE]\n\n"
    ).encode(),
    [
        Delta("", role="assistant"),
        Delta("Grüß"),
        Delta(" dich 👋"),
        Delta("", finish_reason="length"),
        Delta("", usage=Usage(12, 3, 15)),
    ],
)

# TGI's Messages API (/v1/chat/completions), here behind something that ends lines with CRLF;
# finish_reason arrives in the same chunk as the last text, as TGI sends it.
_TGI_HEAD = '"object":"chat.completion.chunk","id":"","created":1735000001,"model":"tgi","system_fingerprint":"2.4.0"'
TGI_MESSAGES_CRLF = Recorded(
    "tgi-messages-crlf",
    "openai",
    (
        f'data: {{{_TGI_HEAD},"choices":[{{"index":0,"delta":{{"role":"assistant","content":"Ça"}},'
        '"logprobs":null,"finish_reason":null}]}\r\n\r\n'
        ": keep-alive\r\n\r\n"
        f'data: {{{_TGI_HEAD},"choices":[{{"index":0,"delta":{{"role":"assistant","content":" va €"}},'
        '"logprobs":null,"finish_reason":"stop"}]}\r\n\r\n'
        "data: [DONE]\r\n\r\n"
    ).encode(),
    [Delta("Ça", role="assistant"), Delta(" va €", role="assistant", finish_reason="stop")],
)

# vLLM /v1/completions streaming: text_completion chunks with choices[0].text.
_CMPL_HEAD = '"id":"cmpl-1","object":"text_completion","created":1735000002,"model":"llama"'
VLLM_COMPLETION = Recorded(
    "vllm-completion",
    "openai",
    (
        f'data: {{{_CMPL_HEAD},"choices":[{{"index":0,"text":" naïve","logprobs":null,'
        '"finish_reason":null}]}\n\n'
        f'data: {{{_CMPL_HEAD},"choices":[{{"index":0,"text":" ∑","logprobs":null,'
        '"finish_reason":"stop"}]}\n\n'
        "data: [DONE]\n\n"
    ).encode(),
    [Delta(" naïve"), Delta(" ∑", finish_reason="stop")],
)

# LMI (DJL Serving) rolling batch, output_formatter=jsonlines: one JSON object a line, details and
# generated_text on the last.
LMI = Recorded(
    "lmi",
    "lmi",
    (
        '{"token": {"id": 304, "text": "Deep ", "log_prob": -0.05}}\n'
        '{"token": {"id": 11157, "text": "Lernen 🧠", "log_prob": -1.28}}\n'
        '{"token": {"id": 278, "text": " ist schön", "log_prob": -0.007}}\n'
        '{"token": {"id": 5972, "text": ".", "log_prob": -0.69}, "generated_text": "Deep Lernen 🧠 ist schön.", '
        '"details": {"finish_reason": "length", "generated_tokens": 4, "inputs": "What is Deep Learning?"}}\n'
    ).encode(),
    [
        Delta("Deep "),
        Delta("Lernen 🧠"),
        Delta(" ist schön"),
        Delta(".", finish_reason="length", usage=Usage(None, 4, None)),
    ],
)

# LMI with output_formatter=sse: the same lines behind "data:".
LMI_SSE = Recorded(
    "lmi-sse",
    "lmi",
    (
        'data:{"token": {"id": 304, "text": "Ünï", "log_prob": -0.05}}\n\n'
        'data:{"token": {"id": 2, "text": "", "log_prob": -0.1, "special_token": true}, "generated_text": "Ünï", '
        '"details": {"finish_reason": "eos_token", "generated_tokens": 2, "inputs": "x"}}\n\n'
    ).encode(),
    [Delta("Ünï"), Delta("", finish_reason="stop", usage=Usage(None, 2, None))],
)

RECORDED = [TGI, VLLM_CHAT, TGI_MESSAGES_CRLF, VLLM_COMPLETION, LMI, LMI_SSE]


def relay_deltas(dialect: Dialect, parts: list[bytes]) -> list[Delta]:
    """What the relay's pure path makes of these PayloadParts: lines, records, deltas."""
    splitter, decoder = LineSplitter(), stream_decoder(dialect)
    deltas: list[Delta] = []
    for part in parts:
        for line in splitter.feed(part):
            record = sse_data(decode_line(line))
            if record is not None:
                deltas.extend(decoder.decode(record))
    for line in splitter.finish():
        record = sse_data(decode_line(line))
        if record is not None:
            deltas.extend(decoder.decode(record))
    return deltas
