"""The function: OpenAI-compatible routes in front of SageMaker endpoints (one per model), streamed delta by delta.

``handler(event, stream, context)`` is what ``sagestream.lambda_runtime`` calls for each event (a Function URL's or
an API Gateway REST front's). The routes are every client protocol's (:data:`sagestream.protocols.ROUTES`:
this module names no protocol) and the app's own (``/v1/models``, ``/health``, the page), in a
:class:`~sagestream.http.Routes` table, as in Starlette: an unknown path is a 404, a known path with the
wrong method a 405 naming the allowed ones, and ``HEAD`` answers on every ``GET`` route as ``GET`` does.

A streamed answer is :func:`sagestream.relay.relay` over :func:`sagestream.upstream.open_stream`'s
PayloadParts; this module only writes what it yields (a :class:`Writer` starts the response with the
first chunk and writes each one) and notes each delta on the invocation's
:class:`~sagestream.record.StreamRecord`. Until the first chunk a failure still gets its own HTTP status;
after it, it travels as one SSE error event and the stream ends without ``[DONE]``.

Several models (``MODELS``): each model id has its own view of the configuration
(:meth:`~sagestream.config.Config.for_model`: endpoint, inference component, dialect, limits), chosen by
the request's ``model``; ``/v1/models`` lists them all. Without ``model`` a request goes to the only model,
and is refused (400, ``param: model``) when there are several, as OpenAI refuses it.

Every answer carries ``x-request-id``: the invocation's own id (``context.aws_request_id``), which is
also the log record's ``function_request_id`` and, on every upstream call, SageMaker's ``InferenceId``
(:mod:`sagestream.sagemaker_ids`; the log record's ``inference_id``). With prefix-aware routing on for the
model, a request's ``prompt_cache_key`` is the call's ``PrefixAwareId`` too.

Environment variables read: those of :mod:`sagestream.config`, at import.

Example (``make invoke`` runs this for real)::

    >>> route = Route("/health", ("GET",), App._health)
    >>> route.methods, route.keyed
    (('GET', 'HEAD'), False)
    >>> from sagestream.app import handler                     # doctest: +SKIP
    >>> handler(function_url_event, response_stream, context)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from snapshot_restore_py import register_after_restore

from sagestream import capacity, faults, page, protocols, sagemaker_ids, upstream
from sagestream.auth import Authenticator, presented_keys, requires_key
from sagestream.config import Config
from sagestream.delta import Delta
from sagestream.dialects import DecodeError, UpstreamStreamError, dialect_named
from sagestream.errors import APIError
from sagestream.function_url import media_type
from sagestream.http import JSON_HEADERS, SSE_HEADERS, Request, Route, Routes, Writer
from sagestream.lambda_runtime import ClientDisconnected, LambdaContext, ResponseStream, WriteTimedOut
from sagestream.protocols import ClientAPI, Parsed, StreamEncoder, error_event
from sagestream.record import StreamRecord
from sagestream.relay import KEEPALIVE, KEEPALIVE_EVENT, relay
from sagestream.sagemaker_ids import UpstreamIds
from sagestream.telemetry import Telemetry, prompt_of

if TYPE_CHECKING:
    from sagestream.identity import Identity

__all__ = ["App", "Call", "Request", "Route", "Writer", "handler"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
# The response header naming the upstream that served a model with fallbacks (the log record's `target`).
TARGET_HEADER = "x-sagestream-target"


class Call(msgspec.Struct, forbid_unknown_fields=True):
    """One invocation as the route handlers see it."""

    request: Request
    writer: Writer
    context: LambdaContext
    record: StreamRecord
    encoder: StreamEncoder | None = None  # a streamed answer's, once it is made: it writes errors after the start
    ids: UpstreamIds | None = None  # what the upstream calls carry besides the body; set by the completion routes
    identity: Identity | None = None  # the caller's verified sign-in, with AUTH_MODE=jwt


class App:
    """The routes, bound to one configuration and one upstream client (both made once, at init)."""

    def __init__(
        self, config: Config, client: Any, telemetry: Telemetry | None = None, auth: Authenticator | None = None
    ) -> None:
        self.config = config
        self.client = client
        self.telemetry = telemetry or Telemetry(config)
        self.auth = auth or Authenticator(config)
        routes = [
            *protocols.ROUTES,
            Route("/v1/models", ("GET",), App._models, keyed=True),
            *(Route(f"/v1/models/{model_id}", ("GET",), App._model, keyed=True) for model_id in config.model_ids),
            Route("/v1/models", (), App._unknown_model, keyed=True, prefix=True),
            Route("/health", ("GET",), App._health),
        ]
        if config.serve_ui:
            routes += [Route("/", ("GET",), page.serve), Route("/index.html", ("GET",), page.serve)]
        self.routes = Routes(routes)
        self._margin_checked = False

    def __call__(self, event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
        arrived, arrived_cpu = time.monotonic(), time.thread_time()  # before any work on the event
        internal = protocols.internal_handler(event)
        if internal is not None:  # the function's own event (a background response's run), never an HTTP one
            internal(self, event, stream, context)
            return
        request = Request.from_event(event)
        record = StreamRecord(
            started=arrived,
            started_cpu=arrived_cpu,
            method=request.method,
            path=request.path,
            caller=request.caller,
            completion=[] if self.config.log_payloads else None,
            prompt=prompt_of(request.body) if self.config.log_payloads else None,
        )
        writer = Writer(stream, context.aws_request_id)
        call = Call(request, writer, context, record)
        with self.telemetry.bind(context.aws_request_id, request.url_request_id):
            if not self._margin_checked:
                self._check_margin(context)
            try:
                self.dispatch(call)
            except APIError as err:
                self._answer_error(call, err)
            except WriteTimedOut:
                # The caller stopped reading and a write could not end before the deadline: the invocation
                # stops here as a deadline stop, and its log record and metrics are still written below.
                logger.warning("a write could not finish before the deadline; the client stopped reading")
                record.fail(faults.error_from(faults.DeadlineReached()))
            except ClientDisconnected:
                record.client_disconnected = True
            except Exception:
                # Still one error shape, and the stream ends before the metrics are written.
                logger.exception("the request failed")
                self._answer_error(call, APIError.internal())
            finally:
                if stream.started:
                    stream.close()  # the client has the whole answer before anything below runs
                self.telemetry.finish(record, request_id=context.aws_request_id, function_name=context.function_name)

    def _check_margin(self, context: LambdaContext) -> None:
        """Warn once, at the environment's first invocation, when DEADLINE_MARGIN_MS leaves no time to answer.

        Lambda tells a function its timeout nowhere at init (no environment variable carries it); the first
        invocation's remaining time is that timeout, less the moment since it began. A margin at or above it
        makes every streamed or whole answer a 504 ``deadline_exceeded``.
        """
        self._margin_checked = True
        remaining = context.get_remaining_time_in_millis()
        if self.config.deadline_margin_ms >= remaining:
            logger.warning(
                "DEADLINE_MARGIN_MS=%d is at or above the function timeout (about %d ms): every completion will "
                "end in a 504 deadline_exceeded. Lower DEADLINE_MARGIN_MS or raise the function timeout.",
                self.config.deadline_margin_ms,
                remaining,
            )

    def dispatch(self, call: Call) -> None:
        """The route for the request's path and method, after the key check; a 404 or 405 if there is none.

        A route's client API sets the shape of every refusal from here on (Anthropic's under /v1/messages) and
        the headers that carry the request id. A prefix route answers every method and path below it itself."""
        request = call.request
        path = request.path.rstrip("/") or "/"
        route = self.routes.match(path)
        if route is not None and route.api is not None:
            call.writer.error_body, call.writer.id_headers = route.api.error_body, route.api.id_headers
        # Unknown /v1 paths need the key too: without it nobody learns which routes exist.
        if route.keyed if route is not None else requires_key(path):
            identity = self.auth.check(request.headers, request.api_key_id)
            if identity is not None:
                call.identity = identity
                details = identity.log_fields()
                call.record.caller = details.pop("caller")
                call.record.caller_details = details or None
        if route is None:
            raise APIError.not_found(f"Unknown path {request.path}.", code="unknown_url")
        if not route.prefix:
            if request.method not in route.methods:
                raise APIError.method_not_allowed(request.method, request.path, ", ".join(route.methods))
            # HEAD is GET without the body; refusals before this point keep theirs, as they always had.
            call.writer.head = request.method == "HEAD"
        route.handler(self, call)

    def _answer_error(self, call: Call, err: APIError) -> None:
        """``err`` as the answer: its own status before the first byte, one SSE error event after it.

        A client that leaves while it is written is noted, never raised: the record is still written.
        """
        call.record.fail(err)
        try:
            if call.writer.started:
                call.writer.write(call.encoder.error(err) if call.encoder is not None else error_event(err))
            else:
                call.writer.error(err)
        except ClientDisconnected:
            call.record.client_disconnected = True

    # --- small routes ---

    @staticmethod
    def _model_card(model_id: str) -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": 0, "owned_by": "sagemaker"}

    def _models(self, call: Call) -> None:
        call.writer.json({"object": "list", "data": [self._model_card(m) for m in self.config.model_ids]})

    def _unknown_model(self, call: Call) -> None:
        model = call.request.path.rstrip("/").removeprefix("/v1/models/")
        raise APIError.not_found(f"The model '{model}' does not exist.", code="model_not_found", param="model")

    def _model(self, call: Call) -> None:
        call.writer.json(self._model_card(call.request.path.rstrip("/").removeprefix("/v1/models/")))

    def _health(self, call: Call) -> None:
        # Nothing unauthenticated names the endpoint or the model.
        call.writer.json({"status": "ok"})

    # --- completions ---

    def _body(self, request: Request) -> bytes:
        media = media_type(request.headers.get("content-type", ""))
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

    def _target(self, model: str | None) -> Config:
        """The configuration of the model a request names; the only one when it names none."""
        served = self.config.model_ids
        if model is None:
            if len(served) > 1:
                raise APIError.invalid_request(
                    f"You must provide a model parameter; this endpoint serves {', '.join(served)}.",
                    param="model",
                    code="missing_required_parameter",
                )
            return self.config.for_model(served[0]) or self.config
        target = self.config.for_model(model)
        if target is None:
            raise APIError.not_found(
                f"The model '{model}' does not exist; this endpoint serves {', '.join(repr(m) for m in served)}.",
                code="model_not_found",
                param="model",
            )
        return target

    def complete(self, call: Call, api: ClientAPI) -> None:
        """Every completion route: ``api`` reads the request and writes the answer, whole or streamed."""
        record = call.record
        record.kind = api.kind
        raw, cfg = self.read_target(call, api)
        # Who asks matters only to what is kept for them (stored responses): worked out only where it is.
        parsed = api.parse(raw, cfg, self.owner(call) if cfg.responses_store != "none" else "")
        record.noted(parsed.noops)
        req = parsed.request
        record.streamed = stream = bool(req.stream)
        call.ids = self.upstream_ids(call, cfg, getattr(req, "prompt_cache_key", None))
        if parsed.instead is not None:  # answered otherwise: a background response, run by another invocation
            parsed.instead(self, call, parsed)
            return
        payload = self.upstream_payload(call, cfg, parsed, stream=stream, max_tokens_default=cfg.max_tokens_limit)
        # Noted once the call is certain: a request refused above made none, and its record names no ids.
        record.inference_id, record.prefix_aware_id = call.ids.inference_id, call.ids.prefix_aware_id
        with self.telemetry.upstream(record):  # the trace subsegment ends with the stream
            if stream:
                self._stream(call, cfg, api, parsed, payload)
            else:
                self._whole(call, cfg, api, parsed, payload)

    def read_target(self, call: Call, api: ClientAPI) -> tuple[bytes, Config]:
        """The request's body, and the configuration of the model it names; the record told which, and the
        API's own headers checked."""
        raw = self._body(call.request)
        # The model first: its own max_tokens_limit is what the request is checked against. A body that is
        # not an object, or a model that is not a string, is the parser's to refuse by name.
        readable, model = _model_named(raw)
        cfg = self._target(model) if readable else self.config
        record = call.record
        record.model, record.endpoint, record.dialect = cfg.model_id, cfg.endpoint_name, cfg.dialect
        record.noted(api.check_headers(call.request.headers))
        return raw, cfg

    def upstream_payload(
        self, call: Call, cfg: Config, parsed: Parsed, *, stream: bool, max_tokens_default: int | None
    ) -> bytes:
        """The InvokeEndpoint body for ``parsed`` in the model's dialect; a dialect's refusal names the field as
        the client's API calls it."""
        dialect = dialect_named(cfg.dialect)
        prefix_aware = call.ids is not None and call.ids.prefix_aware_id is not None
        try:
            body = dialect.body(
                parsed.request,
                prompt_template=cfg.prompt_template,
                stream=stream,
                max_tokens_default=max_tokens_default,
                in_call=_PREFIX_KEY if prefix_aware else frozenset(),
            )
        except APIError as err:
            raise parsed.in_client_terms(err) from None
        if call.identity is not None and dialect.carries_user:
            # OpenAI's `user`, which Messages-API containers take for abuse tracking: the verified caller,
            # in place of whatever the client wrote there, so that no caller can speak for another. The
            # prompt dialects have no such field (a client's own `user` is refused there by name).
            body["user"] = call.identity.sub
            if "safety_identifier" in body:  # OpenAI's newer name for the same: bound to the caller too
                body["safety_identifier"] = call.identity.sub
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    def invoke(self, call: Call, cfg: Config, parsed: Parsed, payload: bytes) -> Delta:
        """A whole (non-streamed) answer to ``payload``, as one delta; a fault as the client's error.

        Held while the model has no capacity as a stream is, with nothing written meanwhile (a whole answer has
        no keep-alive): a client that leaves is not noticed before the deadline or ``cold_wait_s``."""
        deadline = self.deadline(call)
        try:
            body = self.first_answer(
                call,
                cfg,
                lambda target: upstream.invoke(self.client, target, payload, deadline=deadline, ids=call.ids),
                deadline=deadline,
                wait=time.sleep,
            )
            return dialect_named(cfg.dialect).decode_body(body, parsed.request)
        except (DecodeError, UpstreamStreamError) as exc:
            raise faults.error_from(exc) from exc

    @staticmethod
    def first_answer(
        call: Call, cfg: Config, ask: Callable[[Config], T], *, deadline: float, wait: Callable[[float], None]
    ) -> T:
        """``ask``'s answer from the model's first upstream that has capacity (:mod:`sagestream.capacity`: its
        fallbacks in order, held up to its ``cold_wait_s``); the record told which served and how long it waited."""
        held = capacity.Held()
        try:
            return capacity.first_answer(ask, cfg.upstreams, held, deadline=deadline, wait=wait)
        finally:
            record = call.record
            if cfg.fallbacks and held.target is not None:
                # Where there was a choice: the record names the target, and so does the response, unless it
                # started already (a held stream's keep-alives).
                record.target, record.fallback = held.target, held.fallback
                call.writer.extra_headers[TARGET_HEADER] = held.target
            if held.rounds:
                record.cold_wait_rounds, record.cold_wait_ms = held.rounds, held.waited_s * 1000

    def owner(self, call: Call) -> str:
        """Who is asking, as what they keep is kept by (stored responses): the token's issuer and subject, the
        API key, the signing IAM principal; with ``AUTH_MODE=none`` everyone is one caller."""
        if call.identity is not None:
            return f"jwt:{self.config.jwt_issuer}:{call.identity.sub}"
        if self.config.auth_mode == "api_key":
            return "key:" + ",".join(sorted(presented_keys(call.request.headers)))
        if call.request.caller:
            return "iam:" + call.request.caller
        return "anyone"

    def _finish(self, call: Call, parsed: Parsed, answer: bytes | None) -> None:
        """After the answer has reached the client whole: what the route keeps of it (stored responses)."""
        if parsed.finish is None or answer is None:
            return
        try:
            parsed.finish(answer)
            call.record.stored = True
        except Exception:
            call.record.stored = False
            logger.exception("keeping the answer failed")

    @staticmethod
    def upstream_ids(call: Call, cfg: Config, prompt_cache_key: str | None) -> UpstreamIds:
        """The invocation's request id as the ``InferenceId``; with prefix-aware routing on for ``cfg``, the
        ``prompt_cache_key`` as the ``PrefixAwareId`` (a 400 naming it if SageMaker could not take it).

        The routes of other request shapes call it with their own ``prompt_cache_key``."""
        prefix = None
        if cfg.prefix_aware_routing and prompt_cache_key is not None:
            prefix = sagemaker_ids.prefix_aware_id(prompt_cache_key)
        return UpstreamIds.of(call.context.aws_request_id, prefix)

    def deadline(self, call: Call) -> float:
        """When the answer must have ended (a :func:`time.monotonic` value): the margin before Lambda's own."""
        return time.monotonic() + (call.context.get_remaining_time_in_millis() - self.config.deadline_margin_ms) / 1000

    def _whole(self, call: Call, cfg: Config, api: ClientAPI, parsed: Parsed, payload: bytes) -> None:
        answer = self.invoke(call, cfg, parsed, payload)
        if not answer.finish_reason:
            answer = msgspec.structs.replace(answer, finish_reason="stop")  # keeps tool calls, reasoning, logprobs
        data = api.whole(answer, parsed, cfg)
        call.record.wrote(answer, b"")  # a whole answer has no first delta or cadence
        call.writer.write(data, 200, {**JSON_HEADERS, **parsed.headers})
        self._finish(call, parsed, data)

    def _stream(self, call: Call, cfg: Config, api: ClientAPI, parsed: Parsed, payload: bytes) -> None:
        """Open the upstream stream and write each delta the moment it is decoded."""
        record, writer = call.record, call.writer
        # Made first: a request held for capacity may have started the response with keep-alives, and a fault
        # after them is this encoder's error event.
        encoder = call.encoder = api.encoder(parsed, cfg)
        headers = {**SSE_HEADERS, **parsed.headers}
        deadline = self.deadline(call)
        parts = self.first_answer(
            call,
            cfg,
            lambda target: upstream.open_stream(
                self.client, target, payload, deadline=deadline, ids=call.ids, keepalive_s=cfg.sse_keepalive_s
            ),
            deadline=deadline,
            wait=_KeepAlives(call, headers, cfg.sse_keepalive_s),
        )
        # Closed at once however the loop ends (a client gone raises out of the write): the endpoint stops
        # generating for nobody.
        try:
            with parts:
                decoder = dialect_named(cfg.dialect).stream_decoder(parsed.request)
                for item, data in relay(_timed(parts, record), decoder, encoder):
                    if isinstance(item, APIError):
                        record.fail(item)
                        logger.warning("stream ended by an upstream failure: %s", item.message)
                    writer.write(data, 200, headers)
                    if isinstance(item, Delta):
                        # Timed here, at the edge: from the read that completed the delta to its write.
                        record.wrote(item, data, read_at=parts.read_at)
                    elif item is KEEPALIVE:
                        record.keepalives += 1
        finally:
            ended = getattr(encoder, "ended", None)  # an encoder that keeps its events for followers: closed
            if ended is not None:
                ended()
        # The Responses encoder's last whole response object (none after a failure): kept once it was sent.
        self._finish(call, parsed, getattr(encoder, "final", None))


# The request field the call carries as SageMaker's PrefixAwareId when prefix-aware routing is on.
_PREFIX_KEY = frozenset({"prompt_cache_key"})


def _model_named(body: bytes) -> tuple[bool, str | None]:
    """Whether the body is an object whose ``model`` is a string or absent, and that model; read before the
    full parse, which needs that model's limits.

    >>> _model_named(b'{"model": "qwen", "messages": []}'), _model_named(b'{}')
    ((True, 'qwen'), (True, None))
    >>> _model_named(b'{"model": 3}'), _model_named(b"[")
    ((False, None), (False, None))
    """
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(data, dict):
        return False, None
    model = data.get("model")
    if model is None or isinstance(model, str):
        return True, model
    return False, None


class _KeepAlives:
    """The wait of a stream held for capacity: an SSE keep-alive comment every ``every_s`` of it, as for an
    endpoint's silence, so that a front which cuts silent streams keeps it, and a client that left is noticed
    (the write raises :class:`ClientDisconnected`, which ends the hold). ``every_s`` 0: no comments. The first
    comment starts the response (200): a fault after it is the protocol's error event."""

    def __init__(self, call: Call, headers: dict[str, str], every_s: float) -> None:
        self.call, self.headers, self.every_s = call, headers, every_s
        self.due: float | None = None  # when the next comment is due; counted from the first wait

    def __call__(self, seconds: float) -> None:
        now = time.monotonic()
        end = now + seconds
        if not self.every_s:
            time.sleep(seconds)
            return
        if self.due is None:
            self.due = now + self.every_s
        while now < end:
            if now >= self.due:
                self.call.writer.write(KEEPALIVE_EVENT, 200, self.headers)
                self.call.record.keepalives += 1
                self.due = now + self.every_s
            time.sleep(max(0.0, min(end, self.due) - now))
            now = time.monotonic()


def _timed(parts: Iterable[bytes], record: StreamRecord) -> Iterator[bytes]:
    """The parts, noting on the record when the first one arrived."""
    for part in parts:
        if record.upstream_first_byte is None:
            record.upstream_first_byte = time.monotonic()
        yield part


def _build() -> App:
    config = Config.from_env()
    app = App(config, upstream.make_client(config))
    # SnapStart: connections made before the snapshot lead nowhere once restored (sagestream.lambda_runtime runs it).
    register_after_restore(upstream.forget_connections, app.client)
    return app


handler = _build()
