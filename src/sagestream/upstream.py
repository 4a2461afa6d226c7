"""The SageMaker side: one botocore client, and each PayloadPart handed on the moment its frame has arrived.

botocore's ``EventStream`` iterates ``raw.stream()``, which reads 64 KiB at a time: on a close-delimited
response that holds every frame back until the block fills or the stream ends. Here the body is read with
``read1``, which returns whatever the socket has (chunked or not): that of the ``http.client`` response
under urllib3's, which adds nothing to this body but a quarter of a delta's cost (:meth:`PayloadParts._read1`).
The function's own :class:`~sagestream.eventstream.FrameReader` turns those bytes into PayloadPart payloads
(botocore's frame parser was 78 k of the 250 k instructions of a delta); any other frame still goes through
botocore's event parser, so an exception frame raises botocore's ``EventStreamError`` as before.

The function's own time limit is an upstream fault like the others, for a stream and a whole answer alike:
every socket read of a call waits at most until the deadline, and :class:`DeadlineReached` is raised when it
comes. The wait for the answer's head is bounded through botocore's per-request ``read_timeout`` (a
``before-send`` hook that reads the call's deadline from a context variable); each read of the body by
:class:`_DeadlineReads` setting the socket's timeout to the time left. No other thread is involved.

Every fault raised here leaves as an :class:`~sagestream.errors.APIError` made by
:func:`sagestream.faults.error_from`, the one table of what a client sees for each.

Environment variables read: ``AWS_LAMBDA_MAX_CONCURRENCY`` (the connection pool's size), the rest through
:mod:`sagestream.config`; botocore reads the usual AWS ones, ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`` included.

Example::

    >>> client = make_client(Config(endpoint_name="my-llm"))            # doctest: +SKIP
    >>> with open_stream(client, config, body, deadline=time.monotonic() + 60) as parts:  # doctest: +SKIP
    ...     for payload in parts:
    ...         print(payload)
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import logging
import os
import select
import ssl
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from types import TracebackType
from typing import Any

import botocore.config
import botocore.exceptions
import botocore.retries.standard
import botocore.session

from sagestream import __version__
from sagestream.breaker import calling
from sagestream.config import Config
from sagestream.eventstream import FrameReader, MalformedFrame
from sagestream.faults import DeadlineReached, error_from
from sagestream.sagemaker_ids import UpstreamIds

__all__ = [
    "SILENCE",
    "PayloadParts",
    "forget_connections",
    "invoke",
    "make_client",
    "open_stream",
]

logger = logging.getLogger(__name__)

_READ_SIZE = 64 * 1024
# After the last PayloadPart the end of the body (a chunked terminator) is already here or a moment away.
_END_READ_BYTES = 1024
_END_WAIT_S = 0.005
# A retry needs at least this much time before the deadline to be worth asking for.
_RETRY_FLOOR_S = 0.1
# What PayloadParts yields when the endpoint has said nothing for the keep-alive interval: no PayloadPart is
# empty (empty ones are skipped), so an empty part can only mean this.
SILENCE = b""


# --- the calls ---------------------------------------------------------------------------------------------


def make_client(config: Config) -> Any:
    """The one ``sagemaker-runtime`` client of this execution environment (made at init, reused).

    It is botocore's own client, made by its session as ``boto3.client`` would make it (same credentials,
    region, endpoint and ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``), without importing boto3's resource and
    transfer layers that a cold start would pay for and this function never uses.
    """
    session = botocore.session.get_session()
    client = session.create_client(
        "sagemaker-runtime",
        config=botocore.config.Config(
            connect_timeout=config.connect_timeout_s,
            read_timeout=config.read_timeout_s,
            # Retries can only happen before the stream starts: botocore retries the call, not the stream.
            # Standard mode retries throttling and 500/502/503/504 only, so a container's own refusal
            # (ModelError, 424) reaches the client once, whatever UPSTREAM_MAX_ATTEMPTS says; _retry_rules
            # narrows that further (no InternalFailure again; each retry counted by the target's breaker).
            # total_max_attempts counts the first call; botocore's max_attempts would count retries only.
            retries={"mode": "standard", "total_max_attempts": config.max_attempts},
            tcp_keepalive=True,
            # The User-Agent, made once. By default botocore assembles it from some twenty sanitised parts
            # twice per call, about a third of a warm call's CPU before the first token; the session's
            # form says the same (SDK, Python, platform, AWS_EXECUTION_ENV), without the per-call feature ids.
            user_agent=f"{session.user_agent()} sagestream/{__version__}",
            # The arguments come from _call_args and a validated Config: checking them on each call finds nothing.
            parameter_validation=False,
            # One kept connection per concurrent invocation (Lambda Managed Instances run several): beyond the
            # pool, urllib3 opens a connection per call and drops it after, a new TLS handshake per stream.
            max_pool_connections=max(10, int(os.environ.get("AWS_LAMBDA_MAX_CONCURRENCY") or 1)),
        ),
    )
    # The deadline bounds the wait for the answer's head too, and stops retries that would outlive it.
    client.meta.events.register(
        "before-send.sagemaker-runtime", functools.partial(_bound_by_deadline, read_timeout_s=config.read_timeout_s)
    )
    client.meta.events.register_first(
        "needs-retry.sagemaker-runtime",
        functools.partial(
            _retry_rules, retryable=botocore.retries.standard.StandardRetryConditions(max_attempts=config.max_attempts)
        ),
    )
    return client


def forget_connections(client: Any) -> None:
    """Close the client's pooled connections, so that its next call opens a fresh one.

    A SnapStart after-restore hook (registered by :mod:`sagestream.app`): a connection kept from before the
    snapshot leads nowhere in a restored environment, and botocore would find that out by failing a call and
    retrying it. Credentials need nothing: botocore refreshes expiring ones (SnapStart's come from the
    container credentials endpoint, and expire) before it signs.
    """
    client._endpoint.http_session.close()  # botocore's URLLib3Session: clears its urllib3 pools


# The deadline (a time.monotonic() value) of the call this thread or task is making, for the client's hooks.
_call_deadline: ContextVar[float | None] = ContextVar("sagestream_upstream_deadline", default=None)


def _bound_by_deadline(request: Any, *, read_timeout_s: float, **_: Any) -> None:
    """``before-send``: this attempt waits for the answer's head at most until the call's deadline.

    botocore's per-request ``read_timeout`` (the request context's) replaces the client's for this attempt.
    """
    deadline = _call_deadline.get()
    if deadline is None:
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineReached()  # not retryable: botocore raises it from the call
    context = getattr(request, "context", None)
    if context is not None:
        context["read_timeout"] = min(read_timeout_s, left)


# SageMaker's errors that a retry would meet again: its InternalFailure (500) is the endpoint failing the request
# itself, not a transient fault on the way (botocore's standard mode retries every 500 alike).
_SAME_AGAIN = frozenset({"InternalFailure"})
_retry_context = botocore.retries.standard.RetryEventAdapter().create_retry_context


def _retry_rules(
    response: Any = None, caught_exception: Any = None, *, retryable: Any, **kwargs: Any
) -> float | bool | None:
    """``needs-retry``, before botocore's own handler (which decides, as before, whenever this returns None).

    - A failed attempt at the deadline is the deadline's 504, not a retry sent to the endpoint with no time to
      answer.
    - A fault a retry would meet again (:data:`_SAME_AGAIN`) is not retried: ``False`` stops botocore's handler.
    - An attempt answered (its head, before a whole answer's body is read) is the breaker's verdict: a probe
      closes it then, not after a long generation, for which every other request would wait.
    - Every failed attempt botocore would retry counts against the target's circuit breaker
      (:mod:`sagestream.breaker`, through the call's ticket): the function's own retries spend the same budget
      as the clients' requests, and none goes once the breaker is open, nor after a probe.
    """
    failed = caught_exception is not None or (response is not None and response[0].status_code >= 300)
    if not failed:
        ticket = calling.get()
        if ticket is not None:
            ticket.answered()  # the answer's head: a whole answer is judged there too, as a stream is
        return None
    deadline = _call_deadline.get()
    if deadline is not None and deadline - time.monotonic() <= _RETRY_FLOOR_S:
        raise DeadlineReached()
    parsed = response[1] if response is not None else None
    code = parsed.get("Error", {}).get("Code") if isinstance(parsed, dict) else None
    if code in _SAME_AGAIN:
        return False
    ticket = calling.get()
    if ticket is None:
        return None
    context = _retry_context(response=response, caught_exception=caught_exception, **kwargs)
    if not retryable.is_retryable(context):
        return None  # this attempt is the call's last: its outcome is told to the breaker by the caller
    fault = caught_exception or botocore.exceptions.ClientError(parsed, kwargs["operation"].name)
    return None if ticket.may_retry(error_from(fault)) else False


def _call_args(config: Config, body: bytes, ids: UpstreamIds | None) -> dict[str, Any]:
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
    if ids is not None:
        # botocore's parameter names, so its own serializer makes the headers. With parameter_validation off
        # nothing checks them before it: a name its model lacks fails every call (a KeyError there, a 500
        # here), which tests/unit/test_sagemaker_ids.py catches against the pinned botocore first.
        args.update(ids.call_args())
    return args


def invoke(
    client: Any, config: Config, body: bytes, *, deadline: float | None = None, ids: UpstreamIds | None = None
) -> bytes:
    """A non-streaming ``InvokeEndpoint``: the whole answer's body.

    ``ids``: the ``InferenceId`` and ``PrefixAwareId`` the call carries (:mod:`sagestream.sagemaker_ids`).

    ``deadline`` (a :func:`time.monotonic` value): already past, the endpoint is not called and the
    deadline's 504 is raised, as for a stream.
    """
    _check_deadline(deadline)
    token = _call_deadline.set(deadline)
    try:
        response = client.invoke_endpoint(**_call_args(config, body, ids))
        return _DeadlineReads(response["Body"], deadline=deadline, read_timeout_s=config.read_timeout_s).read_all()
    except Exception as exc:
        cut = deadline is not None and time.monotonic() >= deadline  # a read cut by the deadline's own timeout
        raise error_from(DeadlineReached() if cut else exc) from exc
    finally:
        _call_deadline.reset(token)


class _DeadlineReads:
    """The socket reads of one answer's body, each waiting at most until the deadline (and the read timeout).

    ``body`` is botocore's ``StreamingBody`` or ``EventStream``: both keep the urllib3 response private, the one
    place to read with ``read1`` (whatever the socket has) rather than a read that waits for a whole block.
    """

    def __init__(self, body: Any, *, deadline: float | None = None, read_timeout_s: float = 60.0) -> None:
        self._body = body
        self._raw = body._raw_stream
        self._deadline = deadline
        self._read_timeout_s = read_timeout_s
        self._timeout_set: float | None = None  # what the socket's timeout was last set to, here
        self.read_at: float | None = None  # time.monotonic() when the last socket read returned

    def read_all(self) -> bytes:
        """The whole body (a non-streaming answer); :class:`DeadlineReached` if it has not ended by then."""
        data = bytearray()
        try:
            while True:
                self._bound_next_read()
                piece = self._raw.read1(_READ_SIZE)
                if not piece:
                    return bytes(data)
                data += piece
        except BaseException:
            with contextlib.suppress(Exception):
                self._body.close()  # half read: the connection cannot go back to the pool
            raise

    def _bound_next_read(self, heard: float | None = None) -> None:
        """Raise :class:`DeadlineReached` if it has come; else let the next read wait only until it, and (with
        ``heard``, when the endpoint last sent something) only until the read timeout after that."""
        if self._deadline is None and heard is None:
            return
        now = time.monotonic()
        left = self._deadline - now if self._deadline is not None else self._read_timeout_s
        if left <= 0:
            raise DeadlineReached()
        timeout = min(self._read_timeout_s, left)
        if heard is not None:
            # Keep-alives waited part of the read timeout already; what is left of it (never 0: non-blocking).
            timeout = min(timeout, max(0.001, heard + self._read_timeout_s - now))
        if timeout == self._timeout_set:
            return  # the read timeout, until the deadline is nearer than that: set once, not per read
        sock = self._socket()
        if sock is not None:
            sock.settimeout(timeout)
            self._timeout_set = timeout

    def _socket(self) -> Any:
        return getattr(getattr(self._raw, "connection", None), "sock", None)


class PayloadParts(_DeadlineReads):
    """The ``PayloadPart`` bytes of one ``InvokeEndpointWithResponseStream`` answer, as they arrive.

    Iterating yields each part's bytes once its frame is complete, before anything more is read. With
    ``keepalive_s``, it also yields :data:`SILENCE` each time the endpoint has sent nothing for that long, so
    that the caller can keep a front that cuts silent streams from cutting this one (docs/configuration.md,
    "Keep-alives"). Mid-stream failures (``ModelStreamError``, ``InternalStreamFailure``, a reset, a corrupt
    frame, a read timeout) are raised as :class:`APIError`; the deadline (a :func:`time.monotonic` value) as
    :class:`DeadlineReached`: each read waits at most until then. ``close`` ends the HTTP connection, so the
    endpoint stops.
    """

    def __init__(
        self,
        event_stream: Any,
        *,
        deadline: float | None = None,
        read_timeout_s: float = 60.0,
        keepalive_s: float = 0.0,
    ) -> None:
        super().__init__(event_stream, deadline=deadline, read_timeout_s=read_timeout_s)
        self._event_stream = event_stream
        self._closed = False
        self._keepalive_s = keepalive_s
        # What _silent watches, found on its first call: http.client's response under urllib3's, its buffered
        # reader and a poll of the socket (the same for the whole stream).
        self._watched: tuple[Any, Any, Any, select.poll] | None = None

    def __iter__(self) -> Iterator[bytes]:
        frames = FrameReader(self._event_stream._parse_event)  # botocore's parser for all but PayloadParts
        feed = frames.feed
        read1 = self._read1()
        heard = time.monotonic()  # when the endpoint last sent something: keep-alives count toward the read timeout
        try:
            while True:
                if self._keepalive_s:
                    if heard + self._read_timeout_s - time.monotonic() > self._keepalive_s and self._silent(
                        self._keepalive_s
                    ):
                        yield SILENCE
                        continue
                    self._bound_next_read(heard)
                else:
                    self._bound_next_read()
                try:
                    data = read1(_READ_SIZE)
                    if not data and read1 is not self._raw.read1:
                        # The end, once more through urllib3: it puts the connection back in its pool.
                        data = self._raw.read1(_READ_SIZE)
                finally:
                    self.read_at = heard = time.monotonic()
                if not data:
                    self._check_whole(frames)
                    return
                yield from feed(data)
                if frames.failure is not None:
                    raise frames.failure  # a bad frame after good ones in the same read: after their payloads
        except DeadlineReached:
            raise
        except Exception as exc:
            if self._deadline is not None and time.monotonic() >= self._deadline:
                raise DeadlineReached() from exc  # the read was cut by the deadline's own timeout
            raise error_from(exc) from exc

    def _check_whole(self, frames: FrameReader) -> None:
        """At the body's end: a body cut inside a frame, or short of its ``Content-Length``, is no clean end.

        Neither is an error to the readers below: http.client ends a short ``Content-Length`` body quietly and
        botocore turns urllib3's check of it off, and botocore's own frame buffer drops an unfinished frame. A
        relay that took such an end for the model's would close the answer as complete (``finish_reason:
        stop``, ``[DONE]``) with its tail missing; it is the protocol's error event instead.
        """
        if frames.pending:
            raise MalformedFrame(f"the stream ended inside a frame ({frames.pending} bytes of it came)")
        left = getattr(getattr(self._raw, "_fp", None), "length", None)  # http.client's count of a length's rest
        if isinstance(left, int) and left > 0:
            raise http.client.IncompleteRead(b"", left)

    def _read1(self) -> Callable[[int], bytes]:
        """The read that returns what the socket has: http.client's under urllib3's where urllib3 adds nothing.

        urllib3's ``read1`` costs about 24 k instructions a read over the ``http.client`` response it wraps
        (its error catcher, a decoded-content queue, length bookkeeping: measured with callgrind, half of a
        read's cost). For a body without a content coding (SageMaker's event stream has none) it adds nothing
        but the translation of errors, which :mod:`sagestream.faults` maps from ``http.client``'s and the
        socket's own as well (botocore turns urllib3's check of a short ``Content-Length`` body off). The end
        of the body is read through urllib3 (:meth:`__iter__`), which then gives the connection back to its
        pool.
        """
        raw = self._raw
        response = getattr(raw, "_fp", None)
        headers = getattr(raw, "headers", None) or {}
        if isinstance(response, http.client.HTTPResponse) and not headers.get("content-encoding"):
            return response.read1
        read1: Callable[[int], bytes] = raw.read1
        return read1

    def _silent(self, wait_s: float) -> bool:
        """Whether the endpoint sends nothing for ``wait_s``; nothing is read, and a wait never outlasts the deadline.

        The socket's timeout cannot be the timer: a read that times out leaves Python's socket file unreadable
        for good (``SocketIO`` refuses every read after a timeout). So the bytes already buffered above the
        socket (http.client's reader, TLS) are peeked without blocking, and only when there are none does the
        wait happen, in ``poll`` on the socket itself: a token that arrives ends it at once. The two bytes that
        end a chunk of a chunked body (http.client reads them with the next chunk's size) are framing, not news.
        """
        if self._deadline is not None and self._deadline - time.monotonic() < wait_s:
            return False  # the read's own deadline comes first; a keep-alive now would change nothing
        watched = self._watched or self._watch()
        if watched is None:
            return False  # no socket to watch (the body is already read): read as without keep-alives
        response, reader, sock, readable = watched
        framing = 2 if response.chunked and response.chunk_left == 0 else 0
        timeout = sock.gettimeout()
        sock.settimeout(0.0)
        try:
            if len(reader.peek(1)) > framing:
                return False
        except (BlockingIOError, ssl.SSLWantReadError):
            pass  # nothing buffered and nothing on the socket yet
        finally:
            sock.settimeout(timeout)
        return not readable.poll(wait_s * 1000)

    def _watch(self) -> tuple[Any, Any, Any, select.poll] | None:
        response = getattr(self._raw, "_fp", None)  # http.client's response under urllib3's
        sock, reader = self._socket(), getattr(response, "fp", None)
        if sock is None or reader is None or not hasattr(reader, "peek"):
            return None
        readable = select.poll()
        readable.register(sock, select.POLLIN)
        self._watched = (response, reader, sock, readable)
        return self._watched

    def close(self) -> None:
        if not self._closed:
            self._closed = True
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
        sock = self._socket()
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


def _check_deadline(deadline: float | None) -> None:
    """Before a call: with too little time left, the client gets the deadline's 504, not a 500."""
    if deadline is not None and deadline <= time.monotonic():
        raise error_from(DeadlineReached("The function has too little time left to call the model."))


def open_stream(
    client: Any,
    config: Config,
    body: bytes,
    *,
    deadline: float | None = None,
    ids: UpstreamIds | None = None,
    keepalive_s: float = 0.0,
) -> PayloadParts:
    """Start ``InvokeEndpointWithResponseStream``; errors before the stream are raised as :class:`APIError`.

    ``ids``: the ``InferenceId`` and ``PrefixAwareId`` the call carries (:mod:`sagestream.sagemaker_ids`).

    ``deadline`` (a :func:`time.monotonic` value) is when the answer must have ended; already past, the
    endpoint is not called and the deadline's 504 is raised. ``keepalive_s``: see :class:`PayloadParts`.
    """
    _check_deadline(deadline)
    token = _call_deadline.set(deadline)
    try:
        response = client.invoke_endpoint_with_response_stream(**_call_args(config, body, ids))
    except Exception as exc:
        cut = deadline is not None and time.monotonic() >= deadline  # the wait for the head was cut by the deadline
        raise error_from(DeadlineReached() if cut else exc) from exc
    finally:
        _call_deadline.reset(token)
    return PayloadParts(
        response["Body"], deadline=deadline, read_timeout_s=config.read_timeout_s, keepalive_s=keepalive_s
    )
