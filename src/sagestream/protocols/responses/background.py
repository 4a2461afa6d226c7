"""Background responses (``background: true``, with a store): queued, and run by the function's one pipeline.

``POST /v1/responses`` with ``background: true`` writes the run's state (``queued``) and its job, starts an
asynchronous invocation of this same function (Lambda's ``Invoke`` with ``InvocationType=Event``, on
``AWS_LAMBDA_FUNCTION_NAME``) with an internal event naming the response, and answers the ``queued`` response at
once. The run (:func:`run`) claims the job once and answers it through the app's pipeline
(:meth:`sagestream.app.App.answer`: holds, fallbacks, the record), its events kept in its log
(:mod:`~sagestream.protocols.responses.run_encoder`) and watched for a cancel, and stores the response as a
foreground answer is stored. With ``stream: true`` too, the run is the creator's own invocation: its deltas reach
it at the endpoint's cadence, and a creator that leaves does not stop the run. Followers
(:mod:`~sagestream.protocols.responses.replay`) and cancels (:mod:`~sagestream.protocols.responses.cancelling`) have
modules of their own.

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

from sagestream.errors import APIError
from sagestream.http import JSON_HEADERS, Writer
from sagestream.protocols._api import Completion, Parsed
from sagestream.protocols._wire import dumps, new_id
from sagestream.protocols.responses import stored
from sagestream.protocols.responses.encoder import queued_response
from sagestream.protocols.responses.run_encoder import ResumableEncoder
from sagestream.protocols.responses.store import StoreError, owner_of
from sagestream.protocols.responses.stored import runs_for

if TYPE_CHECKING:
    from sagestream.config import Config
    from sagestream.protocols.responses.models import ResponseCreateRequest

__all__ = [
    "INTERNAL_EVENT",
    "PUBLISHED_ALIAS",
    "is_internal",
    "run",
    "start",
]

logger = logging.getLogger(__name__)

INTERNAL_EVENT = "responses.background"
# The alias the template publishes versions under (AutoPublishAlias), invoked when a published version runs.
PUBLISHED_ALIAS = "live"

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
