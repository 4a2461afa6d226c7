"""Check a deployed Function URL: does it behave as sagestream promises? A PASS / FAIL / UNKNOWN per behaviour.

Laptop only, never deployed; ``make verify URL=...`` runs it after ``sam deploy``. Each line says what was
sent, what came back, and why that is a pass or a failure; UNKNOWN says what was missing to decide.

- ``streaming``: a streamed chat read delta by delta (``make measure``'s client): time to first token,
  sub-millisecond "burst" gaps (deltas held back and released together), cadence. FAIL if the answer is not
  a 200 event stream, or if over a tenth of the gaps are bursts.
- ``bad_json``: a body that is not JSON gets 400 in OpenAI's error shape.
- ``unknown_model``: a model the function does not serve gets 404 in OpenAI's error shape.
- ``no_credentials``: the same request without the credentials given (``--sigv4``/``--api-key``) gets 401
  or 403. Without credentials given there is nothing to take away: UNKNOWN.
- ``cors_preflight``: a browser's preflight from ``--origin`` for a POST carrying the OpenAI JS SDK's
  headers (its ``x-stainless-*`` set, ``authorization``, ``content-type``) is allowed: origin, method and
  every header. Without ``--origin``: UNKNOWN.
- ``disconnect``: a stream is aborted after three deltas; the invocation's log record is looked up in
  CloudWatch Logs (``FilterLogEvents`` on ``--log-group``, matched by the request id the URL answered
  with: ``x-request-id``, else ``x-amzn-requestid``) to see whether the function saw the client leave
  (``client_disconnected``) and how many tokens the endpoint produced after. A public report says a
  streaming Lambda function may get no signal at all (aws-lambda-nodejs-runtime-interface-client issue
  145): a FAIL here is that, and ``MaxTokensLimit`` is then what bounds the waste. Without a log group,
  AWS credentials or a request id: UNKNOWN, with the reason.

A REST front (``Front=RestApi``; the stack's ``Url`` output) is checked the same way: ``--api-key`` goes as
``x-api-key`` (the header API Gateway's key check reads) as well as ``Authorization: Bearer``, and ``--sigv4``
signs for ``execute-api`` on an execute-api host. Its refusal without a key is API Gateway's 403.

Without ``--model`` the checks send the first model ``/v1/models`` lists (a deployment with several models
refuses a request without one), or none when that list cannot be read. A check refused with 401 (or 403)
when no credentials were given is UNKNOWN ("needs a key"), not a FAIL: the deployment asked for what it should.

Environment variables read: the usual AWS ones (through botocore), for ``--sigv4`` and ``--log-group``.

Example::

    $ python -m sagestream_local.verify https://abc.lambda-url.eu-west-1.on.aws/ --sigv4 \\
          --origin https://chat.example.com --log-group /aws/lambda/sagestream-dev
    $ make verify URL=http://127.0.0.1:3000 ORIGIN=http://localhost:5173

    >>> checks = verify(Target("http://127.0.0.1:3000"))        # doctest: +SKIP
    >>> [(c.name, c.status) for c in checks]                       # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from sagestream_local.measure import (
    BURST_GAP_MS,
    Run,
    chat_body,
    key_headers,
    region_of,
    signed_headers,
    stream_chat,
)

__all__ = [
    "FAIL",
    "JS_SDK_HEADERS",
    "PASS",
    "UNKNOWN",
    "Check",
    "CloudWatchLogs",
    "LinesLogSource",
    "LogSource",
    "LogsUnavailable",
    "Target",
    "verify",
]

PASS, FAIL, UNKNOWN = "PASS", "FAIL", "UNKNOWN"
CHAT = "/v1/chat/completions"
# What the OpenAI JS SDK (openai-node) puts on every request besides the safelisted ones, so what a browser
# preflights: its platform headers (getPlatformHeaders), the retry count and timeout, the key and the JSON
# content type.
JS_SDK_HEADERS = (
    "authorization",
    "content-type",
    "x-stainless-arch",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
)
NO_SUCH_MODEL = "sagestream-verify-no-such-model"
DISCONNECT_AFTER = 3
# Over a tenth of the gaps under a millisecond is tokens being held back, not the network's jitter.
MAX_BURST_SHARE = 0.1
_ERROR_FIELDS = {"message", "type", "param", "code"}


@dataclass
class Check:
    name: str
    status: str  # PASS, FAIL or UNKNOWN
    evidence: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    """The Function URL and how to authenticate to it."""

    url: str
    sigv4: bool = False
    region: str | None = None
    api_key: str | None = None
    timeout_s: float = 60.0

    @property
    def has_credentials(self) -> bool:
        return self.sigv4 or bool(self.api_key)

    def path(self, path: str) -> str:
        return urlsplit(self.url).path.rstrip("/") + path


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def send(
    target: Target,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    authenticate: bool = True,
) -> Answer:
    """One plain request, answered in full (these checks need no timing)."""
    parts = urlsplit(target.url)
    host = parts.netloc
    full_path = target.path(path)
    request_headers = {"Host": host, **(headers or {})}
    if authenticate:
        request_headers.update(key_headers(target.api_key))
    if authenticate and target.sigv4:
        request_headers = signed_headers(
            f"{parts.scheme}://{host}{full_path}", body, request_headers, target.region, method=method
        )
    conn_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_type(parts.hostname or "", parts.port, timeout=target.timeout_s)
    try:
        conn.request(method, full_path, body=body or None, headers=request_headers)
        resp = conn.getresponse()
        return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def _openai_error(answer: Answer) -> dict[str, Any] | None:
    payload = answer.json()
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict) and set(payload["error"]) >= _ERROR_FIELDS:
        return payload["error"]  # type: ignore[no-any-return]
    return None


def _expect_error(name: str, answer: Answer, statuses: Iterable[int], sent: str) -> Check:
    wanted = tuple(statuses)
    error = _openai_error(answer)
    said = answer.body[:200].decode("utf-8", "replace")
    data = {"status": answer.status, "error": error}
    if answer.status in wanted and error is not None:
        return Check(name, PASS, f"{sent} -> {answer.status} {error.get('type')}/{error.get('code')}", data)
    want = " or ".join(map(str, wanted))
    if answer.status not in wanted:
        return Check(name, FAIL, f"{sent} -> {answer.status}, not {want}: {said}", data)
    return Check(name, FAIL, f"{sent} -> {answer.status} but not OpenAI's error shape: {said}", data)


def _needs_credentials(name: str, target: Target, status: int, sent: str) -> Check | None:
    """UNKNOWN for a check refused for want of credentials that were never given; None otherwise."""
    if target.has_credentials or status not in (401, 403):
        return None
    what = "a key (API_KEY=...)" if status == 401 else "credentials (SIGV4=1 or API_KEY=...)"
    return Check(name, UNKNOWN, f"{sent} -> {status}: needs {what}", {"status": status})


def first_model(target: Target) -> str | None:
    """The first model id ``/v1/models`` lists, or None when it cannot be read (no key, not a list)."""
    try:
        answer = send(target, "GET", "/v1/models")
    except (OSError, http.client.HTTPException):
        return None
    listed = answer.json() if answer.status == 200 else None
    data = listed.get("data") if isinstance(listed, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict) and isinstance(data[0].get("id"), str):
        return str(data[0]["id"])
    return None


# --- the checks ----------------------------------------------------------------------------------------------


def check_streaming(target: Target, model: str | None = None) -> Check:
    run = stream_chat(
        target.url,
        chat_body("Count slowly from one to forty, one number per line.", 64, model),
        path=target.path(CHAT),
        sigv4=target.sigv4,
        region=target.region,
        api_key=target.api_key,
        timeout_s=target.timeout_s,
    )
    s = run.summary()
    data = {**s, "content_type": run.headers.get("content-type")}
    refused = _needs_credentials("streaming", target, run.status, "a streamed chat")
    if refused is not None:
        return refused
    if run.status != 200 or not run.headers.get("content-type", "").startswith("text/event-stream"):
        return Check("streaming", FAIL, f"HTTP {run.status} {run.headers.get('content-type')}: {run.error}", data)
    if run.error:
        return Check("streaming", FAIL, f"an error event after {run.deltas} deltas: {run.error}", data)
    if run.deltas < 3:
        return Check("streaming", UNKNOWN, f"only {run.deltas} deltas: too few to judge the cadence", data)
    gaps = run.deltas - 1
    share = s["burst_gaps"] / gaps
    evidence = (
        f"{run.deltas} deltas, ttft {s['ttft_ms']} ms, {s['burst_gaps']}/{gaps} gaps under {BURST_GAP_MS:g} ms, "
        f"cadence {s['cadence_ms_median']} ms median ({s['cadence_ms_p90']} ms p90)"
        + ("" if run.done else ", no [DONE]")
    )
    if share > MAX_BURST_SHARE:
        return Check("streaming", FAIL, f"deltas arrive in bursts: {evidence}", data)
    if not run.done:
        return Check("streaming", FAIL, evidence, data)
    return Check("streaming", PASS, evidence, data)


def check_bad_json(target: Target) -> Check:
    answer = send(target, "POST", CHAT, b'{"messages": [', {"Content-Type": "application/json"})
    sent = "a body that is not JSON"
    return _needs_credentials("bad_json", target, answer.status, sent) or _expect_error(
        "bad_json", answer, (400,), sent
    )


def check_unknown_model(target: Target) -> Check:
    body = json.dumps({"model": NO_SUCH_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
    answer = send(target, "POST", CHAT, body.encode(), {"Content-Type": "application/json"})
    sent = f"model {NO_SUCH_MODEL!r}"
    return _needs_credentials("unknown_model", target, answer.status, sent) or _expect_error(
        "unknown_model", answer, (404,), sent
    )


def check_no_credentials(target: Target) -> Check:
    answer = send(target, "GET", "/v1/models", authenticate=False)
    if not target.has_credentials:
        return Check(
            "no_credentials",
            UNKNOWN,
            f"no credentials were given (SIGV4 or API_KEY), so none could be left out; "
            f"GET /v1/models without any answered {answer.status}",
            {"status": answer.status},
        )
    if answer.status in (401, 403):
        return Check(
            "no_credentials", PASS, f"GET /v1/models without credentials -> {answer.status}", {"status": answer.status}
        )
    return Check(
        "no_credentials",
        FAIL,
        f"GET /v1/models without credentials -> {answer.status}, not 401/403: the URL is open",
        {"status": answer.status},
    )


def check_cors_preflight(target: Target, origin: str | None) -> Check:
    if not origin:
        return Check("cors_preflight", UNKNOWN, "no ORIGIN given: which browser origin to check is yours to say")
    answer = send(
        target,
        "OPTIONS",
        CHAT,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": ",".join(JS_SDK_HEADERS),
        },
        authenticate=False,  # a browser's preflight carries no credentials
    )
    h = answer.headers
    allow_origin = h.get("access-control-allow-origin")
    methods = {m.strip().upper() for m in h.get("access-control-allow-methods", "").split(",") if m.strip()}
    allowed = {x.strip().lower() for x in h.get("access-control-allow-headers", "").split(",") if x.strip()}
    missing = [] if "*" in allowed else [x for x in JS_SDK_HEADERS if x not in allowed]
    data = {"status": answer.status, "allow_origin": allow_origin, "allow_methods": sorted(methods), "missing": missing}
    problems = []
    if not 200 <= answer.status < 300:
        problems.append(f"status {answer.status}")
    if allow_origin not in (origin, "*"):
        problems.append(f"Access-Control-Allow-Origin {allow_origin!r}")
    if not methods & {"POST", "*"}:
        problems.append(f"methods {sorted(methods)} lack POST")
    if missing:
        problems.append(f"headers not allowed: {', '.join(missing)}")
    if problems:
        return Check("cors_preflight", FAIL, f"preflight from {origin}: " + "; ".join(problems), data)
    return Check("cors_preflight", PASS, f"preflight from {origin} -> {answer.status}, origin, POST and headers", data)


class LogsUnavailable(Exception):
    """The log records cannot be read: no credentials, no such group, no permission."""


class LogSource(Protocol):
    description: str

    def find(self, request_id: str, since_ms: int, wait_s: float) -> dict[str, Any] | None:
        """The ``invocation`` log record of ``request_id``, waiting up to ``wait_s`` for it to appear."""
        ...


def _invocation_record(line: str, request_id: str) -> dict[str, Any] | None:
    start = line.find("{")  # a log line may carry a prefix (a timestamp, a request id) before the JSON
    if start < 0:
        return None
    try:
        record = json.loads(line[start:])
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("message") != "invocation":
        return None
    if request_id in (record.get("function_request_id"), record.get("url_request_id")):
        return record
    return None


class CloudWatchLogs:
    """``FilterLogEvents`` on the function's log group, for the record carrying a request id."""

    def __init__(self, log_group: str, region: str | None = None, client: Any = None) -> None:
        self.log_group = log_group
        self.description = f"CloudWatch Logs group {log_group}"
        self._region = region
        self._client = client

    def _logs(self) -> Any:
        if self._client is None:
            import boto3

            # A session of its own: credentials as they are now, not as a default session cached them.
            self._client = boto3.session.Session().client("logs", region_name=self._region)
        return self._client

    def find(self, request_id: str, since_ms: int, wait_s: float) -> dict[str, Any] | None:
        from botocore.exceptions import BotoCoreError, ClientError

        deadline = time.monotonic() + wait_s
        while True:
            try:
                pages = (
                    self._logs()
                    .get_paginator("filter_log_events")
                    .paginate(
                        logGroupName=self.log_group,
                        startTime=max(0, since_ms - 60_000),  # clocks differ; the id narrows it anyway
                        filterPattern=f'"{request_id}"',
                    )
                )
                for page in pages:
                    for event in page.get("events", ()):
                        record = _invocation_record(event.get("message", ""), request_id)
                        if record is not None:
                            return record
            except ClientError as e:
                error = e.response.get("Error", {})
                raise LogsUnavailable(f"{error.get('Code')}: {error.get('Message')}") from e
            except BotoCoreError as e:  # no credentials, no region, no network
                raise LogsUnavailable(str(e)) from e
            if time.monotonic() >= deadline:
                return None
            time.sleep(2.0)  # CloudWatch Logs shows a record seconds after it was written


class LinesLogSource:
    """Log records from lines read by a callable (a local stack's runtime output, a file)."""

    def __init__(self, lines: Callable[[], Iterable[str]], description: str = "local log lines") -> None:
        self._lines = lines
        self.description = description

    def find(self, request_id: str, since_ms: int, wait_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + wait_s
        while True:
            for line in self._lines():
                record = _invocation_record(line, request_id)
                if record is not None:
                    return record
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)


def response_request_id(run: Run) -> str | None:
    """The invocation's id as the URL answered it: sagestream's ``x-request-id``, else Lambda's own header."""
    return run.headers.get("x-request-id") or run.headers.get("x-amzn-requestid")


def check_disconnect(
    target: Target,
    logs: LogSource | None,
    *,
    model: str | None = None,
    max_tokens: int = 512,
    wait_s: float = 90.0,
    request_id_of: Callable[[Run], str | None] = response_request_id,
) -> Check:
    since_ms = int(time.time() * 1000)
    run = stream_chat(
        target.url,
        chat_body("Write a long story about a river, in many short sentences.", max_tokens, model),
        path=target.path(CHAT),
        sigv4=target.sigv4,
        region=target.region,
        api_key=target.api_key,
        timeout_s=target.timeout_s,
        stop_after_deltas=DISCONNECT_AFTER,
    )
    data: dict[str, Any] = {"status": run.status, "deltas_read": run.deltas, "max_tokens": max_tokens}
    refused = _needs_credentials("disconnect", target, run.status, "a streamed chat")
    if refused is not None:
        return refused
    if run.status != 200 or not run.aborted:
        why = f"HTTP {run.status}" if run.status != 200 else f"the stream ended after {run.deltas} deltas"
        return Check("disconnect", UNKNOWN, f"could not leave after {DISCONNECT_AFTER} deltas: {why}", data)
    request_id = request_id_of(run)
    data["request_id"] = request_id
    left = f"left after {run.deltas} deltas"
    if not request_id:
        return Check(
            "disconnect",
            UNKNOWN,
            f"{left}; the URL answered no x-request-id (or x-amzn-requestid) header to find its log record by",
            data,
        )
    if logs is None:
        return Check("disconnect", UNKNOWN, f"{left} (request {request_id}); no LOG_GROUP given to look in", data)
    try:
        record = logs.find(request_id, since_ms, wait_s)
    except LogsUnavailable as e:
        return Check("disconnect", UNKNOWN, f"{left} (request {request_id}); {logs.description}: {e}", data)
    if record is None:
        return Check(
            "disconnect",
            UNKNOWN,
            f"{left}; no log record for request {request_id} in {logs.description} within {wait_s:g} s",
            data,
        )
    produced = int(record.get("output_tokens") or 0)
    after = max(0, produced - run.deltas)
    data.update(
        client_disconnected=record.get("client_disconnected"),
        output_tokens=produced,
        tokens_after=after,
        duration_ms=record.get("duration_ms"),
        finish_reason=record.get("finish_reason"),
    )
    if record.get("client_disconnected"):
        return Check(
            "disconnect", PASS, f"{left}; the function saw it and stopped: {after} tokens produced after", data
        )
    return Check(
        "disconnect",
        FAIL,
        f"{left}; the function never saw it: {after} tokens produced after for nobody "
        f"(finish {record.get('finish_reason')}); MaxTokensLimit bounds this",
        data,
    )


def verify(
    target: Target,
    *,
    origin: str | None = None,
    logs: LogSource | None = None,
    model: str | None = None,
    wait_s: float = 90.0,
) -> list[Check]:
    """Every check, in order; a check that could not run at all is a FAIL naming what went wrong.

    ``model`` None: the first model ``/v1/models`` lists, when it can be read.
    """
    if model is None:
        model = first_model(target)
    steps: list[tuple[str, Callable[[], Check]]] = [
        ("streaming", lambda: check_streaming(target, model)),
        ("bad_json", lambda: check_bad_json(target)),
        ("unknown_model", lambda: check_unknown_model(target)),
        ("no_credentials", lambda: check_no_credentials(target)),
        ("cors_preflight", lambda: check_cors_preflight(target, origin)),
        ("disconnect", lambda: check_disconnect(target, logs, model=model, wait_s=wait_s)),
    ]
    checks = []
    for name, step in steps:
        try:
            checks.append(step())
        except (OSError, http.client.HTTPException, ValueError) as e:
            checks.append(Check(name, FAIL, f"the request failed: {e!r}"))
    return checks


def table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"{'CHECK'.ljust(width)}  RESULT   EVIDENCE"]
    lines += [f"{c.name.ljust(width)}  {c.status.ljust(7)}  {c.evidence}" for c in checks]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sagestream_local.verify", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "url", help="the stack's Url output: a Function URL or a REST API's (or http://127.0.0.1:3000 under make run)"
    )
    parser.add_argument("--sigv4", action="store_true", help="sign for an AWS_IAM Function URL (service lambda)")
    parser.add_argument("--region", default=None, help="region for signing and logs (default: from the URL)")
    parser.add_argument(
        "--api-key", default=None, help="send Authorization: Bearer KEY and x-api-key: KEY (AUTH_MODE=api_key)"
    )
    parser.add_argument("--origin", default=None, help="the browser origin whose CORS preflight to check")
    parser.add_argument("--log-group", default=None, help="the function's CloudWatch Logs group")
    parser.add_argument(
        "--model", default=None, help="the model name to send (default: the first of /v1/models, else none)"
    )
    parser.add_argument("--log-wait", type=float, default=90.0, help="seconds to wait for the log record")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    args = parser.parse_args(argv)
    region = args.region or region_of(args.url)
    target = Target(args.url, sigv4=args.sigv4, region=region, api_key=args.api_key, timeout_s=args.timeout)
    logs = CloudWatchLogs(args.log_group, region) if args.log_group else None
    checks = verify(target, origin=args.origin, logs=logs, model=args.model, wait_s=args.log_wait)
    if args.json:
        print(json.dumps({"url": args.url, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        print(table(checks))
    return 1 if any(c.status == FAIL for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
