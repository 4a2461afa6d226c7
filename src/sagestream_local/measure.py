"""Measure a streaming chat endpoint from the client's side: time to first token, bursts, cadence.

Laptop only, never deployed. Point it at a deployed Function URL (or ``make run``'s local one); it sends
a streamed chat request per run, reads the socket itself (no HTTP library buffer between the socket
and the clock) and timestamps every content delta the moment the bytes completing its SSE event arrive.
Per run it prints

- ``ttft_ms``: request start (before connecting and signing) to the first content delta;
- ``burst gaps``: deltas that arrived less than 1 ms after the previous one, over all deltas. A model
  emits tokens several ms apart, so a sub-millisecond gap is a token that was held back and released
  together with a later one ("gap then burst");
- ``cadence``: the median and p90 of the gaps between deltas;
- ``request id``: the answer's ``x-request-id``, the invocation's own id, which is the
  ``function_request_id`` of its log record (and the ``InferenceId`` of its SageMaker call): a slow or
  failed run is one log search away.

``--prompt-cache-key KEY`` sends the same ``prompt_cache_key`` in every run: with prefix-aware routing on,
runs after the first go to the instance that holds the prompt's prefix, and their first token comes sooner.

Authentication: ``--sigv4`` signs each request for an ``AWS_IAM`` Function URL with the caller's own
credentials (botocore's ``SigV4Auth``, service ``lambda``, the region taken from the URL or else the AWS
configuration); ``--api-key KEY`` sends ``Authorization: Bearer KEY`` for ``AUTH_MODE=api_key``.

Environment variables read: the usual AWS ones (through botocore), only with ``--sigv4``.

Example::

    $ python -m sagestream_local.measure https://abc.lambda-url.eu-west-1.on.aws/ --runs 3 --sigv4
    $ make measure URL=http://127.0.0.1:3000 RUNS=3

    >>> runs = measure("http://127.0.0.1:3000", runs=1)       # doctest: +SKIP
    >>> runs[0].ttft_ms, runs[0].burst_gaps, runs[0].deltas   # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import ssl
import statistics
import sys
import time
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = ["BURST_GAP_MS", "Run", "StreamReader", "chat_body", "measure", "region_of", "signed_headers", "stream_chat"]

BURST_GAP_MS = 1.0
_RECV = 65536
# A Function URL's host, or an API Gateway REST API's execute-api one (Front=RestApi).
_URL_REGION = re.compile(r"\.(?:lambda-url\.([a-z0-9-]+)\.on\.aws|execute-api\.([a-z0-9-]+)\.amazonaws\.com)$")


class StreamReader:
    """Incremental HTTP/1.1 response parser (chunked or not) that yields content deltas as they complete.

    ``feed`` takes socket bytes and returns how many content deltas they completed; the caller stamps them
    with the time the bytes arrived. Only the unfinished tail of an SSE event is kept, unless
    ``keep_body`` asks for the whole body (for errors and tests).
    """

    def __init__(self, keep_body: bool = False) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.complete = False  # the body ended (terminating chunk, Content-Length reached, or [DONE])
        self.done = False  # a data: [DONE] event arrived
        self.errors: list[Any] = []  # SSE error events (OpenAI shape) seen after the stream began
        self.text: list[str] = []
        self.body = bytearray() if keep_body else None
        self._head = bytearray()
        self._raw = bytearray()  # transfer-framed bytes not yet parsed
        self._sse = bytearray()  # body bytes not yet making a whole SSE event
        self._chunked = False
        self._remaining: int | None = None  # bytes left: of a Content-Length body, or of the current chunk
        self._in_head = True

    def feed(self, data: bytes) -> int:
        if self._in_head:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return 0
            head, data = bytes(self._head[:end]), bytes(self._head[end + 4 :])
            self._head.clear()
            self._in_head = False
            lines = head.decode("latin-1").split("\r\n")
            self.status = int(lines[0].split()[1])
            for line in lines[1:]:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
            self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
            if not self._chunked and "content-length" in self.headers:
                self._remaining = int(self.headers["content-length"])
        return self._body(data) if data else 0

    def _body(self, data: bytes) -> int:
        if not self._chunked:
            if self._remaining is not None:
                data = data[: self._remaining]
                self._remaining -= len(data)
                self.complete = self._remaining == 0
            return self._events(data)
        self._raw += data
        count = 0
        while not self.complete:
            if self._remaining is None:  # at a chunk-size line
                end = self._raw.find(b"\r\n")
                if end < 0:
                    break
                size = int(bytes(self._raw[:end]).split(b";", 1)[0], 16)
                del self._raw[: end + 2]
                if size == 0:
                    self.complete = True
                    break
                self._remaining = size
            if len(self._raw) < self._remaining + 2:
                break
            count += self._events(bytes(self._raw[: self._remaining]))
            del self._raw[: self._remaining + 2]
            self._remaining = None
        return count

    def _events(self, data: bytes) -> int:
        if self.body is not None:
            self.body += data
        if self.status != 200:
            return 0
        self._sse += data
        count = 0
        while (end := self._sse.find(b"\n\n")) >= 0:
            event = bytes(self._sse[:end])
            del self._sse[: end + 2]
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    count += self._data(line[5:].strip())
        return count

    def _data(self, payload: bytes) -> int:
        if payload == b"[DONE]":
            self.done = True
            return 0
        try:
            chunk = json.loads(payload)
        except ValueError:
            return 0
        if not isinstance(chunk, dict):
            return 0
        if "error" in chunk:
            self.errors.append(chunk["error"])
            return 0
        count = 0
        for choice in chunk.get("choices") or ():
            content = (choice.get("delta") or {}).get("content") if "delta" in choice else choice.get("text")
            if content:
                self.text.append(content)
                count += 1
        return count


@dataclass
class Run:
    """One streamed request as the client saw it. Times are ``time.monotonic_ns()``."""

    status: int
    started_ns: int
    arrivals_ns: array[int] = field(default_factory=lambda: array("q"))
    deltas: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    done: bool = False
    error: Any = None
    text: str = ""
    headers: dict[str, str] = field(default_factory=dict)  # the response's, names lower-cased
    aborted: bool = False  # the client closed the connection on purpose (``stop_after_deltas``)

    @property
    def ttft_ms(self) -> float | None:
        return None if self.first_ns is None else (self.first_ns - self.started_ns) / 1e6

    @property
    def request_id(self) -> str | None:
        """The function's ``x-request-id`` for this run (its log record's ``function_request_id``)."""
        return self.headers.get("x-request-id")

    @property
    def gaps_ms(self) -> list[float]:
        a = self.arrivals_ns
        return [(a[i] - a[i - 1]) / 1e6 for i in range(1, len(a))]

    @property
    def burst_gaps(self) -> int:
        return sum(1 for gap in self.gaps_ms if gap < BURST_GAP_MS)

    def summary(self) -> dict[str, Any]:
        gaps = self.gaps_ms
        return {
            "status": self.status,
            "ttft_ms": _round(self.ttft_ms),
            "deltas": self.deltas,
            "burst_gaps": self.burst_gaps,
            "cadence_ms_median": _round(statistics.median(gaps)) if gaps else None,
            "cadence_ms_p90": _round(_quantile(gaps, 0.9)) if gaps else None,
            "duration_ms": _round((self.last_ns - self.started_ns) / 1e6) if self.last_ns else None,
            "done": self.done,
            "error": self.error,
            "request_id": self.request_id,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def region_of(url: str) -> str | None:
    """The region of a Function URL (``https://<id>.lambda-url.<region>.on.aws/``), else None."""
    match = _URL_REGION.search(urlsplit(url).hostname or "")
    return (match[1] or match[2]) if match else None


def signed_headers(
    url: str, body: bytes, headers: Mapping[str, str], region: str | None = None, method: str = "POST"
) -> dict[str, str]:
    """``headers`` plus a SigV4 signature made with the caller's AWS credentials: for service ``lambda`` (a
    Function URL), or ``execute-api`` where the URL is an API Gateway one (``Front=RestApi`` with ``iam``)."""
    import botocore.auth
    import botocore.awsrequest
    import botocore.session

    session = botocore.session.Session()
    credentials = session.get_credentials()
    if credentials is None:
        raise SystemExit("--sigv4: no AWS credentials found (AWS_PROFILE, environment, SSO, instance role)")
    region = region or region_of(url) or session.get_config_variable("region")
    if not region:
        raise SystemExit("--sigv4: the URL names no region and the AWS configuration has none; pass --region")
    request = botocore.awsrequest.AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    service = "execute-api" if ".execute-api." in (urlsplit(url).hostname or "") else "lambda"
    botocore.auth.SigV4Auth(credentials.get_frozen_credentials(), service, region).add_auth(request)
    return {k: str(v) for k, v in request.headers.items()}


def key_headers(api_key: str | None) -> dict[str, str]:
    """The key both ways: ``Authorization: Bearer`` (the function's own check reads either) and ``x-api-key``
    (the one header API Gateway's key check reads, behind ``Front=RestApi``), so one ``--api-key`` fits either
    front."""
    return {"Authorization": f"Bearer {api_key}", "x-api-key": api_key} if api_key else {}


def chat_body(prompt: str, max_tokens: int | None, model: str | None, prompt_cache_key: str | None = None) -> bytes:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": prompt}], "stream": True}
    if prompt_cache_key is not None:
        body["prompt_cache_key"] = prompt_cache_key
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if model is not None:
        body["model"] = model
    return json.dumps(body).encode()


def stream_chat(
    url: str,
    body: bytes,
    *,
    path: str | None = None,
    headers: Mapping[str, str] | None = None,
    sigv4: bool = False,
    region: str | None = None,
    api_key: str | None = None,
    timeout_s: float = 120.0,
    keep_times: bool = True,
    stop_after_deltas: int | None = None,
) -> Run:
    """Send one streamed chat request and time each content delta as its bytes arrive.

    ``keep_times=False`` keeps only the first and last arrival (for very long streams: memory stays flat).
    ``stop_after_deltas=N`` closes the connection once N content deltas have arrived, as a user who stops
    reading does (``make verify``'s disconnect check).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    path = path or (parts.path.rstrip("/") + "/v1/chat/completions")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host_header = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    started = time.monotonic_ns()
    request_headers = {"Host": host_header, "Content-Type": "application/json", "Accept": "text/event-stream"}
    request_headers.update(key_headers(api_key))
    request_headers.update(headers or {})
    if sigv4:
        request_headers = signed_headers(f"{parts.scheme}://{host_header}{path}", body, request_headers, region)
    request_headers["Content-Length"] = str(len(body))
    head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in request_headers.items()) + "\r\n"
    deadline = time.monotonic() + timeout_s
    sock: socket.socket = socket.create_connection((parts.hostname, port), timeout=timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if parts.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
        sock.sendall(head.encode("latin-1") + body)
        reader = StreamReader(keep_body=True)
        run = Run(status=0, started_ns=started)
        while not reader.complete and time.monotonic() < deadline:
            data = sock.recv(_RECV)
            now = time.monotonic_ns()
            if not data:
                break
            completed = reader.feed(data)
            if completed:
                if run.first_ns is None:
                    run.first_ns = now
                run.last_ns = now
                run.deltas += completed
                if keep_times:
                    run.arrivals_ns.extend([now] * completed)
            if reader.body is not None and reader.status == 200 and len(reader.body) > 1 << 16:
                reader.body = None  # a stream that is going well: its body is not needed
            if stop_after_deltas is not None and run.deltas >= stop_after_deltas:
                run.aborted = True
                break
    finally:
        sock.close()
    run.status = reader.status
    run.headers = dict(reader.headers)
    run.done = reader.done
    run.text = "".join(reader.text) if keep_times else ""
    if reader.errors:
        run.error = reader.errors[0]
    elif reader.status != 200 and reader.body is not None:
        run.error = bytes(reader.body[:500]).decode("utf-8", "replace")
    return run


def measure(
    url: str,
    *,
    runs: int = 3,
    prompt: str = "Tell me a story about a river.",
    max_tokens: int | None = None,
    model: str | None = None,
    prompt_cache_key: str | None = None,
    **options: Any,
) -> list[Run]:
    """``runs`` requests one after the other (the same ``prompt_cache_key`` in each, if given)."""
    body = chat_body(prompt, max_tokens, model, prompt_cache_key)
    return [stream_chat(url, body, **options) for _ in range(runs)]


def _print_run(n: int, run: Run) -> None:
    s = run.summary()
    if run.status != 200 or run.error:
        print(f"run {n}: HTTP {run.status} {run.error or ''}".rstrip() + f"   request id {run.request_id or '-'}")
        if run.status != 200:
            return
    cadence = f"{s['cadence_ms_median']} ms median, {s['cadence_ms_p90']} ms p90" if s["cadence_ms_median"] else "-"
    print(
        f"run {n}: ttft {s['ttft_ms']} ms   burst gaps {s['burst_gaps']}/{s['deltas']} deltas   "
        f"cadence {cadence}   total {s['duration_ms']} ms{'' if run.done else '   (no [DONE])'}   "
        f"request id {run.request_id or '-'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sagestream_local.measure", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("url", help="the Function URL (or http://127.0.0.1:3000 under make run)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompt", default="Tell me a story about a river.")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--model", default=None, help="the model name to send (default: none, the function's own)")
    parser.add_argument(
        "--prompt-cache-key",
        default=None,
        help="send this prompt_cache_key in every run (with PREFIX_AWARE_ROUTING on, runs after the first "
        "go to the instance that holds the prefix)",
    )
    parser.add_argument("--path", default=None, help="request path (default: /v1/chat/completions)")
    parser.add_argument("--sigv4", action="store_true", help="sign for an AWS_IAM Function URL (service lambda)")
    parser.add_argument("--region", default=None, help="signing region (default: from the URL, else AWS config)")
    parser.add_argument("--api-key", default=None, help="send Authorization: Bearer KEY (AUTH_MODE=api_key)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of lines")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    results = measure(
        args.url,
        runs=args.runs,
        prompt=args.prompt,
        max_tokens=args.max_tokens,
        model=args.model,
        prompt_cache_key=args.prompt_cache_key,
        path=args.path,
        sigv4=args.sigv4,
        region=args.region,
        api_key=args.api_key,
        timeout_s=args.timeout,
    )
    ok = all(r.status == 200 and r.deltas > 0 and not r.error for r in results)
    if args.json:
        print(json.dumps({"url": args.url, "runs": [r.summary() for r in results]}, indent=2))
    else:
        for n, run in enumerate(results, 1):
            _print_run(n, run)
        good = [r for r in results if r.ttft_ms is not None]
        if len(good) > 1:
            ttfts = [r.ttft_ms for r in good if r.ttft_ms is not None]
            bursts, deltas = sum(r.burst_gaps for r in good), sum(r.deltas for r in good)
            print(f"all:   ttft {statistics.median(ttfts):.3f} ms median   burst gaps {bursts}/{deltas} deltas")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
