"""The function: OpenAI-compatible routes in front of SageMaker endpoints (one per model), streamed delta by delta.

``handler(event, stream, context)`` is what ``sagestream.lambda_runtime`` calls for each event (a Function URL's or
an API Gateway REST front's). The routes are every client protocol's (:data:`sagestream.protocols.ROUTES`:
this module names no protocol) and the app's own (``/v1/models``, ``/health``, the page), in a
:class:`~sagestream.http.Routes` table, as in Starlette: an unknown path is a 404, a known path with the
wrong method a 405 naming the allowed ones, and ``HEAD`` answers on every ``GET`` route as ``GET`` does.

The walk of a request is short: :meth:`App.__call__` makes the :class:`~sagestream.call.Call` and its log
record, :meth:`App.dispatch` checks the key and picks the route, and a completion route's
:meth:`App.complete` reads it (:mod:`sagestream.prepare`), lets its protocol parse it and answers, whole or
streamed (:mod:`sagestream.answer`). The app's own routes are :mod:`sagestream.own_routes`'.

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

    >>> route = App(Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "llm"}), None).routes.match("/health")
    >>> route.methods, route.keyed
    (('GET', 'HEAD'), False)
    >>> from sagestream.app import handler                     # doctest: +SKIP
    >>> handler(function_url_event, response_stream, context)  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from snapshot_restore_py import register_after_restore

from sagestream import answer, faults, prepare, protocols, upstream
from sagestream.auth import Authenticator, requires_key
from sagestream.call import Call
from sagestream.config import Config
from sagestream.errors import APIError
from sagestream.http import Request, Route, Routes, Writer
from sagestream.lambda_runtime import ClientDisconnected, LambdaContext, ResponseStream, WriteTimedOut
from sagestream.own_routes import own_routes
from sagestream.protocols import Completion, error_event
from sagestream.record import StreamRecord
from sagestream.telemetry import Telemetry, prompt_of

if TYPE_CHECKING:
    from sagestream.delta import Delta
    from sagestream.guardrails import Guardrails
    from sagestream.protocols import ClientAPI, Parsed
    from sagestream.quotas import DynamoQuotas

__all__ = ["App", "Call", "Request", "Route", "Writer", "handler"]

logger = logging.getLogger(__name__)


class App:
    """The routes, bound to one configuration and one upstream client (both made once, at init)."""

    def __init__(
        self, config: Config, client: Any, telemetry: Telemetry | None = None, auth: Authenticator | None = None
    ) -> None:
        self.config = config
        self.client = client
        self.telemetry = telemetry or Telemetry(config)
        self.auth = auth or Authenticator(config)
        self.routes = Routes([*protocols.ROUTES, *own_routes(config)])
        protocols.at_init(config)  # the clients the protocols need besides the upstream's (a store's)
        # Per-caller quotas (QUOTAS), counted in DynamoDB; None when off (and their modules never imported).
        self.quotas: DynamoQuotas | None = None
        if config.quotas is not None:
            from sagestream.quotas import DynamoQuotas

            self.quotas = DynamoQuotas(config.quotas_table or "", config.quotas)
        # Bedrock Guardrails (GUARDRAIL_ID, or a model's own): its client and workers made here, never on a request.
        self.guardrails: Guardrails | None = None
        if config.guardrail is not None or any(m.guardrail is not None for m in config.models):
            from sagestream.guardrails import Guardrails

            self.guardrails = Guardrails()
        self._margin_checked = False

    def __call__(self, event: dict[str, Any], stream: ResponseStream, context: LambdaContext) -> None:
        """The one frame of every invocation: its telemetry bound, its work (a route, or one of the function's own
        events: a background run), its stream closed, then what was left for after (settles, stores), then its
        record finished."""
        arrived, arrived_cpu = time.monotonic(), time.thread_time()  # before any work on the event
        internal = protocols.internal_handler(event) if isinstance(event, dict) else None  # E9: any JSON may come
        request = Request.from_event(event) if internal is None else Request.internal(event)
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
                if internal is not None:
                    internal(self, event, call)
                else:
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
                if call.writer.gone:
                    record.client_disconnected = True
                if stream.started:
                    stream.close()  # the client has the whole answer before anything below runs
                self._after(call)
                self.telemetry.finish(record, request_id=context.aws_request_id, function_name=context.function_name)

    @staticmethod
    def _after(call: Call) -> None:
        """What the walk left to run once the response is closed (the quota's settle); each on its own."""
        for then in call.after:
            try:
                then()
            except Exception:
                logger.exception("work after the response failed")

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
        route, call.params = self.routes.resolve(path)
        if route is not None and route.api is not None:
            call.writer.error_body, call.writer.id_headers = route.api.error_body, route.api.id_headers
        if request.malformed is not None:  # an event no front sends (a direct Invoke's): the route's 400
            raise request.malformed
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

    # --- completions ---

    def complete(
        self,
        call: Call,
        api: ClientAPI,
        *,
        parse: Callable[[bytes, Config], Parsed] | None = None,
        body: Callable[[Delta, Config], bytes] | None = None,
        max_tokens_default: int | None = None,
        counting: bool = False,
    ) -> None:
        """Every completion route: the request made ready (:func:`sagestream.prepare.completion`), the caller's
        quota reserved, then the one pipeline answers it (:meth:`answer`). ``parse``, ``body`` and
        ``max_tokens_default``: a route's own reading and answer (``count_tokens``: ``counting``, which counts
        as a request against the quota, never as tokens)."""
        if not counting:
            call.record.kind = api.kind  # a count is not a completion in the metrics, though the endpoint is called
        c = prepare.completion(
            self.config,
            call,
            api,
            lambda: self.owner(call),
            parse=parse,
            body=body,
            max_tokens_default=max_tokens_default,
        )
        if self.quotas is not None:  # before anything is answered: a refusal is still a status
            from sagestream import metering

            metering.reserve(self.quotas, self.auth, call, c.cfg, api, c.parsed, c.payload, tokens=not counting)
        if c.parsed.instead is not None:
            # Answered otherwise (a background response queued for another invocation: None), or run here
            # differently (a background response its creator streams: the request to run).
            instead = c.parsed.instead(self, call, c.parsed)
            if instead is None:
                return
            c = msgspec.structs.replace(c, parsed=instead)
        self.answer(call, c)

    def answer(self, call: Call, c: Completion) -> Delta | None:
        """The one pipeline of every completion (a route's, a count's, a background run's): the upstream call
        from the model's first target with capacity (holds, fallbacks), its answer streamed delta by delta or
        written whole through the protocol's encoder, the record told; what is kept of it once the response is
        closed. A whole answer's delta is returned."""
        record = call.record
        # Noted once the call is certain: a request refused before made none, and its record names no ids.
        if call.ids is not None:
            record.inference_id, record.prefix_aware_id = call.ids.inference_id, call.ids.prefix_aware_id
        with self.telemetry.upstream(record):  # the trace subsegment ends with the stream
            if c.streamed:
                answer.stream(self.client, call, c, deadline=self.deadline(call), guard=self.guardrails)
                return None
            return answer.whole(self.client, call, c, deadline=self.deadline(call), guard=self.guardrails)

    # What the protocols' own routes ask of the app (sagestream.protocols.App), each documented where it is.

    def owner(self, call: Call) -> str:
        return prepare.owner(self.config, call, self.auth)

    def settle_quota(self, record: StreamRecord | None, job: dict[str, Any] | None) -> None:
        if self.quotas is not None:
            from sagestream import metering

            metering.settle_job(self.quotas, record or StreamRecord(), job)

    def deadline(self, call: Call) -> float:
        """When the answer must have ended (a :func:`time.monotonic` value): the margin before Lambda's own."""
        return call.deadline(self.config.deadline_margin_ms)


def _build() -> App:
    config = Config.from_env()
    app = App(config, upstream.make_client(config))
    # SnapStart: connections made before the snapshot lead nowhere once restored (sagestream.lambda_runtime runs it).
    register_after_restore(upstream.forget_connections, app.client)
    if app.guardrails is not None:  # Bedrock's client, made at init too
        register_after_restore(app.guardrails.forget_connections)
    if config.responses_store != "none" or config.quotas is not None:  # the tables' client, made at init too
        from sagestream import storage

        register_after_restore(storage.forget_connections)
    return app


handler = _build()
