"""What a completion request asks, made ready for the upstream call: its body checked (media type, size), the
model it names (its own view of the configuration), the InvokeEndpoint body in that model's dialect, the ids
the call carries, and who asks (for what is kept for them).

The app calls these on its completion routes, and the protocols' own routes reach them through the app
(:class:`sagestream.protocols.App`), in the same order: :func:`read_target` first (the model's limits are what
the request is checked against), the protocol's parse, then :func:`upstream_ids` and :func:`upstream_payload`.

Example::

    >>> model_named(b'{"model": "qwen", "messages": []}'), model_named(b'{}')
    ((True, 'qwen'), (True, None))
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from sagestream import sagemaker_ids
from sagestream.auth import presented_keys
from sagestream.dialects import dialect_named
from sagestream.errors import APIError
from sagestream.function_url import media_type
from sagestream.protocols import Completion
from sagestream.sagemaker_ids import UpstreamIds

if TYPE_CHECKING:
    from sagestream.auth import Authenticator
    from sagestream.call import Call
    from sagestream.config import Config
    from sagestream.delta import Delta
    from sagestream.http import Request
    from sagestream.protocols import ClientAPI, Parsed

__all__ = [
    "body_of",
    "completion",
    "model_named",
    "owner",
    "read_target",
    "target_of",
    "upstream_ids",
    "upstream_payload",
]

# The request field the call carries as SageMaker's PrefixAwareId when prefix-aware routing is on.
_PREFIX_KEY = frozenset({"prompt_cache_key"})


def completion(
    config: Config,
    call: Call,
    api: ClientAPI,
    caller: Callable[[], str],
    *,
    parse: Callable[[bytes, Config], Parsed] | None = None,
    body: Callable[[Delta, Config], bytes] | None = None,
    max_tokens_default: int | None = None,
) -> Completion:
    """The request of ``call`` made ready, in the order each step needs the last: the body and the model it names
    (whose limits the parse checks), the API's parse (``parse``: a route's own reading, as ``count_tokens``'),
    the upstream ids, the upstream body in the model's dialect. ``caller``: who asks, worked out only where
    something is kept for them (stored responses)."""
    record = call.record
    raw, cfg = read_target(config, call, api)
    parsed = (
        parse(raw, cfg) if parse is not None else api.parse(raw, cfg, caller() if cfg.responses_store != "none" else "")
    )
    record.noted(parsed.noops)
    request = parsed.request
    record.streamed = bool(request.stream)
    call.ids = upstream_ids(call, cfg, getattr(request, "prompt_cache_key", None))
    # A background response streams, whatever the request says (its run's body is this one).
    streamed = bool(request.stream) or parsed.instead is not None
    default = max_tokens_default if max_tokens_default is not None else cfg.max_tokens_limit
    payload = call.payload = upstream_payload(call, cfg, parsed, stream=streamed, max_tokens_default=default)
    return Completion(cfg, api, parsed, payload, streamed=bool(request.stream), body=body)


def read_target(config: Config, call: Call, api: ClientAPI) -> tuple[bytes, Config]:
    """The request's body, and the configuration of the model it names; the record told which, and the
    API's own headers checked."""
    raw = body_of(call.request, config)
    # The model first: its own max_tokens_limit is what the request is checked against. A body that is
    # not an object, or a model that is not a string, is the parser's to refuse by name.
    readable, model = model_named(raw)
    cfg = target_of(config, model) if readable else config
    record = call.record
    record.model, record.endpoint, record.dialect = cfg.model_id, cfg.endpoint_name, cfg.dialect
    record.noted(api.check_headers(call.request.headers))
    return raw, cfg


def body_of(request: Request, config: Config) -> bytes:
    """The body of a completion request: JSON (415 otherwise), at most ``MAX_REQUEST_BYTES`` (413 otherwise)."""
    media = media_type(request.headers.get("content-type", ""))
    if media != "application/json" and not media.endswith("+json"):
        raise APIError.invalid_request(
            f"Content-Type must be application/json, not {media or 'missing'}.",
            code="unsupported_media_type",
            status=415,
        )
    if len(request.body) > config.max_request_bytes:
        raise APIError.invalid_request(
            f"The request body is {len(request.body)} bytes; the limit is {config.max_request_bytes}.",
            code="request_too_large",
            status=413,
        )
    return request.body


def target_of(config: Config, model: str | None) -> Config:
    """The configuration of the model a request names; the only one when it names none."""
    served = config.model_ids
    if model is None:
        if len(served) > 1:
            raise APIError.invalid_request(
                f"You must provide a model parameter; this endpoint serves {', '.join(served)}.",
                param="model",
                code="missing_required_parameter",
            )
        return config.for_model(served[0]) or config
    target = config.for_model(model)
    if target is None:
        raise APIError.not_found(
            f"The model '{model}' does not exist; this endpoint serves {', '.join(repr(m) for m in served)}.",
            code="model_not_found",
            param="model",
        )
    return target


def model_named(body: bytes) -> tuple[bool, str | None]:
    """Whether the body is an object whose ``model`` is a string or absent, and that model; read before the
    full parse, which needs that model's limits.

    >>> model_named(b'{"model": 3}'), model_named(b"[")
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


def upstream_payload(call: Call, cfg: Config, parsed: Parsed, *, stream: bool, max_tokens_default: int | None) -> bytes:
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
    if stream and (cfg.quotas is not None or not parsed.request.stream) and "stream_options" in dialect.computed_fields:
        # A quota settles to the container's usage, and a stream the client did not ask for (a background run's)
        # reports it in its response: asked for on those streams (the client's encoder sends it on only where
        # the client asked for it too).
        body["stream_options"] = {**body.get("stream_options", {}), "include_usage": True}
    if call.identity is not None and dialect.carries_user:
        # OpenAI's `user`, which Messages-API containers take for abuse tracking: the verified caller,
        # in place of whatever the client wrote there, so that no caller can speak for another. The
        # prompt dialects have no such field (a client's own `user` is refused there by name).
        body["user"] = call.identity.sub
        if "safety_identifier" in body:  # OpenAI's newer name for the same: bound to the caller too
            body["safety_identifier"] = call.identity.sub
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def upstream_ids(call: Call, cfg: Config, prompt_cache_key: str | None) -> UpstreamIds:
    """The invocation's request id as the ``InferenceId``; with prefix-aware routing on for ``cfg``, the
    ``prompt_cache_key`` as the ``PrefixAwareId`` (a 400 naming it if SageMaker could not take it).

    The routes of other request shapes call it with their own ``prompt_cache_key``."""
    prefix = None
    if cfg.prefix_aware_routing and prompt_cache_key is not None:
        prefix = sagemaker_ids.prefix_aware_id(prompt_cache_key)
    return UpstreamIds.of(call.context.aws_request_id, prefix)


def owner(config: Config, call: Call, auth: Authenticator | None = None) -> str:
    """Who is asking, as what they keep is kept by (stored responses): the token's issuer and subject, the
    API key that authenticated the request (the one ``auth`` matched, whichever header carried it, however many
    the request presents; behind a REST front, the ``x-api-key`` API Gateway checked), the signing IAM principal;
    with ``AUTH_MODE=none`` everyone is one caller."""
    if call.identity is not None:
        return f"jwt:{config.jwt_issuer}:{call.identity.sub}"
    if config.auth_mode == "api_key":
        headers = call.request.headers
        if config.api_key_source == "gateway":
            return "key:" + headers.get("x-api-key", "").strip()
        presented = presented_keys(headers)
        matched = auth.matched_key(headers) if auth is not None else None
        if matched is not None:
            presented = [k for k in presented if hashlib.sha256(k.encode("utf-8")).hexdigest() == matched[0]]
        return "key:" + (presented[0] if presented else "")
    if call.request.caller:
        return "iam:" + call.request.caller
    return "anyone"
