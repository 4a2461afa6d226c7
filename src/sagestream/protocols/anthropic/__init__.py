"""The Anthropic Messages API (``/v1/messages`` and its ``count_tokens``) over the one pipeline.

The request is modelled field by field on the anthropic SDK's ``MessageCreateParams`` (plus ``temperature``,
``top_p`` and ``top_k``, which the API still takes and LangChain sends) and translated into the chat-shaped
request the dialects speak, so that the dialect's :meth:`~sagestream.dialects.Dialect.body` places or refuses
each field as it does for chat completions:

- ``system`` (a string or text blocks) and ``system`` messages → a ``system`` message; text blocks → text
  parts; ``image`` blocks (base64 or URL) → ``image_url`` parts (a data URL for base64);
- ``tool_use`` blocks of an assistant turn → its ``tool_calls`` (``input`` as JSON arguments); ``tool_result``
  blocks → ``tool`` messages, before the rest of their user turn (``is_error`` puts ``Error:`` before the
  result: a chat template has no other way to tell the model the call failed); ``thinking`` blocks sent
  back → ``reasoning_content`` (their ``signature`` is accepted and not checked: none is issued here);
- ``tools`` (custom) → function tools, ``input_schema`` as ``parameters``; ``tool_choice`` ``auto``,
  ``any`` (→ ``required``), ``tool`` (→ the named function), ``none``; ``disable_parallel_tool_use`` →
  ``parallel_tool_calls: false``;
- ``stop_sequences`` → ``stop``; ``metadata.user_id`` → ``user``; ``output_config.effort`` →
  ``reasoning_effort`` (both on the openai dialect; a prompt container has neither, and they are no-ops
  there); ``context_management`` edits of type ``clear_thinking_20251015`` → the older turns' thinking left
  out of the prompt (other edits are refused by name); ``max_tokens`` past ``MAX_TOKENS_LIMIT`` → the limit
  (Anthropic's ``max_tokens`` is a ceiling: Claude Code asks 32000); ``thinking.display: "omitted"`` → no
  thinking blocks in the answer; ``output_config.format`` → ``response_format`` (``json_schema``, strict);
  ``top_k`` → the vendor field ``top_k`` when ``EXTRA_REQUEST_FIELDS`` lists it; ``thinking``
  ``enabled`` → vLLM's ``thinking_token_budget`` when ``EXTRA_REQUEST_FIELDS`` lists it (openai dialect);
- hints the containers follow on their own are accepted and send nothing: ``cache_control`` (vLLM and
  SGLang cache prefixes themselves), ``service_tier`` (there is one tier), ``speed: "standard"``,
  ``thinking`` ``adaptive`` / ``disabled`` (a reasoning container thinks as it is deployed to; its thoughts
  arrive as ``thinking`` blocks), ``thinking.display`` ``summarized`` / ``updates`` (the thoughts come whole),
  tools' ``defer_loading`` (no tool search: every tool is offered), any ``anthropic-beta`` (a beta names
  features; a body field that uses one is honoured or refused by its own name); each counted in the log
  record's ``noops``;
- everything else the SDK can send is refused by name: server tools, ``container``, ``diagnostics``,
  ``inference_geo``, ``user_profile_id``, ``workspace_id``, ``speed: "fast"``, ``redacted_thinking`` and the
  other block types, a last ``assistant`` turn (prefill: a chat template starts a new turn after it).

A refusal of the dialects (``'user' is not supported ...``) names the field as the client sent it
(``metadata.user_id``): :attr:`~sagestream.protocols.Parsed.names`. Errors take Anthropic's shape,
``{"type": "error", "error": {"type", "message"}}``, with Anthropic's types for each status.

Environment variables read: none.

Example::

    >>> from sagestream.config import Config
    >>> from sagestream.delta import Delta
    >>> cfg = Config(endpoint_name="llm", model_id="m")
    >>> parsed = MESSAGES.parse(b'{"model": "m", "max_tokens": 5, "system": "Be brief.", '
    ...                         b'"messages": [{"role": "user", "content": "Hi"}]}', cfg)
    >>> parsed.request.plain_messages(), parsed.request.max_tokens
    ([('system', 'Be brief.'), ('user', 'Hi')], 5)
    >>> encoder = MESSAGES.encoder(parsed, cfg)
    >>> print(encoder.encode(Delta(content="Hello")).decode().split("\\n\\n")[2])
    event: content_block_delta
    data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}
    >>> MESSAGES.error_body(APIError.unauthorized())
    b'{"type":"error","error":{"type":"authentication_error","message":"Missing or invalid API key."}}'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from sagestream.delta import Delta
from sagestream.errors import APIError
from sagestream.http import Route
from sagestream.protocols._api import App, Parsed, completion_route
from sagestream.protocols._wire import dumps
from sagestream.protocols.anthropic.encoder import ERROR_TYPES, MessagesEncoder, error_object, message_json
from sagestream.protocols.openai.request import ChatCompletionRequest

if TYPE_CHECKING:
    from sagestream.config import Config

__all__ = ["ERROR_TYPES", "MESSAGES", "REFUSED_HEADERS", "ROUTES", "MessagesAPI", "count_tokens", "error_object"]


# Headers the SDK sends for its own parameters, which choose things this function does not have.
REFUSED_HEADERS = {
    "anthropic-workspace-id": "there are no workspaces here (the deployment is the workspace)",
    "anthropic-user-profile-id": "there are no user profiles here",
}


class MessagesAPI(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Anthropic's ``/v1/messages``."""

    kind: str = "messages"

    def check_headers(self, headers: Mapping[str, str]) -> tuple[str, ...]:
        for name, reason in REFUSED_HEADERS.items():
            if headers.get(name):
                raise APIError.invalid_request(f"'{name}' is not supported by this endpoint: {reason}.", param=name)
        # A beta only names features: one the body uses is honoured or refused by that body field's name
        # (the request module), one it does not use changes nothing. Any value is accepted, and counted.
        return ("anthropic-beta",) if headers.get("anthropic-beta", "").strip() else ()

    def parse(self, raw: bytes, cfg: Config, caller: str = "") -> Parsed:
        from sagestream.protocols.anthropic import request  # on first use: see its docstring

        return request.parse(request.body_of(raw), cfg)

    def count_request(self, raw: bytes, cfg: Config) -> Parsed:
        """A ``count_tokens`` body as the request whose one-token answer reports the prompt's count."""
        from sagestream.protocols.anthropic import request

        return request.parse(request.count_body(raw), cfg, counting=True)

    def encoder(self, parsed: Parsed, cfg: Config) -> MessagesEncoder:
        return MessagesEncoder(
            model=cfg.model_id,
            stop_sequences=_stops(parsed),
            pad_bytes=cfg.sse_pad_bytes,
            show_thinking=_show_thinking(parsed),
        )

    def whole(self, answer: Delta, parsed: Parsed, cfg: Config) -> bytes:
        return message_json(
            answer, model=cfg.model_id, stop_sequences=_stops(parsed), show_thinking=_show_thinking(parsed)
        )

    def error_body(self, err: APIError) -> bytes:
        return dumps(error_object(err))

    @property
    def id_headers(self) -> tuple[str, ...]:
        # The anthropic SDKs read request-id (message._request_id); x-request-id as on every route.
        return ("x-request-id", "request-id")


MESSAGES = MessagesAPI()


def _show_thinking(parsed: Parsed) -> bool:
    """False when the client asked for its thoughts to be left out (``thinking.display: "omitted"``)."""
    thinking = getattr(parsed.original, "thinking", None)
    return not (isinstance(thinking, dict) and thinking.get("display") == "omitted")


def _stops(parsed: Parsed) -> tuple[str, ...]:
    request = parsed.request
    assert isinstance(request, ChatCompletionRequest)
    return tuple(request.stop_sequences or ())


def count_tokens(app: App, call: Any) -> None:
    """``/v1/messages/count_tokens``: the container's own count of the prompt, read from its answer to the same
    request cut at one token (``usage.prompt_tokens``: the prompt as its chat template and tokenizer made it,
    tools included), through the one pipeline (holds, fallbacks, the record; the quota counts it as a request,
    never as tokens, as Anthropic limits count_tokens by requests per minute). A container that reports no
    prompt count gets a 501 saying so, never an estimate."""
    app.complete(
        call,
        MESSAGES,
        parse=MESSAGES.count_request,
        body=_counted,
        max_tokens_default=1,
        counting=True,
    )


def _counted(answer: Delta, cfg: Config) -> bytes:
    if answer.usage is None or answer.usage.prompt_tokens is None:
        raise APIError(
            501,
            f"The model container (UPSTREAM_FORMAT={cfg.dialect}) does not report how many tokens a prompt is, "
            "so this endpoint cannot count them; it does not estimate.",
            type="api_error",
            code="count_unavailable",
        )
    return dumps({"input_tokens": answer.usage.prompt_tokens})


def _unknown(app: App, call: Any) -> None:
    # Batches, files, models under /v1/messages and the like: only an Anthropic client asks, in its own shape.
    raise APIError.not_found(f"Unknown path {call.request.path}.", code="unknown_url")


ROUTES = (
    completion_route("/v1/messages", MESSAGES),
    Route("/v1/messages/count_tokens", ("POST",), count_tokens, keyed=True, api=MESSAGES),
    Route("/v1/messages", (), _unknown, keyed=True, api=MESSAGES, prefix=True),
)
