"""In-process stand-ins for the two sides of the relay, for tests that need thousands of calls a second.

- :func:`stubbed_client`: a real boto3 ``sagemaker-runtime`` client whose HTTP send is answered by a
  ``before-send`` hook, so botocore's signing, parsing and ``EventStream`` are the real ones and nothing
  leaves the process. The answers come from the simulated endpoint's own pure functions (the model text,
  the dialect's events, the PayloadPart cuts and frames), so they are what ``SimulatedEndpoint`` would send.
- :class:`RecordingStream`: a :class:`~sagestream.runtime.ResponseStream` that keeps what it was given and
  checks the prelude exactly as the runtime does (``encode_prelude``).
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

from sagestream.function_url import decode_prelude, encode_prelude
from sagestream.runtime import LambdaContext
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


def stubbed_client(upstream: Upstream) -> Any:
    """A real boto3 client whose every call is answered in-process by ``upstream`` (nothing is sent)."""
    client = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        # Loopback and a port nobody listens on: were the hook ever bypassed, nothing would leave the host.
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="AKIASTUBSTUBSTUBSTUB",
        aws_secret_access_key="stub-secret-not-real",
        config=botocore.config.Config(retries={"mode": "standard", "total_max_attempts": 1}),
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
