"""The SageMaker side: one boto3 client, and each PayloadPart handed on the moment its frame has arrived.

botocore's ``EventStream`` iterates ``raw.stream()``, which reads 64 KiB at a time: on a close-delimited
response that holds every frame back until the block fills or the stream ends. Here the raw urllib3
response is read with ``read1``, which returns whatever the socket has (chunked or not), and botocore's
own ``EventStreamBuffer`` and parser turn those bytes into events, so that decoding stays botocore's.

Every failure becomes an :class:`~sagestream.errors.APIError` with the status a client should see.

Environment variables read: none directly (see :mod:`sagestream.config`); boto3 reads the usual AWS ones,
``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`` included.

Example::

    >>> client = make_client(Config(endpoint_name="my-llm"))            # doctest: +SKIP
    >>> with open_stream(client, config, b'{"inputs": "Hi", "stream": true}') as parts:  # doctest: +SKIP
    ...     for payload in parts:
    ...         print(payload)
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import boto3
import botocore.config
import botocore.eventstream
import botocore.exceptions
import urllib3.exceptions

from sagestream.config import Config
from sagestream.errors import APIError

logger = logging.getLogger(__name__)

_READ_SIZE = 64 * 1024
# After the last PayloadPart the end of the body (a chunked terminator) is already here or a moment away.
_END_READ_BYTES = 1024
_END_WAIT_S = 0.005
_GENERIC_500 = "The server could not call the model endpoint. The operator can find the reason in the function's log."


def make_client(config: Config) -> Any:
    """The one ``sagemaker-runtime`` client of this execution environment (made at init, reused)."""
    return boto3.client(
        "sagemaker-runtime",
        config=botocore.config.Config(
            connect_timeout=config.connect_timeout_s,
            read_timeout=config.read_timeout_s,
            # Retries can only happen before the stream starts: botocore retries the call, not the stream.
            # total_max_attempts counts the first call; botocore's max_attempts would count retries only.
            retries={"mode": "standard", "total_max_attempts": config.max_attempts},
            tcp_keepalive=True,
        ),
    )


def _call_args(config: Config, body: bytes) -> dict[str, Any]:
    args: dict[str, Any] = {
        "EndpointName": config.endpoint_name,
        "Body": body,
        "ContentType": "application/json",
        "Accept": "application/json",
    }
    if config.inference_component:
        args["InferenceComponentName"] = config.inference_component
    if config.target_variant:
        args["TargetVariant"] = config.target_variant
    return args


def error_from(exc: BaseException) -> APIError:
    """What a client sees for a failure on the way to, or from, the endpoint."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message", "") or exc)
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code == "ModelStreamError":
            return APIError.upstream(502, f"The model failed while streaming: {message}", code="model_stream_error")
        if code == "InternalStreamFailure":
            return APIError.upstream(502, "The endpoint's stream failed. Try again.", code="internal_stream_failure")
        if code == "ModelError":
            original = exc.response.get("OriginalMessage") or message
            return APIError.upstream(502, f"The model container returned an error: {original}", code="model_error")
        if code in ("ThrottlingException", "TooManyRequestsException") or status == 429:
            return APIError.upstream(
                429,
                "The model endpoint is busy. Retry after a moment.",
                code="rate_limited",
                headers={"Retry-After": "1"},
            )
        if code in ("ServiceUnavailable", "ModelNotReadyException") or status == 503:
            return APIError.upstream(503, "The model endpoint is not available right now.", code="service_unavailable")
        if code in ("AccessDeniedException", "UnrecognizedClientException", "ExpiredTokenException") or status == 403:
            logger.error("upstream access denied: %s: %s", code, message)
            return APIError.internal(_GENERIC_500)
        if code == "ValidationError":
            if "not found" in message.lower():
                # SageMaker's message names the account and the endpoint; the client learns neither.
                logger.error("upstream not found: %s", message)
                return APIError.not_found("The model endpoint was not found.", code="endpoint_not_found")
            return APIError.upstream(
                400, f"The endpoint rejected the request: {message}", code="upstream_validation_error"
            )
        if status >= 500 or code == "InternalFailure":
            return APIError.upstream(502, "The model endpoint failed. Try again.", code="upstream_error")
        logger.error("unexpected upstream error %s (%s): %s", code, status, message)
        return APIError.upstream(502, "The model endpoint answered with an error.", code="upstream_error")
    if isinstance(exc, (botocore.exceptions.ReadTimeoutError, urllib3.exceptions.ReadTimeoutError, TimeoutError)):
        return APIError.upstream(504, "The model endpoint did not answer in time.", code="upstream_timeout")
    if isinstance(exc, botocore.exceptions.ConnectTimeoutError):
        return APIError.upstream(504, "Could not connect to the model endpoint in time.", code="upstream_timeout")
    if isinstance(exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError):
        logger.error("no AWS credentials for the upstream call: %s", exc)
        return APIError.internal(_GENERIC_500)
    if isinstance(exc, botocore.eventstream.ParserError):
        return APIError.upstream(502, "The endpoint's stream was corrupt.", code="upstream_stream_corrupt")
    if isinstance(
        exc,
        (
            botocore.exceptions.EndpointConnectionError,
            botocore.exceptions.ConnectionClosedError,
            urllib3.exceptions.ProtocolError,
            urllib3.exceptions.HTTPError,
            botocore.exceptions.HTTPClientError,
            ConnectionError,
        ),
    ):
        return APIError.upstream(502, "The connection to the model endpoint broke.", code="upstream_connection_error")
    logger.exception("unexpected upstream failure", exc_info=exc)
    return APIError.internal()


def invoke(client: Any, config: Config, body: bytes) -> bytes:
    """A non-streaming ``InvokeEndpoint``: the whole answer's body."""
    try:
        response = client.invoke_endpoint(**_call_args(config, body))
        return bytes(response["Body"].read())
    except Exception as exc:
        raise error_from(exc) from exc


class PayloadParts:
    """The ``PayloadPart`` bytes of one ``InvokeEndpointWithResponseStream`` answer, as they arrive.

    Iterating yields each part's bytes once its frame is complete, before anything more is read.
    Mid-stream failures (``ModelStreamError``, ``InternalStreamFailure``, a reset, a corrupt frame, a read
    timeout) are raised as :class:`APIError`. ``close`` ends the HTTP connection, so the endpoint stops.
    """

    def __init__(self, event_stream: Any) -> None:
        self._event_stream = event_stream
        # botocore keeps the urllib3 response private; it is the one place to read without its 64 KiB reads.
        self._raw = event_stream._raw_stream
        self._closed = threading.Event()
        self.interrupted = False

    def __iter__(self) -> Iterator[bytes]:
        buffer = botocore.eventstream.EventStreamBuffer()
        try:
            while True:
                data = self._raw.read1(_READ_SIZE)
                if not data:
                    return
                buffer.add_data(data)
                for message in buffer:
                    event = self._event_stream._parse_event(message)  # raises EventStreamError for exceptions
                    part = event.get("PayloadPart") if event else None
                    if part is not None and part.get("Bytes"):
                        yield part["Bytes"]
        except Exception as exc:
            if self._closed.is_set():
                return  # we closed it ourselves (client gone, deadline): not an upstream failure
            raise error_from(exc) from exc

    def interrupt(self) -> None:
        """From another thread: stop a read that may be blocked (the Lambda deadline is near)."""
        self.interrupted = True
        self._closed.set()
        with contextlib.suppress(OSError, AttributeError):
            self._raw.shutdown()

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._read_to_end()
        try:
            self._event_stream.close()
        except Exception:
            logger.debug("closing the upstream stream failed", exc_info=True)

    def _read_to_end(self) -> None:
        """Read the end of a body that has ended, so urllib3 puts the connection back in its pool.

        A relay stops at the model's last event, a few bytes before the HTTP body ends; closing then
        drops the connection and the next invocation pays a new TCP and TLS handshake before its first
        token. Only what is already there (or within a few ms) is read: a live stream is closed as before.
        """
        sock = getattr(getattr(self._raw, "connection", None), "sock", None)
        if sock is None:
            return
        timeout = sock.gettimeout()
        try:
            sock.settimeout(_END_WAIT_S)
            left = _END_READ_BYTES
            while left > 0:
                data = self._raw.read1(left)
                if not data:
                    return  # the body ended: urllib3 has released the connection to its pool
                left -= len(data)
        except Exception:
            logger.debug("the upstream body did not end at once; closing its connection", exc_info=True)
        finally:
            with contextlib.suppress(OSError):
                sock.settimeout(timeout)

    def __enter__(self) -> PayloadParts:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_stream(client: Any, config: Config, body: bytes) -> PayloadParts:
    """Start ``InvokeEndpointWithResponseStream``; errors before the stream are raised as :class:`APIError`."""
    try:
        response = client.invoke_endpoint_with_response_stream(**_call_args(config, body))
    except Exception as exc:
        raise error_from(exc) from exc
    return PayloadParts(response["Body"])
