"""The function: OpenAI-compatible routes in front of one SageMaker endpoint, streamed delta by delta.

``handler(event, stream, context)`` is what ``sagestream.runtime`` calls for each Function URL event.
A streamed answer goes: PayloadPart bytes → :class:`~sagestream.lines.LineSplitter` → SSE record →
dialect decoder → :class:`~sagestream.dialects.Delta` → :class:`~sagestream.sse.ChunkEncoder` →
``stream.write``, each delta written before the next upstream read (invariant 1).

The response starts with the first delta, not before: until then a failure still gets its own HTTP
status; after it, failures travel as one SSE error event and the stream ends without ``[DONE]``.

Environment variables read: those of :mod:`sagestream.config`, at import.

Example (``make invoke`` runs this for real)::

    >>> from sagestream.app import handler                     # doctest: +SKIP
    >>> handler(function_url_event, response_stream, context)  # doctest: +SKIP
"""

from __future__ import annotations

import html
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from sagestream import dialects, upstream
from sagestream.auth import Authenticator, requires_key
from sagestream.config import Config
from sagestream.dialects import Delta
from sagestream.errors import APIError
from sagestream.function_url import event_body
from sagestream.lines import LineSplitter, decode_line, sse_data
from sagestream.runtime import ClientDisconnected, LambdaContext, ResponseStream
from sagestream.schema import ChatCompletionRequest, CompletionRequest, parse_chat, parse_completion
from sagestream.sse import ChunkEncoder, Kind, completion_json
from sagestream.telemetry import Cadence, Telemetry

logger = logging.getLogger(__name__)

SSE_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
    "x-content-type-options": "nosniff",
}
JSON_HEADERS = {"content-type": "application/json", "x-content-type-options": "nosniff"}


@dataclass
class Request:
    """What the handler needs of a Function URL event."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Request:
        http = event.get("requestContext", {}).get("http", {})
        return cls(
            method=str(http.get("method", "GET")).upper(),
            path=str(event.get("rawPath") or http.get("path") or "/"),
            headers={str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()},
            body=event_body(event),
        )


@dataclass
class StreamRecord:
    """What one invocation did, for its log record and metrics; made per request, never kept."""

    started: float = field(default_factory=time.monotonic)
    status: int = 200
    route: str = ""
    stream: bool = False
    upstream_first_byte: float | None = None
    first_delta: float | None = None
    cadence: Cadence = field(default_factory=Cadence)  # bounded: a stream's length must not grow memory
    output_tokens: int = 0
    finish_reason: str | None = None
    error_type: str | None = None
    error_code: str | None = None
    client_disconnected: bool = False
    deadline_stop: bool = False
    upstream_started: float | None = None
    completion: list[str] | None = None  # the answer's text, kept only when LOG_PAYLOADS=true

    def wrote_delta(self, now: float) -> None:
        if self.first_delta is None:
            self.first_delta = now
        self.cadence.add(now)


class Relay:
    """The routes, bound to one configuration and one upstream client (both made once, at init)."""

    def __init__(
        self, config: Config, client: Any, telemetry: Telemetry | None = None, auth: Authenticator | None = None
    ) -> None:
        self.config = config
        self.client = client
        self.telemetry = telemetry or Telemetry(config)
        self.auth = auth or Authenticator(config)
        self._routes: dict[str, dict[str, Callable[[Request, ResponseStream, LambdaContext, StreamRecord], None]]] = {
            "/v1/chat/completions": {"POST": self._chat},
            "/v1/completions": {"POST": self._completion},
            "/v1/models": {"GET": self._models},
            f"/v1/models/{config.model_id}": {"GET": self._model},
            "/health": {"GET": self._health},
        }
        if config.serve_ui:
            self._routes["/"] = {"GET": self._page}
            self._routes["/index.html"] = {"GET": self._page}

    def __call__(self, event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
        record = StreamRecord(completion=[] if self.config.log_payloads else None)
        request = Request.from_event(event)
        with self.telemetry.bind(event, context):
            try:
                self.handle(request, stream, context, record)
            except APIError as err:
                record.status, record.error_type, record.error_code = err.status, err.type, err.code
                if stream.started:  # pragma: no cover - every streaming path writes its own error event
                    raise
                self._error(stream, err)
            except ClientDisconnected:
                record.client_disconnected = True
            except Exception:
                # Still one error shape, and the stream ends before the metrics are written.
                logger.exception("the request failed")
                self._fail(stream, record)
            finally:
                if stream.started:
                    stream.close()  # the client has the whole answer before anything below runs
                self.telemetry.finish(
                    record, event, context, method=request.method, path=request.path, body=request.body
                )

    def _fail(self, stream: ResponseStream, record: StreamRecord) -> None:
        err = APIError.internal()
        record.status, record.error_type, record.error_code = err.status, err.type, err.code
        try:
            if stream.started:
                stream.write(b"data: " + err.json_bytes() + b"\n\n")
            else:
                self._error(stream, err)
        except ClientDisconnected:
            record.client_disconnected = True

    def handle(self, request: Request, stream: ResponseStream, context: LambdaContext, record: StreamRecord) -> None:
        if requires_key(request.path):
            self.auth.check(request.headers)
        methods = self._routes.get(request.path.rstrip("/") or "/")
        if methods is None:
            if request.path.startswith("/v1/models/"):
                raise APIError.not_found(
                    f"The model '{request.path.removeprefix('/v1/models/')}' does not exist.",
                    code="model_not_found",
                    param="model",
                )
            raise APIError.not_found(f"Unknown path {request.path}.", code="unknown_url")
        route = methods.get(request.method)
        if route is None:
            raise APIError.method_not_allowed(request.method, request.path, ", ".join(methods))
        record.route = request.path
        route(request, stream, context, record)

    # --- small routes ---

    def _json(self, stream: ResponseStream, status: int, payload: Any, headers: Mapping[str, str] = {}) -> None:
        stream.start(status, {**JSON_HEADERS, **headers})
        stream.write(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())

    def _error(self, stream: ResponseStream, err: APIError) -> None:
        stream.start(err.status, {**JSON_HEADERS, **{k.lower(): v for k, v in err.headers.items()}})
        stream.write(err.json_bytes())

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.config.model_id, "object": "model", "created": 0, "owned_by": "sagemaker"}

    def _models(self, request: Request, stream: ResponseStream, context: LambdaContext, record: StreamRecord) -> None:
        self._json(stream, 200, {"object": "list", "data": [self._model_card()]})

    def _model(self, request: Request, stream: ResponseStream, context: LambdaContext, record: StreamRecord) -> None:
        self._json(stream, 200, self._model_card())

    def _health(self, request: Request, stream: ResponseStream, context: LambdaContext, record: StreamRecord) -> None:
        self._json(stream, 200, {"status": "ok", "model": self.config.model_id})

    def _page(self, request: Request, stream: ResponseStream, context: LambdaContext, record: StreamRecord) -> None:
        page = (
            resources.files("sagestream")
            .joinpath("static/index.html")
            .read_text("utf-8")
            .replace("__SAGESTREAM_MODEL__", html.escape(self.config.model_id))
            .replace("__SAGESTREAM_AUTH_MODE__", html.escape(self.config.auth_mode))
            .encode()
        )
        stream.start(
            200,
            {
                "content-type": "text/html; charset=utf-8",
                "cache-control": "no-cache",
                "x-content-type-options": "nosniff",
                "content-security-policy": "default-src 'self'; script-src 'self' 'unsafe-inline'; "
                "style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
            },
        )
        stream.write(page)

    # --- completions ---

    def _body(self, request: Request) -> bytes:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            raise APIError.invalid_request(
                f"Content-Type must be application/json, not {media or 'missing'}.",
                code="unsupported_media_type",
                status=415,
            )
        if len(request.body) > self.config.max_request_bytes:
            raise APIError.invalid_request(
                f"The request body is {len(request.body)} bytes; the limit is {self.config.max_request_bytes}.",
                code="request_too_large",
                status=413,
            )
        return request.body

    def _check_model(self, model: str | None) -> None:
        if model is not None and model != self.config.model_id:
            raise APIError.not_found(
                f"The model '{model}' does not exist; this endpoint serves '{self.config.model_id}'.",
                code="model_not_found",
                param="model",
            )

    def _chat(self, request: Request, stream: ResponseStream, context: LambdaContext, record: StreamRecord) -> None:
        chat = parse_chat(
            self._body(request),
            max_tokens_limit=self.config.max_tokens_limit,
            extra_fields=self.config.extra_request_fields,
            max_prompt_chars=self.config.max_prompt_chars,
        )
        self._check_model(chat.model)
        self._complete(chat, "chat", stream, context, record)

    def _completion(
        self, request: Request, stream: ResponseStream, context: LambdaContext, record: StreamRecord
    ) -> None:
        completion = parse_completion(
            self._body(request),
            max_tokens_limit=self.config.max_tokens_limit,
            extra_fields=self.config.extra_request_fields,
            max_prompt_chars=self.config.max_prompt_chars,
        )
        self._check_model(completion.model)
        self._complete(completion, "completion", stream, context, record)

    def _complete(
        self,
        req: ChatCompletionRequest | CompletionRequest,
        kind: Kind,
        stream: ResponseStream,
        context: LambdaContext,
        record: StreamRecord,
    ) -> None:
        cfg = self.config
        record.stream = bool(req.stream)
        body = dialects.upstream_body(
            cfg.upstream_format,
            req,
            prompt_template=cfg.prompt_template,
            stream=bool(req.stream),
            max_tokens_default=cfg.max_tokens_limit,
        )
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        with self.telemetry.upstream(record):  # the trace subsegment ends with the stream
            if not req.stream:
                answer = dialects.decode_body(cfg.upstream_format, upstream.invoke(self.client, cfg, payload), req)
                record.finish_reason = answer.finish_reason or "stop"
                if answer.usage is not None:
                    record.output_tokens = answer.usage.completion_tokens
                if record.completion is not None:
                    record.completion.append(answer.content)
                stream.start(200, JSON_HEADERS)
                stream.write(completion_json(answer, model=cfg.model_id, kind=kind))
                return
            encoder = ChunkEncoder(
                model=cfg.model_id, kind=kind, include_usage=req.include_usage, pad_bytes=cfg.sse_pad_bytes
            )
            decoder = dialects.stream_decoder(cfg.upstream_format, req)
            self._relay(payload, encoder, stream, context, record, decoder)

    def _relay(
        self,
        payload: bytes,
        encoder: ChunkEncoder,
        stream: ResponseStream,
        context: LambdaContext,
        record: StreamRecord,
        decoder: dialects.StreamDecoder,
    ) -> None:
        """Open the upstream stream and write each delta the moment it is decoded."""
        cfg = self.config
        remaining_ms = context.get_remaining_time_in_millis() - cfg.deadline_margin_ms
        if remaining_ms <= 0:
            raise APIError.upstream(504, "The function has too little time left to call the model.", code="deadline")
        parts = upstream.open_stream(self.client, cfg, payload)
        # The runtime cannot interrupt a blocking read; a timer near the deadline shuts the upstream socket.
        watchdog = threading.Timer(max(0.0, remaining_ms / 1000), parts.interrupt)
        watchdog.daemon = True
        watchdog.start()
        splitter = LineSplitter()

        def emit(line: bytes) -> None:
            record_text = sse_data(decode_line(line))
            if record_text is None:
                return
            for delta in decoder.decode(record_text):
                data = encoder.encode(delta)
                if delta.finish_reason:
                    record.finish_reason = delta.finish_reason
                if not data:
                    continue
                if not stream.started:
                    stream.start(200, SSE_HEADERS)
                stream.write(data)
                record.wrote_delta(time.monotonic())
                if delta.content:
                    record.output_tokens += 1
                    if record.completion is not None:
                        record.completion.append(delta.content)

        try:
            for part in parts:
                if record.upstream_first_byte is None:
                    record.upstream_first_byte = time.monotonic()
                for line in splitter.feed(part):
                    emit(line)
                if decoder.done:
                    break
            if parts.interrupted:
                self._deadline_stop(encoder, stream, record)
                return
            for line in splitter.finish():
                emit(line)
            if encoder.usage is not None:
                record.output_tokens = encoder.usage.completion_tokens
            if not stream.started:
                stream.start(200, SSE_HEADERS)
            if record.finish_reason is None:
                # The container ended without saying why; a client still needs a last chunk that does.
                self._write(stream, encoder.encode(Delta(finish_reason="stop")), record)
                record.finish_reason = "stop"
            stream.write(encoder.done())
        except ClientDisconnected:
            record.client_disconnected = True
            parts.close()  # at once: the endpoint stops generating for nobody
        except APIError as err:
            record.error_type, record.error_code = err.type, err.code
            if not stream.started:
                raise
            record.status = err.status
            logger.warning("stream ended by an upstream failure: %s", err.message)
            try:
                stream.write(encoder.error(err))
            except ClientDisconnected:
                record.client_disconnected = True
        finally:
            watchdog.cancel()
            parts.close()

    def _write(self, stream: ResponseStream, data: bytes, record: StreamRecord) -> None:
        if data:
            stream.write(data)
            record.wrote_delta(time.monotonic())

    def _deadline_stop(self, encoder: ChunkEncoder, stream: ResponseStream, record: StreamRecord) -> None:
        record.deadline_stop = True
        err = APIError.upstream(
            504,
            "The answer was cut short: the function reached its time limit. Ask for fewer tokens, "
            "or raise the function timeout.",
            code="deadline_exceeded",
        )
        record.error_type, record.error_code = err.type, err.code
        if not stream.started:
            raise err
        record.finish_reason = "length"
        self._write(stream, encoder.encode(Delta(finish_reason="length")), record)
        stream.write(encoder.error(err))


def _build() -> Relay:
    config = Config.from_env()
    return Relay(config, upstream.make_client(config))


handler = _build()
