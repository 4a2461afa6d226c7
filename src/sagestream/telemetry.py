"""What operators see of each invocation: one JSON log record, one set of EMF metrics, an optional trace.

Two pure builders make both from the invocation's :class:`~sagestream.record.StreamRecord`:
:func:`invocation_fields` (the log record's fields) and :func:`invocation_metrics` (the EMF records, as
Powertools serialises them). :class:`Telemetry` is the thin writer around them, made once per execution
environment (Powertools Logger and, when enabled, Tracer). The handler streams, so Powertools'
decorators, which flush when the handler *function* returns, do not fit the ``handler(event, stream,
context)`` signature: :meth:`Telemetry.finish` is called by the handler once the response stream has been
closed, also when the invocation failed, and never raises. Whether the invocation is the execution
environment's first is Powertools' own cold-start flag (which knows provisioned concurrency).

The log record (``"message": "invocation"``) has ``function_request_id`` (Lambda's; every answer carries
it as its ``x-request-id`` header), ``url_request_id``
(the Function URL's ``requestContext.requestId``; both are on every record written during the
invocation), ``method``, ``path``, ``status``, ``model``, ``endpoint``, ``dialect``, ``inference_id`` (the
``InferenceId`` every upstream call carried: the same request id, in SageMaker's records), ``prefix_aware_id``
(the ``PrefixAwareId``, with prefix-aware routing), ``stream``,
``output_tokens``, ``ttft_ms``, ``upstream_ttfb_ms``, ``duration_ms``, ``itl_median_ms``, ``itl_max_ms``,
``finish_reason``, ``error_type``, ``error_code``, ``client_disconnected``, ``deadline_stop``,
``cold_start``, ``keepalives`` (only when there were any: SSE comments written while the endpoint was
silent), ``breaker`` (only when a target's circuit breaker was not simply closed: ``open``, a call refused;
``half_open``, the request probed it; ``opened``, its failure opened it), ``noops`` (only when there were
any: each request field or header accepted as a documented no-op, by the client's name, with its count) and,
with ``AUTH_MODE=iam``, ``caller`` (the signing IAM principal; with ``AUTH_MODE=jwt`` the token's ``sub``, and
``caller_client_id`` and ``caller_username`` where the token has them; never the token).
Prompts and completions appear (``prompt``, ``completion``) only with ``LOG_PAYLOADS=true``. The function's
own cost, the part Lambda bills and a smaller ``MemorySize`` slows down: ``cpu_ms`` (CPU of the invocation's
thread from the event's arrival to the record; the process's, with one invocation at a time), ``ttft_cpu_ms``
(the same, to the first delta written), and
``relay_ms_p50`` / ``relay_ms_p99`` (per delta, from the upstream read that completed it to its write).

The metrics (namespace ``POWERTOOLS_METRICS_NAMESPACE``, default ``sagestream``), one EMF record per
invocation with dimensions ``service``, ``endpoint``, ``dialect`` and ``model`` (the model the request
was served by; the default model on routes without one; bounded by ``MODELS``' entries), all times in milliseconds from
the start of the invocation:

- ``TimeToFirstToken``: to the first delta written to the client (streams only);
- ``UpstreamTimeToFirstByte``: to the first PayloadPart from the endpoint (streams only);
- ``InterTokenLatencyMedian`` and ``InterTokenLatencyMax``: the median and the largest gap between
  consecutive deltas of the stream (two metrics, so that each keeps meaningful statistics);
- ``OutputTokens``, ``StreamDuration`` (to the end of the response) on the completion routes;
- ``ClientDisconnects`` and ``DeadlineStops``: 1 or 0, on every invocation;
- ``BreakerOpen`` (1: the request's failure opened a target's circuit breaker) and ``BreakerRefusals`` (1: a call
  was refused by an open one), where the log record has ``breaker``.
- ``GuardrailAssessments``, ``GuardrailTextUnits`` (what ApplyGuardrail bills), ``GuardrailInterventions`` (1 or
  0) and ``GuardrailErrors``, where the log record has ``guardrail`` (``GUARDRAIL_ID``: its assessments,
  text units, ``intervened`` (``prompt`` or ``output``), the assessments' ``reasons``, its ``errors`` and
  ``prompt_ms``, the prompt's assessment before the endpoint was called).

Beside it, in records of their own because EMF dimensions are per record: ``UpstreamErrors`` (1, with an
``ErrorType`` dimension, the error's code, e.g. ``model_stream_error``) when the endpoint or the path
to it failed, and Powertools' ``ColdStart`` (dimensions ``function_name``, ``service``) on the first
invocation of an execution environment.

Tracing (only with ``POWERTOOLS_TRACE_DISABLED=false``; needs ``aws-xray-sdk``, imported only then) puts
a ``## upstream`` subsegment around the upstream call, closed when the stream has ended. With no X-Ray
daemon the SDK's UDP sends go nowhere and nothing about delivery changes.

Environment variables read: ``POWERTOOLS_SERVICE_NAME`` (default ``sagestream``),
``POWERTOOLS_METRICS_NAMESPACE`` (default ``sagestream``), ``POWERTOOLS_LOG_LEVEL`` or ``LOG_LEVEL``
(default ``INFO``), ``POWERTOOLS_METRICS_DISABLED`` (read by Powertools);
``LOG_PAYLOADS`` and ``POWERTOOLS_TRACE_DISABLED`` through :mod:`sagestream.config`.

Example::

    >>> from sagestream.record import StreamRecord
    >>> record = StreamRecord(method="GET", path="/health", started=0.0)
    >>> fields = invocation_fields(record, Config(endpoint_name="my-llm"), ended=0.004, cold_start=False)
    >>> fields["status"], fields["duration_ms"], fields["ttft_ms"]
    (200, 4.0, None)
    >>> [m["Name"] for m in invocation_metrics(record, Labels("sagestream", "sagestream", {}), ended=0.004,
    ...     request_id="r-1", function_name="f", cold_start=False)[0]["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
    ['ClientDisconnects', 'DeadlineStops']
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import IO, Any

import msgspec
from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled
from aws_lambda_powertools.metrics.provider import cold_start

from sagestream.config import Config
from sagestream.errors import DEADLINE_EXCEEDED
from sagestream.lambda_runtime import trace_id
from sagestream.record import StreamRecord

__all__ = ["DEFAULT_SERVICE", "Labels", "Telemetry", "invocation_fields", "invocation_metrics", "prompt_of"]

DEFAULT_SERVICE = "sagestream"

_internal = logging.getLogger(__name__)


def _ms(start: float, end: float | None) -> float | None:
    return None if end is None else round((end - start) * 1000, 3)


def _round(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 3)


class Labels(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where the metrics go: their namespace, the ``service`` dimension and the dimensions of every record."""

    namespace: str
    service: str
    dimensions: Mapping[str, str] = msgspec.field(default_factory=dict)


# --- the builders: the record in, what to write out --------------------------------------------------------


def invocation_fields(
    record: StreamRecord, config: Config, *, ended: float, cold_start: bool, cpu_ended: float | None = None
) -> dict[str, Any]:
    """The fields of the invocation's log record (``"message": "invocation"``); ``cpu_ended`` is the
    invocation's thread CPU time (:func:`time.thread_time`) when it ended."""
    cadence, relay = record.cadence, record.relay
    fields: dict[str, Any] = {
        "method": record.method,
        "path": record.path,
        "status": record.status,
        # The request's model when one was chosen (several may be configured), else the default one.
        "model": record.model or config.model_id,
        "endpoint": record.endpoint or config.endpoint_name,
        "dialect": record.dialect or config.dialect,
        # What SageMaker recorded the call by (its InferenceId is this invocation's request id) and routed it by.
        "inference_id": record.inference_id,
        "prefix_aware_id": record.prefix_aware_id,
        "stream": record.streamed,
        "output_tokens": record.output_tokens,
        "ttft_ms": _ms(record.started, record.first_delta),
        "upstream_ttfb_ms": _ms(record.started, record.upstream_first_byte),
        "duration_ms": _ms(record.started, ended),
        "itl_median_ms": round(cadence.median_ms, 3) if cadence.median_ms is not None else None,
        "itl_max_ms": round(cadence.max_ms, 3) if cadence.max_ms is not None else None,
        "finish_reason": record.finish_reason,
        "error_type": record.error_type,
        "error_code": record.error_code,
        "client_disconnected": record.client_disconnected,
        "deadline_stop": record.deadline_stop,
        "cold_start": cold_start,
        # The function's own cost: what Lambda bills, and what a smaller MemorySize slows down.
        "cpu_ms": _ms(record.started_cpu, cpu_ended),
        "ttft_cpu_ms": _ms(record.started_cpu, record.first_delta_cpu),
        "relay_ms_p50": _round(relay.quantile(0.5)),
        "relay_ms_p99": _round(relay.quantile(0.99)),
    }
    if record.keepalives:
        fields["keepalives"] = record.keepalives
    if record.target is not None:
        fields["target"] = record.target  # the upstream that served (a fallback's, or the model's own)
        fields["fallback"] = record.fallback
    if record.cold_wait_ms is not None:
        fields["cold_wait_rounds"] = record.cold_wait_rounds
        fields["cold_wait_ms"] = round(record.cold_wait_ms, 3)
    if record.breaker is not None:
        fields["breaker"] = record.breaker  # refused ("open"), probed ("half_open"), or "opened" a breaker
    if record.stored is not None:
        fields["stored"] = record.stored
    if record.quota is not None:  # QUOTAS: who it counted against (never a key: its name or fingerprint), and how
        fields["quota_subject"], fields["quota"] = record.quota_subject, record.quota
        if record.quota_tokens is not None:
            fields["quota_tokens"] = record.quota_tokens
            fields["quota_settle_retries"] = record.quota_settle_retries
            fields["quota_settle_failed"] = record.quota_settle_failed
    if record.noops:
        fields["noops"] = dict(record.noops)  # what clients send that cannot change the answer, counted
    if record.guardrail is not None:  # GUARDRAIL_ID: assessments, text units billed, an intervention and why
        fields["guardrail"] = msgspec.structs.asdict(record.guardrail)
    # Who called, where the front or the function checked it: the signing principal, the token's subject, or the
    # id of the key API Gateway checked (never a key itself).
    checked = config.auth_mode in ("iam", "jwt") or (
        config.auth_mode == "api_key" and config.api_key_source == "gateway"
    )
    if checked and record.caller:
        fields["caller"] = record.caller
        fields.update(record.caller_details or {})
    if config.log_payloads:
        fields["prompt"] = record.prompt
        fields["completion"] = "".join(record.completion or ())
    return fields


def invocation_metrics(
    record: StreamRecord,
    labels: Labels,
    *,
    ended: float,
    request_id: str,
    function_name: str,
    cold_start: bool,
) -> list[dict[str, Any]]:
    """The invocation's EMF records: its own; ``UpstreamErrors`` when the endpoint or the path to it failed;
    ``ColdStart`` on an execution environment's first invocation. EMF dimensions are per record, hence three."""
    blobs: list[dict[str, Any]] = []
    if cold_start:
        cold = EphemeralMetrics(namespace=labels.namespace, service=labels.service)
        cold.add_dimension("function_name", function_name)
        cold.add_metric("ColdStart", MetricUnit.Count, 1)
        blobs.append(dict(cold.serialize_metric_set()))
    dimensions = _dimensions(record, labels)
    main = EphemeralMetrics(namespace=labels.namespace, service=labels.service)
    main.set_default_dimensions(**dimensions)
    ms = MetricUnit.Milliseconds
    if record.first_delta is not None and record.streamed:
        main.add_metric("TimeToFirstToken", ms, (record.first_delta - record.started) * 1000)
    if record.upstream_first_byte is not None:
        main.add_metric("UpstreamTimeToFirstByte", ms, (record.upstream_first_byte - record.started) * 1000)
    cadence = record.cadence
    if cadence.median_ms is not None and cadence.max_ms is not None:
        main.add_metric("InterTokenLatencyMedian", ms, cadence.median_ms)
        main.add_metric("InterTokenLatencyMax", ms, cadence.max_ms)
    if record.kind is not None:
        main.add_metric("OutputTokens", MetricUnit.Count, record.output_tokens)
        main.add_metric("StreamDuration", ms, (ended - record.started) * 1000)
    main.add_metric("ClientDisconnects", MetricUnit.Count, int(record.client_disconnected))
    main.add_metric("DeadlineStops", MetricUnit.Count, int(record.deadline_stop))
    if record.stored is not None:
        main.add_metric("StoreFailures", MetricUnit.Count, int(not record.stored))
    if record.cold_wait_ms is not None:
        # A request held while its model had no capacity, and for how long (served or refused after it).
        main.add_metric("ColdWaits", MetricUnit.Count, 1)
        main.add_metric("ColdWaitTime", ms, record.cold_wait_ms)
    if record.target is not None:  # a model with fallbacks, served: by one of them (1) or by its own (0)
        main.add_metric("Fallbacks", MetricUnit.Count, int(record.fallback))
    if record.breaker is not None:  # a circuit breaker: opened by this request's failure; a call refused by one
        main.add_metric("BreakerOpen", MetricUnit.Count, int(record.breaker == "opened"))
        main.add_metric("BreakerRefusals", MetricUnit.Count, int(record.breaker == "open"))
    if record.quota is not None:  # QUOTAS: refused over a limit, or DynamoDB not reached; charged, and settled
        main.add_metric("QuotaRefusals", MetricUnit.Count, int(record.quota == "refused"))
        main.add_metric("QuotaUnavailable", MetricUnit.Count, int(record.quota == "unavailable"))
        if record.quota_tokens is not None:
            main.add_metric("QuotaTokens", MetricUnit.Count, record.quota_tokens)
            main.add_metric("QuotaSettleRetries", MetricUnit.Count, record.quota_settle_retries)
            main.add_metric("QuotaSettleFailures", MetricUnit.Count, int(record.quota_settle_failed))
    guard = record.guardrail
    if guard is not None:  # GUARDRAIL_ID: what it cost (text units) and what it did
        main.add_metric("GuardrailAssessments", MetricUnit.Count, guard.assessments)
        main.add_metric("GuardrailTextUnits", MetricUnit.Count, guard.text_units)
        main.add_metric("GuardrailInterventions", MetricUnit.Count, int(guard.intervened is not None))
        main.add_metric("GuardrailErrors", MetricUnit.Count, guard.errors)
    main.add_metadata("function_request_id", request_id)
    blobs.append(dict(main.serialize_metric_set()))
    if record.upstream_started is not None and record.error_code and record.error_code != DEADLINE_EXCEEDED:
        errors = EphemeralMetrics(namespace=labels.namespace, service=labels.service)
        errors.set_default_dimensions(**dimensions, ErrorType=record.error_code)
        errors.add_metric("UpstreamErrors", MetricUnit.Count, 1)
        blobs.append(dict(errors.serialize_metric_set()))
    return blobs


def _dimensions(record: StreamRecord, labels: Labels) -> dict[str, str]:
    """The record's dimensions: the served model's endpoint, dialect and id over the defaults.

    Only a configured model reaches a record (any other is refused first), so the ``model`` dimension has
    as many values as ``MODELS`` has entries: the metric count stays bounded by the operator, never by
    what clients send. Routes without a model (``/health``, ``/v1/models``) count under the default model.
    """
    dimensions = dict(labels.dimensions)
    if record.model is not None:
        dimensions["model"] = record.model
    if record.endpoint is not None:
        dimensions["endpoint"] = record.endpoint
    if record.dialect is not None:
        dimensions["dialect"] = record.dialect
    return dimensions


def prompt_of(body: bytes) -> Any:
    """What the request asked: its ``messages``, ``prompt`` or (Responses API) ``input``; only ever logged with
    LOG_PAYLOADS=true.

    >>> prompt_of(b'{"prompt": "Hi"}'), prompt_of(b'{"input": "Hi"}'), prompt_of(b"not json")
    ('Hi', 'Hi', None)
    """
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    return data.get("messages", data.get("prompt", data.get("input")))


# --- the writer ------------------------------------------------------------------------------------------


class InvocationFormatter(LambdaPowertoolsFormatter):
    """Powertools' JSON formatter, with ``xray_trace_id`` from the invocation that logs the record.

    Powertools reads the trace id from ``_X_AMZN_TRACE_ID``, one value for the whole process; with several
    invocations at once (``AWS_LAMBDA_MAX_CONCURRENCY`` above 1) the runtime leaves that variable unset and
    keeps each invocation's header in a context variable (:func:`sagestream.lambda_runtime.trace_id`), read here.
    """

    def _get_latest_trace_id(self) -> str | None:
        if self.log_format.get("xray_trace_id", "") is None:  # Logger(xray_trace_id=None) turned the key off
            return None
        header = trace_id() or os.environ.get("_X_AMZN_TRACE_ID")
        return header.split(";")[0].replace("Root=", "") if header else None


class Telemetry:
    """The Powertools objects of one execution environment, and the writing of each invocation's record."""

    def __init__(self, config: Config, *, out: IO[str] | None = None) -> None:
        self.config = config
        service = os.environ.get("POWERTOOLS_SERVICE_NAME") or DEFAULT_SERVICE
        namespace = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or DEFAULT_SERVICE
        self.labels = Labels(
            namespace,
            service,
            {"endpoint": config.endpoint_name, "dialect": config.dialect, "model": config.model_id},
        )
        self._out = out
        # Serialises the EMF lines of concurrent invocations (a text stream is not safe across threads), and
        # the cold-start flag, which only the environment's first invocation may take.
        self._lock = threading.Lock()
        self.logger = Logger(service=service, stream=out, logger_formatter=InvocationFormatter())
        if service != DEFAULT_SERVICE:
            # sagestream's modules log to `sagestream.*`: give them the same JSON handler and level.
            logging.getLogger("sagestream")
            copy_config_to_registered_loggers(source_logger=self.logger, include={"sagestream"})
        self.tracer: Any = None
        if config.tracing:
            # Imported only when enabled: the deployed artifact needs aws-xray-sdk only then.
            from aws_lambda_powertools import Tracer

            self.tracer = Tracer(service=service, auto_patch=False)

    @contextlib.contextmanager
    def bind(self, request_id: str, url_request_id: str | None) -> Iterator[None]:
        """Every record logged inside carries the Lambda and Function URL request ids; gone on exit.

        Powertools' thread-safe keys (a context variable): with several invocations at once, each thread's
        records carry its own invocation's ids, and never another's.
        """
        self.logger.thread_safe_append_keys(function_request_id=request_id, url_request_id=url_request_id)
        try:
            yield
        finally:
            self.logger.thread_safe_remove_keys(["function_request_id", "url_request_id"])

    @contextlib.contextmanager
    def upstream(self, record: StreamRecord) -> Iterator[None]:
        """Around the upstream call and its stream: marks the record, and is the trace subsegment."""
        record.upstream_started = time.monotonic()
        if self.tracer is None:
            yield
            return
        with self.tracer.provider.in_subsegment("## upstream") as subsegment:
            # None when the SDK is disabled (POWERTOOLS_TRACE_DISABLED, outside Lambda) or has no segment.
            if subsegment is not None:
                subsegment.put_annotation("endpoint", record.endpoint or self.config.endpoint_name)
                subsegment.put_annotation("dialect", record.dialect or self.config.dialect)
                subsegment.put_annotation("model", record.model or self.config.model_id)
            try:
                yield
            finally:
                if subsegment is not None:
                    subsegment.put_annotation("output_tokens", record.output_tokens)
                    if record.error_code:
                        subsegment.put_annotation("error_code", record.error_code)

    def finish(self, record: StreamRecord, *, request_id: str, function_name: str) -> None:
        """Write the invocation's log record and its metrics. Call once, after the stream was closed."""
        ended, cpu_ended = time.monotonic(), time.thread_time()
        with self._lock:
            first, cold_start.is_cold_start = cold_start.is_cold_start, False
        try:
            fields = invocation_fields(record, self.config, ended=ended, cold_start=first, cpu_ended=cpu_ended)
            log = self.logger.warning if record.status >= 500 else self.logger.info
            log("invocation", extra=fields)
        except Exception:
            _internal.exception("writing the invocation's log record failed")
        if is_metrics_disabled():
            return
        try:
            for blob in invocation_metrics(
                record, self.labels, ended=ended, request_id=request_id, function_name=function_name, cold_start=first
            ):
                self._write(blob)
        except Exception:
            _internal.exception("writing the invocation's metrics failed")

    def _write(self, blob: Mapping[str, Any]) -> None:
        # One line each, flushed at once: Powertools' print() would sit in a block-buffered stdout.
        out = self._out or sys.stdout
        line = json.dumps(blob, separators=(",", ":")) + "\n"
        with self._lock:
            out.write(line)
            out.flush()
