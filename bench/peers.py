"""The peers: each reads one streamed answer and stamps every content delta with ``time.monotonic_ns()``.

Run one peer in a process of its own, so that its CPU time and peak RSS are its own::

    python -m bench.peers httpx-chunk-1024 --target http://127.0.0.1:PORT --runs 3 --out /tmp/x.json

- ``sagestream`` and ``buffered`` are HTTP clients of a local Function URL (the raw-socket reader of
  :mod:`sagestream_local.measure`); the relay they measure runs in a runtime process of a ``LocalStack``.
- the others are *readers* of the simulated SageMaker endpoint itself, in the shapes other proxies use;
  a delta's arrival is the moment the reader hands it on, i.e. when a proxy built on it could write it.

Each peer first makes one short warm-up request (``max_tokens`` 2), then ``--runs`` measured ones, and
writes its arrivals, CPU time (``process_time_ns``, measured runs only) and peak RSS (``VmHWM``, reset
through ``/proc/self/clear_refs`` after the warm-up) as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

ENDPOINT_NAME = "sagestream-sim"
REGION = "us-east-1"
PROMPT = "Tell me a story about a river."

PEERS = (
    "sagestream",
    "buffered",
    "httpx-chunk-1024",
    "httpx-unbuffered",
    "boto3-close-delimited",
    "line-iterator",
    "node-streamify",
    "fastapi-aiobotocore",
)
# which peers are HTTP clients of a chat route (the others read the simulated endpoint directly): a local Function
# URL, or for fastapi-aiobotocore its uvicorn (bench.designs: the designs a user would pick instead)
THROUGH_FUNCTION_URL = ("sagestream", "buffered", "node-streamify", "fastapi-aiobotocore")


@dataclass
class Arrivals:
    """A run's content-delta arrival times; only first and last when times are not kept (long streams)."""

    started_ns: int
    keep: bool
    times: array[int] = field(default_factory=lambda: array("q"))
    deltas: int = 0
    first_ns: int | None = None
    last_ns: int | None = None

    def stamp(self, count: int = 1) -> None:
        now = time.monotonic_ns()
        if self.first_ns is None:
            self.first_ns = now
        self.last_ns = now
        self.deltas += count
        if self.keep:
            self.times.extend([now] * count)

    def to_json(self) -> dict[str, Any]:
        return {
            "started_ns": self.started_ns,
            "deltas": self.deltas,
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "arrivals_ns": self.times.tolist(),
        }


def content_of(line: bytes) -> str | None:
    """The content of one upstream line of an OpenAI-style SSE stream (what every peer decodes the same way)."""
    if not line.startswith(b"data:"):
        return None
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return None
    chunk = json.loads(payload)
    choices = chunk.get("choices") or ()
    content = choices[0].get("delta", {}).get("content") if choices else None
    return content or None


class Lines:
    """Bytes to lines, keeping only the unfinished tail (the frugal shape; LineIterator below is the other)."""

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> list[bytes]:
        *lines, self._tail = (self._tail + data).split(b"\n")
        return lines


# --------------------------------------------------------------------------------------- upstream readers


def _body(max_tokens: int | None) -> bytes:
    # What sagestream sends an openai-dialect container for a chat request: the same request for every peer.
    body: dict[str, Any] = {"messages": [{"role": "user", "content": PROMPT}], "stream": True}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return json.dumps(body, separators=(",", ":")).encode()


def _signed(url: str, body: bytes) -> dict[str, str]:
    """SigV4 headers for InvokeEndpointWithResponseStream, signed by botocore's own SigV4Auth."""
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials

    credentials = botocore.credentials.Credentials(
        os.environ["AWS_ACCESS_KEY_ID"],
        os.environ["AWS_SECRET_ACCESS_KEY"],
        os.environ.get("AWS_SESSION_TOKEN") or None,
    )
    headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Accept": "application/json"}
    request = botocore.awsrequest.AWSRequest(method="POST", url=url, data=body, headers=headers)
    botocore.auth.SigV4Auth(credentials, "sagemaker", REGION).add_auth(request)
    return {k: str(v) for k, v in request.headers.items()}


def _frames_to_parts(buffer: Any, data: bytes) -> Iterator[bytes]:
    buffer.add_data(data)
    for message in buffer:
        if message.headers.get(":event-type") == "PayloadPart":
            yield message.payload


def _emit(lines: Lines, part: bytes, out: Arrivals) -> None:
    for line in lines.feed(part):
        if content_of(line) is not None:
            out.stamp()


def httpx_reader(chunk_size: int | None) -> Callable[[str, int | None, Arrivals], None]:
    import botocore.eventstream
    import httpx

    client = httpx.Client(timeout=600.0, trust_env=False)

    def read(target: str, max_tokens: int | None, out: Arrivals) -> None:
        url = f"{target}/endpoints/{ENDPOINT_NAME}/invocations-response-stream"
        body = _body(max_tokens)
        with client.stream("POST", url, content=body, headers=_signed(url, body)) as response:
            response.raise_for_status()
            buffer, lines = botocore.eventstream.EventStreamBuffer(), Lines()
            for data in response.iter_bytes(chunk_size=chunk_size):
                for part in _frames_to_parts(buffer, data):
                    _emit(lines, part, out)

    return read


def _boto3_client(target: str) -> Any:
    import boto3

    return boto3.client("sagemaker-runtime", region_name=REGION, endpoint_url=target)


def boto3_reader() -> Callable[[str, int | None, Arrivals], None]:
    """boto3's default iteration, ``for event in response["Body"]`` (the parent serves it close-delimited)."""
    clients: dict[str, Any] = {}

    def read(target: str, max_tokens: int | None, out: Arrivals) -> None:
        client = clients.setdefault(target, _boto3_client(target))
        response = client.invoke_endpoint_with_response_stream(
            EndpointName=ENDPOINT_NAME, Body=_body(max_tokens), ContentType="application/json"
        )
        lines = Lines()
        for event in response["Body"]:
            part = event.get("PayloadPart")
            if part:
                _emit(lines, part["Bytes"], out)

    return read


class LineIterator:
    """The pattern of the SageMaker streaming examples: every PayloadPart appended to one BytesIO, read on by
    ``readline`` from a moving position. The BytesIO is never trimmed: it holds the whole stream."""

    def __init__(self, event_stream: Any) -> None:
        self._events = iter(event_stream)
        self._buffer = io.BytesIO()
        self._position = 0

    def __iter__(self) -> LineIterator:
        return self

    def __next__(self) -> bytes:
        while True:
            self._buffer.seek(self._position)
            line = self._buffer.readline()
            if line.endswith(b"\n"):
                self._position += len(line)
                return line[:-1]
            try:
                event = next(self._events)
            except StopIteration:
                if self._position < self._buffer.getbuffer().nbytes:
                    self._position = self._buffer.getbuffer().nbytes
                    return line
                raise
            part = event.get("PayloadPart")
            if part:
                self._buffer.seek(0, io.SEEK_END)
                self._buffer.write(part["Bytes"])


def line_iterator_reader() -> Callable[[str, int | None, Arrivals], None]:
    clients: dict[str, Any] = {}

    def read(target: str, max_tokens: int | None, out: Arrivals) -> None:
        client = clients.setdefault(target, _boto3_client(target))
        response = client.invoke_endpoint_with_response_stream(
            EndpointName=ENDPOINT_NAME, Body=_body(max_tokens), ContentType="application/json"
        )
        for line in LineIterator(response["Body"]):
            if content_of(line) is not None:
                out.stamp()

    return read


def read_function_url(
    target: str,
    body: bytes,
    out: Arrivals,
    *,
    method: str = "POST",
    path: str = "/v1/chat/completions",
    headers: dict[str, str] | None = None,
    reader: Any = None,
) -> Any:
    """One request to the (local) Function URL, read with measure's raw-socket reader (a ``StreamReader``, or the
    one given), each content delta stamped into ``out`` as the bytes completing it arrive; the reader, once read."""
    import socket
    from urllib.parse import urlsplit

    from sagestream_local.measure import StreamReader

    parts = urlsplit(target)
    fields = {"Host": parts.netloc, "Content-Type": "application/json", **(headers or {})}
    fields["Content-Length"] = str(len(body))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    reader = StreamReader() if reader is None else reader
    with socket.create_connection((parts.hostname, parts.port or 80), timeout=600.0) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(head.encode("latin-1") + body)
        while not reader.complete:
            data = sock.recv(65536)
            if not data:
                break
            completed = reader.feed(data)
            if completed:
                out.stamp(completed)
        if reader.status != 200 or reader.errors:
            raise RuntimeError(f"HTTP {reader.status} {reader.errors}")
    return reader


def function_url_reader() -> Callable[[str, int | None, Arrivals], None]:
    """An HTTP client of the (local) Function URL's chat route (:func:`read_function_url`)."""

    def read(target: str, max_tokens: int | None, out: Arrivals) -> None:
        read_function_url(target, _body(max_tokens), out)

    return read


def reader_for(peer: str) -> Callable[[str, int | None, Arrivals], None]:
    if peer in THROUGH_FUNCTION_URL:
        return function_url_reader()
    if peer == "httpx-chunk-1024":
        return httpx_reader(1024)
    if peer == "httpx-unbuffered":
        return httpx_reader(None)
    if peer == "boto3-close-delimited":
        return boto3_reader()
    if peer == "line-iterator":
        return line_iterator_reader()
    raise SystemExit(f"unknown peer {peer!r}; one of {', '.join(PEERS)}")


# ------------------------------------------------------------------------------------------------- memory


def status_kb(field_name: str, pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise KeyError(field_name)


def reset_peak_rss(pid: int | str = "self") -> bool:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` 5); False where the kernel refuses."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers")
    parser.add_argument("peer", choices=PEERS)
    parser.add_argument("--target", required=True, help="Function URL (sagestream, buffered) or endpoint URL")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--no-times", action="store_true", help="keep only first and last arrival (long)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    read = reader_for(args.peer)
    read(args.target, 2, Arrivals(time.monotonic_ns(), keep=False))  # warm-up: connections, lazy imports
    reset_peak_rss()
    rss_before = status_kb("VmRSS")
    cpu_before = time.process_time_ns()
    runs = []
    for _ in range(args.runs):
        out = Arrivals(time.monotonic_ns(), keep=not args.no_times)
        read(args.target, None, out)
        runs.append(out)
    cpu_ns = time.process_time_ns() - cpu_before
    result = {
        "peer": args.peer,
        "runs": [r.to_json() for r in runs],
        "cpu_ns": cpu_ns,
        "rss_before_kb": rss_before,
        "peak_rss_kb": status_kb("VmHWM"),
    }
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
