"""What operators see of each invocation: one JSON log record, one set of EMF metrics, an optional trace.

Made once per execution environment (Powertools Logger, Metrics and, when enabled, Tracer); each
invocation is told to it through the :class:`~sagestream.app.StreamRecord` it filled in. The handler
streams, so Powertools' decorators, which flush when the handler *function* returns, do not fit the
``handler(event, stream, context)`` signature: :meth:`Telemetry.finish` is called by the handler once the
response stream has been closed, also when the invocation failed, and never raises.

The log record (``"message": "invocation"``) has ``function_request_id`` (Lambda's), ``url_request_id``
(the Function URL's ``requestContext.requestId``; both are on every record written during the
invocation), ``method``, ``path``, ``status``, ``model``, ``endpoint``, ``dialect``, ``stream``,
``output_tokens``, ``ttft_ms``, ``upstream_ttfb_ms``, ``duration_ms``, ``itl_median_ms``, ``itl_max_ms``,
``finish_reason``, ``error_type``, ``error_code``, ``client_disconnected``, ``deadline_stop``,
``cold_start`` and, with ``AUTH_MODE=iam``, ``caller`` (the signing IAM principal). Prompts and completions
appear (``prompt``, ``completion``) only with ``LOG_PAYLOADS=true``.

The metrics (namespace ``POWERTOOLS_METRICS_NAMESPACE``, default ``sagestream``), one EMF record per
invocation with dimensions ``service``, ``endpoint`` and ``dialect``, all times in milliseconds from
the start of the invocation:

- ``TimeToFirstToken``: to the first delta written to the client (streams only);
- ``UpstreamTimeToFirstByte``: to the first PayloadPart from the endpoint (streams only);
- ``InterTokenLatencyMedian`` and ``InterTokenLatencyMax``: the median and the largest gap between
  consecutive deltas of the stream (two metrics, so that each keeps meaningful statistics);
- ``OutputTokens``, ``StreamDuration`` (to the end of the response) on the completion routes;
- ``ClientDisconnects`` and ``DeadlineStops``: 1 or 0, on every invocation.

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

    >>> telemetry = Telemetry(Config(endpoint_name="my-llm"))          # doctest: +SKIP
    >>> with telemetry.bind(event, context):                            # doctest: +SKIP
    ...     ...  # handle the request, filling in a StreamRecord, close the stream
    ...     telemetry.finish(record, event, context)
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from sagestream.config import Config

if TYPE_CHECKING:
    from sagestream.app import StreamRecord
    from sagestream.runtime import LambdaContext

DEFAULT_SERVICE = "sagestream"
COMPLETION_ROUTES = ("/v1/chat/completions", "/v1/completions")
# Codes of the function's own time limit: counted as DeadlineStops, not as the endpoint failing.
_DEADLINE_CODES = ("deadline", "deadline_exceeded")

_internal = logging.getLogger(__name__)


def _ms(start: float, end: float | None) -> float | None:
    return None if end is None else round((end - start) * 1000, 3)


class Cadence:
    """The gaps between consecutive delta writes, summarised in memory that does not grow with the stream.

    A stream may carry a million deltas (invariant 3): the maximum is exact, the median comes from
    log-spaced buckets 1 % wide, so it is within 1 % of the true one.

    >>> c = Cadence()
    >>> for t in (0.0, 0.010, 0.020, 0.050):
    ...     c.add(t)
    >>> round(c.max_ms, 3), abs(c.median_ms - 10) < 0.1
    (30.0, True)
    """

    _STEP = math.log(1.01)
    _FLOOR_MS = 0.001  # gaps below a microsecond share one bucket

    __slots__ = ("_buckets", "_last", "count", "max_ms")

    def __init__(self) -> None:
        self.count = 0
        self.max_ms: float | None = None
        self._last: float | None = None
        self._buckets: dict[int, int] = {}

    def add(self, now: float) -> None:
        last, self._last = self._last, now
        if last is None:
            return
        gap = (now - last) * 1000
        self.max_ms = gap if self.max_ms is None or gap > self.max_ms else self.max_ms
        key = -1 if gap <= self._FLOOR_MS else int(math.log(gap / self._FLOOR_MS) / self._STEP)
        self._buckets[key] = self._buckets.get(key, 0) + 1
        self.count += 1

    @property
    def median_ms(self) -> float | None:
        if not self.count or self.max_ms is None:
            return None
        seen, middle = 0, (self.count + 1) // 2
        for key in sorted(self._buckets):
            seen += self._buckets[key]
            if seen >= middle:
                value = 0.0 if key < 0 else self._FLOOR_MS * math.exp((key + 0.5) * self._STEP)
                return min(value, self.max_ms)
        return self.max_ms  # pragma: no cover - the counts always reach the middle


class Telemetry:
    """The Powertools objects of one execution environment and what each invocation reports to them."""

    def __init__(self, config: Config, *, out: IO[str] | None = None) -> None:
        self.config = config
        self.service = os.environ.get("POWERTOOLS_SERVICE_NAME") or DEFAULT_SERVICE
        self.namespace = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or DEFAULT_SERVICE
        self._out = out
        self.logger = Logger(service=self.service, stream=out)
        if self.service != "sagestream":
            # sagestream's modules log to `sagestream.*`: give them the same JSON handler and level.
            logging.getLogger("sagestream")
            copy_config_to_registered_loggers(source_logger=self.logger, include={"sagestream"})
        dimensions = {"endpoint": config.endpoint_name, "dialect": config.upstream_format}
        self.metrics = Metrics(namespace=self.namespace, service=self.service)
        self.metrics.set_default_dimensions(**dimensions)
        self._dimensions = dimensions
        self.tracer: Any = None
        if config.tracing:
            # Imported only when enabled: the deployed artifact needs aws-xray-sdk only then.
            from aws_lambda_powertools import Tracer

            self.tracer = Tracer(service=self.service, auto_patch=False)
        self._cold_start = True

    # --- during the invocation

    @contextlib.contextmanager
    def bind(self, event: Mapping[str, Any], context: LambdaContext) -> Iterator[None]:
        """Every record logged inside carries the Lambda and Function URL request ids; gone on exit."""
        url_request_id = (event.get("requestContext") or {}).get("requestId")
        with self.logger.append_context_keys(function_request_id=context.aws_request_id, url_request_id=url_request_id):
            yield

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
                subsegment.put_annotation("endpoint", self.config.endpoint_name)
                subsegment.put_annotation("dialect", self.config.upstream_format)
            try:
                yield
            finally:
                if subsegment is not None:
                    subsegment.put_annotation("output_tokens", record.output_tokens)
                    if record.error_code:
                        subsegment.put_annotation("error_code", record.error_code)

    # --- after the stream has ended

    def finish(
        self,
        record: StreamRecord,
        event: Mapping[str, Any],
        context: LambdaContext,
        *,
        method: str = "",
        path: str = "",
        body: bytes = b"",
    ) -> None:
        """Write the invocation's log record and its metrics. Call once, after the stream was closed."""
        ended = time.monotonic()
        cold_start, self._cold_start = self._cold_start, False
        try:
            self._log(record, event, ended, cold_start, method, path, body)
        except Exception:
            _internal.exception("writing the invocation's log record failed")
        try:
            self._emit(record, context, ended, cold_start)
        except Exception:
            _internal.exception("writing the invocation's metrics failed")
        finally:
            self.metrics.clear_metrics()  # nothing of this invocation is left for the next one

    def _log(
        self,
        record: StreamRecord,
        event: Mapping[str, Any],
        ended: float,
        cold_start: bool,
        method: str,
        path: str,
        body: bytes,
    ) -> None:
        cadence = record.cadence
        fields: dict[str, Any] = {
            "method": method,
            "path": path,
            "status": record.status,
            "model": self.config.model_id,
            "endpoint": self.config.endpoint_name,
            "dialect": self.config.upstream_format,
            "stream": record.stream,
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
        }
        if self.config.auth_mode == "iam":
            iam = ((event.get("requestContext") or {}).get("authorizer") or {}).get("iam") or {}
            if iam.get("userArn"):
                fields["caller"] = iam["userArn"]
        if self.config.log_payloads:
            fields["prompt"] = _prompt_of(body)
            fields["completion"] = "".join(record.completion or ())
        if record.status >= 500:
            self.logger.warning("invocation", extra=fields)
        else:
            self.logger.info("invocation", extra=fields)

    def _emit(self, record: StreamRecord, context: LambdaContext, ended: float, cold_start: bool) -> None:
        if is_metrics_disabled():
            return
        if cold_start:
            cold = EphemeralMetrics(namespace=self.namespace, service=self.service)
            cold.add_dimension("function_name", context.function_name)
            cold.add_metric("ColdStart", MetricUnit.Count, 1)
            self._write(cold.serialize_metric_set())
        m = self.metrics
        ms = MetricUnit.Milliseconds
        if record.first_delta is not None and record.stream:
            m.add_metric("TimeToFirstToken", ms, (record.first_delta - record.started) * 1000)
        if record.upstream_first_byte is not None:
            m.add_metric("UpstreamTimeToFirstByte", ms, (record.upstream_first_byte - record.started) * 1000)
        cadence = record.cadence
        if cadence.median_ms is not None and cadence.max_ms is not None:
            m.add_metric("InterTokenLatencyMedian", ms, cadence.median_ms)
            m.add_metric("InterTokenLatencyMax", ms, cadence.max_ms)
        if record.route in COMPLETION_ROUTES:
            m.add_metric("OutputTokens", MetricUnit.Count, record.output_tokens)
            m.add_metric("StreamDuration", ms, (ended - record.started) * 1000)
        m.add_metric("ClientDisconnects", MetricUnit.Count, int(record.client_disconnected))
        m.add_metric("DeadlineStops", MetricUnit.Count, int(record.deadline_stop))
        m.add_metadata("function_request_id", context.aws_request_id)
        self._write(m.serialize_metric_set())
        if record.upstream_started is not None and record.error_code and record.error_code not in _DEADLINE_CODES:
            errors = EphemeralMetrics(namespace=self.namespace, service=self.service)
            errors.set_default_dimensions(**self._dimensions, ErrorType=record.error_code)
            errors.add_metric("UpstreamErrors", MetricUnit.Count, 1)
            self._write(errors.serialize_metric_set())

    def _write(self, blob: Mapping[str, Any]) -> None:
        # One line each, flushed at once: Powertools' print() would sit in a block-buffered stdout.
        out = self._out or sys.stdout
        out.write(json.dumps(blob, separators=(",", ":")) + "\n")
        out.flush()


def _prompt_of(body: bytes) -> Any:
    """What the request asked: its ``messages`` or ``prompt`` (only ever logged with LOG_PAYLOADS=true)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    return data.get("messages", data.get("prompt"))
