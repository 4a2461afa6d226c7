"""The function's configuration, read once from the environment at init.

Environment variables read: those of :data:`sagestream.settings.SETTINGS` read by this module, each declared
there once (kind, default, allowed values, meaning, template parameter); ``docs/configuration.md`` lists them.
:meth:`Config.from_env` parses each through its declaration, then applies the rules that span several
settings, each a function of its own below (``MODELS`` against the single-model settings, ``AUTH_MODE``'s needs,
``EXTRA_REQUEST_FIELDS`` against OpenAI's fields, the SSM-held JWT client id).

boto3's own ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`` is deliberately not read here: the SDK applies it.

Example::

    >>> cfg = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "my-llm", "UPSTREAM_FORMAT": "tgi"})
    >>> cfg.model_id, cfg.dialect
    ('my-llm', 'tgi')
    >>> Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "my-llm", "SSE_PAD_BYTES": "3"})
    Traceback (most recent call last):
    ...
    sagestream.settings.ConfigError: SSE_PAD_BYTES=3 must be 0 or at least 4 (an SSE comment: ...)

Several models behind one URL, each model id clients send mapped to its upstream; unset keys take the
global settings (``UPSTREAM_FORMAT``, ``PROMPT_TEMPLATE``, ``MAX_TOKENS_LIMIT``, ``TARGET_VARIANT``)::

    >>> cfg = Config.from_env({"MODELS": '{"llama": {"endpoint": "llm-a"}, "qwen": {"endpoint": "llm-b", '
    ...     '"inference_component": "qwen-ic", "upstream_format": "tgi", "prompt_template": "chatml"}}'})
    >>> [m.model_id for m in cfg.models], cfg.model_id
    (['llama', 'qwen'], 'llama')
    >>> qwen = cfg.for_model("qwen")
    >>> qwen.endpoint_name, qwen.inference_component, qwen.dialect
    ('llm-b', 'qwen-ic', 'tgi')
    >>> Config.from_env({"MODELS": '{"llama": {"endpont": "llm-a"}}'})
    Traceback (most recent call last):
    ...
    sagestream.settings.ConfigError: MODELS: model 'llama': key 'endpont' is not a setting (known: endpoint, ...
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import msgspec

from sagestream.dialects import DIALECTS, dialect_named, prompts
from sagestream.settings import AUTH_MODES, READ_BY_CONFIG, SETTINGS, ConfigError

__all__ = ["AUTH_MODES", "Config", "ConfigError", "Fallback", "GuardrailPolicy", "ModelTarget", "parse_models"]


def openai_fields() -> frozenset[str]:
    """The request fields the OpenAI models validate (their wire names)."""
    from sagestream.protocols.openai.request import ChatCompletionRequest, CompletionRequest

    return frozenset(ChatCompletionRequest.__struct_encode_fields__) | frozenset(
        CompletionRequest.__struct_encode_fields__
    )


NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class Fallback(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Another upstream that serves a model when its own has no capacity, is throttled, not ready or failing
    (before the answer's first byte only): an endpoint, and on it an inference component or a variant. It takes
    the model's request body as is, so it must speak the model's ``upstream_format``.

    >>> msgspec.json.decode(b'{"endpoint": "llm-b", "inference_component": "small"}', type=Fallback).endpoint
    'llm-b'
    """

    endpoint: NonEmpty
    inference_component: NonEmpty | None = None
    target_variant: NonEmpty | None = None


class GuardrailPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A model's Bedrock guardrail (``GUARDRAIL_*``; :mod:`sagestream.guardrails`): which, what it assesses, how.

    >>> GuardrailPolicy("gr-1").prompt, GuardrailPolicy("gr-1", sides="output").prompt
    (True, False)
    """

    identifier: NonEmpty
    version: NonEmpty = "DRAFT"
    sides: Literal["prompt", "output", "both"] = "both"
    mode: Literal["async", "sync"] = "async"
    window: Annotated[int, msgspec.Meta(ge=1)] = 1000
    fail: Literal["closed", "open"] = "closed"

    @property
    def prompt(self) -> bool:
        return self.sides != "output"

    @property
    def output(self) -> bool:
        return self.sides != "prompt"


class GuardrailEntry(msgspec.Struct, forbid_unknown_fields=True):
    """A model's own ``guardrail`` in ``MODELS``: unset keys take the ``GUARDRAIL_*`` settings."""

    id: NonEmpty | None = None
    version: NonEmpty | None = None
    sides: Literal["prompt", "output", "both"] | None = None
    mode: Literal["async", "sync"] | None = None
    window: Annotated[int, msgspec.Meta(ge=1)] | None = None
    fail: Literal["closed", "open"] | None = None


def guardrail_policy(values: Mapping[str, Any], entry: GuardrailEntry | bool | None = None) -> GuardrailPolicy | None:
    """The guardrail of the ``GUARDRAIL_*`` settings in ``values``, or of a model's ``entry`` over them; None: off.

    >>> glob = {"GUARDRAIL_ID": "g", "GUARDRAIL_VERSION": "1", "GUARDRAIL_SIDES": "both",
    ...     "GUARDRAIL_OUTPUT_MODE": "async", "GUARDRAIL_WINDOW_CHARS": 1000, "GUARDRAIL_FAIL": "closed"}
    >>> guardrail_policy(glob, GuardrailEntry(mode="sync")).mode, guardrail_policy(glob, False)
    ('sync', None)
    """
    if entry is False:
        return None
    own = entry if isinstance(entry, GuardrailEntry) else GuardrailEntry()
    identifier = own.id or values["GUARDRAIL_ID"]
    if identifier is None:
        if entry is not None:
            raise ConfigError("MODELS: a model's guardrail needs an id (its own, or GUARDRAIL_ID)")
        return None
    return GuardrailPolicy(
        identifier,
        version=own.version or values["GUARDRAIL_VERSION"],
        sides=own.sides or values["GUARDRAIL_SIDES"],
        mode=own.mode or values["GUARDRAIL_OUTPUT_MODE"],
        window=own.window or values["GUARDRAIL_WINDOW_CHARS"],
        fail=own.fail or values["GUARDRAIL_FAIL"],
    )


class ModelEntry(msgspec.Struct, forbid_unknown_fields=True):
    """One model of ``MODELS``: where its requests go. Only ``endpoint`` is required.

    ``upstream_format``, ``prompt_template``, ``max_tokens_limit``, ``target_variant`` and
    ``prefix_aware_routing`` default to the global settings (``prefix_aware_routing``: an endpoint's
    routing strategy is its own, so one model may turn it on or off against ``PREFIX_AWARE_ROUTING``).
    ``inference_component`` does not: a component's name belongs to one endpoint, so a global one would
    be wrong for every other endpoint. ``cold_wait_s`` defaults to ``COLD_WAIT_S``; ``fallbacks`` (none by
    default) are tried in order before the first byte (:mod:`sagestream.capacity`).
    """

    endpoint: NonEmpty
    inference_component: NonEmpty | None = None
    upstream_format: str | None = None
    prompt_template: NonEmpty | None = None
    max_tokens_limit: Annotated[int, msgspec.Meta(ge=1)] | None = None
    target_variant: NonEmpty | None = None
    prefix_aware_routing: bool | None = None
    cold_wait_s: Annotated[float, msgspec.Meta(ge=0)] | None = None
    fallbacks: tuple[Fallback, ...] = ()
    # The model's own guardrail over the GUARDRAIL_* settings; false: none for this model.
    guardrail: GuardrailEntry | bool | None = None


# The keys of one model in MODELS.
MODEL_KEYS: tuple[str, ...] = ModelEntry.__struct_fields__


class ModelTarget(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One model id clients send and the upstream it is served by (the global settings filled in)."""

    model_id: str
    endpoint_name: str
    dialect: str  # a name in sagestream.dialects.DIALECTS
    inference_component: str | None = None
    target_variant: str | None = None
    max_tokens_limit: int | None = None
    prompt_template: str | None = None
    prefix_aware_routing: bool = False
    cold_wait_s: float = 0.0
    fallbacks: tuple[Fallback, ...] = ()
    guardrail: GuardrailPolicy | None = None


def parse_models(
    text: str, *, defaults: ModelTarget, values: Mapping[str, Any] | None = None
) -> tuple[ModelTarget, ...]:
    """``MODELS``' JSON as targets, in its order; :class:`ConfigError` naming the model and key at fault.

    ``defaults`` carries the global settings (its ``model_id`` and ``endpoint_name`` are not used).

    >>> glob = ModelTarget("", "", "openai", max_tokens_limit=512)
    >>> parse_models('{"a": {"endpoint": "e", "max_tokens_limit": 0}}', defaults=glob)
    Traceback (most recent call last):
    ...
    sagestream.settings.ConfigError: MODELS: model 'a': key 'max_tokens_limit': Expected `int` >= 1
    >>> parse_models('{"a": {"endpoint": "e"}}', defaults=glob)[0].max_tokens_limit
    512
    """
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"MODELS is not JSON: {e}") from None
    if not isinstance(raw, dict) or not raw:
        raise ConfigError('MODELS must be a non-empty JSON object: {"<model id>": {"endpoint": "..."}, ...}')
    entries = {model_id: _model_entry(model_id, value) for model_id, value in raw.items()}
    targets = []
    for model_id, entry in entries.items():
        if not model_id.strip() or model_id != model_id.strip():
            raise ConfigError(f"MODELS: model id {model_id!r} must be non-empty, without surrounding spaces")
        if entry.prompt_template is not None:
            try:
                prompts.template(entry.prompt_template)
            except (KeyError, ValueError) as e:
                raise ConfigError(f"MODELS: model {model_id!r}: key 'prompt_template': {e}") from None
        if entry.upstream_format is not None and entry.upstream_format not in DIALECTS:
            known = ", ".join(repr(d) for d in DIALECTS)
            raise ConfigError(f"MODELS: model {model_id!r}: key 'upstream_format': Input should be {known}")
        targets.append(
            ModelTarget(
                model_id=model_id,
                endpoint_name=entry.endpoint,
                dialect=entry.upstream_format or defaults.dialect,
                inference_component=entry.inference_component,
                target_variant=entry.target_variant or defaults.target_variant,
                max_tokens_limit=entry.max_tokens_limit or defaults.max_tokens_limit,
                prompt_template=entry.prompt_template or defaults.prompt_template,
                prefix_aware_routing=(
                    defaults.prefix_aware_routing if entry.prefix_aware_routing is None else entry.prefix_aware_routing
                ),
                cold_wait_s=defaults.cold_wait_s if entry.cold_wait_s is None else entry.cold_wait_s,
                fallbacks=entry.fallbacks,
                guardrail=defaults.guardrail if values is None else guardrail_policy(values, entry.guardrail),
            )
        )
    return tuple(targets)


def _model_entry(model_id: str, value: Any) -> ModelEntry:
    """One model of ``MODELS``, or :class:`ConfigError` naming the key at fault."""
    if not isinstance(value, dict):
        raise ConfigError(f'MODELS: model {model_id!r}: must be an object with at least "endpoint"')
    # A misspelt key also leaves its real one missing: name the misspelling, it is the cause.
    unknown = sorted(set(value) - set(MODEL_KEYS))
    if unknown:
        known = ", ".join(MODEL_KEYS)
        raise ConfigError(f"MODELS: model {model_id!r}: key {unknown[0]!r} is not a setting (known: {known})")
    try:
        return msgspec.convert(value, ModelEntry, strict=True)
    except msgspec.ValidationError as e:
        text = str(e)
        key = next((k for k in MODEL_KEYS if f"`{k}`" in text or any(f"$.{k}{c}" in text for c in "`[.")), "?")
        reason = "Field required" if text.startswith("Object missing required field") else text.split(" - at ")[0]
        raise ConfigError(f"MODELS: model {model_id!r}: key {key!r}: {reason}") from None


def _check_extra_fields(extra_fields: frozenset[str], targets: tuple[ModelTarget, ...]) -> None:
    """Refuse an ``EXTRA_REQUEST_FIELDS`` name the function sets or limits in some served model's upstream body.

    >>> _check_extra_fields(frozenset({"top_k", "max_new_tokens"}), (ModelTarget("m", "e", "tgi"),))
    Traceback (most recent call last):
    ...
    sagestream.settings.ConfigError: EXTRA_REQUEST_FIELDS names max_new_tokens, which the function sets or limits ...
    """
    for target in targets:
        clash = sorted(extra_fields & dialect_named(target.dialect).computed_fields)
        if clash:
            model = f" (model {target.model_id!r})" if len(targets) > 1 else ""
            raise ConfigError(
                f"EXTRA_REQUEST_FIELDS names {', '.join(clash)}, which the function sets or limits in the upstream "
                f"body itself for UPSTREAM_FORMAT={target.dialect}{model}: a client could override it "
                "(MAX_TOKENS_LIMIT, details). Remove it from EXTRA_REQUEST_FIELDS."
            )


def read_parameter(name: str) -> str:
    """An SSM parameter's value (decrypted if a SecureString), through Powertools Parameters."""
    from aws_lambda_powertools.utilities import parameters

    return str(parameters.get_parameter(name, decrypt=True))


class Config(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    endpoint_name: str
    dialect: str = "openai"  # UPSTREAM_FORMAT: a name in sagestream.dialects.DIALECTS
    model_id: str = ""
    inference_component: str | None = None
    target_variant: str | None = None
    max_tokens_limit: int | None = None
    max_request_bytes: int = 1024 * 1024
    max_prompt_chars: int | None = None
    extra_request_fields: frozenset[str] = frozenset()
    prompt_template: str | None = None
    sse_pad_bytes: int = 0
    sse_keepalive_s: float = 10.0
    deadline_margin_ms: int = 3000
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    max_attempts: int = 3
    serve_ui: bool = False
    auth_mode: str = "iam"
    api_keys_parameter: str | None = None
    api_keys: tuple[str, ...] = ()
    api_key_source: str = "function"  # "gateway": an API Gateway REST front checked the key (sagestream.auth)
    api_keys_max_age_s: int = 300
    # AUTH_MODE=jwt (sagestream.identity): the issuer, the audiences (aud, or Cognito's client_id), scopes.
    jwt_issuer: str | None = None
    jwt_audience: tuple[str, ...] = ()
    jwt_required_scopes: tuple[str, ...] = ()
    jwt_jwks_max_age_s: int = 3600
    jwt_jwks_refetch_s: int = 10
    # The OIDC client the chat page signs in with (a public client: no secret; code flow with PKCE).
    jwt_page_client_id: str | None = None
    log_payloads: bool = False
    responses_store: str = "none"
    responses_table: str | None = None
    responses_ttl_days: int = 30
    responses_max_chain: int = 100
    responses_resumable_streams: bool = True
    # Per-caller quotas (sagestream.quotas): the policy (None: off), its table, and what DynamoDB's absence means.
    # A sagestream.quotas.Policy, typed loosely: that module is imported only when QUOTAS is set (init's CPU).
    quotas: Any = None
    quotas_table: str | None = None
    quotas_unavailable: str = "closed"
    tracing: bool = False
    # prompt_cache_key becomes SageMaker's PrefixAwareId (sagestream.sagemaker_ids): for prefix-aware endpoints.
    prefix_aware_routing: bool = False
    # Cold and busy endpoints (sagestream.capacity): how long a request is held; the model's other upstreams.
    cold_wait_s: float = 0.0
    fallback_cooldown_s: float = 30.0
    fallbacks: tuple[Fallback, ...] = ()
    # The circuit breaker per upstream target (sagestream.breaker): trouble in a row that opens it (0: off), and
    # its first and longest cooldown.
    breaker_failures: int = 5
    breaker_cooldown_s: float = 10.0
    breaker_max_cooldown_s: float = 120.0
    # Bedrock Guardrails on the prompt and the answer (sagestream.guardrails); None: off.
    guardrail: GuardrailPolicy | None = None
    # Every model served, the first the default; the one-model case is the single settings above.
    models: tuple[ModelTarget, ...] = ()

    def for_model(self, model_id: str) -> Config | None:
        """This configuration as the model ``model_id`` sees it (its endpoint, dialect, limits), or None.

        >>> one = Config(endpoint_name="llm", model_id="m")
        >>> one.for_model("m") is one, one.for_model("x")
        (True, None)
        """
        if not self.models:
            return self if model_id == self.model_id else None
        for target in self.models:
            if target.model_id == model_id:
                return msgspec.structs.replace(
                    self,
                    model_id=target.model_id,
                    endpoint_name=target.endpoint_name,
                    dialect=target.dialect,
                    inference_component=target.inference_component,
                    target_variant=target.target_variant,
                    max_tokens_limit=target.max_tokens_limit,
                    prompt_template=target.prompt_template,
                    prefix_aware_routing=target.prefix_aware_routing,
                    cold_wait_s=target.cold_wait_s,
                    fallbacks=target.fallbacks,
                    guardrail=target.guardrail,
                )
        return None

    @property
    def upstreams(self) -> tuple[Config, ...]:
        """Where this model's requests may go, in order: its own upstream, then each of its ``fallbacks``.

        >>> cfg = Config(endpoint_name="a", inference_component="big", fallbacks=(Fallback("b"),))
        >>> [(u.endpoint_name, u.inference_component) for u in cfg.upstreams]
        [('a', 'big'), ('b', None)]
        """
        others = (
            msgspec.structs.replace(
                self,
                endpoint_name=f.endpoint,
                inference_component=f.inference_component,
                target_variant=f.target_variant,
                fallbacks=(),
            )
            for f in self.fallbacks
        )
        return (self, *others)

    @property
    def model_ids(self) -> tuple[str, ...]:
        return tuple(t.model_id for t in self.models) if self.models else (self.model_id,)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, fetch_parameter: Callable[[str], str] = read_parameter
    ) -> Config:
        """The configuration in ``environ`` (default ``os.environ``); ``MODELS_PARAMETER`` and
        ``JWT_CLIENT_ID_PARAMETER`` are read with ``fetch_parameter`` (SSM, through Powertools, by default)."""
        env = os.environ if environ is None else environ
        # Each setting alone, as declared; then the rules between them.
        values = {s.env: s.parse(env.get(s.env)) for s in SETTINGS if s.read_by == READ_BY_CONFIG}
        fields: dict[str, Any] = {s.field: values[s.env] for s in SETTINGS if s.field is not None}
        models_text = models_json(values, fetch_parameter)
        if values["SAGEMAKER_ENDPOINT_NAME"] is None and models_text is None:
            raise ConfigError(
                "SAGEMAKER_ENDPOINT_NAME is required: the SageMaker endpoint this function streams from "
                "(or MODELS / MODELS_PARAMETER, for several models)"
            )
        check_extra_request_fields(values["EXTRA_REQUEST_FIELDS"])
        check_api_key_mode(values)
        check_responses_store(values)
        fields["quotas"] = quota_policy(values)
        fields["jwt_audience"], fields["jwt_page_client_id"] = jwt_clients(values, fetch_parameter)
        check_jwt_mode(values, fields["jwt_audience"])
        fields["tracing"] = not values["POWERTOOLS_TRACE_DISABLED"]
        fields["guardrail"] = guardrail_policy(values)
        if models_text is not None:
            fields["models"] = several_models(models_text, values)
            first = fields["models"][0]
            fields["endpoint_name"], fields["model_id"] = first.endpoint_name, first.model_id
        fields["model_id"] = fields["model_id"] or fields["endpoint_name"]
        _check_extra_fields(
            values["EXTRA_REQUEST_FIELDS"],
            fields.get("models")
            or (ModelTarget(fields["model_id"], fields["endpoint_name"], values["UPSTREAM_FORMAT"]),),
        )
        config = cls(**fields)
        # With MODELS the top-level fields are the first model's: the default model of pages and telemetry.
        return config.for_model(config.model_id) or config


# --- the rules between settings (each setting alone is checked by its declaration in sagestream.settings) ---


def models_json(values: Mapping[str, Any], fetch_parameter: Callable[[str], str]) -> str | None:
    """``MODELS``' JSON, from the variable or from the SSM parameter ``MODELS_PARAMETER`` names (not both)."""
    models_text, models_parameter = values["MODELS"], values["MODELS_PARAMETER"]
    if models_text is not None and models_parameter is not None:
        raise ConfigError("MODELS and MODELS_PARAMETER are exclusive: set the models in one place")
    if models_parameter is not None:
        try:
            return fetch_parameter(models_parameter)
        except Exception as e:
            raise ConfigError(f"MODELS_PARAMETER={models_parameter!r} could not be read: {e}") from None
    return models_text  # type: ignore[no-any-return]


def several_models(models_text: str, values: Mapping[str, Any]) -> tuple[ModelTarget, ...]:
    """``MODELS``' targets, the global settings filling their unset keys; the single-model settings refused,
    and ``SAGEMAKER_ENDPOINT_NAME``, if set, one of their endpoints."""
    for single in ("MODEL_ID", "INFERENCE_COMPONENT_NAME"):
        if values[single] is not None:
            raise ConfigError(f"{single} is for one model; with MODELS, set it per model there")
    defaults = ModelTarget(
        "",
        "",
        values["UPSTREAM_FORMAT"],
        target_variant=values["TARGET_VARIANT"],
        prompt_template=values["PROMPT_TEMPLATE"],
        max_tokens_limit=values["MAX_TOKENS_LIMIT"],
        prefix_aware_routing=values["PREFIX_AWARE_ROUTING"],
        cold_wait_s=values["COLD_WAIT_S"],
    )
    models = parse_models(models_text, defaults=defaults, values=values)
    endpoint = values["SAGEMAKER_ENDPOINT_NAME"]
    if endpoint is not None and endpoint not in {m.endpoint_name for m in models}:
        raise ConfigError(
            f"SAGEMAKER_ENDPOINT_NAME={endpoint!r} is not the endpoint of any model in MODELS; "
            "unset it, or name one of theirs"
        )
    return models


def check_extra_request_fields(extra_fields: frozenset[str]) -> None:
    """``EXTRA_REQUEST_FIELDS`` lists vendor extras only: OpenAI's own fields are validated and placed per
    dialect already (the request models load only when the setting is set: init does not need them)."""
    shadowed = sorted(extra_fields & openai_fields()) if extra_fields else []
    if shadowed:
        raise ConfigError(
            f"EXTRA_REQUEST_FIELDS names OpenAI's own request fields ({', '.join(shadowed)}): "
            "those are validated and placed per dialect already; list only vendor extras such as top_k"
        )


def check_api_key_mode(values: Mapping[str, Any]) -> None:
    """``AUTH_MODE=api_key`` needs somewhere to read keys from, unless API Gateway checks them."""
    if values["AUTH_MODE"] != "api_key" or values["API_KEY_SOURCE"] == "gateway":
        return  # behind a REST front API Gateway holds the keys
    if values["API_KEYS_PARAMETER"] is None and not values["API_KEYS"]:
        raise ConfigError(
            "AUTH_MODE=api_key needs API_KEYS_PARAMETER (an SSM SecureString or a Secrets Manager secret "
            "holding the keys), or API_KEYS for a local run"
        )


def check_responses_store(values: Mapping[str, Any]) -> None:
    """``RESPONSES_STORE=dynamodb`` needs its table."""
    if values["RESPONSES_STORE"] == "dynamodb" and not values["RESPONSES_TABLE"]:
        raise ConfigError("RESPONSES_STORE=dynamodb needs RESPONSES_TABLE, the table stored responses are kept in")


def quota_policy(values: Mapping[str, Any]) -> Any:
    """``QUOTAS`` read (a :class:`sagestream.quotas.Policy`), and its table named; None when unset."""
    text = values["QUOTAS"]
    if text is None:
        return None
    from sagestream.quotas import parse_policy

    try:
        policy = parse_policy(text)
    except ValueError as exc:
        raise ConfigError(f"QUOTAS: {exc}") from None
    if not values["QUOTAS_TABLE"]:
        raise ConfigError("QUOTAS needs QUOTAS_TABLE, the DynamoDB table the counts are kept in")
    return policy


def jwt_clients(values: Mapping[str, Any], fetch_parameter: Callable[[str], str]) -> tuple[tuple[str, ...], str | None]:
    """The accepted audiences and the chat page's client: ``JWT_AUDIENCE`` and ``JWT_PAGE_CLIENT_ID``, and in
    ``jwt`` mode the app client id ``JWT_CLIENT_ID_PARAMETER`` holds, added to the first and the second's default.
    """
    audience: tuple[str, ...] = values["JWT_AUDIENCE"]
    page_client: str | None = values["JWT_PAGE_CLIENT_ID"]
    client_parameter = values["JWT_CLIENT_ID_PARAMETER"]
    if values["AUTH_MODE"] == "jwt" and client_parameter is not None:
        # The app client the template made for the page: its id is known only once the client exists,
        # after the function (its callback is the Function URL), so it reaches the function through SSM.
        try:
            client_id = fetch_parameter(client_parameter).strip()
        except Exception as e:
            raise ConfigError(f"JWT_CLIENT_ID_PARAMETER={client_parameter!r} could not be read: {e}") from None
        audience = (*audience, client_id) if client_id not in audience else audience
        page_client = page_client or client_id
    return audience, page_client


def check_jwt_mode(values: Mapping[str, Any], audience: tuple[str, ...]) -> None:
    """``AUTH_MODE=jwt`` needs an issuer, reached over https (http only on loopback), and an audience."""
    if values["AUTH_MODE"] != "jwt":
        return
    issuer = values["JWT_ISSUER"]
    if issuer is None or not audience:
        raise ConfigError(
            "AUTH_MODE=jwt needs JWT_ISSUER (the OpenID Connect issuer URL) and JWT_AUDIENCE (the audience "
            "or app client id its tokens name)"
        )
    parts = urlsplit(issuer)
    loopback = parts.hostname in ("127.0.0.1", "::1", "localhost")
    if not (parts.scheme == "https" and parts.hostname) and not (parts.scheme == "http" and loopback):
        raise ConfigError(f"JWT_ISSUER={issuer!r} must be an https URL (http only for a loopback issuer)")
