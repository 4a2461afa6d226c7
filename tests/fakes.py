"""The in-process fakes every test that drives the relay without sockets shares.

- Recorded streams: the byte bodies of InvokeEndpointWithResponseStream answers as the containers send
  them, before SageMaker cuts them into PayloadParts, with the deltas each must decode to. They carry
  multi-byte UTF-8 (2-, 3- and 4-byte characters) so that re-chunking can split a character, and one of
  them ends its lines with CRLF. :func:`relay_deltas` runs the real :func:`sagestream.relay.relay` over them.
- :func:`stubbed_client`: a real boto3 ``sagemaker-runtime`` client whose HTTP send is answered by a
  ``before-send`` hook, so botocore's signing, parsing and ``EventStream`` are the real ones and nothing
  leaves the process. The answers come from the simulated endpoint's own pure functions (the model text,
  the dialect's events, the PayloadPart cuts and frames), so they are what ``SimulatedEndpoint`` would send.
- :class:`RecordingStream`: a :class:`~sagestream.lambda_runtime.ResponseStream` that keeps what it was given and
  checks the prelude exactly as the runtime does (``encode_prelude``).
- :func:`load_app` and :func:`context`: the function's module imported in this process, and a context.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from unittest import mock

import boto3
import botocore.awsrequest
import botocore.config

from sagestream.delta import Delta, Usage
from sagestream.dialects import dialect_named
from sagestream.function_url import decode_prelude, encode_prelude
from sagestream.lambda_runtime import LambdaContext
from sagestream.protocols.openai.encoder import ChunkEncoder
from sagestream.relay import relay
from sagestream_local.endpoint import (
    EVENTSTREAM_CONTENT_TYPE,
    Scenario,
    container_error,
    model_error,
    payload_part_frame,
    pieces,
    stream_events,
    whole_answer,
)

# --- recorded streams ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    name: str
    dialect: str
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
    [
        Delta("Ça", role="assistant", system_fingerprint="2.4.0"),  # the answer's, with its first delta
        Delta(" va €", role="assistant", finish_reason="stop"),
    ],
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


def relay_deltas(dialect: str, parts: list[bytes]) -> list[Delta]:
    """The deltas the relay itself yields for these PayloadParts (the closing bytes left out)."""
    encoder = ChunkEncoder(model="m", kind="chat", include_usage=True)
    return [
        item for item, _ in relay(parts, dialect_named(dialect).stream_decoder(), encoder) if isinstance(item, Delta)
    ]


# --- the stubbed endpoint, the recording response stream -----------------------------------------------------


class RawPieces:
    """The urllib3 response botocore wraps, reduced to what is read of it: each ``read1`` returns one piece."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._pieces = deque(bytes(c) for c in chunks if c)
        self.reads = 0
        self.closed = False

    def read1(self, amt: int = -1) -> bytes:
        self.reads += 1
        if not self._pieces:
            return b""
        piece = self._pieces.popleft()
        if 0 <= amt < len(piece):
            self._pieces.appendleft(piece[amt:])
            piece = piece[:amt]
        return piece

    def read(self, amt: int | None = None, decode_content: bool = True) -> bytes:
        data = b"".join(self._pieces)
        self._pieces.clear()
        return data

    def stream(self, amt: int = 1024, decode_content: bool = True) -> Iterator[bytes]:
        while self._pieces:
            yield self._pieces.popleft()

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass

    @property
    def data(self) -> bytes:
        return self.read()


@dataclass
class Upstream:
    """What the stubbed endpoint answers, and every request body it was sent."""

    scenario: Scenario = field(default_factory=lambda: Scenario(ttft_ms=0, cadence_ms=0, tokens=6, non_ascii=0.3))
    calls: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)  # (operation, url, headers, body)
    # A test may replace the answer for a call: (operation, request JSON) -> AWSResponse or None for the default.
    override: Callable[[str, Any], botocore.awsrequest.AWSResponse | None] | None = None

    def answer(self, request: botocore.awsrequest.AWSPreparedRequest, **_: Any) -> botocore.awsrequest.AWSResponse:
        body = request.body if isinstance(request.body, bytes) else (request.body or b"").encode()
        streaming = request.url.split("?", 1)[0].endswith("/invocations-response-stream")
        operation = "InvokeEndpointWithResponseStream" if streaming else "InvokeEndpoint"
        self.calls.append((operation, request.url, {k: str(v) for k, v in request.headers.items()}, body))
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        if self.override is not None and (custom := self.override(operation, payload)) is not None:
            return custom
        if (refusal := container_error(payload, self.scenario)) is not None:
            error = model_error(refusal[0], json.dumps({"error": refusal[1]}), "stub", "AllTraffic")
            return response(error.status, json.dumps(error.body).encode(), error.headers())
        if not streaming:
            data, content_type = whole_answer(payload, self.scenario, "stub-request")
            return response(200, data, {"Content-Type": content_type})
        events = stream_events(payload, self.scenario, "stub-request")
        frames = [payload_part_frame(p.data) for p in pieces(events, self.scenario.split, self.scenario.coalesce)]
        return event_stream_response(frames)


def response(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> botocore.awsrequest.AWSResponse:
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}
    return botocore.awsrequest.AWSResponse("http://127.0.0.1/stub", status, headers, RawPieces([body]))


def event_stream_response(
    chunks: Iterable[bytes], headers: Mapping[str, str] | None = None
) -> botocore.awsrequest.AWSResponse:
    """A 200 ``InvokeEndpointWithResponseStream`` answer whose raw body reads back as ``chunks``, one per read."""
    head = {
        "Content-Type": EVENTSTREAM_CONTENT_TYPE,
        "X-Amzn-Invoked-Production-Variant": "AllTraffic",
        "X-Amzn-SageMaker-Content-Type": "text/event-stream",
        **(headers or {}),
    }
    return botocore.awsrequest.AWSResponse("http://127.0.0.1/stub", 200, head, RawPieces(chunks))


def stubbed_client(upstream: Upstream, *, max_attempts: int = 1) -> Any:
    """A real boto3 client whose every call is answered in-process by ``upstream`` (nothing is sent)."""
    client = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        # Loopback and a port nobody listens on: were the hook ever bypassed, nothing would leave the host.
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="AKIASTUBSTUBSTUBSTUB",
        aws_secret_access_key="stub-secret-not-real",
        # As upstream.make_client configures it; one attempt unless a test is about retries.
        config=botocore.config.Config(retries={"mode": "standard", "total_max_attempts": max_attempts}),
    )
    client.meta.events.register("before-send.sagemaker-runtime.*", upstream.answer)
    return client


class RecordingStream:
    """A ResponseStream that keeps the prelude and every write, and refuses what the runtime refuses."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.cookies: tuple[str, ...] = ()
        self.writes: list[bytes] = []
        self.closed = False
        self.prelude = b""

    @property
    def started(self) -> bool:
        return self.status is not None

    def start(self, status: int, headers: Mapping[str, str], cookies: Iterable[str] = ()) -> None:
        assert self.status is None, "the response started twice"
        self.prelude = encode_prelude(status, headers, cookies)  # raises what the runtime would raise
        decoded = decode_prelude(self.prelude[:-8])
        self.status, self.headers, self.cookies = decoded.status, decoded.headers, decoded.cookies

    def write(self, data: bytes | str) -> None:
        assert self.status is not None, "write before start"
        assert not self.closed, "write after close"
        self.writes.append(data.encode() if isinstance(data, str) else bytes(data))

    def close(self) -> None:
        self.closed = True

    @property
    def body(self) -> bytes:
        return b"".join(self.writes)

    def data_events(self) -> list[Any]:
        """The SSE ``data:`` payloads, JSON-decoded (``[DONE]`` as the string)."""
        out: list[Any] = []
        for event in self.body.decode("utf-8").split("\n\n"):
            for line in event.split("\n"):
                if line.startswith("data:"):
                    payload = line[5:].strip()
                    out.append(payload if payload == "[DONE]" else json.loads(payload))
        return out


def load_app() -> ModuleType:
    """``sagestream.app``, imported in this process: its module-level handler needs an endpoint name and a region."""
    env = {"SAGEMAKER_ENDPOINT_NAME": "reliability-unused", "AWS_DEFAULT_REGION": "us-east-1"}
    with mock.patch.dict(os.environ, {k: v for k, v in env.items() if k not in os.environ}):
        return importlib.import_module("sagestream.app")


def context(seconds: float = 60.0) -> LambdaContext:
    return LambdaContext(aws_request_id="stub-invocation", deadline_ms=int((time.time() + seconds) * 1000))


def call_of(request: Any, ctx: LambdaContext | None = None) -> Any:
    """A :class:`sagestream.call.Call` for ``request`` (a :class:`sagestream.http.Request`), its answer written
    to a :class:`RecordingStream` (``call.writer.stream``), its record fresh."""
    from sagestream.call import Call
    from sagestream.http import Writer
    from sagestream.record import StreamRecord

    ctx = ctx or context()
    return Call(request, Writer(RecordingStream(), ctx.aws_request_id), ctx, StreamRecord())
