"""OpenAI's Responses API (``POST /v1/responses``; with a store, ``GET``/``DELETE /v1/responses/{id}``).

The request is modelled on the openai SDK's ``openai.types.responses.response_create_params`` field for
field (:mod:`~sagestream.protocols.responses.request`) and translated into the chat-shaped
:class:`~sagestream.protocols.openai.request.ChatCompletionRequest`, so every dialect builds its body from it
unchanged; a refusal there names the Responses field (``max_output_tokens``, ``text.format``, ``input.2``),
not the chat one. Each field is translated, echoed in the response, or refused by name; a field OpenAI does
not define is refused as OpenAI refuses it (``Unrecognized request argument supplied``).

Without a store (``RESPONSES_STORE=none``) nothing is kept: ``previous_response_id`` is refused by name and a
``GET`` of a response id is a 404. With one (:mod:`~sagestream.protocols.responses.stored`), an answer is
kept after its last byte unless ``store`` is false, and ``previous_response_id`` continues the caller's own;
``background: true`` is queued and run by an asynchronous invocation of the function, a stored stream can be
followed from another connection while it runs, and ``POST /v1/responses/{id}/cancel`` stops a background run
(:mod:`~sagestream.protocols.responses.background`, over :mod:`~sagestream.protocols.responses.runs`).

Environment variables read: none.

Example::

    >>> from sagestream.config import Config
    >>> cfg = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "e", "AUTH_MODE": "none"})
    >>> parsed = RESPONSES.parse(b'{"input": "Hi", "instructions": "Be brief."}', cfg)
    >>> parsed.request.plain_messages()
    [('system', 'Be brief.'), ('user', 'Hi')]
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from sagestream.delta import Delta
from sagestream.errors import APIError
from sagestream.http import Route
from sagestream.protocols._api import App, Parsed, StreamEncoder, completion_route
from sagestream.protocols.responses.encoder import ResponsesEncoder, response_json

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = [
    "INTERNAL_EVENTS",
    "RESPONSES",
    "ROUTES",
    "UNOFFERED_HEADER",
    "ResponsesAPI",
    "at_init",
    "run_in_background",
]


# The hosted tools (OpenAI runs them; a model container cannot) a request carried and the model was not offered.
UNOFFERED_HEADER = "x-sagestream-unoffered-tools"


class ResponsesAPI(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``/v1/responses`` on the one pipeline: :class:`~sagestream.protocols.ClientAPI`."""

    kind: str = "response"

    def check_headers(self, headers: Mapping[str, str]) -> tuple[str, ...]:
        return ()  # OpenAI's headers (organization, project, beta) ask nothing of the relay

    def parse(self, raw: bytes, cfg: Config, caller: str = "") -> Parsed:
        # Here, not at import: the request models are the Responses API's own, built by its first request.
        from sagestream.protocols.responses.request import parse_responses, renamed, unoffered_tools

        previous, depth, background = None, 0, False
        keeps = cfg.responses_store != "none"
        if keeps:
            from sagestream.protocols.responses import stored  # a deployment without a store never loads it
        # Only a continuation or a background request reads the body twice before the answer (and only a
        # continuation reads the store); any other request, nothing.
        if keeps and (b"previous_response_id" in raw or b"background" in raw):
            try:
                data = json.loads(raw)
            except (ValueError, RecursionError):
                data = None  # the parser refuses it, in its words
            if isinstance(data, dict) and "previous_response_id" in data:
                previous = data["previous_response_id"]
                data, continues = stored.continued(data, cfg, caller)
                depth = continues.depth
                raw = json.dumps(data, ensure_ascii=False).encode()
            if isinstance(data, dict) and data.get("background") is True:
                if data.get("store") is False:
                    raise APIError.invalid_request(
                        "'background' needs 'store': a background response is stored, to be fetched later.",
                        param="background",
                    )
                background = True
                data = {k: v for k, v in data.items() if k != "background"}
                raw = json.dumps(data, ensure_ascii=False).encode()
        request, chat, origins = parse_responses(
            raw,
            max_tokens_limit=cfg.max_tokens_limit,
            extra_fields=cfg.extra_request_fields,
            max_prompt_chars=cfg.max_prompt_chars,
        )
        unoffered = unoffered_tools(request)
        noops = (("client_metadata",) if request.client_metadata is not None else ()) + tuple(
            f"tools.{kind}" for kind in unoffered
        )
        headers = {UNOFFERED_HEADER: ", ".join(unoffered)} if unoffered else {}
        finish = instead = None
        if keeps and request.store is not False:
            request._previous_response_id = previous if isinstance(previous, str) else None
            request._stored, request._owner = True, caller
            finish = functools.partial(stored.save, cfg, caller, request_body=raw, depth=depth + 1)
        if background:
            from sagestream.protocols.responses import background as runs_in_background

            request._background = True
            instead = functools.partial(runs_in_background.start, cfg, caller, request, raw, depth + 1, headers=headers)
        # The dialect's refusals (raised where app builds the body) name the Responses field the client sent.
        return Parsed(
            chat,
            request,
            rename=functools.partial(renamed, origins=origins),
            noops=noops,
            headers=headers,
            finish=finish,
            instead=instead,
        )

    def encoder(self, parsed: Parsed, cfg: Config) -> StreamEncoder:
        original = parsed.original
        if getattr(original, "_background", False):
            # A background run (its creator's stream, or an asynchronous invocation): its id was made when it
            # was queued, and its events are kept for followers and watched for a cancel.
            from sagestream.protocols.responses.run_encoder import resumable

            owner = getattr(original, "_owner_digest", None)
            run = ResponsesEncoder(
                original,
                model=cfg.model_id,
                pad_bytes=cfg.sse_pad_bytes,
                id=original._response_id,
                created_at=original._created_at,
            )
            if owner is None:
                from sagestream.protocols.responses.store import owner_of

                owner = owner_of(original._owner)
            return resumable(run, cfg, owner, background=True)
        encoder = ResponsesEncoder(original, model=cfg.model_id, pad_bytes=cfg.sse_pad_bytes)
        if getattr(original, "_stored", False) and cfg.responses_resumable_streams:
            # A stored stream can be followed from another connection while it runs (its events batched to
            # the table by a thread of its own).
            from sagestream.protocols.responses.run_encoder import resumable

            return resumable(encoder, cfg, original._owner)
        return encoder

    def whole(self, answer: Delta, parsed: Parsed, cfg: Config) -> bytes:
        return response_json(answer, parsed.original, model=cfg.model_id)

    def error_body(self, err: APIError) -> bytes:
        return err.json_bytes()

    @property
    def id_headers(self) -> tuple[str, ...]:
        return ("x-request-id",)


RESPONSES = ResponsesAPI()


def _kept(app: App, call: Any) -> None:
    """Every id route's first word: without a store, nothing was kept to find."""
    if app.config.responses_store == "none":
        raise APIError.not_found(
            f"No response is stored here: this server is stateless and keeps no responses, so "
            f"{call.request.method} {call.request.path} has nothing to find; only POST /v1/responses is served.",
            code="response_not_found",
        )


def response_by_id(app: App, call: Any) -> None:
    """``GET`` / ``DELETE /v1/responses/{response_id}`` (``?stream=true``: its events replayed and followed)."""
    _kept(app, call)
    from sagestream.protocols.responses import by_id

    by_id.one(app, call, call.params["response_id"])


def input_items(app: App, call: Any) -> None:
    """``GET /v1/responses/{response_id}/input_items``."""
    _kept(app, call)
    from sagestream.protocols.responses import by_id

    by_id.items(app, call, call.params["response_id"])


def cancel(app: App, call: Any) -> None:
    """``POST /v1/responses/{response_id}/cancel``."""
    _kept(app, call)
    from sagestream.protocols.responses import by_id

    by_id.cancel(app, call, call.params["response_id"])


def run_in_background(app: App, event: Mapping[str, Any], call: Any) -> None:
    """The asynchronous invocation that runs a background response (its module loaded only here)."""
    from sagestream.protocols.responses import background

    background.run(app, event, call, RESPONSES)


def at_init(config: Config) -> None:
    """With a store, its clients (DynamoDB, Lambda) made at init, never while a stream runs; and the request
    models with them (about 9 ms of a first request's CPU before its first delta, measured: the module's import and
    msgspec's first decoder), since a deployment with a store is one whose clients speak the Responses API.
    Without one they are still built by the first Responses request, sparing every other deployment's cold start."""
    if config.responses_store != "none":
        from sagestream.protocols.responses import background

        background.at_init(config)
        RESPONSES.parse(b'{"input": "", "stream": true}', config)


ROUTES = (
    completion_route("/v1/responses", RESPONSES),
    Route("/v1/responses/{response_id}", ("GET", "DELETE"), response_by_id, keyed=True, api=RESPONSES),
    Route("/v1/responses/{response_id}/input_items", ("GET",), input_items, keyed=True, api=RESPONSES),
    Route("/v1/responses/{response_id}/cancel", ("POST",), cancel, keyed=True, api=RESPONSES),
)

# The function's own events (never an HTTP request's), by their "sagestream" key: a background run.
INTERNAL_EVENTS = {"responses.background": run_in_background}
