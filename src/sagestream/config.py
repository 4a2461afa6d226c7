"""The function's configuration, read once from the environment at init.

Environment variables read (the README's table lists each with its default):

``SAGEMAKER_ENDPOINT_NAME`` (required), ``UPSTREAM_FORMAT`` (``openai`` | ``tgi`` | ``lmi``), ``MODEL_ID``,
``INFERENCE_COMPONENT_NAME``, ``TARGET_VARIANT``, ``MAX_TOKENS_LIMIT``, ``MAX_REQUEST_BYTES``, ``MAX_PROMPT_CHARS``,
``EXTRA_REQUEST_FIELDS`` (comma-separated vendor fields passed to the container, e.g. ``top_k,min_p``),
``PROMPT_TEMPLATE``, ``SSE_PAD_BYTES``, ``DEADLINE_MARGIN_MS``, ``UPSTREAM_CONNECT_TIMEOUT_S``,
``UPSTREAM_READ_TIMEOUT_S``, ``UPSTREAM_MAX_ATTEMPTS``, ``SERVE_UI``; for access control and telemetry
``AUTH_MODE`` (``iam`` | ``api_key`` | ``none``), ``API_KEYS_PARAMETER``, ``API_KEYS`` (local runs),
``API_KEYS_MAX_AGE_S``, ``LOG_PAYLOADS``, ``POWERTOOLS_TRACE_DISABLED`` (tracing is on only when it is
set to ``false``: off unless enabled, unlike Powertools' own default).

boto3's own ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`` is deliberately not read here: the SDK applies it.

Example::

    >>> cfg = Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "my-llm", "UPSTREAM_FORMAT": "tgi"})
    >>> cfg.model_id, cfg.dialect
    ('my-llm', 'tgi')
    >>> Config.from_env({"SAGEMAKER_ENDPOINT_NAME": "my-llm", "SSE_PAD_BYTES": "3"})
    Traceback (most recent call last):
    ...
    sagestream.config.ConfigError: SSE_PAD_BYTES=3 must be 0 or at least 4 (an SSE comment: ...)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from sagestream import prompts
from sagestream.dialects import Dialect, dialect_named
from sagestream.sse import MIN_PAD_BYTES

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
AUTH_MODES = ("iam", "api_key", "none")


def openai_fields() -> frozenset[str]:
    """The request fields the OpenAI models validate. The models (and pydantic) load only when asked:
    init does not need them unless EXTRA_REQUEST_FIELDS is set."""
    from sagestream.schema import ChatCompletionRequest, CompletionRequest

    return frozenset(ChatCompletionRequest.model_fields) | frozenset(CompletionRequest.model_fields)


class ConfigError(ValueError):
    """A setting that is missing or not valid; the function refuses to start with it."""


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
    log_payloads: bool = False
    tracing: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
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
        if endpoint is None:
            raise ConfigError("SAGEMAKER_ENDPOINT_NAME is required: the SageMaker endpoint this function streams from")
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
        return cls(
            endpoint_name=endpoint,
            dialect=dialect,
            model_id=text("MODEL_ID") or endpoint,
            inference_component=text("INFERENCE_COMPONENT_NAME"),
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
            log_payloads=flag("LOG_PAYLOADS", False),
            tracing=not flag("POWERTOOLS_TRACE_DISABLED", True),
        )
