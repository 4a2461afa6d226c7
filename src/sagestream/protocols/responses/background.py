"""Background responses (``background: true``, with a store), following a running response
(``GET /v1/responses/{id}?stream=true&starting_after=N``) and cancelling one (``POST /v1/responses/{id}/cancel``),
over the runs of :mod:`sagestream.protocols.responses.runs`.

``POST /v1/responses`` with ``background: true`` writes the run's state (``queued``) and its job, starts an
asynchronous invocation of this same function (Lambda's ``Invoke`` with ``InvocationType=Event``, on
``AWS_LAMBDA_FUNCTION_NAME``) with an internal event naming the response, and answers the ``queued`` response at
once; with ``stream: true`` too, it follows the run's events from the table until the end instead (that client's
invocation then runs as long as the run does). The run (:func:`run`) claims the job once, streams the upstream
as a foreground stream would, into an :class:`~sagestream.protocols.responses.runs.EventLog` instead of a
client, asks every :data:`CANCEL_CHECK_S` whether it was cancelled (closing the upstream stream when it was),
and stores the response as a foreground answer is stored.

A foreground stream with a store is a run too (``RESPONSES_RESUMABLE_STREAMS``, on by default): its events are
batched to the table by a thread while it is written to its client (:class:`ResumableEncoder`), so another
connection can replay and follow it while it runs. It cannot be cancelled (OpenAI cancels background responses
only), and it ends when its client leaves: the upstream stream is closed then, as it always is.

The internal event is only the function's own: an event with a ``requestContext`` (a Function URL's or API
Gateway's) is never one, so no HTTP caller can start a run; a run answers only a job that is still queued.

Environment variables read: ``AWS_LAMBDA_FUNCTION_NAME`` and ``AWS_LAMBDA_FUNCTION_VERSION`` (the function invokes
itself: its alias ``live`` when a published version runs, as the template publishes them); botocore reads
``AWS_ENDPOINT_URL_LAMBDA`` (the local stand-in of Lambda's Invoke under ``make run``).

Example::

    >>> is_internal({"sagestream": INTERNAL_EVENT, "response_id": "resp_1"})
    True
    >>> is_internal({"sagestream": INTERNAL_EVENT, "requestContext": {}})
    False
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from sagestream.delta import Delta
from sagestream.errors import APIError
from sagestream.http import JSON_HEADERS, SSE_HEADERS, Writer
from sagestream.protocols._api import Completion, Parsed
from sagestream.protocols._wire import dumps, new_id
from sagestream.protocols.responses import stored
from sagestream.protocols.responses.encoder import ResponsesEncoder, queued_response
from sagestream.protocols.responses.runs import EventLog, Runs
from sagestream.protocols.responses.runs import follow as follow_events
from sagestream.protocols.responses.store import StoreError, owner_of
from sagestream.protocols.responses.stored import runs_for
from sagestream.relay import KEEPALIVE_EVENT

if TYPE_CHECKING:
    from sagestream.config import Config
    from sagestream.protocols.responses.models import ResponseCreateRequest

__all__ = [
    "CANCEL_CHECK_S",
    "INTERNAL_EVENT",
    "PUBLISHED_ALIAS",
    "ResumableEncoder",
    "cancel",
    "is_internal",
    "replay",
    "run",
    "runs_for",
    "start",
]

logger = logging.getLogger(__name__)

INTERNAL_EVENT = "responses.background"
# The alias the template publishes versions under (AutoPublishAlias), invoked when a published version runs.
PUBLISHED_ALIAS = "live"
# How often a background run asks whether it was cancelled (a strongly consistent read of its state).
CANCEL_CHECK_S = 0.5

_LAMBDA: list[Any] = []  # the botocore Lambda client, made at init with the store (at_init)
_LAMBDA_LOCK = threading.Lock()


def at_init(cfg: Config) -> None:
    """What a deployment with a store makes at init, never on a request: the store and its runs (their DynamoDB
    client) and the Lambda client a background request starts its run with. Making a client parses its service
    model, which on a request's path would hold a running stream's deltas back."""
    runs_for(cfg)
    _lambda()


def is_internal(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is a background run's (sent by this function to itself), not an HTTP request's."""
    return event.get("sagestream") == INTERNAL_EVENT and "requestContext" not in event and "httpMethod" not in event


def _lambda() -> Any:
    with _LAMBDA_LOCK:
        if not _LAMBDA:
            import botocore.config
            import botocore.session

            config = botocore.config.Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 3})
            _LAMBDA.append(botocore.session.get_session().create_client("lambda", config=config))
        return _LAMBDA[0]


def _invoke_self(response_id: str) -> None:
    """Start the run: an asynchronous invocation of this function (Lambda queues the event and answers 202)."""
    payload = json.dumps({"sagestream": INTERNAL_EVENT, "response_id": response_id}).encode()
    args = {"FunctionName": os.environ["AWS_LAMBDA_FUNCTION_NAME"], "InvocationType": "Event", "Payload": payload}
    if os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST") != "$LATEST":
        # A published version runs (SnapStart, Managed Instances): the template's alias, which its role may invoke.
        args["Qualifier"] = PUBLISHED_ALIAS
    _lambda().invoke(**args)


# --- POST /v1/responses with background: true -----------------------------------------------------------


def start(
    cfg: Config,
    owner: str,
    request: ResponseCreateRequest,
    raw: bytes,
    depth: int,
    app: Any,
    call: Any,
    parsed: Parsed,
    *,
    headers: Mapping[str, str],
) -> Parsed | None:
    """A background request. Without ``stream``: queue the run, start it in another invocation, answer the
    ``queued`` response (None: answered). With ``stream``: the run is this invocation's, through the app's one
    pipeline (the returned request), its events written to its creator as they come and kept for followers; a
    creator that leaves does not stop it (:attr:`sagestream.http.Writer.outlives_client`)."""
    runs = runs_for(cfg)
    response_id, created_at = new_id("resp_"), int(time.time())
    queued = json.loads(queued_response(request, model=cfg.model_id, id=response_id, created_at=created_at))
    digest = owner_of(owner)
    if request.stream:
        request._response_id, request._created_at = response_id, created_at
        try:
            runs.begin(response_id, digest, queued, background=True)
        except StoreError as exc:
            raise stored.unavailable(exc) from exc
        call.writer.outlives_client = True
        return msgspec.structs.replace(parsed, instead=None)
    # The run streams, whether or not this request does: the app made its upstream body so (a dialect's
    # refusal is this request's 400).
    payload: bytes = call.payload
    call.record.inference_id = call.ids.inference_id if call.ids is not None else None
    job = {
        "raw": raw.decode(),
        "payload": payload.decode(),
        "model": cfg.model_id,
        "depth": depth,
        "previous_response_id": request._previous_response_id,
        "created_at": created_at,
        "prefix_aware_id": call.ids.prefix_aware_id if call.ids is not None else None,
        # The caller's quota reservation (sagestream.metering): the run settles it, once it knows the usage.
        "quota": call.quota.job() if call.quota is not None else None,
    }
    try:
        runs.begin(response_id, digest, queued, background=True, job=job)
    except StoreError as exc:
        raise stored.unavailable(exc) from exc
    try:
        _invoke_self(response_id)
    except Exception as exc:
        logger.error("the background run of %s could not be started: %s", response_id, exc)
        failed = {**queued, "status": "failed", "error": {"code": "server_error", "message": "it never started"}}
        runs.finish(response_id, "failed", failed)
        raise APIError(
            503, "The background response could not be started. Try again.", type="server_error", code="unavailable"
        ) from exc
    call.record.stored = True
    if call.quota is not None:
        call.quota.handed_off = True  # the run settles it; this invocation generates nothing
    call.writer.write(dumps(queued), 200, {**JSON_HEADERS, **headers})
    return None


# --- GET /v1/responses/{id}?stream=true&starting_after=N --------------------------------------------------


def replay(call: Any, cfg: Config, caller: str, response_id: str, deadline: float) -> None:
    """The run's events after ``starting_after`` (all of them without it), then each new one until its end."""
    query = call.request.query
    after = query.get("starting_after")
    try:
        starting_after = -1 if after is None else int(after)
    except ValueError:
        starting_after = -2
    if starting_after < -1:
        raise APIError.invalid_request(
            "'starting_after' must be a whole number: the sequence_number of the last event received.",
            param="starting_after",
        )
    runs, owner = runs_for(cfg), owner_of(caller)
    try:
        state = runs.state(response_id, owner)
        found = state is not None or stored.store_for(cfg).get(response_id, owner) is not None  # type: ignore[union-attr]
    except StoreError as exc:
        raise stored.unavailable(exc) from exc
    if not found:
        raise stored.not_found(response_id)
    if state is None:
        raise APIError.invalid_request(
            f"The response '{response_id}' has no stored events to stream: only a background response, or a "
            "stream that ran with RESPONSES_RESUMABLE_STREAMS on, can be streamed again.",
            param="stream",
        )
    _follow(call, runs, response_id, owner, starting_after, deadline, cfg.sse_keepalive_s, {})


def _follow(
    call: Any,
    runs: Runs,
    response_id: str,
    owner: str,
    after: int,
    deadline: float,
    keepalive_s: float,
    headers: Mapping[str, str],
) -> None:
    """Write the run's events after ``after`` as SSE until its end (or the deadline: the client resumes from the
    last ``sequence_number`` it got); an SSE comment after each ``keepalive_s`` without one."""
    writer, record = call.writer, call.record
    record.streamed = True
    sse = {**SSE_HEADERS, **headers}
    last_write = time.monotonic()
    try:
        for event in follow_events(runs, response_id, owner, after, until=deadline):
            now = time.monotonic()
            if event:
                writer.write(event, 200, sse)
                record.output_deltas += 1
                last_write = now
            elif not writer.started or now - last_write >= keepalive_s:
                writer.write(KEEPALIVE_EVENT, 200, sse)  # the first at once: the client knows it is following
                record.keepalives += 1
                last_write = now
        if not writer.started:
            # Resumed at or past its last event (its run has ended): an event stream still, with the route's
            # headers, holding only a comment that says so (every response writes a body byte).
            writer.write(f": no events after sequence number {after}\n\n".encode(), 200, sse)
    except StoreError as exc:
        err = stored.unavailable(exc)
        if not writer.started:
            raise err from exc
        record.fail(err)
        error = {"type": "error", "code": err.code, "message": err.message, "param": err.param}
        writer.write(b"event: error\ndata: " + dumps(error) + b"\n\n", 200, sse)


# --- POST /v1/responses/{id}/cancel ------------------------------------------------------------------------


def cancel(app: Any, call: Any, cfg: Config, caller: str, response_id: str) -> None:
    """Cancel a background response (idempotent: a cancelled one is answered again as it is); a 400 for one
    that was not made in the background or has ended, as OpenAI answers them."""
    runs, owner = runs_for(cfg), owner_of(caller)
    try:
        dequeue(app, runs, response_id, owner)  # one still queued never runs: its quota is given back here
        state = runs.cancel(response_id, owner)
        kept = state is None and stored.store_for(cfg).get(response_id, owner) is not None  # type: ignore[union-attr]
    except StoreError as exc:
        raise stored.unavailable(exc) from exc
    if state is None and not kept:
        raise stored.not_found(response_id)
    if state is None or not state.background:
        raise APIError.invalid_request("Only responses created with background=true can be cancelled.")
    if state.status != "cancelled":
        raise APIError.invalid_request(f"Cannot cancel a {state.status} response.")
    call.writer.json(state.response)


def dequeue(app: Any, runs: Runs, response_id: str, owner: str) -> None:
    """Take ``owner``'s background response out of the queue if it is still there (a cancel, a delete): the run
    will never claim it, so the caller's quota reservation is given back here, once (the request still counts)."""
    if not runs.dequeue(response_id, owner):
        return
    found = runs.job(response_id)
    if found is not None:
        app.settle_quota(None, found[1].get("quota"))


def status(cfg: Config, caller: str, response_id: str) -> dict[str, Any] | None:
    """A running (or cancelled, or failed) response's object, for ``GET /v1/responses/{id}``; None if none."""
    state = runs_for(cfg).state(response_id, owner_of(caller))
    return state.response if state is not None else None


# --- the run: the asynchronous invocation ------------------------------------------------------------------


def run(app: Any, event: Mapping[str, Any], call: Any, api: Any) -> None:
    """Answer the job of ``event``'s response (once: a second delivery of the event finds it claimed), through the
    app's one pipeline (capacity holds, fallbacks, the record, the store), its events kept in the run's log; the
    invocation's own answer (Lambda keeps it nowhere; ``make invoke`` shows it) names the outcome. ``api``: the
    Responses API's, whose encoder keeps the run's events."""
    from sagestream.protocols.responses.request import parse_responses, renamed
    from sagestream.sagemaker_ids import UpstreamIds

    response_id = str(event.get("response_id") or "")
    record, own = call.record, call.writer
    record.kind, record.streamed, record.path = "response", True, f"/v1/responses/{response_id}"
    cfg = app.config
    runs = runs_for(cfg)
    found = runs.job(response_id)
    if found is None or not runs.claim(response_id):
        logger.warning("no queued background response %s: nothing to run", response_id)
        own.json({"id": response_id, "status": "skipped"})
        return
    owner, job = found
    if job.get("quota") is not None:  # the caller's quota, charged what this run generates
        call.after.append(lambda: app.settle_quota(record, job.get("quota")))
    cfg = cfg.for_model(job["model"]) or cfg
    record.model, record.endpoint, record.dialect = cfg.model_id, cfg.endpoint_name, cfg.dialect
    request, chat, origins = parse_responses(
        job["raw"].encode(),
        max_tokens_limit=cfg.max_tokens_limit,
        extra_fields=cfg.extra_request_fields,
        max_prompt_chars=cfg.max_prompt_chars,
    )
    request._previous_response_id, request._stored, request._owner = job["previous_response_id"], True, ""
    request._background, request._response_id, request._created_at = True, response_id, job["created_at"]
    request._owner_digest = owner
    finish = functools.partial(_store_run, cfg, owner, job)
    parsed = Parsed(chat, request, rename=functools.partial(renamed, origins=origins), finish=finish)
    call.ids = UpstreamIds.of(call.context.aws_request_id, job.get("prefix_aware_id"))
    # Nobody reads this invocation's answer: the run's events go to its log only, and its outcome is written last.
    call.writer = Writer(_Nobody(), call.context.aws_request_id)
    try:
        app.answer(call, Completion(cfg, api, parsed, job["payload"].encode(), streamed=True))
    finally:
        call.writer = own
        kept = call.encoder
        outcome = kept.outcome if isinstance(kept, ResumableEncoder) else "failed"
        own.json({"id": response_id, "status": outcome})


def _store_run(cfg: Config, owner: str, job: dict[str, Any], response_json: bytes) -> None:
    """A background run's answer stored, as a foreground answer is (with the input its job keeps)."""
    response = json.loads(response_json)
    items = stored.with_item_ids(stored.this_input(json.loads(job["raw"]).get("input")))
    stored.store_for(cfg).put(response["id"], owner, response, items, int(job["depth"]))  # type: ignore[union-attr]


class _Nobody:
    """The response stream of a run nobody reads (an asynchronous invocation's): every write goes nowhere."""

    started = True

    def start(self, status: int, headers: Mapping[str, str], cookies: Any = ()) -> None:
        pass

    def write(self, data: bytes | str) -> None:
        pass

    def close(self) -> None:
        pass


# --- a foreground stream that can be followed while it runs -----------------------------------------------


class ResumableEncoder:
    """A Responses stream's encoder that also hands each write's events to an
    :class:`~sagestream.protocols.responses.runs.EventLog`; :meth:`ended` (after the response is closed)
    closes it and ends the run. A background run's (``background``) was begun when it was queued, and its log
    watches for a cancel or a delete (``stopped``), which the pipeline reads between two deltas (``wake_s``)."""

    def __init__(self, inner: ResponsesEncoder, runs: Runs, owner: str, *, background: bool = False) -> None:
        self.inner = inner
        self.runs = runs
        self.owner = owner
        self.background = background
        self.wake_s = CANCEL_CHECK_S if background else None
        self.log: EventLog | None = None
        self._seq = 0
        if background:
            self.log = EventLog(runs, inner.id, owner, watch_s=CANCEL_CHECK_S)

    @property
    def final(self) -> bytes | None:
        return self.inner.final

    @property
    def stopped(self) -> bool:
        return self.log is not None and self.log.stopped

    @property
    def outcome(self) -> str:
        """The run's status as this encoder ends it."""
        if self.stopped:
            return "cancelled"
        final = self.inner.final
        return str(json.loads(final)["status"]) if final is not None else "failed"

    def _kept(self, data: bytes) -> bytes:
        if self.log is None:
            # Begun by the log's own thread, before its first batch: the first token waits for no write.
            snapshot = json.loads(self.inner.snapshot("in_progress"))
            self.log = EventLog(
                self.runs,
                self.inner.id,
                self.owner,
                begin=lambda: self.runs.begin(self.inner.id, self.owner, snapshot, background=False),
            )
        self.log.add(data, self._seq, self.inner.sequence - self._seq)
        self._seq = self.inner.sequence
        return data

    def encode(self, delta: Delta) -> bytes:
        data = self.inner.encode(delta)
        return self._kept(data) if data else data

    def done(self) -> bytes:
        return self._kept(self.inner.done())

    def error(self, err: APIError) -> bytes:
        return self._kept(self.inner.error(err))

    def ended(self) -> None:
        """After the response is closed, however it ended: the rest of its events written, and its state ended
        (a run deleted while it ran leaves nothing behind)."""
        if self.log is None:
            return
        if self.background and self.inner.final is None and self.inner.failed is None and not self.stopped:
            # Ended before its answer (the endpoint refused or failed before the stream): its followers are told.
            self.error(APIError(502, "The run ended before its answer.", type="server_error", code="server_error"))
        self.log.close()
        final = self.inner.final or self.inner.failed
        # No end event written: the client left, and the upstream stream was closed with it; or it was cancelled.
        response = json.loads(final) if final is not None else json.loads(self.inner.snapshot("failed"))
        if self.stopped:
            response["status"] = "cancelled"
        try:
            if (
                not self.runs.finish(self.inner.id, response["status"], response)
                and self.runs.state(self.inner.id, self.owner) is None
            ):
                self.runs.delete_items(self.inner.id)  # deleted while it ran: what it wrote since goes too
        except StoreError as exc:
            logger.error("the run of %s could not be ended: %s", self.inner.id, exc)


def resumable(encoder: ResponsesEncoder, cfg: Config, owner: str, *, background: bool = False) -> ResumableEncoder:
    """``encoder``, its events also kept for followers (``owner``: the caller, as the parse was told; a
    background run's: the digest its job keeps)."""
    return ResumableEncoder(encoder, runs_for(cfg), owner if background else owner_of(owner), background=background)
