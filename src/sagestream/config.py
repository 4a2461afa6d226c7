"""The function's configuration, read once from the environment at init.

Environment variables read (the README's table lists each with its default):

``SAGEMAKER_ENDPOINT_NAME`` (required without ``MODELS``), ``MODELS`` or ``MODELS_PARAMETER`` (several models,
see :func:`parse_models`), ``UPSTREAM_FORMAT`` (``openai`` | ``tgi`` | ``lmi``), ``MODEL_ID``,
``INFERENCE_COMPONENT_NAME``, ``TARGET_VARIANT``, ``MAX_TOKENS_LIMIT``, ``MAX_REQUEST_BYTES``, ``MAX_PROMPT_CHARS``,
``EXTRA_REQUEST_FIELDS`` (comma-separated vendor fields passed to the container, e.g. ``top_k,min_p``),
``PROMPT_TEMPLATE``, ``SSE_PAD_BYTES``, ``DEADLINE_MARGIN_MS``, ``UPSTREAM_CONNECT_TIMEOUT_S``,
``UPSTREAM_READ_TIMEOUT_S``, ``UPSTREAM_MAX_ATTEMPTS``, ``SERVE_UI``, ``PREFIX_AWARE_ROUTING``; for access control
and telemetry ``AUTH_MODE`` (``iam`` | ``api_key`` | ``jwt`` | ``none``), ``API_KEYS_PARAMETER``, ``API_KEYS``
(local runs), ``API_KEYS_MAX_AGE_S``, ``JWT_ISSUER``, ``JWT_AUDIENCE``, ``JWT_REQUIRED_SCOPES``, ``JWT_JWKS_MAX_AGE_S``,
``JWT_JWKS_REFETCH_S``, ``JWT_PAGE_CLIENT_ID``, ``JWT_CLIENT_ID_PARAMETER``, ``LOG_PAYLOADS``,
``POWERTOOLS_TRACE_DISABLED`` (tracing is on only when it is set to ``false``: off unless enabled, unlike
Powertools' own default).

boto3's own ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`` is deliberately not read here: the SDK applies it.

Example::

    >>> cfg = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "my-llm", "UPSTREAM_FORMAT": "tgi"})
    >>> cfg.model_id, cfg.dialect
    ('my-llm', 'tgi')
    >>> Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "my-llm", "SSE_PAD_BYTES": "3"})
    Traceback (most recent call last):
    ...
    sagestream.config.ConfigError: SSE_PAD_BYTES=3 must be 0 or at least 4 (an SSE comment: ...)

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
    sagestream.config.ConfigError: MODELS: model 'llama': key 'endpont' is not a setting (known: endpoint, ...
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from sagestream import prompts
from sagestream.dialects import COMPUTED_FIELDS, Dialect, dialect_named
from sagestream.sse import MIN_PAD_BYTES

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
AUTH_MODES = ("iam", "api_key", "jwt", "none")


def openai_fields() -> frozenset[str]:
    """The request fields the OpenAI models validate. The models (and pydantic) load only when asked:
    init does not need them unless EXTRA_REQUEST_FIELDS is set."""
    from sagestream.schema import ChatCompletionRequest, CompletionRequest

    return frozenset(ChatCompletionRequest.model_fields) | frozenset(CompletionRequest.model_fields)


class ConfigError(ValueError):
    """A setting that is missing or not valid; the function refuses to start with it."""


# The keys of one model in MODELS (the fields of the pydantic model below).
MODEL_KEYS = (
    "endpoint",
    "inference_component",
    "upstream_format",
    "prompt_template",
    "max_tokens_limit",
    "target_variant",
    "prefix_aware_routing",
)


@functools.cache
def _models_schema() -> Any:
    """``MODELS``' schema, a pydantic ``TypeAdapter``; pydantic loads only when ``MODELS`` is set, so that
    init without it stays as light as before (tests/unit/test_upstream_client.py checks what init loads)."""
    from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

    class ModelEntry(BaseModel):
        """One model of ``MODELS``: where its requests go. Only ``endpoint`` is required.

        ``upstream_format``, ``prompt_template``, ``max_tokens_limit``, ``target_variant`` and
        ``prefix_aware_routing`` default to the global settings (``prefix_aware_routing``: an endpoint's
        routing strategy is its own, so one model may turn it on or off against ``PREFIX_AWARE_ROUTING``).
        ``inference_component`` does not: a component's name belongs to one endpoint, so a global one would
        be wrong for every other endpoint.
        """

        model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

        endpoint: str = Field(min_length=1)
        inference_component: str | None = Field(default=None, min_length=1)
        upstream_format: Literal["openai", "tgi", "lmi"] | None = None
        prompt_template: str | None = Field(default=None, min_length=1)
        max_tokens_limit: int | None = Field(default=None, ge=1)
        target_variant: str | None = Field(default=None, min_length=1)
        prefix_aware_routing: bool | None = None

    assert tuple(ModelEntry.model_fields) == MODEL_KEYS
    return TypeAdapter(dict[str, ModelEntry])


@dataclass(frozen=True, slots=True)
class ModelTarget:
    """One model id clients send and the upstream it is served by (the global settings filled in)."""

    model_id: str
    endpoint_name: str
    dialect: Dialect
    inference_component: str | None = None
    target_variant: str | None = None
    max_tokens_limit: int | None = None
    prompt_template: str | None = None
    prefix_aware_routing: bool = False


def parse_models(text: str, *, defaults: ModelTarget) -> tuple[ModelTarget, ...]:
    """``MODELS``' JSON as targets, in its order; :class:`ConfigError` naming the model and key at fault.

    ``defaults`` carries the global settings (its ``model_id`` and ``endpoint_name`` are not used).

    >>> glob = ModelTarget("", "", "openai", max_tokens_limit=512)
    >>> parse_models('{"a": {"endpoint": "e", "max_tokens_limit": 0}}', defaults=glob)
    Traceback (most recent call last):
    ...
    sagestream.config.ConfigError: MODELS: model 'a': key 'max_tokens_limit': Input should be greater than or equal to 1
    >>> parse_models('{"a": {"endpoint": "e"}}', defaults=glob)[0].max_tokens_limit
    512
    """
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"MODELS is not JSON: {e}") from None
    if not isinstance(raw, dict) or not raw:
        raise ConfigError('MODELS must be a non-empty JSON object: {"<model id>": {"endpoint": "..."}, ...}')
    from pydantic import ValidationError

    try:
        entries = _models_schema().validate_python(raw)
    except ValidationError as e:
        # A misspelt key also leaves its real one missing: name the misspelling, it is the cause.
        first = sorted(e.errors(), key=lambda err: err["type"] != "extra_forbidden")[0]
        where = first["loc"]
        model = where[0] if where else "?"
        if len(where) < 2:
            raise ConfigError(f'MODELS: model {model!r}: must be an object with at least "endpoint"') from None
        key = where[1]
        if first["type"] == "extra_forbidden":
            known = ", ".join(MODEL_KEYS)
            raise ConfigError(f"MODELS: model {model!r}: key {key!r} is not a setting (known: {known})") from None
        raise ConfigError(f"MODELS: model {model!r}: key {key!r}: {first['msg']}") from None
    targets = []
    for model_id, entry in entries.items():
        if not model_id.strip() or model_id != model_id.strip():
            raise ConfigError(f"MODELS: model id {model_id!r} must be non-empty, without surrounding spaces")
        if entry.prompt_template is not None:
            try:
                prompts.template(entry.prompt_template)
            except (KeyError, ValueError) as e:
                raise ConfigError(f"MODELS: model {model_id!r}: key 'prompt_template': {e}") from None
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
            )
        )
    return tuple(targets)


def _check_extra_fields(extra_fields: frozenset[str], targets: tuple[ModelTarget, ...]) -> None:
    """Refuse an ``EXTRA_REQUEST_FIELDS`` name the function sets or limits in some served model's upstream body.

    >>> _check_extra_fields(frozenset({"top_k", "max_new_tokens"}), (ModelTarget("m", "e", "tgi"),))
    Traceback (most recent call last):
    ...
    sagestream.config.ConfigError: EXTRA_REQUEST_FIELDS names max_new_tokens, which the function sets or limits ...
    """
    for target in targets:
        clash = sorted(extra_fields & COMPUTED_FIELDS[target.dialect])
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


@dataclass(frozen=True, slots=True)
class Config:
    endpoint_name: str
    dialect: Dialect = "openai"
    model_id: str = ""
    inference_component: str | None = None
    target_variant: str | None = None
    max_tokens_limit: int | None = None
    max_request_bytes: int = 1024 * 1024
    max_prompt_chars: int | None = None
    extra_request_fields: frozenset[str] = frozenset()
    prompt_template: str | None = None
    sse_pad_bytes: int = 0
    deadline_margin_ms: int = 3000
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    max_attempts: int = 3
    serve_ui: bool = False
    auth_mode: str = "iam"
    api_keys_parameter: str | None = None
    api_keys: tuple[str, ...] = ()
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
    tracing: bool = False
    # prompt_cache_key becomes SageMaker's PrefixAwareId (sagestream.routing): for prefix-aware endpoints.
    prefix_aware_routing: bool = False
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
                return replace(
                    self,
                    model_id=target.model_id,
                    endpoint_name=target.endpoint_name,
                    dialect=target.dialect,
                    inference_component=target.inference_component,
                    target_variant=target.target_variant,
                    max_tokens_limit=target.max_tokens_limit,
                    prompt_template=target.prompt_template,
                    prefix_aware_routing=target.prefix_aware_routing,
                )
        return None

    @property
    def model_ids(self) -> tuple[str, ...]:
        return tuple(t.model_id for t in self.models) if self.models else (self.model_id,)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, fetch_parameter: Callable[[str], str] = read_parameter
    ) -> Config:
        """The configuration in ``environ`` (default ``os.environ``); ``MODELS_PARAMETER`` is read with
        ``fetch_parameter`` (SSM, through Powertools, by default)."""
        env = os.environ if environ is None else environ

        def text(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        def number(name: str, default: float | None, *, minimum: float = 0, whole: bool = True) -> float | None:
            raw = text(name)
            if raw is None:
                return default
            try:
                value = int(raw) if whole else float(raw)
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not a {'whole ' if whole else ''}number") from None
            if value < minimum:
                raise ConfigError(f"{name}={raw!r} must be at least {minimum}")
            return value

        def flag(name: str, default: bool) -> bool:
            raw = env.get(name)
            if raw is None:
                return default
            if raw.strip().lower() in _TRUE:
                return True
            if raw.strip().lower() in _FALSE:
                return False
            raise ConfigError(f"{name}={raw!r} is not true or false")

        endpoint = text("SAGEMAKER_ENDPOINT_NAME")
        models_text, models_parameter = text("MODELS"), text("MODELS_PARAMETER")
        if models_text is not None and models_parameter is not None:
            raise ConfigError("MODELS and MODELS_PARAMETER are exclusive: set the models in one place")
        if models_parameter is not None:
            try:
                models_text = fetch_parameter(models_parameter)
            except Exception as e:
                raise ConfigError(f"MODELS_PARAMETER={models_parameter!r} could not be read: {e}") from None
        if endpoint is None and models_text is None:
            raise ConfigError(
                "SAGEMAKER_ENDPOINT_NAME is required: the SageMaker endpoint this function streams from "
                "(or MODELS / MODELS_PARAMETER, for several models)"
            )
        try:
            dialect = dialect_named((text("UPSTREAM_FORMAT") or "openai").lower())
        except ValueError as e:
            raise ConfigError(f"UPSTREAM_FORMAT: {e}") from None
        template = text("PROMPT_TEMPLATE")
        if template is not None:
            try:
                prompts.template(template)
            except (KeyError, ValueError) as e:
                raise ConfigError(f"PROMPT_TEMPLATE={template!r}: {e}") from None
        limit = number("MAX_TOKENS_LIMIT", None, minimum=1)
        prompt_limit = number("MAX_PROMPT_CHARS", None, minimum=1)
        extra_fields = frozenset(f.strip() for f in env.get("EXTRA_REQUEST_FIELDS", "").split(",") if f.strip())
        shadowed = sorted(extra_fields & openai_fields()) if extra_fields else []
        if shadowed:
            raise ConfigError(
                f"EXTRA_REQUEST_FIELDS names OpenAI's own request fields ({', '.join(shadowed)}): "
                "those are validated and placed per dialect already; list only vendor extras such as top_k"
            )
        pad = int(number("SSE_PAD_BYTES", 0) or 0)
        if 0 < pad < MIN_PAD_BYTES:
            raise ConfigError(
                f"SSE_PAD_BYTES={pad} must be 0 or at least {MIN_PAD_BYTES} "
                "(an SSE comment: ':', padding, a blank line)"
            )
        auth_mode = (text("AUTH_MODE") or "iam").lower()
        if auth_mode not in AUTH_MODES:
            raise ConfigError(f"AUTH_MODE={auth_mode!r}; expected one of {', '.join(AUTH_MODES)}")
        keys_parameter = text("API_KEYS_PARAMETER")
        local_keys = tuple(k.strip() for k in env.get("API_KEYS", "").split(",") if k.strip())
        if auth_mode == "api_key" and keys_parameter is None and not local_keys:
            raise ConfigError(
                "AUTH_MODE=api_key needs API_KEYS_PARAMETER (an SSM SecureString or a Secrets Manager secret "
                "holding the keys), or API_KEYS for a local run"
            )
        prefix_aware = flag("PREFIX_AWARE_ROUTING", False)
        issuer = text("JWT_ISSUER")
        audience = tuple(a for a in (env.get("JWT_AUDIENCE") or "").replace(",", " ").split() if a)
        page_client = text("JWT_PAGE_CLIENT_ID")
        client_parameter = text("JWT_CLIENT_ID_PARAMETER")
        if auth_mode == "jwt" and client_parameter is not None:
            # The app client the template made for the page: its id is known only once the client exists,
            # after the function (its callback is the Function URL), so it reaches the function through SSM.
            try:
                client_id = fetch_parameter(client_parameter).strip()
            except Exception as e:
                raise ConfigError(f"JWT_CLIENT_ID_PARAMETER={client_parameter!r} could not be read: {e}") from None
            audience = (*audience, client_id) if client_id not in audience else audience
            page_client = page_client or client_id
        if auth_mode == "jwt":
            if issuer is None or not audience:
                raise ConfigError(
                    "AUTH_MODE=jwt needs JWT_ISSUER (the OpenID Connect issuer URL) and JWT_AUDIENCE (the audience "
                    "or app client id its tokens name)"
                )
            parts = urlsplit(issuer)
            loopback = parts.hostname in ("127.0.0.1", "::1", "localhost")
            if not (parts.scheme == "https" and parts.hostname) and not (parts.scheme == "http" and loopback):
                raise ConfigError(f"JWT_ISSUER={issuer!r} must be an https URL (http only for a loopback issuer)")
        models: tuple[ModelTarget, ...] = ()
        model_id = text("MODEL_ID")
        component = text("INFERENCE_COMPONENT_NAME")
        if models_text is not None:
            for single in ("MODEL_ID", "INFERENCE_COMPONENT_NAME"):
                if text(single) is not None:
                    raise ConfigError(f"{single} is for one model; with MODELS, set it per model there")
            defaults = ModelTarget(
                "",
                "",
                dialect,
                target_variant=text("TARGET_VARIANT"),
                prompt_template=template,
                max_tokens_limit=int(limit) if limit is not None else None,
                prefix_aware_routing=prefix_aware,
            )
            models = parse_models(models_text, defaults=defaults)
            if endpoint is not None and endpoint not in {m.endpoint_name for m in models}:
                raise ConfigError(
                    f"SAGEMAKER_ENDPOINT_NAME={endpoint!r} is not the endpoint of any model in MODELS; "
                    "unset it, or name one of theirs"
                )
            endpoint, model_id = models[0].endpoint_name, models[0].model_id
        _check_extra_fields(extra_fields, models or (ModelTarget(model_id or "", endpoint or "", dialect),))
        assert endpoint is not None
        config = cls(
            endpoint_name=endpoint,
            dialect=dialect,
            model_id=model_id or endpoint,
            inference_component=component,
            target_variant=text("TARGET_VARIANT"),
            max_tokens_limit=int(limit) if limit is not None else None,
            max_request_bytes=int(number("MAX_REQUEST_BYTES", 1024 * 1024, minimum=1) or 0),
            max_prompt_chars=int(prompt_limit) if prompt_limit is not None else None,
            extra_request_fields=extra_fields,
            prompt_template=template,
            sse_pad_bytes=pad,
            deadline_margin_ms=int(number("DEADLINE_MARGIN_MS", 3000) or 0),
            connect_timeout_s=float(number("UPSTREAM_CONNECT_TIMEOUT_S", 5.0, whole=False) or 5.0),
            read_timeout_s=float(number("UPSTREAM_READ_TIMEOUT_S", 60.0, whole=False) or 60.0),
            max_attempts=int(number("UPSTREAM_MAX_ATTEMPTS", 3, minimum=1) or 3),
            serve_ui=flag("SERVE_UI", False),
            auth_mode=auth_mode,
            api_keys_parameter=keys_parameter,
            api_keys=local_keys,
            api_keys_max_age_s=int(number("API_KEYS_MAX_AGE_S", 300) or 0),
            jwt_issuer=issuer,
            jwt_audience=audience,
            jwt_required_scopes=tuple((env.get("JWT_REQUIRED_SCOPES") or "").replace(",", " ").split()),
            jwt_jwks_max_age_s=int(number("JWT_JWKS_MAX_AGE_S", 3600, minimum=1) or 3600),
            jwt_jwks_refetch_s=int(number("JWT_JWKS_REFETCH_S", 10) or 0),
            jwt_page_client_id=page_client,
            log_payloads=flag("LOG_PAYLOADS", False),
            tracing=not flag("POWERTOOLS_TRACE_DISABLED", True),
            prefix_aware_routing=prefix_aware,
            models=models,
        )
        # With MODELS the top-level fields are the first model's: the default model of pages and telemetry.
        return config.for_model(config.model_id) or config
